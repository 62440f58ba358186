// The CUDA backend: the Backend interface (kvevict/backend.h) over the kernels of src/cuda/, so
// LayerEvictor runs the same pipeline on the GPU as on the CPU. The backend owns small device
// staging buffers (selection outputs, index uploads), grown on demand; everything the caller
// sizes (scores, workspaces, caches) comes from allocate().
#include <cuda_runtime.h>

#include <algorithm>
#include <sstream>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/launchers.h"
#include "kvevict/backend.h"
#include "kvevict/cuda/attention.h"
#include "kvevict/cuda/backend.h"
#include "kvevict/cuda/compact.h"
#include "kvevict/cuda/score.h"
#include "kvevict/cuda/select.h"
#include "kvevict/error.h"

namespace kvevict {
namespace {

std::shared_ptr<void> device_allocate(size_t bytes) {
  void* p = nullptr;
  // 256 bytes at least: a zero-byte request still gets a distinct, non-null buffer (callers test
  // the handle for null to decide whether to allocate).
  KVEVICT_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 256)));
  return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
}

// A grow-only device buffer.
class Staging {
 public:
  void* get(size_t bytes) {
    if (bytes > bytes_ || !buf_) {
      buf_ = device_allocate(bytes);
      bytes_ = std::max<size_t>(bytes, 256);
    }
    return buf_.get();
  }
  size_t bytes() const { return bytes_; }

 private:
  std::shared_ptr<void> buf_;
  size_t bytes_ = 0;
};

void check_cuda_layer(const KVLayerView& c, const char* what) {
  c.validate(what);
  KVEVICT_CHECK(c.device == Device::kCuda, what,
                " is in host memory; expected a device cache for the cuda backend");
}

class CudaBackend final : public Backend {
 public:
  const char* name() const override { return "cuda"; }
  Device device() const override { return Device::kCuda; }
  std::shared_ptr<void> allocate(size_t bytes) override { return device_allocate(bytes); }

  size_t score_workspace_bytes(const ScoreProblem& problem,
                               const ScoreOptions& opt) const override {
    return cuda::score_workspace_bytes(problem, opt);
  }
  void score(const ScoreProblem& problem, const ScoreOptions& opt, const ScoreOutput& out,
             Workspace ws) override {
    problem.validate(opt, /*check_values=*/false);
    cuda::score(problem, opt, out, ws);
  }

  Selection select(const TensorView& scores, const TensorView& aux,
                   const SelectOptions& opt) override {
    opt.validate();
    KVEVICT_CHECK(scores.ndim == 2 && scores.device == Device::kCuda, "scores ", scores.shape_str(),
                  " must be a device [Hkv, n] tensor for the cuda backend");
    const int hkv = static_cast<int>(scores.shape[0]);
    const int64_t n = scores.shape[1];
    int64_t n_keep = opt.budget.keep_count(n);  // throws naming a count above n
    const int64_t prot = cuda::protected_count(n, opt.sink, opt.window);
    Selection sel;
    sel.num_kv_heads = hkv;
    if (n_keep < prot) {
      std::ostringstream os;
      os << "budget of " << n_keep << " tokens is below the " << prot << " protected tokens (sink "
         << opt.sink << ", window " << opt.window << "); keeping just the protected tokens";
      sel.warning = os.str();
      n_keep = prot;
    }
    const bool two_stage = !aux.empty();
    const size_t kept_n = static_cast<size_t>(hkv) * n_keep;
    const size_t ws_bytes = cuda::select_workspace_bytes(hkv, n, n_keep, two_stage);
    WorkspaceSizer sizer;
    sizer.add<int32_t>(kept_n).add<int64_t>(hkv + 1).add<unsigned long long>(2).add<char>(ws_bytes);
    WorkspaceCarver carver(Workspace{stage_.get(sizer.bytes()), stage_.bytes()});
    int32_t* kept = carver.take<int32_t>(kept_n);
    int64_t* offsets = carver.take<int64_t>(hkv + 1);
    unsigned long long* first_nan = carver.take<unsigned long long>(2);  // scores, aux
    char* ws = carver.take<char>(ws_bytes);
    // kvevict::select rejects NaN scores; the GPU radix order would rank NaN above every number.
    KVEVICT_CUDA_CHECK(cudaMemsetAsync(first_nan, 0xff, 2 * sizeof(unsigned long long)));
    if (scores.numel() > 0 && scores.is_contiguous() && scores.dtype == DType::kF32)
      KVEVICT_CUDA_CHECK(
          cuda::detail::launch_find_nan(scores.ptr<float>(), scores.numel(), first_nan, nullptr));
    if (!aux.empty() && aux.is_contiguous() && aux.dtype == DType::kF32 &&
        aux.device == Device::kCuda)
      KVEVICT_CUDA_CHECK(
          cuda::detail::launch_find_nan(aux.ptr<float>(), aux.numel(), first_nan + 1, nullptr));
    cuda::select(scores, aux, n_keep, opt.sink, opt.window, opt.policy, opt.alpha,
                 TensorView(kept, DType::kI32, {static_cast<int64_t>(kept_n)}, Device::kCuda),
                 TensorView(offsets, DType::kI64, {hkv + 1}, Device::kCuda),
                 Workspace{ws, ws_bytes});
    sel.offsets.resize(hkv + 1);
    sel.index.resize(kept_n);
    KVEVICT_CUDA_CHECK(cudaMemcpy(sel.offsets.data(), offsets, sizeof(int64_t) * (hkv + 1),
                                  cudaMemcpyDeviceToHost));
    if (kept_n > 0)
      KVEVICT_CUDA_CHECK(
          cudaMemcpy(sel.index.data(), kept, sizeof(int32_t) * kept_n, cudaMemcpyDeviceToHost));
    unsigned long long nan_at[2];
    KVEVICT_CUDA_CHECK(cudaMemcpy(nan_at, first_nan, sizeof(nan_at), cudaMemcpyDeviceToHost));
    for (int which = 0; which < 2; ++which)
      KVEVICT_CHECK(nan_at[which] == ~0ull, which == 0 ? "score" : "aux score", " of head ",
                    static_cast<int64_t>(nan_at[which] / (n > 0 ? n : 1)), " row ",
                    static_cast<int64_t>(nan_at[which] % (n > 0 ? n : 1)),
                    " is NaN; expected a number");
    KVEVICT_CHECK(sel.offsets.back() == static_cast<int64_t>(kept_n), "GPU selection kept ",
                  sel.offsets.back(), " rows; expected ", kept_n);
    return sel;
  }

