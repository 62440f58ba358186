/* kvevict's stable C API: the eviction pipeline of one layer (score -> select -> compact), the
 * decode-time evictor and the backends, for engines written in C or in any language with a C
 * foreign-function interface. The header is C99 and C++; the C++ API (kvevict/evict.h) is what
 * it wraps, and both give the same results (tests/capi).
 *
 * Conventions
 *  - Every fallible call returns a kvevict_status. On failure, kvevict_last_error() holds the
 *    message (it names the bad value and what was expected, as the C++ API's kvevict::Error);
 *    out-parameters are left untouched. No exception ever crosses this boundary.
 *  - Handles are opaque, created by *_create and released by *_destroy (NULL is a no-op). A
 *    handle may be used from one thread at a time; different handles from different threads.
 *    An evictor keeps its backend alive, so a backend may be destroyed before its evictors.
 *  - Tensors and caches are views of caller memory (host or device): nothing here copies them or
 *    keeps them past the call. Shapes are written [outermost, ..., innermost].
 *  - Enum-valued struct fields are int32_t, so the layout of every struct is fixed by this
 *    header alone. Option structs begin with struct_size and are filled by *_init(): later
 *    versions append fields and read only what the caller's struct_size covers.
 *  - KVEVICT_C_API_VERSION changes only when an existing declaration changes meaning or layout;
 *    additions keep it.
 *
 *   kvevict_backend* cpu;           kvevict_backend_create("cpu", NULL, &cpu);
 *   kvevict_evict_options o;        kvevict_evict_options_init(&o);
 *   o.method = "adadropkv";         o.budget = 0.1;
 *   kvevict_layer_evictor* ev;      kvevict_layer_evictor_create(cpu, &o, &ev);
 *   kvevict_selection* kept;        kvevict_layer_evictor_plan(ev, &q, &k, &v, NULL, 0.0f,
 *                                                              KVEVICT_RESIDENCY_HOST, &kept);
 *   kvevict_selection_plan_offsets(kept, 0, out_offsets, hkv + 1);   size the compacted cache
 *   kvevict_layer_evictor_apply(ev, &full, kept, &compacted);       copy the kept rows
 *
 * examples/c/evict_layer.c is a complete program. */
#ifndef KVEVICT_KVEVICT_H
#define KVEVICT_KVEVICT_H

#include <stddef.h>
#include <stdint.h>

#define KVEVICT_C_API_VERSION 1
#define KVEVICT_MAX_DIMS 4

#if defined(__GNUC__) || defined(__clang__)
#define KVEVICT_C_API __attribute__((visibility("default")))
#else
#define KVEVICT_C_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Status and errors ------------------------------------------------------------------- */

typedef enum kvevict_status {
  KVEVICT_OK = 0,
  /* The call was refused: a null handle or pointer, an unknown name, a bad option, a shape,
   * dtype or device that does not fit. Calling again with the same arguments fails again. */
  KVEVICT_ERROR_INVALID_ARGUMENT = 1,
  /* What was asked for is not in this build or on this machine (the cuda backend without
   * libkvevict_cuda, without the CUDA runtime, or without a device). */
  KVEVICT_ERROR_UNAVAILABLE = 2,
  /* Host memory ran out. */
  KVEVICT_ERROR_OUT_OF_MEMORY = 3,
  /* A CUDA or cuBLAS call failed (device memory included); the message names the call. */
  KVEVICT_ERROR_DEVICE = 4,
  /* Anything else: a bug in kvevict. */
  KVEVICT_ERROR_INTERNAL = 5
} kvevict_status;

/* "ok", "invalid argument", "unavailable", "out of memory", "device error", "internal error";
 * "unknown status" for any other value. Static storage. */
KVEVICT_C_API const char* kvevict_status_name(kvevict_status status);
/* The message of the last call on this thread that failed ("" when none has). Valid until the
 * next call into kvevict on this thread. */
KVEVICT_C_API const char* kvevict_last_error(void);
/* The library's version, "MAJOR.MINOR.PATCH" (static storage), and KVEVICT_C_API_VERSION of the
 * library actually loaded (compare with the header's to detect a mismatched library). */
KVEVICT_C_API const char* kvevict_version(void);
KVEVICT_C_API int32_t kvevict_c_api_version(void);

/* Threads of the CPU fast paths (every CPU backend of the process): 0 = every hardware
 * thread, the default. Results are bitwise identical for any count. */
KVEVICT_C_API kvevict_status kvevict_set_num_threads(int32_t n);
KVEVICT_C_API int32_t kvevict_num_threads(void);

/* ---- Tensors and caches ------------------------------------------------------------------ */

