// nb::ndarray (any DLPack producer: numpy, torch CPU or CUDA) -> kvevict::TensorView, zero copy.
// Strides stay as the producer gave them (in elements, as DLPack and TensorView both count), so
// a transposed torch view reaches the C++ checks as what it is, and they name it.
#include <string>

#include "bindings.h"
#include "kvevict/attention.h"
#include "kvevict/error.h"
#include "kvevict/score.h"

namespace kvevict::python {
namespace {

DType dtype_of(const nb::dlpack::dtype& t, const char* what) {
  using nb::dlpack::dtype_code;
  const auto code = static_cast<dtype_code>(t.code);
  if (t.lanes == 1) {
    if (code == dtype_code::Float && t.bits == 32) return DType::kF32;
    if (code == dtype_code::Float && t.bits == 64) return DType::kF64;
    if (code == dtype_code::Float && t.bits == 16) return DType::kF16;
    if (code == dtype_code::Bfloat && t.bits == 16) return DType::kBF16;
    if (code == dtype_code::Int && t.bits == 32) return DType::kI32;
    if (code == dtype_code::Int && t.bits == 64) return DType::kI64;
    if (code == dtype_code::UInt && t.bits == 8) return DType::kU8;
  }
  KVEVICT_FAIL(what, " has an unsupported dtype (DLPack code ", int(t.code), ", ", int(t.bits),
               " bits, ", int(t.lanes), " lanes); expected float32, float64, float16, bfloat16, ",
               "int32, int64 or uint8");
}

template <class A>
TensorView view_of(const A& a, const char* what) {
  KVEVICT_CHECK(a.ndim() <= static_cast<size_t>(kMaxDims), what, " has ", a.ndim(),
                " dims; expected at most ", kMaxDims);
  TensorView t;
  t.data = const_cast<void*>(static_cast<const void*>(a.data()));
  t.dtype = dtype_of(a.dtype(), what);
  const int dev = a.device_type();
  if (dev == nb::device::cpu::value) {
    t.device = Device::kCpu;
  } else if (dev == nb::device::cuda::value) {
    t.device = Device::kCuda;
  } else {
    KVEVICT_FAIL(what, " lives on DLPack device type ", dev,
                 "; expected CPU memory or a CUDA device");
  }
  t.ndim = static_cast<int>(a.ndim());
  for (int i = 0; i < t.ndim; ++i) {
    t.shape[i] = static_cast<int64_t>(a.shape(i));
    t.stride[i] = a.stride(i);
  }
  return t;
}

// torch tensors without DLPack. torch's __dlpack__ is a Python method (about 5 us a tensor, the
// larger part of a small kernel call's host time: issue 15); the same metadata read through the
// C API costs a fraction of that. Only exact torch.Tensor objects on the CPU or a CUDA device
// with a dtype kvevict knows take this path (negative-bit views raise); everything else
// (subclasses such as Parameter, sparse, other devices, numpy) goes through nb::ndarray / DLPack.
struct TorchApi {
  PyObject* tensor_type = nullptr;
  PyObject* dtypes[7] = {};
  DType codes[7] = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16,
                    DType::kI32, DType::kI64, DType::kU8};
  PyObject *data_ptr = nullptr, *shape = nullptr, *stride = nullptr, *dtype = nullptr,
           *is_cuda = nullptr, *is_cpu = nullptr, *is_neg = nullptr;
};

// The live torch module's types, looked up once torch is imported (never imports it). Held for
// the life of the process (torch cannot be unloaded). Called with the GIL held.
const TorchApi* torch_api() {
  static TorchApi api;
  static bool ready = false;
  if (ready) return &api;
  PyObject* modules = PyImport_GetModuleDict();                                  // borrowed
  PyObject* torch = modules ? PyDict_GetItemString(modules, "torch") : nullptr;  // borrowed
  if (torch == nullptr) return nullptr;
  static const char* names[7] = {"float32", "float64", "float16", "bfloat16",
                                 "int32",   "int64",   "uint8"};
  TorchApi t;
  t.tensor_type = PyObject_GetAttrString(torch, "Tensor");
  for (int i = 0; i < 7; ++i) t.dtypes[i] = PyObject_GetAttrString(torch, names[i]);
  bool ok = t.tensor_type != nullptr && PyType_Check(t.tensor_type);
  for (PyObject* d : t.dtypes) ok = ok && d != nullptr;
  if (!ok) {  // a partly imported torch: try again at the next call
    PyErr_Clear();
    Py_XDECREF(t.tensor_type);
    for (PyObject* d : t.dtypes) Py_XDECREF(d);
    return nullptr;
  }
  t.data_ptr = PyUnicode_InternFromString("data_ptr");
  t.shape = PyUnicode_InternFromString("shape");
  t.stride = PyUnicode_InternFromString("stride");
  t.dtype = PyUnicode_InternFromString("dtype");
  t.is_cuda = PyUnicode_InternFromString("is_cuda");
  t.is_cpu = PyUnicode_InternFromString("is_cpu");
  t.is_neg = PyUnicode_InternFromString("is_neg");
  api = t;
  ready = true;
  return &api;
}

// The ints of a tuple (torch.Size or stride()) into `out`; false on anything unexpected.
bool tuple_ints(PyObject* tup, int64_t* out, Py_ssize_t n) {
  if (tup == nullptr || !PyTuple_Check(tup) || PyTuple_Size(tup) != n) return false;
  for (Py_ssize_t i = 0; i < n; ++i) {
    out[i] = PyLong_AsLongLong(PyTuple_GetItem(tup, i));
    if (out[i] == -1 && PyErr_Occurred()) return false;
  }
  return true;
}

bool call_true(PyObject* o, PyObject* name, bool method) {
  nb::object r =
      nb::steal(method ? PyObject_CallMethodObjArgs(o, name, nullptr) : PyObject_GetAttr(o, name));
  return r.is_valid() && r.ptr() == Py_True;
}

}  // namespace

