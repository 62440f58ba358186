// Fuzzes the GGUF reader: any byte string must either open (and then every tensor dequantizes
// within the mapping) or throw kvevict::Error. Crashes, leaks and sanitizer reports are bugs.
#include <cstdint>
#include <vector>

#include "fuzz_file.h"
#include "kvevict/error.h"
#include "kvevict/io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvevict::fuzz::MemFile file(data, size);
  try {
    auto gguf = kvevict::gguf::File::open(file.path());
    for (const auto& [key, value] : gguf->metadata()) (void)key;
    int64_t budget = 1 << 20;  // dequantize at most ~1M elements per input
    for (const auto& t : gguf->tensors()) {
      int64_t elems = 1;
      for (int64_t s : t.shape) elems *= s;
      if (elems > budget) continue;
      budget -= elems;
      auto host = kvevict::gguf::dequantize(t);
      (void)host;
    }
  } catch (const kvevict::Error&) {
  }
  return 0;
}
