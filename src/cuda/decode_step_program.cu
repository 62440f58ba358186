// The persistent decode step: the layer launches of a fused batch-1 decode step (the GEMVs of
// decode_gemv.cu and the tensor-core decode attention with its in-launch merge) run as the phases
// of ONE cooperative launch. Every block stays resident for the whole step and takes the virtual
// blocks of each phase in turn (block b runs phase blocks b, b + grid, ...); where one kernel of
// the fused step would end and the next begin, the grid passes a barrier (common.cuh grid_barrier,
// or cooperative groups' grid.sync when no barrier state is given). Before it waits there,
// each block sends the weight rows of its next phase towards L2, as the fused step's programmatic
// dependents do before griddepcontrol.wait.
//
// Why: at batch 1 a small model's step is launch-bound (SmolLM2: 150 launches a step, ~5 us each
// on an H100, while its weights take ~0.1 ms to read). A grid barrier replaces a kernel's drain,
// the next launch and its dependency wait.
//
// The phases run the same block bodies as the fused step's kernels (decode_gemv_block.cuh,
// decode_attention_block.cuh), so the step's outputs are the same bits.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/decode_attention_block.cuh"
#include "cuda/decode_gemv_block.cuh"
#include "cuda/model_launchers.h"
#include "cuda/window_traits.cuh"

