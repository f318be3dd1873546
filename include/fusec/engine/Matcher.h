/// Pattern matching of compiled rules over a Graph.
///
/// A rule's pattern is matched from one of its roots: the root pattern node
/// is tried at a graph node, then operands are followed upward (producers),
/// binding names to values on the way; a name seen twice must be the same
/// value, so DAG patterns (diamonds) match only real diamonds. Commutative
/// ops try both operand orders (backtracking). A repetition `X+` matches a
/// maximal chain through operand 0 whose intermediate values have no other
/// use, of at most kMaxRepetition nodes. Further roots (sibling patterns) are searched among the consumers of
/// values already bound. Guards are evaluated last.
///
/// Matching is pure: it never edits the graph.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "fusec/engine/Graph.h"
#include "fusec/engine/RuleSet.h"
#include "fusec/engine/Target.h"

namespace fusec {

/// The most graph nodes one repetition matches: a longer chain is matched
/// in pieces of this length, so that matching stays linear in the graph (a
/// failed match at each node of a chain of 100,000 ops walks this far, not
/// to the chain's top) and one fused kernel stays a size a device compiler
/// builds in seconds.
inline constexpr size_t kMaxRepetition = 256;

/// The most steps (a pattern node tried at a graph node) one match attempt
/// takes before it gives up, with a reason: a pattern of many
/// interchangeable sibling roots could otherwise backtrack through every
/// assignment of candidates to roots (a 70-sibling rule took minutes).
inline constexpr size_t kMaxMatchSteps = 20000;

struct Match {
  const Rule* rule = nullptr;
  /// Graph nodes per pattern node (several for a repetition, in data order;
  /// none for an empty `X*`).
  std::vector<std::vector<NodeRef>> nodes;
  /// Per binding: the value bound (kNoValue for an absent optional operand
  /// or an attribute binding).
  std::vector<ValueId> values;
  /// Per binding: the attribute value of an attribute binding.
  std::vector<std::optional<Attribute>> attrs;

  /// Every matched graph node, without repeats, in pattern order.
  std::vector<NodeRef> allNodes() const;
};

/// Why a rule did not match at a node: the pattern step or guard that failed.
struct MatchFailure {
  std::string reason;
  SourceLocation where;
  /// How far the match got: pattern ops matched before it failed (all of
  /// them when only the guard failed); near-misses rank by it.
  size_t opsMatched = 0;
  bool guardFailed = false;
};

class Matcher {
 public:
  /// `target` may be null; guards that read it then fail.
  Matcher(const RuleSet& rules, const Target* target);

  /// Matches `rule` with its first root at node `n`. Returns the first
  /// match; when there is none and `why` is given, says which step failed.
  std::optional<Match> matchAt(const Graph& g, NodeRef n, const Rule& rule, MatchFailure* why = nullptr) const;

  /// Rules whose first root can start at an op named `op` (the root index).
  const std::vector<const Rule*>& rulesFor(const std::string& op) const;

  /// Evaluates a guard or cost expression over a match (numbers as double,
  /// conditions as 0/1). nullopt when a value it needs is unknown.
  std::optional<double> evaluate(const Graph& g, const Match& m, const RuleExpr& e) const;
  const Target* target() const { return target_; }

 private:
  const RuleSet& rules_;
  const Target* target_;
  std::map<std::string, std::vector<const Rule*>> byRootOp_;
};

/// Why guard `guard` fails on `m`: its first false conjunct as written, with
/// the values its operands took (`uses(c) == 1` is false (uses(c) = 2)).
std::string explainGuard(const Graph& g, const Match& m, const RuleExpr& guard, const Target* target);

/// Evaluates a guard or cost expression over `m` (Matcher::evaluate without
/// a matcher: an op's cost over a node). With `symbolicAsOne`, a symbolic
/// dim counts as 1 (the cost model's convention) instead of unknown.
std::optional<double> evaluateExpr(const Graph& g, const Match& m, const RuleExpr& e, const Target* target,
                                   bool symbolicAsOne = false);

}  // namespace fusec
