// Loading libkvevict_cuda (cuda_library.h).
#include "core/cuda_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

#ifndef KVEVICT_CUDA_SONAME  // set by src/CMakeLists.txt
#define KVEVICT_CUDA_SONAME "libkvevict_cuda.so"
#endif

namespace kvevict::detail {
namespace {

// The directory of the library this function is in ("" when unknown).
std::string own_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&own_directory), &info) == 0 || info.dli_fname == nullptr)
    return "";
  const std::string path = info.dli_fname;
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

struct Library {
  void* handle = nullptr;
  std::string path;   // what was loaded
  std::string error;  // why nothing was, when handle is null
};

Library load() {
  Library lib;
  std::string last;
  auto attempt = [&](const std::string& path) -> bool {
    lib.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib.handle == nullptr) {
      const char* e = dlerror();
      last = e ? e : "unknown error";
      return false;
    }
    lib.path = path;
    return true;
  };
  if (const char* env = std::getenv("KVEVICT_CUDA_LIBRARY"); env != nullptr && env[0] != '\0') {
    if (!attempt(env))
      lib.error =
          "KVEVICT_CUDA_LIBRARY=" + std::string(env) + " could not be loaded (" + last + ")";
    return lib;
  }
  // By its SONAME (cmake/Version.cmake: libkvevict_cuda.so.0.1), the file a runtime-only install
  // has; the unversioned name is the development link.
  const std::string name = KVEVICT_CUDA_SONAME;
  const std::string dir = own_directory();
  if (!dir.empty() && attempt(dir + name)) return lib;
  if (attempt(name)) return lib;
  // A missing libkvevict_cuda means a build without CUDA; a library that is there but fails to
  // load usually misses the CUDA runtime (libcudart / libcublas).
  if (last.find(name + ": cannot open") != std::string::npos)
    lib.error =
        "this build has no CUDA runtime (configure with KVEVICT_CUDA=ON and a CUDA "
        "toolkit)";
  else
    lib.error = "the CUDA runtime library could not be loaded (" + last + ")";
  return lib;
}

}  // namespace

void* cuda_library_symbol(const char* symbol, std::string* why) {
  static std::once_flag once;
  static Library lib;
  std::call_once(once, [] { lib = load(); });
  if (lib.handle == nullptr) {
    if (why) *why = lib.error;
    return nullptr;
  }
  void* p = dlsym(lib.handle, symbol);
  if (p == nullptr && why) *why = lib.path + " has no entry " + symbol;
  return p;
}

}  // namespace kvevict::detail
