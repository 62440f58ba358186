// The one-layer eviction pipeline: score -> select -> compact.
#include <sstream>

#include "kvevict/error.h"
#include "kvevict/evict.h"

namespace kvevict {

LayerEvictor::LayerEvictor(Backend& backend, ScoreOptions score, SelectOptions select)
    : backend_(backend), score_(score), select_(select) {
  score_.validate();
  select_.validate();
}

Selection LayerEvictor::plan(const ScoreProblem& problem, Residency where) {
  score(problem);
  return select(select_, where);
}

void LayerEvictor::score(const ScoreProblem& problem) {
  problem.validate(score_);
  KVEVICT_CHECK(problem.k.device == backend_.device(),
                "problem tensors live on another device "
                "than the ",
                backend_.name(), " backend");
  const int hkv = problem.num_kv_heads();
  const int64_t n = problem.num_tokens();
  const size_t bytes = static_cast<size_t>(hkv) * static_cast<size_t>(n) * sizeof(float);
  const bool two_stage = score_.method == Method::kCriticalKV;
  if (bytes > scores_bytes_ || !scores_) {
    scores_ = backend_.allocate(bytes);
    aux_.reset();
    scores_bytes_ = bytes;
  }
  if (two_stage && !aux_) aux_ = backend_.allocate(scores_bytes_);
  const Device dev = backend_.device();
  scores_view_ = TensorView(scores_.get(), DType::kF32, {hkv, n}, dev);
  aux_view_ = two_stage ? TensorView(aux_.get(), DType::kF32, {hkv, n}, dev) : TensorView();
  const size_t ws = backend_.score_workspace_bytes(problem, score_);
  if (ws > workspace_bytes_ || !workspace_) {
    workspace_ = backend_.allocate(ws);
    workspace_bytes_ = ws;
  }
  backend_.score(problem, score_, ScoreOutput{scores_view_, aux_view_},
                 Workspace{workspace_.get(), workspace_bytes_});
  scored_ = true;
}

Selection LayerEvictor::select(const SelectOptions& select, Residency where) {
  KVEVICT_CHECK(scored_, "LayerEvictor::select before score(); expected score() or plan() first");
  select.validate();
  return backend_.select(scores_view_, aux_view_, select, where);
}

void LayerEvictor::apply(const KVLayerView& in, const Selection& selection,
                         const KVLayerView& out) {
  backend_.compact(in, selection, out);
}

HostEvictResult LayerEvictor::evict_host(const ScoreProblem& problem, DType cache_dtype,
                                         int64_t slack) {
  KVEVICT_CHECK(backend_.device() == Device::kCpu && problem.k.device == Device::kCpu,
                "evict_host needs host tensors and a host backend; got the ", backend_.name(),
                " backend");
  HostKVCache full = HostKVCache::from_dense(problem.k, problem.v, cache_dtype);
  HostEvictResult r;
  r.selection = plan(problem);
  r.cache = cache_allocate_for(full.view(), r.selection, slack);
  apply(full.view(), r.selection, r.cache.view());
  r.bytes_before = full.kv_bytes();
  r.bytes_after = r.cache.kv_bytes();
  return r;
}

bool LayerEvictor::same_scores(const ScoreOptions& a, const ScoreOptions& b) {
  return a.method == b.method && a.aggregate == b.aggregate && a.window == b.window &&
         a.pooling.kind == b.pooling.kind && a.pooling.kernel == b.pooling.kernel &&
         a.h2o_normalize == b.h2o_normalize && a.one_minus_p_floor == b.one_minus_p_floor &&
         a.criticalkv_eps == b.criticalkv_eps && a.seed == b.seed && a.scale == b.scale;
}

std::string LayerEvictor::describe() const {
  std::ostringstream os;
  os << score_.describe() << " " << select_.describe() << " backend=" << backend_.name();
  return os.str();
}

}  // namespace kvevict