typedef enum kvevict_dtype {
  KVEVICT_DTYPE_F32 = 0,
  KVEVICT_DTYPE_F64 = 1,
  KVEVICT_DTYPE_F16 = 2,
  KVEVICT_DTYPE_BF16 = 3,
  KVEVICT_DTYPE_I32 = 4,
  KVEVICT_DTYPE_I64 = 5,
  KVEVICT_DTYPE_U8 = 6
} kvevict_dtype;

typedef enum kvevict_device { KVEVICT_DEVICE_CPU = 0, KVEVICT_DEVICE_CUDA = 1 } kvevict_device;

/* Where a selection's arrays may stay (kvevict_layer_evictor_plan). */
typedef enum kvevict_residency {
  KVEVICT_RESIDENCY_HOST = 0,  /* in host memory (a device backend waits for them) */
  KVEVICT_RESIDENCY_DEVICE = 1 /* a device backend may leave them in device memory */
} kvevict_residency;

/* A view of caller memory. strides are in elements, not bytes; all zero means row-major
 * contiguous. An absent optional tensor is a NULL pointer argument. */
typedef struct kvevict_tensor {
  void* data;
  int64_t shape[KVEVICT_MAX_DIMS];
  int64_t strides[KVEVICT_MAX_DIMS];
  int32_t ndim;   /* 0 .. KVEVICT_MAX_DIMS */
  int32_t dtype;  /* kvevict_dtype */
  int32_t device; /* kvevict_device */
} kvevict_tensor;

/* One layer's KV cache in kvevict's segment layout (kvevict/cache.h, SPEC section 4): head h owns
 * rows [offsets[h], offsets[h] + lens[h]); rows up to offsets[h + 1] are spare capacity. Every
 * per-row array is indexed by that row. Equal segments are the plain [Hkv, n, d] layout. */
typedef struct kvevict_kv_layer {
  void* k;                 /* [rows, d] keys after RoPE, in dtype */
  void* v;                 /* [rows, d] values, in dtype */
  int32_t* pos;            /* [rows] original position of every row */
  float* score_acc;        /* [rows] decode-time running score per row, or NULL */
  const int64_t* offsets;  /* host [Hkv + 1] segment starts; offsets[Hkv] = rows */
  int64_t* lens;           /* host [Hkv] rows in use per head */
  int64_t* device_offsets; /* device [Hkv + 1] segment table of a device cache, or NULL */
  int32_t* device_lens;    /* device [Hkv], or NULL */
  int64_t rows;            /* allocated rows, read only when offsets is NULL */
  int32_t dtype;           /* kvevict_dtype of k and v: F32, F16 or BF16 */
  int32_t device;          /* kvevict_device where k, v, pos, score_acc live */
  int32_t num_kv_heads;    /* Hkv */
  int32_t head_dim;        /* d */
} kvevict_kv_layer;

/* Decode append: one new row per head at original position `pos`; k_row, v_row [Hkv, d] host
 * f32, f16 or bf16 (converted to the cache dtype); the new rows' score_acc starts at 0. Fails
 * when a segment is full. Host caches. */
KVEVICT_C_API kvevict_status kvevict_cache_append(const kvevict_kv_layer* cache,
                                                  const kvevict_tensor* k_row,
                                                  const kvevict_tensor* v_row, int32_t pos);

/* ---- Backends ---------------------------------------------------------------------------- */

typedef struct kvevict_backend kvevict_backend;

/* "cpu" (multithreaded float fast paths), "reference" (double precision, the ground truth;
 * slow) or "cuda" (the GPU, from libkvevict_cuda: linked into the program, else loaded from
 * $KVEVICT_CUDA_LIBRARY, next to libkvevict, or the library search path). `stream` is the
 * cudaStream_t the cuda backend queues its work on (NULL = the legacy default stream; it must
 * outlive the backend and its evictors); host backends take NULL. */
KVEVICT_C_API kvevict_status kvevict_backend_create(const char* name, void* stream,
                                                    kvevict_backend** out);
KVEVICT_C_API void kvevict_backend_destroy(kvevict_backend* backend);
/* "cpu", "reference" or "cuda" (static storage); NULL for a NULL backend. */
KVEVICT_C_API const char* kvevict_backend_name(const kvevict_backend* backend);
/* Where every tensor and cache handed to this backend must live (kvevict_device); -1 for NULL. */
KVEVICT_C_API int32_t kvevict_backend_device(const kvevict_backend* backend);
/* Waits for the work the backend has queued (a no-op on host backends). */
KVEVICT_C_API kvevict_status kvevict_backend_synchronize(kvevict_backend* backend);

/* ---- Selections -------------------------------------------------------------------------- */

/* The kept rows of every KV head: head h keeps index[offsets[h] .. offsets[h + 1]), row indices
 * within its own segment, strictly ascending. */
typedef struct kvevict_selection kvevict_selection;

