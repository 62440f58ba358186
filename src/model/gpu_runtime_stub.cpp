// The GPU model runtime's entry points in a build without CUDA: each says so (src/model_cuda/ holds
// the real ones and is compiled only when KVEVICT_WITH_CUDA is set).
#ifndef KVEVICT_WITH_CUDA

#include "kvevict/error.h"
#include "kvevict/model/gpu_runtime.h"

namespace kvevict::gpu {

namespace {
[[noreturn]] void no_cuda() {
  KVEVICT_FAIL(
      "--device cuda: this build has no CUDA runtime (configure with KVEVICT_CUDA=ON and "
      "a CUDA toolkit); expected --device cpu");
}
}  // namespace

bool gpu_available() {
  return false;
}
void check_supported(const ModelConfig&) {
  no_cuda();
}
void device_memory(int64_t*, int64_t*) {
  no_cuda();
}

struct GpuModel::Impl {};
GpuModel::GpuModel() = default;
GpuModel::~GpuModel() = default;
const ModelConfig& GpuModel::config() const {
  no_cuda();
}
int64_t GpuModel::weight_bytes() const {
  no_cuda();
}
std::shared_ptr<const GpuModel> GpuModel::upload(const Model&) {
  no_cuda();
}
std::shared_ptr<const GpuModel> GpuModel::random(const ModelConfig&, uint64_t) {
  no_cuda();
}

void GpuSessionOptions::validate() const {}
struct GpuSession::Impl {};
GpuSession::GpuSession(std::shared_ptr<const GpuModel>, GpuSessionOptions) {
  no_cuda();
}
GpuSession::~GpuSession() = default;
GpuSession::GpuSession(GpuSession&&) noexcept = default;
GpuSession& GpuSession::operator=(GpuSession&&) noexcept = default;
void GpuSession::prefill(const std::vector<int32_t>&, const EvictConfig&) {
  no_cuda();
}
void GpuSession::append(const std::vector<int32_t>&) {
  no_cuda();
}
void GpuSession::replicate_sequence() {
  no_cuda();
}
void GpuSession::decode(const std::vector<int32_t>&) {
  no_cuda();
}
std::vector<int32_t> GpuSession::argmax() {
  no_cuda();
}
std::vector<int32_t> GpuSession::sample(const SamplerOptions&, const std::vector<double>&) {
  no_cuda();
}
std::vector<int32_t> GpuSession::decode_greedy(int) {
  no_cuda();
}
std::vector<float> GpuSession::logits(int) const {
  no_cuda();
}
GenerateResult GpuSession::generate(int, Sampler&, const std::function<bool(int32_t)>&,
                                    const std::function<void(int32_t)>&) {
  no_cuda();
}
int64_t GpuSession::position() const {
  no_cuda();
}
int64_t GpuSession::kv_rows(int) const {
  no_cuda();
}
int64_t GpuSession::kv_bytes_total() const {
  no_cuda();
}
int64_t GpuSession::kv_bytes_per_sequence() const {
  no_cuda();
}
const GpuStats& GpuSession::stats() const {
  no_cuda();
}
const GpuModel& GpuSession::model() const {
  no_cuda();
}
void GpuSession::synchronize() const {
  no_cuda();
}
std::vector<int32_t> sample_logits(const std::vector<float>&, int, const SamplerOptions&,
                                   const std::vector<double>&) {
  no_cuda();
}

}  // namespace kvevict::gpu

#endif  // KVEVICT_WITH_CUDA
