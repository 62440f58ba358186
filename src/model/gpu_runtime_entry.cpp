// Finding the GPU runtime (gpu_runtime_entry.h). It lives in libkvevict_cuda, the one library that
// links the CUDA runtime; the core and the CPU runtime do not, so a CPU-only machine runs every
// CPU command. When the program was linked with libkvevict_cuda (tests, library users, a static
// build) its entry function is already here; otherwise the first `--device cuda` loads the
// library (core/cuda_library.h). What fails (no library in this build, a missing CUDA runtime,
// no device) is said.
#include "model/gpu_runtime_entry.h"

#include <string>

#include "core/cuda_library.h"

// Defined in libkvevict_cuda (src/model_cuda/gpu_runtime.cpp); null unless linked in.
extern "C" const kvevict::detail::GpuRuntimeEntry* kvevict_gpu_runtime_entry_v1(
    char* why, unsigned long why_bytes) __attribute__((weak));

namespace kvevict::detail {

using EntryFn = const GpuRuntimeEntry* (*)(char*, unsigned long);

const GpuRuntimeEntry* gpu_runtime_entry(std::string* why) {
  EntryFn fn = kvevict_gpu_runtime_entry_v1;
  std::string error;
  if (fn == nullptr)
    fn = reinterpret_cast<EntryFn>(cuda_library_symbol("kvevict_gpu_runtime_entry_v1", &error));
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
