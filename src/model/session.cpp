#include "model/session.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>

#include "kvevict/backend.h"
#include "kvevict/error.h"
#include "kvevict/evict.h"
#include "kvevict/select.h"
#include "model/forward.h"
#include "model/generate_loop.h"

namespace kvevict {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Every row of every head except the oldest ones beyond `keep` rows per head.
Selection keep_last(const KVLayerView& v, int64_t keep) {
  Selection s;
  s.num_kv_heads = v.num_kv_heads;
  s.offsets.assign(v.num_kv_heads + 1, 0);
  for (int h = 0; h < v.num_kv_heads; ++h) {
    const int64_t len = v.lens[h], k = std::min(len, keep);
    for (int64_t i = len - k; i < len; ++i) s.index.push_back(static_cast<int32_t>(i));
    s.offsets[h + 1] = s.offsets[h] + k;
  }
  return s;
}

HostKVCache rebuild_heads(const HostKVCache& c, const Selection& sel,
                          const std::vector<int64_t>& cap, bool score_acc) {
  const KVLayerView in = c.view();
  HostKVCache out(in.dtype, in.num_kv_heads, in.head_dim, cap, score_acc);
  cache_compact(in, sel, out.view());
  return out;
}

// A new cache holding the selected rows of `c` with `spare` free rows per head.
HostKVCache rebuild(const HostKVCache& c, const Selection& sel, int64_t spare, bool score_acc) {
  std::vector<int64_t> cap(sel.num_kv_heads);
  for (int h = 0; h < sel.num_kv_heads; ++h) cap[h] = sel.count(h) + spare;
  return rebuild_heads(c, sel, cap, score_acc);
}

// A new cache holding the selected rows of `c` in segments of `capacity` rows per head.
HostKVCache rebuild_to(const HostKVCache& c, const Selection& sel, int64_t capacity,
                       bool score_acc) {
  std::vector<int64_t> cap(sel.num_kv_heads, capacity);
  return rebuild_heads(c, sel, cap, score_acc);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Options

void SessionOptions::validate() const {
  KVEVICT_CHECK(kv_dtype == DType::kF32 || kv_dtype == DType::kF16 || kv_dtype == DType::kBF16,
                "KV cache dtype ", dtype_name(kv_dtype),
                " is not supported on the CPU; expected f32, f16 or bf16");
  KVEVICT_CHECK(chunk >= 1, "prefill chunk ", chunk, " is invalid; expected >= 1");
}

int64_t PrefillSnapshot::num_queries() const {
  for (const auto& q : queries)
    if (q.nbytes() > 0) return q.shape()[1];
  return 0;
}

int64_t PrefillSnapshot::kv_bytes() const {
  int64_t b = 0;
  for (const auto& c : caches) b += c.kv_bytes();
  return b;
}

double SessionStats::prefill_tokens_per_s() const {
  return prefill_seconds > 0 ? prefill_tokens / prefill_seconds : 0.0;
}
double SessionStats::decode_tokens_per_s() const {
  return decode_seconds > 0 ? decode_tokens / decode_seconds : 0.0;
}

std::string SessionStats::describe() const {
  int64_t before = 0, after = 0;
  for (int64_t b : kv_bytes_before) before += b;
  for (int64_t b : kv_bytes_after) after += b;
  std::ostringstream os;
  os << "prefill " << prefill_tokens << " tok in " << prefill_seconds << " s ("
     << prefill_tokens_per_s() << " tok/s); decode " << decode_tokens << " tok in "
     << decode_seconds << " s (" << decode_tokens_per_s() << " tok/s)";
  if (!kv_bytes_before.empty())
    os << "; KV " << before << " -> " << after << " bytes, evict " << evict_seconds << " s";
  return os.str();
}

// ---------------------------------------------------------------------------------------------
// Session

struct Session::DecodeState {
  DecodeEvictor evictor;
  explicit DecodeState(DecodeEvictOptions o) : evictor(o) {}
};

Session::Session(std::shared_ptr<const Model> model, SessionOptions opt)
    : model_(std::move(model)), opt_(std::move(opt)) {
  KVEVICT_CHECK(model_ != nullptr, "session needs a model; got null");
  opt_.validate();
  init_caches();
}

Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;
Session::~Session() = default;

void Session::init_caches() {
  const ModelConfig& c = model_->config();
  caches_.clear();
  for (int l = 0; l < c.n_layers; ++l)
    caches_.emplace_back(opt_.kv_dtype, c.n_kv_heads, c.head_dim,
                         std::vector<int64_t>(c.n_kv_heads, 0));
}

int64_t Session::kv_bytes(int layer) const {
  KVEVICT_CHECK(layer >= 0 && layer < static_cast<int>(caches_.size()), "layer ", layer,
                " is out of range; expected 0 .. ", caches_.size() - 1);
  return caches_[layer].kv_bytes();
}

int64_t Session::kv_bytes_total() const {
  int64_t b = 0;
  for (const auto& c : caches_) b += c.kv_bytes();
  return b;
}

// A sliding layer may hold a few rows older than its window (decode trims it only every so many
// steps, trim_sliding); they are masked by position, so the rows in use, here and in
// kept_positions, are those the next token can see: positions >= position_ - window.
int64_t Session::kv_rows(int layer) const {
  const KVLayerView v = caches_[layer].view();
  const bool sliding = model_->config().is_sliding(layer);
  const int64_t first_visible = position_ - model_->config().sliding_window;
  int64_t r = 0;
  for (int h = 0; h < v.num_kv_heads; ++h) {
    if (!sliding) {
      r += v.lens[h];
      continue;
    }
    const int32_t* pos = v.pos + v.offsets[h];
    r += std::count_if(pos, pos + v.lens[h], [&](int32_t p) { return p >= first_visible; });
  }
  return r;
}

std::vector<int32_t> Session::kept_positions(int layer, int kv_head) const {
  KVEVICT_CHECK(layer >= 0 && layer < static_cast<int>(caches_.size()), "layer ", layer,
                " is out of range; expected 0 .. ", caches_.size() - 1);
  const KVLayerView v = caches_[layer].view();
  KVEVICT_CHECK(kv_head >= 0 && kv_head < v.num_kv_heads, "KV head ", kv_head,
                " is out of range; expected 0 .. ", v.num_kv_heads - 1);
  std::vector<int32_t> out(v.pos + v.offsets[kv_head],
                           v.pos + v.offsets[kv_head] + v.lens[kv_head]);
  if (model_->config().is_sliding(layer)) {
    const int64_t first_visible = position_ - model_->config().sliding_window;
    out.erase(std::remove_if(out.begin(), out.end(), [&](int32_t p) { return p < first_visible; }),
              out.end());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Which layers reserve_rows touches.
enum class Layers { kAll, kFull, kSliding };

// Makes room for `extra` rows per head in the chosen layers, adding `spare` rows beyond that
// when it has to reallocate. Sliding-window layers drop rows no future query can see (older
// than the last `window`) whenever they reallocate.
static void reserve_rows(std::vector<HostKVCache>& caches, const ModelConfig& c, int64_t extra,
                         int64_t spare, Layers which = Layers::kAll) {
  for (int l = 0; l < c.n_layers; ++l) {
    if ((which == Layers::kFull && c.is_sliding(l)) ||
        (which == Layers::kSliding && !c.is_sliding(l)))
      continue;
    const KVLayerView v = caches[l].view();
    bool fits = true;
    for (int h = 0; h < v.num_kv_heads; ++h)
      fits = fits && v.offsets[h + 1] - v.offsets[h] >= v.lens[h] + extra;
    if (fits) continue;
    int64_t longest = 0;
    for (int h = 0; h < v.num_kv_heads; ++h) longest = std::max(longest, v.lens[h]);
    const int64_t keep = c.is_sliding(l) ? c.sliding_window : longest;
    caches[l] = rebuild(caches[l], keep_last(v, keep), extra + spare, v.score_acc != nullptr);
  }
}

// Sliding-window layers keep their window (no later query can see older keys) plus at most
// `slack` rows of room: decode passes the rows its reserve_rows added, so a step neither copies
// the window back down nor up again (two copies of every sliding layer a token, before); the
// room fills over the next steps and the one reallocation then drops the rows past the window.
// Attention masks sliding layers by position, so the extra rows change nothing it reads.
static void trim_sliding(std::vector<HostKVCache>& caches, const ModelConfig& c,
                         int64_t slack = 0) {
  for (int l = 0; l < c.n_layers; ++l) {
    if (!c.is_sliding(l)) continue;
    const KVLayerView v = caches[l].view();
    bool over = false;
    for (int h = 0; h < v.num_kv_heads; ++h)
      over = over || v.offsets[h + 1] - v.offsets[h] > c.sliding_window + slack;
    if (over)
      caches[l] = rebuild(caches[l], keep_last(v, c.sliding_window), 0, v.score_acc != nullptr);
  }
}

void Session::forward_tokens(const std::vector<int32_t>& tokens, int64_t keep_queries,
                             std::vector<HostTensor>* queries, bool progress) {
  const ModelConfig& c = model_->config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  KVEVICT_CHECK(n > 0, "no tokens to process; expected at least one");
  KVEVICT_CHECK(position_ + n <= c.context_length, "prompt of ", position_ + n, " tokens (",
                position_, " cached + ", n, " new) exceeds the context length ", c.context_length,
                " of ", c.name);
  const int64_t m = keep_queries < 0 ? n : std::min(keep_queries, n);
  model_ops::QueryCapture capture;
  if (queries != nullptr && m > 0) {
    queries->clear();
    for (int l = 0; l < c.n_layers; ++l)
      queries->emplace_back(DType::kF32, std::vector<int64_t>{c.n_heads, m, c.head_dim});
    capture.from_pos = position_ + n - m;
    capture.m = m;
    capture.queries = queries;
  }
  // Full-attention layers take the whole prompt at once; a sliding-window layer only ever holds
  // its window and the chunk being processed (its older keys are dropped chunk by chunk), so a
  // long prompt costs gemma3's sliding layers window + chunk rows, not n.
  reserve_rows(caches_, c, n, 0, Layers::kFull);
  logits_.resize(c.vocab_size);  // the head writes every logit (no 1 MB memset a token)
  for (int64_t c0 = 0; c0 < n; c0 += opt_.chunk) {
    const int64_t T = std::min(opt_.chunk, n - c0);
    const bool last = c0 + T == n;
    reserve_rows(caches_, c, T, 0, Layers::kSliding);
    model_ops::forward_chunk(*model_, tokens.data() + c0, T, position_ + c0, caches_,
                             capture.m > 0 ? &capture : nullptr, last ? logits_.data() : nullptr);
    if (progress && opt_.progress) opt_.progress(c0 + T, n);
  }
  position_ += n;
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  trim_sliding(caches_, c);
}

PrefillSnapshot Session::prefill_snapshot(const std::shared_ptr<const Model>& model,
                                          const std::vector<int32_t>& tokens,
                                          const PrefillOptions& popt, const SessionOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  Session s(model, opt);
  PrefillSnapshot snap;
  s.forward_tokens(tokens, popt.keep_queries, &snap.queries, true);
  snap.tokens = tokens;
  snap.caches = std::move(s.caches_);
  snap.logits = std::move(s.logits_);
  snap.seconds = seconds_since(t0);
  return snap;
}

void Session::prefill(const std::vector<int32_t>& tokens, const EvictConfig& evict) {
  KVEVICT_CHECK(position_ == 0, "prefill on a session that already holds ", position_,
                " tokens; expected a fresh session (use append to add tokens)");
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<HostTensor> queries;
  int64_t keep = 0;
  if (evict.prefill.enabled) keep = evict.prefill.score.queries_needed(n);
  forward_tokens(tokens, keep, &queries, true);
  stats_.prefill_tokens += n;
  stats_.prefill_seconds += seconds_since(t0);
  evict_ = evict;
  if (evict.prefill.enabled) {
    evict_prefill(evict.prefill, queries);
  } else {
    stats_.kv_bytes_before.assign(caches_.size(), 0);
    for (size_t l = 0; l < caches_.size(); ++l) stats_.kv_bytes_before[l] = caches_[l].kv_bytes();
    stats_.kv_bytes_after = stats_.kv_bytes_before;
  }
  setup_decode();
}

Session Session::from_snapshot(const std::shared_ptr<const Model>& model,
                               const PrefillSnapshot& snap, const EvictConfig& evict,
                               const SessionOptions& opt) {
  Session s(model, opt);
  const ModelConfig& c = model->config();
  KVEVICT_CHECK(static_cast<int>(snap.caches.size()) == c.n_layers, "snapshot holds ",
                snap.caches.size(), " layer caches; expected ", c.n_layers, " for ", c.name);
  s.caches_ = snap.caches;  // a copy: the snapshot serves many methods
  s.tokens_ = snap.tokens;
  s.position_ = snap.num_tokens();
  s.logits_ = snap.logits;
  s.stats_.prefill_tokens = snap.num_tokens();
  s.stats_.prefill_seconds = snap.seconds;
  s.evict_ = evict;
  if (evict.prefill.enabled) s.evict_prefill(evict.prefill, snap.queries);
  s.setup_decode();
  return s;
}

void Session::evict_prefill(const PrefillEviction& ev, const std::vector<HostTensor>& queries) {
  const auto t0 = std::chrono::steady_clock::now();
  const ModelConfig& c = model_->config();
  ev.score.validate();
  const int64_t n = position_;
  const int64_t need = ev.score.queries_needed(n);
  int64_t have = 0;
  if (!queries.empty() && queries[0].nbytes() > 0) have = queries[0].shape()[1];
  KVEVICT_CHECK(have >= need, "eviction with ", ev.score.describe(), " needs the last ", need,
                " prompt queries of every layer; the prefill kept ", have,
                " (raise PrefillOptions::keep_queries)");
  // Selection protects the observation window the scores were computed with.
  SelectOptions sel_opt = ev.select;
  sel_opt.window = ev.score.window;
  auto backend = make_cpu_backend();
  LayerEvictor evictor(*backend, ev.score, sel_opt);
  stats_.kv_bytes_before.assign(c.n_layers, 0);
  stats_.kv_bytes_after.assign(c.n_layers, 0);
  std::vector<float> qbuf;
  for (int l = 0; l < c.n_layers; ++l) {
    stats_.kv_bytes_before[l] = caches_[l].kv_bytes();
    if (c.is_sliding(l)) {
      stats_.kv_bytes_after[l] = stats_.kv_bytes_before[l];
      continue;
    }
    const KVLayerView view = caches_[l].view();
    for (int h = 0; h < view.num_kv_heads; ++h)
      KVEVICT_CHECK(view.lens[h] == n && view.offsets[h] == h * n, "layer ", l,
                    " cache is not the full prompt (head ", h, " holds ", view.lens[h],
                    " rows); prefill eviction runs right after the prefill");
    ScoreProblem p;
    if (need > 0) {
      // The last `need` of the `have` kept queries, contiguous [Hq, need, d].
      const int Hq = c.n_heads, d = c.head_dim;
      qbuf.resize(static_cast<size_t>(Hq) * need * d);
      const float* src = queries[l].ptr<float>();
      for (int h = 0; h < Hq; ++h)
        std::memcpy(&qbuf[static_cast<size_t>(h) * need * d],
                    src + (static_cast<int64_t>(h) * have + (have - need)) * d,
                    need * d * sizeof(float));
      p.q = TensorView(qbuf.data(), DType::kF32, {Hq, need, d});
    }
    p.k = TensorView(view.k, view.dtype, {view.num_kv_heads, n, view.head_dim});
    p.v = TensorView(view.v, view.dtype, {view.num_kv_heads, n, view.head_dim});
    // Only criticalkv reads W_o; view() dequantizes a block-typed matrix on first use.
    if (ev.score.method == Method::kCriticalKV) p.wo = model_->weights().layers[l].wo.view();
    p.scale = c.logit_scale();
    const Selection sel = evictor.plan(p);
    if (!sel.warning.empty() && stats_.warning.empty()) stats_.warning = sel.warning;
    HostKVCache out = rebuild(caches_[l], sel, 0, false);
    caches_[l] = std::move(out);
    stats_.kv_bytes_after[l] = caches_[l].kv_bytes();
  }
  stats_.evict_seconds += seconds_since(t0);
}

void Session::setup_decode() {
  decode_.reset();
  if (!evict_.decode.enabled) return;
  const ModelConfig& c = model_->config();
  DecodeEvictOptions o = evict_.decode.options;
  o.scale = c.logit_scale();
  o.softcap = 0.0f;
  o.validate();
  decode_ = std::make_unique<DecodeState>(o);
  // The evictor accumulates per-row scores in the cache and compacts heads in place: give every
  // evicted layer a score accumulator and room for budget + slack + 1 rows, but never more than a
  // head can ever hold (the context): a budget + slack beyond it never evicts, and allocating it
  // would only exhaust memory.
  for (int l = 0; l < c.n_layers; ++l) {
    if (c.is_sliding(l)) continue;
    const KVLayerView v = caches_[l].view();
    int64_t longest = 0;
    for (int h = 0; h < v.num_kv_heads; ++h) longest = std::max(longest, v.lens[h]);
    const int64_t cap =
        std::max(longest + 1, std::min(o.capacity_per_head(), c.context_length + int64_t{1}));
    caches_[l] = rebuild_to(caches_[l], Selection::keep_all(v.num_kv_heads, v.lens), cap, true);
  }
}

void Session::append(const std::vector<int32_t>& tokens) {
  KVEVICT_CHECK(position_ > 0, "append on an empty session; expected prefill first");
  const auto t0 = std::chrono::steady_clock::now();
  forward_tokens(tokens, 0, nullptr, false);
  stats_.append_tokens += static_cast<int64_t>(tokens.size());
  stats_.append_seconds += seconds_since(t0);
}

void Session::decode(int32_t token) {
  const ModelConfig& c = model_->config();
  KVEVICT_CHECK(position_ + 1 <= c.context_length, "decoding position ", position_,
                " exceeds the context length ", c.context_length, " of ", c.name);
  const auto t0 = std::chrono::steady_clock::now();
  // Spare rows amortize reallocation over decode steps; proportional to the cache so that a
  // small evicted cache does not double in size.
  const int64_t spare = std::clamp<int64_t>(kv_rows(0) / c.n_kv_heads / 8, 16, 256);
  reserve_rows(caches_, c, 1, spare);
  model_ops::AttentionHook hook;
  if (decode_) {
    hook = [this, &c](int l, const KVLayerView& view, const float* q, const float* out,
                      const float* lse) {
      if (c.is_sliding(l)) return;
      DecodeStep st;
      st.q = TensorView(const_cast<float*>(q), DType::kF32, {c.n_heads, c.head_dim});
      st.a = TensorView(const_cast<float*>(out), DType::kF32, {c.n_heads, c.head_dim});
      st.lse = TensorView(const_cast<float*>(lse), DType::kF32, {c.n_heads});
      const int64_t evicted = decode_->evictor.step(view, st);
      if (evicted == 0) return;
      ++stats_.decode_evictions;
      // In-place compaction keeps the allocation; give memory back once it is mostly unused
      // (a long prompt decoded under a small budget).
      const int64_t target = decode_->evictor.options().capacity_per_head();
      bool oversized = false;
      for (int h = 0; h < view.num_kv_heads; ++h)
        oversized = oversized || view.offsets[h + 1] - view.offsets[h] > 2 * target;
      if (oversized)
        caches_[l] = rebuild_to(caches_[l], Selection::keep_all(view.num_kv_heads, view.lens),
                                std::max<int64_t>(target, 1), true);
    };
  }
  logits_.resize(c.vocab_size);  // the head writes every logit (no 1 MB memset a token)
  model_ops::forward_chunk(*model_, &token, 1, position_, caches_, nullptr, logits_.data(),
                           decode_ ? &hook : nullptr);
  ++position_;
  tokens_.push_back(token);
  trim_sliding(caches_, c, 1 + spare);
  stats_.decode_tokens += 1;
  stats_.decode_seconds += seconds_since(t0);
}

double Session::nll(int32_t target) {
  return logits_nll(logits_, target);
}

GenerateResult Session::generate(int max_new, Sampler& sampler,
                                 const std::function<bool(int32_t)>& is_stop,
                                 const std::function<void(int32_t)>& on_token) {
  KVEVICT_CHECK(max_new >= 0, "max_new ", max_new, " is negative; expected >= 0");
  KVEVICT_CHECK(position_ > 0, "generate on an empty session; expected prefill first");
  return generate_tokens(
      max_new, [&] { return sampler.sample(logits_); }, [&](int32_t tok) { decode(tok); }, is_stop,
      on_token);
}

}  // namespace kvevict
