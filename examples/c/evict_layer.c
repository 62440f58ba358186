/* The C API (kvevict/kvevict.h) end to end, in C99: one layer of random queries, keys and values
 * is scored with adadropkv on the cpu backend, selected at a 10% budget and compacted into a
 * cache sized for the selection; prints the kept tokens per head and the bytes saved.
 *   evict_layer_c [cpu|reference|cuda]      (cuda: reports why when it is unavailable) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvevict/kvevict.h"

enum { HQ = 8, HKV = 2, N = 1000, W = 32, D = 64 }; /* W: adadropkv's measured window */

/* Uniform(-1, 1) from a 64-bit LCG: reproducible everywhere. */
static float next_uniform(uint64_t* s) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)((*s >> 40) & 0xffffff) / (float)0x800000 - 1.0f;
}

static kvevict_tensor tensor3(float* data, int64_t a, int64_t b, int64_t c) {
  kvevict_tensor t;
  memset(&t, 0, sizeof(t)); /* all-zero strides: contiguous */
  t.data = data;
  t.ndim = 3;
  t.shape[0] = a;
  t.shape[1] = b;
  t.shape[2] = c;
  t.dtype = KVEVICT_DTYPE_F32;
  t.device = KVEVICT_DEVICE_CPU;
  return t;
}

static int fail(const char* what, kvevict_status st) {
  fprintf(stderr, "evict_layer_c: %s failed (%s): %s\n", what, kvevict_status_name(st),
          kvevict_last_error());
  return st == KVEVICT_ERROR_UNAVAILABLE ? 0 : 2; /* a missing GPU is not an error here */
}

int main(int argc, char** argv) {
  static float q[HQ * W * D], k[HKV * N * D], v[HKV * N * D];
  static int32_t pos[HKV * N];
  int64_t full_offsets[HKV + 1] = {0, N, 2 * N}, full_lens[HKV] = {N, N};
  int64_t offsets[HKV + 1], lens[HKV] = {0, 0};
  const char* backend_name = argc > 1 ? argv[1] : "cpu";
  uint64_t seed = 1;
  kvevict_backend* backend = NULL;
  kvevict_layer_evictor* ev = NULL;
  kvevict_selection* kept = NULL;
  kvevict_evict_options opt;
  kvevict_tensor qt, kt, vt;
  kvevict_kv_layer full, small;
  kvevict_status st;
  float *small_k, *small_v;
  int32_t* small_pos;
  int64_t rows;
  int i, h;

  for (i = 0; i < HQ * W * D; ++i) q[i] = next_uniform(&seed);
  for (i = 0; i < HKV * N * D; ++i) k[i] = next_uniform(&seed);
  for (i = 0; i < HKV * N * D; ++i) v[i] = next_uniform(&seed);
  for (i = 0; i < HKV * N; ++i) pos[i] = i % N;

  printf("kvevict %s (C API v%d)\n", kvevict_version(), kvevict_c_api_version());
  if ((st = kvevict_backend_create(backend_name, NULL, &backend)) != KVEVICT_OK)
    return fail("kvevict_backend_create", st);
  if (kvevict_backend_device(backend) != KVEVICT_DEVICE_CPU) {
    printf("the %s backend is available; this example keeps its tensors on the host\n",
           kvevict_backend_name(backend));
    kvevict_backend_destroy(backend);
    return 0;
  }
  kvevict_evict_options_init(&opt);
  opt.method = "adadropkv";
  opt.budget = 0.1;
  if ((st = kvevict_layer_evictor_create(backend, &opt, &ev)) != KVEVICT_OK)
    return fail("kvevict_layer_evictor_create", st);
  printf("%s\n", kvevict_layer_evictor_describe(ev));

  qt = tensor3(q, HQ, W, D);  /* [Hq, w, d] the last w queries after RoPE */
  kt = tensor3(k, HKV, N, D); /* [Hkv, n, d] */
  vt = tensor3(v, HKV, N, D);
  if ((st = kvevict_layer_evictor_plan(ev, &qt, &kt, &vt, NULL, 0.0f, KVEVICT_RESIDENCY_HOST,
                                       &kept)) != KVEVICT_OK)
    return fail("kvevict_layer_evictor_plan", st);

  /* The full cache is the dense [Hkv, n, d] layout: equal segments of n rows. */
  memset(&full, 0, sizeof(full));
  full.k = k;
  full.v = v;
  full.pos = pos;
  full.offsets = full_offsets;
  full.lens = full_lens;
  full.dtype = KVEVICT_DTYPE_F32;
  full.device = KVEVICT_DEVICE_CPU;
  full.num_kv_heads = HKV;
  full.head_dim = D;

  /* A smaller cache sized for the selection, then the kept rows copied into it. */
  if ((st = kvevict_selection_plan_offsets(kept, 0, offsets, HKV + 1)) != KVEVICT_OK)
    return fail("kvevict_selection_plan_offsets", st);
  rows = offsets[HKV];
  small_k = malloc(sizeof(float) * (size_t)(rows * D));
  small_v = malloc(sizeof(float) * (size_t)(rows * D));
  small_pos = malloc(sizeof(int32_t) * (size_t)rows);
  if (!small_k || !small_v || !small_pos) return 2;
  small = full;
  small.k = small_k;
  small.v = small_v;
  small.pos = small_pos;
  small.offsets = offsets;
  small.lens = lens;
  if ((st = kvevict_layer_evictor_apply(ev, &full, kept, &small)) != KVEVICT_OK)
    return fail("kvevict_layer_evictor_apply", st);

  for (h = 0; h < HKV; ++h)
    printf("kv head %d keeps %lld of %d tokens, the first at position %d\n", h, (long long)lens[h],
           N, small_pos[offsets[h]]);
  printf("KV bytes %lld -> %lld\n", (long long)(2 * sizeof(float) * HKV * N * D),
         (long long)(2 * sizeof(float) * (size_t)(rows * D)));

  free(small_k);
  free(small_v);
  free(small_pos);
  kvevict_selection_destroy(kept);
  kvevict_layer_evictor_destroy(ev);
  kvevict_backend_destroy(backend);
  return 0;
}
