// Host launchers of the CUDA kernels (layer 2 of STYLE.md): raw device pointers, sizes, a
// caller-provided workspace and a stream; they return cudaError_t and never allocate. The API
// layer (namespace kvevict::cuda) checks shapes, dtypes and devices before calling them.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace kvevict::cuda::detail {

enum class Elem : uint8_t { kBF16, kF16 };

// Raw view of one layer's window problem. Strides are in elements.
struct WindowArgs {
  Elem elem = Elem::kBF16;
  const void* q = nullptr;  // [Hq, m, d] queries after RoPE; the last w rows are the window
  int64_t q_head_stride = 0, q_row_stride = 0;
  int q_rows = 0;           // m
  const void* k = nullptr;  // [Hkv, n, d] keys after RoPE
  const void* v = nullptr;  // [Hkv, n, d] values (may be null when only lse is wanted)
  int64_t kv_head_stride = 0, kv_row_stride = 0;
  int num_q_heads = 0, num_kv_heads = 0, w = 0, head_dim = 0;
  int64_t n = 0;
  float scale = 1.0f;  // logit scale
  // Forward only (the scoring passes ignore it): 0 = off; else a row whose last visible key is L
  // sees keys L - sliding_window + 1 .. L only (gemma3's local layers, kvevict::cpu::attention's
  // sliding_window rule q_pos - k_pos < window).
  int64_t sliding_window = 0;
};

// The leave-one-out record of a window row's top key (issue 13, score_terms.h TopKey): idx is the
// key (>= 0) when the row's top key holds p >= 1/2, else -1; the scoring passes then give that
// key terms::top_term from these instead of the first form. 32 bytes.
struct TopRow {
  int32_t idx = -1;
  float p = 0, omp = 0, z = 0;      // p, 1 - p (exact, from rho), the logit z (natural units)
  float d2 = 0, vdiff = 0, v2 = 0;  // ||v - a_{-top}||^2, <v, v - a_{-top}>, ||v||^2
  float pad = 0;
};

// Bytes of the split-K partials for the forward (out may be skipped: with_out = false).
size_t window_forward_scratch_bytes(const WindowArgs& a, bool with_out, int sm_count);
// out [Hq, w, d] f32 (null: lse only), lse [Hq, w] f32, top [Hq, w] (null: not written; needs
// out).
cudaError_t launch_window_forward(const WindowArgs& a, float* out, float* lse, void* scratch,
                                  size_t scratch_bytes, int sm_count, cudaStream_t stream,
                                  TopRow* top = nullptr);

// The model's causal prefill attention: out_rows [w, Hq, d] in the input dtype (row t holds every
// query head of window query t: the layout the o projection reads), lse [Hq, w] f32 (null: not
// written). With one key split per block (a long prefill chunk on the wgmma kernels) the forward
// writes them itself, with no merge launch and no f32 copy; else the merge does. The values are
// launch_window_forward's out rounded to the input dtype, bit for bit. Scratch as
// window_forward_scratch_bytes(a, true, sm_count).
cudaError_t launch_window_attention_rows(const WindowArgs& a, void* out_rows, float* lse,
                                         void* scratch, size_t scratch_bytes, int sm_count,
                                         cudaStream_t stream);

// Which per-(query, token) term the scoring pass sums (kvevict::Method subset).
enum class PairTerm : uint8_t { kDropKV, kObcacheV, kObcacheK, kObcacheVK, kProb };
// The terms whose pass reads the window's attention outputs a (and so the forward writes them).
constexpr bool pair_term_needs_out(PairTerm t) {
  return t == PairTerm::kDropKV || t == PairTerm::kObcacheK || t == PairTerm::kObcacheVK;
}

struct ScorePassArgs {
  WindowArgs win;
  PairTerm term = PairTerm::kDropKV;
  const float* out = nullptr;  // [Hq, w, d] window outputs a (null unless the term needs them)
  const float* lse = nullptr;  // [Hq, w]
  // [Hq, w] the rows' top keys (launch_window_forward): dropkv, obcache_k and obcache_vk give a
  // flagged top key the leave-one-out term (null: the first form for every key)
  const TopRow* top = nullptr;
  float one_minus_p_floor = 1e-12f;
  float row_weight = 1.0f;     // multiplies every row's term (1 / G: the group average)
  bool h2o_normalize = false;  // divide key j's sum by the number of window queries that see it
  float* v_l1 = nullptr;       // [Hkv, n] ||v_j||_1 written when non-null (vatp's
                               // multiplier; term kProb only)
};
// scores [Hkv, n] f32 (row stride n). Overwrites scores (it zeroes them first when several row
// blocks accumulate into them).
cudaError_t launch_score_pass(const ScorePassArgs& a, float* scores, int sm_count,
                              cudaStream_t stream);

// h2o's all-queries column sums (h2o_colsum.cu): a.w = n, lse [Hq, n] of every query (the
// window forward with w = n, no V). scores [Hkv, n] = (1/G) sum_{h in group, t >= j} p_htj,
// divided by n - j when normalize. Deterministic (no atomics). Needs no scratch.
cudaError_t launch_h2o_colsum(const WindowArgs& a, const float* lse, bool normalize, float* scores,
                              cudaStream_t stream);

