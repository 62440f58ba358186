// The extension module `kvevict._kvevict`: a thin layer from DLPack arrays (numpy, torch CPU and
// CUDA tensors, through nanobind's nb::ndarray) to the public C++ API. The binding never
// allocates tensor memory: the Python layer (python/kvevict/) allocates every output and
// workspace with the caller's framework and hands it down, so the framework owns it.
//
// One file per idea:
//   tensor_view.cpp  nb::ndarray -> kvevict::TensorView (dtype, device, strides), named errors
//   options.cpp      method / aggregate / pooling / policy / budget -> ScoreOptions, SelectOptions
//   host_ops.cpp     score, select, compact, attention on host memory (cpu and reference paths)
//   cuda_ops.cpp     the same on device memory through kvevict/cuda/*.h, on a caller's stream
//   evictors.cpp     LayerEvictor / DecodeEvictor over a Backend (the only file that touches
//                    Backend: adapt it when the Backend interface changes)
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>

#include "kvevict/attention.h"
#include "kvevict/cache.h"
#include "kvevict/method.h"
#include "kvevict/score.h"
#include "kvevict/select.h"
#include "kvevict/tensor.h"

namespace kvevict::python {

namespace nb = nanobind;

// Any DLPack array, any dtype, device and strides; read-only arrays accepted (inputs).
using Array = nb::ndarray<nb::ro>;
// A writable DLPack array (outputs, workspaces, caches modified in place).
using MutArray = nb::ndarray<>;

// A view of `a` (at most 4 dims). Throws kvevict::Error naming `what` when the dtype is not one
// kvevict knows or the array lives on a device other than the CPU or a CUDA GPU.
TensorView to_view(const Array& a, const char* what);
TensorView to_view(const MutArray& a, const char* what);
// to_view of an optional argument: an empty view for None. Any object: an exact torch.Tensor is
// read through its attributes (torch_view), anything else through nb::ndarray (DLPack);
// `writable` refuses read-only arrays (outputs).
TensorView to_view_opt(const nb::handle& a, const char* what, bool writable = false);
// The same for a required argument (None raises naming `what`).
TensorView to_view(const nb::handle& a, const char* what, bool writable);
// An exact torch.Tensor (CPU or CUDA, a dtype kvevict knows, strided) as a view of its memory,
// read from its attributes without DLPack; false (nothing set) for anything else. Throws naming
// `what` for more than kMaxDims dims or a negative-bit view. Needs the GIL.
bool torch_view(PyObject* o, const char* what, TensorView* out);

// Raw pointers of typed 1-D arrays, checked for dtype, contiguity and (when n >= 0) length.
const int64_t* i64_data(const Array& a, const char* what, int64_t n = -1);
int64_t* i64_data_mut(const MutArray& a, const char* what, int64_t n = -1);
int32_t* i32_data_mut(const MutArray& a, const char* what, int64_t n = -1);
float* f32_data_mut(const MutArray& a, const char* what, int64_t n = -1);

// A KVLayerView over Python-owned arrays: k, v [rows, d]; pos [rows] i32; score_acc [rows] f32 or
// None; offsets [Hkv + 1] and lens [Hkv] host i64 (lens is written by compaction and eviction).
// RowArray: Array where the op only reads the rows (compaction input, attention), MutArray
// where it moves them in place (decode eviction).
template <class RowArray>
KVLayerView layer_view(const RowArray& k, const RowArray& v, const RowArray& pos,
                       const nb::handle& score_acc, const Array& offsets, const MutArray& lens,
                       const char* what);

// An AttentionProblem over Python-owned arrays: q [Hq, m, d] and the cache on `device`, q_pos [m]
// host int32, offsets/lens host. Throws naming the argument on a wrong shape, dtype or device.
AttentionProblem attention_problem_of(const Array& q, const Array& q_pos, const Array& k,
                                      const Array& v, const Array& pos, const Array& offsets,
                                      const MutArray& lens, float scale, int sliding_window,
                                      float softcap, Device device);

// Throws unless t is empty or on `device`, naming `what`.
void check_on(const TensorView& t, Device device, const char* what);
// A ScoreProblem over Python-owned arrays (q and wo may be None); with `device`, every tensor must
// be there.
ScoreProblem score_problem_of(const nb::handle& q, const nb::handle& k, const nb::handle& v,
                              const nb::handle& wo, float scale, const Device* device = nullptr);

// A host Selection, as select() and LayerEvictor::plan() return it. Python copies it into arrays
// of its framework (copy_into), so the framework owns the kept indices.
void bind_selection(nb::module_& m);

void bind_options(nb::module_& m);
void bind_host_ops(nb::module_& m);
void bind_cuda_ops(nb::module_& m);
void bind_evictors(nb::module_& m);

// ScoreOptions / SelectOptions from the keyword arguments of the Python API (options.cpp).
ScoreOptions make_score_options(const std::string& method, const nb::handle& aggregate,
                                const nb::handle& window, const nb::handle& pool,
                                bool h2o_normalize, uint64_t seed, float scale);
Budget make_budget(const nb::handle& budget, const nb::handle& compression_ratio);
SelectOptions make_select_options(const std::string& policy, const Budget& budget, double alpha,
                                  int sink, int window);

}  // namespace kvevict::python
