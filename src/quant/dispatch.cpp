// The kernel table for this CPU, and the A8 row layout.
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "kvevict/error.h"
#include "quant/quant.h"

namespace kvevict::quant {

namespace {
constexpr size_t kAlign = 32;
size_t round_up(size_t v) {
  return (v + kAlign - 1) / kAlign * kAlign;
}

// The CPU's features from cpuid, and the register state its OS saves (XCR0 via XGETBV): a CPU
// with AVX-512 under an OS (or hypervisor) that does not save the ZMM registers must not run it.
struct CpuFeatures {
  bool avx2 = false;    // AVX2 + FMA + F16C, YMM state saved
  bool avx512 = false;  // AVX-512 F BW VL DQ + VNNI, opmask + ZMM state saved (and AVX2)
};

CpuFeatures detect_cpu() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, f16c = (c >> 29) & 1;
  if (!osxsave) return f;
  uint32_t xlo = 0, xhi = 0;
  __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  const uint64_t xcr0 = (static_cast<uint64_t>(xhi) << 32) | xlo;
  const bool os_ymm = (xcr0 & 0x6) == 0x6;    // SSE + AVX state
  const bool os_zmm = (xcr0 & 0xE6) == 0xE6;  // + opmask, ZMM0-15 upper halves, ZMM16-31
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx2 = (b >> 5) & 1;
  const bool f512 = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
  const bool vnni = (c >> 11) & 1;
  f.avx2 = avx2 && fma && f16c && os_ymm;
  f.avx512 = f.avx2 && f512 && dq && bw && vl && vnni && os_zmm;
#endif
  return f;
}

const CpuFeatures& cpu() {
  static const CpuFeatures f = detect_cpu();
  return f;
}
}  // namespace

size_t a8_row_bytes(int64_t n) {
  return round_up(static_cast<size_t>(n)) + round_up(static_cast<size_t>(n / kA8Block) * 4) +
         round_up(static_cast<size_t>(n / kA8Half) * 2);
}

A8Row a8_row(const uint8_t* buf, int64_t n) {
  A8Row r;
  r.qs = reinterpret_cast<const int8_t*>(buf);
  const uint8_t* p = buf + round_up(static_cast<size_t>(n));
  r.d = reinterpret_cast<const float*>(p);
  p += round_up(static_cast<size_t>(n / kA8Block) * 4);
  r.s16 = reinterpret_cast<const int16_t*>(p);
  return r;
}

void a8_nonfinite_block(float* d, int8_t* qs, int16_t* s16, int64_t b) {
  d[b] = std::numeric_limits<float>::quiet_NaN();
  std::memset(qs + b * kA8Block, 0, kA8Block);
  s16[2 * b] = s16[2 * b + 1] = 0;
}

bool takes_a8(GgmlType t) {
  return t != GgmlType::kF32 && t != GgmlType::kF16 && t != GgmlType::kBF16;
}

int type_index(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: return 0;
    case GgmlType::kF16: return 1;
    case GgmlType::kBF16: return 2;
    case GgmlType::kQ4_0: return 3;
    case GgmlType::kQ4_1: return 4;
    case GgmlType::kQ5_0: return 5;
    case GgmlType::kQ5_1: return 6;
    case GgmlType::kQ8_0: return 7;
    case GgmlType::kQ4_K: return 8;
    case GgmlType::kQ5_K: return 9;
    case GgmlType::kQ6_K: return 10;
  }
  KVEVICT_FAIL("quantized matmul: ggml type ", static_cast<uint32_t>(t),
               " is not supported; expected F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K");
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

bool cpu_supports(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2: return cpu().avx2;
    case Isa::kAvx512: return cpu().avx512;
  }
  return false;
}

const Kernels* kernels_for(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return &scalar_kernels();
    case Isa::kAvx2: return cpu_supports(isa) ? avx2_kernels() : nullptr;
    case Isa::kAvx512: return cpu_supports(isa) ? avx512_kernels() : nullptr;
  }
  return nullptr;
}

const Kernels& kernels() {
  static const Kernels* const chosen = [] {
    const char* env = std::getenv("KVEVICT_QUANT_ISA");
    if (env != nullptr && *env != '\0') {
      const std::string want(env);
      for (Isa isa : kAllIsas) {
        if (want != isa_name(isa)) continue;
        const Kernels* k = kernels_for(isa);
        KVEVICT_CHECK(k != nullptr, "KVEVICT_QUANT_ISA=", want,
                      ": this CPU (or build) does not run those kernels");
        return k;
      }
      KVEVICT_FAIL("KVEVICT_QUANT_ISA=", want, " is unknown; expected scalar, avx2 or avx512");
    }
    for (Isa isa : {Isa::kAvx512, Isa::kAvx2})
      if (const Kernels* k = kernels_for(isa)) return k;
    return &scalar_kernels();
  }();
  return *chosen;
}

}  // namespace kvevict::quant
