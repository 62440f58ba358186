// GpuSession's state and the host helpers its files share (internal to src/model_cuda): the
// session is one idea a file: gpu_session.cpp (construction, prefill, the batch's rows, state),
// row_eviction.cpp (a row's prefill eviction and the batch assembled from rows or a snapshot),
// gpu_decode.cpp (decode steps, decode-time eviction, sampling, perplexity) and gpu_snapshot.cpp
// (the context and the prefill snapshot).
//
// A row's cache of one layer is a LayerCache of Hkv segments. Its prefill layout gives every
// segment n + room rows (row = position), so the window kernel and the scores read the layer as
// [Hkv, n, d] with a head stride. Eviction compacts into a new layer sized for the kept rows plus
// `room` per head (the segment table written on the device when only the device knows the
// counts, adakv); the old layer is dropped in stream order. The batch's layer is the rows' layers
// concatenated (assemble_rows); with one row it is that row's layer.
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "cuda/device_buffer.h"
#include "kvevict/decode_evict.h"
#include "kvevict/evict.h"
#include "model_cuda/gpu_forward.h"
#include "model_cuda/gpu_runtime.h"
#include "model_cuda/layer_cache.h"

namespace kvevict::gpu {

using cuda::DeviceBuffer;

class EventTimer {
 public:
  explicit EventTimer(cudaStream_t s) : s_(s) {
    KVEVICT_CUDA_CHECK(cudaEventCreate(&a_));
    KVEVICT_CUDA_CHECK(cudaEventCreate(&b_));
    KVEVICT_CUDA_CHECK(cudaEventRecord(a_, s_));
  }
  double seconds() {
    KVEVICT_CUDA_CHECK(cudaEventRecord(b_, s_));
    KVEVICT_CUDA_CHECK(cudaEventSynchronize(b_));
    float ms = 0;
    KVEVICT_CUDA_CHECK(cudaEventElapsedTime(&ms, a_, b_));
    return ms / 1e3;
  }
  ~EventTimer() {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }

 private:
  cudaStream_t s_;
  cudaEvent_t a_ = nullptr, b_ = nullptr;
};

using RowLayers = std::vector<LayerCache>;  // [n_layers] one row's caches, Hkv segments each

// A keep-everything host selection of a layer's rows (sliding rings keep their slots).
inline Selection keep_all(const LayerCache& L) {
  return Selection::keep_all(L.segments, L.len_h.data());
}

// An environment switch: unset = `fallback`, "0" = off, anything else = on.
inline bool env_flag(const char* name, bool fallback) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == '\0') return fallback;
  return std::string(e) != "0";
}

// Device time by phase of a batch's eviction (KVEVICT_EVICT_PROFILE=1): an event at every mark;
// the interval up to the next mark is charged to the phase the mark named. Off: marks do nothing.
class PhaseClock {
 public:
  enum Phase { kScore, kSelect, kCompact, kCopy, kAssemble, kEnd };
  PhaseClock(cudaStream_t stream, bool on) : stream_(stream), on_(on) {}
  ~PhaseClock() { clear(); }
  PhaseClock(const PhaseClock&) = delete;
  PhaseClock& operator=(const PhaseClock&) = delete;
  void mark(Phase p) {
    if (!on_) return;
    cudaEvent_t e = nullptr;
    KVEVICT_CUDA_CHECK(cudaEventCreate(&e));
    marks_.push_back({e, p});
    KVEVICT_CUDA_CHECK(cudaEventRecord(e, stream_));
  }
  // Closes the last phase and adds each phase's seconds to `cost` (waits for the device).
  void add_to(EvictCost& cost) {
    if (!on_ || marks_.empty()) return;
    mark(kEnd);
    KVEVICT_CUDA_CHECK(cudaEventSynchronize(marks_.back().event));
    double sec[kEnd] = {};
    for (size_t i = 0; i + 1 < marks_.size(); ++i) {
      float ms = 0;
      KVEVICT_CUDA_CHECK(cudaEventElapsedTime(&ms, marks_[i].event, marks_[i + 1].event));
      sec[marks_[i].phase] += ms / 1e3;
    }
    cost.score_seconds += sec[kScore];
    cost.select_seconds += sec[kSelect];
    cost.compact_seconds += sec[kCompact];
    cost.copy_seconds += sec[kCopy];
    cost.assemble_seconds += sec[kAssemble];
    clear();
  }

