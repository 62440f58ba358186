// .npy reading and atomic writing. The header is a Python dict literal; we parse exactly the
// subset NumPy writes ({'descr': str, 'fortran_order': bool, 'shape': tuple of ints}) and
// reject anything else rather than guess.
#include "kvevict/io/npy.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>

#include "io/input_file.h"
#include "kvevict/error.h"
#include "kvevict/io/atomic_file.h"

namespace kvevict::npy {
namespace {

const char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

struct Header {
  std::string descr;
  bool fortran = false;
  bool has_descr = false, has_fortran = false, has_shape = false;
  std::vector<int64_t> shape;
};

// A strict parser of NumPy's header dict.
class DictParser {
 public:
  DictParser(const std::string& path, const std::string& s) : path_(path), s_(s) {}

  Header parse() {
    Header h;
    expect('{');
    while (true) {
      skip_ws();
      if (peek() == '}') break;
      const std::string key = string_literal();
      expect(':');
      if (key == "descr") {
        h.descr = string_literal();
        h.has_descr = true;
      } else if (key == "fortran_order") {
        h.fortran = bool_literal();
        h.has_fortran = true;
      } else if (key == "shape") {
        h.shape = int_tuple();
        h.has_shape = true;
      } else {
        fail("unexpected key '" + key + "'");
      }
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') fail("expected ',' or '}'");
    }
    ++pos_;
    skip_ws();
    if (pos_ != s_.size()) fail("trailing characters after the dict");
    if (!h.has_descr || !h.has_fortran || !h.has_shape)
      fail("missing one of the keys 'descr', 'fortran_order', 'shape'");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    KVEVICT_FAIL("npy ", path_, ": malformed header at character ", pos_, " (", what, "): '", s_,
                 "'; expected NumPy's {'descr': ..., 'fortran_order': ..., 'shape': (...)}");
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n')) ++pos_;
  }
  void expect(char c) {
    skip_ws();
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string string_literal() {
    skip_ws();
    const char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string");
    const size_t end = s_.find(q, pos_ + 1);
    if (end == std::string::npos) fail("unterminated string");
    std::string out = s_.substr(pos_ + 1, end - pos_ - 1);
    pos_ = end + 1;
    return out;
  }
  bool bool_literal() {
    skip_ws();
    if (s_.compare(pos_, 4, "True") == 0) return pos_ += 4, true;
    if (s_.compare(pos_, 5, "False") == 0) return pos_ += 5, false;
    fail("expected True or False");
  }
  std::vector<int64_t> int_tuple() {
    expect('(');
    std::vector<int64_t> out;
    while (true) {
      skip_ws();
      if (peek() == ')') break;
      if (peek() < '0' || peek() > '9') fail("expected a non-negative integer");
      int64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) fail("dimension too large");
        v = v * 10 + (s_[pos_++] - '0');
      }
      out.push_back(v);
      skip_ws();
      if (peek() == ',') {
        ++pos_;
      } else if (peek() != ')') {
        fail("expected ',' or ')'");
      }
    }
    ++pos_;
    if (out.size() > 32) fail("more than 32 dimensions");
    return out;
  }

  const std::string& path_;
  const std::string& s_;
  size_t pos_ = 0;
};

DType descr_to_dtype(const std::string& path, const std::string& d, bool bf16) {
  if (d == "<f4") return DType::kF32;
  if (d == "<f2") return DType::kF16;
  if (d == "<f8") return DType::kF64;
  if (d == "<i4") return DType::kI32;
  if (d == "<i8") return DType::kI64;
  if (d == "|u1" || d == "<u1") return DType::kU8;
  if (d == "<u2") {
    KVEVICT_CHECK(bf16, "npy ", path,
                  ": dtype <u2 (uint16) is read only as bfloat16 bits, when the caller asks for "
                  "bf16 (npy::load(path, true); the command line's --bf16); kvevict has no uint16 "
                  "dtype");
    return DType::kBF16;
  }
  KVEVICT_FAIL("npy ", path, ": dtype '", d,
               "' is not supported; expected one of <f4 <f2 <f8 <i4 <i8 <u2 (bf16) |u1");
}

