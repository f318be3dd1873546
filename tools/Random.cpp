/// Seeded random inputs and output checksums.
#include "Random.h"

namespace fusec::tools {

Expected<Tensor> randomInput(const Graph& g, ValueId v, std::mt19937_64& rng, int64_t symbolicDim) {
  const Value& val = g.value(v);
  if (!val.type.dims) return Error{"input `" + val.name + "` has unknown rank; give it a shape"};
  Shape shape;
  for (const Dim& d : *val.type.dims) shape.push_back(d.isStatic() ? d.size : symbolicDim);
  Tensor t(val.type.dtype, shape);
  std::uniform_real_distribution<float> uf(-1.f, 1.f);
  std::uniform_int_distribution<int64_t> ui(0, 9);
  switch (val.type.dtype) {
    case DType::Float32:
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = uf(rng);
      return t;
    case DType::Int64:
      for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = ui(rng);
      return t;
    case DType::Int32:
      for (int64_t i = 0; i < t.numel(); ++i) t.data<int32_t>()[i] = static_cast<int32_t>(ui(rng));
      return t;
    case DType::Bool:
      for (int64_t i = 0; i < t.numel(); ++i) t.data<bool>()[i] = ui(rng) % 2;
      return t;
    default:
      return Error{"input `" + val.name + "` has element type `" + std::string(dtypeName(val.type.dtype)) +
                   "`, for which no random data is made"};
  }
}

double checksum(const Tensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += t.scalarAt(i);
  return s;
}

}  // namespace fusec::tools
