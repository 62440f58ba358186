// Validation of an AttentionProblem, shared by every attention path.
#include <cmath>

#include "kvevict/attention.h"
#include "kvevict/error.h"

namespace kvevict {

float AttentionProblem::logit_scale() const {
  return scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(cache.head_dim));
}

void AttentionProblem::validate() const {
  cache.validate("attention cache");
  check_shape(q, "q", {-1, -1, cache.head_dim});
  check_indexable(q, "q");  // before num_q_heads() narrows Hq
  KVEVICT_CHECK(q.dtype == DType::kF32 || q.dtype == DType::kF16 || q.dtype == DType::kBF16,
                "q dtype ", dtype_name(q.dtype), " is not supported; expected f32, f16 or bf16");
  KVEVICT_CHECK(q.device == cache.device, "q and the cache live on different devices");
  const int64_t hq = q.shape[0];
  KVEVICT_CHECK(hq > 0 && hq % cache.num_kv_heads == 0, "q has ", hq,
                " heads; expected a positive multiple of the ", cache.num_kv_heads, " KV heads");
  KVEVICT_CHECK(q.shape[1] == 0 || q_pos != nullptr, "q_pos is null for ", q.shape[1],
                " queries; expected [m] positions");
  KVEVICT_CHECK(std::isfinite(scale) && scale >= 0, "scale ", scale,
                " is invalid; expected a finite value >= 0 (0 = 1/sqrt(d))");
  KVEVICT_CHECK(sliding_window >= 0, "sliding window ", sliding_window,
                " is negative; expected >= 0 (0 = off)");
  KVEVICT_CHECK(std::isfinite(softcap) && softcap >= 0, "softcap ", softcap,
                " is invalid; expected a finite value >= 0 (0 = off)");
}

void AttentionOutput::validate_host(const AttentionProblem& pb) const {
  const int64_t hq = pb.num_q_heads(), m = pb.num_queries(), d = pb.cache.head_dim;
  check_shape(out, "attention out", {hq, m, d});
  KVEVICT_CHECK(out.dtype == DType::kF32, "attention out dtype ", dtype_name(out.dtype),
                " is not supported; expected f32");
  if (!lse.empty()) {
    check_shape(lse, "attention lse", {hq, m});
    KVEVICT_CHECK(lse.dtype == DType::kF32, "attention lse dtype ", dtype_name(lse.dtype),
                  " is not supported; expected f32");
  }
}

}  // namespace kvevict
