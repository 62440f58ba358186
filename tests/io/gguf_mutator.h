// A structure-aware GGUF mutator (issue 13): parses a valid GGUF into its typed parts (metadata
// key/values, tensor infos, the data section), edits one field the way a corrupt or hostile file
// would -- a metadata value set to NaN, a negative, zero, a huge value or another type; a tensor
// offset moved onto another tensor or past the end; a shape or type changed -- and writes the
// file back. Random byte flips almost never reach these fields with a value the parser accepts,
// so they never tested the model loader's semantic checks; this does.
//
// Header-only and free of gtest, so both the libFuzzer target (fuzz/gguf_model_fuzzer.cpp, as
// its LLVMFuzzerCustomMutator) and the tests (tests/reliability/gguf_mutation_test.cpp, from a
// fixed seed) use it; check_model_file() is the oracle both apply.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kvevict/io/gguf.h"

namespace kvevict::testing {

// The value type codes (kvevict/io/gguf.h), by a short name for this header and its users.
using GgufType = gguf::ValueType;

struct GgufKv {
  std::string key;
  uint32_t type = 0;
  std::vector<uint8_t> value;  // the encoded value after the type code
};

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // GGUF order: dims[0] is the row length
  uint32_t type = 0;
  uint64_t offset = 0;  // from the start of the data section
};

class GgufDoc {
 public:
  uint32_t version = 3;
  uint64_t alignment = 32;  // padding before the data section, as parsed
  std::vector<GgufKv> kvs;
  std::vector<GgufTensorInfo> tensors;
  std::vector<uint8_t> data;  // the data section

  // nullopt unless the bytes are a GGUF this parser can walk (it checks structure only).
  static std::optional<GgufDoc> parse(const uint8_t* bytes, size_t size) {
    Reader r{bytes, size};
    GgufDoc d;
    uint32_t magic = 0;
    uint64_t n_tensors = 0, n_kv = 0;
    if (!r.get(magic) || magic != 0x46554747 || !r.get(d.version) || !r.get(n_tensors) ||
        !r.get(n_kv) || n_kv > (1u << 20) || n_tensors > (1u << 20))
      return std::nullopt;
    for (uint64_t i = 0; i < n_kv; ++i) {
      GgufKv kv;
      if (!r.string(kv.key) || !r.get(kv.type)) return std::nullopt;
      const size_t start = r.pos;
      if (!r.skip_value(kv.type, 0)) return std::nullopt;
      kv.value.assign(bytes + start, bytes + r.pos);
      if (kv.key == "general.alignment" && kv.type == GgufType::kU32) {
        uint32_t a = 0;
        std::memcpy(&a, kv.value.data(), 4);
        if (a == 0 || (a & (a - 1)) != 0 || a > (1u << 20)) return std::nullopt;
        d.alignment = a;
      }
      d.kvs.push_back(std::move(kv));
    }
    for (uint64_t i = 0; i < n_tensors; ++i) {
      GgufTensorInfo t;
      uint32_t n_dims = 0;
      if (!r.string(t.name) || !r.get(n_dims) || n_dims > 8) return std::nullopt;
      t.dims.resize(n_dims);
      for (auto& dim : t.dims)
        if (!r.get(dim)) return std::nullopt;
      if (!r.get(t.type) || !r.get(t.offset)) return std::nullopt;
      d.tensors.push_back(std::move(t));
    }
    const size_t data_at = (r.pos + d.alignment - 1) / d.alignment * d.alignment;
    if (data_at > size) return std::nullopt;
    d.data.assign(bytes + data_at, bytes + size);
    return d;
  }

  std::vector<uint8_t> serialize() const {
    std::vector<uint8_t> out;
    put<uint32_t>(out, 0x46554747);
    put<uint32_t>(out, version);
    put<uint64_t>(out, tensors.size());
    put<uint64_t>(out, kvs.size());
    for (const auto& kv : kvs) {
      put_string(out, kv.key);
      put<uint32_t>(out, kv.type);
      out.insert(out.end(), kv.value.begin(), kv.value.end());
    }
    for (const auto& t : tensors) {
      put_string(out, t.name);
      put<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
      for (uint64_t dim : t.dims) put<uint64_t>(out, dim);
      put<uint32_t>(out, t.type);
      put<uint64_t>(out, t.offset);
    }
    while (out.size() % alignment != 0) out.push_back(0);
    out.insert(out.end(), data.begin(), data.end());
    return out;
  }

