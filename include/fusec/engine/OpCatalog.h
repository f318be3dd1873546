/// The op catalog: what fusec knows about each op (operands, results,
/// attributes, kind, scalar semantics). It is declared in `.fuse` files
/// (rules/core/ops.fuse) and checked by the language front end, but its types
/// live here so the matcher, planner and codegen never see the grammar.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fusec/engine/Graph.h"

namespace fusec {

struct RuleExpr;

/// Where something was written, for messages: `rules/cnn.fuse:12:3`.
struct SourceLocation {
  std::string file;
  uint32_t line = 0, col = 0;
  std::string str() const { return file + ":" + std::to_string(line) + ":" + std::to_string(col); }
};

/// How an op may fuse (after TVM's op patterns).
enum class OpKind {
  Elementwise,  ///< one operand shape; output element i depends on input element i
  Broadcast,    ///< like elementwise, with multidirectional broadcasting
  Injective,    ///< data movement: each output element is one input element
  Reduction,    ///< reduces along axes (softmax, norms and pools included)
  Anchor,       ///< conv, matmul, pooling: accepts fused prologues/epilogues
  Opaque,       ///< not fused
};
std::string_view opKindName(OpKind k);
std::optional<OpKind> opKindFromName(std::string_view name);

enum class AttrType { Int, Float, String, Ints, Floats, Strings, Tensor, Graph };
std::string_view attrTypeName(AttrType t);
std::optional<AttrType> attrTypeFromName(std::string_view name);

/// Element type of an op's results relative to its operands.
enum class ResultType { SameAsOperands, Bool, Int64, Float, Any };
std::string_view resultTypeName(ResultType t);

/// Scalar semantics of an elementwise or broadcast op: a typed expression
/// over the op's operands and attributes.
struct ScalarExpr {
  enum class Kind {
    Constant,  ///< `value`
    Operand,   ///< operand `index` (all values of a variadic operand)
    Attr,      ///< attribute `index`
    Unary,     ///< `op` in {-, not}
    Binary,    ///< `op` in {+ - * / < <= > >= == != and or}
    Call,      ///< function `op` (exp, select, min, ...): Builtins.h
    Default,   ///< args[0] if that optional operand is present, else args[1]
  };
  enum class Type { Float, Bool };
  Kind kind = Kind::Constant;
  Type type = Type::Float;
  double value = 0;
  uint32_t index = 0;
  std::string op;
  std::vector<ScalarExpr> args;
};

/// Evaluates semantics for one element. `operands[i]` holds the values of
/// operand i (one value; several for a variadic operand; none when an
/// optional operand is absent); `attrs[i]` the numeric value of attribute i.
/// Booleans are 0 and 1.
double evaluateScalar(const ScalarExpr& e, const std::vector<std::vector<double>>& operands,
                      const std::vector<double>& attrs);

struct OpParam {
  std::string name;
  bool optional = false;
  bool variadic = false;
  /// `name: static`: kernels need its value when they are generated (it
  /// decides a result's shape or an index map): a constant, or an input
  /// fixed to its value (codegen/Specialize.h).
  bool staticValue = false;
};

struct AttrSpec {
  std::string name;
  AttrType type;
  bool required = false;
  std::optional<Attribute> defaultValue;
};

struct OpDef {
  Symbol name;
  OpKind kind = OpKind::Opaque;
  bool commutative = false;
  bool view = false;              ///< its result is its first operand's bytes in the same order
  bool nondeterministic = false;  ///< its result is not a function of its operands: never folded or merged
  std::vector<OpParam> params;
  std::vector<OpParam> results;  ///< at least one
  ResultType resultType = ResultType::SameAsOperands;
  std::vector<AttrSpec> attrs;
  std::optional<ScalarExpr> semantics;
  /// `cost { flops = ... }`: FLOPs of one node, over its operands, results
  /// and attributes as bindings in that order (CostModel.h evaluates it).
  /// Without it: the semantics' operations per element, else none.
  std::shared_ptr<const RuleExpr> flops;
  SourceLocation loc;

  const AttrSpec* findAttr(std::string_view attr) const;
  /// Index of an attribute in `attrs`, or -1.
  int attrIndex(std::string_view attr) const;
  size_t minOperands() const;
  /// SIZE_MAX when the last operand is variadic.
  size_t maxOperands() const;
};

/// Ops by name and classes of ops. Stable addresses: OpDef pointers stay
/// valid as ops are added.
class OpCatalog {
 public:
  /// Adds an op; returns nullptr if one of that name exists.
  const OpDef* addOp(OpDef def);
  const OpDef* find(std::string_view name) const;
  /// Adds a class (members already flattened); false if the name is taken.
  bool addClass(const std::string& name, std::vector<const OpDef*> members);
  const std::vector<const OpDef*>* findClass(std::string_view name) const;
  const std::deque<OpDef>& ops() const { return ops_; }
  const std::map<std::string, std::vector<const OpDef*>>& classes() const { return classes_; }

 private:
  std::deque<OpDef> ops_;
  std::unordered_map<std::string, const OpDef*> byName_;
  std::map<std::string, std::vector<const OpDef*>> classes_;
};

/// Why the operands of node `n` do not fit its catalog declaration: an
/// empty operand (an omitted name) where the op's parameter is not
/// optional, such as `Concat(x, "")`. Empty when they fit, or when the op
/// is not in `catalog` (opaque ops are not checked).
std::string missingOperandProblem(const Graph& g, NodeRef n, const OpCatalog& catalog);

/// A Transpose's permutation over `rank` dims (the dims reversed when it
/// has no `perm`); nullopt when `perm` is not a permutation of 0..rank-1.
std::optional<std::vector<int64_t>> transposePermutation(const NodeData& d, size_t rank);

/// Whether node `n` alone moves no data: an op the catalog marks `view`
/// (Reshape, Flatten, Squeeze, Unsqueeze, Identity), or a Transpose that
/// moves only dims of size 1 (ViT's [1, S, E] -> [S, 1, E]), with static
/// shapes and one element type. Its result can share its operand's buffer:
/// no kernel runs, and the cost model charges nothing for it.
bool movesNothing(const Graph& g, NodeRef n, const OpCatalog& catalog);

}  // namespace fusec
