// A CUDA graph of one decode step (internal to the GPU runtime): GpuForward records the step's
// launches once and replays them while every value the launches bake in is unchanged.
//
// The caller describes those values as a key (batch, buffer and cache pointers, the split plan's
// length bound, the scoring config: everything a launch argument depends on besides what the
// kernels read from device memory). A step whose key equals the held one replays the graph (one
// launch); any other key records the step again and updates the executable graph in place when
// the recording has the held one's topology (node count and node types), else instantiates a new
// one.
// The graph is exactly the launches the eager path makes, so replays give the eager step's results
// bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace kvevict::gpu {

struct DecodeGraphStats {
  int64_t captures = 0;  // steps recorded (a key not seen last)
  int64_t updates = 0;   // of those, executables updated in place
  int64_t replays = 0;   // graph launches (every graph step, the recorded ones included)
  int64_t nodes = 0;     // nodes (launches) of the last recorded step, 0 when unknown
};

class DecodeGraph {
 public:
  DecodeGraph() = default;
  ~DecodeGraph();
  DecodeGraph(const DecodeGraph&) = delete;
  DecodeGraph& operator=(const DecodeGraph&) = delete;

  // Runs the step on `stream` as a graph: replays the held graph when `key` is its key, else
  // records enqueue() (which must only enqueue work on `stream`: no synchronization, no
  // allocation) into a new graph for `key` first. Throws naming the CUDA call that failed; the
  // stream is left out of capture mode and the held graph dropped.
  void run(const std::vector<int64_t>& key, cudaStream_t stream,
           const std::function<void()>& enqueue);
  // Drops the held graph (the next run records).
  void reset();
  const DecodeGraphStats& stats() const { return stats_; }

 private:
  std::vector<int64_t> key_;
  std::vector<int64_t> shape_;  // the held executable's node count and node types
  cudaGraphExec_t exec_ = nullptr;
  DecodeGraphStats stats_;
};

}  // namespace kvevict::gpu
