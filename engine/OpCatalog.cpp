/// Op catalog tables and the scalar-semantics evaluator.
#include "fusec/engine/OpCatalog.h"

#include "fusec/engine/Builtins.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <limits>

namespace fusec {
namespace {

constexpr std::array<std::pair<OpKind, std::string_view>, 6> kKinds = {{
    {OpKind::Elementwise, "elementwise"}, {OpKind::Broadcast, "broadcast"},
    {OpKind::Injective, "injective"},     {OpKind::Reduction, "reduction"},
    {OpKind::Anchor, "anchor"},           {OpKind::Opaque, "opaque"},
}};

constexpr std::array<std::pair<AttrType, std::string_view>, 8> kAttrTypes = {{
    {AttrType::Int, "int"},         {AttrType::Float, "float"},     {AttrType::String, "string"},
    {AttrType::Ints, "ints"},       {AttrType::Floats, "floats"},   {AttrType::Strings, "strings"},
    {AttrType::Tensor, "tensor"},   {AttrType::Graph, "graph"},
}};

/// The name of `value` in a (value, name) table, and back.
template <class E, size_t N>
std::string_view nameIn(const std::array<std::pair<E, std::string_view>, N>& table, E value) {
  for (auto [v, name] : table)
    if (v == value) return name;
  return "?";
}
template <class E, size_t N>
std::optional<E> valueIn(const std::array<std::pair<E, std::string_view>, N>& table, std::string_view name) {
  for (auto [v, n] : table)
    if (n == name) return v;
  return std::nullopt;
}

}  // namespace

std::string_view opKindName(OpKind k) { return nameIn(kKinds, k); }
std::optional<OpKind> opKindFromName(std::string_view n) { return valueIn(kKinds, n); }
std::string_view attrTypeName(AttrType t) { return nameIn(kAttrTypes, t); }
std::optional<AttrType> attrTypeFromName(std::string_view n) { return valueIn(kAttrTypes, n); }

std::string_view resultTypeName(ResultType t) {
  switch (t) {
    case ResultType::SameAsOperands: return "T";
    case ResultType::Bool: return "bool";
    case ResultType::Int64: return "int64";
    case ResultType::Float: return "float";
    case ResultType::Any: return "any";
  }
  return "?";
}

double evaluateScalar(const ScalarExpr& e, const std::vector<std::vector<double>>& operands,
                      const std::vector<double>& attrs) {
  using K = ScalarExpr::Kind;
  switch (e.kind) {
    case K::Constant: return e.value;
    case K::Operand: {
      const auto& v = operands.at(e.index);
      return v.empty() ? std::numeric_limits<double>::quiet_NaN() : v.front();
    }
    case K::Attr: return attrs.at(e.index);
    case K::Default: {
      const ScalarExpr& first = e.args[0];
      const bool present = first.kind != K::Operand || !operands.at(first.index).empty();
      return evaluateScalar(present ? e.args[0] : e.args[1], operands, attrs);
    }
    case K::Unary: case K::Binary: case K::Call: break;
  }
  const Builtin::Form form = e.kind == K::Unary ? Builtin::Form::Prefix
                             : e.kind == K::Binary ? Builtin::Form::Infix
                                                   : Builtin::Form::Call;
  const Builtin* b = findBuiltin(e.op, form, kInSemantics);
  assert(b && b->eval && "semantics checked against the builtin table");
  // A variadic operand passes all its values.
  std::vector<double> args;
  for (const ScalarExpr& a : e.args) {
    if (a.kind == K::Operand && e.kind == K::Call && b->maxArgs == SIZE_MAX)
      args.insert(args.end(), operands.at(a.index).begin(), operands.at(a.index).end());
    else
      args.push_back(evaluateScalar(a, operands, attrs));
  }
  return b->eval(args.data(), args.size());
}

const AttrSpec* OpDef::findAttr(std::string_view attr) const {
  int i = attrIndex(attr);
  return i < 0 ? nullptr : &attrs[static_cast<size_t>(i)];
}

int OpDef::attrIndex(std::string_view attr) const {
  for (size_t i = 0; i < attrs.size(); ++i)
    if (attrs[i].name == attr) return static_cast<int>(i);
  return -1;
}

size_t OpDef::minOperands() const {
  size_t n = 0;
  for (const OpParam& p : params)
    if (!p.optional) ++n;
  return n;
}

size_t OpDef::maxOperands() const {
  if (!params.empty() && params.back().variadic) return SIZE_MAX;
  return params.size();
}

std::string missingOperandProblem(const Graph& g, NodeRef n, const OpCatalog& catalog) {
  const NodeData& d = g.node(n);
  if (!d.domain.empty() && d.domain != "ai.onnx") return {};
  const OpDef* def = catalog.find(d.op.str());
  if (!def || def->params.empty()) return {};
  for (size_t i = 0; i < d.inputs.size(); ++i) {
    if (d.inputs[i] != kNoValue) continue;
    const OpParam* p = i < def->params.size() ? &def->params[i] : def->params.back().variadic ? &def->params.back() : nullptr;
    if (p && !p->optional)
      return "node " + g.describe(n) + ": operand " + std::to_string(i) + " is empty, but `" + p->name + "` of " +
             def->name.str() + " is not optional";
  }
  return {};
}

const OpDef* OpCatalog::addOp(OpDef def) {
  if (byName_.count(def.name.str())) return nullptr;
  ops_.push_back(std::move(def));
  const OpDef* d = &ops_.back();
  byName_[d->name.str()] = d;
  return d;
}

const OpDef* OpCatalog::find(std::string_view name) const {
  auto it = byName_.find(std::string(name));
  return it == byName_.end() ? nullptr : it->second;
}

bool OpCatalog::addClass(const std::string& name, std::vector<const OpDef*> members) {
  return classes_.emplace(name, std::move(members)).second;
}

const std::vector<const OpDef*>* OpCatalog::findClass(std::string_view name) const {
  auto it = classes_.find(std::string(name));
  return it == classes_.end() ? nullptr : &it->second;
}

std::optional<std::vector<int64_t>> transposePermutation(const NodeData& d, size_t rank) {
  std::vector<int64_t> perm(rank);
  for (size_t i = 0; i < rank; ++i) perm[i] = static_cast<int64_t>(rank - 1 - i);
  if (const Attribute* a = d.attr("perm"); a && std::holds_alternative<std::vector<int64_t>>(*a))
    perm = std::get<std::vector<int64_t>>(*a);
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  if (sorted.size() != rank) return std::nullopt;
  for (size_t i = 0; i < rank; ++i)
    if (sorted[i] != static_cast<int64_t>(i)) return std::nullopt;
  return perm;
}

namespace {

/// A Transpose whose dims other than those of size 1 keep their order.
bool keepsOrder(const Graph& g, const NodeData& d) {
  if (d.op != "Transpose" || d.inputs.empty() || !g.value(d.inputs[0]).type.isStatic()) return false;
  const Shape in = g.value(d.inputs[0]).type.staticShape();
  const std::optional<std::vector<int64_t>> perm = transposePermutation(d, in.size());
  if (!perm) return false;
  int64_t last = -1;
  for (int64_t axis : *perm) {
    if (in[static_cast<size_t>(axis)] == 1) continue;
    if (axis < last) return false;
    last = axis;
  }
  return true;
}

}  // namespace

bool movesNothing(const Graph& g, NodeRef n, const OpCatalog& catalog) {
  const NodeData& d = g.node(n);
  const OpDef* op = d.domain.empty() ? catalog.find(d.op.str()) : nullptr;
  return op && (op->view || keepsOrder(g, d)) && !d.inputs.empty() && d.inputs[0] != kNoValue &&
         d.outputs.size() == 1 && g.value(d.outputs[0]).type.isStatic() && g.value(d.inputs[0]).type.isStatic() &&
         g.value(d.outputs[0]).type.dtype == g.value(d.inputs[0]).type.dtype;
}

}  // namespace fusec
