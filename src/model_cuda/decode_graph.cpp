// DecodeGraph (decode_graph.h): record, update or instantiate, replay.
#include "model_cuda/decode_graph.h"

#include <utility>

#include "cuda/check.h"

namespace kvevict::gpu {
namespace {

// The topology an in-place update needs unchanged: the node count and each node's type (one
// stream's capture is a chain, so equal counts are equal edges; kernels may change function and
// arguments). Comparing it first keeps cudaGraphExecUpdate from being called where it must fail
// (a batch of another size records more or fewer launches); an update refused for another
// reason still falls back to a new instantiation. Empty when a query fails (the error is
// cleared): then the step instantiates anew, which is always right.
std::vector<int64_t> graph_shape(cudaGraph_t graph) {
  auto failed = [](cudaError_t e) {
    if (e == cudaSuccess) return false;
    cudaGetLastError();
    return true;
  };
  size_t n = 0;
  if (failed(cudaGraphGetNodes(graph, nullptr, &n))) return {};
  std::vector<cudaGraphNode_t> nodes(n);
  if (n > 0 && failed(cudaGraphGetNodes(graph, nodes.data(), &n))) return {};
  std::vector<int64_t> shape{static_cast<int64_t>(n)};
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    if (failed(cudaGraphNodeGetType(node, &type))) return {};
    shape.push_back(static_cast<int64_t>(type));
  }
  return shape;
}

}  // namespace

DecodeGraph::~DecodeGraph() {
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
}

void DecodeGraph::reset() {
  if (exec_ != nullptr) KVEVICT_CUDA_CHECK(cudaGraphExecDestroy(exec_));
  exec_ = nullptr;
  key_.clear();
  shape_.clear();
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
    std::vector<int64_t> shape = graph_shape(graph);
    bool updated = false;
    if (exec_ != nullptr && (shape.empty() || shape != shape_)) {  // another topology: instantiate
      cudaGraphExecDestroy(exec_);
      exec_ = nullptr;
    }
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
    shape_ = std::move(shape);
    stats_.nodes = shape_.empty() ? 0 : shape_[0];
    ++stats_.captures;
    if (updated) ++stats_.updates;
  }
  KVEVICT_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
  ++stats_.replays;
}

}  // namespace kvevict::gpu
