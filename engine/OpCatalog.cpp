/// Op catalog tables and the scalar-semantics evaluator.
#include "fusec/engine/OpCatalog.h"

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

}  // namespace

std::string_view opKindName(OpKind k) {
  for (auto [kind, name] : kKinds)
    if (kind == k) return name;
  return "?";
}

std::optional<OpKind> opKindFromName(std::string_view n) {
  for (auto [kind, name] : kKinds)
    if (name == n) return kind;
  return std::nullopt;
}

std::string_view attrTypeName(AttrType t) {
  for (auto [type, name] : kAttrTypes)
    if (type == t) return name;
  return "?";
}

std::optional<AttrType> attrTypeFromName(std::string_view n) {
  for (auto [type, name] : kAttrTypes)
    if (name == n) return type;
  return std::nullopt;
}

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

const std::map<std::string, int>& scalarFunctions() {
  static const std::map<std::string, int> kFunctions = {
      {"exp", 1},   {"log", 1},   {"sqrt", 1},  {"rsqrt", 1}, {"erf", 1},   {"tanh", 1},
      {"abs", 1},   {"floor", 1}, {"ceil", 1},  {"round", 1}, {"trunc", 1}, {"sign", 1},
      {"sin", 1},   {"cos", 1},   {"tan", 1},   {"asin", 1},  {"acos", 1},  {"atan", 1},
      {"sinh", 1},  {"cosh", 1},  {"asinh", 1}, {"acosh", 1}, {"atanh", 1}, {"isnan", 1},
      {"isinf", 1}, {"pow", 2},   {"select", 3}, {"min", -1}, {"max", -1},  {"sum", -1},
      {"mean", -1},
  };
  return kFunctions;
}

double evaluateScalar(const ScalarExpr& e, const std::vector<std::vector<double>>& operands,
                      const std::vector<double>& attrs) {
  using K = ScalarExpr::Kind;
  auto arg = [&](size_t i) { return evaluateScalar(e.args[i], operands, attrs); };
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
      return present ? arg(0) : arg(1);
    }
    case K::Unary: return e.op == "not" ? double(arg(0) == 0) : -arg(0);
    case K::Binary: {
      const double a = arg(0), b = arg(1);
      if (e.op == "+") return a + b;
      if (e.op == "-") return a - b;
      if (e.op == "*") return a * b;
      if (e.op == "/") return a / b;
      if (e.op == "%") return std::fmod(a, b);
      if (e.op == "<") return a < b;
      if (e.op == "<=") return a <= b;
      if (e.op == ">") return a > b;
      if (e.op == ">=") return a >= b;
      if (e.op == "==") return a == b;
      if (e.op == "!=") return a != b;
      if (e.op == "and") return a != 0 && b != 0;
      if (e.op == "or") return a != 0 || b != 0;
      assert(false && "unknown binary operator in checked semantics");
      return 0;
    }
    case K::Call: break;
  }
  // Calls. Reductions over a variadic operand or over two or more arguments.
  if (e.op == "min" || e.op == "max" || e.op == "sum" || e.op == "mean") {
    std::vector<double> values;
    for (const ScalarExpr& a : e.args) {
      if (a.kind == K::Operand)
        values.insert(values.end(), operands.at(a.index).begin(), operands.at(a.index).end());
      else
        values.push_back(evaluateScalar(a, operands, attrs));
    }
    if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
    double acc = values[0];
    for (size_t i = 1; i < values.size(); ++i) {
      const double v = values[i];
      if (e.op == "min") acc = (std::isnan(acc) || acc < v) ? acc : v;
      else if (e.op == "max") acc = (std::isnan(acc) || acc > v) ? acc : v;
      else acc += v;
    }
    return e.op == "mean" ? acc / static_cast<double>(values.size()) : acc;
  }
  if (e.op == "select") return arg(0) != 0 ? arg(1) : arg(2);
  if (e.op == "pow") return std::pow(arg(0), arg(1));
  const double x = arg(0);
  if (e.op == "exp") return std::exp(x);
  if (e.op == "log") return std::log(x);
  if (e.op == "sqrt") return std::sqrt(x);
  if (e.op == "rsqrt") return 1.0 / std::sqrt(x);
  if (e.op == "erf") return std::erf(x);
  if (e.op == "tanh") return std::tanh(x);
  if (e.op == "abs") return std::abs(x);
  if (e.op == "floor") return std::floor(x);
  if (e.op == "ceil") return std::ceil(x);
  if (e.op == "round") return std::nearbyint(x);
  if (e.op == "trunc") return std::trunc(x);
  if (e.op == "sign") return (x > 0) - (x < 0);
  if (e.op == "sin") return std::sin(x);
  if (e.op == "cos") return std::cos(x);
  if (e.op == "tan") return std::tan(x);
  if (e.op == "asin") return std::asin(x);
  if (e.op == "acos") return std::acos(x);
  if (e.op == "atan") return std::atan(x);
  if (e.op == "sinh") return std::sinh(x);
  if (e.op == "cosh") return std::cosh(x);
  if (e.op == "asinh") return std::asinh(x);
  if (e.op == "acosh") return std::acosh(x);
  if (e.op == "atanh") return std::atanh(x);
  if (e.op == "isnan") return std::isnan(x);
  if (e.op == "isinf") return std::isinf(x);
  assert(false && "unknown function in checked semantics");
  return 0;
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

}  // namespace fusec
