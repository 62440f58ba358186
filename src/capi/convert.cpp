// C structs -> C++ views (capi_internal.h). The C enums are mapped value by value, never cast, so
// their numbers stay fixed whatever the C++ enums become.
#include <string>

#include "capi/capi_internal.h"

namespace kvevict::capi {

DType dtype_from_c(int32_t dtype, const char* what) {
  switch (dtype) {
    case KVEVICT_DTYPE_F32: return DType::kF32;
    case KVEVICT_DTYPE_F64: return DType::kF64;
    case KVEVICT_DTYPE_F16: return DType::kF16;
    case KVEVICT_DTYPE_BF16: return DType::kBF16;
    case KVEVICT_DTYPE_I32: return DType::kI32;
    case KVEVICT_DTYPE_I64: return DType::kI64;
    case KVEVICT_DTYPE_U8: return DType::kU8;
    default: break;
  }
  KVEVICT_FAIL(what, " dtype ", dtype, " is not a kvevict_dtype; expected 0 (F32) .. 6 (U8)");
}

int32_t dtype_to_c(DType dtype) {
  switch (dtype) {
    case DType::kF32: return KVEVICT_DTYPE_F32;
    case DType::kF64: return KVEVICT_DTYPE_F64;
    case DType::kF16: return KVEVICT_DTYPE_F16;
    case DType::kBF16: return KVEVICT_DTYPE_BF16;
    case DType::kI32: return KVEVICT_DTYPE_I32;
    case DType::kI64: return KVEVICT_DTYPE_I64;
    case DType::kU8: return KVEVICT_DTYPE_U8;
  }
  KVEVICT_FAIL("dtype ", static_cast<int>(dtype), " has no kvevict_dtype");
}

Device device_from_c(int32_t device, const char* what) {
  switch (device) {
    case KVEVICT_DEVICE_CPU: return Device::kCpu;
    case KVEVICT_DEVICE_CUDA: return Device::kCuda;
    default: break;
  }
  KVEVICT_FAIL(what, " device ", device, " is not a kvevict_device; expected 0 (CPU) or 1 (CUDA)");
}

int32_t device_to_c(Device device) {
  return device == Device::kCuda ? KVEVICT_DEVICE_CUDA : KVEVICT_DEVICE_CPU;
}

TensorView view_from_c(const kvevict_tensor* t, const char* what) {
  if (t == nullptr) return TensorView();
  KVEVICT_CHECK(t->ndim >= 0 && t->ndim <= KVEVICT_MAX_DIMS, what, " has ndim ", t->ndim,
                "; expected 0 .. ", KVEVICT_MAX_DIMS);
  KVEVICT_CHECK(t->data != nullptr, what, " has NULL data; expected a tensor (or pass NULL for ",
                "an absent one)");
  TensorView v;
  v.data = t->data;
  v.dtype = dtype_from_c(t->dtype, what);
  v.device = device_from_c(t->device, what);
  v.ndim = t->ndim;
  bool any_stride = false;
  for (int i = 0; i < t->ndim; ++i) {
    KVEVICT_CHECK(t->shape[i] >= 0, what, " has shape[", i, "] = ", t->shape[i], "; expected >= 0");
    v.shape[i] = t->shape[i];
    v.stride[i] = t->strides[i];
    any_stride = any_stride || t->strides[i] != 0;
  }
  if (!any_stride) {  // row-major contiguous
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; --i) {
      v.stride[i] = s;
      s *= t->shape[i];
    }
  }
  return v;
}

kvevict_tensor view_to_c(const TensorView& view) {
  kvevict_tensor t{};
  t.data = view.data;
  t.ndim = view.ndim;
  for (int i = 0; i < view.ndim; ++i) {
    t.shape[i] = view.shape[i];
    t.strides[i] = view.stride[i];
  }
  t.dtype = dtype_to_c(view.dtype);
  t.device = device_to_c(view.device);
  return t;
}

KVLayerView layer_from_c(const kvevict_kv_layer* layer, const char* what) {
  require(layer, what);
  KVLayerView c;
  c.dtype = dtype_from_c(layer->dtype, what);
  c.device = device_from_c(layer->device, what);
  c.num_kv_heads = layer->num_kv_heads;
  c.head_dim = layer->head_dim;
  c.k = layer->k;
  c.v = layer->v;
  c.pos = layer->pos;
  c.score_acc = layer->score_acc;
  c.offsets = layer->offsets;
  c.lens = layer->lens;
  c.device_offsets = layer->device_offsets;
  c.device_lens = layer->device_lens;
  c.rows = layer->offsets != nullptr ? -1 : layer->rows;
  return c;  // the C++ functions validate the caches they are handed
}

}  // namespace kvevict::capi
