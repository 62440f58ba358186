// Matrix-vector products on GGUF weight blocks, as they lie in the file's mapping (internal to
// src/): no dequantized copy of a weight ever exists.
//
// Integer kernels. The activations of a product with a quantized weight matrix are quantized once
// to "A8" rows: int8 values with one f32 scale per 32 elements (d = max|x| / 127, q = round(x / d))
// and the integer sum of every 16 of them. Every weight block is then an integer dot product with
// the activation block(s) it covers, scaled once in f32:
//   Q4_0  d (q - 8)        -> dw dx (sum q a - 8 sum a)               (q unsigned: no sign fix-up)
//   Q4_1  d q + m          -> dw dx sum q a + m dx sum a
//   Q5_0 / Q5_1            the same with 5-bit q (offset 16 for Q5_0)
//   Q8_0  d q              -> dw dx sum q a
//   Q4_K / Q5_K            per 32-element sub-block: (d sc) q - (dmin m) -> like Q4_1 with those
//   Q6_K  d sc (q - 32)    per 16 elements: dw dx sum_16 sc (sum q a - 32 sum a)
// The integer sums are exact, so a SIMD kernel differs from the scalar one only in the order of
// its f32 additions. A per-32 activation scale (ggml's Q8_K uses one per 256 for the K-quants)
// costs one f32 multiply-add per 32 elements and keeps more of the activations' precision. F32 /
// F16 / BF16 weights multiply the f32 activations directly.
//
// The kernel table is chosen once at run time from the CPU's features (cpuid, and XGETBV for the
// register state the OS saves): AVX-512 (F BW VL DQ + VNNI) over AVX2 (+ FMA, F16C) over scalar.
// The SIMD kernels are compiled for their target alone (src/quant/kernels_avx2.cpp,
// kernels_avx512.cpp, see cmake/QuantIsa.cmake), so the library itself runs on any x86-64, and
// the scalar kernels are the portable fallback that the tests hold every other version to.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvevict/io/gguf.h"

namespace kvevict::quant {

using gguf::GgmlType;

constexpr int kA8Block = 32;  // activation elements per scale
constexpr int kA8Half = 16;   // activation elements per integer sum

// One row of a weight matrix and its layout: row r at data + r * row_bytes.
struct MatrixView {
  GgmlType type = GgmlType::kF32;
  int64_t rows = 0, cols = 0;
  int64_t row_bytes = 0;
  const uint8_t* data = nullptr;  // [rows * row_bytes]
  const uint8_t* row(int64_t r) const { return data + r * row_bytes; }
};

// An activation row quantized to A8 (n a multiple of 32).
struct A8Row {
  const int8_t* qs = nullptr;    // [n] round(x / d)
  const float* d = nullptr;      // [n / 32] scales
  const int16_t* s16 = nullptr;  // [n / 16] sums of qs over each 16
};

// A NaN or an Inf anywhere in a 32-element block has no int8 form: the quantizers give that block
// a NaN scale and zero codes and sums, so every product over the row is NaN (a NaN hidden state
// gives NaN logits, as the float product would, not the finite row an absmax blind to NaN made;
// issue 13). Every ISA finds such a block from the absmax taken on the bits of |x|: for x >= 0
// the integer order of the bits is the float order, and NaN / Inf bits lie above every finite
// value's (kA8NonFiniteBits), so the check costs one compare per block.
constexpr uint32_t kA8NonFiniteBits = 0x7f800000u;  // |x| bits >= this: Inf or NaN
void a8_nonfinite_block(float* d, int8_t* qs, int16_t* s16, int64_t b);  // block b of a row

// Bytes of one A8 row of n elements in a buffer (qs, then d, then s16, each 32-byte aligned).
size_t a8_row_bytes(int64_t n);
A8Row a8_row(const uint8_t* buf, int64_t n);

// True for the block types that take A8 activations (every supported type but F32/F16/BF16).
bool takes_a8(GgmlType t);

enum class Isa { kScalar, kAvx2, kAvx512 };
constexpr Isa kAllIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512};
const char* isa_name(Isa isa);
// Whether this CPU and its OS run an ISA's kernels (cpuid feature bits + XGETBV: the OS saves
// the YMM state for AVX2, the opmask / ZMM state for AVX-512). Scalar: always.
bool cpu_supports(Isa isa);

struct PanelView;
struct GemmInput;

using QuantizeA8Fn = void (*)(const float* x, int64_t n, uint8_t* dst);  // dst: a8_row_bytes(n)
using DotA8Fn = float (*)(const uint8_t* w, const A8Row& a, int64_t n);  // one row . one row
using DotF32Fn = float (*)(const uint8_t* w, const float* x, int64_t n);
// The GEMM micro-kernel (quant/gemm.h): one packed panel of <= 8 weight rows against every token
// of the chunk, y[t * ldy + i] for row i < rows.
using GemmPanelFn = void (*)(const PanelView& p, const GemmInput& in, float* y, int64_t ldy,
                             int rows);

constexpr int kNumTypes = 11;  // F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K
int type_index(GgmlType t);    // 0 .. kNumTypes - 1; throws for an unsupported type

// Decodes one weight row's codes (the unsigned q of the GEMM panels) into codes[K].
using PackCodesFn = void (*)(const uint8_t* w, int64_t K, uint8_t* codes);
// Interleaves 8 code rows [K] into the panel layout [K / 4][8][4].
using Interleave8Fn = void (*)(const uint8_t* const rows[8], int64_t K, uint8_t* codes);

struct Kernels {
  Isa isa = Isa::kScalar;
  QuantizeA8Fn quantize_a8 = nullptr;
  DotA8Fn dot_a8[kNumTypes] = {};    // null for F32 / F16 / BF16
  DotF32Fn dot_f32[kNumTypes] = {};  // null for the block types
  GemmPanelFn gemm_panel = nullptr;
  PackCodesFn pack_codes[kNumTypes] = {};  // null: the scalar decoder of quant/gemm.cpp
  Interleave8Fn interleave8 = nullptr;     // null: 4-byte copies
};

// The fastest table this CPU runs, chosen on first use. KVEVICT_QUANT_ISA=scalar|avx2|avx512
// forces one (for A/B comparisons and tests); an ISA the CPU lacks is an error naming it.
const Kernels& kernels();
// The table of one ISA, or nullptr when the CPU (or this build) lacks it.
const Kernels* kernels_for(Isa isa);

// The tables of each ISA (kernels_scalar.cpp, kernels_avx2.cpp, kernels_avx512.cpp); a SIMD one
// is null when the compiler cannot target it. Call them only where cpu_supports(isa): building
// a table runs code compiled for its ISA (kernels_for checks).
const Kernels& scalar_kernels();
const Kernels* avx2_kernels();
const Kernels* avx512_kernels();
// Whether this build holds the AVX-512 kernels (safe on any CPU: compiled to a constant).
bool avx512_compiled();

}  // namespace kvevict::quant
