// API layer of the CUDA scores (STYLE.md layer 3): checks shapes, dtypes and devices of the
// caller's views, carves the workspace, then calls the launchers. Every CUDA call is checked.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "cuda/common.cuh"
#include "cuda/kernel_variants.h"
#include "cuda/launchers.h"
#include "cuda/window_plan.h"
#include "kvevict/cuda/score.h"
#include "kvevict/error.h"

namespace kvevict::cuda {
namespace {

std::atomic<int> g_top_keys_mode{0};  // set_window_top_keys (kernel_variants.h)

using detail::Elem;
using detail::PairTerm;

Elem elem_of(DType t, const char* what) {
  if (t == DType::kBF16) return Elem::kBF16;
  if (t == DType::kF16) return Elem::kF16;
  KVEVICT_FAIL(what, " has dtype ", dtype_name(t), "; the CUDA kernels expect bf16 or f16");
}

void check_device_view(const TensorView& t, const char* what, int ndim) {
  KVEVICT_CHECK(!t.empty(), what, " is empty; expected a device tensor");
  KVEVICT_CHECK(t.device == Device::kCuda, what, " is in host memory; expected device memory");
  KVEVICT_CHECK(t.ndim == ndim, what, " has shape ", t.shape_str(), "; expected ", ndim, " dims");
  KVEVICT_CHECK(t.inner_contiguous(), what, " has inner stride ", t.stride[t.ndim - 1],
                "; expected 1");
  check_indexable(t, what);  // before the launches narrow heads, tokens and head dims to int
}

void check_f32_out(const TensorView& t, const char* what, int64_t d0, int64_t d1) {
  check_device_view(t, what, 2);
  KVEVICT_CHECK(t.dtype == DType::kF32, what, " has dtype ", dtype_name(t.dtype), "; expected f32");
  KVEVICT_CHECK(t.shape[0] == d0 && t.shape[1] == d1 && t.is_contiguous(), what, " has shape ",
                t.shape_str(), "; expected contiguous [", d0, ", ", d1, "]");
}

// q [Hq, m, d], k/v [Hkv, n, d] in device memory, same 16-bit dtype; v optional.
detail::WindowArgs window_args(const TensorView& q, const TensorView& k, const TensorView* v, int w,
                               float scale) {
  check_device_view(q, "q", 3);
  check_device_view(k, "k", 3);
  detail::WindowArgs a;
  a.elem = elem_of(k.dtype, "k");
  KVEVICT_CHECK(q.dtype == k.dtype, "q has dtype ", dtype_name(q.dtype), " but k has ",
                dtype_name(k.dtype), "; expected the same dtype");
  const int64_t hkv = k.shape[0], n = k.shape[1], d = k.shape[2];
  KVEVICT_CHECK(d == 64 || d == 128 || d == 256, "head dim ", d,
                " is not supported by the CUDA kernels; expected 64, 128 or 256");
  KVEVICT_CHECK(q.shape[2] == d, "q has shape ", q.shape_str(), "; expected head dim ", d,
                " like k ", k.shape_str());
  KVEVICT_CHECK(hkv >= 1 && q.shape[0] % hkv == 0, "q has ", q.shape[0],
                " heads; expected a multiple of the ", hkv, " KV heads");
  KVEVICT_CHECK(w >= 1 && w <= n, "window ", w, " is out of range; expected 1 <= w <= n = ", n);
  KVEVICT_CHECK(q.shape[1] >= w, "q has ", q.shape[1], " rows; the window needs ", w);
  KVEVICT_CHECK(n <= (int64_t{1} << 31) - 1, "n = ", n, " tokens exceeds the 2^31 - 1 limit");
  a.q = q.data;
  a.q_head_stride = q.stride[0];
  a.q_row_stride = q.stride[1];
  a.q_rows = static_cast<int>(q.shape[1]);
  a.k = k.data;
  a.kv_head_stride = k.stride[0];
  a.kv_row_stride = k.stride[1];
  KVEVICT_CHECK(
      k.stride[0] % 8 == 0 && k.stride[1] % 8 == 0 && q.stride[0] % 8 == 0 && q.stride[1] % 8 == 0,
      "k/q strides must be multiples of 8 elements (16-byte rows); got k ", k.stride[0], "/",
      k.stride[1], ", q ", q.stride[0], "/", q.stride[1]);
  if (v != nullptr && !v->empty()) {
    check_device_view(*v, "v", 3);
    KVEVICT_CHECK(v->dtype == k.dtype && v->shape == k.shape && v->stride == k.stride,
                  "v has shape ", v->shape_str(), " and dtype ", dtype_name(v->dtype),
                  "; expected the layout of k ", k.shape_str());
    a.v = v->data;
  }
  a.num_q_heads = static_cast<int>(q.shape[0]);
  a.num_kv_heads = static_cast<int>(hkv);
  a.w = w;
  a.head_dim = static_cast<int>(d);
  a.n = n;
  a.scale = scale;
  return a;
}

bool pair_term_of(Method m, PairTerm* t) {
  switch (m) {
    case Method::kDropKV: *t = PairTerm::kDropKV; return true;
    case Method::kObcacheV: *t = PairTerm::kObcacheV; return true;
    case Method::kObcacheK: *t = PairTerm::kObcacheK; return true;
    case Method::kObcacheVK: *t = PairTerm::kObcacheVK; return true;
    case Method::kSnapKV:
    case Method::kCriticalKV:  // stage-1 score S, then the W_o multiplier
    case Method::kH2O:
    case Method::kTOVA:
    case Method::kVATP: *t = PairTerm::kProb; return true;
    default: return false;
  }
}

float logit_scale(const ScoreProblem& p, const ScoreOptions& opt) {
  if (p.scale != 0.f) return p.scale;
  if (opt.scale != 0.f) return opt.scale;
  return 1.0f / std::sqrt(static_cast<float>(p.k.shape[2]));
}

// Everything a pair-term score carves from the workspace, in order.
struct PairLayout {
  size_t out = 0, lse = 0, top = 0, fwd = 0, raw = 0, v_l1 = 0;  // element / byte counts
};
// vatp = pool(snapkv) * ||v||_1 (the reference pools before multiplying), so it needs the raw
// attention sums and the per-token L1 norms the scoring pass writes on the side.
bool needs_raw_scores(const ScoreOptions& opt) {
  return opt.pooling.kind != PoolKind::kNone || opt.aggregate == Aggregate::kLastQuery ||
         opt.method == Method::kVATP;
}
PairLayout pair_layout(const detail::WindowArgs& a, bool needs_out, bool needs_raw, bool vatp) {
  PairLayout l;
  l.v_l1 = vatp ? static_cast<size_t>(a.num_kv_heads) * a.n : 0;
  l.out = needs_out ? static_cast<size_t>(a.num_q_heads) * a.w * a.head_dim : 0;
  l.lse = static_cast<size_t>(a.num_q_heads) * a.w;
  l.top = needs_out ? l.lse : 0;  // the rows' top keys (issue 13)
  const int sms = detail::current_sm_count();
  l.fwd = detail::window_forward_scratch_bytes(a, needs_out, sms);
  l.raw = needs_raw ? static_cast<size_t>(a.num_kv_heads) * a.n : 0;
  return l;
}

}  // namespace

bool device_available() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error for later callers
    return false;
  }
  return count > 0;
}