namespace kvevict::gpu::detail {
namespace {

namespace cg = cooperative_groups;
using decode_attn::DecodeAttentionParams;

// The phase kinds of a program: the GEMV variants of a decode layer and the attention.
enum class Code : int32_t {
  kQkvRopeAppend,  // norm, q|k|v, RoPE, append
  kResidualAdd,    // o / down projection added into the residual stream
  kGatedSilu,      // norm, gate|up, SiLU(g) u
  kGatedGelu,      // norm, gate|up, GELU-tanh(g) u
  kNormF32,        // norm, projection to f32 (the logits)
  kAttention,      // decode attention, splits merged by each segment's last block
};

// One phase as the kernel reads it (zero-filled first: an image's bytes depend on its values
// only, so two programs compare with memcmp).
struct DeviceOp {
  Code code;
  int blocks;  // virtual blocks of the phase
  GemvArgs gemv;
  DecodeAttentionParams attention;
};

constexpr int kThreads = 128;
static_assert(gemv::kGemvThreads == kThreads, "the GEMV body's block size");

template <bool kNorm, GemvOut kOut, bool kGeluTanh>
__device__ __forceinline__ void run_gemv(const GemvArgs& a, int blocks, uint4* xs, float* inv_rms) {
  for (int vb = blockIdx.x; vb < blocks; vb += gridDim.x) {
    const gemv::GemvWarp w = gemv::gemv_warp<kOut>(a, vb);
    gemv::gemv_rows<kNorm, kOut, kGeluTanh>(a, w, xs, inv_rms);
    if constexpr (kOut == GemvOut::kRopeAppend) gemv::advance_lengths_when_last(a, blocks);
  }
}

template <GemvOut kOut>
__device__ __forceinline__ void prefetch_gemv(const GemvArgs& a, int blocks) {
  for (int vb = blockIdx.x; vb < blocks; vb += gridDim.x) {
    const gemv::GemvWarp w = gemv::gemv_warp<kOut>(a, vb);
    if (w.live) gemv::prefetch_rows(w.w0, w.w1, w.has_r1, a.K, threadIdx.x & 31, 32);
  }
}

// The attention's virtual block vb is (segment vb % segments, split vb / segments), the order of
// the fused step's grid (segment = blockIdx.x, the fastest).
template <int D>
__device__ __forceinline__ void run_attention(const DecodeAttentionParams& p, int blocks,
                                              unsigned char* smem) {
  using Tr = cuda::detail::WindowTraits<bf16, D, 1>;
  const int segments = p.a.B * p.a.Hkv;
  for (int vb = blockIdx.x; vb < blocks; vb += gridDim.x) {
    decode_attn::mma_block<Tr, false, 0>(p, vb % segments, vb / segments, smem);
    __syncthreads();  // the next virtual block's copies overwrite the tiles
  }
}

__device__ __forceinline__ void prefetch_op(const DeviceOp& op) {
  switch (op.code) {
    case Code::kQkvRopeAppend: prefetch_gemv<GemvOut::kRopeAppend>(op.gemv, op.blocks); break;
    case Code::kResidualAdd: prefetch_gemv<GemvOut::kF32Add>(op.gemv, op.blocks); break;
    case Code::kGatedSilu:
    case Code::kGatedGelu: prefetch_gemv<GemvOut::kGated>(op.gemv, op.blocks); break;
    case Code::kNormF32: prefetch_gemv<GemvOut::kF32>(op.gemv, op.blocks); break;
    case Code::kAttention: break;  // a decode cache is read once: nothing to start early
  }
}

// The program ops[0 .. n) of a model with head dim D. Grid: every block resident (cooperative
// launch); dynamic shared memory: the larger of the GEMV's input tile and the attention's tiles.
template <int D>
__global__ void __launch_bounds__(kThreads)
    step_program_kernel(const DeviceOp* __restrict__ ops, int n, unsigned* barrier) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float inv_rms[kGemvMaxBatch];
  auto* xs = reinterpret_cast<uint4*>(smem);
  cg::grid_group grid = cg::this_grid();
  if (n > 0) prefetch_op(ops[0]);
  for (int i = 0; i < n; ++i) {
    const DeviceOp& op = ops[i];
    switch (op.code) {
      case Code::kQkvRopeAppend:
        run_gemv<true, GemvOut::kRopeAppend, false>(op.gemv, op.blocks, xs, inv_rms);
        break;
      case Code::kResidualAdd:
        run_gemv<false, GemvOut::kF32Add, false>(op.gemv, op.blocks, xs, inv_rms);
        break;
      case Code::kGatedSilu:
        run_gemv<true, GemvOut::kGated, false>(op.gemv, op.blocks, xs, inv_rms);
        break;
      case Code::kGatedGelu:
        run_gemv<true, GemvOut::kGated, true>(op.gemv, op.blocks, xs, inv_rms);
        break;
      case Code::kNormF32:
        run_gemv<true, GemvOut::kF32, false>(op.gemv, op.blocks, xs, inv_rms);
        break;
      case Code::kAttention: run_attention<D>(op.attention, op.blocks, smem); break;
    }
    if (i + 1 == n) break;
    prefetch_op(ops[i + 1]);  // weights do not depend on this phase's outputs
    // This phase's writes are visible to every block after the barrier.
    if (barrier != nullptr)
      cuda::detail::grid_barrier(barrier, barrier + 1, gridDim.x);
    else
      grid.sync();
  }
}

template <int D>
constexpr size_t program_smem_bytes() {
  using Tr = cuda::detail::WindowTraits<bf16, D, 1>;
  constexpr size_t gemv_tile = static_cast<size_t>(gemv::kXsStride) * sizeof(uint4);  // B = 1
  constexpr size_t attention = decode_attn::mma_smem_bytes<Tr>();
  return gemv_tile > attention ? gemv_tile : attention;
}

bool gemv_code(const GemvArgs& a, Code* code) {
  if (a.B != 1 || !gemv_supported(a) || (a.y == nullptr && a.out != GemvOut::kRopeAppend))
    return false;
  const bool norm = a.norm_w != nullptr;
  switch (a.out) {
    case GemvOut::kRopeAppend: *code = Code::kQkvRopeAppend; return norm;
    case GemvOut::kF32Add: *code = Code::kResidualAdd; return !norm;
    case GemvOut::kGated: *code = a.gelu_tanh ? Code::kGatedGelu : Code::kGatedSilu; return norm;
    case GemvOut::kF32: *code = Code::kNormF32; return norm;
    case GemvOut::kBf16: return false;
  }
  return false;
}

bool attention_op(const StepAttention& s, DeviceOp* op) {
  const DecodeAttentionArgs& a = s.a;
  if (a.d != 64 && a.d != 128) return false;
  if (a.Hkv <= 0 || a.Hq % a.Hkv != 0 || a.Hq / a.Hkv > 16) return false;
  if (a.merge_counters == nullptr || a.z_out != nullptr) return false;
  if (decode_attn::decode_attention_params(a, s.out, nullptr, nullptr, s.scratch, s.scratch_bytes,
                                           s.sm_count, nullptr, &op->attention) != cudaSuccess)
    return false;
  op->code = Code::kAttention;
  op->blocks = a.B * a.Hkv * op->attention.splits;
  return true;
}

struct KernelInfo {
  void (*kernel)(const DeviceOp*, int, unsigned*) = nullptr;
  size_t smem = 0;
  int blocks_per_sm = 0;  // resident blocks an SM holds (0: the query failed)
};

template <int D>
KernelInfo kernel_info() {
  KernelInfo k;
  k.kernel = step_program_kernel<D>;
  k.smem = program_smem_bytes<D>();
  if (cudaFuncSetAttribute(k.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(k.smem)) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&k.blocks_per_sm, k.kernel, kThreads, k.smem) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    k.blocks_per_sm = 0;
  }
  return k;
}

