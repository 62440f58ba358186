// The GPU benchmarks' entry: a failed CUDA or cuBLAS call (cuda/check.h throws kvevict::Error)
// becomes one line on stderr naming the program, and exit code 1.
#pragma once

#include <cstdio>

#include "kvevict/error.h"

namespace kvevict::bench {

template <class F>
int run_reporting_errors(const char* program, F&& body) {
  try {
    return body();
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace kvevict::bench
