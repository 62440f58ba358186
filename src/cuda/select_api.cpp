// API layer of the CUDA selection and compaction: view checks, then the launchers. Every
// compaction is the one row gather of gather_rows.cu.
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/common.cuh"
#include "cuda/kernel_variants.h"
#include "cuda/launchers.h"
#include "kvevict/cuda/compact.h"
#include "kvevict/cuda/select.h"
#include "kvevict/error.h"

namespace kvevict::cuda {
namespace {

void check_device(const TensorView& t, const char* what, DType dtype, int ndim) {
  KVEVICT_CHECK(!t.empty(), what, " is empty; expected a device tensor");
  KVEVICT_CHECK(t.device == Device::kCuda, what, " is in host memory; expected device memory");
  KVEVICT_CHECK(t.dtype == dtype, what, " has dtype ", dtype_name(t.dtype), "; expected ",
                dtype_name(dtype));
  KVEVICT_CHECK(t.ndim == ndim, what, " has shape ", t.shape_str(), "; expected ", ndim, " dims");
}

void check_kv(const TensorView& k, const TensorView& v) {
  KVEVICT_CHECK(k.device == Device::kCuda && v.device == Device::kCuda,
                "k and v must be device tensors");
  KVEVICT_CHECK(k.ndim == 3 && v.ndim == 3, "k has shape ", k.shape_str(), " and v ", v.shape_str(),
                "; expected [Hkv, n, d]");
  KVEVICT_CHECK(k.dtype == v.dtype && k.shape == v.shape && k.stride == v.stride, "v ",
                v.shape_str(), " ", dtype_name(v.dtype), " does not match k ", k.shape_str(), " ",
                dtype_name(k.dtype), "; expected the same layout");
  KVEVICT_CHECK(k.dtype == DType::kBF16 || k.dtype == DType::kF16 || k.dtype == DType::kF32,
                "k has dtype ", dtype_name(k.dtype), "; expected bf16, f16 or f32");
  KVEVICT_CHECK(k.inner_contiguous() && (k.shape[2] * dtype_size(k.dtype)) % 16 == 0 &&
                    (k.stride[1] * dtype_size(k.dtype)) % 16 == 0 &&
                    (k.stride[0] * dtype_size(k.dtype)) % 16 == 0,
                "k rows of ", k.shape[2], " ", dtype_name(k.dtype),
                " must be contiguous and 16-byte aligned");
}

void check_out_kv(const TensorView& t, const char* what, const TensorView& k, int64_t rows) {
  KVEVICT_CHECK(t.device == Device::kCuda && t.dtype == k.dtype && t.is_contiguous() &&
                    t.numel() == rows * k.shape[2],
                what, " has shape ", t.shape_str(), " ", dtype_name(t.dtype),
                "; expected contiguous ", dtype_name(k.dtype), " with ", rows, " rows of ",
                k.shape[2]);
}

}  // namespace

int64_t protected_count(int64_t n, int sink, int window) {
  const int64_t s = sink < n ? sink : n;
  const int64_t w = window < n ? window : n;
  return s + w > n ? n : s + w;
}

size_t select_uniform_workspace_bytes(int num_kv_heads, int64_t n) {
  return detail::select_uniform_scratch_bytes(num_kv_heads, n);
}

namespace {
void run_select(const TensorView& scores, int64_t n_keep, int sink, int window,
                const TensorView& kept, Workspace ws, Stream stream) {
  check_device(scores, "scores", DType::kF32, 2);
  KVEVICT_CHECK(scores.is_contiguous(), "scores must be contiguous; got strides ", scores.stride[0],
                "/", scores.stride[1]);
  const int64_t hkv = scores.shape[0], n = scores.shape[1];
  KVEVICT_CHECK(sink >= 0 && window >= 0, "sink ", sink, " / window ", window,
                " is negative; expected >= 0");
  KVEVICT_CHECK(n <= (int64_t{1} << 31) - 1, "n = ", n, " exceeds the i32 index range");
  const int64_t prot = protected_count(n, sink, window);
  KVEVICT_CHECK(n_keep >= prot && n_keep <= n, "n_keep ", n_keep, " is out of range; expected ",
                prot, " (protected tokens) <= n_keep <= n = ", n);
  check_device(kept, "kept", DType::kI32, 2);
  KVEVICT_CHECK(kept.shape[0] == hkv && kept.shape[1] == n_keep && kept.is_contiguous(),
                "kept has shape ", kept.shape_str(), "; expected contiguous [", hkv, ", ", n_keep,
                "]");
  KVEVICT_CHECK(hkv <= 65535, "Hkv = ", hkv, " exceeds 65535 heads");
  const size_t need = detail::select_uniform_scratch_bytes(static_cast<int>(hkv), n);
  KVEVICT_CHECK(ws.bytes >= need, "workspace of ", ws.bytes, " bytes is too small; need ", need);
  KVEVICT_CUDA_CHECK(detail::launch_select_uniform(
      scores.ptr<float>(), static_cast<int>(hkv), n, n_keep, sink, window, kept.ptr<int32_t>(),
      ws.data, ws.bytes, static_cast<cudaStream_t>(stream)));
}

void check_compact_args(const TensorView& k, const TensorView& v, const TensorView& pos,
                        const TensorView& kept, int64_t rows, const TensorView& out_k,
                        const TensorView& out_v, const TensorView& out_pos) {
  check_kv(k, v);
  const int64_t hkv = k.shape[0], n = k.shape[1];
  KVEVICT_CHECK(kept.device == Device::kCuda && kept.dtype == DType::kI32 && kept.is_contiguous() &&
                    kept.numel() == rows,
                "kept has shape ", kept.shape_str(), "; expected ", rows,
                " contiguous i32 indices");
  if (!pos.empty()) {
    check_device(pos, "pos", DType::kI32, 2);
    KVEVICT_CHECK(pos.shape[0] == hkv && pos.shape[1] == n && pos.inner_contiguous(),
                  "pos has shape ", pos.shape_str(), "; expected [", hkv, ", ", n, "]");
  }
  check_out_kv(out_k, "out_k", k, rows);
  check_out_kv(out_v, "out_v", k, rows);
  KVEVICT_CHECK(out_pos.device == Device::kCuda && out_pos.dtype == DType::kI32 &&
                    out_pos.is_contiguous() && out_pos.numel() == rows,
                "out_pos has shape ", out_pos.shape_str(), "; expected ", rows, " i32");
}

// compact_uniform / compact_varlen: the one gather (launchers.h GatherArgs) into packed rows.
void compact_impl(const TensorView& k, const TensorView& v, const TensorView& pos,
                  const TensorView& kept, const int64_t* offsets, int64_t uniform_len, int64_t rows,
                  const TensorView& out_k, const TensorView& out_v, const TensorView& out_pos,
                  Stream stream) {
  check_compact_args(k, v, pos, kept, rows, out_k, out_v, out_pos);
  const int64_t hkv = k.shape[0], n = k.shape[1];
  const int eb = static_cast<int>(dtype_size(k.dtype));
  detail::GatherArgs a;
  a.k = static_cast<const char*>(k.data);
  a.v = static_cast<const char*>(v.data);
  a.head_stride_b = k.stride[0] * eb;
  a.row_stride_b = k.stride[1] * eb;
  a.row_bytes = static_cast<int>(k.shape[2] * eb);
  a.src_limit = n;
  a.pos = pos.empty() ? nullptr : pos.ptr<int32_t>();
  a.pos_head_stride = pos.empty() ? 0 : pos.stride[0];
  a.kept = kept.ptr<int32_t>();
  a.kept_offsets = offsets;
  a.uniform_keep = uniform_len;
  a.dst_rows = rows;
  a.out_k = static_cast<char*>(out_k.data);
  a.out_v = static_cast<char*>(out_v.data);
  a.out_pos = out_pos.ptr<int32_t>();
  a.num_heads = static_cast<int>(hkv);
  a.rows = rows;
  KVEVICT_CUDA_CHECK(detail::launch_gather_rows(a, static_cast<cudaStream_t>(stream)));
}
}  // namespace

void select_uniform(const TensorView& scores, int64_t n_keep, int sink, int window,
                    const TensorView& kept, Workspace ws, Stream stream) {
  run_select(scores, n_keep, sink, window, kept, ws, stream);
}

void compact_uniform(const TensorView& k, const TensorView& v, const TensorView& pos,
                     const TensorView& kept, const TensorView& out_k, const TensorView& out_v,
                     const TensorView& out_pos, Stream stream) {
  KVEVICT_CHECK(kept.ndim == 2 && kept.shape[0] == k.shape[0], "kept has shape ", kept.shape_str(),
                "; expected [Hkv = ", k.shape[0], ", n_keep]");
  const int64_t n_keep = kept.shape[1];
  compact_impl(k, v, pos, kept, nullptr, n_keep, k.shape[0] * n_keep, out_k, out_v, out_pos,
               stream);
}

void compact_varlen(const TensorView& k, const TensorView& v, const TensorView& pos,
                    const TensorView& kept, const TensorView& offsets, const TensorView& out_k,
                    const TensorView& out_v, const TensorView& out_pos, Stream stream) {
  check_device(offsets, "offsets", DType::kI64, 1);
  KVEVICT_CHECK(offsets.shape[0] == k.shape[0] + 1, "offsets has shape ", offsets.shape_str(),
                "; expected [Hkv + 1 = ", k.shape[0] + 1, "]");
  compact_impl(k, v, pos, kept, offsets.ptr<int64_t>(), 0, kept.numel(), out_k, out_v, out_pos,
               stream);
}

void set_select_single_launch(bool enabled) {
  detail::set_select_single_launch(enabled);
}

size_t select_workspace_bytes(int num_kv_heads, int64_t n, int64_t n_keep, bool two_stage) {
  return detail::select_scratch_bytes(num_kv_heads, n, n_keep, two_stage);
}

void select(const TensorView& scores, const TensorView& aux, int64_t n_keep, int sink, int window,
            Policy policy, double alpha, const TensorView& kept, const TensorView& offsets,
            Workspace ws, Stream stream) {
  check_device(scores, "scores", DType::kF32, 2);
  KVEVICT_CHECK(scores.is_contiguous(), "scores must be contiguous; got strides ", scores.stride[0],
                "/", scores.stride[1]);
  const int64_t hkv = scores.shape[0], n = scores.shape[1];
  KVEVICT_CHECK(hkv >= 1 && hkv <= 256, "Hkv = ", hkv, " is out of range; expected 1..256");
  KVEVICT_CHECK(hkv * n <= (int64_t{1} << 31) - 1, "Hkv * n = ", hkv * n,
                " exceeds the i32 index range");
  KVEVICT_CHECK(sink >= 0 && window >= 0, "sink ", sink, " / window ", window,
                " is negative; expected >= 0");
  const int64_t prot = protected_count(n, sink, window);
  KVEVICT_CHECK(n_keep >= prot && n_keep <= n, "n_keep ", n_keep, " is out of range; expected ",
                prot, " (protected tokens) <= n_keep <= n = ", n);
  KVEVICT_CHECK(alpha >= 0.0 && alpha <= 1.0, "adakv alpha ", alpha,
                " is out of range; expected 0 <= alpha <= 1");
  const bool two_stage = !aux.empty();
  if (two_stage) {
    check_device(aux, "aux scores", DType::kF32, 2);
    KVEVICT_CHECK(aux.shape == scores.shape && aux.is_contiguous(), "aux has shape ",
                  aux.shape_str(), "; expected contiguous ", scores.shape_str(), " like scores");
  }
  if (n_keep > 0) check_device(kept, "kept", DType::kI32, 1);  // n_keep = 0: may be empty
  KVEVICT_CHECK(kept.ndim == 1 && kept.shape[0] == hkv * n_keep, "kept has shape ",
                kept.shape_str(), "; expected [Hkv * n_keep = ", hkv * n_keep, "]");
  check_device(offsets, "offsets", DType::kI64, 1);
  KVEVICT_CHECK(offsets.shape[0] == hkv + 1, "offsets has shape ", offsets.shape_str(),
                "; expected [Hkv + 1 = ", hkv + 1, "]");
  const size_t need = detail::select_scratch_bytes(static_cast<int>(hkv), n, n_keep, two_stage);
  KVEVICT_CHECK(ws.bytes >= need, "workspace of ", ws.bytes, " bytes is too small; need ", need);
  KVEVICT_CUDA_CHECK(detail::launch_select(
      scores.ptr<float>(), two_stage ? aux.ptr<float>() : nullptr, static_cast<int>(hkv), n, n_keep,
      sink, window, policy == Policy::kAdaKV, alpha, kept.ptr<int32_t>(), offsets.ptr<int64_t>(),
      ws.data, ws.bytes, static_cast<cudaStream_t>(stream)));
}

PagedPlan paged_plan(const std::vector<int64_t>& counts, int page_size, int64_t first_page) {
  KVEVICT_CHECK(page_size >= 1, "page size ", page_size, " is invalid; expected >= 1");
  KVEVICT_CHECK(first_page >= 0, "first page ", first_page, " is negative; expected >= 0");
  PagedPlan plan;
  plan.page_size = page_size;
  plan.lens = counts;
  int64_t max_pages = 1;
  for (int64_t c : counts) {
    KVEVICT_CHECK(c >= 0, "kept count ", c, " is negative; expected >= 0");
    max_pages = std::max<int64_t>(max_pages, (c + page_size - 1) / page_size);
  }
  KVEVICT_CHECK(max_pages <= (int64_t{1} << 30), "a head needs ", max_pages, " pages; too many");
  plan.max_pages = static_cast<int>(max_pages);
  plan.page_table.assign(counts.size() * static_cast<size_t>(max_pages), -1);
  int64_t next = first_page;
  for (size_t h = 0; h < counts.size(); ++h) {
    const int64_t pages = (counts[h] + page_size - 1) / page_size;
    for (int64_t i = 0; i < pages; ++i) {
      KVEVICT_CHECK(next <= (int64_t{1} << 31) - 1, "page index ", next, " exceeds i32");
      plan.page_table[h * max_pages + i] = static_cast<int32_t>(next++);
    }
  }
  plan.num_pages = next - first_page;
  return plan;
}

void compact_paged(const TensorView& k, const TensorView& v, const TensorView& pos,
                   const TensorView& kept, const TensorView& kept_offsets,
                   const TensorView& page_table, const TensorView& out_k, const TensorView& out_v,
                   const TensorView& out_pos, Stream stream) {
  check_kv(k, v);
  const int64_t hkv = k.shape[0], n = k.shape[1], d = k.shape[2];
  check_device(kept, "kept", DType::kI32, 1);
  KVEVICT_CHECK(kept.is_contiguous(), "kept must be contiguous");
  check_device(kept_offsets, "kept_offsets", DType::kI64, 1);
  KVEVICT_CHECK(kept_offsets.shape[0] == hkv + 1, "kept_offsets has shape ",
                kept_offsets.shape_str(), "; expected [Hkv + 1 = ", hkv + 1, "]");
  check_device(page_table, "page_table", DType::kI32, 2);
  KVEVICT_CHECK(
      page_table.shape[0] == hkv && page_table.is_contiguous() && page_table.shape[1] >= 1,
      "page_table has shape ", page_table.shape_str(), "; expected contiguous [", hkv,
      ", max_pages]");
  if (!pos.empty()) {
    check_device(pos, "pos", DType::kI32, 2);
    KVEVICT_CHECK(pos.shape[0] == hkv && pos.shape[1] == n && pos.inner_contiguous(),
                  "pos has shape ", pos.shape_str(), "; expected [", hkv, ", ", n, "]");
  }
  for (const TensorView* t : {&out_k, &out_v}) {
    KVEVICT_CHECK(t->device == Device::kCuda && t->dtype == k.dtype && t->ndim == 3 &&
                      t->is_contiguous() && t->shape[2] == d && t->shape == out_k.shape,
                  t == &out_k ? "out_k" : "out_v", " has shape ", t->shape_str(), " ",
                  dtype_name(t->dtype), "; expected contiguous ", dtype_name(k.dtype),
                  " [num_pages, page_size, ", d, "]");
  }
  const int64_t page_size = out_k.shape[1];
  check_device(out_pos, "out_pos", DType::kI32, 2);
  KVEVICT_CHECK(out_pos.shape[0] == out_k.shape[0] && out_pos.shape[1] == page_size &&
                    out_pos.is_contiguous(),
                "out_pos has shape ", out_pos.shape_str(), "; expected [", out_k.shape[0], ", ",
                page_size, "]");
  detail::GatherArgs a;
  const int eb = static_cast<int>(dtype_size(k.dtype));
  a.k = static_cast<const char*>(k.data);
  a.v = static_cast<const char*>(v.data);
  a.head_stride_b = k.stride[0] * eb;
  a.row_stride_b = k.stride[1] * eb;
  a.row_bytes = static_cast<int>(d * eb);
  a.pos = pos.empty() ? nullptr : pos.ptr<int32_t>();
  a.pos_head_stride = pos.empty() ? 0 : pos.stride[0];
  a.kept = kept.ptr<int32_t>();
  a.kept_offsets = kept_offsets.ptr<int64_t>();
  a.page_table = page_table.ptr<int32_t>();
  a.max_pages = static_cast<int>(page_table.shape[1]);
  a.page_size = static_cast<int>(page_size);
  a.dst_rows = out_k.shape[0] * page_size;
  a.out_k = static_cast<char*>(out_k.data);
  a.out_v = static_cast<char*>(out_v.data);
  a.out_pos = out_pos.ptr<int32_t>();
  a.num_heads = static_cast<int>(hkv);
  a.rows = kept.numel();
  KVEVICT_CUDA_CHECK(detail::launch_gather_rows(a, static_cast<cudaStream_t>(stream)));
}

}  // namespace kvevict::cuda
