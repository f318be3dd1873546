/// Element types of tensors. The numeric values are those of ONNX's
/// TensorProto.DataType, so conversion at the ONNX boundary is a cast.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace fusec {

enum class DType : int32_t {
  Undefined = 0,
  Float32 = 1,
  UInt8 = 2,
  Int8 = 3,
  UInt16 = 4,
  Int16 = 5,
  Int32 = 6,
  Int64 = 7,
  String = 8,
  Bool = 9,
  Float16 = 10,
  Float64 = 11,
  UInt32 = 12,
  UInt64 = 13,
  Complex64 = 14,
  Complex128 = 15,
  BFloat16 = 16,
};

/// Size of one element in bytes; 0 for Undefined and String.
size_t dtypeSize(DType t);
/// The ONNX text-syntax name (`float`, `int64`, `bool`, ...).
std::string_view dtypeName(DType t);
/// Inverse of dtypeName; nullopt for an unknown name.
std::optional<DType> dtypeFromName(std::string_view name);
bool isFloatingPoint(DType t);
bool isInteger(DType t);

/// Maps a C++ element type to its DType.
template <class T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::Float32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::Float64; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::Int32; };
template <> struct DTypeOf<int16_t> { static constexpr DType value = DType::Int16; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::Int8; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::UInt8; };
template <> struct DTypeOf<uint16_t> { static constexpr DType value = DType::UInt16; };
template <> struct DTypeOf<uint32_t> { static constexpr DType value = DType::UInt32; };
template <> struct DTypeOf<uint64_t> { static constexpr DType value = DType::UInt64; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::Bool; };

/// A type carried as a value, for generic lambdas: `[](auto tag) { using T = typename decltype(tag)::type; }`.
template <class T>
struct TypeTag {
  using type = T;
};

/// Calls f(TypeTag<T>{}) with the C++ element type of a numeric dtype (and of
/// bool when WithBool). Returns false without calling f for other dtypes
/// (16-bit floats, strings, complex).
template <bool WithBool, class F>
bool visitNumericDType(DType t, F&& f) {
  switch (t) {
    case DType::Float32: f(TypeTag<float>{}); return true;
    case DType::Float64: f(TypeTag<double>{}); return true;
    case DType::Int64: f(TypeTag<int64_t>{}); return true;
    case DType::Int32: f(TypeTag<int32_t>{}); return true;
    case DType::Int16: f(TypeTag<int16_t>{}); return true;
    case DType::Int8: f(TypeTag<int8_t>{}); return true;
    case DType::UInt8: f(TypeTag<uint8_t>{}); return true;
    case DType::UInt16: f(TypeTag<uint16_t>{}); return true;
    case DType::UInt32: f(TypeTag<uint32_t>{}); return true;
    case DType::UInt64: f(TypeTag<uint64_t>{}); return true;
    case DType::Bool:
      if constexpr (WithBool) {
        f(TypeTag<bool>{});
        return true;
      }
      return false;
    default: return false;
  }
}

}  // namespace fusec
