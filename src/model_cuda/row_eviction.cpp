// A row's prefill eviction on the GPU (LayerEvictor over the cuda backend per full-attention layer,
// the selection left on the device, compaction into kept rows + room per head) and the batch built
// from rows: load_rows evicts every setting from one snapshot (settings with equal score options
// score each layer once) and gathers the kept rows straight into the batch's layers.
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

// Throws unless every full-attention layer is a prefill's full layout of n rows per head (what
// the scores read as [Hkv, n, d] with a head stride).
void GpuSession::Impl::check_prefill_layout(const RowLayers& full, int64_t n) const {
  const ModelConfig& m = c();
  for (int l = 0; l < m.n_layers; ++l)
    if (!m.is_sliding(l)) {
      KVEVICT_CHECK(full[l].host_valid, "layer ", l, " has no synchronized table");
      for (int g = 0; g < m.n_kv_heads; ++g)
        KVEVICT_CHECK(full[l].len_h[g] == n && full[l].cap(g) == full[l].cap(0), "layer ", l,
                      " is not a full prefill layout; prefill eviction runs right after the "
                      "prefill");
    }
}

// The score problem of a full-attention layer of a prefill layout: its last m_queries captured
// queries (when the score needs any), K and V as [Hkv, n, d] with the segment stride, W_o.
ScoreProblem GpuSession::Impl::layer_problem(LayerCache& F, int layer, int64_t n,
                                             const std::vector<DeviceBuffer>& qcap,
                                             int64_t m_queries, int64_t need) const {
  const ModelConfig& m = c();
  const int Hq = m.n_heads, Hkv = m.n_kv_heads, d = m.head_dim;
  ScoreProblem p;
  if (need > 0)
    p.q = TensorView(qcap[layer].get(), DType::kBF16, {Hq, m_queries, d}, Device::kCuda);
  TensorView k(F.k.as<bf16>() + F.off_h[0] * d, DType::kBF16, {Hkv, n, d}, Device::kCuda);
  k.stride[0] = F.cap(0) * d;
  TensorView v = k;
  v.data = F.v.as<bf16>() + F.off_h[0] * d;
  p.k = k;
  p.v = v;
  p.wo = TensorView(ctx->model().impl().layers[layer].wo, DType::kBF16, {m.n_embd, int64_t{Hq} * d},
                    Device::kCuda);
  p.scale = m.logit_scale();
  return p;
}

// The kept rows of `sel` (device-resident) into a new layer of kept + room rows per head (the
// segment table written on the device when only the device knows the counts, adakv).
LayerCache GpuSession::Impl::compact_layer(LayerCache& F, const Selection& sel, int64_t room) {
  const int Hkv = c().n_kv_heads, d = c().head_dim;
  LayerCache L;
  if (sel.has_host_offsets()) {
    std::vector<int64_t> cap(Hkv);
    for (int g = 0; g < Hkv; ++g) cap[g] = sel.count(g) + room;
    L = LayerCache::with_capacities(cap, d, stream());
  } else {
    L = LayerCache::for_device_table(sel.total() + Hkv * room, Hkv, d, stream());
  }
  KVLayerView out_v = L.view();
  backend().plan_segments(sel, room, out_v);
  backend().compact(F.view(), sel, out_v);
  if (L.host_valid) L.upload_table(stream());  // compaction set the host lens
  return L;
}

