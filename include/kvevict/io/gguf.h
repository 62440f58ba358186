// GGUF v3 reader: memory-mapped, validated. Every offset, count and size read from the file is
// checked against the file size before use; a corrupt or truncated file throws kvevict::Error
// naming the file, the field and the bad value.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "kvevict/tensor.h"

namespace kvevict::gguf {

// ggml tensor types that kvevict reads (codes as in the GGUF spec).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};
const char* ggml_type_name(uint32_t type);
bool ggml_type_supported(uint32_t type);
// Elements per block and bytes per block of a supported type.
int64_t ggml_block_elems(GgmlType t);
int64_t ggml_block_bytes(GgmlType t);
// Bytes of `n` elements of type `t` (n a multiple of the block size; throws otherwise).
int64_t ggml_row_bytes(GgmlType t, int64_t n);

// Metadata value type codes (gguf_type in the GGUF spec), scoped in a struct so that writers
// (the tests' GgufWriter) can inherit the names.
struct ValueType {
  enum : uint32_t {
    kU8 = 0,
    kI8 = 1,
    kU16 = 2,
    kI16 = 3,
    kU32 = 4,
    kI32 = 5,
    kF32 = 6,
    kBool = 7,
    kString = 8,
    kArray = 9,
    kU64 = 10,
    kI64 = 11,
    kF64 = 12,
  };
};

// A metadata value: scalars, strings, or arrays of them.
struct Value;
using Array = std::vector<Value>;
struct Value {
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<Array>> v;
  // Accessors throw naming the key and the actual type when the type does not match.
  int64_t as_int(const std::string& key) const;
  double as_float(const std::string& key) const;
  bool as_bool(const std::string& key) const;
  const std::string& as_string(const std::string& key) const;
  const Array& as_array(const std::string& key) const;
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;  // GGUF order reversed to row-major: shape.back() is the row length
  GgmlType type;
  uint64_t offset;  // from the start of the data section
  uint64_t nbytes;
  const uint8_t* data;  // [nbytes] into the mapping; rows of ggml_row_bytes(type, shape.back())
  int64_t numel() const;
  int64_t rows() const { return shape.empty() ? 1 : numel() / shape.back(); }
};

class File {
 public:
  // Opens and validates; throws kvevict::Error on any problem.
  static std::unique_ptr<File> open(const std::string& path);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  bool has(const std::string& key) const { return meta_.count(key) != 0; }
  const Value& get(const std::string& key) const;  // throws "missing metadata key ..."
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_float(const std::string& key, double fallback) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  const std::map<std::string, Value>& metadata() const { return meta_; }

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(const std::string& name) const;    // nullptr if absent
  const TensorInfo& tensor(const std::string& name) const;  // throws naming the missing tensor
  // Throws naming the tensor, row and column of the first NaN or infinity in any tensor's
  // values (dequantized a row at a time, tensors in parallel). open() checks only the structure,
  // which keeps it fast for metadata readers; a model loader calls this too, since a NaN weight
  // would otherwise run as garbage (issue 13).
  void check_finite_values() const;
  uint64_t alignment() const { return alignment_; }      // general.alignment, default 32
  uint64_t data_offset() const { return data_offset_; }  // file offset of the data section

 private:
  File() = default;
  std::string path_;
  uint32_t version_ = 0;
  std::map<std::string, Value> meta_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
};

// Dequantizes `count` elements (a multiple of the block size) of `type` from `src` into `dst`.
void dequantize(GgmlType type, const uint8_t* src, float* dst, int64_t count);
// Dequantizes one row on the fly, for quantized matmuls: `src` points at the row's first block
// (row r of a tensor starts at info.data + r * ggml_row_bytes(type, n)), `n` is the row length
// (info.shape.back(), a multiple of ggml_block_elems(type)); writes n floats to dst. Needs no
// workspace and touches only [src, src + ggml_row_bytes(type, n)).
void dequantize_row(GgmlType type, const uint8_t* src, float* dst, int64_t n);
// The whole tensor as float32, row-major with shape info.shape.
HostTensor dequantize(const TensorInfo& info);
// Whether every value `count` elements (a multiple of the block size) of `type` at `src` would
// dequantize to is finite, without dequantizing them: a quantized block's values are its f16
// scales times small integers (at most 65504 * 63 * 32 in magnitude), so they are all finite
// exactly when the scales are; F16 / BF16 / F32 elements are checked by their exponent bits.
bool values_finite(GgmlType type, const uint8_t* src, int64_t count);

}  // namespace kvevict::gguf