DeviceInfo device_info() {
  DeviceInfo info;
  int dev = 0;
  KVEVICT_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  KVEVICT_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  std::snprintf(info.name, sizeof(info.name), "%s", prop.name);
  info.sm_count = prop.multiProcessorCount;
  info.l2_bytes = prop.l2CacheSize;
  return info;
}

size_t window_forward_workspace_bytes(int num_q_heads, int num_kv_heads, int64_t n, int w,
                                      int head_dim) {
  detail::WindowArgs a;
  a.num_q_heads = num_q_heads;
  a.num_kv_heads = num_kv_heads;
  a.n = n;
  a.w = w;
  a.head_dim = head_dim;
  return detail::window_forward_scratch_bytes(a, true, detail::current_sm_count());
}

void window_forward(const TensorView& q, const TensorView& k, const TensorView& v, int w,
                    float scale, const TensorView& out, const TensorView& lse, Workspace ws,
                    Stream stream) {
  const bool with_out = !out.empty();
  detail::WindowArgs a = window_args(q, k, with_out ? &v : nullptr, w, scale);
  KVEVICT_CHECK(std::isfinite(scale) && scale > 0, "scale ", scale, " is invalid; expected > 0");
  if (with_out) {
    check_device_view(out, "out", 3);
    KVEVICT_CHECK(out.dtype == DType::kF32 && out.is_contiguous() &&
                      out.shape[0] == a.num_q_heads && out.shape[1] == w &&
                      out.shape[2] == a.head_dim,
                  "out has shape ", out.shape_str(), " and dtype ", dtype_name(out.dtype),
                  "; expected contiguous f32 [", a.num_q_heads, ", ", w, ", ", a.head_dim, "]");
    KVEVICT_CHECK(reinterpret_cast<uintptr_t>(out.data) % 16 == 0, "out starts at ", out.data,
                  "; expected a 16-byte aligned address (the merge writes 16-byte vectors)");
  }
  check_f32_out(lse, "lse", a.num_q_heads, w);
  const int sms = detail::current_sm_count();
  const size_t need = detail::window_forward_scratch_bytes(a, with_out, sms);
  KVEVICT_CHECK(ws.bytes >= need, "workspace of ", ws.bytes, " bytes is too small; need ", need);
  KVEVICT_CUDA_CHECK(detail::launch_window_forward(a, with_out ? out.ptr<float>() : nullptr,
                                                   lse.ptr<float>(), ws.data, ws.bytes, sms,
                                                   static_cast<cudaStream_t>(stream)));
}