// A copy of one layer, `copies` times one after another, each copy with room more rows per head
// (a sliding layer: its ring, up to the window). The first copy is a gather of every row; the
// others double the copied block (log2(copies) device copies per buffer).
LayerCache GpuSession::Impl::copy_layer(LayerCache& F, int layer, int64_t room, int copies) {
  const ModelConfig& m = c();
  const int S = F.segments, d = F.head_dim;
  std::vector<int64_t> cap(static_cast<size_t>(S) * copies);
  for (int g = 0; g < S; ++g)
    cap[g] = m.is_sliding(layer) ? std::min<int64_t>(m.sliding_window, F.len_h[g] + room)
                                 : F.len_h[g] + room;
  for (int b = 1; b < copies; ++b) std::copy_n(cap.begin(), S, cap.begin() + b * S);
  LayerCache L = LayerCache::with_capacities(cap, d, stream());
  L.ring = F.ring;
  KVLayerView first = L.view(0, S);
  backend().compact(F.view(), keep_all(F), first);
  const int64_t R = L.off_h[S];  // rows of one copy
  for (int done = 1; done < copies; done *= 2) {
    const int64_t k = std::min(done, copies - done) * R;
    const int64_t at = done * R;
    KVEVICT_CUDA_CHECK(cudaMemcpyAsync(L.k.as<char>() + at * d * 2, L.k.get(), k * d * 2,
                                       cudaMemcpyDeviceToDevice, stream()));
    KVEVICT_CUDA_CHECK(cudaMemcpyAsync(L.v.as<char>() + at * d * 2, L.v.get(), k * d * 2,
                                       cudaMemcpyDeviceToDevice, stream()));
    KVEVICT_CUDA_CHECK(cudaMemcpyAsync(L.pos.as<int32_t>() + at, L.pos.get(), k * 4,
                                       cudaMemcpyDeviceToDevice, stream()));
    KVEVICT_CUDA_CHECK(cudaMemcpyAsync(L.acc.as<float>() + at, L.acc.get(), k * 4,
                                       cudaMemcpyDeviceToDevice, stream()));
  }
  for (int b = 1; b < copies; ++b) std::copy_n(L.len_h.begin(), S, L.len_h.begin() + b * S);
  L.upload_table(stream());
  return L;
}

// One row's prefill eviction: LayerEvictor over the cuda backend per full-attention layer, the
// selection left on the device, compaction into a layer of kept rows + room per head. keep_full:
// the full layers stay (a snapshot), else each is dropped once compacted. Sliding layers are
// copied (keep_full) or moved.
RowLayers GpuSession::Impl::evict_row(RowLayers& full, int64_t n,
                                      const std::vector<DeviceBuffer>& qcap, int64_t m_queries,
                                      const PrefillEviction& ev, int64_t room, bool keep_full,
                                      PhaseClock* clock) {
  const ModelConfig& m = c();
  ev.score.validate();
  check_prefill_layout(full, n);
  const int64_t need = ev.score.queries_needed(n);
  KVEVICT_CHECK(m_queries >= need, "eviction with ", ev.score.describe(), " needs the last ", need,
                " prompt queries of every layer; the prefill kept ", m_queries,
                " (raise PrefillOptions::keep_queries)");
  PhaseClock off(stream(), false);
  PhaseClock& clk = clock != nullptr ? *clock : off;
  LayerEvictor evictor(backend(), ev.score, ev.select);
  RowLayers out(m.n_layers);
  for (int l = 0; l < m.n_layers; ++l) {
    LayerCache& F = full[l];
    if (m.is_sliding(l)) continue;  // below
    clk.mark(PhaseClock::kScore);
    evictor.score(layer_problem(F, l, n, qcap, m_queries, need));
    clk.mark(PhaseClock::kSelect);
    const Selection sel = evictor.select(ev.select, Residency::kDevice);
    if (!sel.warning.empty() && stats.warning.empty()) stats.warning = sel.warning;
    ++stats.evict_cost.score_passes;
    ++stats.evict_cost.selections;
    clk.mark(PhaseClock::kCompact);
    out[l] = compact_layer(F, sel, room);
    if (!keep_full) F = LayerCache();  // freed in stream order behind the gather
  }
  // Sliding layers: their rings as they are (moved), or copied for a snapshot.
  for (int l = 0; l < m.n_layers; ++l) {
    if (!m.is_sliding(l)) continue;
    clk.mark(PhaseClock::kCopy);
    out[l] = keep_full ? copy_layer(full[l], l, room) : std::move(full[l]);
  }
  return out;
}

// A copy of a full row with room more rows per head (no eviction: the full cache of a snapshot).
RowLayers GpuSession::Impl::copy_row(RowLayers& full, int64_t room) {
  RowLayers out(full.size());
  for (size_t l = 0; l < full.size(); ++l) out[l] = copy_layer(full[l], static_cast<int>(l), room);
  return out;
}

std::vector<RowLayers> GpuSession::Impl::evict_each(const GpuSnapshot& snap,
                                                    const std::vector<EvictConfig>& configs,
                                                    PhaseClock& clock) {
  auto& full = const_cast<RowLayers&>(snap.layers);  // read only: keep_full
  std::vector<RowLayers> rows;
  for (const EvictConfig& cfg : configs) {
    if (cfg.prefill.enabled) {
      rows.push_back(evict_row(full, snap.num_tokens(), snap.queries, snap.num_queries, cfg.prefill,
                               opt.decode_room, /*keep_full=*/true, &clock));
    } else {
      clock.mark(PhaseClock::kCopy);
      rows.push_back(copy_row(full, opt.decode_room));
    }
  }
  return rows;
}

