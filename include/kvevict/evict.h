// The eviction pipeline for one layer (the library's public API): score -> select -> compact.
//
//   LayerEvictor ev(backend, score_opt, select_opt);
//   Selection sel = ev.plan(problem);          // scores with the window queries, selects
//   ev.apply(full_cache_view, sel, out_view);  // copies the kept rows into a smaller cache
// The model runtime owns the caches; plan() owns only its score buffers and workspace.
#pragma once

#include <cstdint>
#include <memory>

#include "kvevict/backend.h"
#include "kvevict/cache.h"
#include "kvevict/method.h"
#include "kvevict/score.h"
#include "kvevict/select.h"

namespace kvevict {

struct HostEvictResult {
  HostKVCache cache;  // the compacted cache (kept rows + slack)
  Selection selection;
  int64_t bytes_before = 0;  // K+V bytes of the full cache
  int64_t bytes_after = 0;   // K+V bytes of the compacted cache
};

class LayerEvictor {
 public:
  // select.window is used as given; normally it equals score.window (the observation window is
  // what selection protects), and select.sink = MethodSpec::sink (streamingllm's 4 sinks).
  LayerEvictor(Backend& backend, ScoreOptions score, SelectOptions select);

  // Scores problem (on the backend's device) and selects. Residency::kDevice lets a device
  // backend keep the selection in device memory, so plan() and apply() queue their work on the
  // backend's stream without waiting for it (see Backend::select).
  Selection plan(const ScoreProblem& problem, Residency where = Residency::kHost);
  // plan() in its two steps, for settings that share a score and differ only in selection
  // (budget, policy, alpha, sink): score() scores `problem` into the evictor's buffers, select()
  // selects from the last score() with `select`. plan(p, where) is score(p) then
  // select(select_options(), where), so every setting's selection is the one it gets alone.
  void score(const ScoreProblem& problem);
  Selection select(const SelectOptions& select, Residency where = Residency::kHost);
  // Compacts `in` into `out` (sized by the caller from cache_plan_offsets).
  void apply(const KVLayerView& in, const Selection& selection, const KVLayerView& out);
  // One call for host data: the full cache from problem.k / problem.v (converted to
  // `cache_dtype`), planned and compacted with `slack` spare rows per head.
  HostEvictResult evict_host(const ScoreProblem& problem, DType cache_dtype, int64_t slack = 0);

  const ScoreOptions& score_options() const { return score_; }
  const SelectOptions& select_options() const { return select_; }
  Backend& backend() const { return backend_; }
  // The [Hkv, n] f32 scores of the last plan() on the backend's device (empty before).
  TensorView last_scores() const { return scores_view_; }
  std::string describe() const;  // score and select settings in one line
  // True when `a` and `b` score every problem alike (every field scoring reads is equal), so
  // one score() serves both.
  static bool same_scores(const ScoreOptions& a, const ScoreOptions& b);

 private:
  Backend& backend_;
  ScoreOptions score_;
  SelectOptions select_;
  std::shared_ptr<void> scores_, aux_, workspace_;
  size_t scores_bytes_ = 0, workspace_bytes_ = 0;
  TensorView scores_view_, aux_view_;
  bool scored_ = false;  // score() ran: select() has scores to read
};

}  // namespace kvevict
