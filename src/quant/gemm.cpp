// Panel packing (portable; it runs once per 8 rows and chunk, next to T tokens of products) and
// the scalar panel kernel.
#include "quant/gemm.h"

#include <algorithm>
#include <cstring>

#include "kvevict/error.h"
#include "quant/blocks.h"

namespace kvevict::quant {
namespace {

using namespace blocks;

constexpr size_t kAlign = 64;
size_t round_up(size_t v) {
  return (v + kAlign - 1) / kAlign * kAlign;
}

// The (scale, min) of every group of one weight row, into the panel slot of the row:
// x = scale q + min over the group's columns.
void pack_groups(GgmlType type, const uint8_t* w, int64_t K, float* scale, float* min, int row) {
  auto group = [&](int64_t g, float s, float m) {
    scale[g * kPanelRows + row] = s;
    min[g * kPanelRows + row] = m;
  };
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1: {
      const int bytes = static_cast<int>(gguf::ggml_block_bytes(type));
      for (int64_t b = 0; b < K / kQK; ++b) {
        const uint8_t* blk = w + b * bytes;
        const float d = fp16_at(blk);
        const float m = type == GgmlType::kQ4_0   ? -8.0f * d
                        : type == GgmlType::kQ5_0 ? -16.0f * d
                                                  : fp16_at(blk + 2);
        group(b, d, m);
      }
      return;
    }
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      const int bytes = static_cast<int>(gguf::ggml_block_bytes(type));
      for (int64_t sb = 0; sb < K / kQKK; ++sb) {
        const uint8_t* blk = w + sb * bytes;
        const float d = fp16_at(blk + Q4_K::kD), dmin = fp16_at(blk + Q4_K::kDmin);
        uint8_t sc[8], mn[8];
        unpack_scales_k4(blk + Q4_K::kScales, sc, mn);
        for (int j = 0; j < 8; ++j) group(sb * 8 + j, d * sc[j], -dmin * mn[j]);
      }
      return;
    }
    case GgmlType::kQ6_K: {
      // Groups of 16 columns: group g of the super-block has scale sc[g].
      for (int64_t sb = 0; sb < K / kQKK; ++sb) {
        const uint8_t* blk = w + sb * Q6_K::kBytes;
        const float d = fp16_at(blk + Q6_K::kD);
        const auto* sc = reinterpret_cast<const int8_t*>(blk + Q6_K::kScales);
        for (int g = 0; g < 16; ++g) group(sb * 16 + g, d * sc[g], -32.0f * d * sc[g]);
      }
      return;
    }
    default:
      KVEVICT_FAIL("gemm: ggml type ", gguf::ggml_type_name(static_cast<uint32_t>(type)),
                   " has no panel packing");
  }
}

}  // namespace

bool gemm_supports(GgmlType t, const Kernels& k) {
  if (k.gemm_panel == nullptr) return false;
  switch (t) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K: return true;
    default: return false;
  }
}

PanelLayout panel_layout(GgmlType t) {
  // chain * 4 columns * 2 * max code * 127 must stay below 2^15 (int16 sums of vpmaddubsw pairs).
  switch (t) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ4_K: return {32, 8};  // 8 * 2 * 15 * 127 = 30480
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ5_K: return {32, 4};  // 4 * 2 * 31 * 127 = 31496
    case GgmlType::kQ6_K: return {16, 2};  // 2 * 2 * 63 * 127 = 32004
    default:
      KVEVICT_FAIL("gemm: ggml type ", gguf::ggml_type_name(static_cast<uint32_t>(t)),
                   " has no panel layout");
  }
}

size_t panel_bytes(int64_t K) {
  const size_t groups = static_cast<size_t>(K / 16);  // the finest grouping
  return round_up(static_cast<size_t>(K) * kPanelRows) + 2 * round_up(groups * kPanelRows * 4);
}

