// Runtime values to template arguments for the kernel launchers (FlashInfer's DISPATCH_* macros as
// functions): each calls f with the value as a compile-time constant and returns f's cudaError_t;
// a value outside the list gives cudaErrorInvalidValue (the launchers check what they support
// before). with_pair_term (pass_terms.cuh) does the same for the scoring terms.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "cuda/launchers.h"

namespace kvevict::cuda::detail {

template <class T>
struct TypeTag {
  using type = T;
};

// f(TypeTag<__nv_bfloat16>{}) or f(TypeTag<__half>{}): the 16-bit element type of e.
template <class F>
cudaError_t with_elem(Elem e, F&& f) {
  return e == Elem::kBF16 ? f(TypeTag<__nv_bfloat16>{}) : f(TypeTag<__half>{});
}

// f(std::integral_constant<int, V>{}) for the V of Vs that equals v (head dims, slabs, rows).
template <int... Vs, class F>
cudaError_t with_int(int v, F&& f) {
  cudaError_t err = cudaErrorInvalidValue;
  (void)((v == Vs && ((err = f(std::integral_constant<int, Vs>{})), true)) || ...);
  return err;
}

}  // namespace kvevict::cuda::detail
