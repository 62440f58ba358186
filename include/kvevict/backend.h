// One interface for the four operations of the eviction pipeline (ARCHITECTURE.md): score,
// select, compact, attention. The CPU backend (float fast paths) and the reference backend
// (double) are here; the CUDA backend implements the same interface in src/cuda/.
#pragma once

#include <cstddef>
#include <memory>

#include "kvevict/attention.h"
#include "kvevict/cache.h"
#include "kvevict/score.h"
#include "kvevict/select.h"
#include "kvevict/workspace.h"

namespace kvevict {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;  // "cpu", "reference", "cuda"
  virtual Device device() const = 0;     // where every view handed to this backend lives

  // Memory on this backend's device (scores, workspaces), freed by the returned handle.
  virtual std::shared_ptr<void> allocate(size_t bytes) = 0;

  // SPEC section 2: scores [Hkv, n] f32 (+ aux for criticalkv) on device().
  virtual size_t score_workspace_bytes(const ScoreProblem& problem,
                                       const ScoreOptions& opt) const = 0;
  virtual void score(const ScoreProblem& problem, const ScoreOptions& opt,
                     const ScoreOutput& out, Workspace ws) = 0;

  // SPEC section 3: scores [Hkv, n] f32 on device() (aux may be empty) -> host Selection.
  virtual Selection select(const TensorView& scores, const TensorView& aux,
                           const SelectOptions& opt) = 0;

  // SPEC section 4: copies the kept rows (k, v, pos, score_acc) of `in` into `out`, whose
  // segments the caller sized (capacity >= kept count per head; see cache_plan_offsets).
  virtual void compact(const KVLayerView& in, const Selection& selection,
                       const KVLayerView& out) = 0;

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
