// DecodeEvictor of the C API (kvevict/decode_evict.h).
#include <memory>

#include "capi/capi_internal.h"

namespace kvevict::capi {
namespace {

DecodeEvictOptions decode_options_from_c(const kvevict_decode_options& o) {
  check_struct_size(o, "kvevict_decode_options_init");
  DecodeEvictOptions d;
  d.score = decode_score_parse(require(o.score, "options.score"));
  d.budget = o.budget;
  d.slack = o.slack;
  d.recent = o.recent;
  d.sink = o.sink;
  d.scale = o.scale;
  d.softcap = o.softcap;
  d.one_minus_p_floor = o.one_minus_p_floor;
  return d;  // DecodeEvictor validates it
}

DecodeStep step_from_c(const kvevict_tensor* q, const kvevict_tensor* a,
                       const kvevict_tensor* lse) {
  return DecodeStep{view_from_c(require(q, "q"), "q"), view_from_c(require(a, "a"), "a"),
                    view_from_c(require(lse, "lse"), "lse")};
}

}  // namespace
}  // namespace kvevict::capi

using kvevict::capi::guarded;
using kvevict::capi::layer_from_c;
using kvevict::capi::require;

extern "C" {

void kvevict_decode_options_init(kvevict_decode_options* options) {
  if (options == nullptr) return;
  const kvevict::DecodeEvictOptions d;
  *options = kvevict_decode_options{};
  options->struct_size = sizeof(kvevict_decode_options);
  options->score = "h2o";
  options->budget = d.budget;
  options->slack = d.slack;
  options->recent = d.recent;
  options->sink = d.sink;
  options->scale = d.scale;
  options->softcap = d.softcap;
  options->one_minus_p_floor = d.one_minus_p_floor;
}

kvevict_status kvevict_decode_evictor_create(kvevict_backend* backend,
                                             const kvevict_decode_options* options,
                                             kvevict_decode_evictor** out) {
  return guarded(__func__, [&] {
    require(options, "options");
    require(out, "out");
    std::shared_ptr<kvevict::Backend> b = backend ? backend->impl : nullptr;
    kvevict::DecodeEvictor impl(kvevict::capi::decode_options_from_c(*options), b.get());
    *out = new kvevict_decode_evictor{std::move(b), std::move(impl)};
  });
}

void kvevict_decode_evictor_destroy(kvevict_decode_evictor* evictor) {
  delete evictor;
}

int64_t kvevict_decode_evictor_capacity_per_head(const kvevict_decode_evictor* evictor) {
  return evictor ? evictor->impl.options().capacity_per_head() : -1;
}

kvevict_status kvevict_decode_evictor_accumulate(const kvevict_decode_evictor* evictor,
                                                 const kvevict_kv_layer* cache,
                                                 const kvevict_tensor* q, const kvevict_tensor* a,
                                                 const kvevict_tensor* lse) {
  return guarded(__func__, [&] {
    require(evictor, "evictor")
        ->impl.accumulate(layer_from_c(cache, "cache"), kvevict::capi::step_from_c(q, a, lse));
  });
}

kvevict_status kvevict_decode_evictor_evict(const kvevict_decode_evictor* evictor,
                                            const kvevict_kv_layer* cache, int64_t* evicted) {
  return guarded(__func__, [&] {
    const int64_t n = require(evictor, "evictor")->impl.evict(layer_from_c(cache, "cache"));
    if (evicted) *evicted = n;
  });
}

kvevict_status kvevict_decode_evictor_step(const kvevict_decode_evictor* evictor,
                                           const kvevict_kv_layer* cache, const kvevict_tensor* q,
                                           const kvevict_tensor* a, const kvevict_tensor* lse,
                                           int64_t* evicted) {
  return guarded(__func__, [&] {
    const int64_t n =
        require(evictor, "evictor")
            ->impl.step(layer_from_c(cache, "cache"), kvevict::capi::step_from_c(q, a, lse));
    if (evicted) *evicted = n;
  });
}

}  // extern "C"
