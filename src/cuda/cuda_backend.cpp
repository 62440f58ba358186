// The CUDA backend: the Backend interface (kvevict/backend.h) over the kernels of src/cuda/, so
// LayerEvictor and DecodeEvictor run the same pipeline on the GPU as on the CPU.
//
// Everything is ordered on the backend's stream and returns without waiting, except where the
// interface hands results to the host (a host-resident selection). Memory comes from the stream-
// ordered allocator (cudaMallocAsync / cudaFreeAsync on the backend's stream), so dropping a
// buffer never stalls the device; the stream must outlive every buffer the backend handed out.
// Tables the kernels need (segment starts, kept offsets, cut lists) are read from the caches'
// device tables when they have them, else uploaded through a grow-only staging buffer (pageable
// uploads are staged by the driver before cudaMemcpyAsync returns, so the host arrays may change
// right after).
//
// NaN scores: kvevict::select rejects them; the radix order would rank NaN above every number.
// A host-resident select checks and throws at once; a device-resident one records the first NaN
// in a device status word that synchronize() reads and throws on.
//
// Infinite scores: the host backends refuse a score that overflows float32 as they compute it
// (check_scores_finite). score() here cannot wait for its kernels, so it records the first
// infinite score in a second status word; the next host-resident select() or synchronize()
// throws on it (a select would otherwise rank -inf last and +inf first, a silent wrong answer).
#include <cuda_runtime.h>

#include <algorithm>
#include <sstream>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/launchers.h"
#include "kvevict/backend.h"
#include "kvevict/cuda/attention.h"
#include "kvevict/cuda/backend.h"
#include "kvevict/cuda/score.h"
#include "kvevict/cuda/select.h"
#include "kvevict/error.h"

namespace kvevict {
namespace {

std::shared_ptr<void> stream_allocate(size_t bytes, cudaStream_t stream) {
  void* p = nullptr;
  // 256 bytes at least: a zero-byte request still gets a distinct, non-null buffer (callers test
  // the handle for null to decide whether to allocate).
  const cudaError_t err = cudaMallocAsync(&p, std::max<size_t>(bytes, 256), stream);
  if (err != cudaSuccess) {
    size_t free_b = 0, total_b = 0;
    cudaGetLastError();
    cudaMemGetInfo(&free_b, &total_b);
    KVEVICT_FAIL("device allocation of ", bytes, " bytes failed (", cudaGetErrorString(err), "); ",
                 free_b, " of ", total_b, " bytes free");
  }
  return std::shared_ptr<void>(p, [stream](void* q) { cudaFreeAsync(q, stream); });
}

void check_cuda_layer(const KVLayerView& c, const char* what) {
  c.validate(what);
  KVEVICT_CHECK(c.device == Device::kCuda, what,
                " is in host memory; expected a device cache for the cuda backend");
}

// The device status words: the first element (UINT64_MAX: none) of a NaN score that a
// device-resident select() took, of an infinite score and of an infinite aux score that score()
// computed since the words were last read.
struct Status {
  unsigned long long first_nan_selected = ~0ull;
  unsigned long long first_inf_score = ~0ull;
  unsigned long long first_inf_aux = ~0ull;
  bool clear() const { return (first_nan_selected & first_inf_score & first_inf_aux) == ~0ull; }
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(cudaStream_t stream) : stream_(stream) {
    status_ = stream_allocate(sizeof(Status), stream_);
    KVEVICT_CUDA_CHECK(cudaMemsetAsync(status_.get(), 0xff, sizeof(Status), stream_));
  }
  ~CudaBackend() override {
    // Buffers handed out are freed in stream order; the staging buffer and status words too.
    stage_.reset();
    status_.reset();
  }

  const char* name() const override { return "cuda"; }
  Device device() const override { return Device::kCuda; }
  void* stream() const override { return stream_; }
  void synchronize() override {
    Status st;
    KVEVICT_CUDA_CHECK(
        cudaMemcpyAsync(&st, status_.get(), sizeof(st), cudaMemcpyDeviceToHost, stream_));
    KVEVICT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    throw_on_status(st);
  }
  std::shared_ptr<void> allocate(size_t bytes) override { return stream_allocate(bytes, stream_); }

