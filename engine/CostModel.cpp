/// Roofline estimates; see CostModel.h.
#include "fusec/engine/CostModel.h"

#include "fusec/engine/Matcher.h"

#include <algorithm>
#include <cmath>
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
/// Operations of scalar semantics `e` per element; a transcendental call
/// counts `transcendental` (the target's cost of one, in FLOPs of peak).
double semanticsOps(const ScalarExpr& e, double transcendental = 1) {
  static const std::set<std::string> kTranscendental = {"exp",  "log",  "log1p", "erf",   "tanh",  "sin",
                                                       "cos",  "tan",  "asin",  "acos",  "atan",  "sinh",
                                                       "cosh", "asinh", "acosh", "atanh", "pow"};
  double n = 0;
  switch (e.kind) {
    case ScalarExpr::Kind::Unary: case ScalarExpr::Kind::Binary: n = 1; break;
    case ScalarExpr::Kind::Call: n = kTranscendental.count(e.op) ? transcendental : 1; break;
    default: break;
  }
  for (const ScalarExpr& a : e.args) n += semanticsOps(a, transcendental);
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


/// Compute bound this many times over its DRAM time: a dense conv or GEMM,
/// which tiles reach a far larger share of peak on than depthwise or
/// grouped convs and thin products, just past the ridge.
constexpr double kDenseRatio = 8;

}  // namespace

Estimate& Estimate::operator+=(const Estimate& o) {
  flops += o.flops;
  bytes += o.bytes;
  seconds += o.seconds;
  computeSeconds += o.computeSeconds;
  memorySeconds += o.memorySeconds;
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

std::string shapeClass(double computeSeconds, double memorySeconds) {
  if (computeSeconds < memorySeconds) return "memory";
  return computeSeconds >= kDenseRatio * memorySeconds ? "dense" : "compute";
}

Estimate rooflineEstimate(double flops, double bytes, const Target& t, double work, const std::string& family) {
  Estimate e;
  e.flops = flops;
  e.bytes = bytes;
  e.kernels = 1;
  const double compute = (work < 0 ? flops : work) / t.peakFlopsFp32, memory = bytes / t.dramBandwidth;
  const double fraction = t.roofFractions.empty() ? 1 : t.roofFraction(family, shapeClass(compute, memory));
  e.seconds = std::max(compute, memory) / fraction + t.startup(family) + t.launchOverhead;
  e.computeSeconds = compute;
  e.memorySeconds = memory;
  e.joules = flops * t.energyPerFlop + bytes * t.energyPerByte;
  return e;
}

namespace {

/// The multiplications the code generator emits for `Pow(x, e)` with a
/// constant scalar exponent it expands (integers up to 16 by binary
/// powering, a reciprocal for negative ones; a square root for +-0.5):
/// RMSNorm's Pow(x, 2) is one multiply, not a library pow. nullopt for
/// other exponents.
std::optional<double> knownPowerOps(const Graph& g, const NodeData& d) {
  if (d.op != "Pow" || !d.domain.empty() || d.inputs.size() != 2 || d.inputs[1] == kNoValue) return std::nullopt;
  const std::shared_ptr<const Tensor>& c = g.value(d.inputs[1]).constant;
  if (!c || c->numel() != 1) return std::nullopt;
  const double e = c->scalarAt(0);
  if (std::fabs(e) == 0.5) return e < 0 ? 2 : 1;
  if (!std::isfinite(e) || e != std::trunc(e) || std::fabs(e) > 16) return std::nullopt;
  double ops = e < 0 ? 1 : 0;
  for (auto n = static_cast<unsigned>(std::fabs(e)); n > 1; n >>= 1) ops += (n & 1) ? 2 : 1;
  return std::max(ops, 1.0);
}

}  // namespace

Estimate groupEstimate(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                       const Target& target, const std::string& family) {
  // A lone view shares its operand's buffer: no kernel, no traffic.
  if (members.size() == 1 && movesNothing(g, members[0], catalog)) return Estimate{};
  // The kernel evaluates its elementwise members at every point of its
  // largest result: one on a broadcast operand (the Sigmoid of a squeeze-
  // and-excitation scale, fused into the Mul it feeds) is computed again
  // at each point. `work` weighs transcendental calls at the target's cost.
  double space = 0;
  for (NodeRef n : members)
    if (!g.node(n).outputs.empty()) space = std::max(space, numel(g, g.node(n).outputs[0]));
  // Except where it reads only what a reduction in the group computed, at
  // that size: RMSNorm's `+ eps`, Sqrt and Reciprocal after its mean are
  // computed once per row (row_reduce's fusec_row), not at every element.
  std::set<ValueId> reduced;
  std::set<NodeRef> inGroup(members.begin(), members.end());
  auto perReduced = [&](const NodeData& d) {
    bool readsReduced = false;
    for (ValueId v : d.inputs) {
      if (v == kNoValue) continue;
      if (reduced.count(v)) {
        readsReduced = true;
        continue;
      }
      const std::optional<NodeRef> p = g.producer(v);
      if (p && inGroup.count(*p)) return false;
    }
    return readsReduced && numel(g, d.outputs[0]) < space;
  };
  double flops = 0, work = 0;
  for (NodeRef n : members) {
    const NodeData& d = g.node(n);
    const OpDef* op = d.domain.empty() ? catalog.find(d.op.str()) : nullptr;
    if (op && op->kind == OpKind::Reduction) reduced.insert(d.outputs.begin(), d.outputs.end());
    if (op && !op->flops && op->semantics && !d.outputs.empty()) {
      const bool own = perReduced(d);
      if (own) reduced.insert(d.outputs[0]);
      const double points = own ? numel(g, d.outputs[0]) : std::max(space, numel(g, d.outputs[0]));
      const std::optional<double> power = knownPowerOps(g, d);
      flops += points * (power ? *power : semanticsOps(*op->semantics));
      work += points * (power ? *power : semanticsOps(*op->semantics, target.transcendentalFlops));
    } else {
      const double f = nodeFlops(g, n, catalog);
      flops += f;
      work += f;
    }
  }
  const GroupBoundary b = groupBoundary(g, members);
  double bytes = 0;
  for (ValueId v : b.inputs) bytes += valueBytes(g, v);
  for (ValueId v : b.outputs) bytes += valueBytes(g, v);
  return rooflineEstimate(flops, bytes, target, work, family);
}

Estimate unfusedEstimate(const Graph& g, const OpCatalog& catalog, const Target& target,
                         const KernelFamilies* families) {
  Estimate total;
  for (NodeRef n : g.nodes()) total += groupEstimate(g, {n}, catalog, target, soloFamily(g, n, catalog, target, families));
  return total;
}

bool hasCalibration(const Target& target) {
  return !target.roofFractions.empty() || !target.startupSeconds.empty();
}

std::string soloFamily(const Graph& g, NodeRef n, const OpCatalog& catalog, const Target& target,
                       const KernelFamilies* families) {
  if (!families || !hasCalibration(target)) return {};
  return families->selectName(g, {n}, catalog, target);
}

}  // namespace fusec
