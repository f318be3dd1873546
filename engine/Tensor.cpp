/// Dense tensor storage and element conversions.
#include "fusec/engine/Tensor.h"

#include <algorithm>
#include <cassert>
#include <limits>
#include <type_traits>
#include <sstream>

#include "fusec/engine/Error.h"

namespace fusec {

int64_t shapeNumel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shapeToString(const Shape& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  assert(std::all_of(shape_.begin(), shape_.end(), [](int64_t d) { return d >= 0; }) &&
         "tensor dims must be non-negative");
  bytes_.resize(static_cast<size_t>(numel()) * dtypeSize(dtype_));
}

Tensor Tensor::reshaped(Shape shape) const {
  assert(shapeNumel(shape) == numel() && "reshape must keep the element count");
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

namespace {

/// Calls f(ptr) with a typed pointer to the tensor's elements.
template <class F>
auto visitNumeric(DType dtype, const std::byte* p, F&& f) {
  switch (dtype) {
    case DType::Float32: return f(reinterpret_cast<const float*>(p));
    case DType::Float64: return f(reinterpret_cast<const double*>(p));
    case DType::Int64: return f(reinterpret_cast<const int64_t*>(p));
    case DType::Int32: return f(reinterpret_cast<const int32_t*>(p));
    case DType::Int16: return f(reinterpret_cast<const int16_t*>(p));
    case DType::Int8: return f(reinterpret_cast<const int8_t*>(p));
    case DType::UInt8: return f(reinterpret_cast<const uint8_t*>(p));
    case DType::UInt16: return f(reinterpret_cast<const uint16_t*>(p));
    case DType::UInt32: return f(reinterpret_cast<const uint32_t*>(p));
    case DType::UInt64: return f(reinterpret_cast<const uint64_t*>(p));
    case DType::Bool: return f(reinterpret_cast<const bool*>(p));
    default:
      throw UserError{"element type `" + std::string(dtypeName(dtype)) + "` is not supported here",
                      true};
  }
}

template <class To, class From>
To convertElement(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    // Out-of-range float to int is undefined in C++; saturate like most runtimes.
    if (!(v == v)) return To(0);
    long double x = static_cast<long double>(v);
    if (x <= static_cast<long double>(std::numeric_limits<To>::min()))
      return std::numeric_limits<To>::min();
    if (x >= static_cast<long double>(std::numeric_limits<To>::max()))
      return std::numeric_limits<To>::max();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace

double Tensor::scalarAt(int64_t i) const {
  assert(i >= 0 && i < numel() && "element index out of range");
  return visitNumeric(dtype_, raw(), [i](auto* p) { return static_cast<double>(p[i]); });
}

std::vector<int64_t> Tensor::toInt64s() const {
  std::vector<int64_t> out(static_cast<size_t>(numel()));
  visitNumeric(dtype_, raw(), [&](auto* p) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int64_t>(p[i]);
    return 0;
  });
  return out;
}

std::vector<float> Tensor::toFloats() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  visitNumeric(dtype_, raw(), [&](auto* p) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(p[i]);
    return 0;
  });
  return out;
}

Tensor Tensor::castTo(DType to) const {
  Tensor out(to, shape_);
  const int64_t n = numel();
  visitNumeric(dtype_, raw(), [&](auto* src) {
    using From = std::remove_cv_t<std::remove_pointer_t<decltype(src)>>;
    auto write = [&](auto* dst) {
      using To = std::remove_pointer_t<decltype(dst)>;
      for (int64_t i = 0; i < n; ++i) dst[i] = convertElement<To, From>(src[i]);
      return 0;
    };
    switch (to) {
      case DType::Float32: return write(out.data<float>());
      case DType::Float64: return write(out.data<double>());
      case DType::Int64: return write(out.data<int64_t>());
      case DType::Int32: return write(out.data<int32_t>());
      case DType::Int16: return write(out.data<int16_t>());
      case DType::Int8: return write(out.data<int8_t>());
      case DType::UInt8: return write(out.data<uint8_t>());
      case DType::UInt16: return write(out.data<uint16_t>());
      case DType::UInt32: return write(out.data<uint32_t>());
      case DType::UInt64: return write(out.data<uint64_t>());
      case DType::Bool: return write(out.data<bool>());
      default:
        throw UserError{"cannot convert to element type `" + std::string(dtypeName(to)) + "`", true};
    }
  });
  return out;
}

}  // namespace fusec
