// The prefill GEMM on block-quantized weights (internal to src/quant).
//
// A row-by-row dot product unpacks every weight block once per token; a prefill chunk of T tokens
// would unpack each block T times. The GEMM instead repacks PANELS of 8 weight rows into an
// interleaved layout once (per work item, in a thread-local buffer that stays in L1/L2):
//   codes  [K / 4][8 rows][4] u8   the 4-bit / 5-bit / 6-bit codes of 4 consecutive columns of
//                                  each row side by side, so one 32-byte load feeds 8 rows
//   scale  [K / G][8] f32          per group of G = 32 (16 for Q6_K) columns: x = scale q + min
//   min    [K / G][8] f32
// and the micro-kernel (Kernels::gemm_panel) runs the whole chunk of tokens over the panel: each
// loaded 32-byte code vector is multiplied with 4 tokens' broadcast activation bytes
// (vpmaddubsw), each int32 lane being one row's partial sum, then scaled once a group. Integer
// sums are exact, so the GEMM equals the dot-product path up to the order of f32 additions.
#pragma once

#include <cstdint>
#include <vector>

#include "quant/quant.h"

namespace kvevict::quant {

// Below this many tokens the row-by-row kernels win: packing a panel costs about one token's
// dot products with it. Measured on SmolLM2's 576 x 576 Q4_1 projections (benchmarks/
// cpu_quant_bench.cpp): GEMM ahead from T = 4 on, 2.6x at T = 64.
constexpr int64_t kGemmMinTokens = 4;
constexpr int kPanelRows = 8;
constexpr int64_t kGemmRowsPerJob = 16;  // two panels per work item

struct PanelLayout {
  int group = 32;  // columns per scale
  int chain = 8;   // 4-column steps summed in int16 before widening (no int16 overflow)
};

struct PanelView {
  const uint8_t* codes = nullptr;  // [K / 4][8][4]
  const float* scale = nullptr;    // [K / group][8]
  const float* min = nullptr;      // [K / group][8]
  int64_t K = 0;
  PanelLayout layout;
};

// The quantized activations of the chunk: row t at act + t * row_bytes (a8_row layout).
struct GemmInput {
  const uint8_t* act = nullptr;
  size_t row_bytes = 0;
  int64_t T = 0, K = 0;
};

struct GemmJob {
  int target;
  int64_t r0, r1;  // weight rows [r0, r1)
};

bool gemm_supports(GgmlType t, const Kernels& k);
PanelLayout panel_layout(GgmlType t);
// Packs rows [r0, r0 + rows) (rows <= 8; missing rows are zero) of w into buf (panel_bytes(K)).
size_t panel_bytes(int64_t K);
PanelView pack_panel(const MatrixView& w, int64_t r0, int rows, uint8_t* buf,
                     const Kernels& k = kernels());

void plan_gemm(const MatrixView& w, int target, std::vector<GemmJob>* jobs);
void run_gemm(const MatrixView& w, const GemmInput& in, const GemmJob& job, float* y, int64_t ldy,
              const Kernels& k);

// The portable panel kernel (the reference of the SIMD ones).
void gemm_panel_scalar(const PanelView& p, const GemmInput& in, float* y, int64_t ldy, int rows);

}  // namespace kvevict::quant