// 1-D pooling along tokens, "same" padding, stride 1 (max pads -inf, avg counts the padding);
// kernel 1 copies. With `mul` (same shape) the pooled value is multiplied by mul[i] (vatp).
cudaError_t launch_pool(const float* in, float* out, int rows, int64_t n, int kernel, bool is_max,
                        const float* mul, cudaStream_t stream);
// tova: every head's row becomes the mean over heads of the rows, times `scale`.
cudaError_t launch_head_mean(const float* in, float* out, int rows, int64_t n, float scale,
                             cudaStream_t stream);

// knorm: scores[h, j] = -||k_j||. keydiff: -cos(k_j, mean_i k_i / ||k_i||); scratch holds
// [Hkv, d] f32 sums (keydiff_scratch_bytes).
cudaError_t launch_knorm(Elem elem, const void* k, int64_t head_stride, int64_t row_stride,
                         int num_kv_heads, int64_t n, int d, float* scores, cudaStream_t stream);
size_t keydiff_scratch_bytes(int num_kv_heads, int d);
cudaError_t launch_keydiff(Elem elem, const void* k, int64_t head_stride, int64_t row_stride,
                           int num_kv_heads, int64_t n, int d, float* scores, void* scratch,
                           cudaStream_t stream);

}  // namespace kvevict::cuda::detail

