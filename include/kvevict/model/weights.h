// The weights of a model, dequantized to f32 at load so every projection is one sgemm (OpenBLAS).
// The Q4 files of the embedded models grow ~7x in memory (SmolLM2 135M: ~0.55 GB, Gemma 3 270M:
// ~1.1 GB), which this machine affords; quantized matmuls are a possible later step.
#pragma once

#include <cstdint>
#include <vector>

#include "kvevict/model/config.h"
#include "kvevict/tensor.h"

namespace kvevict {

namespace gguf {
class File;
}

// All tensors are f32, row-major; a matrix [out, in] maps x[in] to y[out] = W x.
struct LayerWeights {
  HostTensor attn_norm;       // [D]
  HostTensor wq;              // [Hq * d, D]
  HostTensor wk;              // [Hkv * d, D]
  HostTensor wv;              // [Hkv * dv, D]
  HostTensor wo;              // [D, Hq * dv]
  HostTensor bq, bk, bv;      // [Hq * d], [Hkv * d], [Hkv * dv]; qwen2 only, else empty
  HostTensor q_norm, k_norm;  // [d]; gemma3 only
  HostTensor post_attn_norm;  // [D]; gemma3 only
  HostTensor ffn_norm;        // [D]
  HostTensor w_gate;          // [F, D]
  HostTensor w_up;            // [F, D]
  HostTensor w_down;          // [D, F]
  HostTensor post_ffn_norm;   // [D]; gemma3 only
};

struct ModelWeights {
  HostTensor token_embd;   // [V, D]
  HostTensor output_norm;  // [D]
  HostTensor output;       // [V, D]; empty when tied to token_embd
  HostTensor rope_freqs;   // [d / 2] llama 3.1 frequency divisors; empty if absent
  std::vector<LayerWeights> layers;

  const HostTensor& output_matrix() const { return output.nbytes() ? output : token_embd; }
  int64_t bytes() const;  // f32 bytes held

  // Dequantizes every tensor the config needs; throws naming a missing tensor, a shape that
  // disagrees with the metadata, or an unsupported tensor type.
  static ModelWeights from_gguf(const gguf::File& file, const ModelConfig& config);
  // Seeded random weights of the config's shape (speed runs): N(0, 0.02) matrices, norms = 1.
  static ModelWeights random(const ModelConfig& config, uint64_t seed);
};

}  // namespace kvevict
