#include "kvevict/parallel.h"

#include <exception>
#include <thread>
#ifdef _OPENMP
#include <omp.h>
#endif

namespace kvevict {
namespace {
int g_threads = 0;
}

void set_num_threads(int n) { g_threads = n < 0 ? 0 : n; }

int num_threads() {
  if (g_threads > 0) return g_threads;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

void parallel_for(int64_t count, const std::function<void(int64_t)>& fn) {
  if (count <= 0) return;
  const int threads = num_threads();
#ifdef _OPENMP
  if (threads > 1 && count > 1) {
    // An exception must not escape an OpenMP thread: keep the first and rethrow it here.
    std::exception_ptr first;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t i = 0; i < count; ++i) {
      try {
        fn(i);
      } catch (...) {
#pragma omp critical(kvevict_parallel_for_error)
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
    return;
  }
#endif
  for (int64_t i = 0; i < count; ++i) fn(i);
}

}  // namespace kvevict
