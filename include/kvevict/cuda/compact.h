// CUDA backend: compaction of a layer's cache after selection (SPEC section 4), out of place.
// Real compaction: the kept rows are copied into a smaller buffer, positions travel with them.
#pragma once

#include <cstdint>
#include <vector>

#include "kvevict/cuda/score.h"
#include "kvevict/tensor.h"

namespace kvevict::cuda {

// Uniform layout. k, v: [Hkv, n, d] (bf16, f16 or f32, inner dim contiguous); pos: [Hkv, n] i32
// original positions, or empty for positions 0..n-1; kept: [Hkv, n_keep] i32 (sorted or not).
// out_k, out_v: [Hkv, n_keep, d] contiguous, same dtype; out_pos: [Hkv, n_keep] i32.
void compact_uniform(const TensorView& k, const TensorView& v, const TensorView& pos,
                     const TensorView& kept, const TensorView& out_k, const TensorView& out_v,
                     const TensorView& out_pos, Stream stream = nullptr);

// Flattened varlen layout (AdaKV style): head h's kept indices are kept[offsets[h] ..
// offsets[h+1]) and land in rows offsets[h] .. offsets[h+1] of out_k / out_v ([rows, d]) and
// out_pos ([rows]). offsets: device i64 [Hkv + 1], offsets[0] = 0, non-decreasing, offsets[Hkv] =
// rows = kept.numel(). The caller knows rows (it sized the outputs).
void compact_varlen(const TensorView& k, const TensorView& v, const TensorView& pos,
                    const TensorView& kept, const TensorView& offsets, const TensorView& out_k,
                    const TensorView& out_v, const TensorView& out_pos, Stream stream = nullptr);

// Paged layout (SPEC section 4, "per-head page tables"): a pool of pages of `page_size` rows,
// k_pages / v_pages [num_pages, page_size, d], pos_pages [num_pages, page_size] i32. Head h's
// kept rows fill its pages in order, page_table[h, i] naming the i-th page; only the last page of
// a head is partly filled, so an engine frees whole pages (every page not in a table) and
// appends decode tokens into the tail of the last one. Slot s of head h is row
// page_table[h, s / page_size] * page_size + s % page_size of the pool; lens[h] = kept count.
struct PagedPlan {
  int page_size = 0;
  int max_pages = 0;                // columns of the page table
  int64_t num_pages = 0;            // pages the tables use
  std::vector<int64_t> lens;        // [Hkv] kept rows per head
  std::vector<int32_t> page_table;  // [Hkv, max_pages] row-major; unused entries -1
};
// Tables for `counts[h]` kept rows per head: ceil(count / page_size) pages each, numbered
// consecutively from first_page (an engine with a free list fills the table itself).
PagedPlan paged_plan(const std::vector<int64_t>& counts, int page_size, int64_t first_page = 0);

// Out-of-place compaction into pages. k, v: [Hkv, n, d] 16-bit; pos: [Hkv, n] i32 or empty
// (positions 0..n-1); kept: i32 device, head h's indices at kept[kept_offsets[h] ..
// kept_offsets[h+1]) (what select() writes); kept_offsets: [Hkv + 1] i64 device; page_table:
// [Hkv, max_pages] i32 device (every page index < num_pages of the outputs); out_k, out_v:
// [num_pages, page_size, d]; out_pos: [num_pages, page_size] i32. Slots past a head's count are
// not written. The caller guarantees ceil(count_h / page_size) <= max_pages (paged_plan does).
void compact_paged(const TensorView& k, const TensorView& v, const TensorView& pos,
                   const TensorView& kept, const TensorView& kept_offsets,
                   const TensorView& page_table, const TensorView& out_k, const TensorView& out_v,
                   const TensorView& out_pos, Stream stream = nullptr);

}  // namespace kvevict::cuda
