// One interface for the four operations of the eviction pipeline (ARCHITECTURE.md): score,
// select, compact, attention. The CPU backend (float fast paths) and the reference backend
// (double) are here; the CUDA backend implements the same interface in src/cuda/.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "kvevict/attention.h"
#include "kvevict/cache.h"
#include "kvevict/score.h"
#include "kvevict/select.h"
#include "kvevict/threads.h"  // max_threads, set_num_threads, num_threads
#include "kvevict/workspace.h"

namespace kvevict {

// SPEC section 5's decode-time cut of over-long heads, in place: every head in `heads` keeps
// `keep` rows, its `sink` lowest and `recent` highest positions plus the highest score_acc of
// the others (ties toward the lower position). DecodeEvictor decides which heads and how many
// rows; backends only carry it out.
struct SegmentCut {
  std::vector<int32_t> heads;  // [m] heads (segments) to cut, ascending; each has > keep rows
  int64_t keep = 0;            // rows each cut head keeps
  int sink = 0;                // lowest positions never evicted
  int recent = 0;              // highest positions never evicted
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;  // "cpu", "reference", "cuda"
  virtual Device device() const = 0;     // where every view handed to this backend lives
  // The queue this backend's work is ordered on (cuda: its cudaStream_t, set at creation; every
  // op below is enqueued there and returns without waiting unless it must hand results to the
  // host). Host backends run each op to completion and return nullptr.
  virtual void* stream() const { return nullptr; }
  // Waits for the work this backend has queued (a no-op on host backends).
  virtual void synchronize() {}

  // Memory on this backend's device (scores, workspaces), freed by the returned handle (in
  // stream order on the cuda backend: dropping a handle never waits for the device).
  virtual std::shared_ptr<void> allocate(size_t bytes) = 0;

  // SPEC section 2: scores [Hkv, n] f32 (+ aux for criticalkv) on device().
  virtual size_t score_workspace_bytes(const ScoreProblem& problem,
                                       const ScoreOptions& opt) const = 0;
  virtual void score(const ScoreProblem& problem, const ScoreOptions& opt, const ScoreOutput& out,
                     Workspace ws) = 0;

  // SPEC section 3: scores [Hkv, n] f32 on device() (aux may be empty) -> the Selection.
  // Residency::kHost returns it in host memory (a device backend waits for it);
  // Residency::kDevice lets a device backend leave it in device memory (Selection::device;
  // host backends return a host selection either way).
  virtual Selection select(const TensorView& scores, const TensorView& aux,
                           const SelectOptions& opt, Residency where = Residency::kHost) = 0;

  // The segment table of the packed layout that holds `selection` with `slack` spare rows after
  // every head: offsets[h + 1] = offsets[h] + count(h) + slack, lens[h] = count(h). Written into
  // `out`'s host table (out.offsets must point to writable memory) and, on a device backend, its
  // device table; a device-only selection writes the device table only. `out` needs
  // selection.total() + Hkv * slack rows.
  virtual void plan_segments(const Selection& selection, int64_t slack, const KVLayerView& out) = 0;

  // SPEC section 4: copies the kept rows (k, v, pos, score_acc) of `in` into `out`, whose
  // segments the caller sized (capacity >= kept count per head; see plan_segments or
  // cache_plan_offsets), and sets out's lens. Out of place.
  virtual void compact(const KVLayerView& in, const Selection& selection,
                       const KVLayerView& out) = 0;

  // SPEC section 5 decode-time cut (see SegmentCut), in place; updates the cache's lens (host and
  // device tables).
  virtual void cut_segments(const KVLayerView& cache, const SegmentCut& cut) = 0;

  // Attention over a (compacted) cache.
  virtual size_t attention_workspace_bytes(const AttentionProblem& problem) const = 0;
  virtual void attention(const AttentionProblem& problem, const AttentionOutput& output,
                         Workspace ws) = 0;
};

// The multithreaded float path (cpu::score, select, cache_compact, cpu::attention).
std::unique_ptr<Backend> make_cpu_backend();

// The double-precision ground truth (ref::score, ref::select, cache_compact, ref::attention),
// results rounded to f32 on output. Slow: for tests and small checks.
std::unique_ptr<Backend> make_reference_backend();

}  // namespace kvevict