void GpuSession::Impl::load_shared(const GpuSnapshot& snap, const std::vector<EvictConfig>& configs,
                                   PhaseClock& clock) {
  const ModelConfig& m = c();
  const int64_t n = snap.num_tokens(), room = opt.decode_room;
  const int B = static_cast<int>(configs.size()), Hkv = m.n_kv_heads;
  auto& full = const_cast<RowLayers&>(snap.layers);  // read only
  // Settings with equal score options form a group: one score pass per layer for the group.
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < B; ++r) {
    const PrefillEviction& ev = configs[r].prefill;
    if (!ev.enabled) continue;
    ev.score.validate();
    auto g = std::find_if(groups.begin(), groups.end(), [&](const std::vector<int>& grp) {
      return LayerEvictor::same_scores(configs[grp[0]].prefill.score, ev.score);
    });
    if (g == groups.end())
      groups.push_back({r});
    else
      g->push_back(r);
  }
  if (!groups.empty()) check_prefill_layout(full, n);
  // sel[l][r]: what row r keeps of full-attention layer l (the full cache: every row).
  std::vector<std::vector<Selection>> sel(m.n_layers, std::vector<Selection>(B));
  for (const std::vector<int>& grp : groups) {
    const PrefillEviction& first = configs[grp[0]].prefill;
    const int64_t need = first.score.queries_needed(n);
    KVEVICT_CHECK(snap.num_queries >= need, "eviction with ", first.score.describe(),
                  " needs the last ", need, " prompt queries of every layer; the prefill kept ",
                  snap.num_queries, " (raise PrefillOptions::keep_queries)");
    LayerEvictor evictor(backend(), first.score, first.select);
    for (int l = 0; l < m.n_layers; ++l) {
      if (m.is_sliding(l)) continue;
      clock.mark(PhaseClock::kScore);
      evictor.score(layer_problem(full[l], l, n, snap.queries, snap.num_queries, need));
      ++stats.evict_cost.score_passes;
      for (int r : grp) {
        clock.mark(PhaseClock::kSelect);
        sel[l][r] = evictor.select(configs[r].prefill.select, Residency::kDevice);
        if (!sel[l][r].warning.empty() && stats.warning.empty()) stats.warning = sel[l][r].warning;
        ++stats.evict_cost.selections;
      }
    }
  }
  // One synchronization (throws when a selected score was NaN); the counts only the device knows
  // (adakv) come to the host, so every row's place in the batch's layer is known.
  clock.mark(PhaseClock::kAssemble);
  backend().synchronize();
  for (int l = 0; l < m.n_layers; ++l) {
    if (m.is_sliding(l)) continue;
    for (int r = 0; r < B; ++r) {
      Selection& s = sel[l][r];
      if (!configs[r].prefill.enabled) {
        s = keep_all(full[l]);
      } else if (!s.has_host_offsets()) {
        s.offsets.resize(Hkv + 1);
        KVEVICT_CUDA_CHECK(
            cudaMemcpy(s.offsets.data(), s.device.offsets, (Hkv + 1) * 8, cudaMemcpyDeviceToHost));
        KVEVICT_CHECK(s.offsets.back() == s.rows, "GPU selection kept ", s.offsets.back(),
                      " rows; expected ", s.rows);
      }
    }
  }
  layers.clear();
  layers.resize(m.n_layers);
  for (int l = 0; l < m.n_layers; ++l) {
    if (m.is_sliding(l)) {
      clock.mark(PhaseClock::kCopy);
      layers[l] = copy_layer(full[l], l, room, B);
      continue;
    }
    clock.mark(PhaseClock::kCompact);
    std::vector<int64_t> cap(static_cast<size_t>(B) * Hkv);
    for (int r = 0; r < B; ++r)
      for (int g = 0; g < Hkv; ++g) cap[r * Hkv + g] = sel[l][r].count(g) + room;
    LayerCache L = LayerCache::with_capacities(cap, m.head_dim, stream());
    for (int r = 0; r < B; ++r) {
      // Row r's segments through the device table alone: its offsets place the row in the layer
      // (the host table's would not start at 0, which a view's must).
      KVLayerView out = L.view(r * Hkv, Hkv);
      out.offsets = nullptr;
      out.lens = nullptr;
      backend().compact(full[l].view(), sel[l][r], out);
      for (int g = 0; g < Hkv; ++g) L.len_h[r * Hkv + g] = sel[l][r].count(g);
    }
    L.upload_table(stream());
    layers[l] = std::move(L);
  }
  start_decode(n, configs[0]);
}

