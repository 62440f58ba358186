/* The C API from strict C99 (tests/CMakeLists.txt: -std=c99 -Wpedantic -Werror): the header
 * compiles as C, and cases whose answer is known exactly run through a C program: streamingllm
 * keeps the sinks and the most recent tokens, knorm the smallest keys, a decode cut keeps the
 * protected rows and the highest accumulators; bad input is a status and a message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvevict/kvevict.h"

static int failures = 0;

#define CHECK(cond)                                                                           \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: %s\n", __FILE__, __LINE__, #cond, \
              kvevict_last_error());                                                          \
      ++failures;                                                                             \
    }                                                                                         \
  } while (0)

enum { HKV = 2, N = 20, D = 4 };

static kvevict_tensor tensor3(float* data, int64_t a, int64_t b, int64_t c) {
  kvevict_tensor t;
  memset(&t, 0, sizeof(t));
  t.data = data;
  t.ndim = 3;
  t.shape[0] = a;
  t.shape[1] = b;
  t.shape[2] = c;
  t.dtype = KVEVICT_DTYPE_F32;
  t.device = KVEVICT_DEVICE_CPU;
  return t;
}

/* Plans `method` at `budget` over k, v [HKV, N, D] on the cpu backend; returns the selection. */
static kvevict_selection* plan(kvevict_backend* cpu, const char* method, double budget, float* k,
                               float* v) {
  kvevict_evict_options o;
  kvevict_layer_evictor* ev = NULL;
  kvevict_selection* sel = NULL;
  kvevict_tensor kt = tensor3(k, HKV, N, D), vt = tensor3(v, HKV, N, D);
  kvevict_evict_options_init(&o);
  o.method = method;
  o.budget = budget;
  CHECK(kvevict_layer_evictor_create(cpu, &o, &ev) == KVEVICT_OK);
  CHECK(kvevict_layer_evictor_plan(ev, NULL, &kt, &vt, NULL, 0.0f, KVEVICT_RESIDENCY_HOST, &sel) ==
        KVEVICT_OK);
  kvevict_layer_evictor_destroy(ev);
  return sel;
}

static void check_kept(const kvevict_selection* sel, const int32_t* want0, const int32_t* want1,
                       int64_t per_head) {
  const int64_t* off = NULL;
  const int32_t* idx = NULL;
  int64_t i;
  CHECK(kvevict_selection_host_arrays(sel, &off, &idx) == KVEVICT_OK);
  CHECK(kvevict_selection_num_kv_heads(sel) == HKV);
  CHECK(kvevict_selection_total(sel) == HKV * per_head);
  if (off == NULL || idx == NULL) return;
  CHECK(off[0] == 0 && off[1] == per_head && off[2] == 2 * per_head);
  for (i = 0; i < per_head; ++i) {
    CHECK(idx[i] == want0[i]);
    CHECK(idx[per_head + i] == want1[i]);
  }
}

static void test_layer_evictor(void) {
  static float k[HKV * N * D], v[HKV * N * D];
  static const int32_t streaming[10] = {0, 1, 2, 3, 14, 15, 16, 17, 18, 19};
  static const int32_t first5[5] = {0, 1, 2, 3, 4};
  static const int32_t last5[5] = {15, 16, 17, 18, 19};
  kvevict_backend* cpu = NULL;
  kvevict_selection* sel;
  int h, j, c;
  /* Head 0's key norms grow with the position, head 1's shrink. */
  for (h = 0; h < HKV; ++h)
    for (j = 0; j < N; ++j)
      for (c = 0; c < D; ++c) {
        k[(h * N + j) * D + c] = (float)(h == 0 ? j + 1 : N - j) * (c == 0 ? 1.0f : 0.5f);
        v[(h * N + j) * D + c] = (float)(j - c);
      }
  CHECK(kvevict_backend_create("cpu", NULL, &cpu) == KVEVICT_OK);
  CHECK(strcmp(kvevict_backend_name(cpu), "cpu") == 0);

  /* streamingllm, 10 of 20 tokens: its 4 sinks and the 6 most recent, on every head. */
  sel = plan(cpu, "streamingllm", 10, k, v);
  check_kept(sel, streaming, streaming, 10);
  kvevict_selection_destroy(sel);

  /* knorm (-||k||), a quarter: the 5 smallest keys, the first of head 0 and the last of head 1. */
  sel = plan(cpu, "knorm", 0.25, k, v);
  check_kept(sel, first5, last5, 5);

  /* Compaction into a cache sized for the selection: the kept rows, their positions. */
  {
    int64_t offsets[HKV + 1], lens[HKV] = {0, 0};
    float ck[HKV * 5 * D], cv[HKV * 5 * D];
    int32_t cpos[HKV * 5];
    int64_t full_offsets[HKV + 1] = {0, N, 2 * N}, full_lens[HKV] = {N, N};
    int32_t full_pos[HKV * N];
    kvevict_kv_layer in, out;
    kvevict_evict_options o;
    kvevict_layer_evictor* ev = NULL;
    for (h = 0; h < HKV; ++h)
      for (j = 0; j < N; ++j) full_pos[h * N + j] = j;
    memset(&in, 0, sizeof(in));
    in.k = k;
    in.v = v;
    in.pos = full_pos;
    in.offsets = full_offsets;
    in.lens = full_lens;
    in.dtype = KVEVICT_DTYPE_F32;
    in.device = KVEVICT_DEVICE_CPU;
    in.num_kv_heads = HKV;
    in.head_dim = D;
    CHECK(kvevict_selection_plan_offsets(sel, 0, offsets, HKV + 1) == KVEVICT_OK);
    CHECK(offsets[0] == 0 && offsets[1] == 5 && offsets[2] == 10);
    out = in;
    out.k = ck;
    out.v = cv;
    out.pos = cpos;
    out.offsets = offsets;
    out.lens = lens;
    kvevict_evict_options_init(&o);
    o.method = "knorm";
    o.budget = 0.25;
    CHECK(kvevict_layer_evictor_create(cpu, &o, &ev) == KVEVICT_OK);
    CHECK(kvevict_layer_evictor_apply(ev, &in, sel, &out) == KVEVICT_OK);
    CHECK(lens[0] == 5 && lens[1] == 5);
    for (j = 0; j < 5; ++j) {
      CHECK(cpos[j] == j);
      CHECK(cpos[5 + j] == 15 + j);
      CHECK(ck[(5 + j) * D] == k[(1 * N + 15 + j) * D]);
      CHECK(cv[j * D + 1] == v[j * D + 1]);
    }
    kvevict_layer_evictor_destroy(ev);
  }
  kvevict_selection_destroy(sel);
  kvevict_backend_destroy(cpu);
}