  void compact(const KVLayerView& in, const Selection& selection, const KVLayerView& out) override {
    check_cuda_layer(in, "compaction input");
    check_cuda_layer(out, "compaction output");
    KVEVICT_CHECK(
        in.dtype == out.dtype && in.num_kv_heads == out.num_kv_heads && in.head_dim == out.head_dim,
        "compaction layout mismatch: input ", dtype_name(in.dtype), " ", in.num_kv_heads,
        " heads of ", in.head_dim, ", output ", dtype_name(out.dtype), " ", out.num_kv_heads,
        " heads of ", out.head_dim, "; expected the same");
    KVEVICT_CHECK(selection.num_kv_heads == in.num_kv_heads, "selection covers ",
                  selection.num_kv_heads, " KV heads; expected ", in.num_kv_heads);
    selection.validate(in.lens);
    const int hkv = in.num_kv_heads;
    for (int h = 0; h < hkv; ++h) {
      const int64_t cap = out.offsets[h + 1] - out.offsets[h];
      KVEVICT_CHECK(selection.count(h) <= cap, "compaction output head ", h, " holds ", cap,
                    " rows; the selection keeps ", selection.count(h),
                    "; expected capacity >= kept");
    }
    KVEVICT_CHECK(in.k == nullptr || in.k != out.k,
                  "compaction is out of place; input and output share memory");
    const int row_bytes = in.head_dim * static_cast<int>(dtype_size(in.dtype));
    KVEVICT_CHECK(row_bytes % 16 == 0, "rows of ", in.head_dim, " ", dtype_name(in.dtype),
                  " are not a multiple of 16 bytes; the CUDA compaction copies 16-byte chunks");
    const int64_t rows = selection.total();
    // One upload: kept indices, their offsets, the source and destination segment starts.
    std::vector<int64_t> table(3 * static_cast<size_t>(hkv) + 1);
    std::copy(selection.offsets.begin(), selection.offsets.end(), table.begin());
    std::copy(in.offsets, in.offsets + hkv, table.begin() + hkv + 1);
    std::copy(out.offsets, out.offsets + hkv, table.begin() + 2 * hkv + 1);
    WorkspaceSizer sizer;
    sizer.add<int64_t>(table.size()).add<int32_t>(static_cast<size_t>(rows));
    WorkspaceCarver carver(Workspace{stage_.get(sizer.bytes()), stage_.bytes()});
    int64_t* d_table = carver.take<int64_t>(table.size());
    int32_t* d_kept = carver.take<int32_t>(static_cast<size_t>(rows));
    KVEVICT_CUDA_CHECK(
        cudaMemcpy(d_table, table.data(), sizeof(int64_t) * table.size(), cudaMemcpyHostToDevice));
    if (rows > 0)
      KVEVICT_CUDA_CHECK(cudaMemcpy(d_kept, selection.index.data(), sizeof(int32_t) * rows,
                                    cudaMemcpyHostToDevice));
    cuda::detail::GatherArgs a;
    a.k = static_cast<const char*>(in.k);
    a.v = static_cast<const char*>(in.v);
    a.row_stride_b = row_bytes;
    a.row_bytes = row_bytes;
    a.pos = in.pos;
    a.acc = in.score_acc;
    a.src_base = d_table + hkv + 1;
    a.kept = d_kept;
    a.kept_offsets = d_table;
    a.dst_base = d_table + 2 * hkv + 1;
    a.dst_rows = out.capacity_rows();
    a.out_k = static_cast<char*>(out.k);
    a.out_v = static_cast<char*>(out.v);
    a.out_pos = out.pos;
    a.out_acc = out.score_acc;
    a.num_heads = hkv;
    a.rows = rows;
    KVEVICT_CUDA_CHECK(cuda::detail::launch_gather_rows(a, nullptr));
    KVEVICT_CUDA_CHECK(cudaStreamSynchronize(nullptr));
    for (int h = 0; h < hkv; ++h) out.lens[h] = selection.count(h);
  }

  size_t attention_workspace_bytes(const AttentionProblem& problem) const override {
    return cuda::attention_workspace_bytes(problem);
  }
  void attention(const AttentionProblem& problem, const AttentionOutput& output,
                 Workspace ws) override {
    cuda::attention(problem, output, ws);
  }

 private:
  Staging stage_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend() {
  KVEVICT_CHECK(cuda::device_available(),
                "the cuda backend needs a CUDA device; none is visible (use the cpu backend)");
  return std::make_unique<CudaBackend>();
}

}  // namespace kvevict