bool score_supported(Method m) {
  PairTerm t;
  return pair_term_of(m, &t) || m == Method::kKNorm || m == Method::kKeyDiff ||
         m == Method::kStreamingLLM || m == Method::kRandom;
}

size_t score_workspace_bytes(const ScoreProblem& problem, const ScoreOptions& opt) {
  KVEVICT_CHECK(score_supported(opt.method), "method ", method_name(opt.method),
                " has no CUDA score kernel; expected one of dropkv, obcache_v, obcache_k, "
                "obcache_vk, snapkv, vatp, criticalkv, h2o, tova, knorm, keydiff, "
                "streamingllm, random");
  KVEVICT_CHECK(problem.k.ndim == 3, "k has shape ", problem.k.shape_str(),
                "; expected [Hkv, n, d]");
  const int hkv = static_cast<int>(problem.k.shape[0]);
  const int d = static_cast<int>(problem.k.shape[2]);
  if (opt.method == Method::kKNorm || opt.method == Method::kStreamingLLM ||
      opt.method == Method::kRandom)
    return 0;
  if (opt.method == Method::kKeyDiff) return detail::keydiff_scratch_bytes(hkv, d);
  PairTerm term;
  pair_term_of(opt.method, &term);
  const int64_t n = problem.k.shape[1];
  detail::WindowArgs a;
  a.num_q_heads = static_cast<int>(problem.q.shape[0]);
  a.num_kv_heads = hkv;
  a.n = n;
  a.w = static_cast<int>(opt.queries_needed(n));
  a.head_dim = d;
  const PairLayout l = pair_layout(a, detail::pair_term_needs_out(term), needs_raw_scores(opt),
                                   opt.method == Method::kVATP);
  WorkspaceSizer sizer;
  sizer.add<float>(l.out)
      .add<float>(l.lse)
      .add<detail::TopRow>(l.top)
      .add<char>(l.fwd)
      .add<float>(l.raw)
      .add<float>(l.v_l1);
  return sizer.bytes();
}