  GgufKv* find(const std::string& key) {
    for (auto& kv : kvs)
      if (kv.key == key) return &kv;
    return nullptr;
  }
  GgufTensorInfo* find_tensor(const std::string& name) {
    for (auto& t : tensors)
      if (t.name == name) return &t;
    return nullptr;
  }
  // Sets (or adds) a key to a scalar of the given type.
  template <class T>
  void set(const std::string& key, uint32_t type, T v) {
    std::vector<uint8_t> bytes;
    put<T>(bytes, v);
    set_raw(key, type, bytes);
  }
  void set_string(const std::string& key, const std::string& s) {
    std::vector<uint8_t> bytes;
    put_string(bytes, s);
    set_raw(key, GgufType::kString, bytes);
  }
  void set_string_array(const std::string& key, const std::vector<std::string>& v) {
    std::vector<uint8_t> bytes;
    put<uint32_t>(bytes, GgufType::kString);
    put<uint64_t>(bytes, v.size());
    for (const auto& s : v) put_string(bytes, s);
    set_raw(key, GgufType::kArray, bytes);
  }
  template <class T>
  void set_array(const std::string& key, uint32_t elem_type, const std::vector<T>& v) {
    std::vector<uint8_t> bytes;
    put<uint32_t>(bytes, elem_type);
    put<uint64_t>(bytes, v.size());
    for (const T& x : v) put<T>(bytes, x);
    set_raw(key, GgufType::kArray, bytes);
  }
  void set_raw(const std::string& key, uint32_t type, std::vector<uint8_t> value) {
    GgufKv* kv = find(key);
    if (kv == nullptr) {
      kvs.push_back({key, type, {}});
      kv = &kvs.back();
    }
    kv->type = type;
    kv->value = std::move(value);
  }
  void erase(const std::string& key) {
    for (size_t i = 0; i < kvs.size(); ++i)
      if (kvs[i].key == key) kvs.erase(kvs.begin() + static_cast<std::ptrdiff_t>(i));
  }

  template <class T>
  static void put(std::vector<uint8_t>& out, T v) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out.insert(out.end(), b, b + sizeof(T));
  }
  static void put_string(std::vector<uint8_t>& out, const std::string& s) {
    put<uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
  }

 private:
  struct Reader {
    const uint8_t* b;
    size_t n;
    size_t pos = 0;
    template <class T>
    bool get(T& v) {
      if (n - pos < sizeof(T)) return false;
      std::memcpy(&v, b + pos, sizeof(T));
      pos += sizeof(T);
      return true;
    }
    bool string(std::string& s) {
      uint64_t len = 0;
      if (!get(len) || len > n - pos) return false;
      s.assign(reinterpret_cast<const char*>(b + pos), len);
      pos += len;
      return true;
    }
    bool skip_value(uint32_t type, int depth) {
      static const size_t kSize[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
      if (type > GgufType::kF64 || depth > 4) return false;
      if (type == GgufType::kString) {
        std::string s;
        return string(s);
      }
      if (type == GgufType::kArray) {
        uint32_t elem = 0;
        uint64_t count = 0;
        if (!get(elem) || !get(count) || count > n - pos) return false;
        for (uint64_t i = 0; i < count; ++i)
          if (!skip_value(elem, depth + 1)) return false;
        return true;
      }
      if (n - pos < kSize[type]) return false;
      pos += kSize[type];
      return true;
    }
  };
};

// The field values a hostile file would try, by what they break.
inline std::vector<uint8_t> mutated_scalar(std::mt19937_64& rng, uint32_t* type,
                                           std::string* what) {
  std::vector<uint8_t> v;
  const auto f32 = [&](float x, const char* name) {
    *type = GgufType::kF32;
    GgufDoc::put<float>(v, x);
    *what = name;
  };
  switch (rng() % 14) {
    case 0: f32(std::numeric_limits<float>::quiet_NaN(), "f32 NaN"); break;
    case 1: f32(-std::numeric_limits<float>::infinity(), "f32 -inf"); break;
    case 2: f32(-1.0f, "f32 -1"); break;
    case 3: f32(0.0f, "f32 0"); break;
    case 4: f32(1e38f, "f32 1e38"); break;
    case 5: f32(1e-45f, "f32 denormal"); break;
    case 6:
      *type = GgufType::kU32;
      GgufDoc::put<uint32_t>(v, 0);
      *what = "u32 0";
      break;
    case 7:
      *type = GgufType::kU32;
      GgufDoc::put<uint32_t>(v, 0xFFFFFFFFu);
      *what = "u32 max";
      break;
    case 8:
      *type = GgufType::kI32;
      GgufDoc::put<int32_t>(v, -1);
      *what = "i32 -1";
      break;
    case 9:
      *type = GgufType::kU64;
      GgufDoc::put<uint64_t>(v, uint64_t{1} << 62);
      *what = "u64 2^62";
      break;
    case 10:
      *type = GgufType::kI64;
      GgufDoc::put<int64_t>(v, std::numeric_limits<int64_t>::min());
      *what = "i64 min";
      break;
    case 11:
      *type = GgufType::kF64;
      GgufDoc::put<double>(v, std::numeric_limits<double>::quiet_NaN());
      *what = "f64 NaN";
      break;
    case 12:
      *type = GgufType::kString;
      GgufDoc::put_string(v, "12");
      *what = "string \"12\"";
      break;
    default:
      *type = GgufType::kBool;
      v.push_back(1);
      *what = "bool true";
      break;
  }
  // Small ordinary values too: 1, 2, 3, 7 reach the paths where sizes disagree with tensors.
  if (rng() % 4 == 0) {
    v.clear();
    const uint32_t small = static_cast<uint32_t>(1 + rng() % 8);
    *type = GgufType::kU32;
    GgufDoc::put<uint32_t>(v, small);
    *what = "u32 " + std::to_string(small);
  }
  return v;
}