static void test_decode_evictor(void) {
  /* One head of 12 rows, budget 6, sink 1, recent 2: keeps row 0, rows 10 and 11, and the three
   * highest accumulators of the rest (rows 3, 5, 7). */
  float k[12 * D], v[12 * D], acc[12] = {0, 1, 0, 9, 0, 8, 0, 7, 0, 0, 0, 0};
  int32_t pos[12];
  int64_t offsets[2] = {0, 12}, lens[1] = {12}, evicted = -1;
  static const int32_t want[6] = {0, 3, 5, 7, 10, 11};
  kvevict_decode_options o;
  kvevict_decode_evictor* ev = NULL;
  kvevict_kv_layer cache;
  int i, found, j;
  for (i = 0; i < 12 * D; ++i) k[i] = v[i] = (float)i;
  for (i = 0; i < 12; ++i) pos[i] = i;
  memset(&cache, 0, sizeof(cache));
  cache.k = k;
  cache.v = v;
  cache.pos = pos;
  cache.score_acc = acc;
  cache.offsets = offsets;
  cache.lens = lens;
  cache.dtype = KVEVICT_DTYPE_F32;
  cache.device = KVEVICT_DEVICE_CPU;
  cache.num_kv_heads = 1;
  cache.head_dim = D;
  kvevict_decode_options_init(&o);
  o.budget = 6;
  o.recent = 2;
  o.sink = 1;
  CHECK(kvevict_decode_evictor_create(NULL, &o, &ev) == KVEVICT_OK);
  CHECK(kvevict_decode_evictor_capacity_per_head(ev) == 7);
  CHECK(kvevict_decode_evictor_evict(ev, &cache, &evicted) == KVEVICT_OK);
  CHECK(evicted == 6);
  CHECK(lens[0] == 6);
  for (i = 0; i < 6; ++i) { /* the kept positions, in any order */
    found = 0;
    for (j = 0; j < 6; ++j) found += pos[j] == want[i];
    CHECK(found == 1);
  }
  kvevict_decode_evictor_destroy(ev);
}

static void test_errors(void) {
  kvevict_backend* b = NULL;
  kvevict_evict_options o;
  kvevict_layer_evictor* ev = NULL;
  CHECK(kvevict_backend_create("tpu", NULL, &b) == KVEVICT_ERROR_INVALID_ARGUMENT);
  CHECK(b == NULL);
  CHECK(strstr(kvevict_last_error(), "backend 'tpu' is unknown") != NULL);
  CHECK(strcmp(kvevict_status_name(KVEVICT_ERROR_INVALID_ARGUMENT), "invalid argument") == 0);
  CHECK(kvevict_backend_create("reference", NULL, &b) == KVEVICT_OK);
  CHECK(strcmp(kvevict_last_error(), "") == 0);
  kvevict_evict_options_init(&o);
  o.budget = -0.5;
  CHECK(kvevict_layer_evictor_create(b, &o, &ev) == KVEVICT_ERROR_INVALID_ARGUMENT);
  CHECK(ev == NULL);
  CHECK(strstr(kvevict_last_error(), "options.budget -0.5 is invalid") != NULL);
  o.budget = NAN;
  CHECK(kvevict_layer_evictor_create(b, &o, &ev) == KVEVICT_ERROR_INVALID_ARGUMENT);
  kvevict_backend_destroy(b);
  kvevict_backend_destroy(NULL);
  kvevict_selection_destroy(NULL);
  kvevict_layer_evictor_destroy(NULL);
  kvevict_decode_evictor_destroy(NULL);
}

int main(void) {
  CHECK(kvevict_c_api_version() == KVEVICT_C_API_VERSION);
  CHECK(strchr(kvevict_version(), '.') != NULL);
  test_layer_evictor();
  test_decode_evictor();
  test_errors();
  if (failures != 0) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("kvevict %s C API v%d: all checks passed\n", kvevict_version(), kvevict_c_api_version());
  return 0;
}
