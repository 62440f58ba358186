// KVLayerView helpers and the owning HostKVCache.
#include <cstring>

#include "kvevict/cache.h"
#include "kvevict/error.h"

namespace kvevict {
namespace {

bool is_kv_dtype(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

// Writes x into element i of a f32 / f16 / bf16 buffer.
void store_as(void* dst, DType t, int64_t i, double x) {
  switch (t) {
    case DType::kF32: static_cast<float*>(dst)[i] = static_cast<float>(x); break;
    case DType::kF16: static_cast<uint16_t*>(dst)[i] = float_to_half(static_cast<float>(x)); break;
    case DType::kBF16: static_cast<uint16_t*>(dst)[i] = float_to_bf16(static_cast<float>(x)); break;
    default:
      KVEVICT_FAIL("cache dtype ", dtype_name(t), " is not supported; expected f32, f16 or bf16");
  }
}

}  // namespace

int64_t KVLayerView::total_len() const {
  int64_t t = 0;
  for (int h = 0; h < num_kv_heads; ++h) t += lens[h];
  return t;
}

int64_t KVLayerView::kv_bytes() const {
  return 2 * capacity_rows() * head_dim * static_cast<int64_t>(dtype_size(dtype));
}

TensorView KVLayerView::head_k(int h) const {
  KVEVICT_CHECK(h >= 0 && h < num_kv_heads, "KV head ", h, " out of range; expected 0..",
                num_kv_heads - 1);
  char* base =
      static_cast<char*>(k) + offsets[h] * head_dim * static_cast<int64_t>(dtype_size(dtype));
  return TensorView(base, dtype, {lens[h], head_dim}, device);
}

TensorView KVLayerView::head_v(int h) const {
  KVEVICT_CHECK(h >= 0 && h < num_kv_heads, "KV head ", h, " out of range; expected 0..",
                num_kv_heads - 1);
  char* base =
      static_cast<char*>(v) + offsets[h] * head_dim * static_cast<int64_t>(dtype_size(dtype));
  return TensorView(base, dtype, {lens[h], head_dim}, device);
}

bool KVLayerView::is_uniform() const {
  if (num_kv_heads <= 0 || !offsets || !lens) return false;
  const int64_t n = lens[0];
  const int64_t step = offsets[1] - offsets[0];
  for (int h = 0; h < num_kv_heads; ++h)
    if (lens[h] != n || offsets[h + 1] - offsets[h] != step) return false;
  return true;
}

TensorView KVLayerView::uniform_k() const {
  KVEVICT_CHECK(is_uniform(),
                "cache is not uniform (per-head lengths or spacing differ); "
                "expected equal lengths for a [Hkv, n, d] view");
  TensorView t(k, dtype, {num_kv_heads, lens[0], head_dim}, device);
  t.stride[0] = (offsets[1] - offsets[0]) * head_dim;
  return t;
}

TensorView KVLayerView::uniform_v() const {
  KVEVICT_CHECK(is_uniform(),
                "cache is not uniform (per-head lengths or spacing differ); "
                "expected equal lengths for a [Hkv, n, d] view");
  TensorView t(v, dtype, {num_kv_heads, lens[0], head_dim}, device);
  t.stride[0] = (offsets[1] - offsets[0]) * head_dim;
  return t;
}

void KVLayerView::validate(const char* what) const {
  KVEVICT_CHECK(num_kv_heads > 0, what, ": num_kv_heads ", num_kv_heads,
                " is invalid; expected > 0");
  KVEVICT_CHECK(head_dim > 0, what, ": head_dim ", head_dim, " is invalid; expected > 0");
  KVEVICT_CHECK(is_kv_dtype(dtype), what, ": dtype ", dtype_name(dtype),
                " is not supported; expected f32, f16 or bf16");
  if (!has_host_table()) {
    // A device cache whose segment table lives only on the device (see device_offsets).
    KVEVICT_CHECK(device == Device::kCuda && has_device_table() && rows >= 0, what,
                  ": offsets or lens is null; expected a host table, or a device cache with a "
                  "device table and its row count");
    if (rows > 0)
      KVEVICT_CHECK(k != nullptr && v != nullptr && pos != nullptr, what,
                    ": k, v or pos is null for a cache of ", rows, " rows");
    return;
  }
  KVEVICT_CHECK(offsets[0] == 0, what, ": offsets[0] is ", offsets[0], "; expected 0");
  for (int h = 0; h < num_kv_heads; ++h) {
    const int64_t cap = offsets[h + 1] - offsets[h];
    KVEVICT_CHECK(cap >= 0, what, ": offsets decrease at head ", h, " (", offsets[h], " -> ",
                  offsets[h + 1], "); expected non-decreasing");
    KVEVICT_CHECK(lens[h] >= 0 && lens[h] <= cap, what, ": head ", h, " length ", lens[h],
                  " exceeds its capacity ", cap, "; expected 0 <= len <= capacity");
  }
  if (capacity_rows() > 0)
    KVEVICT_CHECK(k != nullptr && v != nullptr && pos != nullptr, what,
                  ": k, v or pos is null for a cache of ", capacity_rows(), " rows");
}

HostKVCache::HostKVCache(DType dtype, int num_kv_heads, int head_dim,
                         const std::vector<int64_t>& capacity, bool with_score_acc)
    : dtype_(dtype), num_kv_heads_(num_kv_heads), head_dim_(head_dim) {
  KVEVICT_CHECK(is_kv_dtype(dtype), "cache dtype ", dtype_name(dtype),
                " is not supported; expected f32, f16 or bf16");
  KVEVICT_CHECK(num_kv_heads > 0 && head_dim > 0, "cache of ", num_kv_heads, " heads of dim ",
                head_dim, " is invalid; expected both > 0");
  KVEVICT_CHECK(static_cast<int64_t>(capacity.size()) == num_kv_heads, "got ", capacity.size(),
                " per-head capacities; expected ", num_kv_heads);
  offsets_.assign(num_kv_heads + 1, 0);
  for (int h = 0; h < num_kv_heads; ++h) {
    KVEVICT_CHECK(capacity[h] >= 0, "capacity ", capacity[h], " of head ", h,
                  " is negative; expected >= 0");
    offsets_[h + 1] = offsets_[h] + capacity[h];
  }
  lens_.assign(num_kv_heads, 0);
  const int64_t rows = offsets_.back();
  const size_t row_bytes = static_cast<size_t>(head_dim) * dtype_size(dtype);
  k_.assign(static_cast<size_t>(rows) * row_bytes, 0);
  v_.assign(static_cast<size_t>(rows) * row_bytes, 0);
  pos_.assign(rows, 0);
  if (with_score_acc) score_acc_.assign(rows, 0.0f);
}

HostKVCache HostKVCache::from_dense(const TensorView& k, const TensorView& v, DType dtype,
                                    int64_t slack, bool with_score_acc) {
  KVEVICT_CHECK(k.device == Device::kCpu && v.device == Device::kCpu,
                "from_dense needs host tensors");
  check_shape(k, "k", {-1, -1, -1});
  check_shape(v, "v", {k.shape[0], k.shape[1], k.shape[2]});
  check_indexable(k, "k");
  KVEVICT_CHECK(slack >= 0, "slack ", slack, " is negative; expected >= 0");
  const int hkv = static_cast<int>(k.shape[0]);
  const int64_t n = k.shape[1];
  const int d = static_cast<int>(k.shape[2]);
  HostKVCache c(dtype, hkv, d, std::vector<int64_t>(hkv, n + slack), with_score_acc);
  for (int h = 0; h < hkv; ++h) {
    const int64_t base = c.offsets_[h];
    for (int64_t i = 0; i < n; ++i) {
      for (int j = 0; j < d; ++j) {
        store_as(c.k_.data(), dtype, (base + i) * d + j, k.load(h, i, j));
        store_as(c.v_.data(), dtype, (base + i) * d + j, v.load(h, i, j));
      }
      c.pos_[base + i] = static_cast<int32_t>(i);
    }
    c.lens_[h] = n;
  }
  return c;
}

KVLayerView HostKVCache::view() {
  KVLayerView w;
  w.dtype = dtype_;
  w.device = Device::kCpu;
  w.num_kv_heads = num_kv_heads_;
  w.head_dim = head_dim_;
  w.k = k_.data();
  w.v = v_.data();
  w.pos = pos_.data();
  w.score_acc = score_acc_.empty() ? nullptr : score_acc_.data();
  w.offsets = offsets_.data();
  w.lens = lens_.data();
  return w;
}

const KVLayerView HostKVCache::view() const {
  return const_cast<HostKVCache*>(this)->view();
}

}  // namespace kvevict
