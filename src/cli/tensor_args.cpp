#include "cli/tensor_args.h"

#include "kvevict/error.h"
#include "kvevict/io/npy.h"
#include "kvevict/io/safetensors.h"

namespace kvevict::cli {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Where the file part of "file.safetensors[:name]" ends, or npos for any other spec.
size_t safetensors_path_end(const std::string& spec) {
  static const std::string kExt = ".safetensors";
  const size_t at = spec.find(kExt);
  return at == std::string::npos ? at : at + kExt.size();
}

HostTensor load_safetensors(const std::string& spec, size_t end, const char* what) {
  const std::string path = spec.substr(0, end);
  const auto file = safetensors::File::open(path);
  if (end < spec.size()) return file->load(spec.substr(end + 1));
  KVEVICT_CHECK(file->tensors().size() == 1, what, " ", path, " holds ", file->tensors().size(),
                " tensors [", file->names(), "]; name the one to read as ", path, ":NAME");
  return file->load(file->tensors()[0].name);
}

HostTensor load_npy(const std::string& path, const char* what, bool bf16) {
  // kvevict has no uint16 dtype: <u2 arrays are bfloat16 bits only when the user says so.
  KVEVICT_CHECK(bf16 || npy::read_header(path).descr != "<u2", what, " ", path,
                " holds uint16 (<u2) data; pass --bf16 to read it as bfloat16 bits (NumPy "
                "stores bfloat16 that way), or save it as float32 or float16");
  return npy::load(path, bf16);
}

HostTensor load_tensor_file(const std::string& spec, const char* what, bool bf16) {
  try {
    const size_t end = safetensors_path_end(spec);
    if (end != std::string::npos) {
      KVEVICT_CHECK(end == spec.size() || spec[end] == ':', what, " '", spec,
                    "' is not 'file.safetensors' or 'file.safetensors:tensor_name'");
      return load_safetensors(spec, end, what);
    }
    KVEVICT_CHECK(ends_with(spec, ".npy"), what, " '", spec,
                  "' has an unknown extension; expected .npy or .safetensors[:name]");
    return load_npy(spec, what, bf16);
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.rfind(what, 0) == 0) throw;  // already names the option
    KVEVICT_FAIL(what, ": ", msg);
  }
}

}  // namespace

std::string tensor_file(const std::string& spec) {
  const size_t end = safetensors_path_end(spec);
  return end == std::string::npos ? spec : spec.substr(0, end);
}

HostTensor load_tensor_arg(const std::string& spec, const char* what, bool bf16) {
  KVEVICT_CHECK(!spec.empty(), what, " is empty; expected a .npy or .safetensors path");
  HostTensor t = load_tensor_file(spec, what, bf16);
  // The files may hold any rank; kvevict's tensors have at most kMaxDims (a 5-D array failed
  // later with "tensor rank 5 exceeds the maximum 4", naming neither the option nor the file).
  std::string shape;
  for (int64_t d : t.shape()) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  KVEVICT_CHECK(t.shape().size() <= static_cast<size_t>(kMaxDims), what, " ", spec, " holds a ",
                t.shape().size(), "-dim array [", shape, "]; expected at most ", kMaxDims,
                " dims ([Hkv, n, d] keys and values, [Hq, m, d] queries, [D, Hq*d] wo)");
  return t;
}

}  // namespace kvevict::cli
