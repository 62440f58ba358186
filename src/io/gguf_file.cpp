// GGUF container parsing (v2 and v3): header, metadata key/values, tensor infos, data section.
// The file is memory-mapped; every count and length read from it is bounded by the bytes that
// remain before it is used to allocate or to index, so a corrupt header fails fast instead of
// allocating (a claimed 2^60 tensors needs at least 2^60 * 24 bytes of tensor infos).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/parallel.h"
#include "io/input_file.h"
#include "kvevict/error.h"
#include "kvevict/io/gguf.h"

namespace kvevict::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr int kMaxDims = 4;              // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;        // nested arrays deeper than this are not a real model
// Smallest encodings, used to bound counts by the remaining bytes before allocating:
// a key/value is a key string (8-byte length) + a 4-byte type + at least 1 byte of value;
// a tensor info is a name (8-byte length) + n_dims (4) + type (4) + offset (8).
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;

const char* value_type_name(uint32_t t) {
  static const char* const kNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                       "bool", "string", "array", "u64", "i64", "f64"};
  return t <= ValueType::kF64 ? kNames[t] : "unknown";
}

// Bytes of one encoded element of a fixed-size type; 0 for string/array (variable size).
uint64_t fixed_size(uint32_t t) {
  switch (t) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kBool: return 1;
    case ValueType::kU16:
    case ValueType::kI16: return 2;
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kF32: return 4;
    case ValueType::kU64:
    case ValueType::kI64:
    case ValueType::kF64: return 8;
    default: return 0;
  }
}

// A bounds-checked little-endian reader over the mapped bytes.
class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* base, uint64_t size)
      : path_(path), base_(base), size_(size) {}
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  const std::string& path() const { return path_; }

  void need(uint64_t n, const char* what) const {
    KVEVICT_CHECK(n <= remaining(), "gguf ", path_, ": truncated while reading ", what, " at byte ",
                  pos_, " (needs ", n, " bytes, ", remaining(), " left of ", size_,
                  "); expected a complete GGUF file");
  }
  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));  // x86/ARM little-endian hosts, as ggml assumes
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const char* what) {
    const uint64_t len = read<uint64_t>(what);
    KVEVICT_CHECK(len <= remaining(), "gguf ", path_, ": ", what, " length ", len, " at byte ",
                  pos_ - 8, " exceeds the ", remaining(),
                  " bytes left in the file; expected a length within the file");
    std::string s(reinterpret_cast<const char*>(base_ + pos_), len);
    pos_ += len;
    return s;
  }

 private:
  std::string path_;
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

Value read_value(Cursor& c, uint32_t type, const std::string& key, int depth);

Value read_array(Cursor& c, const std::string& key, int depth) {
  KVEVICT_CHECK(depth < kMaxArrayDepth, "gguf ", c.path(), ": metadata ", key,
                " nests arrays deeper than ", kMaxArrayDepth, "; expected at most that depth");
  const uint32_t elem_type = c.read<uint32_t>("array element type");
  KVEVICT_CHECK(elem_type <= ValueType::kF64, "gguf ", c.path(), ": metadata ", key,
                " has array element type ", elem_type, "; expected a GGUF value type 0..12");
  const uint64_t count = c.read<uint64_t>("array length");
  // A string takes at least its 8-byte length, an array at least type + length (12 bytes).
  const uint64_t min_elem = elem_type == ValueType::kString  ? 8
                            : elem_type == ValueType::kArray ? 12
                                                             : fixed_size(elem_type);
  KVEVICT_CHECK(count <= c.remaining() / min_elem, "gguf ", c.path(), ": metadata ", key,
                " claims ", count, " array elements of type ", value_type_name(elem_type),
                " but only ", c.remaining(), " bytes remain; expected a length within the file");
  auto arr = std::make_shared<Array>();
  arr->reserve(count);
  for (uint64_t i = 0; i < count; ++i) arr->push_back(read_value(c, elem_type, key, depth + 1));
  Value v;
  v.v = std::move(arr);
  return v;
}