  size_t score_workspace_bytes(const ScoreProblem& problem,
                               const ScoreOptions& opt) const override {
    return cuda::score_workspace_bytes(problem, opt);
  }
  void score(const ScoreProblem& problem, const ScoreOptions& opt, const ScoreOutput& out,
             Workspace ws) override {
    problem.validate(opt, /*check_values=*/false);
    cuda::score(problem, opt, out, ws, stream_);
    // cuda::score wrote contiguous f32 [Hkv, n] outputs (it checks them).
    auto* st = static_cast<Status*>(status_.get());
    KVEVICT_CUDA_CHECK(cuda::detail::launch_find_inf(out.scores.ptr<float>(), out.scores.numel(),
                                                     &st->first_inf_score, stream_));
    if (!out.aux.empty())
      KVEVICT_CUDA_CHECK(cuda::detail::launch_find_inf(out.aux.ptr<float>(), out.aux.numel(),
                                                       &st->first_inf_aux, stream_));
  }

  Selection select(const TensorView& scores, const TensorView& aux, const SelectOptions& opt,
                   Residency where) override {
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
    const int64_t kept_n = static_cast<int64_t>(hkv) * n_keep;
    // The selection's own arrays (they outlive this call), then the kernels' scratch.
    WorkspaceSizer own;
    own.add<int64_t>(hkv + 1).add<int32_t>(static_cast<size_t>(kept_n));
    sel.device.storage = stream_allocate(own.bytes(), stream_);
    WorkspaceCarver own_carver(Workspace{sel.device.storage.get(), own.bytes()});
    auto* offsets = own_carver.take<int64_t>(hkv + 1);
    auto* kept = own_carver.take<int32_t>(static_cast<size_t>(kept_n));
    sel.device.offsets = offsets;
    sel.device.index = kept;
    sel.rows = kept_n;
    const size_t ws_bytes = cuda::select_workspace_bytes(hkv, n, n_keep, two_stage);
    WorkspaceSizer sizer;
    sizer.add<unsigned long long>(2).add<char>(ws_bytes);
    WorkspaceCarver carver(Workspace{stage(sizer.bytes()), stage_bytes_});
    auto* first_nan = carver.take<unsigned long long>(2);  // scores, aux
    char* ws = carver.take<char>(ws_bytes);
    KVEVICT_CUDA_CHECK(cudaMemsetAsync(first_nan, 0xff, 2 * sizeof(unsigned long long), stream_));
    if (scores.numel() > 0 && scores.is_contiguous() && scores.dtype == DType::kF32)
      KVEVICT_CUDA_CHECK(
          cuda::detail::launch_find_nan(scores.ptr<float>(), scores.numel(), first_nan, stream_));
    if (two_stage && aux.is_contiguous() && aux.dtype == DType::kF32 && aux.device == Device::kCuda)
      KVEVICT_CUDA_CHECK(
          cuda::detail::launch_find_nan(aux.ptr<float>(), aux.numel(), first_nan + 1, stream_));
    cuda::select(scores, aux, n_keep, opt.sink, opt.window, opt.policy, opt.alpha,
                 TensorView(kept, DType::kI32, {kept_n}, Device::kCuda),
                 TensorView(offsets, DType::kI64, {hkv + 1}, Device::kCuda),
                 Workspace{ws, ws_bytes}, stream_);
    if (opt.policy == Policy::kUniform) {
      // Every head keeps n_keep (criticalkv's two stages too): the counts need no download.
      sel.offsets.resize(hkv + 1);
      for (int h = 0; h <= hkv; ++h) sel.offsets[h] = h * n_keep;
    }
    if (where == Residency::kDevice) {
      // The NaN check folds into the status word that synchronize() reads.
      KVEVICT_CUDA_CHECK(cuda::detail::launch_min_u64(
          first_nan, 2, &static_cast<Status*>(status_.get())->first_nan_selected, stream_));
      return sel;
    }
    download(sel);
    unsigned long long nan_at[2];
    Status st;
    KVEVICT_CUDA_CHECK(
        cudaMemcpyAsync(nan_at, first_nan, sizeof(nan_at), cudaMemcpyDeviceToHost, stream_));
    KVEVICT_CUDA_CHECK(
        cudaMemcpyAsync(&st, status_.get(), sizeof(st), cudaMemcpyDeviceToHost, stream_));
    KVEVICT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    throw_on_status(st);
    for (int which = 0; which < 2; ++which)
      KVEVICT_CHECK(nan_at[which] == ~0ull, which == 0 ? "score" : "aux score", " of head ",
                    static_cast<int64_t>(nan_at[which] / (n > 0 ? n : 1)), " row ",
                    static_cast<int64_t>(nan_at[which] % (n > 0 ? n : 1)),
                    " is NaN; expected a number");
    KVEVICT_CHECK(sel.offsets.back() == kept_n, "GPU selection kept ", sel.offsets.back(),
                  " rows; expected ", kept_n);
    return sel;
  }

