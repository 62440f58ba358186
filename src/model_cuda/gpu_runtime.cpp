// The GPU runtime behind ModelRuntime (runtime.h): one GpuContext (stream + cuda backend) per
// runtime, a GpuSession per request, GPU snapshots, and answer_batch as one batch of rows.
#include <cstdio>
#include <map>
#include <sstream>

#include "cuda/check.h"
#include "kvevict/cuda/score.h"
#include "kvevict/error.h"
#include "model/gpu_runtime_entry.h"
#include "model_cuda/gpu_forward.h"
#include "model_cuda/gpu_runtime.h"

namespace kvevict::gpu {
namespace {

class GpuRuntime final : public ModelRuntime {
 public:
  GpuRuntime(std::shared_ptr<const GpuModel> model, const RuntimeOptions& opt)
      : ctx_(std::make_shared<GpuContext>(std::move(model))),
        chunk_(opt.prefill_chunk > 0 ? opt.prefill_chunk : 4096) {
    // Batch-invariant decoding: the batch-1-only fused step would round one sequence's steps
    // differently from a batch's (KVEVICT_DECODE_FUSED=1, fused at every batch, stays).
    if (opt.batch_invariant_decode && ctx_->forward().decode_fused() == FusedStep::kBatchOne)
      ctx_->forward().set_decode_fused(FusedStep::kOff);
  }

  Device device() const override { return Device::kCuda; }
  const ModelConfig& config() const override { return ctx_->model().config(); }
  std::string describe() const override {
    const cuda::DeviceInfo info = cuda::device_info();
    std::ostringstream os;
    os << "cuda " << info.name << " (" << info.sm_count << " SMs), bf16 weights and KV cache";
    return os.str();
  }

  std::unique_ptr<InferenceSession> session(int64_t max_tokens) const override {
    KVEVICT_CHECK(max_tokens >= 1, "a session needs room for at least one token; got ", max_tokens);
    return std::make_unique<GpuSession>(ctx_, options(1, max_tokens, max_tokens));
  }

  std::shared_ptr<const Snapshot> prefill_snapshot(const std::vector<int32_t>& tokens,
                                                   const PrefillOptions& popt) const override {
    const int64_t n = std::max<int64_t>(static_cast<int64_t>(tokens.size()), 1);
    GpuSession s(ctx_, options(1, n, 0));
    return s.prefill_snapshot(tokens, popt);
  }

  std::unique_ptr<InferenceSession> from_snapshot(const Snapshot& snapshot,
                                                  const EvictConfig& evict,
                                                  int64_t room) const override {
    const GpuSnapshot& snap = gpu_snapshot(snapshot);
    auto s = std::make_unique<GpuSession>(ctx_, options(1, snap.num_tokens(), room));
    s->load_rows(snap, {evict});
    return s;
  }

  std::vector<BatchAnswer> answer_batch(
      const Snapshot& snapshot, const std::vector<EvictConfig>& configs,
      const std::vector<int32_t>& append, int max_new,
      const std::function<bool(int32_t)>& is_stop) const override {
    KVEVICT_CHECK(max_new >= 0, "max_new ", max_new, " is negative; expected >= 0");
    std::vector<BatchAnswer> out(configs.size());
    if (configs.empty()) return out;
    const GpuSnapshot& snap = gpu_snapshot(snapshot);
    const int B = static_cast<int>(configs.size());
    const int64_t room = static_cast<int64_t>(append.size()) + max_new + 1;
    GpuSession s(ctx_, options(B, snap.num_tokens(), room));
    s.load_rows(snap, configs);
    if (!append.empty()) s.append(append);
    // What each row keeps after eviction (and the question), before its answer is decoded.
    const ModelConfig& c = config();
    // kv_bytes: the bytes of the rows this row's caches hold (K and V, bf16), as a session of its
    // own would allocate them; the batch's pool itself is sized for its longest row.
    for (int r = 0; r < B; ++r) {
      const auto rows_of_layer = [&s, r](int l) { return s.kv_rows(l, r); };
      out[r].kept_rows_per_head = kept_rows_per_head(c, rows_of_layer);
      int64_t all_rows = 0;
      for (int l = 0; l < c.n_layers; ++l) all_rows += rows_of_layer(l);
      out[r].kv_bytes = all_rows * c.head_dim * 2 * 2;
    }
    std::vector<bool> done(B, false);
    int live = B;
    for (int step = 0; step < max_new && live > 0; ++step) {
      const std::vector<int32_t> ids = s.argmax();
      for (int r = 0; r < B; ++r) {
        if (done[r]) continue;
        out[r].result.tokens.push_back(ids[r]);
        if (is_stop && is_stop(ids[r])) {
          out[r].result.stopped = true;
          done[r] = true;
          --live;
        }
      }
      // The last token is not fed (as generate): nothing would read its logits.
      if (step + 1 < max_new && live > 0) s.decode(ids);
    }
    // The session's event-timed costs: load_rows evicts every row in one pass (each row gets an
    // equal share; settings that differ only in selection share their layers' score passes, and
    // the batch's assembly is included); the append and the decode steps are the whole batch's.
    const SessionStats& st = s.stats();
    for (BatchAnswer& a : out) {
      a.evict_seconds = st.evict_seconds / B;
      a.append_seconds = st.append_seconds;
      a.decode_seconds = st.decode_seconds;
      a.decode_steps = st.decode_tokens / B;
      a.rows_in_batch = B;
      a.batch_evict = st.evict_cost;
    }
    return out;
  }