// The rows become the batch: one synchronization (device-only tables to the host, the backend's
// NaN check), then the rows' layers concatenated (one row: that row's layers).
void GpuSession::Impl::set_rows(std::vector<RowLayers> rows, int64_t n, const EvictConfig& evict) {
  const ModelConfig& m = c();
  KVEVICT_CHECK(static_cast<int>(rows.size()) == opt.batch, "loading ", rows.size(),
                " rows into a session of batch ", opt.batch);
  backend().synchronize();  // throws when a selected score was NaN
  for (auto& r : rows)
    for (auto& L : r)
      if (!L.host_valid) L.sync_host();
  if (opt.batch == 1) {
    layers = std::move(rows[0]);
  } else {
    layers.clear();
    layers.resize(m.n_layers);
    for (int l = 0; l < m.n_layers; ++l) {
      std::vector<const LayerCache*> parts;
      for (const auto& r : rows) parts.push_back(&r[l]);
      layers[l] = assemble_rows(parts, stream());
    }
  }
  start_decode(n, evict);
}

void GpuSession::load_rows(const GpuSnapshot& snap, const std::vector<EvictConfig>& configs) {
  Impl& s = *impl_;
  KVEVICT_CHECK(snap.context.get() == s.ctx.get(),
                "the snapshot was made on another GPU context; expected this runtime's");
  KVEVICT_CHECK(static_cast<int>(configs.size()) == s.opt.batch, "loading ", configs.size(),
                " configs into a session of batch ", s.opt.batch);
  for (const auto& cfg : configs)
    KVEVICT_CHECK(cfg.decode.enabled == configs[0].decode.enabled &&
                      (!cfg.decode.enabled ||
                       cfg.decode.options.describe() == configs[0].decode.options.describe()),
                  "rows decoded together need the same decode-time eviction; got '",
                  cfg.decode.describe(), "' and '", configs[0].decode.describe(), "'");
  const int64_t n = snap.num_tokens();
  KVEVICT_CHECK(n <= s.opt.max_prompt, "snapshot of ", n,
                " tokens exceeds the session's max_prompt ", s.opt.max_prompt);
  // KVEVICT_SHARED_SCORES=0: every config scores and copies on its own (the earlier path).
  const bool share = env_flag("KVEVICT_SHARED_SCORES", true);
  PhaseClock clock(s.stream(), env_flag("KVEVICT_EVICT_PROFILE", false));
  s.stats.evict_cost = EvictCost{};
  EventTimer timer(s.stream());
  if (share) {
    s.load_shared(snap, configs, clock);
  } else {
    std::vector<RowLayers> rows = s.evict_each(snap, configs, clock);
    clock.mark(PhaseClock::kAssemble);
    s.set_rows(std::move(rows), n, configs[0]);
  }
  clock.add_to(s.stats.evict_cost);
  // The eviction's time includes the batch's assembly (every row's place in one layer each).
  s.stats.evict_seconds += timer.seconds();
  s.stats.prefill_tokens = n;
  s.stats.prefill_seconds = snap.prefill_seconds;
  s.stats.kv_bytes_before.assign(s.c().n_layers, 0);
  s.stats.kv_bytes_after.assign(s.c().n_layers, 0);
  const int Hkv = s.c().n_kv_heads;
  for (int l = 0; l < s.c().n_layers; ++l) {
    const LayerCache& L = s.layers[l];
    s.stats.kv_bytes_before[l] = snap.layers[l].kv_bytes();
    s.stats.kv_bytes_after[l] = (L.off_h[Hkv] - L.off_h[0]) * L.head_dim * 2 * 2;  // row 0
  }
  // Every row starts from the snapshot's last logits.
  const int64_t V = s.c().vocab_size;
  for (int b = 0; b < s.opt.batch; ++b)
    KVEVICT_CUDA_CHECK(cudaMemcpyAsync(s.logits.as<float>() + b * V, snap.logits.get(), V * 4,
                                       cudaMemcpyDeviceToDevice, s.stream()));
}

}  // namespace kvevict::gpu
