/// The AST of `.fuse` files: our own types, built from ANTLR's parse tree
/// right after parsing (no ANTLR type leaves grammar/). Every node has a
/// source range. Nodes are created by and owned by an AstContext.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "fusec/grammar/Diagnostics.h"

namespace fusec::grammar::ast {

/// An identifier or other name token with its location.
struct Name {
  std::string text;
  SourceRange range;
};

struct Expr {
  enum class Kind { Number, String, Bool, Name, Call, Member, Index, Unary, Binary, List };
  Kind kind;
  SourceRange range;
  /// Number: the literal as written; String: the unescaped value; Name: the
  /// name; Call: the callee; Member: the member name; Unary/Binary: the operator.
  std::string text;
  double number = 0;
  bool isInteger = false;  ///< a Number literal without `.` or exponent
  bool boolValue = false;
  bool isMethodCall = false;  ///< Member written with arguments: `target.has("fp16")`
  /// Call: arguments; Member: [object, method arguments...]; Index: [object, index];
  /// Unary: [operand]; Binary: [lhs, rhs]; List: items.
  std::vector<Expr*> operands;
};

struct Param {
  Name name;
  bool optional = false;
  bool variadic = false;
  std::optional<Name> type;
  SourceRange range;
};

struct AttrDecl {
  Name name;
  bool optional = false;  ///< `name?: type`: may be absent, no default
  Name type;
  Expr* defaultValue = nullptr;  ///< null and not optional: the attribute is required
  SourceRange range;
};

struct CostItem {
  Name name;
  Expr* value;
  SourceRange range;
};

struct OpDecl {
  Name name;
  std::vector<Param> params;
  std::optional<Name> resultType;  ///< `: bool` after the operands
  std::vector<Param> results;      ///< `-> (y, mask?)`; empty: one result
  std::vector<Name> traits;        ///< the kind and traits such as `commutative`
  std::vector<AttrDecl> attrs;
  Expr* semantics = nullptr;
  std::vector<CostItem> cost;  ///< `cost { flops = ... }`
  SourceRange range;
};

struct ClassDecl {
  Name name;
  std::vector<Name> members;
  SourceRange range;
};

struct PatternCall;

/// The op position of a pattern call: one op or class, or alternatives, with
/// an optional repetition (`+` one or more, `*` zero or more).
struct OpRef {
  std::vector<Name> alternatives;
  char repeat = 0;  ///< 0, '+' or '*'
  SourceRange range;
};

struct PatternArg {
  enum class Kind { Call, Name, Wildcard, Rest };
  Kind kind;
  PatternCall* call = nullptr;
  Name name;
  bool optional = false;
  SourceRange range;
};

struct AttrMatch {
  Name name;
  Expr* value;
  SourceRange range;
};

struct PatternCall {
  OpRef op;
  std::vector<PatternArg> args;
  std::vector<AttrMatch> attrs;
  SourceRange range;
};

struct PatternStmt {
  std::vector<Name> names;
  PatternCall* call;
  SourceRange range;
};

struct AttrAssign {
  bool copyAll = false;  ///< `attrs(c)`: copy every attribute of node `c`
  Name name;             ///< the attribute, or the node for copyAll
  Expr* value = nullptr;
  SourceRange range;
};

struct RewriteStmt {
  std::vector<Name> names;
  Expr* value;
  std::vector<AttrAssign> attrs;
  SourceRange range;
};


struct Rule {
  Name name;
  bool isOverride = false;
  /// `match { } rewrite { }` rules rewrite; `fuse { } kernel K` rules form groups.
  bool isFusion = false;
  bool hasPattern = false;
  SourceRange patternRange;
  std::vector<PatternStmt*> pattern;
  Expr* guard = nullptr;
  bool hasRewrite = false;
  SourceRange rewriteRange;
  std::vector<RewriteStmt*> rewrite;
  std::optional<Name> kernel;
  std::vector<CostItem> cost;
  bool hasCost = false;
  std::vector<CostItem> tolerance;  ///< `tolerance { rtol = 1e-3 }`: how close `fusec verify` requires
  bool hasTolerance = false;
  std::optional<int64_t> priority;
  SourceRange priorityRange;
  SourceRange range;
};

struct Import {
  std::string path;
  SourceRange range;
};

struct Disable {
  Name rule;
  SourceRange range;
};

using Item = std::variant<Import*, OpDecl*, ClassDecl*, Rule*, Disable*>;

/// A comment, kept for `fusec fmt`: `// ...` or `/* ... */` as written.
struct Comment {
  std::string text;
  SourceRange range;
  bool ownLine = false;  ///< nothing but blanks before it on its line
};

struct File {
  uint32_t fileId = 0;
  std::optional<Name> packName;
  std::optional<std::string> version;
  std::vector<Item> items;
  std::vector<Comment> comments;  ///< in source order
};

/// Owns AST nodes; they live as long as the context.
class AstContext {
 public:
  template <class T, class... Args>
  T* make(Args&&... args) {
    auto node = std::make_shared<T>(T{std::forward<Args>(args)...});
    T* raw = node.get();
    nodes_.push_back(std::move(node));
    return raw;
  }

 private:
  std::deque<std::shared_ptr<void>> nodes_;
};

}  // namespace fusec::grammar::ast