  void plan_segments(const Selection& selection, int64_t slack, const KVLayerView& out) override {
    uploads_.clear();
    KVEVICT_CHECK(slack >= 0, "slack ", slack, " is negative; expected >= 0");
    KVEVICT_CHECK(out.device == Device::kCuda && out.num_kv_heads == selection.num_kv_heads,
                  "plan_segments: the output cache has ", out.num_kv_heads,
                  " heads; expected a device cache of ", selection.num_kv_heads, " heads");
    const int hkv = selection.num_kv_heads;
    if (selection.has_host_offsets() && out.has_host_table()) {
      auto* offsets = const_cast<int64_t*>(out.offsets);  // the caller's writable table
      offsets[0] = 0;
      for (int h = 0; h < hkv; ++h) {
        offsets[h + 1] = offsets[h] + selection.count(h) + slack;
        out.lens[h] = selection.count(h);
      }
    }
    if (!out.has_device_table()) {
      KVEVICT_CHECK(selection.has_host_offsets() && out.has_host_table(),
                    "plan_segments of a device-only selection needs the output cache's device "
                    "table (device_offsets, device_lens)");
      return;
    }
    const int64_t* kept_off = selection.device.offsets;
    if (kept_off == nullptr) kept_off = upload(selection.offsets.data(), hkv + 1);
    KVEVICT_CUDA_CHECK(cuda::detail::launch_packed_segments(
        kept_off, hkv, slack, out.device_offsets, out.device_lens, stream_));
  }