Value read_value(Cursor& c, uint32_t type, const std::string& key, int depth) {
  Value v;
  switch (type) {
    case ValueType::kU8: v.v = uint64_t{c.read<uint8_t>("u8 value")}; break;
    case ValueType::kI8: v.v = int64_t{c.read<int8_t>("i8 value")}; break;
    case ValueType::kU16: v.v = uint64_t{c.read<uint16_t>("u16 value")}; break;
    case ValueType::kI16: v.v = int64_t{c.read<int16_t>("i16 value")}; break;
    case ValueType::kU32: v.v = uint64_t{c.read<uint32_t>("u32 value")}; break;
    case ValueType::kI32: v.v = int64_t{c.read<int32_t>("i32 value")}; break;
    case ValueType::kU64: v.v = c.read<uint64_t>("u64 value"); break;
    case ValueType::kI64: v.v = c.read<int64_t>("i64 value"); break;
    case ValueType::kF32: v.v = double{c.read<float>("f32 value")}; break;
    case ValueType::kF64: v.v = c.read<double>("f64 value"); break;
    case ValueType::kBool: {
      const uint8_t b = c.read<uint8_t>("bool value");
      KVEVICT_CHECK(b <= 1, "gguf ", c.path(), ": metadata ", key, " has bool byte ", int{b},
                    "; expected 0 or 1");
      v.v = b != 0;
      break;
    }
    case ValueType::kString: v.v = c.read_string("string value"); break;
    case ValueType::kArray: return read_array(c, key, depth);
    default:
      KVEVICT_FAIL("gguf ", c.path(), ": metadata ", key, " has value type ", type,
                   "; expected a GGUF value type 0..12");
  }
  return v;
}

std::string actual_type(const Value& v) {
  switch (v.v.index()) {
    case 0: return "unsigned integer";
    case 1: return "signed integer";
    case 2: return "float";
    case 3: return "bool";
    case 4: return "string";
    default: return "array";
  }
}

}  // namespace

int64_t Value::as_int(const std::string& key) const {
  if (auto* u = std::get_if<uint64_t>(&v)) {
    KVEVICT_CHECK(*u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
                  "gguf metadata ", key, " = ", *u,
                  " does not fit int64; expected a smaller value");
    return static_cast<int64_t>(*u);
  }
  if (auto* i = std::get_if<int64_t>(&v)) return *i;
  KVEVICT_FAIL("gguf metadata ", key, " is a ", actual_type(*this), "; expected an integer");
}