 private:
  struct Mark {
    cudaEvent_t event;
    Phase phase;
  };
  void clear() {
    for (const Mark& m : marks_) cudaEventDestroy(m.event);
    marks_.clear();
  }
  cudaStream_t stream_;
  bool on_;
  std::vector<Mark> marks_;
};

// The session's state: one batch of rows, every layer's cache, the decode-time evictor.
struct GpuSession::Impl {
  std::shared_ptr<GpuContext> ctx;
  GpuSessionOptions opt;
  GpuForward* fwd = nullptr;               // the context's
  DeviceBuffer logits;                     // [batch, V] f32: every row's next-token logits
  RowLayers layers;                        // [n_layers] the batch: opt.batch * Hkv segments each
  std::vector<int64_t> positions;          // [batch] next position of each row
  std::unique_ptr<DecodeEvictor> evictor;  // decode-time eviction, when configured
  StepScoring scoring;
  bool have_rows = false;       // prefill or load_rows ran
  std::vector<float> logits_h;  // [V] row 0's logits, downloaded on demand
  bool logits_h_valid = false;
  DeviceBuffer ids, sample_scratch, draws;  // [batch] i32, sampling sort buffers, draws [batch]
  SessionStats stats;

  const ModelConfig& c() const { return ctx->model().config(); }
  cudaStream_t stream() const { return ctx->stream(); }
  Backend& backend() const { return ctx->backend(); }

  RowLayers prefill_row(const std::vector<int32_t>& tokens, int64_t need, int64_t room,
                        std::vector<DeviceBuffer>* qcap);
  void trim_sliding(RowLayers& row, int64_t n, int64_t room);
  // `n`: the prompt's tokens (sliding layers hold fewer rows).
  RowLayers evict_row(RowLayers& full, int64_t n, const std::vector<DeviceBuffer>& qcap, int64_t m,
                      const PrefillEviction& ev, int64_t room, bool keep_full,
                      PhaseClock* clock = nullptr);
  RowLayers copy_row(RowLayers& full, int64_t room);
  // load_rows, every config on its own (KVEVICT_SHARED_SCORES=0, the earlier path kept for
  // comparisons): each evicts or copies a row cache of its own, then set_rows assembles them.
  std::vector<RowLayers> evict_each(const GpuSnapshot& snap,
                                    const std::vector<EvictConfig>& configs, PhaseClock& clock);
  // load_rows with shared work: configs with the same score options score each layer once and
  // select from it each with its own selection options; every row's kept rows are gathered
  // straight into the batch's layer (no row caches, no assembly copy); a sliding layer (the same
  // ring in every row) is gathered once and replicated.
  void load_shared(const GpuSnapshot& snap, const std::vector<EvictConfig>& configs,
                   PhaseClock& clock);
  void check_prefill_layout(const RowLayers& full, int64_t n) const;
  ScoreProblem layer_problem(LayerCache& F, int layer, int64_t n,
                             const std::vector<DeviceBuffer>& qcap, int64_t m_queries,
                             int64_t need) const;
  LayerCache compact_layer(LayerCache& F, const Selection& sel, int64_t room);
  // `copies` copies of a layer, one after another (rows of a batch), each with room more rows
  // per head (a sliding layer: its ring, up to the window).
  LayerCache copy_layer(LayerCache& F, int layer, int64_t room, int copies = 1);
  void set_rows(std::vector<RowLayers> rows, int64_t n, const EvictConfig& evict);
  void start_decode(int64_t n, const EvictConfig& evict);
  void setup_decode(const EvictConfig& evict);
  void decode_step(int32_t* tokens_dev, bool score, bool argmax_first = false);
  void evict_decode();
  void check_tokens(const std::vector<int32_t>& tokens) const;
};

}  // namespace kvevict::gpu