const char* dtype_to_descr(DType t) {
  switch (t) {
    case DType::kF32: return "<f4";
    case DType::kF16: return "<f2";
    case DType::kF64: return "<f8";
    case DType::kI32: return "<i4";
    case DType::kI64: return "<i8";
    case DType::kBF16: return "<u2";
    case DType::kU8: return "|u1";
  }
  KVEVICT_FAIL("npy: dtype code ", static_cast<int>(t), " cannot be saved");
}

}  // namespace

namespace {

// Reads and checks the preamble and header dict of an open file of `file_size` bytes.
ArrayHeader read_header(std::istream& in, const std::string& path, uint64_t file_size) {
  char pre[12] = {};
  in.read(pre, 10);
  KVEVICT_CHECK(in.gcount() == 10, "npy ", path, ": file has ", file_size,
                " bytes; expected at least the 10-byte .npy preamble");
  KVEVICT_CHECK(std::memcmp(pre, kMagic, kMagicLen) == 0, "npy ", path,
                ": bad magic; expected \\x93NUMPY");
  const int major = static_cast<uint8_t>(pre[6]);
  KVEVICT_CHECK(major >= 1 && major <= 3, "npy ", path, ": format version ", major, ".",
                static_cast<int>(static_cast<uint8_t>(pre[7])),
                " is not supported; expected 1, 2 or 3");
  uint64_t header_len = 0;
  uint64_t prefix = 10;
  if (major == 1) {
    header_len = static_cast<uint8_t>(pre[8]) | (static_cast<uint8_t>(pre[9]) << 8);
  } else {
    in.read(pre + 10, 2);
    KVEVICT_CHECK(in.gcount() == 2, "npy ", path, ": truncated in the header length");
    uint32_t len;
    std::memcpy(&len, pre + 8, 4);
    header_len = len;
    prefix = 12;
  }
  KVEVICT_CHECK(header_len <= file_size - prefix, "npy ", path, ": header length ", header_len,
                " exceeds the ", file_size - prefix, " bytes after the preamble (truncated file?)");
  std::string text(header_len, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_len));
  KVEVICT_CHECK(static_cast<uint64_t>(in.gcount()) == header_len, "npy ", path,
                ": truncated header");
  KVEVICT_CHECK(!text.empty() && text.back() == '\n', "npy ", path,
                ": header does not end with a newline; expected a NumPy header (truncated?)");
  text.pop_back();
  const Header h = DictParser(path, text).parse();
  ArrayHeader out;
  out.descr = h.descr;
  out.fortran_order = h.fortran;
  out.shape = h.shape;
  out.data_offset = prefix + header_len;
  out.file_size = file_size;
  return out;
}

std::ifstream open_input(const std::string& path, uint64_t* size) {
  *size = io::check_input_file(path, "npy");  // a directory is refused here, not sized
  std::ifstream in(path, std::ios::binary);
  KVEVICT_CHECK(in.good(), "npy ", path, ": cannot open (", std::strerror(errno), ")");
  return in;
}

}  // namespace

ArrayHeader read_header(const std::string& path) {
  uint64_t size = 0;
  std::ifstream in = open_input(path, &size);
  return read_header(in, path, size);
}

HostTensor load(const std::string& path, bool bf16) {
  uint64_t file_size = 0;
  std::ifstream in = open_input(path, &file_size);
  const ArrayHeader h = read_header(in, path, file_size);
  KVEVICT_CHECK(!h.fortran_order, "npy ", path,
                ": fortran_order is True; expected C order (save with "
                "np.ascontiguousarray)");
  const DType dtype = descr_to_dtype(path, h.descr, bf16);
  int64_t numel = 1;
  for (int64_t d : h.shape)
    KVEVICT_CHECK(!__builtin_mul_overflow(numel, d, &numel), "npy ", path,
                  ": shape overflows int64");
  uint64_t nbytes = 0;
  KVEVICT_CHECK(!__builtin_mul_overflow(static_cast<uint64_t>(numel), dtype_size(dtype), &nbytes),
                "npy ", path, ": data size overflows");
  KVEVICT_CHECK(nbytes == file_size - h.data_offset, "npy ", path, ": shape and dtype ", h.descr,
                " need ", nbytes, " data bytes but the file has ", file_size - h.data_offset,
                "; expected them to match");
  HostTensor t(dtype, h.shape);
  if (nbytes == 0) return t;
  in.read(static_cast<char*>(t.data()), static_cast<std::streamsize>(nbytes));
  KVEVICT_CHECK(static_cast<uint64_t>(in.gcount()) == nbytes, "npy ", path, ": short read of data");
  return t;
}

