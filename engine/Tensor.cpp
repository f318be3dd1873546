/// Dense tensor storage and element conversions.
#include "fusec/engine/Tensor.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <type_traits>
#include <sstream>

#include "fusec/engine/Error.h"

namespace fusec {

Shape stridesOf(const Shape& shape) {
  Shape s(shape.size(), 1);
  // Saturates like shapeNumel: only a tensor with a zero dim can have such
  // a shape, and its strides are never used to address an element.
  for (size_t i = shape.size(); i-- > 1;)
    if (__builtin_mul_overflow(s[i], shape[i], &s[i - 1])) s[i - 1] = std::numeric_limits<int64_t>::max();
  return s;
}

int64_t shapeNumel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n)) return std::numeric_limits<int64_t>::max();  // saturates, never wraps
  return n;
}

std::string shapeToString(const Shape& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

std::optional<int64_t> checkedNumel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return std::nullopt;
  return n;
}

std::optional<int64_t> checkedBytes(const Shape& shape, DType dtype) {
  std::optional<int64_t> n = checkedNumel(shape);
  int64_t bytes = 0;
  if (!n || __builtin_mul_overflow(*n, static_cast<int64_t>(dtypeSize(dtype)), &bytes)) return std::nullopt;
  return bytes;
}

static Expected<int64_t> parseLimit(const char* name, const char* text) {
  const std::string_view s(text);
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < 1 || v > kMaxLimit)
    return Error{std::string(name) + ": `" + std::string(s.substr(0, 40)) + "` is not a whole number from 1 to " +
                 std::to_string(kMaxLimit)};
  return v;
}

int64_t limitFromEnv(const char* name, int64_t fallback) {
  const char* env = std::getenv(name);
  if (!env) return fallback;
  Expected<int64_t> v = parseLimit(name, env);
  if (!v) throw UserError{v.error().message};
  return v.value();
}

Status checkLimitsInEnv() {
  for (const char* name : kLimitVariables)
    if (const char* env = std::getenv(name))
      if (Expected<int64_t> v = parseLimit(name, env); !v) return v.error();
  return Status::success();
}

int64_t maxTensorBytes() {
  static const int64_t limit = limitFromEnv("FUSEC_MAX_TENSOR_BYTES", int64_t{4} << 30);
  return limit;
}


Tensor::Tensor(DType dtype, Shape shape, Uninitialized) : dtype_(dtype), shape_(std::move(shape)) {
  const std::optional<int64_t> bytes = checkedBytes(shape_, dtype_);
  if (!bytes)
    throw UserError{"a tensor of shape " + shapeToString(shape_) + " has a negative dim or a size past 64 bits"};
  if (*bytes > maxTensorBytes())
    throw UserError{"a tensor of shape " + shapeToString(shape_) + " would take " + std::to_string(*bytes) +
                    " bytes, above the limit of " + std::to_string(maxTensorBytes()) + " (FUSEC_MAX_TENSOR_BYTES)"};
  bytes_.resize(static_cast<size_t>(*bytes));
}

Tensor::Tensor(DType dtype, Shape shape) : Tensor(dtype, std::move(shape), Uninitialized{}) {
  if (!bytes_.empty()) std::memset(bytes_.data(), 0, bytes_.size());  // an empty vector's data() may be null
}

Tensor Tensor::uninitialized(DType dtype, Shape shape) { return Tensor(dtype, std::move(shape), Uninitialized{}); }

Tensor Tensor::bitcast(DType dtype) const {
  assert(dtypeSize(dtype) == dtypeSize(dtype_) && "bitcast needs equal element sizes");
  Tensor t = *this;
  t.dtype_ = dtype;
  return t;
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
void visitNumeric(DType dtype, const std::byte* p, F&& f) {
  bool known = visitNumericDType<true>(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    f(reinterpret_cast<const T*>(p));
  });
  if (!known)
    throw UserError{"element type `" + std::string(dtypeName(dtype)) + "` is not supported here", true};
}

