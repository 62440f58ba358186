// Threads of every CPU fast path (the CPU backend's, cpu::score's, the CPU model runtime's).
// Work is split into fixed chunks that do not depend on the thread count and reduced in a fixed
// order, so results are bitwise identical for any count. (Included by kvevict/backend.h.)
#pragma once

namespace kvevict {

// The most threads set_num_threads accepts: 4 x the hardware threads, at most 1024. More threads
// than that only oversubscribe the cores, and libgomp itself fails (exit 1, or a segfault at
// 100000) long before the thread count's int range ends (issue 13).
int max_threads();
// 0 = use every hardware thread (the default). Throws naming n unless 0 <= n <= max_threads().
void set_num_threads(int n);
int num_threads();

}  // namespace kvevict