 protected:
  // The texts as one batch, a row each (ModelRuntime::token_nlls, which checked them); texts of
  // unequal lengths go one length group at a time.
  std::vector<std::vector<double>> checked_token_nlls(
      const std::vector<std::vector<int32_t>>& texts, const EvictConfig& evict) const override {
    std::vector<std::vector<double>> out(texts.size());
    std::map<size_t, std::vector<size_t>> by_length;  // length -> text indices
    for (size_t t = 0; t < texts.size(); ++t) by_length[texts[t].size()].push_back(t);
    for (const auto& [n, idx] : by_length) {
      std::vector<std::vector<int32_t>> group;
      for (size_t t : idx) group.push_back(texts[t]);
      // Room for the n - 2 tokens decoded after the first (the last one is only predicted).
      GpuSession s(ctx_, options(static_cast<int>(group.size()), 1, static_cast<int64_t>(n) - 1));
      std::vector<std::vector<double>> nlls = s.token_nlls(group, evict);
      for (size_t j = 0; j < idx.size(); ++j) out[idx[j]] = std::move(nlls[j]);
    }
    return out;
  }

 private:
  GpuSessionOptions options(int batch, int64_t max_prompt, int64_t room) const {
    GpuSessionOptions o;
    o.batch = batch;
    o.max_prompt = max_prompt;
    o.decode_room = room;
    o.prefill_chunk = chunk_;
    return o;
  }
  const GpuSnapshot& gpu_snapshot(const Snapshot& s) const {
    const auto* g = dynamic_cast<const GpuSnapshot*>(&s);
    KVEVICT_CHECK(g != nullptr && g->context == ctx_,
                  "the GPU runtime got a snapshot of another runtime or device");
    return *g;
  }

  std::shared_ptr<GpuContext> ctx_;
  int64_t chunk_;
};

std::shared_ptr<const ModelRuntime> create(std::shared_ptr<const Model> model,
                                           const RuntimeOptions& opt) {
  check_supported(model->config());
  return std::make_shared<GpuRuntime>(GpuModel::upload(*model), opt);
}

std::shared_ptr<const ModelRuntime> random(const ModelConfig& config, uint64_t seed,
                                           const RuntimeOptions& opt) {
  return std::make_shared<GpuRuntime>(GpuModel::random(config, seed), opt);
}

const kvevict::detail::GpuRuntimeEntry kEntry{&create, &random};

}  // namespace
}  // namespace kvevict::gpu

// The entry src/model/gpu_runtime_entry.cpp finds (linked in, or through dlopen).
extern "C" __attribute__((visibility("default"))) const kvevict::detail::GpuRuntimeEntry*
kvevict_gpu_runtime_entry_v1(char* why, unsigned long why_bytes) {
  const char* reason = nullptr;
  try {
    if (kvevict::gpu::gpu_available()) return &kvevict::gpu::kEntry;
    reason = "no CUDA device is present";
  } catch (...) {
    reason = "the CUDA runtime failed to start";
  }
  if (why != nullptr && why_bytes > 0) {
    std::snprintf(why, why_bytes, "%s", reason);
  }
  return nullptr;
}
