// The generation loop both sessions run (model/session.cpp, model_cuda/gpu_decode.cpp): draw a
// token from the current logits, report it, stop on a stop token or after max_new, and feed every
// token but the last (nothing would read its logits).
#pragma once

#include <cstdint>
#include <functional>

#include "kvevict/model/runtime.h"

namespace kvevict {

// next(): the next token from the session's current logits; feed(token): one decode step.
template <class Next, class Feed>
GenerateResult generate_tokens(int max_new, Next&& next, Feed&& feed,
                               const std::function<bool(int32_t)>& is_stop,
                               const std::function<void(int32_t)>& on_token) {
  GenerateResult r;
  for (int i = 0; i < max_new; ++i) {
    const int32_t tok = next();
    r.tokens.push_back(tok);
    if (on_token) on_token(tok);
    if (is_stop && is_stop(tok)) {
      r.stopped = true;
      break;
    }
    if (i + 1 < max_new) feed(tok);
  }
  return r;
}

}  // namespace kvevict
