// API layer of the CUDA attention over a compacted cache (segment or paged layout): view
// checks, then launch_attention.
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/common.cuh"
#include "cuda/launchers.h"
#include "kvevict/cuda/attention.h"
#include "kvevict/error.h"

namespace kvevict::cuda {
namespace {

detail::Elem cache_elem(DType t) {
  KVEVICT_CHECK(t == DType::kBF16 || t == DType::kF16, "cache dtype ", dtype_name(t),
                " is not supported by the CUDA attention; expected bf16 or f16");
  return t == DType::kBF16 ? detail::Elem::kBF16 : detail::Elem::kF16;
}

void check_q(const TensorView& q, DType cache_dtype, int64_t d, int hkv) {
  KVEVICT_CHECK(!q.empty() && q.device == Device::kCuda && q.ndim == 3 && q.inner_contiguous(),
                "q has shape ", q.shape_str(), "; expected a device [Hq, m, d] tensor");
  KVEVICT_CHECK(q.dtype == DType::kF32 || q.dtype == cache_dtype, "q has dtype ",
                dtype_name(q.dtype), "; expected f32 or the cache's ", dtype_name(cache_dtype));
  KVEVICT_CHECK(q.shape[2] == d, "q has head dim ", q.shape[2], "; the cache has ", d);
  KVEVICT_CHECK(d == 64 || d == 128 || d == 256, "head dim ", d,
                " is not supported; expected 64, 128 or 256");
  KVEVICT_CHECK(q.shape[0] % hkv == 0, "q has ", q.shape[0], " heads; expected a multiple of ", hkv,
                " KV heads");
}

void check_out(const AttentionOutput& o, int64_t hq, int64_t m, int64_t d) {
  KVEVICT_CHECK(o.out.device == Device::kCuda && o.out.dtype == DType::kF32 && o.out.ndim == 3 &&
                    o.out.is_contiguous() && o.out.shape[0] == hq && o.out.shape[1] == m &&
                    o.out.shape[2] == d,
                "attention out has shape ", o.out.shape_str(), "; expected contiguous device f32 [",
                hq, ", ", m, ", ", d, "]");
  if (!o.lse.empty())
    KVEVICT_CHECK(o.lse.device == Device::kCuda && o.lse.dtype == DType::kF32 &&
                      o.lse.is_contiguous() && o.lse.numel() == hq * m,
                  "attention lse has shape ", o.lse.shape_str(), "; expected device f32 [", hq,
                  ", ", m, "]");
}

void fill_common(detail::AttentionArgs& a, const TensorView& q, float scale, int sliding,
                 float softcap) {
  a.q = q.data;
  a.q_elem_bytes = static_cast<int>(dtype_size(q.dtype));
  a.q_head_stride = q.stride[0];
  a.q_row_stride = q.stride[1];
  a.num_q_heads = static_cast<int>(q.shape[0]);
  a.m = q.shape[1];
  a.head_dim = static_cast<int>(q.shape[2]);
  a.scale = scale != 0.f ? scale : 1.0f / std::sqrt(static_cast<float>(q.shape[2]));
  KVEVICT_CHECK(std::isfinite(a.scale) && a.scale > 0, "scale ", a.scale, " is invalid");
  KVEVICT_CHECK(sliding >= 0 && softcap >= 0.f, "sliding window ", sliding, " / softcap ", softcap,
                " is negative; expected >= 0");
  a.sliding_window = sliding;
  a.softcap = softcap;
}

}  // namespace

size_t attention_workspace_bytes(const AttentionProblem& problem) {
  WorkspaceSizer s;
  s.add<int32_t>(static_cast<size_t>(problem.q.empty() ? 0 : problem.q.shape[1]))
      .add<int64_t>(problem.cache.num_kv_heads)
      .add<int64_t>(problem.cache.num_kv_heads);
  return s.bytes();
}

void attention(const AttentionProblem& problem, const AttentionOutput& output, Workspace ws,
               Stream stream_handle) {
  const KVLayerView& c = problem.cache;
  c.validate("attention cache");
  KVEVICT_CHECK(c.device == Device::kCuda,
                "the attention cache is in host memory; expected a "
                "device cache for the CUDA attention");
  KVEVICT_CHECK(c.pos != nullptr, "the attention cache has no positions; expected pos");
  KVEVICT_CHECK(problem.q_pos != nullptr, "q_pos is missing; expected [m] host positions");
  const int hkv = c.num_kv_heads;
  check_q(problem.q, c.dtype, c.head_dim, hkv);
  const int64_t hq = problem.q.shape[0], m = problem.q.shape[1];
  check_out(output, hq, m, c.head_dim);
  const size_t need = attention_workspace_bytes(problem);
  KVEVICT_CHECK(ws.bytes >= need, "workspace of ", ws.bytes, " bytes is too small; need ", need);
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);
  WorkspaceCarver carver(ws);
  int32_t* d_qpos = carver.take<int32_t>(static_cast<size_t>(m));
  int64_t* d_start = carver.take<int64_t>(hkv);
  int64_t* d_lens = carver.take<int64_t>(hkv);
  if (m > 0)
    KVEVICT_CUDA_CHECK(cudaMemcpyAsync(d_qpos, problem.q_pos, sizeof(int32_t) * m,
                                       cudaMemcpyHostToDevice, stream));
  KVEVICT_CUDA_CHECK(
      cudaMemcpyAsync(d_start, c.offsets, sizeof(int64_t) * hkv, cudaMemcpyHostToDevice, stream));
  KVEVICT_CUDA_CHECK(
      cudaMemcpyAsync(d_lens, c.lens, sizeof(int64_t) * hkv, cudaMemcpyHostToDevice, stream));
  detail::AttentionArgs a;
  a.elem = cache_elem(c.dtype);
  fill_common(a, problem.q, problem.scale, problem.sliding_window, problem.softcap);
  a.q_pos = d_qpos;
  a.k = c.k;
  a.v = c.v;
  a.pos = c.pos;
  a.seg_start = d_start;
  a.lens = d_lens;
  a.num_kv_heads = hkv;
  a.out = output.out.ptr<float>();
  a.lse = output.lse.empty() ? nullptr : output.lse.ptr<float>();
  KVEVICT_CUDA_CHECK(detail::launch_attention(a, stream));
  // The host arrays the copies read must stay valid until the copies ran.
  KVEVICT_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void attention_paged(const PagedAttentionProblem& p, const AttentionOutput& output,
                     Stream stream_handle) {
  const TensorView& kp = p.k_pages;
  KVEVICT_CHECK(kp.device == Device::kCuda && kp.ndim == 3 && kp.is_contiguous(),
                "k_pages has shape ", kp.shape_str(),
                "; expected contiguous device [num_pages, "
                "page_size, d]");
  KVEVICT_CHECK(p.v_pages.device == Device::kCuda && p.v_pages.shape == kp.shape &&
                    p.v_pages.dtype == kp.dtype && p.v_pages.is_contiguous(),
                "v_pages has shape ", p.v_pages.shape_str(), "; expected the layout of k_pages ",
                kp.shape_str());
  KVEVICT_CHECK(p.pos_pages.device == Device::kCuda && p.pos_pages.dtype == DType::kI32 &&
                    p.pos_pages.numel() == kp.shape[0] * kp.shape[1] && p.pos_pages.is_contiguous(),
                "pos_pages has shape ", p.pos_pages.shape_str(), "; expected i32 [", kp.shape[0],
                ", ", kp.shape[1], "]");
  KVEVICT_CHECK(p.page_table.device == Device::kCuda && p.page_table.dtype == DType::kI32 &&
                    p.page_table.ndim == 2 && p.page_table.is_contiguous(),
                "page_table has shape ", p.page_table.shape_str(),
                "; expected i32 [Hkv, max_pages]");
  const int hkv = static_cast<int>(p.page_table.shape[0]);
  KVEVICT_CHECK(
      p.lens.device == Device::kCuda && p.lens.dtype == DType::kI64 && p.lens.numel() == hkv,
      "lens has shape ", p.lens.shape_str(), "; expected i64 [", hkv, "]");
  check_q(p.q, kp.dtype, kp.shape[2], hkv);
  const int64_t hq = p.q.shape[0], m = p.q.shape[1];
  KVEVICT_CHECK(
      p.q_pos.device == Device::kCuda && p.q_pos.dtype == DType::kI32 && p.q_pos.numel() == m,
      "q_pos has shape ", p.q_pos.shape_str(), "; expected device i32 [", m, "]");
  check_out(output, hq, m, kp.shape[2]);
  detail::AttentionArgs a;
  a.elem = cache_elem(kp.dtype);
  fill_common(a, p.q, p.scale, p.sliding_window, p.softcap);
  a.q_pos = p.q_pos.ptr<int32_t>();
  a.k = kp.data;
  a.v = p.v_pages.data;
  a.pos = p.pos_pages.ptr<int32_t>();
  a.lens = p.lens.ptr<int64_t>();
  a.page_table = p.page_table.ptr<int32_t>();
  a.max_pages = static_cast<int>(p.page_table.shape[1]);
  a.page_size = static_cast<int>(kp.shape[1]);
  a.num_kv_heads = hkv;
  a.out = output.out.ptr<float>();
  a.lse = output.lse.empty() ? nullptr : output.lse.ptr<float>();
  KVEVICT_CUDA_CHECK(detail::launch_attention(a, static_cast<cudaStream_t>(stream_handle)));
}

}  // namespace kvevict::cuda
