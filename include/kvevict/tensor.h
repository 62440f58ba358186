// Tensor views over caller memory, and a small owning host tensor for I/O, tests and the CLI.
// A view never owns its memory: the model runtime (or the caller) owns buffers and hands views
// down.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "kvevict/dtype.h"
#include "kvevict/error.h"

namespace kvevict {

enum class Device : uint8_t { kCpu, kCuda };

constexpr int kMaxDims = 4;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::kCpu;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};   // sizes, outermost first
  std::array<int64_t, kMaxDims> stride{};  // in elements, not bytes

  TensorView() = default;
  // A contiguous (row-major) view.
  TensorView(void* data, DType dtype, std::initializer_list<int64_t> shape,
             Device device = Device::kCpu);
  static TensorView contiguous(void* data, DType dtype, const std::vector<int64_t>& shape,
                               Device device = Device::kCpu);

  bool empty() const { return data == nullptr; }
  int64_t size(int dim) const;  // negative dims count from the back
  int64_t numel() const;
  bool is_contiguous() const;
  // True when the innermost dim has stride 1 (what every fast path needs).
  bool inner_contiguous() const { return ndim == 0 || stride[ndim - 1] == 1; }
  std::string shape_str() const;  // "[8, 4096, 128]"

  template <class T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  // Element offset of a multi-index (up to 4 dims).
  int64_t offset(int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) const {
    return i0 * stride[0] + i1 * stride[1] + i2 * stride[2] + i3 * stride[3];
  }
  // Reads one element as double, whatever the dtype (host memory only; for references and tests).
  double load(int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) const;
  // A view of index i along dim 0 (drops that dim).
  TensorView select0(int64_t i) const;
};

// Checks that `t` has `ndim` dims and the given sizes (-1 = any) and throws naming `what`, the
// actual shape and the expected one otherwise.
void check_shape(const TensorView& t, const char* what, std::initializer_list<int64_t> expected);
// The largest size of any dimension of a problem's tensor: heads and head dims are `int` and
// token rows are int32 (Selection indices, cache positions), so a larger size would wrap.
constexpr int64_t kMaxIndexedDim = INT32_MAX;
// Throws unless every dim of `t` is at most kMaxIndexedDim, naming `what`, the dim and its size.
// Problems check their tensors with it before anything narrows a size to int.
void check_indexable(const TensorView& t, const char* what);
// Throws unless every element of a host f32/f16/bf16/f64 tensor is finite, naming `what` and the
// first bad index.
void check_finite(const TensorView& t, const char* what);

// An owning, contiguous host tensor.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::vector<int64_t> shape);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const;
  size_t nbytes() const { return bytes_.size(); }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  template <class T>
  T* ptr() {
    return reinterpret_cast<T*>(bytes_.data());
  }
  template <class T>
  const T* ptr() const {
    return reinterpret_cast<const T*>(bytes_.data());
  }
  TensorView view() const;
  // A float32 copy (converting f16/bf16/f64).
  HostTensor to_f32() const;

 private:
  DType dtype_ = DType::kF32;
  std::vector<int64_t> shape_;
  std::vector<uint8_t> bytes_;
};

}  // namespace kvevict