KVEVICT_C_API void kvevict_selection_destroy(kvevict_selection* selection);
KVEVICT_C_API int32_t kvevict_selection_num_kv_heads(const kvevict_selection* selection);
/* Kept rows of all heads (known on the host for every policy); -1 for NULL. */
KVEVICT_C_API int64_t kvevict_selection_total(const kvevict_selection* selection);
/* The arrays in host memory, valid while the selection lives: offsets [Hkv + 1], index [total].
 * Fails (invalid argument) for a selection that stayed on the device. */
KVEVICT_C_API kvevict_status kvevict_selection_host_arrays(const kvevict_selection* selection,
                                                           const int64_t** offsets,
                                                           const int32_t** index);
/* The arrays in device memory of a selection planned with KVEVICT_RESIDENCY_DEVICE on a device
 * backend (stream-ordered: valid for work queued on the backend's stream); fails for a host
 * selection. */
KVEVICT_C_API kvevict_status kvevict_selection_device_arrays(const kvevict_selection* selection,
                                                             const int64_t** offsets,
                                                             const int32_t** index);
/* Non-empty when the budget fell below the protected tokens (sinks + window). */
KVEVICT_C_API const char* kvevict_selection_warning(const kvevict_selection* selection);
/* The segment starts of a cache that holds the selection with `slack` spare rows after every
 * head, offsets[h + 1] = offsets[h] + count(h) + slack, written to offsets[0 .. Hkv]
 * (`capacity` >= Hkv + 1 elements). Needs the host arrays. */
KVEVICT_C_API kvevict_status kvevict_selection_plan_offsets(const kvevict_selection* selection,
                                                            int64_t slack, int64_t* offsets,
                                                            size_t capacity);
/* The same table written by the backend into `out`'s segment table (its host offsets and, on a
 * device backend, its device table; a device-only selection writes the device table only); the
 * lens are set by the compaction that follows. `out` needs total + Hkv * slack rows. */
KVEVICT_C_API kvevict_status kvevict_backend_plan_segments(kvevict_backend* backend,
                                                           const kvevict_selection* selection,
                                                           int64_t slack,
                                                           const kvevict_kv_layer* out);

/* ---- LayerEvictor: one-shot eviction of a layer (SPEC sections 2-4) ---------------------- */

typedef struct kvevict_evict_options {
  uint32_t struct_size; /* sizeof(kvevict_evict_options), set by kvevict_evict_options_init */
  const char* method;   /* "dropkv" (init), "adadropkv", "obcache_v", "obcache_k", "obcache_vk",
                           "snapkv", "adakv", "h2o", "tova", "knorm", "keydiff", "vatp",
                           "criticalkv", "streamingllm", "random": sets the method's defaults
                           (kvevict/method.h: measured for dropkv, adadropkv and obcache_vk;
                           "METHOD:spec" for SPEC section 2's) */
  double budget;        /* <= 1: the kept fraction; > 1: a token count (integer). 0.1 by init */
  /* Overrides of the method's defaults; the values init sets keep them. */
  const char* policy;    /* NULL, or "uniform" | "adakv" */
  const char* aggregate; /* NULL, or "window" | "h2o" | "tova" (window, all or last queries) */
  const char* pooling;   /* NULL, or "none" | "max:K" | "avg:K" (K odd) */
  int32_t window;        /* -1, or the observation window (scored queries and protected tokens) */
  int32_t sink;          /* -1, or the first tokens always kept (streamingllm: 4) */
  double alpha;          /* < 0 (init: -1) keeps 0.2; adakv's B_h = f_h (1 - alpha) + alpha B */
  float scale;           /* logit scale; 0 (init) = 1/sqrt(d) */
  int32_t h2o_normalize; /* nonzero: h2o column sums divided by the queries that see each key */
  uint64_t seed;         /* method "random" */
} kvevict_evict_options;

KVEVICT_C_API void kvevict_evict_options_init(kvevict_evict_options* options);

typedef struct kvevict_layer_evictor kvevict_layer_evictor;

/* An evictor over `backend` (kept alive by the evictor). Fails naming the bad option. */
KVEVICT_C_API kvevict_status kvevict_layer_evictor_create(kvevict_backend* backend,
                                                          const kvevict_evict_options* options,
                                                          kvevict_layer_evictor** out);
KVEVICT_C_API void kvevict_layer_evictor_destroy(kvevict_layer_evictor* evictor);
/* The score and select settings in one line (owned by the evictor); NULL for NULL. */
KVEVICT_C_API const char* kvevict_layer_evictor_describe(const kvevict_layer_evictor* evictor);

