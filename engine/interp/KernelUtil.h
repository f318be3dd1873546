/// Shared machinery of the interpreter's kernels: the per-node context,
/// attribute access, axis handling, broadcasting and dtype dispatch.
/// Private to engine/interp.
#pragma once

#include "fusec/engine/Window.h"

#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fusec/engine/Graph.h"
#include "fusec/engine/OpCatalog.h"
#include "fusec/engine/Tensor.h"

namespace fusec::interp {

/// Everything a kernel sees of the node it runs. Kernels report user errors
/// with fail(), which the interpreter prefixes with the node's name.
class KernelContext {
 public:
  KernelContext(const NodeData& node, int64_t opset, std::vector<const Tensor*> inputs)
      : node_(node), opset_(opset), inputs_(std::move(inputs)), outputs_(node.outputs.size()) {}

  int64_t opset() const { return opset_; }
  const NodeData& node() const { return node_; }
  size_t numInputs() const { return inputs_.size(); }
  size_t numOutputs() const { return outputs_.size(); }
  bool has(size_t i) const { return i < inputs_.size() && inputs_[i] != nullptr; }
  /// Operand i; fails if it is omitted.
  const Tensor& in(size_t i) const;
  /// Operand `i`, which must hold exactly one element of type `T` (Range's
  /// bounds, Clip's min and max): a failure naming `what` otherwise, never a
  /// read past an empty or narrower tensor.
  template <class T>
  T scalarIn(size_t i, const char* what) const {
    const Tensor& t = in(i);
    if (t.numel() != 1) fail(std::string(what) + " must hold one element, not " + std::to_string(t.numel()));
    if (t.dtype() != in(0).dtype() || dtypeSize(t.dtype()) != sizeof(T))
      fail(std::string(what) + " must have the element type of the first operand");
    return t.template data<T>()[0];
  }
  /// Whether result i is requested by the model.
  bool wantsOutput(size_t i) const { return i < node_.outputs.size() && node_.outputs[i] != kNoValue; }
  void setOutput(size_t i, Tensor t) {
    if (i < outputs_.size()) outputs_[i] = std::move(t);
  }
  std::vector<Tensor>& outputs() { return outputs_; }

  bool hasAttr(const std::string& name) const { return node_.attrs.count(name) != 0; }
  int64_t attrInt(const std::string& name, int64_t def) const;
  float attrFloat(const std::string& name, float def) const;
  std::string attrString(const std::string& name, const std::string& def) const;
  std::vector<int64_t> attrInts(const std::string& name, std::vector<int64_t> def = {}) const;
  std::vector<float> attrFloats(const std::string& name, std::vector<float> def = {}) const;
  const Tensor* attrTensor(const std::string& name) const;

  [[noreturn]] void fail(const std::string& message) const;
  /// Like fail, for valid input that the interpreter does not support.
  [[noreturn]] void unsupported(const std::string& message) const;

