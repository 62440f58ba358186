// Fuzzes the .npy reader: any byte string must either load (a tensor whose byte size matches its
// shape and dtype) or throw kvevict::Error. Crashes, leaks and sanitizer reports are bugs.
#include <cstdint>
#include <cstdlib>

#include "fuzz_file.h"
#include "kvevict/dtype.h"
#include "kvevict/error.h"
#include "kvevict/io/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvevict::fuzz::MemFile file(data, size, ".npy");
  // Both load modes: f32 (the default) and bf16 conversion take different code paths.
  for (bool bf16 : {false, true}) {
    try {
      kvevict::HostTensor t = kvevict::npy::load(file.path(), bf16);
      int64_t elems = 1;
      for (int64_t s : t.shape()) {
        if (s < 0) std::abort();  // a negative extent must never get through
        elems *= s;
      }
      if (elems != t.numel()) std::abort();
      if (t.nbytes() != static_cast<size_t>(elems) * kvevict::dtype_size(t.dtype())) std::abort();
    } catch (const kvevict::Error&) {
    }
  }
  return 0;
}
