// The CPU runtime (cpu_runtime.h): a Session per request, host snapshots.
#include "model/cpu_runtime.h"

#include <sstream>

#include "kvevict/error.h"
#include "model/session.h"
#include "quant/quant.h"

namespace kvevict::detail {
namespace {

class HostSnapshot final : public Snapshot {
 public:
  explicit HostSnapshot(PrefillSnapshot s) : snap_(std::move(s)) {}
  int64_t num_tokens() const override { return snap_.num_tokens(); }
  double seconds() const override { return snap_.seconds; }
  int64_t kv_bytes() const override { return snap_.kv_bytes(); }
  PrefillSnapshot to_host() const override { return snap_; }
  const PrefillSnapshot& snapshot() const { return snap_; }

 private:
  PrefillSnapshot snap_;
};

class CpuRuntime final : public ModelRuntime {
 public:
  CpuRuntime(std::shared_ptr<const Model> model, const RuntimeOptions& opt)
      : model_(std::move(model)) {
    sopt_.kv_dtype = opt.kv_dtype;
    if (opt.prefill_chunk > 0) sopt_.chunk = opt.prefill_chunk;
    sopt_.progress = opt.progress;
    sopt_.validate();
  }
  Device device() const override { return Device::kCpu; }
  const ModelConfig& config() const override { return model_->config(); }
  std::string describe() const override {
    std::ostringstream os;
    os << "cpu, " << dtype_name(sopt_.kv_dtype) << " KV cache, BLAS " << blas_description()
       << ", quant kernels " << quant::isa_name(quant::kernels().isa);
    return os.str();
  }
  std::unique_ptr<InferenceSession> session(int64_t max_tokens) const override {
    KVEVICT_CHECK(max_tokens >= 1, "a session needs room for at least one token; got ", max_tokens);
    return std::make_unique<Session>(model_, sopt_);  // host caches grow as needed
  }
  std::shared_ptr<const Snapshot> prefill_snapshot(const std::vector<int32_t>& tokens,
                                                   const PrefillOptions& popt) const override {
    return std::make_shared<HostSnapshot>(Session::prefill_snapshot(model_, tokens, popt, sopt_));
  }
  std::unique_ptr<InferenceSession> from_snapshot(const Snapshot& snapshot,
                                                  const EvictConfig& evict,
                                                  int64_t /*room*/) const override {
    // Another device's snapshot (a GPU prefill) is read through its host copy: the CPU then
    // evicts and decodes on that device's activations (the runtime tests compare the GPU's
    // eviction with the CPU's on the same K, V and queries this way).
    if (const auto* host = dynamic_cast<const HostSnapshot*>(&snapshot))
      return std::make_unique<Session>(
          Session::from_snapshot(model_, host->snapshot(), evict, sopt_));
    return std::make_unique<Session>(
        Session::from_snapshot(model_, snapshot.to_host(), evict, sopt_));
  }

 private:
  std::shared_ptr<const Model> model_;
  SessionOptions sopt_;
};

}  // namespace

std::shared_ptr<const ModelRuntime> make_cpu_runtime(std::shared_ptr<const Model> model,
                                                     const RuntimeOptions& opt) {
  return std::make_shared<CpuRuntime>(std::move(model), opt);
}

}  // namespace kvevict::detail
