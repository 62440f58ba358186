// NumPy .npy files (format versions 1.0, 2.0 and 3.0), little-endian, C order.
// dtypes: <f4 <f2 <f8 <i4 <i8 |u1, and <u2 holding bfloat16 bits (NumPy has no bf16: kvevict
// writes bf16 tensors as <u2 and reads <u2 back as bf16 when asked to).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvevict/io/atomic_file.h"
#include "kvevict/tensor.h"

namespace kvevict::npy {

// The header of a .npy file, read and checked without its data.
struct ArrayHeader {
  std::string descr;  // NumPy dtype string, e.g. "<f4", "<u2"
  bool fortran_order = false;
  std::vector<int64_t> shape;
  uint64_t data_offset = 0;  // bytes before the data
  uint64_t file_size = 0;
};
// Throws like load() for a missing file, a directory, a bad magic or a malformed header.
ArrayHeader read_header(const std::string& path);

// Reads the whole array. `bf16`: read <u2 as DType::kBF16 (without it, <u2 is an error, since
// kvevict has no uint16 dtype). Throws naming the file and the problem for a bad magic, a
// malformed or truncated header, fortran_order True, an unsupported dtype, or a data size that
// does not match the shape.
HostTensor load(const std::string& path, bool bf16 = false);

// Writes `numel(shape)` elements of `dtype` from `data` (contiguous, C order). kBF16 is stored as
// <u2. The write is atomic and never replaces a non-regular file (io::write_file_atomically): the
// bytes go to a temporary next to `path`, renamed over it only when complete and removed on
// failure, so `path` is never left half-written.
void save(const std::string& path, DType dtype, const std::vector<int64_t>& shape,
          const void* data);
void save(const std::string& path, const HostTensor& t);
// A host view; must be contiguous.
void save(const std::string& path, const TensorView& t);

// Adds the .npy file of an array to a set of outputs written all or none (io::StagedFiles),
// with `label` naming it in errors (e.g. "--out"). `data` must stay valid until add() returns.
void stage(io::StagedFiles& files, const std::string& path, const std::string& label, DType dtype,
           const std::vector<int64_t>& shape, const void* data);
void stage(io::StagedFiles& files, const std::string& path, const std::string& label,
           const TensorView& t);

}  // namespace kvevict::npy
