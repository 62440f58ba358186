// LayerCache (layer_cache.h): allocation, views, table mirrors and batch assembly.
#include "model_cuda/layer_cache.h"

#include <algorithm>

#include "cuda/check.h"
#include "kvevict/error.h"

namespace kvevict::gpu {
namespace {

void allocate_rows(LayerCache& L, int64_t rows, int S, int d, cudaStream_t stream) {
  L.rows = rows;
  L.segments = S;
  L.head_dim = d;
  const size_t r = static_cast<size_t>(std::max<int64_t>(rows, 1));
  // Stream-ordered: an eviction allocates a layer and drops the old one without waiting.
  L.k = cuda::DeviceBuffer(r * d * 2, "KV cache keys", stream, true);
  L.v = cuda::DeviceBuffer(r * d * 2, "KV cache values", stream, true);
  L.pos = cuda::DeviceBuffer(r * 4, "KV cache positions", stream, true);
  L.acc = cuda::DeviceBuffer(r * 4, "KV score accumulators", stream, true);
  KVEVICT_CUDA_CHECK(cudaMemsetAsync(L.acc.get(), 0, r * 4, stream));
  L.off = cuda::DeviceBuffer((S + 1) * 8, "KV segment offsets", stream, true);
  L.len = cuda::DeviceBuffer(std::max(S, 1) * 4, "KV segment lengths", stream, true);
}

}  // namespace

LayerCache LayerCache::with_capacities(const std::vector<int64_t>& cap, int d,
                                       cudaStream_t stream) {
  LayerCache L;
  const int S = static_cast<int>(cap.size());
  L.off_h.assign(S + 1, 0);
  for (int s = 0; s < S; ++s) L.off_h[s + 1] = L.off_h[s] + cap[s];
  L.len_h.assign(S, 0);
  allocate_rows(L, L.off_h.back(), S, d, stream);
  L.upload_table(stream);
  return L;
}

LayerCache LayerCache::for_device_table(int64_t rows, int S, int d, cudaStream_t stream) {
  LayerCache L;
  allocate_rows(L, rows, S, d, stream);
  L.off_h.assign(S + 1, 0);
  L.len_h.assign(S, 0);
  L.host_valid = false;
  return L;
}

KVLayerView LayerCache::view(int first, int count) {
  KVEVICT_CHECK(first >= 0 && count >= 1 && first + count <= segments, "segments ", first, " .. ",
                first + count - 1, " are out of range; the layer has ", segments);
  KVLayerView w;
  w.dtype = DType::kBF16;
  w.device = Device::kCuda;
  w.num_kv_heads = count;
  w.head_dim = head_dim;
  w.k = k.get();
  w.v = v.get();
  w.pos = pos.as<int32_t>();
  w.score_acc = acc.as<float>();
  w.device_offsets = off.as<int64_t>() + first;
  w.device_lens = len.as<int32_t>() + first;
  w.rows = rows;
  if (host_valid) {
    w.offsets = off_h.data() + first;
    w.lens = len_h.data() + first;
  }
  return w;
}

void LayerCache::upload_table(cudaStream_t stream) {
  std::vector<int32_t> l(len_h.size());
  for (size_t s = 0; s < l.size(); ++s) l[s] = static_cast<int32_t>(len_h[s]);
  // Pageable sources: staged by the driver before the calls return.
  KVEVICT_CUDA_CHECK(
      cudaMemcpyAsync(off.get(), off_h.data(), off_h.size() * 8, cudaMemcpyHostToDevice, stream));
  if (!l.empty())
    KVEVICT_CUDA_CHECK(
        cudaMemcpyAsync(len.get(), l.data(), l.size() * 4, cudaMemcpyHostToDevice, stream));
  host_valid = true;
}

void LayerCache::sync_host() {
  std::vector<int32_t> l(segments);
  KVEVICT_CUDA_CHECK(
      cudaMemcpy(off_h.data(), off.get(), (segments + 1) * 8, cudaMemcpyDeviceToHost));
  KVEVICT_CUDA_CHECK(cudaMemcpy(l.data(), len.get(), segments * 4, cudaMemcpyDeviceToHost));
  for (int s = 0; s < segments; ++s) len_h[s] = l[s];
  KVEVICT_CHECK(off_h.back() <= rows, "device segment table spans ", off_h.back(),
                " rows; the layer holds ", rows);
  host_valid = true;
}

LayerCache assemble_rows(const std::vector<const LayerCache*>& rows, cudaStream_t stream) {
  KVEVICT_CHECK(!rows.empty(), "assembling a batch of no rows");
  const int hkv = rows[0]->segments, d = rows[0]->head_dim;
  std::vector<int64_t> cap;
  for (const LayerCache* r : rows) {
    KVEVICT_CHECK(r->host_valid && r->segments == hkv && r->head_dim == d,
                  "batch rows must have synchronized tables of ", hkv, " segments");
    for (int g = 0; g < hkv; ++g) cap.push_back(r->cap(g));
  }
  LayerCache out = LayerCache::with_capacities(cap, d, stream);
  out.ring = rows[0]->ring;
  for (size_t b = 0; b < rows.size(); ++b) {
    const LayerCache& r = *rows[b];
    const int64_t dst = out.off_h[b * hkv], n = r.off_h[hkv] - r.off_h[0], src = r.off_h[0];
    for (int g = 0; g < hkv; ++g) out.len_h[b * hkv + g] = r.len_h[g];
    if (n == 0) continue;
    KVEVICT_CUDA_CHECK(cudaMemcpyAsync(out.k.as<char>() + dst * d * 2, r.k.as<char>() + src * d * 2,
                                       n * d * 2, cudaMemcpyDeviceToDevice, stream));
    KVEVICT_CUDA_CHECK(cudaMemcpyAsync(out.v.as<char>() + dst * d * 2, r.v.as<char>() + src * d * 2,
                                       n * d * 2, cudaMemcpyDeviceToDevice, stream));
    KVEVICT_CUDA_CHECK(cudaMemcpyAsync(out.pos.as<int32_t>() + dst, r.pos.as<int32_t>() + src,
                                       n * 4, cudaMemcpyDeviceToDevice, stream));
    KVEVICT_CUDA_CHECK(cudaMemcpyAsync(out.acc.as<float>() + dst, r.acc.as<float>() + src, n * 4,
                                       cudaMemcpyDeviceToDevice, stream));
  }
  out.upload_table(stream);
  return out;
}

}  // namespace kvevict::gpu
