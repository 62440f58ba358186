// The per-step score of decode-time eviction (SPEC section 5): what DecodeEvictor adds to a row's
// accumulator each step. Its own header so device code (src/cuda/decode_*.cu) can name it without
// the host cache types of decode_evict.h.
#pragma once

#include <cstdint>
#include <string>

namespace kvevict {

enum class DecodeScore : uint8_t {
  kAttentionSum,  // h2o: add p
  kTOVA,          // tova: replace by p (averaged over the G heads of the group, not the whole
                  // layer as in prefill: decode heads evict independently)
  kDropKV,        // add (p/(1-p))^2 ||a - v||^2
  kObcacheV,      // add p^2 ||v||^2
  kObcacheK,      // add (p z)^2 ||v - a||^2
  kObcacheVK,     // add obcache_v + obcache_k + 2 p^2 z (||v||^2 - <v, a>)
};
DecodeScore decode_score_parse(const std::string& s);  // "h2o", "tova", "dropkv", "obcache_vk"...
const char* decode_score_name(DecodeScore s);

}  // namespace kvevict