namespace kvevict::cuda::detail {

// Per-head threshold select: kept [Hkv, n_keep] i32 sorted ascending (see cuda/select.h).
size_t select_uniform_scratch_bytes(int num_heads, int64_t n);
cudaError_t launch_select_uniform(const float* scores, int num_heads, int64_t n, int64_t n_keep,
                                  int sink, int window, int32_t* kept, void* scratch,
                                  size_t scratch_bytes, cudaStream_t stream);

// false: always the multi-launch radix select (A/B timing; cuda::set_select_single_launch).
void set_select_single_launch(bool enabled);

// General selection (cuda/select.h select()): uniform or adakv budgets, criticalkv's two stages
// when aux is non-null. kept [Hkv * n_keep] i32 (the layer total is Hkv * n_keep for both
// policies), offsets [Hkv + 1] i64 written on the device. Hkv <= 256.
size_t select_scratch_bytes(int num_heads, int64_t n, int64_t n_keep, bool two_stage);
cudaError_t launch_select(const float* scores, const float* aux, int num_heads, int64_t n,
                          int64_t n_keep, int sink, int window, bool adakv, double alpha,
                          int32_t* kept, int64_t* offsets, void* scratch, size_t scratch_bytes,
                          cudaStream_t stream);

// The one compaction kernel (SPEC section 4): every layout the library, the model runtime and the
// paged cache use is a row gather with a source and a destination map. Kept row r of head h
// (slot s = r - kept_offsets[h]; kept_offsets null: uniform, r = h * uniform_keep + s) reads
// source row i = src_base[h] + kept[r] (src_base null: 0) of head h (k + h * head_stride_b + i *
// row_stride_b; pos[h * pos_head_stride + i]) and writes destination row
//   page_table != null:  page_table[h * max_pages + s / page_size] * page_size + s % page_size
//   dst_base != null:    dst_base[h] + s
//   else (packed):       kept_offsets[h] + h * dst_slack + s   (the layout plan_segments writes)
// Rows are row_bytes long (a multiple of 16); pos / score_acc travel when both sides are given
// (pos null: the kept index itself).
struct GatherArgs {
  const char* k = nullptr;  // source rows, row_stride_b apart
  const char* v = nullptr;
  int64_t head_stride_b = 0, row_stride_b = 0;
  int row_bytes = 0;
  const int32_t* pos = nullptr;  // source positions or null: the kept index itself
  int64_t pos_head_stride = 0;
  const float* acc = nullptr;             // source score_acc (indexed like pos) or null
  const int64_t* src_base = nullptr;      // [H] first source row of head h, or null
  const int32_t* kept = nullptr;          // [rows] kept row index within the head's source rows
  int64_t src_limit = 0;                  // > 0: a kept index outside [0, src_limit) reads row 0 (a
                                          // caller bug must not fault)
  const int64_t* kept_offsets = nullptr;  // [H + 1], or null with uniform_keep
  int64_t uniform_keep = 0;               // rows per head when kept_offsets is null
  const int64_t* dst_base = nullptr;      // [H] destination segment starts, or null
  int64_t dst_slack = 0;                  // packed destination: spare rows after each head
  const int32_t* page_table = nullptr;    // [H, max_pages]
  int max_pages = 0, page_size = 0;
  int64_t dst_rows = 0;   // destination rows; a mapped row outside is skipped
  char* out_k = nullptr;  // destination rows, row_bytes apart
  char* out_v = nullptr;
  int32_t* out_pos = nullptr;
  float* out_acc = nullptr;
  int num_heads = 0;
  int64_t rows = 0;  // >= kept rows of all heads (sizes the grid; the rest idle)
};
cudaError_t launch_gather_rows(const GatherArgs& a, cudaStream_t stream);

// The packed segment table of a selection (Backend::plan_segments on the device): out_off[h] =
// kept_offsets[h] + h * slack (h <= H), out_len[h] = kept_offsets[h + 1] - kept_offsets[h].
cudaError_t launch_packed_segments(const int64_t* kept_offsets, int num_heads, int64_t slack,
                                   int64_t* out_off, int32_t* out_len, cudaStream_t stream);

// Decode-time cut (Backend::cut_segments, SPEC section 5), in place, one block per cut segment:
// segment s = heads[i] of the cache (rows off[s] .. off[s] + len[s]) keeps `keep` rows: its
// `sink` lowest and `recent` highest positions and the highest acc of the rest, ties toward the
// lower position (radix selects on the order keys of acc and on pos). Kept rows past the new
// end move into the slots of evicted rows before it (each row moves at most once; order is not
// kept); len[s] = keep. row_bytes: K and V row length, a multiple of 16.
struct SegmentCutArgs {
  char* k = nullptr;  // [rows, row_bytes]
  char* v = nullptr;
  int32_t* pos = nullptr;          // [rows]
  float* acc = nullptr;            // [rows]
  const int64_t* off = nullptr;    // [S + 1]
  int32_t* len = nullptr;          // [S]
  const int32_t* heads = nullptr;  // [m]
  int m = 0;
  int64_t keep = 0;
  int sink = 0, recent = 0;
  int row_bytes = 0;
  int64_t max_len = 0;  // longest cut segment (sizes shared memory)
};
size_t segment_cut_scratch_bytes(int m, int64_t max_len);
cudaError_t launch_segment_cut(const SegmentCutArgs& a, void* scratch, size_t scratch_bytes,
                               cudaStream_t stream);

// Attention over a compacted cache (cuda/attention.h). Rows of KV head g: slot s < lens[g] maps
// to row seg_start[g] + s, or through the page table when one is given.
struct AttentionArgs {
  Elem elem = Elem::kBF16;  // of k and v
  int q_elem_bytes = 4;     // 4: f32 queries, 2: same 16-bit type as k
  const void* q = nullptr;  // [Hq, m, d]
  int64_t q_head_stride = 0, q_row_stride = 0;
  const int32_t* q_pos = nullptr;  // [m]
  const void* k = nullptr;         // [rows, d] contiguous rows
  const void* v = nullptr;
  const int32_t* pos = nullptr;         // [rows]
  const int64_t* seg_start = nullptr;   // [Hkv]
  const int64_t* lens = nullptr;        // [Hkv]
  const int32_t* page_table = nullptr;  // [Hkv, max_pages] or null
  int max_pages = 0, page_size = 0;
  int num_q_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t m = 0;
  float scale = 1.f, softcap = 0.f;
  int sliding_window = 0;
  float* out = nullptr;  // [Hq, m, d]
  float* lse = nullptr;  // [Hq, m] or null
};
cudaError_t launch_attention(const AttentionArgs& a, cudaStream_t stream);

// first = min(first, i) over the NaN elements x[i] of x[0 .. count); the caller sets first to
// UINT64_MAX first. For the Backend's "score is NaN" check (kvevict::select rejects NaN scores).
cudaError_t launch_find_nan(const float* x, int64_t count, unsigned long long* first,
                            cudaStream_t stream);
// The same over the infinite elements: the cuda backend's check that no score computed from
// finite inputs overflowed float32 (kvevict::check_scores_finite on the host).
cudaError_t launch_find_inf(const float* x, int64_t count, unsigned long long* first,
                            cudaStream_t stream);
// status = min(status, x[0 .. count)) (nan_status.cu): the cuda backend's status words.
cudaError_t launch_min_u64(const unsigned long long* x, int count, unsigned long long* status,
                           cudaStream_t stream);

// Query-free scores: streamingllm (the position j) and random (terms::random_uniform).
cudaError_t launch_position_scores(float* scores, int num_kv_heads, int64_t n, cudaStream_t stream);
cudaError_t launch_random_scores(float* scores, int num_kv_heads, int64_t n, uint64_t seed,
                                 cudaStream_t stream);
// criticalkv stage 2: scores[g, j] = (aux[g, j] + eps) * mean_{h in group g} ||W_o^h v_j||_1
// with W_o^h the columns h*d .. h*d+d-1 of wo ([D, Hq*d], row stride wo_row_stride, elements of
// wo_elem_bytes: 4 = f32, 2 = same 16-bit type as v).
cudaError_t launch_criticalkv_scores(Elem elem, const void* v, int64_t head_stride,
                                     int64_t row_stride, int num_q_heads, int num_kv_heads,
                                     int64_t n, int d, const void* wo, int wo_elem_bytes,
                                     int64_t wo_row_stride, int64_t wo_rows, const float* aux,
                                     float eps, float* scores, cudaStream_t stream);

}  // namespace kvevict::cuda::detail
