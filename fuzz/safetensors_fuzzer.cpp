// Fuzzes the .safetensors reader: any byte string must either open (and then every listed tensor
// loads with the byte size its shape and dtype imply) or throw kvevict::Error.
#include <cstdint>
#include <cstdlib>

#include "fuzz_file.h"
#include "kvevict/dtype.h"
#include "kvevict/error.h"
#include "kvevict/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvevict::fuzz::MemFile file(data, size, ".safetensors");
  try {
    auto st = kvevict::safetensors::File::open(file.path());
    for (const auto& [key, value] : st->metadata()) (void)key;
    uint64_t budget = uint64_t{1} << 24;  // load at most ~16 MiB per input
    for (const auto& e : st->tensors()) {
      if (st->find(e.name) == nullptr) std::abort();  // every listed tensor is findable
      if (e.nbytes > budget) continue;
      budget -= e.nbytes;
      try {
        kvevict::HostTensor t = st->load(e.name);
        if (t.nbytes() != e.nbytes) std::abort();
        if (t.nbytes() != static_cast<size_t>(t.numel()) * kvevict::dtype_size(t.dtype())) {
          std::abort();
        }
      } catch (const kvevict::Error&) {
      }
    }
  } catch (const kvevict::Error&) {
  }
  return 0;
}
