// 1-D pooling along tokens (method.h Pooling): stride 1, "same" padding of kernel/2 on each side.
// Max pads with -inf (padding never wins); avg divides by the full kernel, zeros padded
// (PyTorch's count_include_pad default, which SnapKV and kvpress use). Shared by the reference
// (double) and the CPU path (float). Max keeps a NaN score (nan_max), as the CUDA pooling
// does.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/nan_max.h"
#include "kvevict/method.h"

namespace kvevict::score_detail {

// out[j] = pool(in[j - r .. j + r]) with r = kernel / 2; `out` must not alias `in`.
template <class T>
void pool_tokens(const T* in, T* out, int64_t n, const Pooling& pooling) {
  const int64_t r = pooling.kernel / 2;
  if (pooling.kind == PoolKind::kNone || r == 0) {
    std::copy(in, in + n, out);
    return;
  }
  for (int64_t j = 0; j < n; ++j) {
    const int64_t lo = std::max<int64_t>(0, j - r);
    const int64_t hi = std::min<int64_t>(n - 1, j + r);
    if (pooling.kind == PoolKind::kMax) {
      T best = in[lo];
      for (int64_t i = lo + 1; i <= hi; ++i) best = nan_max(best, in[i]);
      out[j] = best;
    } else {
      T sum = 0;
      for (int64_t i = lo; i <= hi; ++i) sum += in[i];
      out[j] = sum / static_cast<T>(pooling.kernel);
    }
  }
}

// The same pooling in place, for the fast path (no n-long scratch): ring [kernel] keeps the
// original values of the last kernel tokens already overwritten.
template <class T>
void pool_tokens_inplace(T* x, int64_t n, const Pooling& pooling, T* ring) {
  const int64_t r = pooling.kernel / 2;
  const int64_t k = pooling.kernel;
  if (pooling.kind == PoolKind::kNone || r == 0) return;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t lo = std::max<int64_t>(0, j - r);
    const int64_t hi = std::min<int64_t>(n - 1, j + r);
    // Tokens i < j were overwritten; their originals sit in ring[i % k].
    T best = lo < j ? ring[lo % k] : x[lo];
    T sum = 0;
    for (int64_t i = lo; i <= hi; ++i) {
      const T xi = i < j ? ring[i % k] : x[i];
      best = nan_max(best, xi);
      sum += xi;
    }
    ring[j % k] = x[j];
    x[j] = pooling.kind == PoolKind::kMax ? best : sum / static_cast<T>(k);
  }
}

}  // namespace kvevict::score_detail
