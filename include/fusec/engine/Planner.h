/// The fusion planner.
///
/// Candidates come from every match of every fusion rule. Legality is
/// decided apart from profitability: a candidate is legal when it does not
/// make the graph cyclic (the group is convex: no path leaves it and comes
/// back) and the kernel family its rule names can build it for the target
/// (KernelFamily.h: codegen decides, resources included); it is profitable when the roofline
/// time of the fused kernel is below the sum of its members' times. The
/// planner picks non-overlapping legal candidates greedily by (benefit,
/// priority, stable id), re-checking that the groups chosen so far keep the
/// graph of groups acyclic. Every node not in a chosen group becomes a group
/// of its own, so the plan covers the graph. Deterministic: the same input
/// gives the same plan.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "fusec/engine/CostModel.h"
#include "fusec/engine/KernelFamily.h"
#include "fusec/engine/Matcher.h"

namespace fusec {

struct Candidate {
  size_t id = 0;  ///< order of discovery: topological position of the root, then rule order
  const Rule* rule = nullptr;
  std::vector<NodeRef> nodes;
  Estimate fused;
  double unfusedSeconds = 0;
  double benefit = 0;  ///< seconds saved
  /// SplitBack: legal and estimated profitable, but measured on the device
  /// to lose against its members unfused (PlanOptions::splitBack).
  enum class Status { Chosen, Illegal, Unprofitable, Overlaps, WouldCycle, SplitBack } status = Status::Illegal;
  std::string why;  ///< for the non-chosen: what stopped it (names the conflicting group)
};
std::string_view candidateStatusName(Candidate::Status s);

struct Group {
  size_t id = 0;
  std::vector<NodeRef> nodes;  ///< topological order
  const Rule* rule = nullptr;  ///< null for a single node
  std::string kernel;          ///< kernel family (single nodes: the first that builds them)
  std::string unbuildable;     ///< single nodes no family builds: the families' reasons
  Estimate estimate;
  std::string name;            ///< `g3_conv_epilogue`
};

struct Plan {
  std::vector<Group> groups;          ///< topological order
  std::vector<Candidate> candidates;  ///< all, with what became of each
  Estimate before;                    ///< every node its own kernel
  Estimate after;                     ///< the plan
  /// Group index of each node.
  std::unordered_map<NodeRef, size_t> groupOf;
};

/// Checks the target's limits on fused groups against the loaded catalog: a
/// `forbid` name that is neither an op nor a class would limit nothing.
Status checkGroupLimits(const Target& target, const OpCatalog& catalog);

/// Fusions measured to lose on the device, by their members' node ids
/// (sorted): a candidate of exactly these nodes is never chosen, and its
/// `why` is the text given (what was measured).
using SplitBacks = std::map<std::vector<NodeId>, std::string>;

/// Plans fusion of `g` (already rewritten) with the fusion rules of `rules`.
/// A candidate is legal only when the family its rule names can build it
/// (`families`, the code generator's); single nodes take the first family
/// that builds them. Candidates in `splitBack` are not chosen: the nodes
/// are left to other candidates or to kernels of their own.
Plan planFusion(const Graph& g, const RuleSet& rules, const Target& target, const KernelFamilies& families,
                const SplitBacks& splitBack = {});

/// The graph with each fused group replaced by one node of domain `fusec`,
/// op `Fused`, whose attributes carry the kernel family, the rule, the
/// members (ops and node names) and the estimates; it opens in Netron.
/// Single-node groups stay as they are.
Graph buildFusedGraph(const Graph& g, const Plan& plan);

/// Best total benefit over all non-overlapping, acyclic subsets of the legal,
/// profitable candidates, by exhaustive search. For checking the greedy
/// choice on small graphs; refuses more than `maxCandidates` candidates
/// (returns a negative value).
double exactBestBenefit(const Graph& g, const Plan& plan, size_t maxCandidates = 20);

}  // namespace fusec
