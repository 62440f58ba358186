// GpuSession (gpu_runtime.h): construction, prefill of a row (the sliding layers trimmed to their
// rings), a snapshot, several prompts as the rows of a batch, copies of row 0, and the session's
// state (positions, rows kept, bytes). The rest of the session: row_eviction.cpp, gpu_decode.cpp;
// its state: gpu_session_impl.h.
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
#include "model_cuda/gpu_forward.h"
#include "model_cuda/gpu_model_impl.h"
#include "model_cuda/gpu_runtime.h"
#include "model_cuda/gpu_sampling.h"
#include "model_cuda/gpu_session_impl.h"

namespace kvevict::gpu {

using bf16 = __nv_bfloat16;

void GpuSessionOptions::validate() const {
  KVEVICT_CHECK(batch >= 1, "batch ", batch, " is invalid; expected >= 1");
  KVEVICT_CHECK(max_prompt >= 1, "max_prompt ", max_prompt, " is invalid; expected >= 1");
  KVEVICT_CHECK(decode_room >= 0, "decode_room ", decode_room, " is invalid; expected >= 0");
  KVEVICT_CHECK(prefill_chunk >= 1, "prefill chunk ", prefill_chunk, " is invalid; expected >= 1");
  KVEVICT_CHECK(scores_in_attention_min_segments >= 0, "scores_in_attention_min_segments ",
                scores_in_attention_min_segments, " is invalid; expected >= 0 (0 = the SM count)");
}

GpuSession::GpuSession(std::shared_ptr<GpuContext> context, GpuSessionOptions opt)
    : impl_(std::make_unique<Impl>()) {
  KVEVICT_CHECK(context != nullptr, "GPU session needs a context; got null");
  opt.validate();
  Impl& s = *impl_;
  s.ctx = std::move(context);
  s.opt = opt;
  const ModelConfig& c = s.c();
  KVEVICT_CHECK(opt.max_prompt + opt.decode_room <= c.context_length, "max prompt ", opt.max_prompt,
                " + decode room ", opt.decode_room, " exceeds the context length ",
                c.context_length, " of ", c.name);
  s.fwd = &s.ctx->forward();
  s.logits =
      DeviceBuffer(static_cast<size_t>(opt.batch) * c.vocab_size * 4, "logits", s.stream(), true);
  s.positions.assign(opt.batch, 0);
  s.ids = DeviceBuffer(static_cast<size_t>(opt.batch) * 4, "sampled ids");
  s.scoring.fused = opt.fused_decode_scores;
  s.scoring.in_attention = opt.scores_in_attention;
  s.scoring.in_attention_min_segments = opt.scores_in_attention_min_segments;
}

GpuSession::GpuSession(std::shared_ptr<const GpuModel> model, GpuSessionOptions opt)
    : GpuSession(std::make_shared<GpuContext>(std::move(model)), opt) {}

GpuSession::~GpuSession() {
  if (impl_) {
    // Caches and logits are freed in the context's stream order.
    impl_->layers.clear();
    impl_->logits.reset();
  }
}
GpuSession::GpuSession(GpuSession&&) noexcept = default;
GpuSession& GpuSession::operator=(GpuSession&&) noexcept = default;

void GpuSession::Impl::check_tokens(const std::vector<int32_t>& tokens) const {
  for (size_t i = 0; i < tokens.size(); ++i)
    KVEVICT_CHECK(tokens[i] >= 0 && tokens[i] < c().vocab_size, "token id ", tokens[i],
                  " at index ", i, " is out of range; expected 0 .. ", c().vocab_size - 1);
}

// The prompt into a fresh full-layout row: n + room rows per head, row = position. Captures the
// last `need` queries of every layer into qcap; logits of the last token in the forward's row 0.
RowLayers GpuSession::Impl::prefill_row(const std::vector<int32_t>& tokens, int64_t need,
                                        int64_t room, std::vector<DeviceBuffer>* qcap) {
  const ModelConfig& m = c();
  const int64_t n = static_cast<int64_t>(tokens.size());
  KVEVICT_CHECK(n > 0, "no tokens to prefill; expected at least one");
  KVEVICT_CHECK(n <= opt.max_prompt, "prompt of ", n, " tokens exceeds the session's max_prompt ",
                opt.max_prompt);
  check_tokens(tokens);
  const int Hkv = m.n_kv_heads, d = m.head_dim;
  RowLayers row(m.n_layers);
  for (auto& L : row)
    L = LayerCache::with_capacities(std::vector<int64_t>(Hkv, n + room), d, stream());
  if (qcap != nullptr) {
    qcap->clear();
    for (int l = 0; l < m.n_layers && need > 0; ++l)
      qcap->emplace_back(static_cast<size_t>(m.n_heads) * need * d * 2, "captured queries",
                         stream(), true);
  }
  EventTimer timer(stream());
  for (int64_t c0 = 0; c0 < n; c0 += opt.prefill_chunk) {
    const int64_t T = std::min(opt.prefill_chunk, n - c0);
    fwd->prefill_chunk(tokens.data() + c0, T, c0, /*seq=*/0, row, need, n,
                       need > 0 ? qcap : nullptr, c0 + T == n ? logits.as<float>() : nullptr);
  }
  stats.prefill_seconds += timer.seconds();
  stats.prefill_tokens += n;
  for (auto& L : row) {
    std::fill(L.len_h.begin(), L.len_h.end(), n);
    L.upload_table(stream());
  }
  trim_sliding(row, n, room);
  return row;
}

// Session::trim_sliding on the GPU: every sliding-window layer keeps its last min(n, window) rows
// in a ring of min(window, n + room) rows per segment, position p at slot p % window (a capacity
// below the window never wraps: p < n + room). The prefill layout has row = position, so the
// gather reads row q for ring slot q % window: the one compaction kernel with a host selection
// whose kept index of slot i is that row.
void GpuSession::Impl::trim_sliding(RowLayers& row, int64_t n, int64_t room) {
  const ModelConfig& m = c();
  if (m.sliding_window <= 0) return;
  const int Hkv = m.n_kv_heads, d = m.head_dim;
  const int64_t W = m.sliding_window;
  const int64_t cap_ring = std::min(W, n + room);
  const int64_t keep = std::min(n, W);
  Selection ring;  // slot i holds the kept position congruent to i mod W, for every head
  ring.num_kv_heads = Hkv;
  ring.offsets.resize(Hkv + 1);
  for (int g = 0; g <= Hkv; ++g) ring.offsets[g] = g * keep;
  for (int g = 0; g < Hkv; ++g)
    for (int64_t i = 0; i < keep; ++i)
      ring.index.push_back(static_cast<int32_t>(n <= W ? i : n - W + ((i - (n - W)) % W + W) % W));
  DeviceBuffer table(sizeof(int64_t) * (Hkv + 1), "ring offsets", stream(), true);
  DeviceBuffer kept(sizeof(int32_t) * std::max<size_t>(ring.index.size(), 1), "ring slots",
                    stream(), true);
  KVEVICT_CUDA_CHECK(cudaMemcpyAsync(table.get(), ring.offsets.data(), table.bytes(),
                                     cudaMemcpyHostToDevice, stream()));
  KVEVICT_CUDA_CHECK(cudaMemcpyAsync(kept.get(), ring.index.data(), ring.index.size() * 4,
                                     cudaMemcpyHostToDevice, stream()));
  for (int l = 0; l < m.n_layers; ++l) {
    if (!m.is_sliding(l)) continue;
    LayerCache out = LayerCache::with_capacities(std::vector<int64_t>(Hkv, cap_ring), d, stream());
    out.ring = W;
    // Ring slots are not in position order once the ring wraps, so this is the one gather of
    // src/cuda called directly (a Selection's rows ascend).
    cuda::detail::GatherArgs a;
    a.k = row[l].k.as<char>();
    a.v = row[l].v.as<char>();
    a.row_stride_b = d * 2;
    a.row_bytes = d * 2;
    a.pos = row[l].pos.as<int32_t>();
    a.src_base = row[l].off.as<int64_t>();
    a.kept = kept.as<int32_t>();
    a.kept_offsets = table.as<int64_t>();
    a.dst_base = out.off.as<int64_t>();
    a.dst_rows = out.rows;
    a.out_k = out.k.as<char>();
    a.out_v = out.v.as<char>();
    a.out_pos = out.pos.as<int32_t>();
    a.num_heads = Hkv;
    a.rows = static_cast<int64_t>(ring.index.size());
    KVEVICT_CUDA_CHECK(cuda::detail::launch_gather_rows(a, stream()));
    std::fill(out.len_h.begin(), out.len_h.end(), keep);
    out.upload_table(stream());
    row[l] = std::move(out);  // the prefill layer is freed in stream order behind the gather
  }
}

void GpuSession::prefill(const std::vector<int32_t>& tokens, const EvictConfig& evict) {
  Impl& s = *impl_;
  const int64_t n = static_cast<int64_t>(tokens.size());
  KVEVICT_CHECK(!s.have_rows, "prefill on a GPU session that already holds ", s.positions[0],
                " tokens; expected a fresh session");
  int64_t need = 0;
  if (evict.prefill.enabled) {
    evict.prefill.score.validate();
    need = evict.prefill.score.queries_needed(n);
  }
  std::vector<DeviceBuffer> qcap;
  RowLayers full = s.prefill_row(tokens, need, s.opt.decode_room, &qcap);
  s.stats.kv_bytes_before.assign(s.c().n_layers, 0);
  for (int l = 0; l < s.c().n_layers; ++l) s.stats.kv_bytes_before[l] = full[l].kv_bytes();
  RowLayers row;
  if (evict.prefill.enabled) {
    EventTimer timer(s.stream());
    row = s.evict_row(full, n, qcap, need, evict.prefill, s.opt.decode_room, /*keep_full=*/false);
    s.stats.evict_seconds += timer.seconds();
  } else {
    row = std::move(full);
  }
  s.stats.kv_bytes_after.assign(s.c().n_layers, 0);
  for (int l = 0; l < s.c().n_layers; ++l) s.stats.kv_bytes_after[l] = row[l].kv_bytes();
  // Rows 1 .. batch-1 stay empty until replicate_sequence().
  std::vector<RowLayers> rows;
  rows.push_back(std::move(row));
  if (s.opt.batch == 1) {
    s.set_rows(std::move(rows), n, evict);
  } else {
    s.backend().synchronize();
    for (auto& L : rows[0])
      if (!L.host_valid) L.sync_host();
    s.layers = std::move(rows[0]);  // row 0 alone; replicate_sequence() builds the batch
    s.positions[0] = n;
    s.have_rows = true;
    s.setup_decode(evict);
  }
}

std::unique_ptr<GpuSnapshot> GpuSession::prefill_snapshot(const std::vector<int32_t>& tokens,
                                                          const PrefillOptions& popt) {
  Impl& s = *impl_;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t m = popt.keep_queries < 0 ? n : std::min<int64_t>(popt.keep_queries, n);
  auto snap = std::make_unique<GpuSnapshot>();
  snap->context = s.ctx;
  snap->tokens = tokens;
  const double t0 = s.stats.prefill_seconds;
  snap->layers = s.prefill_row(tokens, m, /*room=*/0, &snap->queries);
  snap->prefill_seconds = s.stats.prefill_seconds - t0;
  snap->num_queries = m;
  const int64_t V = s.c().vocab_size;
  snap->logits = DeviceBuffer(static_cast<size_t>(V) * 4, "snapshot logits", s.stream(), true);
  KVEVICT_CUDA_CHECK(cudaMemcpyAsync(snap->logits.get(), s.logits.as<float>(), V * 4,
                                     cudaMemcpyDeviceToDevice, s.stream()));
  KVEVICT_CUDA_CHECK(cudaStreamSynchronize(s.stream()));
  return snap;
}

void GpuSession::prefill_rows(const std::vector<std::vector<int32_t>>& prompts,
                              const EvictConfig& evict) {
  Impl& s = *impl_;
  const ModelConfig& c = s.c();
  const int B = s.opt.batch;
  KVEVICT_CHECK(!s.have_rows, "prefill_rows on a GPU session that already holds rows");
  KVEVICT_CHECK(!prompts.empty() && static_cast<int>(prompts.size()) <= B, "prefill_rows got ",
                prompts.size(), " prompts for a batch of ", B, "; expected 1 .. ", B);
  std::vector<RowLayers> distinct;
  std::vector<int64_t> lengths;
  const int64_t V = c.vocab_size;
  std::vector<DeviceBuffer> last_logits;  // [prompts] [V] each prompt's last-token logits
  for (const auto& tokens : prompts) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int64_t need = evict.prefill.enabled ? evict.prefill.score.queries_needed(n) : 0;
    std::vector<DeviceBuffer> qcap;
    RowLayers full = s.prefill_row(tokens, need, s.opt.decode_room, &qcap);
    if (evict.prefill.enabled) {
      EventTimer timer(s.stream());
      distinct.push_back(s.evict_row(full, n, qcap, need, evict.prefill, s.opt.decode_room,
                                     /*keep_full=*/false));
      s.stats.evict_seconds += timer.seconds();
    } else {
      distinct.push_back(std::move(full));
    }
    lengths.push_back(n);
    last_logits.emplace_back(static_cast<size_t>(V) * 4, "prompt logits", s.stream(), true);
    KVEVICT_CUDA_CHECK(cudaMemcpyAsync(last_logits.back().get(), s.logits.as<float>(), V * 4,
                                       cudaMemcpyDeviceToDevice, s.stream()));
  }
  s.backend().synchronize();
  for (auto& r : distinct)
    for (auto& L : r)
      if (!L.host_valid) L.sync_host();
  s.layers.clear();
  s.layers.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    std::vector<const LayerCache*> parts;
    for (int b = 0; b < B; ++b) parts.push_back(&distinct[b % distinct.size()][l]);
    s.layers[l] = assemble_rows(parts, s.stream());
  }
  for (int b = 0; b < B; ++b) {
    s.positions[b] = lengths[b % lengths.size()];
    // Every row starts from its own prompt's last logits.
    KVEVICT_CUDA_CHECK(cudaMemcpyAsync(s.logits.as<float>() + b * V,
                                       last_logits[b % last_logits.size()].get(), V * 4,
                                       cudaMemcpyDeviceToDevice, s.stream()));
  }
  s.have_rows = true;
  s.logits_h_valid = false;
  s.setup_decode(evict);
}

