// Which projections of the fused decode step (GpuForward::set_decode_fused) the small-batch GEMV
// of src/cuda/decode_gemv.cu takes over from cuBLAS, and with which of its two kernels. The rule
// lives here, apart from both candidates, so an A/B of routes changes one value
// (KVEVICT_GEMV_ROUTE) and nothing else.
#pragma once

#include <string>

#include "cuda/model_launchers.h"

namespace kvevict::gpu {

enum class GemvRoute {
  kAll,        // every projection it supports; the tensor-core kernel from batch 2
  kCudaCores,  // every projection it supports; the CUDA-core kernel at every batch
  kSmall,      // weights of at most kGemvSmallBytes only (CUDA-core kernel); larger ones: cuBLAS
};

// Weight bytes up to which kSmall keeps a projection on the GEMV: about 3 us of reading at an
// H100's 3 TB/s, the order of the launch and norm kernels the fused projection saves. Larger
// matrices stream faster through cuBLAS (gpu_gemv_bench, H100: 5-12% on the 8B's at batch 1,
// 1.3-2.3x from batch 2).
inline constexpr long long kGemvSmallBytes = 8ll << 20;

// The route named by KVEVICT_GEMV_ROUTE (all | cores | small; unset or empty: the default, small).
// Any other value throws std::invalid_argument naming it and the accepted names.
GemvRoute gemv_route_from_env();
GemvRoute parse_gemv_route(const std::string& name);
const char* gemv_route_name(GemvRoute route);

// True when the GEMV takes projection a under route (setting a->cuda_cores to the kernel it
// picks); false: the caller runs its cuBLAS path. Shapes the GEMV does not support are never
// taken (detail::gemv_supported).
bool gemv_takes(GemvRoute route, detail::GemvArgs* a);

}  // namespace kvevict::gpu
