// Which shapes and folds the decode step's GEMV (src/cuda/decode_gemv.cu) takes: gemv_supported's
// rules, host logic that CI runs (tests/CMakeLists.txt KVEVICT_HOST_ONLY_GPU_TESTS). A refused
// shape launches nothing (cudaErrorInvalidValue). tests/model_cuda/decode_gemv_test.cpp checks
// what the kernels compute for the shapes they take.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <initializer_list>

#include "cuda/model_launchers.h"

namespace kvevict {
namespace {

using gpu::detail::GemvArgs;
using gpu::detail::GemvOut;
using gpu::detail::RopeAppendArgs;

TEST(DecodeGemv, RefusesShapesItDoesNotCover) {
  GemvArgs a;
  static float buf[64] __attribute__((aligned(16)));
  a.x = buf;
  a.w = reinterpret_cast<const __nv_bfloat16*>(buf);
  a.y = buf;
  a.B = 1;
  a.N = 4;
  a.K = 16;
  EXPECT_TRUE(gpu::detail::gemv_supported(a));
  a.K = 12;  // not a multiple of 8
  EXPECT_FALSE(gpu::detail::gemv_supported(a));
  a.K = 16;
  a.B = gpu::detail::kGemvMaxBatch + 1;
  EXPECT_FALSE(gpu::detail::gemv_supported(a));
  a.B = 0;
  EXPECT_FALSE(gpu::detail::gemv_supported(a));
  a.B = 1;
  a.w = reinterpret_cast<const __nv_bfloat16*>(reinterpret_cast<const char*>(buf) + 2);
  EXPECT_FALSE(gpu::detail::gemv_supported(a));
  EXPECT_EQ(gpu::detail::launch_gemv(a, nullptr), cudaErrorInvalidValue);
}

// gemma3's folds: only on the preloaded batch-1 kernel with a normed input, the post fold not for
// the f32 outputs (the logits), each with its counters and arrays.
TEST(DecodeGemv, RefusesFoldsItDoesNotCover) {
  static float buf[4096] __attribute__((aligned(16)));
  auto* counters = reinterpret_cast<uint32_t*>(buf);
  GemvArgs a;
  a.x = buf;
  a.norm_w = buf;
  a.w = reinterpret_cast<const __nv_bfloat16*>(buf);
  a.y = buf;
  a.B = 1;
  a.N = 4;
  a.K = 16;
  a.post_in = buf;
  a.post_w = buf;
  a.x_out = buf;
  a.arrivals = counters;
  EXPECT_TRUE(gpu::detail::gemv_supported(a));
  // Each change of `base` alone makes the shape one the GEMV refuses.
  using Change = std::function<void(GemvArgs&)>;
  auto expect_refused = [](const GemvArgs& base, std::initializer_list<Change> changes) {
    int i = 0;
    for (const Change& change : changes) {
      GemvArgs b = base;
      change(b);
      EXPECT_FALSE(gpu::detail::gemv_supported(b)) << "change " << i++;
    }
  };
  expect_refused(a, {
                        [](GemvArgs& b) { b.preload = false; },
                        [](GemvArgs& b) { b.B = 2; },
                        // no longer one tile: not preloaded
                        [](GemvArgs& b) { b.K = gpu::detail::kGemvTileK + 8; },
                        [](GemvArgs& b) { b.norm_w = nullptr; },
                        [](GemvArgs& b) { b.arrivals = nullptr; },
                        [](GemvArgs& b) { b.x_out = nullptr; },
                        [](GemvArgs& b) { b.post_w = buf + 1; },  // not 16-byte aligned
                        [](GemvArgs& b) { b.out = GemvOut::kF32; },
                        [](GemvArgs& b) { b.out = GemvOut::kF32Add; },
                    });
  GemvArgs b = a;
  b.out = GemvOut::kGated;
  EXPECT_TRUE(gpu::detail::gemv_supported(b));

  // The head norms: q|k|v of 1 q head and 1 KV head of d = 8.
  GemvArgs h = a;
  h.post_in = nullptr;
  h.out = GemvOut::kRopeAppend;
  RopeAppendArgs& r = h.rope;
  r.decode = true;
  r.head_major = false;
  r.Hq = r.Hkv = 1;
  r.d = 8;
  h.N = (r.Hq + 2 * r.Hkv) * r.d;
  r.pos = reinterpret_cast<const int32_t*>(buf);
  r.inv_freq = reinterpret_cast<const double*>(buf);
  r.q_out = r.k_cache = r.v_cache = reinterpret_cast<__nv_bfloat16*>(buf);
  r.pos_cache = r.seg_len = reinterpret_cast<int32_t*>(buf);
  r.seg_off = reinterpret_cast<const int64_t*>(buf);
  EXPECT_TRUE(gpu::detail::gemv_supported(h));  // no norms: the plain RoPE epilogue
  r.q_norm = r.k_norm = buf;
  EXPECT_FALSE(gpu::detail::gemv_supported(h));  // no head counters
  h.head_arrivals = counters + 1;
  EXPECT_TRUE(gpu::detail::gemv_supported(h));
  GemvArgs g = h;
  g.post_in = buf;  // both folds
  EXPECT_TRUE(gpu::detail::gemv_supported(g));
  expect_refused(h, {
                        [](GemvArgs& b) { b.rope.k_norm = nullptr; },  // one norm, not the other
                        [](GemvArgs& b) { b.y = nullptr; },
                        [](GemvArgs& b) { b.preload = false; },
                        [](GemvArgs& b) { b.B = 2; },
                        // 6 pairs a head: a head's pairs do not fill whole blocks of 4 warps
                        [](GemvArgs& b) {
                          b.rope.d = 12;
                          b.N = 3 * 12;
                        },
                        [](GemvArgs& b) {  // past the fold's 256
                          b.rope.d = 264;
                          b.N = 3 * 264;
                        },
                    });
  g = h;
  g.rope.d = 256;
  g.N = 3 * 256;
  EXPECT_TRUE(gpu::detail::gemv_supported(g));
}

}  // namespace
}  // namespace kvevict