void GpuSession::replicate_sequence() {
  Impl& s = *impl_;
  const ModelConfig& c = s.c();
  KVEVICT_CHECK(s.have_rows, "replicate_sequence before prefill; expected prefill first");
  const int B = s.opt.batch, Hkv = c.n_kv_heads;
  if (B == 1) return;
  KVEVICT_CHECK(s.layers[0].segments == Hkv, "replicate_sequence after the batch was assembled");
  for (auto& L : s.layers) {
    std::vector<const LayerCache*> parts(B, &L);
    LayerCache out = assemble_rows(parts, s.stream());
    L = std::move(out);
  }
  const int64_t V = c.vocab_size;
  for (int b = 1; b < B; ++b) {
    s.positions[b] = s.positions[0];
    KVEVICT_CUDA_CHECK(cudaMemcpyAsync(s.logits.as<float>() + b * V, s.logits.as<float>(), V * 4,
                                       cudaMemcpyDeviceToDevice, s.stream()));
  }
}

int64_t GpuSession::position() const {
  return position(0);
}
int64_t GpuSession::position(int row) const {
  return impl_->positions.at(row);
}

int64_t GpuSession::kv_rows(int layer) const {
  return kv_rows(layer, 0);
}

int64_t GpuSession::kv_rows(int layer, int row) const {
  const Impl& s = *impl_;
  KVEVICT_CHECK(layer >= 0 && layer < static_cast<int>(s.layers.size()), "layer ", layer,
                " is out of range; expected 0 .. ", s.layers.size() - 1);
  const int Hkv = s.c().n_kv_heads;
  int64_t r = 0;
  for (int g = 0; g < Hkv; ++g) r += s.layers[layer].len_h.at(row * Hkv + g);
  return r;
}

