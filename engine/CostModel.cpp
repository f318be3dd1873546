/// Roofline estimates; see CostModel.h.
#include "fusec/engine/CostModel.h"

#include <algorithm>
#include <set>

namespace fusec {
namespace {

double numel(const Graph& g, ValueId v) {
  if (v == kNoValue) return 0;
  const TensorType& t = g.value(v).type;
  if (!t.dims) return 0;
  double n = 1;
  for (const Dim& d : *t.dims) n *= d.isStatic() ? static_cast<double>(d.size) : 1.0;
  return n;
}

/// Arithmetic operations in one evaluation of scalar semantics.
double semanticsOps(const ScalarExpr& e) {
  double n = 0;
  switch (e.kind) {
    case ScalarExpr::Kind::Unary: case ScalarExpr::Kind::Binary: case ScalarExpr::Kind::Call: n = 1; break;
    default: break;
  }
  for (const ScalarExpr& a : e.args) n += semanticsOps(a);
  return n;
}

const std::vector<Dim>* dims(const Graph& g, ValueId v) {
  if (v == kNoValue) return nullptr;
  const auto& t = g.value(v).type;
  return t.dims ? &*t.dims : nullptr;
}

double dimOr1(const Dim& d) { return d.isStatic() ? static_cast<double>(d.size) : 1.0; }

}  // namespace

Estimate& Estimate::operator+=(const Estimate& o) {
  flops += o.flops;
  bytes += o.bytes;
  seconds += o.seconds;
  joules += o.joules;
  kernels += o.kernels;
  return *this;
}

double valueBytes(const Graph& g, ValueId v) {
  if (v == kNoValue) return 0;
  return numel(g, v) * static_cast<double>(dtypeSize(g.value(v).type.dtype));
}

double nodeFlops(const Graph& g, NodeRef n, const OpCatalog& catalog) {
  const NodeData& d = g.node(n);
  const OpDef* op = d.domain.empty() ? catalog.find(d.op.str()) : nullptr;
  if (!op || d.outputs.empty()) return 0;
  const double out = numel(g, d.outputs[0]);
  const std::string& name = d.op.str();
  const double in = d.inputs.empty() ? 0 : numel(g, d.inputs[0]);
  switch (op->kind) {
    case OpKind::Elementwise: case OpKind::Broadcast:
      return out * (op->semantics ? semanticsOps(*op->semantics) : 1.0);
    case OpKind::Injective: case OpKind::Opaque:
      return name == "BatchNormalization" ? 2 * out : 0;
    case OpKind::Reduction:
      if (name == "Softmax" || name == "LogSoftmax") return 5 * in;
      if (name == "LayerNormalization" || name == "InstanceNormalization") return 8 * in;
      return in;
    case OpKind::Anchor: break;
  }
  if (name == "Conv" || name == "ConvTranspose") {
    const auto* w = d.inputs.size() > 1 ? dims(g, d.inputs[1]) : nullptr;
    if (!w || w->size() < 2) return 0;
    double perOutput = 1;  // multiply-adds per output (Conv) or per input (ConvTranspose) element
    for (size_t i = 1; i < w->size(); ++i) perOutput *= dimOr1((*w)[i]);
    const bool bias = d.inputs.size() > 2 && d.inputs[2] != kNoValue;
    if (name == "Conv") return 2 * out * perOutput + (bias ? out : 0);
    // ConvTranspose: W is [C, M/group, k...]; each input element scatters M/group * prod(k).
    return 2 * in * perOutput + (bias ? out : 0);
  }
  if (name == "MatMul" || name == "Gemm") {
    const auto* a = dims(g, d.inputs[0]);
    if (!a || a->empty()) return 0;
    const bool transA = name == "Gemm" && d.attrInt("transA", 0) != 0;
    const double k = dimOr1(transA ? (*a)[0] : a->back());
    const bool c = name == "Gemm" && d.inputs.size() > 2 && d.inputs[2] != kNoValue;
    return 2 * out * k + (c ? out : 0);
  }
  // Pools: one operation per window element per output.
  const Attribute* ks = d.attr("kernel_shape");
  double window = 1;
  if (ks && std::holds_alternative<std::vector<int64_t>>(*ks))
    for (int64_t k : std::get<std::vector<int64_t>>(*ks)) window *= static_cast<double>(k);
  return out * window;
}

Estimate rooflineEstimate(double flops, double bytes, const Target& t) {
  Estimate e;
  e.flops = flops;
  e.bytes = bytes;
  e.kernels = 1;
  e.seconds = std::max(flops / t.peakFlopsFp32, bytes / t.dramBandwidth) + t.launchOverhead;
  e.joules = flops * t.energyPerFlop + bytes * t.energyPerByte;
  return e;
}

Estimate groupEstimate(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                       const Target& target) {
  double flops = 0;
  for (NodeRef n : members) flops += nodeFlops(g, n, catalog);
  const GroupBoundary b = groupBoundary(g, members);
  double bytes = 0;
  for (ValueId v : b.inputs) bytes += valueBytes(g, v);
  for (ValueId v : b.outputs) bytes += valueBytes(g, v);
  return rooflineEstimate(flops, bytes, target);
}

Estimate unfusedEstimate(const Graph& g, const OpCatalog& catalog, const Target& target) {
  Estimate total;
  for (NodeRef n : g.nodes()) total += groupEstimate(g, {n}, catalog, target);
  return total;
}

}  // namespace fusec
