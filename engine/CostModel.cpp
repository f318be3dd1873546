/// Roofline estimates; see CostModel.h.
#include "fusec/engine/CostModel.h"

#include "fusec/engine/Matcher.h"

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

/// The op's `cost { flops = ... }` over node `d`: its operands, results and
/// attributes (or their defaults) bound in the order the front end bound them.
std::optional<double> opCost(const Graph& g, const NodeData& d, const OpDef& op) {
  Match m;
  auto value = [](const std::vector<ValueId>& vs, size_t i) { return i < vs.size() ? vs[i] : kNoValue; };
  for (size_t i = 0; i < op.params.size(); ++i) {
    m.values.push_back(value(d.inputs, i));
    m.attrs.emplace_back();
  }
  for (size_t i = 0; i < op.results.size(); ++i) {
    m.values.push_back(value(d.outputs, i));
    m.attrs.emplace_back();
  }
  for (const AttrSpec& a : op.attrs) {
    m.values.push_back(kNoValue);
    const Attribute* given = d.attr(a.name);
    m.attrs.push_back(given ? std::optional<Attribute>(*given) : a.defaultValue);
  }
  return evaluateExpr(g, m, *op.flops, nullptr, /*symbolicAsOne=*/true);
}


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
  // The catalog says: the op's own cost, or its scalar semantics' operations
  // per element of the result; data movement costs no FLOPs.
  if (op->flops) return opCost(g, d, *op).value_or(0);
  if (op->semantics) return numel(g, d.outputs[0]) * semanticsOps(*op->semantics);
  return 0;
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