std::vector<int32_t> GpuSession::kept_positions(int layer, int kv_head) const {
  const Impl& s = *impl_;
  KVEVICT_CHECK(layer >= 0 && layer < static_cast<int>(s.layers.size()), "layer ", layer,
                " is out of range; expected 0 .. ", s.layers.size() - 1);
  const LayerCache& L = s.layers[layer];
  KVEVICT_CHECK(kv_head >= 0 && kv_head < s.c().n_kv_heads, "KV head ", kv_head,
                " is out of range; expected 0 .. ", s.c().n_kv_heads - 1);
  KVEVICT_CUDA_CHECK(cudaStreamSynchronize(s.stream()));
  std::vector<int32_t> out(static_cast<size_t>(L.len_h[kv_head]));
  if (!out.empty())
    KVEVICT_CUDA_CHECK(cudaMemcpy(out.data(), L.pos.as<int32_t>() + L.off_h[kv_head],
                                  out.size() * 4, cudaMemcpyDeviceToHost));
  std::sort(out.begin(), out.end());
  return out;
}

int64_t GpuSession::kv_bytes_total() const {
  int64_t b = 0;
  for (const auto& L : impl_->layers) b += L.kv_bytes();
  return b;
}

int64_t GpuSession::kv_bytes_per_sequence() const {
  const Impl& s = *impl_;
  const int Hkv = s.c().n_kv_heads;
  int64_t rows = 0;
  for (const auto& L : s.layers)
    if (!L.off_h.empty()) rows += L.off_h[Hkv] - L.off_h[0];
  return rows * s.c().head_dim * 2 * 2;
}

int GpuSession::batch() const {
  return impl_->opt.batch;
}
const SessionStats& GpuSession::stats() const {
  return impl_->stats;
}
const GpuModel& GpuSession::model() const {
  return impl_->ctx->model();
}
void GpuSession::synchronize() const {
  KVEVICT_CUDA_CHECK(cudaStreamSynchronize(impl_->stream()));
}

}  // namespace kvevict::gpu
