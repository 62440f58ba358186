// A small GGUF writer for tests: builds valid files from metadata and tensors, and exposes the
// byte offsets of header fields so tests can corrupt them one at a time.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvevict/io/gguf.h"

namespace kvevict::testing {

class GgufWriter : public gguf::ValueType {
 public:
  void add_u32(const std::string& key, uint32_t v) { kv_scalar(key, kU32, &v, 4); }
  void add_i32(const std::string& key, int32_t v) { kv_scalar(key, kI32, &v, 4); }
  void add_u64(const std::string& key, uint64_t v) { kv_scalar(key, kU64, &v, 8); }
  void add_i64(const std::string& key, int64_t v) { kv_scalar(key, kI64, &v, 8); }
  void add_u8(const std::string& key, uint8_t v) { kv_scalar(key, kU8, &v, 1); }
  void add_i8(const std::string& key, int8_t v) { kv_scalar(key, kI8, &v, 1); }
  void add_u16(const std::string& key, uint16_t v) { kv_scalar(key, kU16, &v, 2); }
  void add_i16(const std::string& key, int16_t v) { kv_scalar(key, kI16, &v, 2); }
  void add_f32(const std::string& key, float v) { kv_scalar(key, kF32, &v, 4); }
  void add_f64(const std::string& key, double v) { kv_scalar(key, kF64, &v, 8); }
  void add_bool(const std::string& key, bool v) {
    uint8_t b = v ? 1 : 0;
    kv_scalar(key, kBool, &b, 1);
  }
  void add_string(const std::string& key, const std::string& v) {
    begin_kv(key, kString);
    put_string(kv_, v);
  }
  void add_string_array(const std::string& key, const std::vector<std::string>& v) {
    begin_kv(key, kArray);
    put<uint32_t>(kv_, kString);
    put<uint64_t>(kv_, v.size());
    for (const auto& s : v) put_string(kv_, s);
  }
  void add_f32_array(const std::string& key, const std::vector<float>& v) {
    begin_kv(key, kArray);
    put<uint32_t>(kv_, kF32);
    put<uint64_t>(kv_, v.size());
    for (float x : v) put<float>(kv_, x);
  }
  void add_i32_array(const std::string& key, const std::vector<int32_t>& v) {
    begin_kv(key, kArray);
    put<uint32_t>(kv_, kI32);
    put<uint64_t>(kv_, v.size());
    for (int32_t x : v) put<int32_t>(kv_, x);
  }
  // A raw key/value: the caller supplies the encoded value bytes after the type.
  void add_raw(const std::string& key, uint32_t type, const std::vector<uint8_t>& value) {
    begin_kv(key, type);
    kv_.insert(kv_.end(), value.begin(), value.end());
  }

  // dims in GGUF order: dims[0] is the row length.
  void add_tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type,
                  const std::vector<uint8_t>& bytes) {
    tensors_.push_back({name, std::move(dims), type, bytes});
  }

  struct Layout {
    size_t tensor_count_at = 8, kv_count_at = 16;
    std::vector<size_t> tensor_info_at;    // start of each tensor info (its name length)
    std::vector<size_t> tensor_offset_at;  // the offset field of each tensor info
    size_t data_at = 0;                    // start of the data section
  };

  std::vector<uint8_t> build(uint32_t version = 3, uint64_t alignment = 32,
                             Layout* layout = nullptr) const {
    std::vector<uint8_t> out;
    put<uint32_t>(out, 0x46554747);
    put<uint32_t>(out, version);
    put<uint64_t>(out, tensors_.size());
    put<uint64_t>(out, n_kv_);
    out.insert(out.end(), kv_.begin(), kv_.end());
    Layout l;
    std::vector<uint64_t> offsets;
    uint64_t off = 0;
    for (const auto& t : tensors_) {
      offsets.push_back(off);
      off += (t.bytes.size() + alignment - 1) / alignment * alignment;
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const auto& t = tensors_[i];
      l.tensor_info_at.push_back(out.size());
      put_string(out, t.name);
      put<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) put<uint64_t>(out, d);
      put<uint32_t>(out, t.type);
      l.tensor_offset_at.push_back(out.size());
      put<uint64_t>(out, offsets[i]);
    }
    while (out.size() % alignment != 0) out.push_back(0);
    l.data_at = out.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      out.resize(l.data_at + offsets[i], 0);
      out.insert(out.end(), tensors_[i].bytes.begin(), tensors_[i].bytes.end());
    }
    if (layout != nullptr) *layout = l;
    return out;
  }

  template <class T>
  static void put(std::vector<uint8_t>& out, T v) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out.insert(out.end(), b, b + sizeof(T));
  }
  template <class T>
  static void patch(std::vector<uint8_t>& out, size_t at, T v) {
    std::memcpy(out.data() + at, &v, sizeof(T));
  }
  static void put_string(std::vector<uint8_t>& out, const std::string& s) {
    put<uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
  }

 private:
  struct Tensor {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type;
    std::vector<uint8_t> bytes;
  };
  void begin_kv(const std::string& key, uint32_t type) {
    put_string(kv_, key);
    put<uint32_t>(kv_, type);
    ++n_kv_;
  }
  void kv_scalar(const std::string& key, uint32_t type, const void* v, size_t n) {
    begin_kv(key, type);
    const auto* p = static_cast<const uint8_t*>(v);
    kv_.insert(kv_.end(), p, p + n);
  }
  std::vector<uint8_t> kv_;
  uint64_t n_kv_ = 0;
  std::vector<Tensor> tensors_;
};

// A SentencePiece vocabulary for tiny test models: ids 0..2 control (<unk> <s> </s>), 3..258
// the byte tokens <0x00>..<0xFF> (type 6, so any text encodes through byte fallback), then
// `pieces` with their scores (type 1).
struct SpmVocabulary {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
};
inline SpmVocabulary spm_byte_vocabulary(const std::vector<std::pair<std::string, float>>& pieces) {
  SpmVocabulary v{{"<unk>", "<s>", "</s>"}, {0, 0, 0}, {2, 3, 3}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    v.tokens.emplace_back(name);
    v.scores.push_back(0);
    v.types.push_back(6);
  }
  for (const auto& [t, s] : pieces) {
    v.tokens.push_back(t);
    v.scores.push_back(s);
    v.types.push_back(1);
  }
  return v;
}

// A file under the build's temporary directory, removed when the object goes away.
class TempFile {
 public:
  explicit TempFile(const std::string& stem)
      : path_(std::string(::testing::TempDir()) + "/" + stem + "." + std::to_string(::getpid())) {}
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }
  void write(const std::vector<uint8_t>& bytes) const {
    FILE* f = std::fopen(path_.c_str(), "wb");
    if (f == nullptr) throw std::runtime_error("cannot write " + path_);
    if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }

 private:
  std::string path_;
};

}  // namespace kvevict::testing
