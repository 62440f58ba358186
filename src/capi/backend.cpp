// Backends by name and the cache calls of the C API.
#include <string>

#include "capi/capi_internal.h"
#include "core/cuda_library.h"

// Defined in libkvevict_cuda (src/capi/cuda_entry.cpp); null unless the program is linked with it.
extern "C" kvevict::Backend* kvevict_cuda_backend_create_v1(void* stream, char* why,
                                                            unsigned long why_bytes)
    __attribute__((weak));

namespace kvevict::capi {
namespace {

using CudaBackendFn = Backend* (*)(void*, char*, unsigned long);

std::shared_ptr<Backend> make_cuda(void* stream) {
  CudaBackendFn fn = kvevict_cuda_backend_create_v1;
  if (fn == nullptr) {
    std::string why;
    fn = reinterpret_cast<CudaBackendFn>(
        detail::cuda_library_symbol("kvevict_cuda_backend_create_v1", &why));
    if (fn == nullptr) throw Unavailable("the cuda backend is unavailable: " + why);
  }
  char why[512] = {};
  Backend* b = fn(stream, why, sizeof(why));
  if (b == nullptr) throw Unavailable(std::string("the cuda backend is unavailable: ") + why);
  return std::shared_ptr<Backend>(b);
}

}  // namespace

std::shared_ptr<Backend> make_backend(const std::string& name, void* stream) {
  if (name == "cpu" || name == "reference") {
    KVEVICT_CHECK(stream == nullptr, "the ", name, " backend runs on the host and takes no ",
                  "stream; expected NULL");
    return name == "cpu" ? std::shared_ptr<Backend>(make_cpu_backend())
                         : std::shared_ptr<Backend>(make_reference_backend());
  }
  if (name == "cuda") return make_cuda(stream);
  KVEVICT_FAIL("backend '", name, "' is unknown; expected cpu, reference or cuda");
}

}  // namespace kvevict::capi

using kvevict::capi::guarded;
using kvevict::capi::require;

extern "C" {

kvevict_status kvevict_backend_create(const char* name, void* stream, kvevict_backend** out) {
  return guarded(__func__, [&] {
    require(name, "name");
    require(out, "out");
    auto b = std::make_unique<kvevict_backend>();
    b->impl = kvevict::capi::make_backend(name, stream);
    *out = b.release();
  });
}

void kvevict_backend_destroy(kvevict_backend* backend) {
  delete backend;
}

const char* kvevict_backend_name(const kvevict_backend* backend) {
  return backend ? backend->impl->name() : nullptr;
}

int32_t kvevict_backend_device(const kvevict_backend* backend) {
  return backend ? kvevict::capi::device_to_c(backend->impl->device()) : -1;
}

kvevict_status kvevict_backend_synchronize(kvevict_backend* backend) {
  return guarded(__func__, [&] { require(backend, "backend")->impl->synchronize(); });
}

kvevict_status kvevict_backend_plan_segments(kvevict_backend* backend,
                                             const kvevict_selection* selection, int64_t slack,
                                             const kvevict_kv_layer* out) {
  return guarded(__func__, [&] {
    require(backend, "backend");
    require(selection, "selection");
    KVEVICT_CHECK(slack >= 0, "slack ", slack, " is negative; expected >= 0");
    backend->impl->plan_segments(selection->impl, slack, kvevict::capi::layer_from_c(out, "out"));
  });
}

kvevict_status kvevict_cache_append(const kvevict_kv_layer* cache, const kvevict_tensor* k_row,
                                    const kvevict_tensor* v_row, int32_t pos) {
  return guarded(__func__, [&] {
    kvevict::cache_append(kvevict::capi::layer_from_c(cache, "cache"),
                          kvevict::capi::view_from_c(require(k_row, "k_row"), "k_row"),
                          kvevict::capi::view_from_c(require(v_row, "v_row"), "v_row"), pos);
  });
}

}  // extern "C"