/* Scores one layer and selects (the backend's device for every tensor):
 *   q  [Hq, m, d]  the last m prompt queries after RoPE (NULL for query-free methods)
 *   k  [Hkv, n, d] keys after RoPE at positions 0 .. n-1;  v [Hkv, n, d] values
 *   wo [D, Hq * d] the output projection (criticalkv only; else NULL)
 * f32, f16, bf16 (f64 on host backends); `scale` 0 = the options' scale. *out is a new selection
 * (host arrays, or with KVEVICT_RESIDENCY_DEVICE possibly device arrays). */
KVEVICT_C_API kvevict_status kvevict_layer_evictor_plan(kvevict_layer_evictor* evictor,
                                                        const kvevict_tensor* q,
                                                        const kvevict_tensor* k,
                                                        const kvevict_tensor* v,
                                                        const kvevict_tensor* wo, float scale,
                                                        int32_t residency, kvevict_selection** out);
/* Copies the kept rows (k, v, pos, and score_acc when both have it) of `in` into `out`, whose
 * segments the caller sized (kvevict_selection_plan_offsets or kvevict_backend_plan_segments),
 * and sets out's lens. Out of place: the memory of `in` can then be freed. */
KVEVICT_C_API kvevict_status kvevict_layer_evictor_apply(kvevict_layer_evictor* evictor,
                                                         const kvevict_kv_layer* in,
                                                         const kvevict_selection* selection,
                                                         const kvevict_kv_layer* out);
/* The [Hkv, n] f32 scores of the last plan (on the backend's device; owned by the evictor and
 * overwritten by the next plan). Fails before the first plan. */
KVEVICT_C_API kvevict_status kvevict_layer_evictor_last_scores(const kvevict_layer_evictor* evictor,
                                                               kvevict_tensor* scores);

/* ---- DecodeEvictor: decode-time eviction (SPEC section 5) -------------------------------- */

typedef struct kvevict_decode_options {
  uint32_t struct_size;     /* sizeof(kvevict_decode_options), set by kvevict_decode_options_init */
  const char* score;        /* per-step score: "h2o" (init: add p), "tova" (replace by p),
                               "dropkv", "obcache_v", "obcache_k", "obcache_vk" */
  int64_t budget;           /* tokens kept per head after an eviction (> 0; init 0: must be set) */
  int64_t slack;            /* evict when a head holds more than budget + slack rows (init 0) */
  int32_t recent;           /* last rows never evicted (init 32) */
  int32_t sink;             /* first rows never evicted (init 0) */
  float scale;              /* logit scale; 0 (init) = 1/sqrt(d) */
  float softcap;            /* the model's logit softcap (init 0: none) */
  double one_minus_p_floor; /* clamp of 1 - p for dropkv (init 1e-12) */
} kvevict_decode_options;

KVEVICT_C_API void kvevict_decode_options_init(kvevict_decode_options* options);

typedef struct kvevict_decode_evictor kvevict_decode_evictor;

/* `backend` runs the cuts and is kept alive by the evictor; NULL = a host backend of its own.
 * Caches handed to evict() live on that backend's device and need score_acc and a capacity per
 * head of at least kvevict_decode_evictor_capacity_per_head(). */
KVEVICT_C_API kvevict_status kvevict_decode_evictor_create(kvevict_backend* backend,
                                                           const kvevict_decode_options* options,
                                                           kvevict_decode_evictor** out);
KVEVICT_C_API void kvevict_decode_evictor_destroy(kvevict_decode_evictor* evictor);
/* budget + slack + 1; -1 for NULL. */
KVEVICT_C_API int64_t
kvevict_decode_evictor_capacity_per_head(const kvevict_decode_evictor* evictor);
/* Adds (tova: writes) the step's per-row score to cache->score_acc over every head's rows.
 * q [Hq, d] the step's query after RoPE, a [Hq, d] its attention output over the current cache,
 * lse [Hq] its log-sum-exp: host f32. Host caches. */
KVEVICT_C_API kvevict_status kvevict_decode_evictor_accumulate(
    const kvevict_decode_evictor* evictor, const kvevict_kv_layer* cache, const kvevict_tensor* q,
    const kvevict_tensor* a, const kvevict_tensor* lse);
/* Cuts every head longer than budget + slack down to the budget, in place on the backend;
 * *evicted (may be NULL) receives the rows removed. */
KVEVICT_C_API kvevict_status kvevict_decode_evictor_evict(const kvevict_decode_evictor* evictor,
                                                          const kvevict_kv_layer* cache,
                                                          int64_t* evicted);
/* accumulate() then evict(). */
KVEVICT_C_API kvevict_status kvevict_decode_evictor_step(
    const kvevict_decode_evictor* evictor, const kvevict_kv_layer* cache, const kvevict_tensor* q,
    const kvevict_tensor* a, const kvevict_tensor* lse, int64_t* evicted);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KVEVICT_KVEVICT_H */
