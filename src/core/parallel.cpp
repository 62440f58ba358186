#include "core/parallel.h"

#include <algorithm>
#include <exception>
#include <thread>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "kvevict/error.h"

namespace kvevict {
namespace {
int g_threads = 0;

int hardware_threads() {
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(std::min(hw, 1024u));
}

}  // namespace

int max_threads() {
  return std::min(1024, 4 * hardware_threads());
}

void set_num_threads(int n) {
  KVEVICT_CHECK(n >= 0 && n <= max_threads(), "thread count ", n, " is out of range; expected 0 ",
                "(all ", hardware_threads(), " hardware threads) .. ", max_threads(),
                " (4 x the hardware threads, at most 1024)");
  g_threads = n;
}

int num_threads() {
  return g_threads > 0 ? g_threads : hardware_threads();
}

void parallel_for(int64_t count, const std::function<void(int64_t)>& fn) {
  if (count <= 0) return;
  const int threads = num_threads();
#ifdef _OPENMP
  if (threads > 1 && count > 1) {
    // An exception must not escape an OpenMP thread: keep the first and rethrow it here.
    std::exception_ptr first;
    // Dynamic chunks of ~1/16 of a thread's share: balance without one shared-counter update per
    // index (a decode's output head is 8192 items). Which thread runs an index never changes
    // what it computes.
    const int64_t chunk = std::max<int64_t>(1, count / (static_cast<int64_t>(threads) * 16));
#pragma omp parallel for schedule(dynamic, chunk) num_threads(threads)
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
