// Sampling on the GPU (gpu_sampling.h) and sample_logits (gpu_runtime.h).
#include "model_cuda/gpu_sampling.h"

#include "cuda/check.h"
#include "cuda/model_launchers.h"
#include "model_cuda/gpu_runtime.h"

namespace kvevict::gpu {

void sample_on_device(const float* logits, int R, int64_t V, const SamplerOptions& opt,
                      const std::vector<double>& uniforms, int32_t* ids_dev,
                      cuda::DeviceBuffer& scratch, cuda::DeviceBuffer& u_dev, cudaStream_t stream) {
  opt.validate();
  if (opt.temperature == 0.0f) {
    KVEVICT_CUDA_CHECK(detail::launch_argmax(logits, R, V, ids_dev, stream));
    return;
  }
  KVEVICT_CHECK(static_cast<int>(uniforms.size()) == R, "sampling ", R, " rows needs ", R,
                " uniform draws; got ", uniforms.size());
  for (double u : uniforms)
    KVEVICT_CHECK(u >= 0.0 && u < 1.0, "uniform draw ", u, " is out of range; expected [0, 1)");
  const size_t need = detail::sample_scratch_bytes(R, V);
  if (scratch.bytes() < need || u_dev.bytes() < R * sizeof(double)) {
    KVEVICT_CUDA_CHECK(cudaStreamSynchronize(stream));
    scratch.ensure(need, "sampling scratch");
    u_dev.ensure(R * sizeof(double), "sampling draws");
  }
  // Pageable source: the copy is staged before the call returns, so `uniforms` may go away.
  KVEVICT_CUDA_CHECK(cudaMemcpyAsync(u_dev.get(), uniforms.data(), R * sizeof(double),
                                     cudaMemcpyHostToDevice, stream));
  detail::SampleArgs sa;
  sa.logits = logits;
  sa.uniforms = u_dev.as<double>();
  sa.R = R;
  sa.V = V;
  sa.temperature = opt.temperature;
  sa.top_k = opt.top_k;
  sa.top_p = opt.top_p;
  KVEVICT_CUDA_CHECK(detail::launch_sample(sa, ids_dev, scratch.get(), scratch.bytes(), stream));
}

std::vector<int32_t> sample_logits(const std::vector<float>& logits, int rows,
                                   const SamplerOptions& opt, const std::vector<double>& uniforms) {
  KVEVICT_CHECK(rows >= 1 && !logits.empty() && logits.size() % rows == 0,
                "sample_logits: ", logits.size(), " logits do not split into ", rows, " rows");
  const int64_t V = static_cast<int64_t>(logits.size()) / rows;
  cuda::DeviceBuffer d_logits(logits.size() * 4, "logits"), ids(rows * 4, "sampled ids"), scratch,
      u;
  KVEVICT_CUDA_CHECK(
      cudaMemcpy(d_logits.get(), logits.data(), logits.size() * 4, cudaMemcpyHostToDevice));
  sample_on_device(d_logits.as<float>(), rows, V, opt, uniforms, ids.as<int32_t>(), scratch, u,
                   nullptr);
  std::vector<int32_t> out(rows);
  KVEVICT_CUDA_CHECK(cudaMemcpy(out.data(), ids.get(), rows * 4, cudaMemcpyDeviceToHost));
  return out;
}

}  // namespace kvevict::gpu
