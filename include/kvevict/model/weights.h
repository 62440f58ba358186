// The weights of a model. Matrices stay in their GGUF block types, viewed in the file's memory
// mapping (no copy: SmolLM2's Q4_1 file is 94 MiB in memory, not 538 MB of f32), and every
// projection runs on the quantized kernels of src/quant. WeightFormat::kF32 keeps the former
// runtime: every matrix dequantized to f32 at load and multiplied with OpenBLAS sgemm (the path
// the f32 golden logits were recorded against; random weights use it too).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kvevict/io/gguf.h"
#include "kvevict/model/config.h"
#include "kvevict/tensor.h"

namespace kvevict {

enum class WeightFormat : uint8_t {
  kNative,  // as stored in the GGUF file (mapped); quantized kernels
  kF32,     // dequantized to f32 at load; OpenBLAS sgemm
};
const char* weight_format_name(WeightFormat f);
// "native" (or "gguf", "quantized") / "f32"; throws naming the bad value.
WeightFormat weight_format_parse(const std::string& s);

// A weight matrix [rows, cols] (x[cols] -> y[rows] = W x) in its storage type: blocks viewed in a
// GGUF mapping (the Model keeps the file open), or f32 it owns.
class WeightMatrix {
 public:
  WeightMatrix() = default;
  // A view of a 2-D tensor of the mapping (any supported type); the file must outlive it.
  static WeightMatrix view_of(const gguf::TensorInfo& t);
  // Owns f32 data [rows, cols].
  explicit WeightMatrix(HostTensor f32);

  gguf::GgmlType type() const { return type_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  std::vector<int64_t> shape() const { return {rows_, cols_}; }
  int64_t row_bytes() const;
  int64_t nbytes() const { return rows_ * row_bytes(); }
  bool empty() const { return rows_ == 0; }
  // [rows * row_bytes()]: row r starts at data() + r * row_bytes().
  const uint8_t* data() const;
  // Row r as f32 (dequantized); dst holds cols() floats.
  void row_f32(int64_t r, float* dst) const;
  // A dequantized f32 copy [rows, cols].
  HostTensor to_f32() const;
  // An f32 view: the owned data, or a dequantized copy made on first use and kept with the
  // matrix (thread-safe). For consumers that need f32 rows, e.g. criticalkv's W_o.
  TensorView view() const;
  // The owned f32 storage, or nullptr for a mapped view (tests adjust random weights through it).
  HostTensor* f32() { return owned_.nbytes() ? &owned_ : nullptr; }
  const HostTensor* f32() const { return owned_.nbytes() ? &owned_ : nullptr; }

 private:
  struct Lazy;
  gguf::GgmlType type_ = gguf::GgmlType::kF32;
  int64_t rows_ = 0, cols_ = 0;
  const uint8_t* mapped_ = nullptr;
  HostTensor owned_;
  std::shared_ptr<Lazy> lazy_;  // the f32 copy view() made
};

// Norms and biases are small f32 vectors; matrices are WeightMatrix.
struct LayerWeights {
  HostTensor attn_norm;       // [D]
  WeightMatrix wq;            // [Hq * d, D]
  WeightMatrix wk;            // [Hkv * d, D]
  WeightMatrix wv;            // [Hkv * dv, D]
  WeightMatrix wo;            // [D, Hq * dv]
  HostTensor bq, bk, bv;      // [Hq * d], [Hkv * d], [Hkv * dv]; qwen2 only, else empty
  HostTensor q_norm, k_norm;  // [d]; gemma3 only
  HostTensor post_attn_norm;  // [D]; gemma3 only
  HostTensor ffn_norm;        // [D]
  WeightMatrix w_gate;        // [F, D]
  WeightMatrix w_up;          // [F, D]
  WeightMatrix w_down;        // [D, F]
  HostTensor post_ffn_norm;   // [D]; gemma3 only
};

struct ModelWeights {
  WeightMatrix token_embd;  // [V, D]
  HostTensor output_norm;   // [D]
  WeightMatrix output;      // [V, D]; empty when tied to token_embd
  HostTensor rope_freqs;    // [d / 2] llama 3.1 frequency divisors; empty if absent
  std::vector<LayerWeights> layers;
  WeightFormat format = WeightFormat::kF32;

  const WeightMatrix& output_matrix() const { return output.empty() ? token_embd : output; }
  // Bytes of the weights in their storage types (mapped bytes included).
  int64_t bytes() const;

  // Reads every tensor the config needs; throws naming a missing tensor, a shape that disagrees
  // with the metadata, or an unsupported tensor type. kNative views the mapping (`file` must
  // outlive the weights); kF32 dequantizes.
  static ModelWeights from_gguf(const gguf::File& file, const ModelConfig& config,
                                WeightFormat format = WeightFormat::kNative);
  // Seeded random weights of the config's shape (speed runs): N(0, 0.02) matrices, norms = 1.
  static ModelWeights random(const ModelConfig& config, uint64_t seed);
};

}  // namespace kvevict
