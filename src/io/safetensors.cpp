#include "kvevict/io/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/input_file.h"
#include "io/json_parse.h"
#include "kvevict/error.h"

namespace kvevict::safetensors {
namespace {

using nlohmann::json;

// The safetensors reference implementation refuses headers above 100 MB; so do we, before
// allocating for one.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

DType parse_dtype(const std::string& path, const std::string& name, const std::string& d) {
  if (d == "F32") return DType::kF32;
  if (d == "F16") return DType::kF16;
  if (d == "BF16") return DType::kBF16;
  if (d == "F64") return DType::kF64;
  if (d == "I32") return DType::kI32;
  if (d == "I64") return DType::kI64;
  if (d == "U8") return DType::kU8;
  KVEVICT_FAIL("safetensors ", path, ": tensor '", name, "' has dtype '", d,
               "'; expected one of F32 F16 BF16 F64 I32 I64 U8");
}

uint64_t as_u64(const std::string& path, const std::string& name, const char* field,
                const json& v) {
  KVEVICT_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0),
                "safetensors ", path, ": tensor '", name, "' field ", field, " has value ",
                v.dump(), "; expected a non-negative integer");
  return v.get<uint64_t>();
}

}  // namespace

std::unique_ptr<File> File::open(const std::string& path) {
  std::unique_ptr<File> f(new File());
  f->path_ = path;
  const uint64_t size = io::check_input_file(path, "safetensors");  // refuses a directory
  std::ifstream in(path, std::ios::binary);
  KVEVICT_CHECK(in.good(), "safetensors ", path, ": cannot open (", std::strerror(errno), ")");
  KVEVICT_CHECK(size >= 8, "safetensors ", path, ": file has ", size,
                " bytes; expected at least the 8-byte header length");
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  KVEVICT_CHECK(header_len <= size - 8 && header_len <= kMaxHeaderBytes, "safetensors ", path,
                ": header length ", header_len, " exceeds the ", size - 8,
                " bytes after it (or the 100 MB limit); expected a valid safetensors file");
  std::string text(header_len, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_len));
  KVEVICT_CHECK(static_cast<uint64_t>(in.gcount()) == header_len, "safetensors ", path,
                ": short read of the header");
  const json header = io::parse_json(text, "safetensors " + path + ": header");
  KVEVICT_CHECK(header.is_object(), "safetensors ", path, ": header is a JSON ", header.type_name(),
                "; expected an object");
  f->data_start_ = 8 + header_len;
  const uint64_t data_bytes = size - f->data_start_;

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      KVEVICT_CHECK(v.is_object(), "safetensors ", path, ": __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        KVEVICT_CHECK(m.value().is_string(), "safetensors ", path, ": __metadata__ value of '",
                      m.key(), "' is not a string");
        f->metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    KVEVICT_CHECK(
        v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
        "safetensors ", path, ": tensor '", name, "' entry ", v.dump(),
        " lacks dtype, shape or data_offsets");
    KVEVICT_CHECK(v["dtype"].is_string(), "safetensors ", path, ": tensor '", name,
                  "' dtype is not a string");
    Entry e;
    e.name = name;
    e.dtype = parse_dtype(path, name, v["dtype"].get<std::string>());
    const json& shape = v["shape"];
    KVEVICT_CHECK(shape.is_array(), "safetensors ", path, ": tensor '", name, "' shape ",
                  shape.dump(), " is not an array");
    uint64_t numel = 1;
    for (const json& d : shape) {
      const uint64_t dim = as_u64(path, name, "shape", d);
      KVEVICT_CHECK(dim <= (uint64_t{1} << 62) && !__builtin_mul_overflow(numel, dim, &numel),
                    "safetensors ", path, ": tensor '", name, "' shape ", shape.dump(),
                    " overflows");
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    const json& off = v["data_offsets"];
    KVEVICT_CHECK(off.is_array() && off.size() == 2, "safetensors ", path, ": tensor '", name,
                  "' data_offsets ", off.dump(), "; expected [begin, end]");
    const uint64_t begin = as_u64(path, name, "data_offsets", off[0]);
    const uint64_t end = as_u64(path, name, "data_offsets", off[1]);
    KVEVICT_CHECK(begin <= end && end <= data_bytes, "safetensors ", path, ": tensor '", name,
                  "' data_offsets [", begin, ", ", end, "] fall outside the ", data_bytes,
                  "-byte data section");
    uint64_t need = 0;
    KVEVICT_CHECK(!__builtin_mul_overflow(numel, dtype_size(e.dtype), &need) && need == end - begin,
                  "safetensors ", path, ": tensor '", name, "' shape ", shape.dump(), " of ",
                  v["dtype"].get<std::string>(), " needs ", need, " bytes but data_offsets span ",
                  end - begin);
    e.offset = begin;
    e.nbytes = end - begin;
    f->entries_.push_back(std::move(e));
  }
  std::sort(f->entries_.begin(), f->entries_.end(),
            [](const Entry& a, const Entry& b) { return a.offset < b.offset; });
  for (size_t i = 1; i < f->entries_.size(); ++i) {
    const Entry& a = f->entries_[i - 1];
    const Entry& b = f->entries_[i];
    KVEVICT_CHECK(a.offset + a.nbytes <= b.offset || a.nbytes == 0 || b.nbytes == 0, "safetensors ",
                  path, ": tensors '", a.name, "' and '", b.name, "' overlap");
  }
  return f;
}

const Entry* File::find(const std::string& name) const {
  for (const Entry& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

HostTensor File::load(const std::string& name) const {
  const Entry* e = find(name);
  KVEVICT_CHECK(e != nullptr, "safetensors ", path_, ": no tensor named '", name, "'; it holds [",
                names(), "]");
  HostTensor t(e->dtype, e->shape);
  if (e->nbytes == 0) return t;
  std::ifstream in(path_, std::ios::binary);
  KVEVICT_CHECK(in.good(), "safetensors ", path_, ": cannot reopen (", std::strerror(errno), ")");
  in.seekg(static_cast<std::streamoff>(data_start_ + e->offset));
  in.read(static_cast<char*>(t.data()), static_cast<std::streamsize>(e->nbytes));
  KVEVICT_CHECK(static_cast<uint64_t>(in.gcount()) == e->nbytes, "safetensors ", path_,
                ": short read of tensor '", name, "' (file changed since it was opened?)");
  return t;
}

HostTensor load_tensor(const std::string& path, const std::string& name) {
  return File::open(path)->load(name);
}

std::string File::names() const {
  std::string out;
  for (const Entry& e : entries_) out += (out.empty() ? "" : ", ") + e.name;
  return out;
}

HostTensor load_only_tensor(const std::string& path) {
  auto f = File::open(path);
  KVEVICT_CHECK(f->tensors().size() == 1, "safetensors ", path, ": holds ", f->tensors().size(),
                " tensors [", f->names(),
                "]; expected exactly one (name one with load_tensor(path, ", "name))");
  return f->load(f->tensors()[0].name);
}

}  // namespace kvevict::safetensors
