/// Dense tensors: an element type, a static shape and row-major bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cassert>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <type_traits>
#include <utility>
#include <string>
#include <vector>

#include "fusec/engine/DType.h"
#include "fusec/engine/Error.h"

namespace fusec {

using Shape = std::vector<int64_t>;

/// Number of elements of a shape (1 for a scalar, 0 if any dim is 0).
/// The element count (saturating at the int64 maximum; checkedNumel says
/// when it overflows).
int64_t shapeNumel(const Shape& shape);
/// Element count and byte size with every multiplication checked: nullopt
/// when a dim is negative or the product overflows int64. Use these
/// wherever a model's numbers decide a size.
std::optional<int64_t> checkedNumel(const Shape& shape);
std::optional<int64_t> checkedBytes(const Shape& shape, DType dtype);
/// The largest tensor fusec allocates for a model (weights, folded
/// constants, interpreter results, device buffers): $FUSEC_MAX_TENSOR_BYTES,
/// default 4 GiB. A larger one is an error, not an attempt.
int64_t maxTensorBytes();
/// The environment variables that set fusec's limits.
inline constexpr const char* kLimitVariables[] = {"FUSEC_MAX_TENSOR_BYTES", "FUSEC_MAX_INTERPRETER_STEPS",
                                                  "FUSEC_INFERENCE_SECONDS", "FUSEC_CACHE_MAX_BYTES"};
/// The largest value a limit may be set to (2^48): above it, a limit
/// limits nothing.
inline constexpr int64_t kMaxLimit = int64_t{1} << 48;
/// The limit in environment variable `name` (a whole number from 1 to
/// kMaxLimit), or `fallback` when it is unset; a UserError naming the
/// variable when it is set to anything else.
int64_t limitFromEnv(const char* name, int64_t fallback);
/// Whether every variable of kLimitVariables that is set holds a valid
/// limit: programs check this first, to refuse a typo before any work.
Status checkLimitsInEnv();
/// Row-major strides of a shape, in elements.
Shape stridesOf(const Shape& shape);
/// `[2, 3, 4]`
std::string shapeToString(const Shape& shape);

namespace detail {
/// Tensor storage: elements are left as they are unless a value is given,
/// so a tensor about to be overwritten (a copy, a conversion, a kernel's
/// result) is not zeroed first.
template <class T>
struct DefaultInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <class U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
}  // namespace detail

/// A dense row-major tensor with value semantics. String tensors are not
/// supported (their dtype size is 0).
class Tensor {
 public:
  Tensor() = default;
  /// Zero-filled tensor.
  Tensor(DType dtype, Shape shape);
  /// A tensor whose elements the caller writes, every one, before any is
  /// read (a copy, a conversion, a kernel's result): not zeroed first.
  static Tensor uninitialized(DType dtype, Shape shape);

  template <class T>
  static Tensor fromVector(Shape shape, const std::vector<T>& values) {
    Tensor t(DTypeOf<T>::value, std::move(shape));
    assert(static_cast<int64_t>(values.size()) == t.numel() && "value count must match shape");
    for (size_t i = 0; i < values.size(); ++i) t.data<T>()[i] = values[i];
    return t;
  }
  template <class T>
  static Tensor scalar(T value) {
    return fromVector<T>({}, {value});
  }

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_[static_cast<size_t>(i)]; }
  int64_t numel() const { return shapeNumel(shape_); }
  size_t byteSize() const { return bytes_.size(); }
  bool empty() const { return dtype_ == DType::Undefined; }

  template <class T>
  T* data() {
    assert(DTypeOf<T>::value == dtype_ && "tensor element type mismatch");
    return reinterpret_cast<T*>(bytes_.data());
  }
  template <class T>
  const T* data() const {
    assert(DTypeOf<T>::value == dtype_ && "tensor element type mismatch");
    return reinterpret_cast<const T*>(bytes_.data());
  }
  std::byte* raw() { return bytes_.data(); }
  const std::byte* raw() const { return bytes_.data(); }

  /// Same bytes, new shape of equal element count.
  Tensor reshaped(Shape shape) const;
  /// Same bytes read as another element type of the same size.
  Tensor bitcast(DType dtype) const;
  /// Element i converted to double (numeric dtypes and 16-bit floats).
  double scalarAt(int64_t i) const;
  /// All elements of an integer tensor as int64 (shape arguments, axes).
  std::vector<int64_t> toInt64s() const;
  /// All elements converted to float.
  std::vector<float> toFloats() const;
  /// A tensor of another numeric dtype with the values converted as by a C++
  /// static_cast (ONNX Cast semantics for the supported types); float16 and
  /// bfloat16 convert through float32, rounding to nearest even.
  Tensor castTo(DType to) const;

  bool operator==(const Tensor& other) const {
    return dtype_ == other.dtype_ && shape_ == other.shape_ && bytes_ == other.bytes_;
  }

 private:
  DType dtype_ = DType::Undefined;
  Shape shape_;
  std::vector<std::byte, detail::DefaultInitAllocator<std::byte>> bytes_;

  struct Uninitialized {};
  Tensor(DType dtype, Shape shape, Uninitialized);
};

}  // namespace fusec
