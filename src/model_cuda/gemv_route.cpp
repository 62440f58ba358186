#include "model_cuda/gemv_route.h"

#include <cstdlib>
#include <stdexcept>

namespace kvevict::gpu {

GemvRoute parse_gemv_route(const std::string& name) {
  if (name.empty() || name == "small") return GemvRoute::kSmall;
  if (name == "all") return GemvRoute::kAll;
  if (name == "cores") return GemvRoute::kCudaCores;
  throw std::invalid_argument("KVEVICT_GEMV_ROUTE='" + name +
                              "': expected one of all, cores, small");
}

GemvRoute gemv_route_from_env() {
  const char* e = std::getenv("KVEVICT_GEMV_ROUTE");
  return parse_gemv_route(e == nullptr ? std::string() : std::string(e));
}

const char* gemv_route_name(GemvRoute route) {
  switch (route) {
    case GemvRoute::kAll: return "all";
    case GemvRoute::kCudaCores: return "cores";
    case GemvRoute::kSmall: return "small";
  }
  return "?";
}

bool gemv_takes(GemvRoute route, detail::GemvArgs* a) {
  if (!detail::gemv_supported(*a)) return false;
  const long long rows = a->out == detail::GemvOut::kGated ? 2ll * a->N : a->N;
  const long long weight_bytes = rows * a->K * 2;  // bf16
  switch (route) {
    case GemvRoute::kAll: a->cuda_cores = false; return true;
    case GemvRoute::kCudaCores: a->cuda_cores = true; return true;
    case GemvRoute::kSmall: a->cuda_cores = true; return weight_bytes <= kGemvSmallBytes;
  }
  return false;
}

}  // namespace kvevict::gpu
