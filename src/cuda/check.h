// The one CUDA error check of the tree (host code of the library and the GPU runtime): a failed
// CUDA or cuBLAS call throws kvevict::Error naming the call and the error. Launchers return
// cudaError_t; API layers and the runtime wrap every call in these.
#pragma once

#include <cuda_runtime.h>

#include "kvevict/error.h"

#define KVEVICT_CUDA_CHECK(call)                                       \
  do {                                                                 \
    const cudaError_t kvevict_err_ = (call);                           \
    KVEVICT_CHECK(kvevict_err_ == cudaSuccess, "CUDA call ", #call,    \
                  " failed: ", cudaGetErrorString(kvevict_err_), " (", \
                  static_cast<int>(kvevict_err_), ")");                \
  } while (0)

// cuBLAS status checks need <cublas_v2.h> before this header's users expand the macro.
#define KVEVICT_CUBLAS_CHECK(call)                                             \
  do {                                                                         \
    const cublasStatus_t kvevict_st_ = (call);                                 \
    KVEVICT_CHECK(kvevict_st_ == CUBLAS_STATUS_SUCCESS, "cuBLAS call ", #call, \
                  " failed: ", cublasGetStatusString(kvevict_st_), " (",       \
                  static_cast<int>(kvevict_st_), ")");                         \
  } while (0)
