#include "kvevict/tensor.h"

#include <cmath>
#include <cstring>
#include <sstream>

namespace kvevict {

TensorView::TensorView(void* data_, DType dtype_, std::initializer_list<int64_t> shape_,
                       Device device_)
    : TensorView(contiguous(data_, dtype_, std::vector<int64_t>(shape_), device_)) {}

TensorView TensorView::contiguous(void* data, DType dtype, const std::vector<int64_t>& shape,
                                  Device device) {
  KVEVICT_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), "tensor rank ", shape.size(),
                " exceeds the maximum ", kMaxDims);
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = static_cast<int>(shape.size());
  int64_t s = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    KVEVICT_CHECK(shape[i] >= 0, "negative size ", shape[i], " in dim ", i);
    t.shape[i] = shape[i];
    t.stride[i] = s;
    s *= shape[i];
  }
  return t;
}

int64_t TensorView::size(int dim) const {
  if (dim < 0) dim += ndim;
  KVEVICT_CHECK(dim >= 0 && dim < ndim, "dim ", dim, " out of range for a rank-", ndim, " tensor");
  return shape[dim];
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

bool TensorView::is_contiguous() const {
  // No element to misplace: numpy and torch call every 0-element array contiguous, whatever
  // strides the producer reports (an empty selection index or cache was refused as strided).
  for (int i = 0; i < ndim; ++i)
    if (shape[i] == 0) return true;
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (shape[i] != 1 && stride[i] != s) return false;
    s *= shape[i];
  }
  return true;
}

std::string TensorView::shape_str() const {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < ndim; ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

double TensorView::load(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const {
  const int64_t o = offset(i0, i1, i2, i3);
  switch (dtype) {
    case DType::kF32: return static_cast<const float*>(data)[o];
    case DType::kF64: return static_cast<const double*>(data)[o];
    case DType::kF16: return half_to_float(static_cast<const uint16_t*>(data)[o]);
    case DType::kBF16: return bf16_to_float(static_cast<const uint16_t*>(data)[o]);
    case DType::kI32: return static_cast<const int32_t*>(data)[o];
    case DType::kI64: return static_cast<double>(static_cast<const int64_t*>(data)[o]);
    case DType::kU8: return static_cast<const uint8_t*>(data)[o];
  }
  return 0;
}

TensorView TensorView::select0(int64_t i) const {
  KVEVICT_CHECK(ndim >= 1 && i >= 0 && i < shape[0], "index ", i, " out of range for dim 0 of ",
                shape_str());
  TensorView t;
  t.data = static_cast<char*>(data) + i * stride[0] * static_cast<int64_t>(dtype_size(dtype));
  t.dtype = dtype;
  t.device = device;
  t.ndim = ndim - 1;
  for (int k = 1; k < ndim; ++k) {
    t.shape[k - 1] = shape[k];
    t.stride[k - 1] = stride[k];
  }
  return t;
}

void check_shape(const TensorView& t, const char* what, std::initializer_list<int64_t> expected) {
  std::ostringstream want;
  want << '[';
  int i = 0;
  bool ok = t.ndim == static_cast<int>(expected.size());
  for (int64_t e : expected) {
    want << (i ? ", " : "") << (e < 0 ? std::string("*") : std::to_string(e));
    if (ok && e >= 0 && t.shape[i] != e) ok = false;
    ++i;
  }
  want << ']';
  KVEVICT_CHECK(ok, what, " has shape ", t.shape_str(), "; expected ", want.str());
}

void check_indexable(const TensorView& t, const char* what) {
  for (int i = 0; i < t.ndim; ++i)
    KVEVICT_CHECK(t.shape[i] <= kMaxIndexedDim, what, " has shape ", t.shape_str(), ": dim ", i,
                  " is ", t.shape[i], "; expected at most ", kMaxIndexedDim,
                  " (heads, tokens and head dims are indexed with 32-bit integers)");
}

void check_finite(const TensorView& t, const char* what) {
  if (t.empty() || t.device != Device::kCpu) return;
  if (t.dtype != DType::kF32 && t.dtype != DType::kF64 && t.dtype != DType::kF16 &&
      t.dtype != DType::kBF16)
    return;
  std::array<int64_t, kMaxDims> idx{};
  const int64_t n = t.numel();
  for (int64_t flat = 0; flat < n; ++flat) {
    int64_t r = flat;
    for (int d = t.ndim - 1; d >= 0; --d) {
      idx[d] = r % t.shape[d];
      r /= t.shape[d];
    }
    const double x = t.load(idx[0], idx[1], idx[2], idx[3]);
    if (!std::isfinite(x)) {
      std::ostringstream where;
      for (int d = 0; d < t.ndim; ++d) where << (d ? ", " : "") << idx[d];
      KVEVICT_FAIL(what, " holds a non-finite value (", x, ") at [", where.str(),
                   "]; expected finite numbers");
    }
  }
}

HostTensor::HostTensor(DType dtype, std::vector<int64_t> shape)
    : dtype_(dtype), shape_(std::move(shape)) {
  int64_t n = 1;
  for (int64_t s : shape_) {
    KVEVICT_CHECK(s >= 0, "negative tensor size ", s);
    n *= s;
  }
  bytes_.assign(static_cast<size_t>(n) * dtype_size(dtype_), 0);
}

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}

TensorView HostTensor::view() const {
  return TensorView::contiguous(const_cast<uint8_t*>(bytes_.data()), dtype_, shape_);
}

HostTensor HostTensor::to_f32() const {
  HostTensor out(DType::kF32, shape_);
  const int64_t n = numel();
  float* dst = out.ptr<float>();
  switch (dtype_) {
    case DType::kF32: std::memcpy(dst, data(), n * 4); break;
    case DType::kF64:
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(ptr<double>()[i]);
      break;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(ptr<uint16_t>()[i]);
      break;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(ptr<uint16_t>()[i]);
      break;
    default: KVEVICT_FAIL("cannot convert a ", dtype_name(dtype_), " tensor to f32");
  }
  return out;
}

}  // namespace kvevict
