/// The compiled form of rule packs: checked rules with every name resolved,
/// ready for the matcher and planner. Built by the language front end
/// (grammar/) from `.fuse` files, or directly in code.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fusec/engine/OpCatalog.h"

namespace fusec {

/// Properties of a target that guards may read (`target.local_mem_bytes`).
const std::vector<std::string>& targetProperties();

/// The type of a rule expression.
enum class ExprType { Bool, Int, Float, String, DType, IntList, Tensor, Unknown };
std::string_view exprTypeName(ExprType t);

/// A typed expression in a guard, rewrite or cost, with names resolved to
/// pattern bindings and calls resolved to builtins or catalog ops.
struct RuleExpr {
  enum class Kind {
    Number,     ///< `number`
    String,     ///< `text`
    Bool,       ///< `number` != 0
    DTypeName,  ///< `text` names an element type (`float`)
    List,       ///< args
    Binding,    ///< the value bound to pattern name `binding`
    NodeAttr,   ///< attribute `text` of the node producing binding `binding`
    Target,     ///< target property `text`
    TargetHas,  ///< target feature test; args[0] is the feature string
    Builtin,    ///< builtin function `text` (uses, const, shape, sqrt, ...)
    OpCall,     ///< new node of `op` (rewrites)
    Unary,      ///< `text` in {-, not}
    Binary,     ///< `text` operator
    Index,      ///< args[0][args[1]]
  };
  Kind kind = Kind::Number;
  ExprType type = ExprType::Unknown;
  double number = 0;
  std::string text;
  int binding = -1;
  const OpDef* op = nullptr;
  std::vector<RuleExpr> args;
  SourceLocation loc;
};

/// A name bound by a pattern.
struct Binding {
  enum class Kind { Value, Attr };
  std::string name;
  Kind kind = Kind::Value;
  int producer = -1;  ///< pattern node defining a Value binding; -1 for a leaf input
  int result = 0;     ///< which result of the producer
  bool optional = false;
};

struct PatternOperand {
  enum class Kind { Binding, Node, Wildcard, Rest };
  Kind kind;
  int index = -1;  ///< binding or node index
  bool optional = false;
};

struct AttrConstraint {
  std::string name;
  std::optional<RuleExpr> equals;  ///< the attribute must equal this literal
  int binding = -1;                ///< or: bind the attribute's value to this name
};

/// One op position of a pattern.
struct PatternNode {
  enum class Repeat { Once, OneOrMore, ZeroOrMore };
  std::vector<const OpDef*> ops;  ///< alternatives, classes expanded
  Repeat repeat = Repeat::Once;
  std::vector<PatternOperand> operands;
  std::vector<AttrConstraint> attrs;
  std::vector<int> results;  ///< binding index per result (-1: not bound)
  SourceLocation loc;
};

struct Pattern {
  std::vector<PatternNode> nodes;
  std::vector<Binding> bindings;
  /// Nodes whose results no other pattern node reads: one for a tree or DAG
  /// pattern, several for sibling (horizontal) patterns.
  std::vector<int> roots;
  int findBinding(std::string_view name) const;
};

/// One statement of a rewrite: `results = value { attrs }`.
struct RewriteStep {
  std::vector<int> results;  ///< rewrite value index per name (see Rule::rewriteValues)
  RuleExpr value;
  std::vector<std::pair<std::string, RuleExpr>> attrs;
  std::vector<int> copyAttrsFrom;  ///< pattern nodes whose attributes are copied first
  SourceLocation loc;
};

struct Rule {
  enum class Kind { Rewrite, Fusion };
  std::string name;
  std::string pack;
  SourceLocation loc;
  Kind kind = Kind::Rewrite;
  Pattern pattern;
  std::optional<RuleExpr> guard;
  /// Rewrite rules: names defined by the rewrite; `replaces` is the pattern
  /// binding a value replaces, or -1 for a temporary.
  struct RewriteValue {
    std::string name;
    int replaces = -1;
  };
  std::vector<RewriteValue> rewriteValues;
  std::vector<RewriteStep> rewrite;
  std::string kernel;  ///< fusion rules
  std::optional<RuleExpr> flops, bytes;
  int64_t priority = 0;
  /// `tolerance { atol = ..., rtol = ... }`: what `fusec verify` allows
  /// this rule (Verify.h), where the ops' rounding needs more than its default.
  std::optional<double> atol, rtol;
};

struct RuleSet {
  OpCatalog catalog;
  std::vector<Rule> rules;
  std::vector<std::string> packs;  ///< loaded packs, dependencies first
  const Rule* find(std::string_view name) const;
};

}  // namespace fusec
