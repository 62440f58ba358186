// The kernel table for this CPU, and the A8 row layout.
#include <cstdlib>
#include <string>

#include "kvevict/error.h"
#include "quant/quant.h"

namespace kvevict::quant {

namespace {
constexpr size_t kAlign = 32;
size_t round_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

bool cpu_has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
#else
  return false;
#endif
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
  }
  return "?";
}

const Kernels* kernels_for(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return &scalar_kernels();
    case Isa::kAvx2: return cpu_has_avx2() ? avx2_kernels() : nullptr;
  }
  return nullptr;
}

const Kernels& kernels() {
  static const Kernels* const chosen = [] {
    const char* env = std::getenv("KVEVICT_QUANT_ISA");
    if (env != nullptr && *env != '\0') {
      const std::string want(env);
      for (Isa isa : {Isa::kScalar, Isa::kAvx2}) {
        if (want != isa_name(isa)) continue;
        const Kernels* k = kernels_for(isa);
        KVEVICT_CHECK(k != nullptr, "KVEVICT_QUANT_ISA=", want,
                      ": this CPU (or build) does not run those kernels");
        return k;
      }
      KVEVICT_FAIL("KVEVICT_QUANT_ISA=", want, " is unknown; expected scalar or avx2");
    }
    const Kernels* best = kernels_for(Isa::kAvx2);
    return best != nullptr ? best : &scalar_kernels();
  }();
  return *chosen;
}

}  // namespace kvevict::quant
