// Compaction (SPEC section 4): copy the kept rows into a smaller cache, and decode appends.
#include <cstring>

#include "core/parallel.h"
#include "core/parallel_if_large.h"
#include "kvevict/cache.h"
#include "kvevict/error.h"

namespace kvevict {
namespace {

void check_same_layout(const KVLayerView& in, const KVLayerView& out) {
  KVEVICT_CHECK(in.device == Device::kCpu && out.device == Device::kCpu,
                "host compaction got a device cache; expected host memory (use the CUDA backend)");
  KVEVICT_CHECK(in.dtype == out.dtype, "compaction dtype mismatch: input ", dtype_name(in.dtype),
                ", output ", dtype_name(out.dtype), "; expected the same");
  KVEVICT_CHECK(in.num_kv_heads == out.num_kv_heads, "compaction head count mismatch: input ",
                in.num_kv_heads, ", output ", out.num_kv_heads, "; expected the same");
  KVEVICT_CHECK(in.head_dim == out.head_dim, "compaction head_dim mismatch: input ", in.head_dim,
                ", output ", out.head_dim, "; expected the same");
}

// Converts one row of d floats to the cache dtype.
void store_row(const TensorView& src, int h, void* dst, DType t, int d) {
  for (int j = 0; j < d; ++j) {
    const float x = static_cast<float>(src.load(h, j));
    switch (t) {
      case DType::kF32: static_cast<float*>(dst)[j] = x; break;
      case DType::kF16: static_cast<uint16_t*>(dst)[j] = float_to_half(x); break;
      case DType::kBF16: static_cast<uint16_t*>(dst)[j] = float_to_bf16(x); break;
      default: KVEVICT_FAIL("cache dtype ", dtype_name(t), " is not supported");
    }
  }
}

}  // namespace

std::vector<int64_t> cache_plan_offsets(const Selection& selection, int64_t slack) {
  KVEVICT_CHECK(slack >= 0, "slack ", slack, " is negative; expected >= 0");
  KVEVICT_CHECK(static_cast<int>(selection.offsets.size()) == selection.num_kv_heads + 1,
                "selection has ", selection.offsets.size(), " offsets; expected ",
                selection.num_kv_heads + 1);
  std::vector<int64_t> off(selection.num_kv_heads + 1, 0);
  for (int h = 0; h < selection.num_kv_heads; ++h) off[h + 1] = off[h] + selection.count(h) + slack;
  return off;
}

HostKVCache cache_allocate_for(const KVLayerView& like, const Selection& selection, int64_t slack) {
  const std::vector<int64_t> off = cache_plan_offsets(selection, slack);
  std::vector<int64_t> cap(selection.num_kv_heads);
  for (int h = 0; h < selection.num_kv_heads; ++h) cap[h] = off[h + 1] - off[h];
  return HostKVCache(like.dtype, like.num_kv_heads, like.head_dim, cap, like.score_acc != nullptr);
}

void cache_compact(const KVLayerView& in, const Selection& selection, const KVLayerView& out) {
  in.validate("compaction input");
  out.validate("compaction output");
  check_same_layout(in, out);
  KVEVICT_CHECK(selection.num_kv_heads == in.num_kv_heads, "selection covers ",
                selection.num_kv_heads, " KV heads; expected ", in.num_kv_heads);
  selection.validate(in.lens);
  for (int h = 0; h < in.num_kv_heads; ++h) {
    const int64_t cap = out.offsets[h + 1] - out.offsets[h];
    KVEVICT_CHECK(selection.count(h) <= cap, "compaction output head ", h, " holds ", cap,
                  " rows; the selection keeps ", selection.count(h), "; expected capacity >= kept");
  }
  KVEVICT_CHECK(in.k == nullptr || in.k != out.k,
                "compaction is out of place; input and output share memory");
  const size_t row_bytes = static_cast<size_t>(in.head_dim) * dtype_size(in.dtype);
  const bool copy_acc = in.score_acc != nullptr && out.score_acc != nullptr;
  detail::parallel_for_if_large(in.num_kv_heads, selection.total() * in.head_dim, [&](int64_t h) {
    const int32_t* keep = selection.head(static_cast<int>(h));
    const int64_t count = selection.count(static_cast<int>(h));
    const int64_t src0 = in.offsets[h], dst0 = out.offsets[h];
    const auto* ks = static_cast<const char*>(in.k);
    const auto* vs = static_cast<const char*>(in.v);
    auto* kd = static_cast<char*>(out.k);
    auto* vd = static_cast<char*>(out.v);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t s = src0 + keep[i], t = dst0 + i;
      std::memcpy(kd + t * row_bytes, ks + s * row_bytes, row_bytes);
      std::memcpy(vd + t * row_bytes, vs + s * row_bytes, row_bytes);
      out.pos[t] = in.pos[s];
      if (copy_acc) out.score_acc[t] = in.score_acc[s];
    }
    // Spare rows of a fresh segment hold no stale accumulator.
    if (out.score_acc)
      for (int64_t t = dst0 + count; t < out.offsets[h + 1]; ++t) out.score_acc[t] = 0.0f;
    out.lens[h] = count;
  });
}

