// GpuSession (gpu_runtime.h): prefill into a row's full cache, one-shot eviction through the
// library's LayerEvictor on the cuda backend, batch assembly, batched decode with decode-time
// eviction through DecodeEvictor, greedy and Sampler-rule sampling on the GPU.
//
// A row's cache of one layer is a LayerCache of Hkv segments. Its prefill layout gives every
// segment n + room rows (row = position), so the window kernel and the scores read the layer as
// [Hkv, n, d] with a head stride. Eviction compacts into a new layer sized for the kept rows plus
// `room` per head (the segment table written on the device when only the device knows the
// counts, adakv); the old layer is dropped in stream order. The batch's layer is the rows' layers
// concatenated (assemble_rows); with one row it is that row's layer.
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

namespace kvevict::gpu {

using cuda::DeviceBuffer;
using bf16 = __nv_bfloat16;

namespace {

class EventTimer {
 public:
  explicit EventTimer(cudaStream_t s) : s_(s) {
    KVEVICT_CUDA_CHECK(cudaEventCreate(&a_));
    KVEVICT_CUDA_CHECK(cudaEventCreate(&b_));
    KVEVICT_CUDA_CHECK(cudaEventRecord(a_, s_));
  }
  double seconds() {
    KVEVICT_CUDA_CHECK(cudaEventRecord(b_, s_));
    KVEVICT_CUDA_CHECK(cudaEventSynchronize(b_));
    float ms = 0;
    KVEVICT_CUDA_CHECK(cudaEventElapsedTime(&ms, a_, b_));
    return ms / 1e3;
  }
  ~EventTimer() {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }

 private:
  cudaStream_t s_;
  cudaEvent_t a_ = nullptr, b_ = nullptr;
};

using RowLayers = std::vector<LayerCache>;  // [n_layers] one row's caches, Hkv segments each

// A keep-everything host selection of a layer's rows (sliding rings keep their slots).
Selection keep_all(const LayerCache& L) {
  return Selection::keep_all(L.segments, L.len_h.data());
}

// An environment switch: unset = `fallback`, "0" = off, anything else = on.
bool env_flag(const char* name, bool fallback) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == '\0') return fallback;
  return std::string(e) != "0";
}

// Device time by phase of a batch's eviction (KVEVICT_EVICT_PROFILE=1): an event at every mark;
// the interval up to the next mark is charged to the phase the mark named. Off: marks do nothing.
class PhaseClock {
 public:
  enum Phase { kScore, kSelect, kCompact, kCopy, kAssemble, kEnd };
  PhaseClock(cudaStream_t stream, bool on) : stream_(stream), on_(on) {}
  ~PhaseClock() { clear(); }
  PhaseClock(const PhaseClock&) = delete;
  PhaseClock& operator=(const PhaseClock&) = delete;
  void mark(Phase p) {
    if (!on_) return;
    cudaEvent_t e = nullptr;
    KVEVICT_CUDA_CHECK(cudaEventCreate(&e));
    marks_.push_back({e, p});
    KVEVICT_CUDA_CHECK(cudaEventRecord(e, stream_));
  }
  // Closes the last phase and adds each phase's seconds to `cost` (waits for the device).
  void add_to(EvictCost& cost) {
    if (!on_ || marks_.empty()) return;
    mark(kEnd);
    KVEVICT_CUDA_CHECK(cudaEventSynchronize(marks_.back().event));
    double sec[kEnd] = {};
    for (size_t i = 0; i + 1 < marks_.size(); ++i) {
      float ms = 0;
      KVEVICT_CUDA_CHECK(cudaEventElapsedTime(&ms, marks_[i].event, marks_[i + 1].event));
      sec[marks_[i].phase] += ms / 1e3;
    }
    cost.score_seconds += sec[kScore];
    cost.select_seconds += sec[kSelect];
    cost.compact_seconds += sec[kCompact];
    cost.copy_seconds += sec[kCopy];
    cost.assemble_seconds += sec[kAssemble];
    clear();
  }