bool torch_view(PyObject* o, const char* what, TensorView* out) {
  const TorchApi* api = torch_api();
  if (api == nullptr || reinterpret_cast<PyObject*>(Py_TYPE(o)) != api->tensor_type) return false;
  bool ok = false;
  TensorView t;
  {
    nb::object dt = nb::steal(PyObject_GetAttr(o, api->dtype));
    int which = -1;
    for (int i = 0; i < 7 && dt.is_valid(); ++i)
      if (dt.ptr() == api->dtypes[i]) which = i;
    if (which >= 0) t.dtype = api->codes[which];
    const bool cuda = which >= 0 && call_true(o, api->is_cuda, false);
    const bool cpu = which >= 0 && !cuda && call_true(o, api->is_cpu, false);
    t.device = cuda ? Device::kCuda : Device::kCpu;
    // A negative-bit view (torch._neg_view, conj of a real tensor) holds -x in memory: reading
    // it raw would be a silent wrong answer (DLPack exports it raw too).
    KVEVICT_CHECK(!(cuda || cpu) || !call_true(o, api->is_neg, true), what,
                  " is a negative-bit torch view; expected its values in memory (call "
                  ".resolve_neg())");
    if (cuda || cpu) {
      nb::object shape = nb::steal(PyObject_GetAttr(o, api->shape));
      const Py_ssize_t nd =
          shape.is_valid() && PyTuple_Check(shape.ptr()) ? PyTuple_Size(shape.ptr()) : -1;
      if (nd > kMaxDims) KVEVICT_FAIL(what, " has ", nd, " dims; expected at most ", kMaxDims);
      if (nd >= 0) {
        t.ndim = static_cast<int>(nd);
        nb::object stride = nb::steal(PyObject_CallMethodObjArgs(o, api->stride, nullptr));
        nb::object ptr = nb::steal(PyObject_CallMethodObjArgs(o, api->data_ptr, nullptr));
        ok = tuple_ints(shape.ptr(), t.shape.data(), nd) &&
             tuple_ints(stride.ptr(), t.stride.data(), nd) && ptr.is_valid();
        if (ok) {
          t.data = PyLong_AsVoidPtr(ptr.ptr());
          ok = !PyErr_Occurred();
        }
      }
    }
  }
  if (!ok) {
    PyErr_Clear();  // sparse (no strides), meta, ...: the DLPack path names what is wrong
    return false;
  }
  *out = t;
  return true;
}

