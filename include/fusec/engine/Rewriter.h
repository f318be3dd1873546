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
#include "fusec/engine/TypeInference.h"

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
  size_t convsTrimmed = 0;  ///< convs whose kernel lost taps that read only padding
  bool capHit = false;
  std::string capRule;  ///< the rule that would have fired past the cap
  /// The rule that built each node a rewrite added (by node id; nodes
  /// folded or replaced since are gone from the graph): the driver refuses
  /// a rewrite whose node no kernel family takes, naming the rule.
  std::map<NodeId, std::string> builtBy;
};

/// Applies the rewrite rules of `rules` to `g` until none matches.
Expected<RewriteStats> rewriteToFixpoint(Graph& g, const RuleSet& rules, const Target* target,
                                         const RewriteOptions& options = {});

/// Static shapes and constant folding, in one sweep in topological order:
/// each node's result types are inferred (TypeInference.h), then the node is
/// replaced by its result if its operands are all constants (computed by the
/// interpreter, elementwise ops from their semantics in `catalog`) or if it
/// is a Shape, Size or EyeLike of a value of static shape. Shape arithmetic
/// (Shape -> Gather -> Concat -> Reshape) thus folds wherever the input
/// shapes are known. Results above 256 MiB are not folded. Returns the
/// number of nodes folded.
Expected<size_t> foldConstants(Graph& g, const OpCatalog& catalog);

/// Drops the kernel taps of convolutions that read only padding at every
/// output position: leading and trailing taps along a spatial axis where the
/// dilation carries them past the input (DeepLabV3's atrous convs with a
/// dilation of 24 or 36 on a 14x14 map are 1x1 convs). The weight (a
/// constant) is sliced and the pads moved in by the taps dropped, so every
/// output reads the same products; taps are kept where the new pads would
/// be negative, or where a dropped weight is not finite (its product with
/// the padding's zero is NaN). Every rank, group and stride; explicit pads
/// (auto_pad NOTSET) and static input shapes only. Returns the number of
/// convs changed.
size_t trimDeadConvTaps(Graph& g);

/// Removes nodes none of whose results is used or a graph output.
size_t eliminateDeadCode(Graph& g);

/// Merges nodes with the same op, attributes and operands (constants equal
/// by value count as the same operand). Returns the number of nodes merged.
/// Only ops the catalog declares deterministic are merged.
size_t eliminateCommonSubexpressions(Graph& g, const OpCatalog& catalog);

/// The rewrite stage as the compiler runs it: constant folding, rewrites to
/// a fixpoint, dead conv taps, common subexpressions, dead code. The graph computes the same
/// outputs afterwards.
Expected<RewriteStats> runRewritePipeline(Graph& g, const RuleSet& rules, const Target* target,
                                          const RewriteOptions& options = {});

}  // namespace fusec
