// The C API's way to the cuda backend (kvevict_backend_create("cuda", ...)): compiled into
// libkvevict_cuda, found by src/capi/backend.cpp directly when the program links that library,
// else through core/cuda_library.h. Both sides are this project's own build, so a C++ object may
// cross; exceptions do not.
#include <cstdio>
#include <exception>

#include "kvevict/cuda/backend.h"

extern "C" __attribute__((visibility("default"))) kvevict::Backend* kvevict_cuda_backend_create_v1(
    void* stream, char* why, unsigned long why_bytes) {
  const char* reason = "the CUDA runtime failed to start";
  try {
    return kvevict::make_cuda_backend(stream).release();
  } catch (const std::exception& e) {  // no device, or no driver
    if (why != nullptr && why_bytes > 0) std::snprintf(why, why_bytes, "%s", e.what());
    return nullptr;
  } catch (...) {
  }
  if (why != nullptr && why_bytes > 0) std::snprintf(why, why_bytes, "%s", reason);
  return nullptr;
}
