// Finding the GPU runtime (gpu_runtime_entry.h). It lives in libkvevict_cuda, the one library that
// links the CUDA runtime; the core and the CPU runtime do not, so a CPU-only machine runs every
// CPU command. When the program was linked with libkvevict_cuda (tests, library users, a static
// build) its entry function is already here; otherwise the first `--device cuda` loads the library:
// $KVEVICT_CUDA_LIBRARY if set, else libkvevict_cuda.so next to this library, else the system's
// search path. What fails (no library in this build, a missing CUDA runtime, no device) is said.
#include "model/gpu_runtime_entry.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

// Defined in libkvevict_cuda (src/model_cuda/gpu_runtime.cpp); null unless linked in.
extern "C" const kvevict::detail::GpuRuntimeEntry* kvevict_gpu_runtime_entry_v1(
    char* why, unsigned long why_bytes) __attribute__((weak));

namespace kvevict::detail {
namespace {

using EntryFn = const GpuRuntimeEntry* (*)(char*, unsigned long);

// The directory of the library this function is in ("" when unknown).
std::string own_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&own_directory), &info) == 0 || info.dli_fname == nullptr)
    return "";
  const std::string path = info.dli_fname;
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

struct Loaded {
  EntryFn fn = nullptr;
  std::string error;
};

Loaded load_library() {
  Loaded r;
  std::string tried;
  std::string last;
  auto attempt = [&](const std::string& path) -> bool {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* e = dlerror();
      last = e ? e : "unknown error";
      tried += (tried.empty() ? "" : ", ") + path;
      return false;
    }
    r.fn = reinterpret_cast<EntryFn>(dlsym(h, "kvevict_gpu_runtime_entry_v1"));
    if (r.fn == nullptr) last = path + " has no kvevict GPU runtime entry";
    return r.fn != nullptr;
  };
  if (const char* env = std::getenv("KVEVICT_CUDA_LIBRARY"); env != nullptr && env[0] != '\0') {
    if (!attempt(env))
      r.error = "KVEVICT_CUDA_LIBRARY=" + std::string(env) + " could not be loaded (" + last + ")";
    return r;
  }
  const std::string dir = own_directory();
  if (!dir.empty() && attempt(dir + "libkvevict_cuda.so")) return r;
  if (attempt("libkvevict_cuda.so")) return r;
  // A missing libkvevict_cuda means a build without CUDA; a library that is there but fails to
  // load usually misses the CUDA runtime (libcudart / libcublas).
  if (last.find("libkvevict_cuda.so: cannot open") != std::string::npos)
    r.error = "this build has no CUDA runtime (configure with KVEVICT_CUDA=ON and a CUDA "
              "toolkit)";
  else
    r.error = "the CUDA runtime library could not be loaded (" + last + ")";
  return r;
}

}  // namespace

const GpuRuntimeEntry* gpu_runtime_entry(std::string* why) {
  EntryFn fn = kvevict_gpu_runtime_entry_v1;
  std::string error;
  if (fn == nullptr) {
    static std::once_flag once;
    static Loaded loaded;
    std::call_once(once, [] { loaded = load_library(); });
    fn = loaded.fn;
    error = loaded.error;
  }
  if (fn == nullptr) {
    if (why) *why = error;
    return nullptr;
  }
  char buf[512] = {};
  const GpuRuntimeEntry* e = fn(buf, sizeof(buf));
  if (e == nullptr && why) *why = buf;
  return e;
}

}  // namespace kvevict::detail
