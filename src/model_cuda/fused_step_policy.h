// The fused decode step's two choices, apart from both candidates so an A/B changes one value and
// nothing else: which decode steps are fused (KVEVICT_DECODE_FUSED) and which of their projections
// the small-batch GEMV of src/cuda/decode_gemv.cu takes over from cuBLAS, with which of its two
// kernels (KVEVICT_GEMV_ROUTE).
//
// Measured on an H100 (docs/RESULTS.md "2026-12-06 (d)", graph-replayed decode, random weights):
// at batch 1 the fused step gives SmolLM2's shape +38% tokens/s and Gemma 3's +15%, and ties on
// the 8B (whose projections all go to cuBLAS); from batch 2 the GEMV is slower than cuBLAS on every
// projection shape, and the fused step wins on one model and loses on the other. Hence the
// defaults: fused at batch 1, the GEMV for matrices of at most kGemvSmallBytes (and for any at
// batch 1 whose rows fit its input tile, below). A fused and an unfused step round differently,
// so runtimes made with RuntimeOptions::batch_invariant_decode (kvevict eval and ppl) take kOff
// where the mode is kBatchOne.
#pragma once

#include <string>

#include "cuda/model_launchers.h"

namespace kvevict::gpu {

enum class FusedStep {
  kOff,       // every step: cuBLAS, separate norm / activation / merge launches
  kBatchOne,  // steps of one sequence fused, larger batches not (the default)
  kOn,        // every step of up to 8 sequences fused
};

enum class GemvRoute {
  kAll,        // every projection it supports; the tensor-core kernel from batch 2
  kCudaCores,  // every projection it supports; the CUDA-core kernel at every batch
  kSmall,      // weights of at most kGemvSmallBytes, or any at batch 1 with K <= kGemvTileK
               // (CUDA-core kernel); others: cuBLAS
};

// Weight bytes up to which kSmall keeps a projection on the GEMV: about 3 us of reading at an
// H100's 3 TB/s, the order of the launch and norm kernels the fused projection saves. Larger
// matrices stream faster through cuBLAS (gpu_gemv_bench, H100: 5-12% on the 8B's at batch 1,
// 1.3-2.3x from batch 2).
// At batch 1 a row of at most kGemvTileK columns (the weights waiting in registers, each byte read
// once, the norm fused) stays on the GEMV whatever the matrix's size: the output projections of
// SmolLM2 (56 MB) and Gemma 3 (335 MB) gave +0.4-0.8% tokens/s there (H100, docs/RESULTS.md
// "2026-12-07 (d)", KVEVICT_GEMV_ROUTE=all against small).
inline constexpr long long kGemvSmallBytes = 8ll << 20;

// KVEVICT_DECODE_FUSED: 0 (off), 1 (on), auto (batch one); unset or empty: auto.
// KVEVICT_GEMV_ROUTE: all, cores, small; unset or empty: small.
// Any other value throws kvevict::Error naming it and the accepted values (the CLI: exit 2).
FusedStep fused_step_from_env();
FusedStep parse_fused_step(const std::string& value);
GemvRoute gemv_route_from_env();
GemvRoute parse_gemv_route(const std::string& name);
const char* gemv_route_name(GemvRoute route);

// KVEVICT_GEMV_PRELOAD: 1 (the batch-1 GEMV's weights go into registers before its dependency
// wait: GemvArgs::preload), 0 (into L2 only: the A/B); unset or empty: 1. H100, 2026-12-06 (i):
// the fused step's SmolLM2 shape 0.745 -> 0.606 ms a token at batch 1, Gemma 3's 0.897 -> 0.800.
// Any other value throws as above.
bool gemv_preload_from_env();
bool parse_gemv_preload(const std::string& value);

// KVEVICT_GEMV_FOLDS: 1 (gemma3's fused batch-1 step folds each post-norm + residual add into the
// next GEMV that norms x and the per-head q / k norms into the q|k|v launch: five launches a layer
// instead of eight; GemvArgs::post_in, head_arrivals), 0 (their own launches); unset or empty: 0.
// Same bits either way; H100, 2026-12-07 (h): 1 is 2.3% slower at a 256-token context, 0.7%
// faster at 4K (each fold GEMV's longer path after its dependency wait costs more than the three
// launches a layer it saves: docs/GPU_NOTES.md). Any other value throws as above.
bool gemv_folds_from_env();
bool parse_gemv_folds(const std::string& value);

// Whether a decode step of `batch` sequences is fused under mode.
bool step_is_fused(FusedStep mode, int batch);

// True when the GEMV takes projection a under route (setting a->cuda_cores to the kernel it
// picks); false: the caller runs its cuBLAS path. Shapes the GEMV does not support are never
// taken (detail::gemv_supported).
bool gemv_takes(GemvRoute route, detail::GemvArgs* a);

}  // namespace kvevict::gpu
