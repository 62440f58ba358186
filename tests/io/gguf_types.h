// GGUF value type codes (the GGUF spec's gguf_type), shared by the test writer
// (tests/io/gguf_writer.h) and the structure-aware mutator (tests/io/gguf_mutator.h).
#pragma once

#include <cstdint>

namespace kvevict::testing {

struct GgufTypes {
  enum : uint32_t {
    kU8 = 0,
    kI8 = 1,
    kU16 = 2,
    kI16 = 3,
    kU32 = 4,
    kI32 = 5,
    kF32 = 6,
    kBool = 7,
    kString = 8,
    kArray = 9,
    kU64 = 10,
    kI64 = 11,
    kF64 = 12
  };
};

}  // namespace kvevict::testing