// Per device and head dim, the first time it is asked.
KernelInfo cached_kernel_info(int d) {
  static std::mutex mu;
  static KernelInfo cached[64][2];
  static bool known[64][2] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) {
    (void)cudaGetLastError();
    return {};
  }
  const int slot = d == 64 ? 0 : 1;
  std::lock_guard<std::mutex> lock(mu);
  if (!known[dev][slot]) {
    cached[dev][slot] = d == 64 ? kernel_info<64>() : kernel_info<128>();
    known[dev][slot] = true;
  }
  return cached[dev][slot];
}

}  // namespace

bool encode_step_program(const StepOp* ops, int n, std::vector<unsigned char>* image) {
  if (n <= 0) return false;
  std::vector<DeviceOp> dev(static_cast<size_t>(n));
  std::memset(static_cast<void*>(dev.data()), 0, dev.size() * sizeof(DeviceOp));
  for (int i = 0; i < n; ++i) {
    DeviceOp& d = dev[i];
    if (ops[i].kind == StepOp::Kind::kGemv) {
      if (!gemv_code(ops[i].gemv, &d.code)) return false;
      d.gemv = ops[i].gemv;
      d.blocks = gemv::gemv_blocks(d.gemv);
    } else if (!attention_op(ops[i].attention, &d)) {
      return false;
    }
  }
  image->resize(dev.size() * sizeof(DeviceOp));
  std::memcpy(image->data(), dev.data(), image->size());
  return true;
}

int step_program_ops(size_t image_bytes) {
  return static_cast<int>(image_bytes / sizeof(DeviceOp));
}

int step_program_blocks(int head_dim, int sm_count, int blocks_per_sm) {
  if (head_dim != 64 && head_dim != 128) return 0;
  const KernelInfo k = cached_kernel_info(head_dim);
  return sm_count * std::min(k.blocks_per_sm, std::max(blocks_per_sm, 1));
}

cudaError_t launch_step_program(const void* program, int n_ops, int head_dim, int blocks,
                                unsigned* barrier, cudaStream_t stream) {
  if (program == nullptr || n_ops <= 0 || blocks <= 0 || (head_dim != 64 && head_dim != 128))
    return cudaErrorInvalidValue;
  const KernelInfo k = cached_kernel_info(head_dim);
  if (k.kernel == nullptr || k.blocks_per_sm == 0) return cudaErrorInvalidValue;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = k.smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, k.kernel, static_cast<const DeviceOp*>(program), n_ops, barrier);
}

}  // namespace kvevict::gpu::detail
