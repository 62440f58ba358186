// .safetensors reading: an 8-byte little-endian header length, a JSON header
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data. Every offset is checked against the file before use.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kvevict/tensor.h"

namespace kvevict::safetensors {

struct Entry {
  std::string name;
  DType dtype;                 // F32 F16 BF16 F64 I32 I64 U8
  std::vector<int64_t> shape;  // row-major
  uint64_t offset;             // from the start of the data section
  uint64_t nbytes;
};

class File {
 public:
  // Reads and validates the header (not the data); throws naming the file and the problem.
  static std::unique_ptr<File> open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<Entry>& tensors() const { return entries_; }  // in data order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const Entry* find(const std::string& name) const;  // nullptr if absent
  std::string names() const;                         // "a, b, c" in data order
  // Reads one tensor; throws naming a missing tensor and the names present.
  HostTensor load(const std::string& name) const;

 private:
  File() = default;
  std::string path_;
  uint64_t data_start_ = 0;
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// One tensor by name.
HostTensor load_tensor(const std::string& path, const std::string& name);
// The file's only tensor; throws when it holds zero or several.
HostTensor load_only_tensor(const std::string& path);

}  // namespace kvevict::safetensors
