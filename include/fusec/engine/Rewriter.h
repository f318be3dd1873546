/// The rewrite driver and the graph cleanup passes.
///
/// The driver applies a rule set's rewrite rules to a fixpoint: a worklist of
/// nodes in a deterministic order (topological, then node id), rules tried in
/// priority order (then declaration order), the rewriter reporting every node
/// it adds or redirects back to the worklist. Rewrites build new nodes from
/// the rule's rewrite expressions; anything computed only from constants is
/// folded at once by the reference interpreter, so folding BatchNorm into
/// Conv yields new constant weights. Iterations are capped; hitting the cap is
/// reported, not silent.
#pragma once

#include <map>
#include <string>

#include "fusec/engine/Graph.h"
#include "fusec/engine/Matcher.h"
#include "fusec/engine/RuleSet.h"
#include "fusec/engine/Target.h"

namespace fusec {

struct RewriteOptions {
  /// Rewrites allowed per node of the input graph before the driver stops.
  size_t maxRewritesPerNode = 8;
};

struct RewriteStats {
  std::map<std::string, size_t> fired;  ///< rule name -> times applied
  size_t rewrites = 0;
  size_t nodesFolded = 0;
  size_t nodesRemoved = 0;
  bool capHit = false;
};

/// Applies the rewrite rules of `rules` to `g` until none matches.
Expected<RewriteStats> rewriteToFixpoint(Graph& g, const RuleSet& rules, const Target* target,
                                         const RewriteOptions& options = {});

/// Replaces every node whose operands are all constants by its result,
/// computed by the interpreter. Returns the number of nodes folded.
Expected<size_t> foldConstants(Graph& g);

/// Removes nodes none of whose results is used or a graph output.
size_t eliminateDeadCode(Graph& g);

/// Merges nodes with the same op, attributes and operands (constants equal
/// by value count as the same operand). Returns the number of nodes merged.
size_t eliminateCommonSubexpressions(Graph& g);

/// The rewrite stage as the compiler runs it: constant folding, rewrites to
/// a fixpoint, common subexpressions, dead code. The graph computes the same
/// outputs afterwards.
Expected<RewriteStats> runRewritePipeline(Graph& g, const RuleSet& rules, const Target* target,
                                          const RewriteOptions& options = {});

/// Re-runs ONNX shape inference over the whole graph and stores the result
/// types on values whose type is not fully known.
Status inferTypes(Graph& g);

}  // namespace fusec