double Value::as_float(const std::string& key) const {
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
  if (auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  KVEVICT_FAIL("gguf metadata ", key, " is a ", actual_type(*this), "; expected a number");
}

bool Value::as_bool(const std::string& key) const {
  if (auto* b = std::get_if<bool>(&v)) return *b;
  KVEVICT_FAIL("gguf metadata ", key, " is a ", actual_type(*this), "; expected a bool");
}

const std::string& Value::as_string(const std::string& key) const {
  if (auto* s = std::get_if<std::string>(&v)) return *s;
  KVEVICT_FAIL("gguf metadata ", key, " is a ", actual_type(*this), "; expected a string");
}

const Array& Value::as_array(const std::string& key) const {
  if (auto* a = std::get_if<std::shared_ptr<Array>>(&v)) return **a;
  KVEVICT_FAIL("gguf metadata ", key, " is a ", actual_type(*this), "; expected an array");
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // overflow was ruled out when the file was opened
  return n;
}

std::unique_ptr<File> File::open(const std::string& path) {
  std::unique_ptr<File> f(new File());
  f->path_ = path;
  io::check_input_file(path, "gguf");  // a directory or FIFO is refused before open() blocks on it
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  KVEVICT_CHECK(fd >= 0, "gguf ", path, ": cannot open (", std::strerror(errno),
                "); expected a readable GGUF file");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    KVEVICT_FAIL("gguf ", path, ": cannot stat (", std::strerror(err), ")");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 4 + 4 + 8 + 8) {
    ::close(fd);
    KVEVICT_FAIL("gguf ", path, ": file has ", size,
                 " bytes; expected at least the 24-byte GGUF header");
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  KVEVICT_CHECK(map != MAP_FAILED, "gguf ", path, ": mmap of ", size, " bytes failed (",
                std::strerror(map_err), ")");
  f->map_ = map;  // owned from here on: ~File unmaps even when parsing throws below
  f->map_bytes_ = size;
  const auto* base = static_cast<const uint8_t*>(map);

  Cursor c(path, base, size);
  const uint32_t magic = c.read<uint32_t>("magic");
  KVEVICT_CHECK(magic == kMagic, "gguf ", path, ": bad magic 0x", std::hex, magic,
                "; expected 0x46554747 (\"GGUF\")");
  f->version_ = c.read<uint32_t>("version");
  KVEVICT_CHECK(f->version_ == 2 || f->version_ == 3, "gguf ", path, ": version ", f->version_,
                " is not supported; expected 2 or 3");
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  KVEVICT_CHECK(n_tensors <= c.remaining() / kMinTensorInfoBytes, "gguf ", path, ": tensor count ",
                n_tensors, " cannot fit in the ", c.remaining(),
                " bytes after the header; expected at most ", c.remaining() / kMinTensorInfoBytes);
  KVEVICT_CHECK(n_kv <= c.remaining() / kMinKvBytes, "gguf ", path, ": metadata count ", n_kv,
                " cannot fit in the ", c.remaining(), " bytes after the header; expected at most ",
                c.remaining() / kMinKvBytes);

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.read_string("metadata key");
    const uint32_t type = c.read<uint32_t>("metadata value type");
    Value v = read_value(c, type, key, 0);
    KVEVICT_CHECK(f->meta_.count(key) == 0, "gguf ", path, ": duplicate metadata key '", key,
                  "'; expected unique keys");
    f->meta_.emplace(std::move(key), std::move(v));
  }
  if (f->has("general.alignment")) {
    const int64_t a = f->get("general.alignment").as_int("general.alignment");
    KVEVICT_CHECK(a > 0 && (a & (a - 1)) == 0 && a <= (1 << 20), "gguf ", path,
                  ": general.alignment = ", a, "; expected a power of two up to 2^20");
    f->alignment_ = static_cast<uint64_t>(a);
  }

  f->tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    t.name = c.read_string("tensor name");
    const uint32_t n_dims = c.read<uint32_t>("tensor n_dims");
    KVEVICT_CHECK(n_dims >= 1 && n_dims <= kMaxDims, "gguf ", path, ": tensor '", t.name, "' has ",
                  n_dims, " dims; expected 1..", kMaxDims);
    uint64_t dims[kMaxDims];
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      dims[d] = c.read<uint64_t>("tensor dim");
      KVEVICT_CHECK(dims[d] >= 1 && dims[d] <= (uint64_t{1} << 40), "gguf ", path, ": tensor '",
                    t.name, "' dim ", d, " = ", dims[d], "; expected 1..2^40");
      KVEVICT_CHECK(!__builtin_mul_overflow(numel, static_cast<int64_t>(dims[d]), &numel), "gguf ",
                    path, ": tensor '", t.name, "' element count overflows int64");
    }
    // GGUF lists dims innermost first (ne[0] is the row length); we store them outermost first.
    for (int d = static_cast<int>(n_dims) - 1; d >= 0; --d)
      t.shape.push_back(static_cast<int64_t>(dims[d]));
    const uint32_t type = c.read<uint32_t>("tensor type");
    KVEVICT_CHECK(ggml_type_supported(type), "gguf ", path, ": tensor '", t.name, "' has type ",
                  type, " (", ggml_type_name(type),
                  "); expected one of F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K");
    t.type = static_cast<GgmlType>(type);
    const int64_t be = ggml_block_elems(t.type);
    KVEVICT_CHECK(static_cast<int64_t>(dims[0]) % be == 0, "gguf ", path, ": tensor '", t.name,
                  "' row length ", dims[0], " is not a multiple of the ", ggml_type_name(type),
                  " block size ", be);
    // numel / be * block bytes cannot overflow: numel <= 2^63 and block bytes / be <= 4.5.
    t.nbytes = static_cast<uint64_t>(numel / be) * static_cast<uint64_t>(ggml_block_bytes(t.type));
    t.offset = c.read<uint64_t>("tensor offset");
    KVEVICT_CHECK(t.offset % f->alignment_ == 0, "gguf ", path, ": tensor '", t.name, "' offset ",
                  t.offset, " is not a multiple of the alignment ", f->alignment_);
    KVEVICT_CHECK(f->index_.count(t.name) == 0, "gguf ", path, ": duplicate tensor name '", t.name,
                  "'; expected unique names");
    f->index_.emplace(t.name, f->tensors_.size());
    f->tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment after the tensor infos.
  const uint64_t data_start = (c.pos() + f->alignment_ - 1) / f->alignment_ * f->alignment_;
  const uint64_t data_bytes = data_start <= size ? size - data_start : 0;
  KVEVICT_CHECK(n_tensors == 0 || data_start <= size, "gguf ", path,
                ": data section would start at ", data_start, " past the end of the ", size,
                "-byte file");
  f->data_offset_ = data_start;
  for (auto& t : f->tensors_) {
    KVEVICT_CHECK(t.offset <= data_bytes && t.nbytes <= data_bytes - t.offset, "gguf ", path,
                  ": tensor '", t.name, "' bytes [", t.offset, ", ", t.offset, " + ", t.nbytes,
                  ") fall outside the ", data_bytes,
                  "-byte data section; expected the file to hold "
                  "them (truncated file?)");
    t.data = base + data_start + t.offset;
  }
  // No byte may belong to two tensors: a tensor whose range overlaps another's would read the
  // other's data as its own (garbage that loads, issue 13). Sorted by offset, it is enough to
  // compare each tensor with the one after it.
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : f->tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->offset < b->offset || (a->offset == b->offset && a->nbytes < b->nbytes);
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& a = *by_offset[i - 1];
    const TensorInfo& b = *by_offset[i];
    KVEVICT_CHECK(a.offset + a.nbytes <= b.offset, "gguf ", path, ": tensors '", a.name, "' [",
                  a.offset, ", ", a.offset + a.nbytes, ") and '", b.name, "' [", b.offset, ", ",
                  b.offset + b.nbytes, ") overlap in the data section; expected disjoint ranges");
  }
  return f;
}