// Applies one structure-aware mutation; returns what it did ("llama.rope.freq_base = f32 NaN").
inline std::string mutate(GgufDoc& d, std::mt19937_64& rng) {
  const auto pick = [&rng](size_t n) { return static_cast<size_t>(rng() % n); };
  const int op = static_cast<int>(rng() % 10);
  if (op <= 3 && !d.kvs.empty()) {  // a metadata value of another value or type
    GgufKv& kv = d.kvs[pick(d.kvs.size())];
    std::string what;
    kv.value = mutated_scalar(rng, &kv.type, &what);
    return kv.key + " = " + what;
  }
  if (op == 4 && !d.kvs.empty()) {  // a key removed, duplicated or an array shortened
    const size_t i = pick(d.kvs.size());
    const std::string key = d.kvs[i].key;
    switch (rng() % 3) {
      case 0: d.kvs.erase(d.kvs.begin() + static_cast<std::ptrdiff_t>(i)); return "removed " + key;
      case 1: d.kvs.push_back(d.kvs[i]); return "duplicated " + key;
      default: {
        GgufKv& kv = d.kvs[i];
        if (kv.type != GgufType::kArray || kv.value.size() < 12) return "no-op on " + key;
        uint64_t count = 0;
        std::memcpy(&count, kv.value.data() + 4, 8);
        if (count == 0) return "no-op on " + key;
        uint32_t elem = 0;
        std::memcpy(&elem, kv.value.data(), 4);
        // Keep the first element only (strings: up to its end; fixed types: its size).
        size_t keep = 12;
        if (elem == GgufType::kString) {
          uint64_t len = 0;
          std::memcpy(&len, kv.value.data() + 12, 8);
          keep += 8 + static_cast<size_t>(len);
        } else {
          static const size_t kSize[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
          keep += elem <= GgufType::kF64 ? kSize[elem] : 0;
        }
        if (keep > kv.value.size()) return "no-op on " + key;
        kv.value.resize(keep);
        const uint64_t one = 1;
        std::memcpy(kv.value.data() + 4, &one, 8);
        return key + " cut to one element";
      }
    }
  }
  if (d.tensors.empty()) return "no tensors";
  GgufTensorInfo& t = d.tensors[pick(d.tensors.size())];
  const GgufTensorInfo& other = d.tensors[pick(d.tensors.size())];
  switch (op) {
    case 5:  // offsets: onto another tensor, unaligned, past the end, one alignment later
      switch (rng() % 4) {
        case 0: t.offset = other.offset; return t.name + " offset = " + other.name + "'s";
        case 1: t.offset += 1 + pick(31); return t.name + " offset unaligned";
        case 2:
          t.offset = d.data.size() + d.alignment * pick(3);
          return t.name + " offset past the end";
        default: t.offset += d.alignment; return t.name + " offset + alignment";
      }
    case 6:  // dims
      if (t.dims.empty()) return "no dims";
      switch (rng() % 5) {
        case 0: std::swap(t.dims.front(), t.dims.back()); return t.name + " dims swapped";
        case 1: t.dims[pick(t.dims.size())] *= 2; return t.name + " a dim doubled";
        case 2: t.dims[pick(t.dims.size())] = 0; return t.name + " a dim = 0";
        case 3: t.dims[pick(t.dims.size())] = uint64_t{1} << 40; return t.name + " a dim = 2^40";
        default:
          if (rng() % 2 == 0 && t.dims.size() > 1) {
            t.dims.pop_back();
            return t.name + " lost a dim";
          }
          t.dims.push_back(1 + pick(3));
          return t.name + " gained a dim";
      }
    case 7: {  // types: other supported ggml types (reinterpreting the bytes) and unknown codes
      static const uint32_t kTypes[] = {0, 1, 2, 3, 6, 7, 8, 12, 13, 14, 30, 4, 99};
      t.type = kTypes[pick(sizeof kTypes / sizeof kTypes[0])];
      return t.name + " type = " + std::to_string(t.type);
    }
    case 8:  // names: a duplicate, or a tensor dropped
      if (rng() % 2 == 0) {
        t.name = other.name;
        return "a tensor renamed to " + other.name;
      } else {
        const std::string name = t.name;
        d.tensors.erase(d.tensors.begin() + static_cast<std::ptrdiff_t>(&t - d.tensors.data()));
        return "dropped " + name;
      }
    default: {  // the architecture or tokenizer model swapped
      static const char* kArch[] = {"llama", "qwen2", "gemma3", "mamba", ""};
      const std::string arch = kArch[pick(5)];
      d.set_string("general.architecture", arch);
      return "general.architecture = '" + arch + "'";
    }
  }
}

}  // namespace kvevict::testing