  void compact(const KVLayerView& in, const Selection& selection, const KVLayerView& out) override {
    uploads_.clear();
    check_cuda_layer(in, "compaction input");
    check_cuda_layer(out, "compaction output");
    KVEVICT_CHECK(
        in.dtype == out.dtype && in.num_kv_heads == out.num_kv_heads && in.head_dim == out.head_dim,
        "compaction layout mismatch: input ", dtype_name(in.dtype), " ", in.num_kv_heads,
        " heads of ", in.head_dim, ", output ", dtype_name(out.dtype), " ", out.num_kv_heads,
        " heads of ", out.head_dim, "; expected the same");
    KVEVICT_CHECK(selection.num_kv_heads == in.num_kv_heads, "selection covers ",
                  selection.num_kv_heads, " KV heads; expected ", in.num_kv_heads);
    const int hkv = in.num_kv_heads;
    if (selection.has_host_index() && in.has_host_table()) selection.validate(in.lens);
    if (selection.has_host_offsets() && out.has_host_table())
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
    KVEVICT_CHECK(rows <= out.capacity_rows(), "the selection keeps ", rows,
                  " rows; the output cache holds ", out.capacity_rows());
    cuda::detail::GatherArgs a;
    a.k = static_cast<const char*>(in.k);
    a.v = static_cast<const char*>(in.v);
    a.row_stride_b = row_bytes;
    a.row_bytes = row_bytes;
    a.pos = in.pos;
    a.acc = in.score_acc;
    a.src_base = in.device_offsets ? in.device_offsets : upload(in.offsets, hkv);
    a.kept_offsets = selection.device.offsets ? selection.device.offsets
                                              : upload(selection.offsets.data(), hkv + 1);
    a.kept = selection.device.index ? selection.device.index : upload(selection.index.data(), rows);
    a.dst_base = out.device_offsets ? out.device_offsets : upload(out.offsets, hkv);
    a.dst_rows = out.capacity_rows();
    a.out_k = static_cast<char*>(out.k);
    a.out_v = static_cast<char*>(out.v);
    a.out_pos = out.pos;
    a.out_acc = out.score_acc;
    a.num_heads = hkv;
    a.rows = rows;
    KVEVICT_CUDA_CHECK(cuda::detail::launch_gather_rows(a, stream_));
    if (selection.has_host_offsets() && out.has_host_table())
      for (int h = 0; h < hkv; ++h) out.lens[h] = selection.count(h);
    if (out.has_device_table() && !out.has_host_table()) return;  // plan_segments set the lens
    if (out.has_device_table() && selection.has_host_offsets()) {
      std::vector<int32_t> lens(hkv);
      for (int h = 0; h < hkv; ++h) lens[h] = static_cast<int32_t>(selection.count(h));
      KVEVICT_CUDA_CHECK(cudaMemcpyAsync(out.device_lens, lens.data(), lens.size() * 4,
                                         cudaMemcpyHostToDevice, stream_));
    }
  }

  void cut_segments(const KVLayerView& cache, const SegmentCut& cut) override {
    check_cuda_layer(cache, "decode cache");
    KVEVICT_CHECK(cache.score_acc != nullptr && cache.pos != nullptr,
                  "decode cache has no score accumulator or positions");
    KVEVICT_CHECK(cache.has_device_table(),
                  "the cuda decode cut needs the cache's device "
                  "segment table (device_offsets, device_lens)");
    if (cut.heads.empty()) return;
    int64_t max_len = 0;
    for (int32_t h : cut.heads) {
      KVEVICT_CHECK(h >= 0 && h < cache.num_kv_heads, "cut of head ", h, "; expected 0..",
                    cache.num_kv_heads - 1);
      if (cache.has_host_table()) {
        KVEVICT_CHECK(cache.lens[h] > cut.keep, "cut of head ", h, " with ", cache.lens[h],
                      " rows to ", cut.keep, "; expected more rows than that");
        max_len = std::max(max_len, cache.lens[h]);
      }
    }
    if (!cache.has_host_table()) max_len = cache.capacity_rows();
    const int row_bytes = cache.head_dim * static_cast<int>(dtype_size(cache.dtype));
    const int m = static_cast<int>(cut.heads.size());
    const size_t scratch = cuda::detail::segment_cut_scratch_bytes(m, max_len);
    WorkspaceSizer sizer;
    sizer.add<int32_t>(m).add<char>(scratch);
    WorkspaceCarver carver(Workspace{stage(sizer.bytes()), stage_bytes_});
    auto* heads = carver.take<int32_t>(m);
    char* ws = carver.take<char>(scratch);
    KVEVICT_CUDA_CHECK(cudaMemcpyAsync(heads, cut.heads.data(), m * sizeof(int32_t),
                                       cudaMemcpyHostToDevice, stream_));
    cuda::detail::SegmentCutArgs a;
    a.k = static_cast<char*>(cache.k);
    a.v = static_cast<char*>(cache.v);
    a.pos = cache.pos;
    a.acc = cache.score_acc;
    a.off = cache.device_offsets;
    a.len = cache.device_lens;
    a.heads = heads;
    a.m = m;
    a.keep = cut.keep;
    a.sink = cut.sink;
    a.recent = cut.recent;
    a.row_bytes = row_bytes;
    a.max_len = max_len;
    KVEVICT_CUDA_CHECK(cuda::detail::launch_segment_cut(a, ws, scratch, stream_));
    if (cache.has_host_table())
      for (int32_t h : cut.heads) cache.lens[h] = cut.keep;
  }

