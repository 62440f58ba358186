// How the CPU fast paths split work over threads. The thread-count knobs (set_num_threads,
// num_threads, max_threads) are public, in kvevict/threads.h; parallel_for is internal.
#pragma once

#include <cstdint>
#include <functional>

#include "kvevict/threads.h"

namespace kvevict {

// Calls fn(i) for i in [0, count) on the thread pool (OpenMP when available), in fixed chunks
// that do not depend on the thread count.
void parallel_for(int64_t count, const std::function<void(int64_t)>& fn);

}  // namespace kvevict