namespace {

template <class T, class A>
T* typed_1d(const A& a, DType want, const char* what, int64_t n) {
  const TensorView t = view_of(a, what);
  KVEVICT_CHECK(t.ndim == 1 && t.dtype == want && t.is_contiguous(), what, " is ",
                dtype_name(t.dtype), " ", t.shape_str(), "; expected a contiguous 1-D ",
                dtype_name(want), " array");
  KVEVICT_CHECK(n < 0 || t.shape[0] == n, what, " has ", t.shape[0], " elements; expected ", n);
  return static_cast<T*>(t.data);
}

}  // namespace

TensorView to_view(const Array& a, const char* what) {
  return view_of(a, what);
}
TensorView to_view(const MutArray& a, const char* what) {
  return view_of(a, what);
}

namespace {
// The device type of an object with a torch-style `device.type` ("cpu", "cuda", "meta", ...);
// empty for anything else.
std::string device_type_of(const nb::handle& a) {
  if (!nb::hasattr(a, "device")) return {};
  const nb::object dev = a.attr("device");
  if (!nb::hasattr(dev, "type")) return {};
  const nb::object type = dev.attr("type");
  return nb::isinstance<nb::str>(type) ? std::string(nb::borrow<nb::str>(type).c_str())
                                       : std::string();
}
}  // namespace

TensorView to_view_opt(const nb::handle& a, const char* what, bool writable) {
  if (a.is_none()) return TensorView();
  TensorView t;
  if (torch_view(a.ptr(), what, &t)) return t;
  // A tensor with no memory kvevict can read (meta, mps, xla, ...) would fail the casts below as
  // "not an array": say where it lives instead.
  const std::string device = device_type_of(a);
  KVEVICT_CHECK(device.empty() || device == "cpu" || device == "cuda", what, " lives on device ",
                device, "; expected a CPU or CUDA tensor (or a numpy array)");
  if (writable) {
    MutArray arr;
    KVEVICT_CHECK(nb::try_cast(a, arr), what,
                  " is not a writable array; expected a numpy array or a torch tensor");
    return view_of(arr, what);
  }
  Array arr;
  KVEVICT_CHECK(nb::try_cast(a, arr), what,
                " is not an array; expected a numpy array, a torch tensor or None");
  return view_of(arr, what);
}

TensorView to_view(const nb::handle& a, const char* what, bool writable) {
  KVEVICT_CHECK(!a.is_none(), what, " is None; expected a numpy array or a torch tensor");
  return to_view_opt(a, what, writable);
}

const int64_t* i64_data(const Array& a, const char* what, int64_t n) {
  return typed_1d<const int64_t>(a, DType::kI64, what, n);
}
int64_t* i64_data_mut(const MutArray& a, const char* what, int64_t n) {
  return typed_1d<int64_t>(a, DType::kI64, what, n);
}
int32_t* i32_data_mut(const MutArray& a, const char* what, int64_t n) {
  return typed_1d<int32_t>(a, DType::kI32, what, n);
}
float* f32_data_mut(const MutArray& a, const char* what, int64_t n) {
  return typed_1d<float>(a, DType::kF32, what, n);
}

