// What the C API's files share (include/kvevict/kvevict.h): the opaque handles, the conversions
// from the C structs to the C++ views, and the guard that turns every exception into a status
// and a message, so none crosses the C boundary.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "kvevict/backend.h"
#include "kvevict/cache.h"
#include "kvevict/decode_evict.h"
#include "kvevict/error.h"
#include "kvevict/evict.h"
#include "kvevict/kvevict.h"
#include "kvevict/select.h"
#include "kvevict/tensor.h"

struct kvevict_backend {
  std::shared_ptr<kvevict::Backend> impl;
};

struct kvevict_selection {
  kvevict::Selection impl;
};

struct kvevict_layer_evictor {
  std::shared_ptr<kvevict::Backend> backend;  // declared first: outlives `impl`, which refers to it
  kvevict::LayerEvictor impl;
  std::string description;
};

struct kvevict_decode_evictor {
  std::shared_ptr<kvevict::Backend> backend;  // null: the evictor owns a host backend
  kvevict::DecodeEvictor impl;
};

namespace kvevict::capi {

// What was asked for is not in this build or on this machine: KVEVICT_ERROR_UNAVAILABLE.
class Unavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The status of the exception being handled, with its message stored as kvevict_last_error()
// prefixed by `function`. Call only inside a catch block.
kvevict_status status_of_current_exception(const char* function) noexcept;
void clear_last_error() noexcept;

// Runs `body`; KVEVICT_OK, or the status and message of what it threw.
template <class Body>
kvevict_status guarded(const char* function, Body&& body) noexcept {
  try {
    std::forward<Body>(body)();
    clear_last_error();
    return KVEVICT_OK;
  } catch (...) {
    return status_of_current_exception(function);
  }
}

// Throws naming `what` when `p` is null.
template <class T>
T* require(T* p, const char* what) {
  KVEVICT_CHECK(p != nullptr, what, " is NULL; expected a valid pointer");
  return p;
}

// Option structs begin with struct_size (kvevict.h): one smaller than this version's is refused,
// naming the function `init` that fills it.
template <class Options>
void check_struct_size(const Options& o, const char* init) {
  KVEVICT_CHECK(o.struct_size >= sizeof(Options), "options.struct_size ", o.struct_size,
                " is too small; expected ", sizeof(Options), " (initialize the options with ", init,
                ")");
}

DType dtype_from_c(int32_t dtype, const char* what);
int32_t dtype_to_c(DType dtype);
Device device_from_c(int32_t device, const char* what);
int32_t device_to_c(Device device);
// A view of a C tensor (all-zero strides: row-major contiguous); an empty view for NULL.
TensorView view_from_c(const kvevict_tensor* t, const char* what);
kvevict_tensor view_to_c(const TensorView& view);
// A view of a C cache (throws for NULL); the C++ call it goes to validates it.
KVLayerView layer_from_c(const kvevict_kv_layer* layer, const char* what);

// A backend by name: "cpu", "reference", or "cuda" on `stream` (from libkvevict_cuda, linked in or
// loaded); throws Unavailable when the cuda backend cannot be had.
std::shared_ptr<Backend> make_backend(const std::string& name, void* stream);

}  // namespace kvevict::capi