  size_t attention_workspace_bytes(const AttentionProblem& problem) const override {
    return cuda::attention_workspace_bytes(problem);
  }
  void attention(const AttentionProblem& problem, const AttentionOutput& output,
                 Workspace ws) override {
    cuda::attention(problem, output, ws, stream_);
  }

 private:
  // Throws on what the status words `st` (read after the stream's work) recorded, once: the
  // device words are reset first.
  void throw_on_status(const Status& st) {
    if (st.clear()) return;
    KVEVICT_CUDA_CHECK(cudaMemsetAsync(status_.get(), 0xff, sizeof(Status), stream_));
    if (st.first_nan_selected != ~0ull)
      KVEVICT_FAIL("a score selected on the device was NaN (element ", st.first_nan_selected,
                   " of its [Hkv, n] scores); expected numbers");
    const bool aux = st.first_inf_score == ~0ull;
    KVEVICT_FAIL("a", aux ? "n aux score" : " score",
                 " computed on the device is infinite (element ",
                 aux ? st.first_inf_aux : st.first_inf_score,
                 " of its [Hkv, n] output): an infinite q, k or v, or finite ones whose score "
                 "overflows float32 (magnitude above 3.4e38); expected inputs whose scores fit "
                 "float32 (scale them down)");
  }
  // The staging buffer (grow-only; a replaced one is freed in stream order after its readers).
  void* stage(size_t bytes) {
    if (bytes > stage_bytes_ || !stage_) {
      stage_ = stream_allocate(bytes, stream_);
      stage_bytes_ = std::max<size_t>(bytes, 256);
    }
    return stage_.get();
  }
  // Uploads `count` host values for the kernels of the current op. Each upload has its own
  // buffer, dropped at the start of the next op: the free is queued behind the kernels that read
  // it, so nothing waits.
  template <class T>
  const T* upload(const T* host, int64_t count) {
    if (count <= 0) return nullptr;
    auto buf = stream_allocate(static_cast<size_t>(count) * sizeof(T), stream_);
    KVEVICT_CUDA_CHECK(cudaMemcpyAsync(buf.get(), host, static_cast<size_t>(count) * sizeof(T),
                                       cudaMemcpyHostToDevice, stream_));
    const T* p = static_cast<const T*>(buf.get());
    uploads_.push_back(std::move(buf));
    return p;
  }
  // Copies a device selection's arrays to the host (waits for them).
  void download(Selection& sel) {
    const int hkv = sel.num_kv_heads;
    sel.offsets.resize(hkv + 1);
    sel.index.resize(static_cast<size_t>(sel.rows));
    KVEVICT_CUDA_CHECK(cudaMemcpyAsync(sel.offsets.data(), sel.device.offsets,
                                       sizeof(int64_t) * (hkv + 1), cudaMemcpyDeviceToHost,
                                       stream_));
    if (sel.rows > 0)
      KVEVICT_CUDA_CHECK(cudaMemcpyAsync(sel.index.data(), sel.device.index,
                                         sizeof(int32_t) * sel.rows, cudaMemcpyDeviceToHost,
                                         stream_));
    KVEVICT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    sel.device = Selection::DeviceArrays{};
    sel.rows = -1;
  }

  cudaStream_t stream_ = nullptr;
  std::shared_ptr<void> stage_;
  size_t stage_bytes_ = 0;
  std::vector<std::shared_ptr<void>> uploads_;
  std::shared_ptr<void> status_;  // one Status on the device
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(cuda::Stream stream) {
  KVEVICT_CHECK(cuda::device_available(),
                "the cuda backend needs a CUDA device; none is visible (use the cpu backend)");
  return std::make_unique<CudaBackend>(static_cast<cudaStream_t>(stream));
}

}  // namespace kvevict