template <class RowArray>
KVLayerView layer_view(const RowArray& k, const RowArray& v, const RowArray& pos,
                       const nb::handle& score_acc, const Array& offsets, const MutArray& lens,
                       const char* what) {
  const TensorView kt = to_view(k, "cache k"), vt = to_view(v, "cache v");
  KVEVICT_CHECK(kt.ndim == 2 && kt.is_contiguous(), what, " k is ", kt.shape_str(),
                "; expected a contiguous [rows, d] array");
  KVEVICT_CHECK(vt.ndim == 2 && vt.is_contiguous() && vt.shape == kt.shape &&
                    vt.dtype == kt.dtype && vt.device == kt.device,
                what, " v is ", dtype_name(vt.dtype), " ", vt.shape_str(), "; expected k's ",
                dtype_name(kt.dtype), " ", kt.shape_str(), " on the same device");
  const TensorView pt = to_view(pos, "cache pos");
  KVEVICT_CHECK(pt.ndim == 1 && pt.dtype == DType::kI32 && pt.is_contiguous() &&
                    pt.shape[0] == kt.shape[0] && pt.device == kt.device,
                what, " pos is ", dtype_name(pt.dtype), " ", pt.shape_str(),
                "; expected contiguous int32 [", kt.shape[0], "] beside k");
  const TensorView ot = to_view(offsets, "cache offsets");
  KVEVICT_CHECK(ot.ndim == 1 && ot.dtype == DType::kI64 && ot.device == Device::kCpu &&
                    ot.is_contiguous() && ot.shape[0] >= 2,
                what, " offsets is ", dtype_name(ot.dtype), " ", ot.shape_str(),
                "; expected host int64 [Hkv + 1]");
  // Before the narrowing to int below.
  check_indexable(kt, "cache k");
  check_indexable(ot, "cache offsets");
  KVLayerView c;
  c.dtype = kt.dtype;
  c.device = kt.device;
  c.num_kv_heads = static_cast<int>(ot.shape[0] - 1);
  c.head_dim = static_cast<int>(kt.shape[1]);
  c.k = kt.data;
  c.v = vt.data;
  c.pos = static_cast<int32_t*>(pt.data);
  c.offsets = static_cast<const int64_t*>(ot.data);
  c.lens = i64_data_mut(lens, "cache lens", c.num_kv_heads);
  KVEVICT_CHECK(to_view(lens, "cache lens").device == Device::kCpu, what,
                " lens must be a host array");
  if (!score_acc.is_none()) {
    MutArray acc;
    KVEVICT_CHECK(nb::try_cast(score_acc, acc), what,
                  " score_acc is not a writable array; expected float32 [rows] or None");
    c.score_acc = f32_data_mut(acc, "cache score_acc", kt.shape[0]);
    KVEVICT_CHECK(to_view(acc, "cache score_acc").device == kt.device, what,
                  " score_acc lives on another device than k");
  }
  KVEVICT_CHECK(c.offsets[c.num_kv_heads] <= kt.shape[0], what, " offsets end at row ",
                c.offsets[c.num_kv_heads], "; k holds only ", kt.shape[0], " rows");
  c.validate(what);
  return c;
}

void check_on(const TensorView& t, Device device, const char* what) {
  KVEVICT_CHECK(t.empty() || t.device == device, what,
                device == Device::kCuda
                    ? " is in host memory; the CUDA path needs device tensors"
                    : " lives on a CUDA device; this host path needs CPU memory");
}

ScoreProblem score_problem_of(const nb::handle& q, const nb::handle& k, const nb::handle& v,
                              const nb::handle& wo, float scale, const Device* device) {
  ScoreProblem p;
  p.q = to_view_opt(q, "q");
  p.k = to_view(k, "k", false);
  p.v = to_view(v, "v", false);
  p.wo = to_view_opt(wo, "wo");
  p.scale = scale;
  if (device) {
    check_on(p.q, *device, "q");
    check_on(p.k, *device, "k");
    check_on(p.v, *device, "v");
    check_on(p.wo, *device, "wo");
  }
  return p;
}

template KVLayerView layer_view<Array>(const Array&, const Array&, const Array&, const nb::handle&,
                                       const Array&, const MutArray&, const char*);
template KVLayerView layer_view<MutArray>(const MutArray&, const MutArray&, const MutArray&,
                                          const nb::handle&, const Array&, const MutArray&,
                                          const char*);

AttentionProblem attention_problem_of(const Array& q, const Array& q_pos, const Array& k,
                                      const Array& v, const Array& pos, const Array& offsets,
                                      const MutArray& lens, float scale, int sliding_window,
                                      float softcap, Device device) {
  const char* where = device == Device::kCuda ? "a CUDA device" : "host memory";
  AttentionProblem p;
  p.q = to_view(q, "q");
  KVEVICT_CHECK(p.q.device == device, "q lives elsewhere than the attention path; expected ",
                where);
  p.cache = layer_view(k, v, pos, nb::none(), offsets, lens, "attention cache");
  KVEVICT_CHECK(p.cache.device == device, "the attention cache k, v, pos are not in ", where);
  const TensorView qp = to_view(q_pos, "q_pos");
  KVEVICT_CHECK(qp.ndim == 1 && qp.dtype == DType::kI32 && qp.is_contiguous() &&
                    qp.device == Device::kCpu && p.q.ndim == 3 && qp.shape[0] == p.q.shape[1],
                "q_pos is ", dtype_name(qp.dtype), " ", qp.shape_str(),
                "; expected host int32 [m] with m the queries of q ", p.q.shape_str());
  p.q_pos = qp.ptr<int32_t>();
  p.scale = scale;
  p.sliding_window = sliding_window;
  p.softcap = softcap;
  return p;
}

}  // namespace kvevict::python