namespace {

// The header ("\x93NUMPY", version, length, dict, padding) of an array; throws for a negative
// dimension.
std::string header_bytes(const std::string& path, DType dtype, const std::vector<int64_t>& shape,
                         size_t* data_bytes) {
  int64_t numel = 1;
  std::string shape_str = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    KVEVICT_CHECK(shape[i] >= 0, "npy ", path, ": negative dimension ", shape[i]);
    numel *= shape[i];
    shape_str += std::to_string(shape[i]) + (shape.size() == 1      ? ",)"
                                             : i + 1 < shape.size() ? ", "
                                                                    : ")");
  }
  if (shape.empty()) shape_str += ")";
  std::string header = std::string("{'descr': '") + dtype_to_descr(dtype) +
                       "', 'fortran_order': False, 'shape': " + shape_str + ", }";
  // Pad with spaces so the data starts at a multiple of 64 bytes, ending in '\n' (NumPy's rule).
  const bool v2 = header.size() + 11 > 65535;
  const size_t prefix = v2 ? 12 : 10;
  const size_t total = (prefix + header.size() + 1 + 63) / 64 * 64;
  header.append(total - prefix - header.size() - 1, ' ');
  header.push_back('\n');

  std::string bytes(kMagic, kMagicLen);
  bytes.push_back(static_cast<char>(v2 ? 2 : 1));
  bytes.push_back(0);
  const uint32_t hl = static_cast<uint32_t>(header.size());
  bytes.push_back(static_cast<char>(hl & 0xFF));
  bytes.push_back(static_cast<char>((hl >> 8) & 0xFF));
  if (v2) {
    bytes.push_back(static_cast<char>((hl >> 16) & 0xFF));
    bytes.push_back(static_cast<char>((hl >> 24) & 0xFF));
  }
  *data_bytes = static_cast<size_t>(numel) * dtype_size(dtype);
  return bytes + header;
}

const TensorView& host_contiguous(const std::string& path, const TensorView& t) {
  KVEVICT_CHECK(t.device == Device::kCpu, "npy ", path,
                ": tensor is on the GPU; expected host memory");
  KVEVICT_CHECK(t.is_contiguous(), "npy ", path, ": tensor ", t.shape_str(), " is not contiguous");
  return t;
}

}  // namespace

void stage(io::StagedFiles& files, const std::string& path, const std::string& label, DType dtype,
           const std::vector<int64_t>& shape, const void* data) {
  size_t data_bytes = 0;
  const std::string header = header_bytes(path, dtype, shape, &data_bytes);
  files.add(path, label, {{header.data(), header.size()}, {data, data_bytes}});
}

void stage(io::StagedFiles& files, const std::string& path, const std::string& label,
           const TensorView& t) {
  host_contiguous(path, t);
  stage(files, path, label, t.dtype,
        std::vector<int64_t>(t.shape.begin(), t.shape.begin() + t.ndim), t.data);
}

void save(const std::string& path, DType dtype, const std::vector<int64_t>& shape,
          const void* data) {
  io::StagedFiles files;
  stage(files, path, "npy " + path, dtype, shape, data);
  files.commit();
}

void save(const std::string& path, const HostTensor& t) {
  save(path, t.dtype(), t.shape(), t.data());
}

void save(const std::string& path, const TensorView& t) {
  host_contiguous(path, t);
  save(path, t.dtype, std::vector<int64_t>(t.shape.begin(), t.shape.begin() + t.ndim), t.data);
}

}  // namespace kvevict::npy
