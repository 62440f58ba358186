// parallel_for for the host ops of select/, cache/, attention/, evict/ and quant/, run serially
// when the whole job is small: waking the thread pool costs more than a decode step's work, and on
// a busy machine spinning OpenMP workers turn microseconds into milliseconds. Each index's
// arithmetic is the same either way, so results do not depend on the choice.
#pragma once

#include <cstdint>

#include "core/parallel.h"

namespace kvevict::detail {

constexpr int64_t kParallelMinWork = int64_t{1} << 16;  // elementary operations, roughly

template <class Fn>
void parallel_for_if_large(int64_t count, int64_t work, Fn&& fn) {
  if (count <= 1 || work < kParallelMinWork) {
    for (int64_t i = 0; i < count; ++i) fn(i);
    return;
  }
  parallel_for(count, fn);
}

}  // namespace kvevict::detail