PanelView pack_panel(const MatrixView& w, int64_t r0, int rows, uint8_t* buf, const Kernels& k) {
  PanelView p;
  p.K = w.cols;
  p.layout = panel_layout(w.type);
  const int64_t groups = w.cols / p.layout.group;
  uint8_t* codes = buf;
  float* scale = reinterpret_cast<float*>(buf + round_up(static_cast<size_t>(w.cols) * kPanelRows));
  float* min = scale + round_up(static_cast<size_t>(w.cols / 16) * kPanelRows * 4) / 4;
  if (rows < kPanelRows) {
    std::memset(scale, 0, static_cast<size_t>(groups) * kPanelRows * 4);
    std::memset(min, 0, static_cast<size_t>(groups) * kPanelRows * 4);
  }
  // Each row's codes contiguous first, then interleaved 4 columns x 8 rows at a time.
  thread_local std::vector<uint8_t> row_codes;
  row_codes.assign(static_cast<size_t>(w.cols) * kPanelRows, 0);
  const uint8_t* row_ptrs[kPanelRows];
  const PackCodesFn simd = k.pack_codes[type_index(w.type)];
  for (int r = 0; r < kPanelRows; ++r) row_ptrs[r] = row_codes.data() + r * w.cols;
  for (int r = 0; r < rows; ++r) {
    uint8_t* rc = row_codes.data() + r * w.cols;
    if (simd != nullptr) {
      simd(w.row(r0 + r), w.cols, rc);
    } else {
      for (int64_t s = 0; s < w.cols / kQK; ++s) codes32(w.type, w.row(r0 + r), s, rc + s * kQK);
    }
    pack_groups(w.type, w.row(r0 + r), w.cols, scale, min, r);
  }
  if (k.interleave8 != nullptr) {
    k.interleave8(row_ptrs, w.cols, codes);
  } else {
    for (int r = 0; r < kPanelRows; ++r)
      for (int64_t c4 = 0; c4 < w.cols / 4; ++c4)
        std::memcpy(codes + c4 * 32 + r * 4, row_ptrs[r] + c4 * 4, 4);
  }
  p.codes = codes;
  p.scale = scale;
  p.min = min;
  return p;
}

void plan_gemm(const MatrixView& w, int target, std::vector<GemmJob>* jobs) {
  for (int64_t r0 = 0; r0 < w.rows; r0 += kGemmRowsPerJob)
    jobs->push_back({target, r0, std::min(w.rows, r0 + kGemmRowsPerJob)});
}

void run_gemm(const MatrixView& w, const GemmInput& in, const GemmJob& job, float* y, int64_t ldy,
              const Kernels& k) {
  // The job's panels are packed once, then run over tiles of kTokenTile tokens: a tile's
  // activations (64 x K bytes) stay in L1 / L2 across the panels, and its outputs in L1.
  constexpr int64_t kTokenTile = 64;
  constexpr int kMaxPanels = static_cast<int>(kGemmRowsPerJob / kPanelRows);
  thread_local std::vector<uint8_t> buf;
  const size_t one = panel_bytes(w.cols);
  if (buf.size() < one * kMaxPanels) buf.resize(one * kMaxPanels);
  PanelView panels[kMaxPanels];
  int rows[kMaxPanels];
  int n = 0;
  for (int64_t r0 = job.r0; r0 < job.r1; r0 += kPanelRows, ++n) {
    KVEVICT_CHECK(n < kMaxPanels, "gemm: job of ", job.r1 - job.r0, " rows exceeds ",
                  kGemmRowsPerJob);
    rows[n] = static_cast<int>(std::min<int64_t>(kPanelRows, job.r1 - r0));
    panels[n] = pack_panel(w, r0, rows[n], buf.data() + n * one, k);
  }
  for (int64_t t0 = 0; t0 < in.T; t0 += kTokenTile) {
    GemmInput tile = in;
    tile.act = in.act + t0 * in.row_bytes;
    tile.T = std::min(kTokenTile, in.T - t0);
    for (int i = 0; i < n; ++i)
      k.gemm_panel(panels[i], tile, y + t0 * ldy + job.r0 + i * kPanelRows, ldy, rows[i]);
  }
}

void gemm_panel_scalar(const PanelView& p, const GemmInput& in, float* y, int64_t ldy, int rows) {
  const int G = p.layout.group;
  const int64_t groups = p.K / G;
  for (int64_t t = 0; t < in.T; ++t) {
    const A8Row a = a8_row(in.act + t * in.row_bytes, in.K);
    for (int r = 0; r < rows; ++r) {
      float acc = 0.0f;
      for (int64_t g = 0; g < groups; ++g) {
        int s = 0;
        for (int64_t c = g * G; c < (g + 1) * G; ++c)
          s += p.codes[(c / 4) * 32 + r * 4 + (c % 4)] * a.qs[c];
        const float dx = a.d[g * G / kA8Block];
        const int sa = G == 16 ? a.s16[g] : a.s16[2 * g] + a.s16[2 * g + 1];
        acc += p.scale[g * kPanelRows + r] * dx * static_cast<float>(s) +
               p.min[g * kPanelRows + r] * dx * static_cast<float>(sa);
      }
      y[t * ldy + r] = acc;
    }
  }
}

}  // namespace kvevict::quant
