// Helpers of the GPU tests: device buffers framed by sentinels, 16-bit uploads, a skip when no
// GPU is present, and the double-precision references the kernels are compared against
// (written for clarity: they materialize p per query).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "kvevict/cuda/score.h"
#include "kvevict/dtype.h"
#include "kvevict/method.h"
#include "kvevict/tensor.h"

#define KVEVICT_REQUIRE_GPU()                                                   \
  do {                                                                          \
    if (!::kvevict::cuda::device_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

#define KVEVICT_ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

namespace kvevict::cuda::testing {

// count elements of T on the device with `pad` sentinel bytes (0xA5) on both sides.
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count, size_t pad_bytes = 256) : count_(count), pad_(pad_bytes) {
    const size_t bytes = count * sizeof(T) + 2 * pad_;
    if (cudaMalloc(&raw_, bytes) != cudaSuccess) raw_ = nullptr;
    if (raw_) cudaMemset(raw_, 0xA5, bytes);
  }
  ~DeviceBuffer() {
    if (raw_) cudaFree(raw_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  bool ok() const { return raw_ != nullptr; }
  T* data() { return reinterpret_cast<T*>(static_cast<char*>(raw_) + pad_); }
  size_t size() const { return count_; }
  void upload(const std::vector<T>& host) {
    cudaMemcpy(data(), host.data(), std::min(host.size(), count_) * sizeof(T),
               cudaMemcpyHostToDevice);
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    cudaMemcpy(host.data(), static_cast<const char*>(raw_) + pad_, count_ * sizeof(T),
               cudaMemcpyDeviceToHost);
    return host;
  }
  // Fills the payload with a poison pattern, so unwritten outputs show.
  void poison() { cudaMemset(data(), 0xFF, count_ * sizeof(T)); }
  bool sentinels_intact() const {
    std::vector<unsigned char> pads(2 * pad_);
    cudaMemcpy(pads.data(), raw_, pad_, cudaMemcpyDeviceToHost);
    cudaMemcpy(pads.data() + pad_, static_cast<const char*>(raw_) + pad_ + count_ * sizeof(T),
               pad_, cudaMemcpyDeviceToHost);
    return std::all_of(pads.begin(), pads.end(), [](unsigned char c) { return c == 0xA5; });
  }

 private:
  void* raw_ = nullptr;
  size_t count_, pad_;
};

// Host floats (already rounded to `dtype`) -> 16-bit device encoding.
inline std::vector<uint16_t> encode16(const std::vector<float>& x, DType dtype) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    out[i] = dtype == DType::kBF16 ? float_to_bf16(x[i]) : float_to_half(x[i]);
  return out;
}
inline std::vector<float> round_to(std::vector<float> x, DType dtype) {
  for (auto& e : x) e = dtype == DType::kBF16 ? round_bf16(e) : round_half(e);
  return x;
}

// Double reference of one layer: q [Hq, m, d], k, v [Hkv, n, d] (host floats); window = last w
// rows of q, query t at position n - w + t.
struct RefProblem {
  int hq = 0, hkv = 0, d = 0, m = 0, w = 0;
  int64_t n = 0;
  double scale = 0;
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
};

struct RefWindow {
  std::vector<double> a;    // [Hq, w, d]
  std::vector<double> lse;  // [Hq, w]
};

// Calls f(qh, t, z[], p[], a[]) per window query, with z/p over the visible keys 0..n-w+t.
template <class F>
void for_each_window_query(const RefProblem& rp, F&& f) {
  const int g = rp.hq / rp.hkv;
  std::vector<double> z, p, a(rp.d);
  for (int qh = 0; qh < rp.hq; ++qh) {
    const int hk = qh / g;
    for (int t = 0; t < rp.w; ++t) {
      const float* qv = rp.q + (static_cast<int64_t>(qh) * rp.m + rp.m - rp.w + t) * rp.d;
      const int64_t vis = rp.n - rp.w + t + 1;
      z.assign(vis, 0);
      double mx = -INFINITY;
      for (int64_t j = 0; j < vis; ++j) {
        const float* kv = rp.k + (hk * rp.n + j) * rp.d;
        double s = 0;
        for (int c = 0; c < rp.d; ++c) s += static_cast<double>(qv[c]) * kv[c];
        z[j] = s * rp.scale;
        mx = std::max(mx, z[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < vis; ++j) sum += std::exp(z[j] - mx);
      const double lse = mx + std::log(sum);
      p.assign(vis, 0);
      std::fill(a.begin(), a.end(), 0.0);
      for (int64_t j = 0; j < vis; ++j) {
        p[j] = std::exp(z[j] - lse);
        const float* vv = rp.v + (hk * rp.n + j) * rp.d;
        for (int c = 0; c < rp.d; ++c) a[c] += p[j] * vv[c];
      }
      f(qh, t, z, p, a, lse);
    }
  }
}

inline RefWindow ref_window(const RefProblem& rp) {
  RefWindow r;
  r.a.assign(static_cast<size_t>(rp.hq) * rp.w * rp.d, 0);
  r.lse.assign(static_cast<size_t>(rp.hq) * rp.w, 0);
  for_each_window_query(rp, [&](int qh, int t, const std::vector<double>&,
                                const std::vector<double>&, const std::vector<double>& a,
                                double lse) {
    r.lse[qh * rp.w + t] = lse;
    std::copy(a.begin(), a.end(), r.a.begin() + (static_cast<size_t>(qh) * rp.w + t) * rp.d);
  });
  return r;
}

// SPEC section 2 scores in double for the pair-term methods, knorm and keydiff; [Hkv, n].
inline std::vector<double> ref_scores(const RefProblem& rp, const ScoreOptions& opt) {
  const int g = rp.hq / rp.hkv;
  std::vector<double> s(static_cast<size_t>(rp.hkv) * rp.n, 0.0);
  auto kval = [&](int hk, int64_t j, int c) { return static_cast<double>(rp.k[(hk * rp.n + j) * rp.d + c]); };
  auto vval = [&](int hk, int64_t j, int c) { return static_cast<double>(rp.v[(hk * rp.n + j) * rp.d + c]); };
  if (opt.method == Method::kKNorm || opt.method == Method::kKeyDiff) {
    for (int hk = 0; hk < rp.hkv; ++hk) {
      std::vector<double> mean(rp.d, 0.0);
      for (int64_t j = 0; j < rp.n; ++j) {
        double nn = 0;
        for (int c = 0; c < rp.d; ++c) nn += kval(hk, j, c) * kval(hk, j, c);
        nn = std::sqrt(nn);
        if (opt.method == Method::kKNorm) s[hk * rp.n + j] = -nn;
        for (int c = 0; c < rp.d; ++c) mean[c] += nn > 0 ? kval(hk, j, c) / nn / rp.n : 0;
      }
      if (opt.method == Method::kKeyDiff) {
        double mm = 0;
        for (int c = 0; c < rp.d; ++c) mm += mean[c] * mean[c];
        for (int64_t j = 0; j < rp.n; ++j) {
          double kk = 0, km = 0;
          for (int c = 0; c < rp.d; ++c) {
            kk += kval(hk, j, c) * kval(hk, j, c);
            km += kval(hk, j, c) * mean[c];
          }
          s[hk * rp.n + j] = -km / (std::sqrt(kk) * std::sqrt(mm));
        }
      }
    }
    return s;
  }
  for_each_window_query(rp, [&](int qh, int, const std::vector<double>& z,
                                const std::vector<double>& p, const std::vector<double>& a,
                                double lse) {
    const int hk = qh / g;
    double a2 = 0;
    for (double x : a) a2 += x * x;
    for (size_t j = 0; j < z.size(); ++j) {
      double v2 = 0, av = 0, v1 = 0, dist = 0;
      for (int c = 0; c < rp.d; ++c) {
        const double x = vval(hk, j, c);
        v2 += x * x;
        v1 += std::abs(x);
        av += x * a[c];
        dist += (a[c] - x) * (a[c] - x);
      }
      const double pj = p[j], zj = z[j];
      double term = 0;
      switch (opt.method) {
        case Method::kDropKV: {
          const double om = std::max(-std::expm1(zj - lse), opt.one_minus_p_floor);
          term = (pj / om) * (pj / om) * dist;
          break;
        }
        case Method::kObcacheV: term = pj * pj * v2; break;
        case Method::kObcacheK: term = (pj * zj) * (pj * zj) * dist; break;
        case Method::kObcacheVK:
          term = pj * pj * v2 + (pj * zj) * (pj * zj) * dist + 2 * pj * pj * zj * (v2 - av);
          break;
        case Method::kVATP: term = pj * v1; break;
        default: term = pj; break;
      }
      s[hk * rp.n + j] += term / g;
    }
  });
  if (opt.aggregate == Aggregate::kAllQueries && opt.h2o_normalize) {
    for (int hk = 0; hk < rp.hkv; ++hk)
      for (int64_t j = 0; j < rp.n; ++j) {
        const int64_t seen = rp.w - std::max<int64_t>(0, j - (rp.n - rp.w));
        s[hk * rp.n + j] = seen > 0 ? s[hk * rp.n + j] / seen : 0;
      }
  }
  if (opt.aggregate == Aggregate::kLastQuery) {
    for (int64_t j = 0; j < rp.n; ++j) {
      double acc = 0;
      for (int hk = 0; hk < rp.hkv; ++hk) acc += s[hk * rp.n + j];
      for (int hk = 0; hk < rp.hkv; ++hk) s[hk * rp.n + j] = acc / rp.hkv;
    }
  }
  if (opt.pooling.kind != PoolKind::kNone) {
    std::vector<double> pooled(s.size());
    const int half = opt.pooling.kernel / 2;
    for (int hk = 0; hk < rp.hkv; ++hk)
      for (int64_t j = 0; j < rp.n; ++j) {
        double acc = opt.pooling.kind == PoolKind::kMax ? -INFINITY : 0.0;
        for (int o = -half; o <= half; ++o) {
          const int64_t x = j + o;
          if (x < 0 || x >= rp.n) continue;
          acc = opt.pooling.kind == PoolKind::kMax ? std::max(acc, s[hk * rp.n + x])
                                                   : acc + s[hk * rp.n + x];
        }
        pooled[hk * rp.n + j] = opt.pooling.kind == PoolKind::kMax ? acc : acc / opt.pooling.kernel;
      }
    s = pooled;
  }
  return s;
}

// Uniform selection reference: protected tokens plus the top scores of the rest, ties toward the
// lower position, sorted by position. [Hkv, n_keep].
inline std::vector<int32_t> ref_select(const std::vector<float>& scores, int hkv, int64_t n,
                                       int64_t n_keep, int sink, int window) {
  std::vector<int32_t> out;
  for (int h = 0; h < hkv; ++h) {
    std::vector<int32_t> prot, free_idx;
    for (int64_t j = 0; j < n; ++j)
      (j < sink || j >= n - window ? prot : free_idx).push_back(static_cast<int32_t>(j));
    const float* s = scores.data() + h * n;
    std::stable_sort(free_idx.begin(), free_idx.end(),
                     [&](int32_t a, int32_t b) { return s[a] > s[b]; });
    std::vector<int32_t> kept = prot;
    const int64_t take = n_keep - static_cast<int64_t>(prot.size());
    kept.insert(kept.end(), free_idx.begin(), free_idx.begin() + take);
    std::sort(kept.begin(), kept.end());
    out.insert(out.end(), kept.begin(), kept.end());
  }
  return out;
}

}  // namespace kvevict::cuda::testing
