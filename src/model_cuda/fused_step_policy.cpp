#include "model_cuda/fused_step_policy.h"

#include <cstdlib>

#include "kvevict/error.h"

namespace kvevict::gpu {
namespace {

std::string env(const char* name) {
  const char* e = std::getenv(name);
  return e == nullptr ? std::string() : std::string(e);
}

// A 0 / 1 switch: unset or empty reads as `unset`, anything else but 0 and 1 throws naming it.
bool parse_switch(const char* var, const std::string& value, bool unset, const char* on,
                  const char* off) {
  if (value.empty()) return unset;
  if (value == "1") return true;
  if (value == "0") return false;
  KVEVICT_FAIL(var, "='", value, "': expected 1 (", on, ") or 0 (", off, ")");
}

}  // namespace

FusedStep parse_fused_step(const std::string& value) {
  if (value.empty() || value == "auto") return FusedStep::kBatchOne;
  if (value == "0") return FusedStep::kOff;
  if (value == "1") return FusedStep::kOn;
  KVEVICT_FAIL("KVEVICT_DECODE_FUSED='", value,
               "': expected 0 (off), 1 (on) or auto (batch 1 only)");
}

FusedStep fused_step_from_env() {
  return parse_fused_step(env("KVEVICT_DECODE_FUSED"));
}

GemvRoute parse_gemv_route(const std::string& name) {
  if (name.empty() || name == "small") return GemvRoute::kSmall;
  if (name == "all") return GemvRoute::kAll;
  if (name == "cores") return GemvRoute::kCudaCores;
  KVEVICT_FAIL("KVEVICT_GEMV_ROUTE='", name, "': expected one of all, cores, small");
}

GemvRoute gemv_route_from_env() {
  return parse_gemv_route(env("KVEVICT_GEMV_ROUTE"));
}

const char* gemv_route_name(GemvRoute route) {
  switch (route) {
    case GemvRoute::kAll: return "all";
    case GemvRoute::kCudaCores: return "cores";
    case GemvRoute::kSmall: return "small";
  }
  return "?";
}

bool parse_gemv_preload(const std::string& value) {
  return parse_switch("KVEVICT_GEMV_PRELOAD", value, true, "registers", "L2 prefetch");
}

bool gemv_preload_from_env() {
  return parse_gemv_preload(env("KVEVICT_GEMV_PRELOAD"));
}

bool parse_gemv_folds(const std::string& value) {
  return parse_switch("KVEVICT_GEMV_FOLDS", value, false, "gemma3's folds", "their own launches");
}

bool gemv_folds_from_env() {
  return parse_gemv_folds(env("KVEVICT_GEMV_FOLDS"));
}

bool step_is_fused(FusedStep mode, int batch) {
  return mode == FusedStep::kOn || (mode == FusedStep::kBatchOne && batch == 1);
}

bool gemv_takes(GemvRoute route, detail::GemvArgs* a) {
  if (!detail::gemv_supported(*a)) return false;
  const long long rows = a->out == detail::GemvOut::kGated ? 2ll * a->N : a->N;
  const long long weight_bytes = rows * a->K * 2;  // bf16
  switch (route) {
    case GemvRoute::kAll: a->cuda_cores = false; return true;
    case GemvRoute::kCudaCores: a->cuda_cores = true; return true;
    case GemvRoute::kSmall:
      a->cuda_cores = true;
      return weight_bytes <= kGemvSmallBytes || (a->B == 1 && a->K <= detail::kGemvTileK);
  }
  return false;
}

}  // namespace kvevict::gpu
