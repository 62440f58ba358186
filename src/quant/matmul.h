// Products of f32 activation rows with weight matrices in their GGUF types (internal to src/).
#pragma once

#include <cstdint>

#include "quant/quant.h"

namespace kvevict::quant {

// One matrix of a group that reads the same input rows (fused Q/K/V, fused gate/up).
struct MatmulTarget {
  MatrixView w;        // [rows, K]
  float* y = nullptr;  // [T, ldy]: y[t * ldy + r] = sum_k W[r, k] x[t, k]
  int64_t ldy = 0;
};

// Runs every target of the group over x [T, K] (rows contiguous): the activations are quantized
// once (to A8 when a target has a block type), and ONE parallel region covers the rows of all the
// targets, so a fused projection costs one fork/join, not one per matrix. T >= kGemmMinTokens
// takes the packed-panel GEMM (quant/gemm.h) for the block types it serves. Each output element
// is computed by one kernel call on a fixed split, so results do not depend on the thread count.
void matmul(const float* x, int64_t T, int64_t K, const MatmulTarget* targets, int n_targets,
            const Kernels& k = kernels());

// Logits-style products with one input row: y[r] = W[r, :] . x over all rows.
inline void matvec(const float* x, const MatrixView& w, float* y) {
  const MatmulTarget t{w, y, w.rows};
  matmul(x, 1, w.cols, &t, 1);
}

}  // namespace kvevict::quant
