// The C API (include/kvevict/kvevict.h) against the C++ API it wraps: the same selections,
// scores, compacted caches and decode cuts for the same inputs; every failure a status and a
// message naming the bad value, with the out-parameters untouched.
#include "kvevict/kvevict.h"

#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/parallel.h"
#include "kvevict/attention.h"
#include "kvevict/cache.h"
#include "kvevict/decode_evict.h"
#include "kvevict/evict.h"
#include "kvevict/model/evict_config.h"
#include "score/problem_builder.h"
#include "support/testing.h"

namespace kvevict {
namespace {

// The log-sum-exp [Hq] of a decode step's queries q [Hq, d] over every head's rows of an f32
// cache, at the default scale 1/sqrt(d) (the double reference attention, the query after every
// row): what the attention hands the decode evictor. Written into `lse` in place (step tensors
// point at its buffer).
void step_lse(const KVLayerView& c, const std::vector<float>& q, std::vector<float>& lse) {
  const int d = c.head_dim;
  const int hq = static_cast<int>(q.size()) / d;
  const int32_t q_pos = INT32_MAX;  // sees every row
  AttentionProblem p;
  p.q = TensorView(const_cast<float*>(q.data()), DType::kF32, {hq, 1, d});
  p.q_pos = &q_pos;
  p.cache = c;
  std::vector<double> out, ref_lse;
  ref::attention(p, out, &ref_lse);
  for (int h = 0; h < hq; ++h) lse[h] = static_cast<float>(ref_lse[h]);
}

std::string last_error() {
  return kvevict_last_error();
}

// Owning wrappers so a failed ASSERT never leaks a handle (LeakSanitizer runs these tests).
struct BackendDeleter {
  void operator()(kvevict_backend* b) const { kvevict_backend_destroy(b); }
};
struct EvictorDeleter {
  void operator()(kvevict_layer_evictor* e) const { kvevict_layer_evictor_destroy(e); }
};
struct SelectionDeleter {
  void operator()(kvevict_selection* s) const { kvevict_selection_destroy(s); }
};
struct DecodeDeleter {
  void operator()(kvevict_decode_evictor* e) const { kvevict_decode_evictor_destroy(e); }
};
using BackendPtr = std::unique_ptr<kvevict_backend, BackendDeleter>;
using EvictorPtr = std::unique_ptr<kvevict_layer_evictor, EvictorDeleter>;
using SelectionPtr = std::unique_ptr<kvevict_selection, SelectionDeleter>;
using DecodePtr = std::unique_ptr<kvevict_decode_evictor, DecodeDeleter>;

BackendPtr backend(const char* name) {
  kvevict_backend* b = nullptr;
  EXPECT_EQ(kvevict_backend_create(name, nullptr, &b), KVEVICT_OK) << last_error();
  return BackendPtr(b);
}

kvevict_tensor c_tensor(const TensorView& t) {
  kvevict_tensor c{};
  c.data = t.data;
  c.ndim = t.ndim;
  for (int i = 0; i < t.ndim; ++i) {
    c.shape[i] = t.shape[i];
    c.strides[i] = t.stride[i];
  }
  c.dtype = t.dtype == DType::kF32    ? KVEVICT_DTYPE_F32
            : t.dtype == DType::kBF16 ? KVEVICT_DTYPE_BF16
            : t.dtype == DType::kF16  ? KVEVICT_DTYPE_F16
                                      : KVEVICT_DTYPE_F64;
  c.device = KVEVICT_DEVICE_CPU;
  return c;
}

kvevict_kv_layer c_layer(const KVLayerView& v) {
  kvevict_kv_layer c{};
  c.k = v.k;
  c.v = v.v;
  c.pos = v.pos;
  c.score_acc = v.score_acc;
  c.offsets = v.offsets;
  c.lens = v.lens;
  c.dtype = v.dtype == DType::kF32    ? KVEVICT_DTYPE_F32
            : v.dtype == DType::kBF16 ? KVEVICT_DTYPE_BF16
                                      : KVEVICT_DTYPE_F16;
  c.device = KVEVICT_DEVICE_CPU;
  c.num_kv_heads = v.num_kv_heads;
  c.head_dim = v.head_dim;
  return c;
}

// A C cache over caller arrays (host, no score_acc).
kvevict_kv_layer raw_layer(void* k, void* v, int32_t* pos, const int64_t* offsets, int64_t* lens,
                           int32_t dtype, int32_t hkv, int32_t d) {
  kvevict_kv_layer c{};
  c.k = k;
  c.v = v;
  c.pos = pos;
  c.offsets = offsets;
  c.lens = lens;
  c.dtype = dtype;
  c.device = KVEVICT_DEVICE_CPU;
  c.num_kv_heads = hkv;
  c.head_dim = d;
  return c;
}

std::vector<int64_t> host_offsets(const kvevict_selection* s) {
  const int64_t* off = nullptr;
  const int32_t* idx = nullptr;
  EXPECT_EQ(kvevict_selection_host_arrays(s, &off, &idx), KVEVICT_OK) << last_error();
  return off ? std::vector<int64_t>(off, off + kvevict_selection_num_kv_heads(s) + 1)
             : std::vector<int64_t>();
}
std::vector<int32_t> host_index(const kvevict_selection* s) {
  const int64_t* off = nullptr;
  const int32_t* idx = nullptr;
  EXPECT_EQ(kvevict_selection_host_arrays(s, &off, &idx), KVEVICT_OK) << last_error();
  return idx ? std::vector<int32_t>(idx, idx + kvevict_selection_total(s)) : std::vector<int32_t>();
}

struct Case {
  const char* method;
  double budget;
  int64_t m;  // queries handed in (h2o needs all n)
  int64_t wo_rows = 0;
};

// The C API and PrefillEviction::make (the one method -> eviction mapping of the model runtime)
// give the same selection, scores and compacted cache on `backend_name`.
void check_same_as_cpp(const char* backend_name, const Case& c, bool token_major) {
  SCOPED_TRACE(::testing::Message() << backend_name << " " << c.method << " budget " << c.budget
                                    << (token_major ? " token-major K/V" : ""));
  const int64_t n = 61;
  testing::ProblemBuilder b(testing::make_shape(2, 3, c.m, n, 16, c.wo_rows), 7, DType::kF32, 1.5f,
                            token_major);
  const ScoreProblem& p = b.problem();

  const PrefillEviction cfg = PrefillEviction::make(method_parse(c.method), Budget{c.budget});
  std::unique_ptr<Backend> cpp_backend =
      std::string(backend_name) == "cpu" ? make_cpu_backend() : make_reference_backend();
  LayerEvictor cpp(*cpp_backend, cfg.score, cfg.select);
  const Selection want = cpp.plan(p);
  const TensorView want_scores = cpp.last_scores();

  BackendPtr be = backend(backend_name);
  kvevict_evict_options o;
  kvevict_evict_options_init(&o);
  o.method = c.method;
  o.budget = c.budget;
  kvevict_layer_evictor* ev_raw = nullptr;
  ASSERT_EQ(kvevict_layer_evictor_create(be.get(), &o, &ev_raw), KVEVICT_OK) << last_error();
  EvictorPtr ev(ev_raw);
  EXPECT_EQ(std::string(kvevict_layer_evictor_describe(ev.get())), cpp.describe());

  const kvevict_tensor q = c_tensor(p.q), k = c_tensor(p.k), v = c_tensor(p.v);
  const kvevict_tensor wo = c_tensor(p.wo);
  kvevict_selection* sel_raw = nullptr;
  ASSERT_EQ(kvevict_layer_evictor_plan(ev.get(), c.m > 0 ? &q : nullptr, &k, &v,
                                       c.wo_rows > 0 ? &wo : nullptr, 0.0f, KVEVICT_RESIDENCY_HOST,
                                       &sel_raw),
            KVEVICT_OK)
      << last_error();
  SelectionPtr sel(sel_raw);
  EXPECT_EQ(kvevict_selection_num_kv_heads(sel.get()), want.num_kv_heads);
  EXPECT_EQ(kvevict_selection_total(sel.get()), want.total());
  EXPECT_EQ(host_offsets(sel.get()), want.offsets);
  EXPECT_EQ(host_index(sel.get()), want.index);
  EXPECT_EQ(std::string(kvevict_selection_warning(sel.get())), want.warning);

  kvevict_tensor scores{};
  ASSERT_EQ(kvevict_layer_evictor_last_scores(ev.get(), &scores), KVEVICT_OK) << last_error();
  ASSERT_EQ(scores.ndim, 2);
  EXPECT_EQ(scores.shape[0], 2);
  EXPECT_EQ(scores.shape[1], n);
  EXPECT_EQ(scores.dtype, KVEVICT_DTYPE_F32);
  EXPECT_EQ(std::memcmp(scores.data, want_scores.data, sizeof(float) * 2 * n), 0);

  // Compaction: the C call into a cache sized by kvevict_selection_plan_offsets, against the C++
  // call into one sized by cache_plan_offsets.
  HostKVCache full = HostKVCache::from_dense(p.k, p.v, DType::kBF16);
  HostKVCache want_cache = cache_allocate_for(full.view(), want, 3);
  cpp.apply(full.view(), want, want_cache.view());

  std::vector<int64_t> offsets(2 + 1, -7);
  ASSERT_EQ(kvevict_selection_plan_offsets(sel.get(), 3, offsets.data(), offsets.size()),
            KVEVICT_OK)
      << last_error();
  EXPECT_EQ(offsets, cache_plan_offsets(want, 3));
  const int64_t rows = offsets.back();
  std::vector<uint16_t> ok(rows * 16), ov(rows * 16);
  std::vector<int32_t> opos(rows, -1);
  std::vector<int64_t> olens(2, 0);
  const kvevict_kv_layer out = raw_layer(ok.data(), ov.data(), opos.data(), offsets.data(),
                                         olens.data(), KVEVICT_DTYPE_BF16, 2, 16);
  const kvevict_kv_layer in = c_layer(full.view());
  ASSERT_EQ(kvevict_layer_evictor_apply(ev.get(), &in, sel.get(), &out), KVEVICT_OK)
      << last_error();
  const KVLayerView w = want_cache.view();
  for (int h = 0; h < 2; ++h) {
    ASSERT_EQ(olens[h], w.lens[h]);
    for (int64_t i = 0; i < olens[h]; ++i) {
      const int64_t r = offsets[h] + i;
      ASSERT_EQ(opos[r], w.pos[r]);
      ASSERT_EQ(std::memcmp(&ok[r * 16], static_cast<uint16_t*>(w.k) + r * 16, 32), 0);
      ASSERT_EQ(std::memcmp(&ov[r * 16], static_cast<uint16_t*>(w.v) + r * 16, 32), 0);
    }
  }
}

TEST(CApi, LayerEvictorEqualsCppOnEveryHostBackend) {
  const Case cases[] = {
      {"dropkv:spec", 0.25, 8}, {"adadropkv:spec", 0.3, 8}, {"obcache_vk:spec", 0.4, 16},
      {"dropkv", 0.25, 32},     {"adadropkv", 0.3, 40},     {"obcache_vk", 0.4, 32},
      {"snapkv", 0.5, 32},      {"h2o", 0.3, 61},           {"tova", 0.2, 1},
      {"streamingllm", 12, 0},  {"knorm", 0.5, 0},          {"criticalkv", 0.4, 32, 24},
      {"random", 0.3, 0},       {"vatp", 20, 32},
  };
  for (const char* be : {"cpu", "reference"})
    for (const Case& c : cases) check_same_as_cpp(be, c, false);
  // Strided K/V (token-major memory viewed as [Hkv, n, d]) through kvevict_tensor.strides.
  check_same_as_cpp("cpu", {"dropkv:spec", 0.25, 8}, true);
}

TEST(CApi, OptionOverridesMatchTheCppOptions) {
  BackendPtr be = backend("cpu");
  kvevict_evict_options o;
  kvevict_evict_options_init(&o);
  EXPECT_EQ(o.struct_size, sizeof(kvevict_evict_options));
  EXPECT_STREQ(o.method, "dropkv");
  o.method = "snapkv";
  o.budget = 64;
  o.policy = "adakv";
  o.pooling = "avg:5";
  o.window = 12;
  o.sink = 2;
  o.alpha = 0.5;
  kvevict_layer_evictor* ev = nullptr;
  ASSERT_EQ(kvevict_layer_evictor_create(be.get(), &o, &ev), KVEVICT_OK) << last_error();
  EvictorPtr hold(ev);

  ScoreOptions score = ScoreOptions::defaults(Method::kSnapKV);
  score.pooling = Pooling::parse("avg:5");
  score.window = 12;
  SelectOptions select;
  select.policy = Policy::kAdaKV;
  select.budget = Budget{64};
  select.sink = 2;
  select.alpha = 0.5;
  select.window = 12;
  auto cpu = make_cpu_backend();
  EXPECT_EQ(std::string(kvevict_layer_evictor_describe(ev)),
            LayerEvictor(*cpu, score, select).describe());

  // The all-queries aggregation protects no window (observation_window, kvevict/method.h).
  kvevict_evict_options_init(&o);
  o.aggregate = "h2o";
  o.window = 8;
  ASSERT_EQ(kvevict_layer_evictor_create(be.get(), &o, &ev), KVEVICT_OK) << last_error();
  EvictorPtr hold2(ev);
  EXPECT_NE(std::string(kvevict_layer_evictor_describe(ev)).find("aggregate=h2o"),
            std::string::npos)
      << kvevict_layer_evictor_describe(ev);
  EXPECT_NE(std::string(kvevict_layer_evictor_describe(ev)).find(" window=0"), std::string::npos)
      << kvevict_layer_evictor_describe(ev);
}

// Every refusal: the status, a message that names the bad value, out-parameters untouched.
TEST(CApi, BadInputIsAStatusAndAMessage) {
  BackendPtr be = backend("cpu");
  kvevict_evict_options o;
  auto create_fails = [&](const std::string& needle) {
    kvevict_layer_evictor* sentinel = reinterpret_cast<kvevict_layer_evictor*>(0x1);
    kvevict_layer_evictor* ev = sentinel;
    EXPECT_EQ(kvevict_layer_evictor_create(be.get(), &o, &ev), KVEVICT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(ev, sentinel);
    EXPECT_NE(last_error().find(needle), std::string::npos) << last_error();
    EXPECT_EQ(last_error().rfind("kvevict_layer_evictor_create: ", 0), 0u) << last_error();
  };
  kvevict_evict_options_init(&o);
  o.method = "dropkvv";
  create_fails("dropkvv");
  kvevict_evict_options_init(&o);
  o.method = nullptr;
  create_fails("options.method is NULL");
  for (double bad : {0.0, -1.0, 2.5, std::nan(""), std::numeric_limits<double>::infinity()}) {
    kvevict_evict_options_init(&o);
    o.budget = bad;
    create_fails("options.budget");
  }
  kvevict_evict_options_init(&o);
  o.struct_size = 8;
  create_fails("options.struct_size 8 is too small");
  kvevict_evict_options_init(&o);
  o.pooling = "max:4";
  create_fails("pooling 'max:4'");
  kvevict_evict_options_init(&o);
  o.policy = "fair";
  create_fails("fair");
  kvevict_evict_options_init(&o);
  o.alpha = 1.5;
  create_fails("alpha 1.5");
  kvevict_evict_options_init(&o);
  o.window = -2;
  create_fails("options.window -2");

  kvevict_evict_options_init(&o);
  o.window = 8;  // the 8 queries below
  kvevict_layer_evictor* ev = nullptr;
  EXPECT_EQ(kvevict_layer_evictor_create(nullptr, &o, &ev), KVEVICT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("backend is NULL"), std::string::npos) << last_error();
  ASSERT_EQ(kvevict_layer_evictor_create(be.get(), &o, &ev), KVEVICT_OK);
  EXPECT_EQ(last_error(), "");  // success clears the message
  EvictorPtr hold(ev);

  testing::ProblemBuilder b(testing::make_shape(2, 2, 8, 20, 8), 3);
  kvevict_tensor q = c_tensor(b.problem().q), k = c_tensor(b.problem().k),
                 v = c_tensor(b.problem().v);
  auto plan_fails = [&](kvevict_status want, const std::string& needle, const kvevict_tensor* qq,
                        const kvevict_tensor* kk, const kvevict_tensor* vv, int32_t residency) {
    kvevict_selection* sentinel = reinterpret_cast<kvevict_selection*>(0x1);
    kvevict_selection* s = sentinel;
    EXPECT_EQ(kvevict_layer_evictor_plan(ev, qq, kk, vv, nullptr, 0.0f, residency, &s), want);
    EXPECT_EQ(s, sentinel);
    EXPECT_NE(last_error().find(needle), std::string::npos) << last_error();
  };
  plan_fails(KVEVICT_ERROR_INVALID_ARGUMENT, "k is NULL", &q, nullptr, &v, 0);
  plan_fails(KVEVICT_ERROR_INVALID_ARGUMENT, "residency 7", &q, &k, &v, 7);
  kvevict_tensor bad = k;
  bad.dtype = 42;
  plan_fails(KVEVICT_ERROR_INVALID_ARGUMENT, "k dtype 42 is not a kvevict_dtype", &q, &bad, &v, 0);
  bad = k;
  bad.ndim = 5;
  plan_fails(KVEVICT_ERROR_INVALID_ARGUMENT, "k has ndim 5", &q, &bad, &v, 0);
  bad = k;
  bad.device = KVEVICT_DEVICE_CUDA;
  kvevict_tensor badq = q, badv = v;
  badq.device = badv.device = KVEVICT_DEVICE_CUDA;
  plan_fails(KVEVICT_ERROR_INVALID_ARGUMENT, "than the cpu backend", &badq, &bad, &badv, 0);
  bad = k;
  bad.shape[1] = 19;  // k and v disagree: the C++ check's message comes through
  plan_fails(KVEVICT_ERROR_INVALID_ARGUMENT, "[2, 19, 8]", &q, &bad, &v, 0);
  plan_fails(KVEVICT_ERROR_INVALID_ARGUMENT, "q", nullptr, &k, &v, 0);  // dropkv needs queries

  EXPECT_EQ(kvevict_layer_evictor_last_scores(ev, &q), KVEVICT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("no scores yet"), std::string::npos) << last_error();
  EXPECT_EQ(kvevict_layer_evictor_apply(ev, nullptr, nullptr, nullptr),
            KVEVICT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("selection is NULL"), std::string::npos) << last_error();

  EXPECT_EQ(kvevict_set_num_threads(-1), KVEVICT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("thread count -1"), std::string::npos) << last_error();
}

TEST(CApi, BackendsByName) {
  BackendPtr cpu = backend("cpu");
  BackendPtr ref = backend("reference");
  EXPECT_STREQ(kvevict_backend_name(cpu.get()), "cpu");
  EXPECT_STREQ(kvevict_backend_name(ref.get()), "reference");
  EXPECT_EQ(kvevict_backend_device(cpu.get()), KVEVICT_DEVICE_CPU);
  EXPECT_EQ(kvevict_backend_synchronize(cpu.get()), KVEVICT_OK);
  EXPECT_EQ(kvevict_backend_name(nullptr), nullptr);
  EXPECT_EQ(kvevict_backend_device(nullptr), -1);

  kvevict_backend* b = reinterpret_cast<kvevict_backend*>(0x1);
  EXPECT_EQ(kvevict_backend_create("gpu", nullptr, &b), KVEVICT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(),
            "kvevict_backend_create: backend 'gpu' is unknown; expected cpu, reference or cuda");
  int stream = 0;
  EXPECT_EQ(kvevict_backend_create("cpu", &stream, &b), KVEVICT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("takes no stream"), std::string::npos) << last_error();
  EXPECT_EQ(b, reinterpret_cast<kvevict_backend*>(0x1));
  EXPECT_EQ(kvevict_backend_create(nullptr, nullptr, &b), KVEVICT_ERROR_INVALID_ARGUMENT);
  kvevict_backend_destroy(nullptr);  // a no-op
}

// This binary does not link libkvevict_cuda, so "cuda" goes through the loader: with the library
// pointed at a missing file it must say so, in every build (the first load decides for the
// process, hence the variable is set before anything asks for the cuda backend).
TEST(CApi, CudaBackendSaysWhyItIsUnavailable) {
  setenv("KVEVICT_CUDA_LIBRARY", "/nonexistent/libkvevict_cuda.so", 1);
  kvevict_backend* b = nullptr;
  EXPECT_EQ(kvevict_backend_create("cuda", nullptr, &b), KVEVICT_ERROR_UNAVAILABLE);
  EXPECT_EQ(b, nullptr);
  EXPECT_EQ(last_error().rfind("kvevict_backend_create: the cuda backend is unavailable: "
                               "KVEVICT_CUDA_LIBRARY=/nonexistent/libkvevict_cuda.so could not "
                               "be loaded (",
                               0),
            0u)
      << last_error();
  unsetenv("KVEVICT_CUDA_LIBRARY");
}

TEST(CApi, StatusNamesVersionAndThreads) {
  EXPECT_STREQ(kvevict_status_name(KVEVICT_OK), "ok");
  EXPECT_STREQ(kvevict_status_name(KVEVICT_ERROR_INVALID_ARGUMENT), "invalid argument");
  EXPECT_STREQ(kvevict_status_name(KVEVICT_ERROR_UNAVAILABLE), "unavailable");
  EXPECT_STREQ(kvevict_status_name(KVEVICT_ERROR_OUT_OF_MEMORY), "out of memory");
  EXPECT_STREQ(kvevict_status_name(KVEVICT_ERROR_DEVICE), "device error");
  EXPECT_STREQ(kvevict_status_name(KVEVICT_ERROR_INTERNAL), "internal error");
  EXPECT_STREQ(kvevict_status_name(static_cast<kvevict_status>(99)), "unknown status");
  EXPECT_EQ(kvevict_c_api_version(), KVEVICT_C_API_VERSION);
  const std::string version = kvevict_version();
  int major = -1, minor = -1, patch = -1;
  ASSERT_EQ(std::sscanf(version.c_str(), "%d.%d.%d", &major, &minor, &patch), 3) << version;

  const int before = num_threads();
  ASSERT_EQ(kvevict_set_num_threads(1), KVEVICT_OK);
  EXPECT_EQ(kvevict_num_threads(), 1);
  EXPECT_EQ(num_threads(), 1);
  set_num_threads(before);
  EXPECT_EQ(kvevict_num_threads(), num_threads());
}

TEST(CApi, LastErrorIsPerThread) {
  kvevict_backend* b = nullptr;
  ASSERT_EQ(kvevict_backend_create("nope", nullptr, &b), KVEVICT_ERROR_INVALID_ARGUMENT);
  const std::string mine = last_error();
  std::string theirs_before, theirs_after;
  std::thread t([&] {
    theirs_before = kvevict_last_error();
    kvevict_backend* other = nullptr;
    kvevict_backend_create("other", nullptr, &other);
    theirs_after = kvevict_last_error();
  });
  t.join();
  EXPECT_EQ(theirs_before, "");
  EXPECT_NE(theirs_after.find("'other'"), std::string::npos) << theirs_after;
  EXPECT_EQ(last_error(), mine);
}

// An evictor keeps its backend alive: destroying the backend handle first is safe (ASan checks).
TEST(CApi, EvictorOutlivesItsBackendHandle) {
  kvevict_backend* be = nullptr;
  ASSERT_EQ(kvevict_backend_create("cpu", nullptr, &be), KVEVICT_OK);
  kvevict_evict_options o;
  kvevict_evict_options_init(&o);
  o.method = "knorm";
  kvevict_layer_evictor* ev = nullptr;
  ASSERT_EQ(kvevict_layer_evictor_create(be, &o, &ev), KVEVICT_OK) << last_error();
  EvictorPtr hold(ev);
  kvevict_backend_destroy(be);
  testing::ProblemBuilder b(testing::make_shape(1, 1, 1, 10, 8), 5);
  const kvevict_tensor k = c_tensor(b.problem().k), v = c_tensor(b.problem().v);
  kvevict_selection* s = nullptr;
  ASSERT_EQ(
      kvevict_layer_evictor_plan(ev, nullptr, &k, &v, nullptr, 0.0f, KVEVICT_RESIDENCY_HOST, &s),
      KVEVICT_OK)
      << last_error();
  SelectionPtr hs(s);
  EXPECT_EQ(kvevict_selection_total(s), 1);  // floor(0.1 * 10)
}

TEST(CApi, SelectionAccessorsAndSizing) {
  BackendPtr be = backend("cpu");
  kvevict_evict_options o;
  kvevict_evict_options_init(&o);
  o.budget = 2;  // below dropkv's protected window of 8: a warning, the window is kept
  o.window = 8;
  kvevict_layer_evictor* ev = nullptr;
  ASSERT_EQ(kvevict_layer_evictor_create(be.get(), &o, &ev), KVEVICT_OK) << last_error();
  EvictorPtr hold(ev);
  testing::ProblemBuilder b(testing::make_shape(3, 1, 8, 30, 8), 9);
  const kvevict_tensor q = c_tensor(b.problem().q), k = c_tensor(b.problem().k),
                       v = c_tensor(b.problem().v);
  kvevict_selection* s = nullptr;
  ASSERT_EQ(kvevict_layer_evictor_plan(ev, &q, &k, &v, nullptr, 0.0f, KVEVICT_RESIDENCY_DEVICE, &s),
            KVEVICT_OK)
      << last_error();
  SelectionPtr hs(s);
  // A host backend returns a host selection whatever residency asks.
  EXPECT_EQ(kvevict_selection_total(s), 3 * 8);
  EXPECT_NE(std::string(kvevict_selection_warning(s)), "");
  const int64_t* doff = nullptr;
  const int32_t* didx = nullptr;
  EXPECT_EQ(kvevict_selection_device_arrays(s, &doff, &didx), KVEVICT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("in host memory"), std::string::npos) << last_error();
  EXPECT_EQ(doff, nullptr);

  std::vector<int64_t> off(3, 0);  // one short
  EXPECT_EQ(kvevict_selection_plan_offsets(s, 0, off.data(), off.size()),
            KVEVICT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("offsets holds 3 elements; expected at least 4"), std::string::npos)
      << last_error();
  EXPECT_EQ(off, std::vector<int64_t>(3, 0));
  off.resize(4);
  EXPECT_EQ(kvevict_selection_plan_offsets(s, -1, off.data(), off.size()),
            KVEVICT_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(kvevict_selection_plan_offsets(s, 2, off.data(), off.size()), KVEVICT_OK);
  EXPECT_EQ(off, (std::vector<int64_t>{0, 10, 20, 30}));

  // The backend writes the same table into a cache view.
  std::vector<int64_t> boff(4, -1), blens(3, -1);
  std::vector<float> kk(30 * 8), vv(30 * 8);
  std::vector<int32_t> pos(30);
  const kvevict_kv_layer out = raw_layer(kk.data(), vv.data(), pos.data(), boff.data(),
                                         blens.data(), KVEVICT_DTYPE_F32, 3, 8);
  ASSERT_EQ(kvevict_backend_plan_segments(be.get(), s, 2, &out), KVEVICT_OK) << last_error();
  EXPECT_EQ(boff, off);  // (the lens are the compaction's to set)

  EXPECT_EQ(kvevict_selection_total(nullptr), -1);
  EXPECT_EQ(kvevict_selection_num_kv_heads(nullptr), -1);
  EXPECT_STREQ(kvevict_selection_warning(nullptr), "");
}

// DecodeEvictor and cache_append through C, against the C++ evictor on a copy of the cache.
TEST(CApi, DecodeEvictorEqualsCpp) {
  const int hkv = 2, hq = 4, d = 8;
  const int64_t n = 20;
  for (const char* score : {"h2o", "tova", "dropkv", "obcache_vk"}) {
    SCOPED_TRACE(score);
    kvevict_decode_options o;
    kvevict_decode_options_init(&o);
    const DecodeEvictOptions defaults;
    EXPECT_EQ(o.recent, defaults.recent);
    EXPECT_EQ(o.one_minus_p_floor, defaults.one_minus_p_floor);
    o.score = score;
    o.budget = 9;
    o.slack = 2;
    o.recent = 3;
    o.sink = 1;
    kvevict_decode_evictor* ev = nullptr;
    ASSERT_EQ(kvevict_decode_evictor_create(nullptr, &o, &ev), KVEVICT_OK) << last_error();
    DecodePtr hold(ev);
    EXPECT_EQ(kvevict_decode_evictor_capacity_per_head(ev), 9 + 2 + 1);

    DecodeEvictOptions co;
    co.score = decode_score_parse(score);
    co.budget = 9;
    co.slack = 2;
    co.recent = 3;
    co.sink = 1;
    const DecodeEvictor cpp(co);

    const std::vector<float> kd = testing::normal_floats(hkv * n * d, 1);
    const std::vector<float> vd = testing::normal_floats(hkv * n * d, 2);
    // 11 rows a head (one under the cut: 9 + 2), capacity 12; the C cache and the C++ one.
    HostKVCache mine(DType::kF32, hkv, d, {12, 12}, true),
        theirs(DType::kF32, hkv, d, {12, 12}, true);
    std::vector<float> row_k(hkv * d), row_v(hkv * d);
    for (int32_t t = 0; t < 11; ++t) {
      for (int h = 0; h < hkv; ++h)
        for (int j = 0; j < d; ++j) {
          row_k[h * d + j] = kd[(h * n + t) * d + j];
          row_v[h * d + j] = vd[(h * n + t) * d + j];
        }
      const TensorView rk(row_k.data(), DType::kF32, {hkv, d}),
          rv(row_v.data(), DType::kF32, {hkv, d});
      cache_append(theirs.view(), rk, rv, t);
      const kvevict_kv_layer c = c_layer(mine.view());
      const kvevict_tensor ck = c_tensor(rk), cv = c_tensor(rv);
      ASSERT_EQ(kvevict_cache_append(&c, &ck, &cv, t), KVEVICT_OK) << last_error();
    }
    // A step that pushes every head over budget + slack after the append of row 11.
    const std::vector<float> qd = testing::normal_floats(hq * d, 3);
    const std::vector<float> ad = testing::normal_floats(hq * d, 4, 0.3f);
    std::vector<float> lse(hq);
    const TensorView q(const_cast<float*>(qd.data()), DType::kF32, {hq, d});
    const TensorView a(const_cast<float*>(ad.data()), DType::kF32, {hq, d});
    const TensorView l(lse.data(), DType::kF32, {hq});
    for (int h = 0; h < hkv; ++h)
      for (int j = 0; j < d; ++j) {
        row_k[h * d + j] = kd[(h * n + 11) * d + j];
        row_v[h * d + j] = vd[(h * n + 11) * d + j];
      }
    const TensorView rk(row_k.data(), DType::kF32, {hkv, d}),
        rv(row_v.data(), DType::kF32, {hkv, d});
    cache_append(theirs.view(), rk, rv, 11);
    // The step's lse over the 12 rows of each head (the evictor checks it against q and the
    // cache; `a` is only read by the scores, any values do).
    step_lse(theirs.view(), qd, lse);
    const kvevict_kv_layer c = c_layer(mine.view());
    const kvevict_tensor ck = c_tensor(rk), cv = c_tensor(rv);
    ASSERT_EQ(kvevict_cache_append(&c, &ck, &cv, 11), KVEVICT_OK) << last_error();

    const int64_t want = cpp.step(theirs.view(), DecodeStep{q, a, l});
    const kvevict_tensor cq = c_tensor(q), ca = c_tensor(a), cl = c_tensor(l);
    int64_t evicted = -1;
    ASSERT_EQ(kvevict_decode_evictor_step(ev, &c, &cq, &ca, &cl, &evicted), KVEVICT_OK)
        << last_error();
    EXPECT_EQ(evicted, want);
    EXPECT_EQ(want, 2 * (12 - 9));
    const KVLayerView x = mine.view(), y = theirs.view();
    for (int h = 0; h < hkv; ++h) {
      ASSERT_EQ(x.lens[h], y.lens[h]);
      for (int64_t i = 0; i < x.lens[h]; ++i) {
        const int64_t r = x.offsets[h] + i;
        EXPECT_EQ(x.pos[r], y.pos[r]);
        EXPECT_EQ(x.score_acc[r], y.score_acc[r]);
      }
    }
    // Nothing over budget now: accumulate + evict as two calls evict nothing (the lse of the
    // cut cache: the old one belongs to rows that are gone, and is refused).
    EXPECT_NE(kvevict_decode_evictor_accumulate(ev, &c, &cq, &ca, &cl), KVEVICT_OK);
    EXPECT_NE(std::string(kvevict_last_error()).find("step lse["), std::string::npos);
    step_lse(theirs.view(), qd, lse);
    ASSERT_EQ(kvevict_decode_evictor_accumulate(ev, &c, &cq, &ca, &cl), KVEVICT_OK) << last_error();
    ASSERT_EQ(kvevict_decode_evictor_evict(ev, &c, &evicted), KVEVICT_OK) << last_error();
    EXPECT_EQ(evicted, 0);
  }

  kvevict_decode_options o;
  kvevict_decode_options_init(&o);
  kvevict_decode_evictor* ev = reinterpret_cast<kvevict_decode_evictor*>(0x1);
  EXPECT_EQ(kvevict_decode_evictor_create(nullptr, &o, &ev), KVEVICT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("budget"), std::string::npos) << last_error();  // budget 0
  o.budget = 4;
  o.score = "snapkv";
  EXPECT_EQ(kvevict_decode_evictor_create(nullptr, &o, &ev), KVEVICT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("snapkv"), std::string::npos) << last_error();
  EXPECT_EQ(ev, reinterpret_cast<kvevict_decode_evictor*>(0x1));
  EXPECT_EQ(kvevict_decode_evictor_capacity_per_head(nullptr), -1);
}

// Bad caches and decode steps through the C API: each call fails with a status and a message that
// names the bad value, leaves the cache and the out-parameters as they were, and never crashes.
TEST(CApi, BadCachesAndStepsAreAStatusAndAMessage) {
  const int hkv = 2, hq = 4, d = 8;
  HostKVCache cache(DType::kF32, hkv, d, {3, 3}, true);
  const kvevict_kv_layer good = c_layer(cache.view());
  std::vector<float> rk(hkv * d, 0.5f), rv(hkv * d, 0.25f);
  const TensorView k_row(rk.data(), DType::kF32, {hkv, d}), v_row(rv.data(), DType::kF32, {hkv, d});
  const kvevict_tensor ck = c_tensor(k_row), cv = c_tensor(v_row);
  auto fails = [](kvevict_status got, const std::string& needle, const char* function) {
    EXPECT_EQ(got, KVEVICT_ERROR_INVALID_ARGUMENT) << needle;
    EXPECT_NE(last_error().find(needle), std::string::npos) << last_error();
    EXPECT_EQ(last_error().rfind(std::string(function) + ": ", 0), 0u) << last_error();
  };
  auto append_fails = [&](const kvevict_kv_layer* c, const kvevict_tensor* k,
                          const kvevict_tensor* v, const std::string& needle) {
    fails(kvevict_cache_append(c, k, v, 7), needle, "kvevict_cache_append");
    EXPECT_EQ(cache.view().lens[0], 0);  // nothing written
  };
  append_fails(nullptr, &ck, &cv, "cache is NULL");
  append_fails(&good, nullptr, &cv, "k_row is NULL");
  kvevict_kv_layer bad = good;
  bad.num_kv_heads = 0;
  append_fails(&bad, &ck, &cv, "num_kv_heads 0");
  bad = good;
  bad.head_dim = -3;
  append_fails(&bad, &ck, &cv, "head_dim -3");
  bad = good;
  bad.dtype = 42;
  append_fails(&bad, &ck, &cv, "dtype 42 is not a kvevict_dtype");
  bad = good;
  bad.dtype = KVEVICT_DTYPE_I32;
  append_fails(&bad, &ck, &cv, "dtype i32 is not supported");
  bad = good;
  bad.device = 9;
  append_fails(&bad, &ck, &cv, "device 9 is not a kvevict_device");
  bad = good;
  bad.k = nullptr;
  append_fails(&bad, &ck, &cv, "k, v or pos is null");
  bad = good;
  bad.offsets = nullptr;  // a host cache needs its host table
  append_fails(&bad, &ck, &cv, "offsets or lens is null");
  const std::vector<int64_t> decreasing = {0, 3, 2};
  bad = good;
  bad.offsets = decreasing.data();
  append_fails(&bad, &ck, &cv, "offsets decrease at head 1 (3 -> 2)");
  const std::vector<int64_t> shifted = {1, 4, 7};
  bad = good;
  bad.offsets = shifted.data();
  append_fails(&bad, &ck, &cv, "offsets[0] is 1");
  std::vector<int64_t> lens = {4, 0};
  bad = good;
  bad.lens = lens.data();
  fails(kvevict_cache_append(&bad, &ck, &cv, 7), "head 0 length 4 exceeds its capacity 3",
        "kvevict_cache_append");
  EXPECT_EQ(lens, (std::vector<int64_t>{4, 0}));
  kvevict_tensor wide = ck;
  wide.shape[0] = hkv + 1;
  append_fails(&good, &wide, &cv, "k_row");
  kvevict_tensor ints = ck;
  ints.dtype = KVEVICT_DTYPE_I64;  // a dtype kvevict has, the wrong one for a row
  ints.shape[1] = d / 2;           // and a shape that would read past the buffer
  append_fails(&good, &ints, &cv, "k_row");
  for (int32_t t = 0; t < 3; ++t) ASSERT_EQ(kvevict_cache_append(&good, &ck, &cv, t), KVEVICT_OK);
  fails(kvevict_cache_append(&good, &ck, &cv, 3), "cannot append to KV head 0: its segment is full",
        "kvevict_cache_append");
  EXPECT_EQ(cache.view().lens[0], 3);

  // Decode: the cache and every step tensor.
  kvevict_decode_options o;
  kvevict_decode_options_init(&o);
  o.budget = 2;
  o.recent = 1;
  kvevict_decode_evictor* raw = nullptr;
  o.struct_size = 4;
  fails(kvevict_decode_evictor_create(nullptr, &o, &raw),
        "options.struct_size 4 is too small; expected " +
            std::to_string(sizeof(kvevict_decode_options)) +
            " (initialize the options with kvevict_decode_options_init)",
        "kvevict_decode_evictor_create");
  EXPECT_EQ(raw, nullptr);
  o.struct_size = sizeof(o);
  ASSERT_EQ(kvevict_decode_evictor_create(nullptr, &o, &raw), KVEVICT_OK) << last_error();
  DecodePtr ev(raw);
  std::vector<float> qd(hq * d, 0.1f), ad(hq * d, 0.2f), ld(hq, 1.0f);
  const kvevict_tensor q = c_tensor(TensorView(qd.data(), DType::kF32, {hq, d}));
  const kvevict_tensor a = c_tensor(TensorView(ad.data(), DType::kF32, {hq, d}));
  const kvevict_tensor l = c_tensor(TensorView(ld.data(), DType::kF32, {hq}));
  const std::vector<float> acc_before(cache.view().score_acc, cache.view().score_acc + 6);
  auto step_fails = [&](const kvevict_decode_evictor* e, const kvevict_kv_layer* c,
                        const kvevict_tensor* qq, const kvevict_tensor* aa,
                        const kvevict_tensor* ll, const std::string& needle) {
    int64_t evicted = -1;
    fails(kvevict_decode_evictor_step(e, c, qq, aa, ll, &evicted), needle,
          "kvevict_decode_evictor_step");
    EXPECT_EQ(evicted, -1);
    fails(kvevict_decode_evictor_accumulate(e, c, qq, aa, ll), needle,
          "kvevict_decode_evictor_accumulate");
    EXPECT_EQ(std::vector<float>(cache.view().score_acc, cache.view().score_acc + 6), acc_before);
    EXPECT_EQ(cache.view().lens[0], 3);
  };
  step_fails(nullptr, &good, &q, &a, &l, "evictor is NULL");
  step_fails(ev.get(), nullptr, &q, &a, &l, "cache is NULL");
  step_fails(ev.get(), &good, &q, nullptr, &l, "a is NULL");
  bad = good;
  bad.score_acc = nullptr;
  step_fails(ev.get(), &bad, &q, &a, &l, "no score accumulator");
  kvevict_tensor bq = q;
  bq.shape[0] = 3;  // not a multiple of Hkv = 2
  step_fails(ev.get(), &good, &bq, &a, &l, "step q has 3 heads; expected a positive multiple of 2");
  bq = q;
  bq.shape[1] = d + 1;
  step_fails(ev.get(), &good, &bq, &a, &l, "step q");
  kvevict_tensor bl = l;
  bl.shape[0] = hq - 1;
  step_fails(ev.get(), &good, &q, &a, &bl, "step lse");
  // No query heads at all: refused, not a score divided by zero heads.
  kvevict_tensor q0 = q, a0 = a, l0 = l;
  q0.shape[0] = a0.shape[0] = l0.shape[0] = 0;
  step_fails(ev.get(), &good, &q0, &a0, &l0, "step q has 0 heads");
  kvevict_tensor half = q;
  half.dtype = KVEVICT_DTYPE_F16;
  step_fails(ev.get(), &good, &half, &a, &l, "host f32");
  int64_t evicted = -1;
  fails(kvevict_decode_evictor_evict(ev.get(), nullptr, &evicted), "cache is NULL",
        "kvevict_decode_evictor_evict");
  EXPECT_EQ(evicted, -1);
  // The same cache, well formed, goes through: 3 rows a head, budget 2 + slack 0 -> 1 evicted each.
  step_lse(cache.view(), qd, ld);
  ASSERT_EQ(kvevict_decode_evictor_step(ev.get(), &good, &q, &a, &l, &evicted), KVEVICT_OK)
      << last_error();
  EXPECT_EQ(evicted, 2);
}

// apply(): an output the selection does not fit, or one of another shape, is refused.
TEST(CApi, ApplyRefusesAnOutputThatDoesNotFit) {
  BackendPtr be = backend("cpu");
  kvevict_evict_options o;
  kvevict_evict_options_init(&o);
  o.method = "knorm";
  o.budget = 4;
  kvevict_layer_evictor* raw = nullptr;
  ASSERT_EQ(kvevict_layer_evictor_create(be.get(), &o, &raw), KVEVICT_OK) << last_error();
  EvictorPtr ev(raw);
  const int hkv = 2, d = 8;
  const int64_t n = 12;
  testing::ProblemBuilder b(testing::make_shape(hkv, hkv, 1, n, d), 11);
  const kvevict_tensor k = c_tensor(b.problem().k), v = c_tensor(b.problem().v);
  kvevict_selection* s = nullptr;
  ASSERT_EQ(kvevict_layer_evictor_plan(ev.get(), nullptr, &k, &v, nullptr, 0.0f,
                                       KVEVICT_RESIDENCY_HOST, &s),
            KVEVICT_OK)
      << last_error();
  SelectionPtr hs(s);
  HostKVCache full(DType::kF32, hkv, d, {n, n}, false);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<float> row(hkv * d, static_cast<float>(t));
    const TensorView r(row.data(), DType::kF32, {hkv, d});
    cache_append(full.view(), r, r, static_cast<int32_t>(t));
  }
  const kvevict_kv_layer in = c_layer(full.view());
  HostKVCache small(DType::kF32, hkv, d, {4, 3}, false);  // head 1 holds 3 < 4 kept
  const kvevict_kv_layer out_small = c_layer(small.view());
  EXPECT_EQ(kvevict_layer_evictor_apply(ev.get(), &in, s, &out_small),
            KVEVICT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("head 1 holds 3"), std::string::npos) << last_error();
  EXPECT_EQ(small.view().lens[1], 0);
  HostKVCache other_dim(DType::kF32, hkv, d / 2, {4, 4}, false);
  const kvevict_kv_layer out_dim = c_layer(other_dim.view());
  EXPECT_EQ(kvevict_layer_evictor_apply(ev.get(), &in, s, &out_dim),
            KVEVICT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("head_dim mismatch: input 8, output 4"), std::string::npos)
      << last_error();
  HostKVCache in_three(DType::kF32, 3, d, {4, 4, 4}, false),
      out_three(DType::kF32, 3, d, {4, 4, 4}, false);
  const kvevict_kv_layer in3 = c_layer(in_three.view()), out3 = c_layer(out_three.view());
  EXPECT_EQ(kvevict_layer_evictor_apply(ev.get(), &in3, s, &out3), KVEVICT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("selection covers 2"), std::string::npos) << last_error();
  HostKVCache fits(DType::kF32, hkv, d, {4, 4}, false);
  const kvevict_kv_layer out_fits = c_layer(fits.view());
  ASSERT_EQ(kvevict_layer_evictor_apply(ev.get(), &in, s, &out_fits), KVEVICT_OK) << last_error();
  EXPECT_EQ(fits.view().lens[0], 4);
  EXPECT_EQ(fits.view().lens[1], 4);
}

}  // namespace
}  // namespace kvevict
