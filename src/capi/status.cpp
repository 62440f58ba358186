// Status codes, the per-thread error message, version and threads of the C API.
#include <new>
#include <string>

#include "capi/capi_internal.h"
#include "core/parallel.h"
#include "kvevict/version.h"  // generated from the project version (cmake/Version.cmake)

namespace kvevict::capi {
namespace {

thread_local std::string last_error;

bool starts_with(const char* s, const char* prefix) {
  return std::string(s).rfind(prefix, 0) == 0;
}

void set_last_error(const char* function, const char* message) noexcept {
  try {
    last_error = std::string(function) + ": " + message;
  } catch (...) {
    last_error.clear();  // no memory for the message: the status still says what happened
  }
}

}  // namespace

void clear_last_error() noexcept {
  last_error.clear();
}

kvevict_status status_of_current_exception(const char* function) noexcept {
  try {
    throw;
  } catch (const Unavailable& e) {
    set_last_error(function, e.what());
    return KVEVICT_ERROR_UNAVAILABLE;
  } catch (const Error& e) {
    set_last_error(function, e.what());
    // Every failed CUDA / cuBLAS call throws through src/cuda/check.h, whose messages begin so.
    if (starts_with(e.what(), "CUDA call ") || starts_with(e.what(), "cuBLAS call "))
      return KVEVICT_ERROR_DEVICE;
    return KVEVICT_ERROR_INVALID_ARGUMENT;
  } catch (const std::bad_alloc&) {
    set_last_error(function, "out of host memory");
    return KVEVICT_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(function, e.what());
    return KVEVICT_ERROR_INTERNAL;
  } catch (...) {
    set_last_error(function, "unknown exception");
    return KVEVICT_ERROR_INTERNAL;
  }
}

}  // namespace kvevict::capi

using kvevict::capi::guarded;

extern "C" {

const char* kvevict_status_name(kvevict_status status) {
  switch (status) {
    case KVEVICT_OK: return "ok";
    case KVEVICT_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case KVEVICT_ERROR_UNAVAILABLE: return "unavailable";
    case KVEVICT_ERROR_OUT_OF_MEMORY: return "out of memory";
    case KVEVICT_ERROR_DEVICE: return "device error";
    case KVEVICT_ERROR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

const char* kvevict_last_error(void) {
  return kvevict::capi::last_error.c_str();
}

const char* kvevict_version(void) {
  return KVEVICT_VERSION_STRING;
}

int32_t kvevict_c_api_version(void) {
  return KVEVICT_C_API_VERSION;
}

kvevict_status kvevict_set_num_threads(int32_t n) {
  return guarded(__func__, [&] {
    KVEVICT_CHECK(n >= 0, "thread count ", n, " is negative; expected 0 (every hardware thread) ",
                  "or a positive count");
    kvevict::set_num_threads(n);
  });
}

int32_t kvevict_num_threads(void) {
  return kvevict::num_threads();
}

}  // extern "C"