void score(const ScoreProblem& problem, const ScoreOptions& opt, const ScoreOutput& out,
           Workspace ws, Stream stream_handle) {
  opt.validate();
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);
  check_device_view(problem.k, "k", 3);
  const int hkv = static_cast<int>(problem.k.shape[0]);
  const int64_t n = problem.k.shape[1];
  const int d = static_cast<int>(problem.k.shape[2]);
  check_f32_out(out.scores, "scores", hkv, n);
  const size_t need = score_workspace_bytes(problem, opt);
  KVEVICT_CHECK(ws.bytes >= need, "workspace of ", ws.bytes, " bytes is too small; need ", need);
  float* scores = out.scores.ptr<float>();
  const bool critical = opt.method == Method::kCriticalKV;
  if (critical) {
    check_f32_out(out.aux, "aux scores (criticalkv stage 1)", hkv, n);
    check_device_view(problem.wo, "wo (criticalkv output projection)", 2);
    check_device_view(problem.v, "v", 3);
    const int hq = static_cast<int>(problem.q.shape[0]);
    KVEVICT_CHECK(problem.wo.shape[1] == static_cast<int64_t>(hq) * d && problem.wo.shape[0] >= 1,
                  "wo has shape ", problem.wo.shape_str(), "; expected [D, Hq * d = ", hq * d, "]");
    KVEVICT_CHECK(problem.wo.dtype == DType::kF32 || problem.wo.dtype == problem.v.dtype,
                  "wo has dtype ", dtype_name(problem.wo.dtype), "; expected f32 or ",
                  dtype_name(problem.v.dtype), " like v");
  }
  if (n == 0) return;
  if (opt.method == Method::kStreamingLLM) {
    KVEVICT_CUDA_CHECK(detail::launch_position_scores(scores, hkv, n, stream));
    return;
  }
  if (opt.method == Method::kRandom) {
    KVEVICT_CUDA_CHECK(detail::launch_random_scores(scores, hkv, n, opt.seed, stream));
    return;
  }

  if (opt.method == Method::kKNorm || opt.method == Method::kKeyDiff) {
    const Elem elem = elem_of(problem.k.dtype, "k");
    KVEVICT_CHECK(d % 8 == 0 && d <= 256, "head dim ", d,
                  " is unsupported; expected a multiple of 8 <= 256");
    if (opt.method == Method::kKNorm)
      KVEVICT_CUDA_CHECK(detail::launch_knorm(elem, problem.k.data, problem.k.stride[0],
                                              problem.k.stride[1], hkv, n, d, scores, stream));
    else
      KVEVICT_CUDA_CHECK(detail::launch_keydiff(elem, problem.k.data, problem.k.stride[0],
                                                problem.k.stride[1], hkv, n, d, scores, ws.data,
                                                stream));
    return;
  }

  PairTerm term;
  pair_term_of(opt.method, &term);
  const int w = static_cast<int>(opt.queries_needed(n));
  detail::WindowArgs a =
      window_args(problem.q, problem.k, &problem.v, w, logit_scale(problem, opt));
  KVEVICT_CHECK(a.v != nullptr, "v is empty; method ", method_name(opt.method), " reads values");
  const bool needs_out = detail::pair_term_needs_out(term);
  const bool last_query = opt.aggregate == Aggregate::kLastQuery;
  const bool needs_raw = needs_raw_scores(opt);
  const bool vatp = opt.method == Method::kVATP;
  const PairLayout l = pair_layout(a, needs_out, needs_raw, vatp);
  WorkspaceCarver carver(ws);
  float* a_out = l.out ? carver.take<float>(l.out) : nullptr;
  float* lse = carver.take<float>(l.lse);
  detail::TopRow* top = l.top ? carver.take<detail::TopRow>(l.top) : nullptr;
  char* fwd = carver.take<char>(l.fwd);
  float* raw = l.raw ? carver.take<float>(l.raw) : nullptr;
  float* v_l1 = l.v_l1 ? carver.take<float>(l.v_l1) : nullptr;
  const int sms = detail::current_sm_count();

  const int top_mode = g_top_keys_mode.load(std::memory_order_relaxed);
  detail::ScorePassArgs sa;
  sa.win = a;
  sa.term = term;
  sa.out = a_out;
  sa.lse = lse;
  sa.top = top_mode == 0 ? top : nullptr;
  sa.one_minus_p_floor = static_cast<float>(opt.one_minus_p_floor);
  sa.row_weight = 1.0f / static_cast<float>(a.num_q_heads / a.num_kv_heads);
  sa.h2o_normalize = opt.aggregate == Aggregate::kAllQueries && opt.h2o_normalize;
  sa.v_l1 = v_l1;
  // criticalkv: the window path writes the stage-1 score S into aux; stage 2 follows below.
  float* const final_out = scores;
  if (critical) scores = out.aux.ptr<float>();
  float* pass_out = needs_raw ? raw : scores;
  // h2o: key-stationary column sums over the causal triangle, deterministic (h2o_colsum.cu).
  // (vatp needs the pass's ||v||_1 side output: it keeps the window pass.)
  const bool colsum =
      opt.aggregate == Aggregate::kAllQueries && term == PairTerm::kProb && v_l1 == nullptr;
  KVEVICT_CUDA_CHECK(detail::launch_window_forward(a, a_out, lse, fwd, l.fwd, sms, stream,
                                                   top_mode == 2 ? nullptr : top));
  if (colsum)
    KVEVICT_CUDA_CHECK(detail::launch_h2o_colsum(a, lse, sa.h2o_normalize, pass_out, stream));
  else
    KVEVICT_CUDA_CHECK(detail::launch_score_pass(sa, pass_out, sms, stream));
  const bool pooled = opt.pooling.kind != PoolKind::kNone || vatp;
  if (last_query) {
    // tova: one selection shared by the layer, the mean over all Hq heads (in place: each
    // thread reads its token's column before writing it).
    KVEVICT_CUDA_CHECK(detail::launch_head_mean(raw, pooled ? raw : scores, hkv, n,
                                                1.0f / static_cast<float>(hkv), stream));
  }
  if (pooled) {
    const int kernel = opt.pooling.kind == PoolKind::kNone ? 1 : opt.pooling.kernel;
    KVEVICT_CUDA_CHECK(detail::launch_pool(raw, scores, hkv, n, kernel,
                                           opt.pooling.kind != PoolKind::kAvg, v_l1, stream));
  }
  if (critical) {
    const TensorView& wo = problem.wo;
    KVEVICT_CUDA_CHECK(detail::launch_criticalkv_scores(
        a.elem, problem.v.data, problem.v.stride[0], problem.v.stride[1], a.num_q_heads, hkv, n, d,
        wo.data, static_cast<int>(dtype_size(wo.dtype)), wo.stride[0], wo.shape[0], scores,
        static_cast<float>(opt.criticalkv_eps), final_out, stream));
  }
}

void set_window_top_keys(int mode) {
  KVEVICT_CHECK(mode >= 0 && mode <= 2, "top-key mode ", mode, " is invalid; expected 0, 1 or 2");
  g_top_keys_mode.store(mode);
}

}  // namespace kvevict::cuda