 private:
  const NodeData& node_;
  int64_t opset_;
  std::vector<const Tensor*> inputs_;
  std::vector<Tensor> outputs_;
};

using KernelFn = std::function<void(KernelContext&)>;
using KernelRegistry = std::map<std::string, KernelFn>;

/// Fails unless the product of `factors` (a loop's trip counts; nullopt for
/// one that overflowed) stays within the interpreter's step budget per
/// kernel: $FUSEC_MAX_INTERPRETER_STEPS, default 2^32, far above any real
/// layer and far below a model that asks for a window of 2^31 elements.
void requireSteps(const KernelContext& ctx, std::initializer_list<std::optional<int64_t>> factors,
                  const std::string& what);

/// Whether `node` (an op with catalog definition `op`) runs from its
/// catalog semantics (CatalogKernel.cpp): elementwise and broadcast ops with
/// scalar semantics and one result, at opset 11 and later, on operands of
/// up to 32-bit integers or floats.
bool catalogRuns(const OpDef& op, const NodeData& node, int64_t opset, const std::vector<const Tensor*>& operands);
/// Runs the node from `op`'s semantics.
void runFromCatalog(KernelContext& ctx, const OpDef& op);

// Each kernel file registers its ops; Interpreter.cpp lists them in one place.
void registerElementwiseKernels(KernelRegistry& r);
void registerConvKernels(KernelRegistry& r);
void registerPoolKernels(KernelRegistry& r);
void registerNormKernels(KernelRegistry& r);
void registerReduceKernels(KernelRegistry& r);
void registerMatMulKernels(KernelRegistry& r);
void registerMovementKernels(KernelRegistry& r);
void registerGeneratorKernels(KernelRegistry& r);

// ---- shapes and axes ----------------------------------------------------------

/// Maps a possibly negative axis into [0, rank); fails when out of range.
int64_t normalizeAxis(const KernelContext& ctx, int64_t axis, int64_t rank);
/// Multidirectional (numpy) broadcast of shapes; fails on incompatible dims.
Shape broadcastShapes(const KernelContext& ctx, const std::vector<Shape>& shapes);
/// Strides to read a tensor of shape `in` broadcast to `out` (0 on broadcast dims).
Shape broadcastStrides(const Shape& in, const Shape& out);

/// Calls f(outIndex, offsets) for every element of `out`, where offsets[k] is
/// the element offset into operand k given its broadcast strides.
template <size_t N, class F>
void forEachBroadcast(const Shape& out, const std::array<Shape, N>& strides, F&& f) {
  const int64_t total = shapeNumel(out);
  if (total == 0) return;
  const size_t rank = out.size();
  std::vector<int64_t> idx(rank, 0);
  std::array<int64_t, N> off{};
  for (int64_t i = 0; i < total; ++i) {
    f(i, off);
    for (size_t d = rank; d-- > 0;) {
      ++idx[d];
      for (size_t k = 0; k < N; ++k) off[k] += strides[k][d];
      if (idx[d] < out[d]) break;
      for (size_t k = 0; k < N; ++k) off[k] -= strides[k][d] * idx[d];
      idx[d] = 0;
    }
  }
}

// ---- dtype dispatch -------------------------------------------------------------

/// Calls f(TypeTag<T>{}) for the C++ type of a numeric dtype; fails otherwise.
template <class F>
void dispatchNumeric(const KernelContext& ctx, DType t, F&& f) {
  if (!visitNumericDType<false>(t, f))
    ctx.unsupported("element type `" + std::string(dtypeName(t)) + "` is not supported by this op");
}

/// Like dispatchNumeric, for float and double only.
template <class F>
void dispatchFloat(const KernelContext& ctx, DType t, F&& f) {
  switch (t) {
    case DType::Float32: f(TypeTag<float>{}); return;
    case DType::Float64: f(TypeTag<double>{}); return;
    default:
      ctx.unsupported("element type `" + std::string(dtypeName(t)) + "` is not supported by this op");
  }
}

/// Numeric types plus bool (for data movement and comparisons).
template <class F>
void dispatchAny(const KernelContext& ctx, DType t, F&& f) {
  if (t == DType::Bool) {
    f(TypeTag<bool>{});
    return;
  }
  if (t == DType::Float16 || t == DType::BFloat16) {
    f(TypeTag<uint16_t>{});  // moved as raw bits
    return;
  }
  dispatchNumeric(ctx, t, f);
}

/// Requires operand i to have element type `t`.
void expectDType(const KernelContext& ctx, size_t i, DType t);
/// Reads an int64/int32 operand as a list of integers.
std::vector<int64_t> intsOf(const Tensor& t);

/// Raw element copy for data movement kernels: out[i] = in[map(i)] bytewise.
template <class F>
Tensor gatherBytes(const Tensor& in, Shape outShape, F&& sourceIndex) {
  Tensor out(in.dtype(), std::move(outShape));
  const size_t es = dtypeSize(in.dtype());
  const int64_t n = out.numel();
  const std::byte* src = in.raw();
  std::byte* dst = out.raw();
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * es, src + sourceIndex(i) * es, es);
  return out;
}

using ConvGeometry = WindowGeometry;
/// Window geometry from the node's strides/dilations/pads/auto_pad
/// attributes; ceilMode rounds the output size up (pooling's ceil_mode).
ConvGeometry convGeometry(const KernelContext& ctx, const Shape& inSpatial, const Shape& kernel,
                          bool ceilMode);
/// An int-list attribute that must have n values; `def` fills it when absent.
std::vector<int64_t> attrOr(const KernelContext& ctx, const char* name, size_t n, int64_t def);
/// Advances a row-major multi-index over `shape`; false after the last one.
bool nextIndex(Shape& idx, const Shape& shape);

/// C = alpha * op(A) * op(B) + beta * C for row-major float matrices, where
/// op transposes when the flag is set. A is MxK (after op), B is KxN.
void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          const float* B, float beta, float* C);

}  // namespace fusec::interp
