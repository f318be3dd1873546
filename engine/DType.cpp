/// Element type tables.
#include "fusec/engine/DType.h"

#include <array>
#include <utility>

namespace fusec {
namespace {

struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
};

constexpr std::array<DTypeInfo, 17> kDTypes = {{
    {DType::Undefined, "undefined", 0}, {DType::Float32, "float", 4},
    {DType::UInt8, "uint8", 1},         {DType::Int8, "int8", 1},
    {DType::UInt16, "uint16", 2},       {DType::Int16, "int16", 2},
    {DType::Int32, "int32", 4},         {DType::Int64, "int64", 8},
    {DType::String, "string", 0},       {DType::Bool, "bool", 1},
    {DType::Float16, "float16", 2},     {DType::Float64, "double", 8},
    {DType::UInt32, "uint32", 4},       {DType::UInt64, "uint64", 8},
    {DType::Complex64, "complex64", 8}, {DType::Complex128, "complex128", 16},
    {DType::BFloat16, "bfloat16", 2},
}};

const DTypeInfo* lookup(DType t) {
  auto i = static_cast<size_t>(t);
  return i < kDTypes.size() ? &kDTypes[i] : nullptr;
}

}  // namespace

size_t dtypeSize(DType t) {
  const DTypeInfo* info = lookup(t);
  return info ? info->size : 0;
}

std::string_view dtypeName(DType t) {
  const DTypeInfo* info = lookup(t);
  return info ? info->name : "unknown";
}

std::optional<DType> dtypeFromName(std::string_view name) {
  for (const DTypeInfo& info : kDTypes)
    if (info.name == name) return info.type;
  return std::nullopt;
}

bool isFloatingPoint(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 ||
         t == DType::BFloat16;
}

bool isInteger(DType t) {
  switch (t) {
    case DType::UInt8: case DType::Int8: case DType::UInt16: case DType::Int16:
    case DType::Int32: case DType::Int64: case DType::UInt32: case DType::UInt64:
      return true;
    default:
      return false;
  }
}

}  // namespace fusec
