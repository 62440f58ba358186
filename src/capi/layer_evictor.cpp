// LayerEvictor of the C API: the options struct -> ScoreOptions / SelectOptions, then plan and
// apply exactly as kvevict::LayerEvictor does.
#include <cmath>
#include <memory>
#include <string>

#include "capi/capi_internal.h"
#include "kvevict/method.h"

namespace kvevict::capi {
namespace {

// The C options over the method's defaults (method_parse), as the CLI's overrides are.
void evict_options_from_c(const kvevict_evict_options& o, ScoreOptions& score,
                          SelectOptions& select) {
  check_struct_size(o, "kvevict_evict_options_init");
  KVEVICT_CHECK(std::isfinite(o.budget) && o.budget > 0 &&
                    (o.budget <= 1.0 || o.budget == std::floor(o.budget)),
                "options.budget ", o.budget, " is invalid; expected a fraction in (0, 1] or a ",
                "whole token count > 1");
  KVEVICT_CHECK(o.window >= -1, "options.window ", o.window,
                " is invalid; expected -1 (the method's) or >= 0");
  KVEVICT_CHECK(o.sink >= -1, "options.sink ", o.sink,
                " is invalid; expected -1 (the method's) or >= 0");
  const MethodSpec spec = method_parse(require(o.method, "options.method"));
  score = spec.score;
  if (o.aggregate) score.aggregate = aggregate_parse(o.aggregate);
  if (o.pooling) score.pooling = Pooling::parse(o.pooling);
  if (o.window >= 0) score.window = o.window;
  score.scale = o.scale;
  score.h2o_normalize = o.h2o_normalize != 0;
  score.seed = o.seed;
  select = SelectOptions{};
  select.policy = o.policy ? policy_parse(o.policy) : spec.policy;
  select.budget = Budget{o.budget};
  select.sink = o.sink >= 0 ? o.sink : spec.sink;
  if (o.alpha >= 0) select.alpha = o.alpha;
  // The tokens selection protects (kvevict/method.h), as PrefillEviction::make derives it.
  select.window = observation_window(score);
}

}  // namespace
}  // namespace kvevict::capi

using kvevict::capi::guarded;
using kvevict::capi::require;
using kvevict::capi::view_from_c;

extern "C" {

void kvevict_evict_options_init(kvevict_evict_options* options) {
  if (options == nullptr) return;
  *options = kvevict_evict_options{};
  options->struct_size = sizeof(kvevict_evict_options);
  options->method = "dropkv";
  options->budget = 0.1;
  options->window = -1;
  options->sink = -1;
  options->alpha = -1.0;
}

kvevict_status kvevict_layer_evictor_create(kvevict_backend* backend,
                                            const kvevict_evict_options* options,
                                            kvevict_layer_evictor** out) {
  return guarded(__func__, [&] {
    require(backend, "backend");
    require(options, "options");
    require(out, "out");
    kvevict::ScoreOptions score;
    kvevict::SelectOptions select;
    kvevict::capi::evict_options_from_c(*options, score, select);
    // LayerEvictor validates both and refers to the backend the handle keeps alive.
    auto* e = new kvevict_layer_evictor{
        backend->impl, kvevict::LayerEvictor(*backend->impl, score, select), {}};
    e->description = e->impl.describe();
    *out = e;
  });
}

void kvevict_layer_evictor_destroy(kvevict_layer_evictor* evictor) {
  delete evictor;
}

const char* kvevict_layer_evictor_describe(const kvevict_layer_evictor* evictor) {
  return evictor ? evictor->description.c_str() : nullptr;
}

kvevict_status kvevict_layer_evictor_plan(kvevict_layer_evictor* evictor, const kvevict_tensor* q,
                                          const kvevict_tensor* k, const kvevict_tensor* v,
                                          const kvevict_tensor* wo, float scale, int32_t residency,
                                          kvevict_selection** out) {
  return guarded(__func__, [&] {
    require(evictor, "evictor");
    require(out, "out");
    KVEVICT_CHECK(residency == KVEVICT_RESIDENCY_HOST || residency == KVEVICT_RESIDENCY_DEVICE,
                  "residency ", residency, " is not a kvevict_residency; expected 0 (HOST) or 1 ",
                  "(DEVICE)");
    kvevict::ScoreProblem p;
    p.q = view_from_c(q, "q");
    p.k = view_from_c(require(k, "k"), "k");
    p.v = view_from_c(require(v, "v"), "v");
    p.wo = view_from_c(wo, "wo");
    p.scale = scale;
    auto s = std::make_unique<kvevict_selection>();
    s->impl =
        evictor->impl.plan(p, residency == KVEVICT_RESIDENCY_DEVICE ? kvevict::Residency::kDevice
                                                                    : kvevict::Residency::kHost);
    *out = s.release();
  });
}

kvevict_status kvevict_layer_evictor_apply(kvevict_layer_evictor* evictor,
                                           const kvevict_kv_layer* in,
                                           const kvevict_selection* selection,
                                           const kvevict_kv_layer* out) {
  return guarded(__func__, [&] {
    require(evictor, "evictor");
    require(selection, "selection");
    evictor->impl.apply(kvevict::capi::layer_from_c(in, "in"), selection->impl,
                        kvevict::capi::layer_from_c(out, "out"));
  });
}

kvevict_status kvevict_layer_evictor_last_scores(const kvevict_layer_evictor* evictor,
                                                 kvevict_tensor* scores) {
  return guarded(__func__, [&] {
    require(evictor, "evictor");
    require(scores, "scores");
    const kvevict::TensorView s = evictor->impl.last_scores();
    KVEVICT_CHECK(!s.empty(), "no scores yet; expected a kvevict_layer_evictor_plan first");
    *scores = kvevict::capi::view_to_c(s);
  });
}

}  // extern "C"
