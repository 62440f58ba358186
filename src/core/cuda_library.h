// The one loader of libkvevict_cuda, the library that holds everything CUDA (the cuda backend and
// the GPU model runtime). The core, the CPU runtime and the command-line tool do not link it, so
// they start on a machine without the CUDA runtime; callers that need the GPU look their entry
// point up here when the program was not linked with it (a weak reference left null).
#pragma once

#include <string>

namespace kvevict::detail {

// The address of `symbol` in libkvevict_cuda, loaded once on first use: $KVEVICT_CUDA_LIBRARY if
// set, else libkvevict_cuda.so.<SOVERSION> next to the kvevict library, else the system's search
// path.
// nullptr with `why` saying what failed: a build without CUDA (no such library), a library that
// does not load (usually a missing CUDA runtime), or one without the symbol.
void* cuda_library_symbol(const char* symbol, std::string* why);

}  // namespace kvevict::detail
