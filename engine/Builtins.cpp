/// The builtin table; see Builtins.h.
#include "fusec/engine/Builtins.h"

#include <cmath>
#include <limits>

namespace fusec {
namespace {

using F = Builtin::Form;
constexpr unsigned kAll = kInSemantics | kInGuard | kInRewrite;
constexpr size_t kAny = SIZE_MAX;

double nan() { return std::numeric_limits<double>::quiet_NaN(); }

/// min and max propagate NaN from their first argument, as ONNX's Min and Max do.
double minOf(const double* a, size_t n) {
  if (n == 0) return nan();
  double acc = a[0];
  for (size_t i = 1; i < n; ++i) acc = (std::isnan(acc) || acc < a[i]) ? acc : a[i];
  return acc;
}
double maxOf(const double* a, size_t n) {
  if (n == 0) return nan();
  double acc = a[0];
  for (size_t i = 1; i < n; ++i) acc = (std::isnan(acc) || acc > a[i]) ? acc : a[i];
  return acc;
}
double sumOf(const double* a, size_t n) {
  double acc = 0;
  for (size_t i = 0; i < n; ++i) acc += a[i];
  return acc;
}

Builtin op(std::string name, F form, unsigned uses, double (*eval)(const double*, size_t),
           std::vector<LoweringStep> lowering, std::string opencl, bool truth = false) {
  Builtin b;
  b.name = std::move(name);
  b.form = form;
  b.minArgs = b.maxArgs = form == F::Prefix ? 1 : 2;
  b.uses = uses;
  b.truth = truth;
  b.eval = eval;
  b.lowering = std::move(lowering);
  b.opencl = std::move(opencl);
  b.guardType = truth ? ExprType::Bool : ExprType::Float;
  return b;
}

/// A function of one real argument: semantics everywhere, built as `onnx`
/// in rewrites when it has an op.
Builtin unary(std::string name, double (*eval)(const double*, size_t), std::string onnx, std::string opencl,
              bool truth = false) {
  const unsigned uses = kInSemantics | (onnx.empty() ? 0u : unsigned(kInRewrite));
  std::vector<LoweringStep> lowering;
  if (!onnx.empty()) lowering.push_back({std::move(onnx), {}});
  Builtin b = op(std::move(name), F::Call, uses, eval, std::move(lowering), std::move(opencl), truth);
  b.minArgs = b.maxArgs = 1;
  return b;
}

Builtin call(std::string name, size_t minArgs, size_t maxArgs, unsigned uses, double (*eval)(const double*, size_t),
             std::vector<LoweringStep> lowering, std::string opencl) {
  Builtin b = op(std::move(name), F::Call, uses, eval, std::move(lowering), std::move(opencl));
  b.minArgs = minArgs;
  b.maxArgs = maxArgs;
  return b;
}

/// A guard query of the match (`uses(x)`), answered by the matcher.
Builtin query(std::string name, size_t minArgs, size_t maxArgs, ExprType type, bool queriesValues) {
  Builtin b = call(std::move(name), minArgs, maxArgs, kInGuard, nullptr, {}, "");
  b.guardType = type;
  b.queriesValues = queriesValues;
  return b;
}

/// A rewrite helper the rewriter builds itself (its arguments are lists or
/// element types).
Builtin helper(std::string name, size_t args) { return call(std::move(name), args, args, kInRewrite, nullptr, {}, ""); }

#define FN1(expr) [](const double* a, size_t) { const double x = a[0]; return double(expr); }
#define FN2(expr) [](const double* a, size_t) { const double x = a[0], y = a[1]; return double(expr); }

std::vector<Builtin> makeBuiltins() {
  std::vector<Builtin> t = {
      // ---- operators
      op("+", F::Infix, kAll, FN2(x + y), {{"Add", {}}}, "+"),
      op("-", F::Infix, kAll, FN2(x - y), {{"Sub", {}}}, "-"),
      op("*", F::Infix, kAll, FN2(x * y), {{"Mul", {}}}, "*"),
      op("/", F::Infix, kAll, FN2(x / y), {{"Div", {}}}, "/"),
      op("%", F::Infix, kAll, FN2(std::fmod(x, y)), {{"Mod", {{"fmod", int64_t{1}}}}}, "%"),
      op("<", F::Infix, kAll, FN2(x < y), {{"Less", {}}}, "<", true),
      op("<=", F::Infix, kAll, FN2(x <= y), {{"LessOrEqual", {}}}, "<=", true),
      op(">", F::Infix, kAll, FN2(x > y), {{"Greater", {}}}, ">", true),
      op(">=", F::Infix, kAll, FN2(x >= y), {{"GreaterOrEqual", {}}}, ">=", true),
      op("==", F::Infix, kAll, FN2(x == y), {{"Equal", {}}}, "==", true),
      op("!=", F::Infix, kAll, FN2(x != y), {{"Equal", {}}, {"Not", {}}}, "!=", true),
      op("and", F::Infix, kAll, FN2(x != 0 && y != 0), {{"And", {}}}, "&&", true),
      op("or", F::Infix, kAll, FN2(x != 0 || y != 0), {{"Or", {}}}, "||", true),
      op("-", F::Prefix, kAll, FN1(-x), {{"Neg", {}}}, "-"),
      op("not", F::Prefix, kAll, FN1(x == 0), {{"Not", {}}}, "!", true),
      // ---- functions of one real argument
      unary("exp", FN1(std::exp(x)), "Exp", "fusec_exp"),
      unary("log", FN1(std::log(x)), "Log", "log"),
      unary("log1p", FN1(std::log1p(x)), "", "log1p"),
      unary("sqrt", FN1(std::sqrt(x)), "Sqrt", "sqrt"),
      unary("erf", FN1(std::erf(x)), "Erf", "fusec_erf"),
      unary("tanh", FN1(std::tanh(x)), "Tanh", "fusec_tanh"),
      unary("abs", FN1(std::abs(x)), "Abs", "fabs"),
      unary("floor", FN1(std::floor(x)), "Floor", "floor"),
      unary("ceil", FN1(std::ceil(x)), "Ceil", "ceil"),
      unary("round", FN1(std::nearbyint(x)), "Round", "rint"),  // half to even, as ONNX's Round
      unary("trunc", FN1(std::trunc(x)), "", "trunc"),
      unary("sign", FN1(x > 0 ? 1.0 : x < 0 ? -1.0 : x), "Sign", "sign"),  // NaN stays NaN, 0 keeps its sign
      unary("sin", FN1(std::sin(x)), "Sin", "sin"),
      unary("cos", FN1(std::cos(x)), "Cos", "cos"),
      unary("tan", FN1(std::tan(x)), "Tan", "tan"),
      unary("asin", FN1(std::asin(x)), "Asin", "asin"),
      unary("acos", FN1(std::acos(x)), "Acos", "acos"),
      unary("atan", FN1(std::atan(x)), "Atan", "atan"),
      unary("sinh", FN1(std::sinh(x)), "Sinh", "sinh"),
      unary("cosh", FN1(std::cosh(x)), "Cosh", "cosh"),
      unary("asinh", FN1(std::asinh(x)), "Asinh", "asinh"),
      unary("acosh", FN1(std::acosh(x)), "Acosh", "acosh"),
      unary("atanh", FN1(std::atanh(x)), "Atanh", "atanh"),
      unary("isnan", FN1(std::isnan(x)), "IsNaN", "isnan", true),
      unary("isinf", FN1(std::isinf(x)), "IsInf", "isinf", true),
      // ---- other functions
      call("rsqrt", 1, 1, kInSemantics | kInRewrite, FN1(1.0 / std::sqrt(x)), {{"Sqrt", {}}, {"Reciprocal", {}}}, "rsqrt"),
      call("reciprocal", 1, 1, kInSemantics | kInRewrite, FN1(1.0 / x), {{"Reciprocal", {}}}, ""),
      call("pow", 2, 2, kInSemantics | kInRewrite, FN2(std::pow(x, y)), {{"Pow", {}}}, "pow"),
      call("select", 3, 3, kInSemantics | kInRewrite, [](const double* a, size_t) { return a[0] != 0 ? a[1] : a[2]; },
           {{"Where", {}}}, ""),
      call("fma", 3, 3, kInSemantics | kInRewrite, [](const double* a, size_t) { return a[0] * a[1] + a[2]; },
           {{"Mul", {}}, {"Add", {}}}, "fma"),
      // min, max, sum and mean take two or more arguments, or (semantics)
      // all the values of one variadic operand.
      call("min", 2, kAny, kAll, minOf, {{"Min", {}}}, ""),
      call("max", 2, kAny, kAll, maxOf, {{"Max", {}}}, ""),
      call("sum", 2, kAny, kInSemantics | kInRewrite, sumOf, {{"Sum", {}}}, ""),
      call("mean", 2, kAny, kInSemantics | kInRewrite,
           [](const double* a, size_t n) { return n ? sumOf(a, n) / double(n) : nan(); }, {{"Mean", {}}}, ""),
      // ---- guard queries of the match
      query("uses", 1, 1, ExprType::Int, true),
      query("const", 1, kAny, ExprType::Bool, true),
      query("dtype", 1, 1, ExprType::DType, true),
      query("rank", 1, 1, ExprType::Int, true),
      query("shape", 1, 1, ExprType::IntList, true),
      query("numel", 1, 1, ExprType::Int, true),
      query("is_output", 1, 1, ExprType::Bool, true),
      query("is_input", 1, 1, ExprType::Bool, true),  // a graph input (not a constant)
      query("len", 1, 1, ExprType::Int, false),
      query("prod", 1, 1, ExprType::Int, false),      // product of a list's items (1 when empty)
      query("present", 1, 1, ExprType::Int, true),    // 1 when an optional operand is there, else 0
      // What a constant holds: its one element, or (inside all/any) each element in turn.
      query("value", 1, 1, ExprType::Float, true),
      query("all", 1, 1, ExprType::Bool, false),      // the condition holds for every element of value(...)
      query("any", 1, 1, ExprType::Bool, false),      // ... for at least one
      // ---- rewrite helpers
      helper("unsqueeze", 2),
      helper("reshape", 2),
      helper("transpose", 2),
      helper("cast", 2),
  };
  // Guards compare numbers with abs too.
  for (Builtin& b : t)
    if (b.name == "abs") b.uses |= kInGuard;
  return t;
}

#undef FN1
#undef FN2

}  // namespace

const std::vector<Builtin>& builtins() {
  static const std::vector<Builtin> table = makeBuiltins();
  return table;
}

const Builtin* findBuiltin(std::string_view name, Builtin::Form form, BuiltinUse use) {
  for (const Builtin& b : builtins())
    if (b.name == name && b.form == form && (b.uses & use)) return &b;
  return nullptr;
}

std::string builtinNames(BuiltinUse use) {
  std::string out;
  for (const Builtin& b : builtins())
    if (b.form == Builtin::Form::Call && (b.uses & use)) out += (out.empty() ? "" : ", ") + b.name;
  return out;
}

}  // namespace fusec
