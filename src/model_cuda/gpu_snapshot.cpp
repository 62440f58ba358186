// GpuContext (a model, its stream, backend and forward) and GpuSnapshot (a prefilled full cache
// shared by many evictions; to_host for the CPU runtime) of gpu_runtime.h.
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

}  // namespace kvevict::gpu
