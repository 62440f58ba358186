// CPU threading for the fast paths. Work is always split into fixed chunks that do not depend on
// the thread count, and reduced in a fixed order, so results are bitwise identical for any count.
#pragma once

#include <cstdint>
#include <functional>

namespace kvevict {

// The most threads set_num_threads accepts: 4 x the hardware threads, at most 1024. More threads
// than that only oversubscribe the cores, and libgomp itself fails (exit 1, or a segfault at
// 100000) long before the thread count's int range ends (issue 13).
int max_threads();
// 0 = use every hardware thread (the default); applies to all CPU fast paths. Throws naming n
// unless 0 <= n <= max_threads().
void set_num_threads(int n);
int num_threads();
// Calls fn(i) for i in [0, count) on the thread pool (OpenMP when available).
void parallel_for(int64_t count, const std::function<void(int64_t)>& fn);

}  // namespace kvevict
