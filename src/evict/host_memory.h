// Host allocations handed out by the CPU and reference backends.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

#include "kvevict/error.h"

namespace kvevict::detail {

// 64-byte aligned host memory freed by the returned handle.
inline std::shared_ptr<void> host_allocate(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  KVEVICT_CHECK(p != nullptr, "host allocation of ", bytes, " bytes failed");
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

}  // namespace kvevict::detail