void File::check_finite_values() const {
  parallel_for(static_cast<int64_t>(tensors_.size()), [this](int64_t i) {
    const TensorInfo& t = tensors_[static_cast<size_t>(i)];
    const int64_t n = t.shape.back(), rows = t.rows();
    const int64_t row_bytes = ggml_row_bytes(t.type, n);
    // The scales alone decide (values_finite); only a row that fails is dequantized, to name
    // the first non-finite value's column.
    if (values_finite(t.type, t.data, n * rows)) return;
    std::vector<float> row(static_cast<size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
      if (values_finite(t.type, t.data + r * row_bytes, n)) continue;
      dequantize_row(t.type, t.data + r * row_bytes, row.data(), n);
      for (int64_t c = 0; c < n; ++c)
        KVEVICT_CHECK(std::isfinite(row[static_cast<size_t>(c)]), "gguf ", path_, ": tensor '",
                      t.name, "' holds a non-finite value (", row[static_cast<size_t>(c)],
                      ") at row ", r, " column ", c, "; expected finite weights");
      KVEVICT_FAIL("gguf ", path_, ": tensor '", t.name, "' row ", r,
                   " has a non-finite block scale although its values dequantize finite");
    }
  });
}

File::~File() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

const Value& File::get(const std::string& key) const {
  auto it = meta_.find(key);
  KVEVICT_CHECK(it != meta_.end(), "gguf ", path_, ": missing metadata key '", key, "'");
  return it->second;
}

int64_t File::get_int(const std::string& key, int64_t fallback) const {
  auto it = meta_.find(key);
  return it == meta_.end() ? fallback : it->second.as_int(key);
}

double File::get_float(const std::string& key, double fallback) const {
  auto it = meta_.find(key);
  return it == meta_.end() ? fallback : it->second.as_float(key);
}

std::string File::get_string(const std::string& key, const std::string& fallback) const {
  auto it = meta_.find(key);
  return it == meta_.end() ? fallback : it->second.as_string(key);
}

const TensorInfo* File::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& File::tensor(const std::string& name) const {
  const TensorInfo* t = find(name);
  KVEVICT_CHECK(t != nullptr, "gguf ", path_, ": no tensor named '", name, "' among ",
                tensors_.size(), " tensors");
  return *t;
}

}  // namespace kvevict::gguf