/// IEEE half <-> float, rounding to nearest even.
float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const int exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  float magnitude;
  if (exp == 0) magnitude = std::ldexp(static_cast<float>(mant), -24);            // subnormal
  else if (exp == 31) magnitude = mant ? std::numeric_limits<float>::quiet_NaN()
                                       : std::numeric_limits<float>::infinity();
  else magnitude = std::ldexp(static_cast<float>(mant | 0x400), exp - 25);
  uint32_t bits;
  std::memcpy(&bits, &magnitude, 4);
  bits |= sign;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

uint16_t floatToHalf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00;
  if (a >= 65520.f) return sign | 0x7c00;  // rounds to infinity
  if (a < std::ldexp(1.f, -14)) {
    // Subnormal: units of 2^-24, nearest even.
    return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, 24)));
  }
  int exp;
  const float frac = std::frexp(a, &exp);  // a = frac * 2^exp, frac in [0.5, 1)
  uint32_t mant = static_cast<uint32_t>(std::nearbyint(std::ldexp(frac, 11)));  // 11 bits incl. implicit
  if (mant == 0x800) {
    mant = 0x400;
    ++exp;
  }
  return sign | static_cast<uint16_t>(((exp + 14) << 10) | (mant & 0x3ff));
}

float bfloat16ToFloat(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

uint16_t floatToBfloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
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
  if (dtype_ == DType::Float16 || dtype_ == DType::BFloat16) {
    const uint16_t bits = reinterpret_cast<const uint16_t*>(raw())[i];
    return dtype_ == DType::Float16 ? halfToFloat(bits) : bfloat16ToFloat(bits);
  }
  double v = 0;
  visitNumeric(dtype_, raw(), [&](auto* p) { v = static_cast<double>(p[i]); });
  return v;
}

std::vector<int64_t> Tensor::toInt64s() const {
  std::vector<int64_t> out(static_cast<size_t>(numel()));
  visitNumeric(dtype_, raw(), [&](auto* p) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int64_t>(p[i]);
  });
  return out;
}

std::vector<float> Tensor::toFloats() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  visitNumeric(dtype_, raw(), [&](auto* p) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(p[i]);
  });
  return out;
}

Tensor Tensor::castTo(DType to) const {
  const int64_t n = numel();
  // 16-bit floats convert through float32.
  const bool fromHalf = dtype_ == DType::Float16 || dtype_ == DType::BFloat16;
  if (fromHalf) {
    Tensor f = uninitialized(DType::Float32, shape_);
    const auto* src = reinterpret_cast<const uint16_t*>(raw());
    for (int64_t i = 0; i < n; ++i)
      f.data<float>()[i] = dtype_ == DType::Float16 ? halfToFloat(src[i]) : bfloat16ToFloat(src[i]);
    return to == DType::Float32 ? f : f.castTo(to);
  }
  if (to == DType::Float16 || to == DType::BFloat16) {
    Tensor f = dtype_ == DType::Float32 ? *this : castTo(DType::Float32);
    Tensor out = uninitialized(to, shape_);
    auto* dst = reinterpret_cast<uint16_t*>(out.raw());
    for (int64_t i = 0; i < n; ++i)
      dst[i] = to == DType::Float16 ? floatToHalf(f.data<float>()[i]) : floatToBfloat16(f.data<float>()[i]);
    return out;
  }
  Tensor out = uninitialized(to, shape_);
  visitNumeric(dtype_, raw(), [&](auto* src) {
    using From = std::remove_cv_t<std::remove_pointer_t<decltype(src)>>;
    bool known = visitNumericDType<true>(to, [&](auto tag) {
      using To = typename decltype(tag)::type;
      To* dst = reinterpret_cast<To*>(out.raw());
      for (int64_t i = 0; i < n; ++i) dst[i] = convertElement<To, From>(src[i]);
    });
    if (!known)
      throw UserError{"cannot convert to element type `" + std::string(dtypeName(to)) + "`", true};
  });
  return out;
}

}  // namespace fusec