 private:
  struct Mark {
    cudaEvent_t event;
    Phase phase;
  };
  void clear() {
    for (const Mark& m : marks_) cudaEventDestroy(m.event);
    marks_.clear();
  }
  cudaStream_t stream_;
  bool on_;
  std::vector<Mark> marks_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// GpuContext, GpuSnapshot

GpuContext::GpuContext(std::shared_ptr<const GpuModel> model) : model_(std::move(model)) {
  KVEVICT_CHECK(model_ != nullptr, "GPU context needs a model; got null");
  KVEVICT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  backend_ = make_cuda_backend(stream_);
  forward_ = std::make_unique<GpuForward>(model_->impl(), stream_);
}

GpuContext::~GpuContext() {
  if (stream_) cudaStreamSynchronize(stream_);
  forward_.reset();
  backend_.reset();
  if (stream_) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

GpuSnapshot::~GpuSnapshot() {
  // The buffers are freed in the context's stream order; keep the context alive until then.
  layers.clear();
  queries.clear();
  logits.reset();
}

int64_t GpuSnapshot::kv_bytes() const {
  int64_t b = 0;
  for (const auto& L : layers) b += L.kv_bytes();
  return b;
}

PrefillSnapshot GpuSnapshot::to_host() const {
  KVEVICT_CUDA_CHECK(cudaStreamSynchronize(context->stream()));
  const ModelConfig& c = context->model().config();
  PrefillSnapshot h;
  h.tokens = tokens;
  h.seconds = prefill_seconds;
  const int d = c.head_dim;
  for (const LayerCache& L : layers) {
    std::vector<int64_t> cap(L.segments);
    for (int g = 0; g < L.segments; ++g) cap[g] = L.len_h[g];
    HostKVCache hc(DType::kF32, L.segments, d, cap);
    KVLayerView v = hc.view();
    std::vector<uint16_t> kb(static_cast<size_t>(L.rows) * d), vb(kb.size());
    std::vector<int32_t> pb(static_cast<size_t>(L.rows));
    if (L.rows > 0) {
      KVEVICT_CUDA_CHECK(cudaMemcpy(kb.data(), L.k.get(), kb.size() * 2, cudaMemcpyDeviceToHost));
      KVEVICT_CUDA_CHECK(cudaMemcpy(vb.data(), L.v.get(), vb.size() * 2, cudaMemcpyDeviceToHost));
      KVEVICT_CUDA_CHECK(cudaMemcpy(pb.data(), L.pos.get(), pb.size() * 4, cudaMemcpyDeviceToHost));
    }
    for (int g = 0; g < L.segments; ++g) {
      for (int64_t j = 0; j < L.len_h[g]; ++j) {
        const int64_t src = L.off_h[g] + j, dst = v.offsets[g] + j;
        for (int i = 0; i < d; ++i) {
          static_cast<float*>(v.k)[dst * d + i] = bf16_to_float(kb[src * d + i]);
          static_cast<float*>(v.v)[dst * d + i] = bf16_to_float(vb[src * d + i]);
        }
        v.pos[dst] = pb[src];
      }
      v.lens[g] = L.len_h[g];
    }
    h.caches.push_back(std::move(hc));
  }
  for (const DeviceBuffer& q : queries) {
    if (num_queries == 0) {
      h.queries.emplace_back();
      continue;
    }
    HostTensor t(DType::kF32, {c.n_heads, num_queries, c.head_dim});
    std::vector<uint16_t> b(static_cast<size_t>(t.numel()));
    KVEVICT_CUDA_CHECK(cudaMemcpy(b.data(), q.get(), b.size() * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < b.size(); ++i) t.ptr<float>()[i] = bf16_to_float(b[i]);
    h.queries.push_back(std::move(t));
  }
  h.logits.resize(c.vocab_size);
  KVEVICT_CUDA_CHECK(
      cudaMemcpy(h.logits.data(), logits.get(), h.logits.size() * 4, cudaMemcpyDeviceToHost));
  return h;
}

// ---------------------------------------------------------------------------------------------
// GpuSession

void GpuSessionOptions::validate() const {
  KVEVICT_CHECK(batch >= 1, "batch ", batch, " is invalid; expected >= 1");
  KVEVICT_CHECK(max_prompt >= 1, "max_prompt ", max_prompt, " is invalid; expected >= 1");
  KVEVICT_CHECK(decode_room >= 0, "decode_room ", decode_room, " is invalid; expected >= 0");
  KVEVICT_CHECK(prefill_chunk >= 1, "prefill chunk ", prefill_chunk, " is invalid; expected >= 1");
  KVEVICT_CHECK(scores_in_attention_min_segments >= 0, "scores_in_attention_min_segments ",
                scores_in_attention_min_segments, " is invalid; expected >= 0 (0 = the SM count)");
}

struct GpuSession::Impl {
  std::shared_ptr<GpuContext> ctx;
  GpuSessionOptions opt;
  GpuForward* fwd = nullptr;               // the context's
  DeviceBuffer logits;                     // [batch, V] f32: every row's next-token logits
  RowLayers layers;                        // [n_layers] the batch: opt.batch * Hkv segments each
  std::vector<int64_t> positions;          // [batch] next position of each row
  std::unique_ptr<DecodeEvictor> evictor;  // decode-time eviction, when configured
  StepScoring scoring;
  bool appending = false;       // append(): tokens are not scored (as Session::append)
  bool have_rows = false;       // prefill or load_rows ran
  std::vector<float> logits_h;  // [V] row 0's logits, downloaded on demand
  bool logits_h_valid = false;
  DeviceBuffer ids, sample_scratch, draws;  // [batch] i32, sampling sort buffers, draws [batch]
  SessionStats stats;

  const ModelConfig& c() const { return ctx->model().config(); }
  cudaStream_t stream() const { return ctx->stream(); }
  Backend& backend() const { return ctx->backend(); }

  RowLayers prefill_row(const std::vector<int32_t>& tokens, int64_t need, int64_t room,
                        std::vector<DeviceBuffer>* qcap);
  void trim_sliding(RowLayers& row, int64_t n, int64_t room);
  // `n`: the prompt's tokens (sliding layers hold fewer rows).
  RowLayers evict_row(RowLayers& full, int64_t n, const std::vector<DeviceBuffer>& qcap, int64_t m,
                      const PrefillEviction& ev, int64_t room, bool keep_full,
                      PhaseClock* clock = nullptr);
  RowLayers copy_row(RowLayers& full, int64_t room);
  // load_rows, every config on its own (KVEVICT_SHARED_SCORES=0, the earlier path kept for
  // comparisons): each evicts or copies a row cache of its own, then set_rows assembles them.
  std::vector<RowLayers> evict_each(const GpuSnapshot& snap,
                                    const std::vector<EvictConfig>& configs, PhaseClock& clock);
  // load_rows with shared work: configs with the same score options score each layer once and
  // select from it each with its own selection options; every row's kept rows are gathered
  // straight into the batch's layer (no row caches, no assembly copy); a sliding layer (the same
  // ring in every row) is gathered once and replicated.
  void load_shared(const GpuSnapshot& snap, const std::vector<EvictConfig>& configs,
                   PhaseClock& clock);
  void check_prefill_layout(const RowLayers& full, int64_t n) const;
  ScoreProblem layer_problem(LayerCache& F, int layer, int64_t n,
                             const std::vector<DeviceBuffer>& qcap, int64_t m_queries,
                             int64_t need) const;
  LayerCache compact_layer(LayerCache& F, const Selection& sel, int64_t room);
  // `copies` copies of a layer, one after another (rows of a batch), each with room more rows
  // per head (a sliding layer: its ring, up to the window).
  LayerCache copy_layer(LayerCache& F, int layer, int64_t room, int copies = 1);
  void set_rows(std::vector<RowLayers> rows, int64_t n, const EvictConfig& evict);
  void start_decode(int64_t n, const EvictConfig& evict);
  void setup_decode(const EvictConfig& evict);
  void decode_step(int32_t* tokens_dev, bool score, bool argmax_first = false);
  void evict_decode();
  void check_tokens(const std::vector<int32_t>& tokens) const;
};

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
  EventTimer timer(s.stream());
  std::vector<int32_t> row(s.opt.batch);
  s.appending = true;
  try {
    for (int32_t t : tokens) {
      std::fill(row.begin(), row.end(), t);
      KVEVICT_CUDA_CHECK(cudaMemcpyAsync(s.ids.get(), row.data(), row.size() * 4,
                                         cudaMemcpyHostToDevice, s.stream()));
      s.decode_step(s.ids.as<int32_t>(), /*score=*/false);
    }
  } catch (...) {
    s.appending = false;
    throw;
  }
  s.appending = false;
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
  GenerateResult r;
  for (int i = 0; i < max_new; ++i) {
    const int32_t tok = greedy ? argmax()[0] : sample(so, {unit(rng)})[0];
    r.tokens.push_back(tok);
    if (on_token) on_token(tok);
    if (is_stop && is_stop(tok)) {
      r.stopped = true;
      break;
    }
    if (i + 1 < max_new) decode(tok);
  }
  return r;
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
