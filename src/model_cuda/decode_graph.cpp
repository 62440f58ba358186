// DecodeGraph (decode_graph.h): record, update or instantiate, replay.
#include "model_cuda/decode_graph.h"

#include "cuda/check.h"

namespace kvevict::gpu {

DecodeGraph::~DecodeGraph() {
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
}

void DecodeGraph::reset() {
  if (exec_ != nullptr) KVEVICT_CUDA_CHECK(cudaGraphExecDestroy(exec_));
  exec_ = nullptr;
  key_.clear();
}

void DecodeGraph::run(const std::vector<int64_t>& key, cudaStream_t stream,
                      const std::function<void()>& enqueue) {
  if (exec_ == nullptr || key != key_) {
    key_.clear();  // no key until the new graph is in place
    cudaGraph_t graph = nullptr;
    // Relaxed: cuBLAS and the launchers may make calls that are not stream work (attribute
    // setting, heuristics queries) while the step is recorded.
    KVEVICT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
    try {
      enqueue();
    } catch (...) {
      cudaStreamEndCapture(stream, &graph);  // leave capture mode; the partial graph is dropped
      if (graph != nullptr) cudaGraphDestroy(graph);
      cudaGetLastError();
      reset();
      throw;
    }
    KVEVICT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    bool updated = false;
    if (exec_ != nullptr) {
      cudaGraphExecUpdateResultInfo info;
      if (cudaGraphExecUpdate(exec_, graph, &info) == cudaSuccess) {
        updated = true;
      } else {
        cudaGetLastError();  // the failed update is not sticky; instantiate instead
        cudaGraphExecDestroy(exec_);
        exec_ = nullptr;
      }
    }
    cudaError_t err = cudaSuccess;
    if (!updated) err = cudaGraphInstantiate(&exec_, graph, 0);
    cudaGraphDestroy(graph);
    if (err != cudaSuccess) exec_ = nullptr;
    KVEVICT_CUDA_CHECK(err);
    key_ = key;
    ++stats_.captures;
    if (updated) ++stats_.updates;
  }
  KVEVICT_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
  ++stats_.replays;
}

}  // namespace kvevict::gpu
