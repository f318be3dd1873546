/// The language's operators and functions, in one table: what each takes,
/// where it may be written (an op's scalar semantics, a guard or cost, a
/// rewrite), how it evaluates on numbers, what a rewrite builds for it and
/// how OpenCL C spells it. The front end checks against it, and the scalar
/// evaluator, the interpreter, the matcher, the rewriter and the kernel
/// emitter read it, so a function accepted in one place works in all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fusec/engine/Graph.h"
#include "fusec/engine/RuleSet.h"

namespace fusec {

/// Where a builtin may be written (a bit set).
enum BuiltinUse : unsigned {
  kInSemantics = 1,  ///< an op's scalar semantics (`op Relu(X) ... = max(X, 0.0)`)
  kInGuard = 2,      ///< guards and cost expressions (numbers, lists, queries of the match)
  kInRewrite = 4,    ///< rewrites (tensor expressions, built as ops)
};

/// One op a rewrite builds for a builtin: the first step takes the
/// arguments (all of them when its op is variadic, else as many as it
/// takes); each later step takes the previous result and then the next
/// unused arguments.
struct LoweringStep {
  std::string op;
  AttrMap attrs;
};

struct Builtin {
  enum class Form { Prefix, Infix, Call };
  std::string name;  ///< `+`, `not`, `exp`, `uses`
  Form form = Form::Call;
  size_t minArgs = 1, maxArgs = 1;  ///< SIZE_MAX: any number
  unsigned uses = 0;                ///< BuiltinUse bits
  bool truth = false;               ///< the result is a truth value (0 or 1)
  /// On numbers, for semantics and guards; null for queries of the graph
  /// (`uses`, `shape`, ...), which the matcher answers.
  double (*eval)(const double* args, size_t n) = nullptr;
  /// What a rewrite builds; empty for rewrite helpers the rewriter builds
  /// itself (`unsqueeze`, `cast`, ...).
  std::vector<LoweringStep> lowering;
  /// OpenCL C: the function called, or the operator written between or
  /// before the operands.
  std::string opencl;
  /// Guards: the result's type, and whether the arguments must be values
  /// bound by the pattern (queries).
  ExprType guardType = ExprType::Float;
  bool queriesValues = false;
};

/// Every builtin.
const std::vector<Builtin>& builtins();

/// The builtin `name` of `form` usable in `use`, or null.
const Builtin* findBuiltin(std::string_view name, Builtin::Form form, BuiltinUse use);

/// The names of the calls usable in `use`, comma-separated (for messages).
std::string builtinNames(BuiltinUse use);

}  // namespace fusec
