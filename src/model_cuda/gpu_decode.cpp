// GpuSession's decoding: a step of the batch (graph-replayed by the forward), decode-time eviction
// through DecodeEvictor on every full-attention layer, append, greedy / Sampler-rule sampling on
// the GPU, generate, and the batched token NLLs of perplexity.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>

#include "cuda/check.h"
#include "cuda/launchers.h"
#include "cuda/model_launchers.h"
#include "kvevict/cuda/backend.h"
#include "kvevict/decode_evict.h"
#include "kvevict/evict.h"
#include "model/generate_loop.h"
#include "model_cuda/gpu_forward.h"
#include "model_cuda/gpu_model_impl.h"
#include "model_cuda/gpu_runtime.h"
#include "model_cuda/gpu_sampling.h"
#include "model_cuda/gpu_session_impl.h"

namespace kvevict::gpu {

using bf16 = __nv_bfloat16;

// Every row at position n, decode-time eviction configured.
void GpuSession::Impl::start_decode(int64_t n, const EvictConfig& evict) {
  std::fill(positions.begin(), positions.end(), n);
  have_rows = true;
  logits_h_valid = false;
  setup_decode(evict);
}

void GpuSession::Impl::setup_decode(const EvictConfig& evict) {
  evictor.reset();
  if (!evict.decode.enabled) return;
  const ModelConfig& m = c();
  DecodeEvictOptions o = evict.decode.options;
  o.scale = m.logit_scale();
  o.softcap = 0.0f;  // no attention softcap in any supported architecture
  o.validate();
  KVEVICT_CHECK(opt.decode_room >= 1, "decode-time eviction needs decode_room >= 1");
  evictor = std::make_unique<DecodeEvictor>(o, &backend());
  scoring.score = o.score;
  scoring.replace = evictor->replaces();
  scoring.one_minus_p_floor = o.one_minus_p_floor;
}

void GpuSession::Impl::decode_step(int32_t* tokens_dev, bool score, bool argmax_first) {
  KVEVICT_CHECK(have_rows, "decode on an empty GPU session; expected prefill first");
  KVEVICT_CHECK(layers[0].segments == opt.batch * c().n_kv_heads, "decoding a batch of ", opt.batch,
                " needs every row loaded (replicate_sequence or load_rows)");
  const bool scored = score && evictor != nullptr;
  fwd->decode_step(tokens_dev, argmax_first, positions, layers, scored ? &scoring : nullptr,
                   logits.as<float>());
  for (auto& p : positions) p += 1;
  logits_h_valid = false;
  if (scored) evict_decode();
}

// DecodeEvictor::evict on every full-attention layer: the heads over budget + slack (host
// lengths) are cut on the GPU, every row and head in one launch.
void GpuSession::Impl::evict_decode() {
  const ModelConfig& m = c();
  for (int l = 0; l < m.n_layers; ++l) {
    if (m.is_sliding(l)) continue;  // sliding layers keep their window (Session::decode)
    if (evictor->evict(layers[l].view()) > 0) ++stats.decode_evictions;
  }
}

void GpuSession::append(const std::vector<int32_t>& tokens) {
  Impl& s = *impl_;
  KVEVICT_CHECK(s.have_rows, "append on an empty GPU session; expected prefill first");
  s.check_tokens(tokens);
  if (tokens.empty()) return;
  const int B = s.opt.batch;
  // [steps, B]: every row gets the same token a step. One upload, then a device-to-device copy a
  // step (as token_nlls): a copy from pageable host memory would wait for the stream every token,
  // and the steps of the append would no longer overlap the host's work on the next one.
  std::vector<int32_t> rows(tokens.size() * B);
  for (size_t i = 0; i < tokens.size(); ++i)
    std::fill(rows.begin() + static_cast<int64_t>(i) * B,
              rows.begin() + static_cast<int64_t>(i + 1) * B, tokens[i]);
  DeviceBuffer rows_dev(rows.size() * 4, "appended tokens", s.stream(), true);
  KVEVICT_CUDA_CHECK(cudaMemcpyAsync(rows_dev.get(), rows.data(), rows.size() * 4,
                                     cudaMemcpyHostToDevice, s.stream()));
  EventTimer timer(s.stream());
  for (size_t i = 0; i < tokens.size(); ++i) {
    KVEVICT_CUDA_CHECK(cudaMemcpyAsync(s.ids.get(), rows_dev.as<int32_t>() + i * B,
                                       static_cast<size_t>(B) * 4, cudaMemcpyDeviceToDevice,
                                       s.stream()));
    s.decode_step(s.ids.as<int32_t>(), /*score=*/false);  // appended tokens are not scored
  }
  s.stats.append_seconds += timer.seconds();
  s.stats.append_tokens += static_cast<int64_t>(tokens.size());
}

void GpuSession::decode(const std::vector<int32_t>& tokens) {
  Impl& s = *impl_;
  KVEVICT_CHECK(static_cast<int>(tokens.size()) == s.opt.batch, "decode got ", tokens.size(),
                " tokens; expected one per row (", s.opt.batch, ")");
  s.check_tokens(tokens);
  KVEVICT_CUDA_CHECK(cudaMemcpyAsync(s.ids.get(), tokens.data(), tokens.size() * 4,
                                     cudaMemcpyHostToDevice, s.stream()));
  EventTimer timer(s.stream());
  s.decode_step(s.ids.as<int32_t>(), /*score=*/true);
  s.stats.decode_seconds += timer.seconds();
  s.stats.decode_tokens += s.opt.batch;
}

void GpuSession::decode(int32_t token) {
  KVEVICT_CHECK(impl_->opt.batch == 1, "decode(token) runs batch 1; the session has batch ",
                impl_->opt.batch, " (use decode(tokens))");
  decode(std::vector<int32_t>{token});
}

std::vector<int32_t> GpuSession::argmax() {
  Impl& s = *impl_;
  KVEVICT_CUDA_CHECK(detail::launch_argmax(s.logits.as<float>(), s.opt.batch, s.c().vocab_size,
                                           s.ids.as<int32_t>(), s.stream()));
  std::vector<int32_t> out(s.opt.batch);
  KVEVICT_CUDA_CHECK(
      cudaMemcpyAsync(out.data(), s.ids.get(), out.size() * 4, cudaMemcpyDeviceToHost, s.stream()));
  KVEVICT_CUDA_CHECK(cudaStreamSynchronize(s.stream()));
  return out;
}

std::vector<int32_t> GpuSession::sample(const SamplerOptions& opt,
                                        const std::vector<double>& uniforms) {
  Impl& s = *impl_;
  KVEVICT_CHECK(s.have_rows, "sample on an empty GPU session; expected prefill first");
  sample_on_device(s.logits.as<float>(), s.opt.batch, s.c().vocab_size, opt, uniforms,
                   s.ids.as<int32_t>(), s.sample_scratch, s.draws, s.stream());
  std::vector<int32_t> out(s.opt.batch);
  KVEVICT_CUDA_CHECK(
      cudaMemcpyAsync(out.data(), s.ids.get(), out.size() * 4, cudaMemcpyDeviceToHost, s.stream()));
  KVEVICT_CUDA_CHECK(cudaStreamSynchronize(s.stream()));
  return out;
}

std::vector<int32_t> GpuSession::decode_greedy(int steps) {
  Impl& s = *impl_;
  KVEVICT_CHECK(steps >= 1, "decode_greedy steps ", steps, " is invalid; expected >= 1");
  EventTimer timer(s.stream());
  // The argmax feeding each step is the first launch of the step (inside its graph).
  for (int i = 0; i < steps; ++i) s.decode_step(s.ids.as<int32_t>(), /*score=*/true, true);
  s.stats.decode_seconds += timer.seconds();
  s.stats.decode_tokens += static_cast<int64_t>(steps) * s.opt.batch;
  return argmax();
}

std::vector<std::vector<double>> GpuSession::token_nlls(
    const std::vector<std::vector<int32_t>>& texts, const EvictConfig& evict) {
  Impl& s = *impl_;
  const int B = s.opt.batch;
  const int64_t V = s.c().vocab_size;
  KVEVICT_CHECK(static_cast<int>(texts.size()) == B, "token_nlls got ", texts.size(),
                " texts for a batch of ", B, "; expected one a row");
  const size_t n = texts[0].size();
  KVEVICT_CHECK(n >= 2, "perplexity needs at least 2 tokens a text; got ", n);
  std::vector<std::vector<int32_t>> firsts;
  for (const auto& t : texts) {
    KVEVICT_CHECK(t.size() == n, "token_nlls got texts of ", n, " and ", t.size(),
                  " tokens; expected one length for the batch");
    s.check_tokens(t);
    firsts.push_back({t[0]});
  }
  prefill_rows(firsts, evict);
  // targets [steps, B]: step i predicts every row's token i + 1, which step i then feeds.
  const int64_t steps = static_cast<int64_t>(n) - 1;
  std::vector<int32_t> targets(static_cast<size_t>(steps) * B);
  for (int64_t i = 0; i < steps; ++i)
    for (int b = 0; b < B; ++b) targets[i * B + b] = texts[b][i + 1];
  DeviceBuffer targets_dev(targets.size() * 4, "nll targets", s.stream(), true);
  DeviceBuffer nll_dev(targets.size() * 4, "nlls", s.stream(), true);  // [steps, B] f32
  KVEVICT_CUDA_CHECK(cudaMemcpyAsync(targets_dev.get(), targets.data(), targets.size() * 4,
                                     cudaMemcpyHostToDevice, s.stream()));
  EventTimer timer(s.stream());
  // No host round trip a step: the NLLs stay on the device until the end.
  for (int64_t i = 0; i < steps; ++i) {
    const int32_t* step_targets = targets_dev.as<int32_t>() + i * B;
    KVEVICT_CUDA_CHECK(detail::launch_row_nll(s.logits.as<float>(), B, V, step_targets,
                                              nll_dev.as<float>() + i * B, s.stream()));
    if (i + 1 == steps) break;  // the last token's logits predict nothing here
    KVEVICT_CUDA_CHECK(cudaMemcpyAsync(s.ids.get(), step_targets, static_cast<size_t>(B) * 4,
                                       cudaMemcpyDeviceToDevice, s.stream()));
    s.decode_step(s.ids.as<int32_t>(), /*score=*/true);
  }
  s.stats.decode_seconds += timer.seconds();
  s.stats.decode_tokens += (steps - 1) * B;
  std::vector<float> nll(targets.size());
  KVEVICT_CUDA_CHECK(cudaMemcpyAsync(nll.data(), nll_dev.get(), nll.size() * 4,
                                     cudaMemcpyDeviceToHost, s.stream()));
  KVEVICT_CUDA_CHECK(cudaStreamSynchronize(s.stream()));
  std::vector<std::vector<double>> out(B, std::vector<double>(static_cast<size_t>(steps)));
  for (int64_t i = 0; i < steps; ++i)
    for (int b = 0; b < B; ++b) out[b][i] = nll[i * B + b];
  return out;
}

std::vector<float> GpuSession::logits(int row) {
  const Impl& s = *impl_;
  KVEVICT_CHECK(row >= 0 && row < s.opt.batch, "row ", row, " is out of range; expected 0 .. ",
                s.opt.batch - 1);
  const int64_t V = s.c().vocab_size;
  std::vector<float> out(V);
  KVEVICT_CUDA_CHECK(cudaMemcpyAsync(out.data(), s.logits.as<float>() + row * V, V * 4,
                                     cudaMemcpyDeviceToHost, s.stream()));
  KVEVICT_CUDA_CHECK(cudaStreamSynchronize(s.stream()));
  return out;
}

const std::vector<float>& GpuSession::logits() {
  Impl& s = *impl_;
  if (!s.logits_h_valid) {
    s.logits_h = logits(0);
    s.logits_h_valid = true;
  }
  return s.logits_h;
}

double GpuSession::nll(int32_t target) {
  return logits_nll(logits(), target);
}

GenerateResult GpuSession::generate(int max_new, Sampler& sampler,
                                    const std::function<bool(int32_t)>& is_stop,
                                    const std::function<void(int32_t)>& on_token) {
  Impl& s = *impl_;
  KVEVICT_CHECK(max_new >= 0, "max_new ", max_new, " is negative; expected >= 0");
  KVEVICT_CHECK(s.opt.batch == 1, "generate runs one row; the session has batch ", s.opt.batch);
  KVEVICT_CHECK(s.have_rows, "generate on an empty GPU session; expected prefill first");
  const SamplerOptions& so = sampler.options();
  const bool greedy = so.temperature <= 0.0f;
  std::mt19937_64 rng(so.seed);  // the generator a fresh Sampler(so) draws from
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  return generate_tokens(
      max_new, [&] { return greedy ? argmax()[0] : sample(so, {unit(rng)})[0]; },
      [&](int32_t tok) { decode(tok); }, is_stop, on_token);
}

}  // namespace kvevict::gpu
