// kvevict::cuda from an installed kvevict built with CUDA (find_package(kvevict COMPONENTS
// cuda)): the cuda backend behind the same Backend interface as the cpu one. Without a device it
// says so and exits 0, so it also runs on a build machine.
#include <cstdio>

#include "kvevict/cuda/backend.h"
#include "kvevict/cuda/score.h"
#include "kvevict/error.h"

int main() {
  if (!kvevict::cuda::device_available()) {
    std::printf("kvevict::cuda is linked; no CUDA device is visible here\n");
    return 0;
  }
  try {
    auto backend = kvevict::make_cuda_backend();  // the legacy default stream
    const kvevict::cuda::DeviceInfo info = kvevict::cuda::device_info();
    std::printf("%s backend on %s (%d SMs)\n", backend->name(), info.name, info.sm_count);
    return 0;
  } catch (const kvevict::Error& e) {
    std::fprintf(stderr, "cuda_backend: %s\n", e.what());
    return 2;
  }
}