void cache_compact_head_inplace(const KVLayerView& cache, int h, const int32_t* keep,
                                int64_t count) {
  KVEVICT_CHECK(h >= 0 && h < cache.num_kv_heads, "KV head ", h, " out of range; expected 0..",
                cache.num_kv_heads - 1);
  KVEVICT_CHECK(cache.device == Device::kCpu, "in-place compaction needs a host cache");
  const int64_t len = cache.lens[h];
  KVEVICT_CHECK(count >= 0 && count <= len, "keeping ", count, " rows of head ", h, " with ", len,
                " rows; expected 0 <= kept <= length");
  const size_t row_bytes = static_cast<size_t>(cache.head_dim) * dtype_size(cache.dtype);
  auto* k = static_cast<char*>(cache.k);
  auto* v = static_cast<char*>(cache.v);
  const int64_t base = cache.offsets[h];
  int64_t prev = -1;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t s = keep[i];
    KVEVICT_CHECK(s > prev && s < len, "kept row ", s, " of head ", h,
                  " is out of order or range; expected ascending rows in [0, ", len, ")");
    prev = s;
    if (s == i) continue;  // keep[i] >= i, so moving forward never overwrites a kept row
    std::memmove(k + (base + i) * row_bytes, k + (base + s) * row_bytes, row_bytes);
    std::memmove(v + (base + i) * row_bytes, v + (base + s) * row_bytes, row_bytes);
    cache.pos[base + i] = cache.pos[base + s];
    if (cache.score_acc) cache.score_acc[base + i] = cache.score_acc[base + s];
  }
  cache.lens[h] = count;
}

void cache_append(const KVLayerView& cache, const TensorView& k_row, const TensorView& v_row,
                  int32_t pos) {
  cache.validate("append target");
  KVEVICT_CHECK(cache.device == Device::kCpu, "host append got a device cache");
  check_shape(k_row, "k_row", {cache.num_kv_heads, cache.head_dim});
  check_shape(v_row, "v_row", {cache.num_kv_heads, cache.head_dim});
  for (int h = 0; h < cache.num_kv_heads; ++h) {
    const int64_t cap = cache.offsets[h + 1] - cache.offsets[h];
    KVEVICT_CHECK(cache.lens[h] < cap, "cannot append to KV head ", h, ": its segment is full (",
                  cap, " rows); expected a free row (evict first or allocate slack)");
  }
  const size_t row_bytes = static_cast<size_t>(cache.head_dim) * dtype_size(cache.dtype);
  for (int h = 0; h < cache.num_kv_heads; ++h) {
    const int64_t t = cache.offsets[h] + cache.lens[h];
    store_row(k_row, h, static_cast<char*>(cache.k) + t * row_bytes, cache.dtype, cache.head_dim);
    store_row(v_row, h, static_cast<char*>(cache.v) + t * row_bytes, cache.dtype, cache.head_dim);
    cache.pos[t] = pos;
    if (cache.score_acc) cache.score_acc[t] = 0.0f;
    ++cache.lens[h];
  }
}

}  // namespace kvevict
