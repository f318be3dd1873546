/// Fusion planning; see Planner.h.
#include "fusec/engine/Planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

namespace fusec {
namespace {

/// Dense indices for nodes in topological order. A node's index is found
/// through its id in a flat table: the planner asks for it several times per
/// node, and a hash table on pointers costs cache misses per lookup once the
/// graph outgrows the cache.
struct Order {
  std::vector<NodeRef> nodes;
  explicit Order(const Graph& g) : g_(g) {
    Expected<std::vector<NodeRef>> o = g.topologicalOrder();
    nodes = o ? o.value() : g.nodes();
    NodeId maxId = 0;
    for (NodeRef n : nodes) maxId = std::max(maxId, g.node(n).id);
    byId_.assign(nodes.empty() ? 0 : maxId + 1, kNone);
    for (size_t i = 0; i < nodes.size(); ++i) byId_[g.node(nodes[i]).id] = i;
  }
  /// The index of node `n` (a node of the graph).
  size_t index(NodeRef n) const {
    const size_t i = byId_[g_.node(n).id];
    assert(i != kNone && "a node of another graph");
    return i;
  }

 private:
  static constexpr size_t kNone = SIZE_MAX;
  const Graph& g_;
  std::vector<size_t> byId_;
};

/// True when some path leaves `members` and re-enters it. Only nodes placed
/// before the group's last member in topological order can lead back, which
/// bounds the search.
bool leavesAndReturns(const Graph& g, const Order& order, const std::set<NodeRef>& members) {
  size_t last = 0;
  for (NodeRef n : members) last = std::max(last, order.index(n));
  std::vector<NodeRef> stack;
  std::set<NodeRef> seen;
  for (NodeRef n : members)
    for (NodeRef c : g.consumers(n))
      if (!members.count(c) && order.index(c) < last && seen.insert(c).second) stack.push_back(c);
  while (!stack.empty()) {
    NodeRef n = stack.back();
    stack.pop_back();
    for (NodeRef c : g.consumers(n)) {
      if (members.count(c)) return true;
      if (order.index(c) < last && seen.insert(c).second) stack.push_back(c);
    }
  }
  return false;
}

/// True when the groups (node -> group id, -1 for none) form a cycle.
bool groupsCycle(const Graph& g, const Order& order, const std::vector<long>& groupOf) {
  // Contract each group to one vertex and run Kahn's algorithm.
  const size_t n = order.nodes.size();
  auto key = [&](size_t i) { return groupOf[i] >= 0 ? n + static_cast<size_t>(groupOf[i]) : i; };
  std::unordered_map<size_t, std::set<size_t>> succ;
  std::unordered_map<size_t, size_t> indeg;
  std::set<size_t> vertices;
  for (size_t i = 0; i < n; ++i) vertices.insert(key(i));
  for (size_t i = 0; i < n; ++i)
    for (NodeRef c : g.consumers(order.nodes[i])) {
      size_t a = key(i), b = key(order.index(c));
      if (a != b && succ[a].insert(b).second) ++indeg[b];
    }
  std::vector<size_t> ready;
  for (size_t v : vertices)
    if (!indeg[v]) ready.push_back(v);
  size_t visited = 0;
  while (!ready.empty()) {
    size_t v = ready.back();
    ready.pop_back();
    ++visited;
    for (size_t w : succ[v])
      if (--indeg[w] == 0) ready.push_back(w);
  }
  return visited != vertices.size();
}

/// Why the family `rule` names cannot build `nodes` as one kernel, or
/// empty when it can.
std::string buildProblem(const Graph& g, const std::vector<NodeRef>& nodes, const Rule& rule, const OpCatalog& catalog,
                         const Target& target, const KernelFamilies& families) {
  const KernelFamily* family = families.find(rule.kernel);
  if (!family) return "the code generator has no kernel family `" + rule.kernel + "`";
  if (Status st = family->canEmit(g, nodes, catalog, target); !st)
    return "family `" + rule.kernel + "` cannot build this group: " + st.error().message;
  return {};
}

/// Why the target's limits on fused groups (`[target.groups]`) refuse
/// `nodes`, or empty when they allow it.
std::string limitProblem(const Graph& g, const std::vector<NodeRef>& nodes, const OpCatalog& catalog,
                         const Target& target) {
  const GroupLimits& limits = target.groups;
  if (limits.maxOps > 0 && static_cast<int64_t>(nodes.size()) > limits.maxOps)
    return "the target's fused groups hold at most " + std::to_string(limits.maxOps) + " ops ([target.groups] max_ops); "
           "this one has " + std::to_string(nodes.size());
  for (const std::string& name : limits.forbid) {
    std::set<std::string> ops = {name};
    if (auto c = catalog.classes().find(name); c != catalog.classes().end())
      for (const OpDef* op : c->second) ops.insert(op->name.str());
    for (NodeRef n : nodes)
      if (ops.count(g.node(n).op.str()))
        return "the target forbids `" + name + "` inside fused groups ([target.groups] forbid), and the group has a " +
               g.node(n).op.str();  // the op, not the node: the report counts the candidates refused alike
  }
  return {};
}

/// The graph of kernels chosen so far (nodes, with chosen groups contracted)
/// and a topological order of it, kept valid as groups are added (after
/// Pearce and Kelly's dynamic topological sort). Adding a group would create
/// a cycle exactly when a path leaves the group and returns to it; with a
/// valid order every vertex on such a path lies between the group's first
/// and last member, which bounds the search to that window. Accepting a group
/// reorders only that window.
class KernelGraph {
 public:
  KernelGraph(const Graph& g, const Order& order) : g_(g), order_(order) {
    const size_t n = order.nodes.size();
    rep_.resize(n);
    members_.resize(n);
    pos_.resize(n);
    at_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      rep_[i] = i;
      members_[i] = {i};
      pos_[i] = i;
      at_[i] = i;
    }
  }

  /// Where node `i` (original index)'s vertex is in the current topological
  /// order of the kernel graph.
  size_t position(size_t i) const { return pos_[rep_[i]]; }

  /// Tries to contract `nodes` (original indexes) into one vertex; false
  /// (and nothing changed) if that would make a cycle.
  bool tryAdd(const std::vector<size_t>& nodes) {
    std::set<size_t> group;
    for (size_t i : nodes) group.insert(rep_[i]);
    size_t lo = SIZE_MAX, hi = 0;
    for (size_t v : group) {
      lo = std::min(lo, pos_[v]);
      hi = std::max(hi, pos_[v]);
    }
    // Forward search from the group's successors, inside the window.
    std::vector<size_t> stack;
    std::set<size_t> forward;
    for (size_t v : group)
      for (size_t w : successors(v))
        if (!group.count(w) && pos_[w] < hi && forward.insert(w).second) stack.push_back(w);
    while (!stack.empty()) {
      size_t v = stack.back();
      stack.pop_back();
      for (size_t w : successors(v)) {
        if (group.count(w)) return false;  // left the group and came back
        if (pos_[w] < hi && forward.insert(w).second) stack.push_back(w);
      }
    }
    // Reorder the window: what does not depend on the group, the group, then
    // what depends on it (relative orders kept).
    std::vector<size_t> before, after;
    for (size_t p = lo; p <= hi; ++p) {
      const size_t v = at_[p];
      if (v == kDead || group.count(v)) continue;
      (forward.count(v) ? after : before).push_back(v);
    }
    const size_t keep = *group.begin();
    for (size_t v : group) {
      if (v == keep) continue;
      for (size_t m : members_[v]) {
        rep_[m] = keep;
        members_[keep].push_back(m);
      }
      members_[v].clear();
    }
    size_t p = lo;
    for (size_t v : before) place(v, p++);
    place(keep, p++);
    for (size_t v : after) place(v, p++);
    for (; p <= hi; ++p) at_[p] = kDead;
    return true;
  }

 private:
  static constexpr size_t kDead = SIZE_MAX;

  void place(size_t v, size_t p) {
    pos_[v] = p;
    at_[p] = v;
  }

  std::vector<size_t> successors(size_t v) const {
    std::vector<size_t> out;
    for (size_t m : members_[v])
      for (NodeRef c : g_.consumers(order_.nodes[m])) {
        const size_t w = rep_[order_.index(c)];
        if (w != v && std::find(out.begin(), out.end(), w) == out.end()) out.push_back(w);
      }
    return out;
  }

  const Graph& g_;
  const Order& order_;
  std::vector<size_t> rep_;                  // node -> vertex (its group's representative)
  std::vector<std::vector<size_t>> members_; // vertex -> nodes
  std::vector<size_t> pos_;                  // vertex -> position
  std::vector<size_t> at_;                   // position -> vertex, kDead when freed
};

/// Hashes a list of nodes (a candidate's members), for sets of them.
struct NodeListHash {
  size_t operator()(const std::vector<NodeRef>& nodes) const {
    size_t h = nodes.size();
    for (NodeRef n : nodes) h = h * 1000003u ^ std::hash<NodeRef>{}(n);
    return h;
  }
};

/// The sorted ids of `nodes`: a group's name across plans of one graph.
std::vector<NodeId> nodeIds(const Graph& g, const std::vector<NodeRef>& nodes) {
  std::vector<NodeId> ids;
  for (NodeRef n : nodes) ids.push_back(g.node(n).id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace

std::string_view candidateStatusName(Candidate::Status s) {
  switch (s) {
    case Candidate::Status::Chosen: return "chosen";
    case Candidate::Status::Illegal: return "illegal";
    case Candidate::Status::Unprofitable: return "unprofitable";
    case Candidate::Status::Overlaps: return "overlaps";
    case Candidate::Status::WouldCycle: return "would-cycle";
    case Candidate::Status::SplitBack: return "split-back";
  }
  return "?";
}

Status checkGroupLimits(const Target& target, const OpCatalog& catalog) {
  for (const std::string& name : target.groups.forbid)
    if (!catalog.find(name) && !catalog.classes().count(name))
      return Error{target.path + ": error: [target.groups] forbid names `" + name +
                   "`, which is neither an op nor a class of the loaded packs"};
  return Status::success();
}

Plan planFusion(const Graph& g, const RuleSet& rules, const Target& target, const KernelFamilies& families,
                const SplitBacks& splitBack) {
  Plan plan;
  const Order order(g);
  Matcher matcher(rules, &target);
  // ---- matches: at every root for most rules. For a rule with a
  // repetition, the matches at successive nodes of a chain nest, each
  // holding the one before, so a chain of n nodes would give n candidates
  // of n / 2 nodes on average: roots are visited last to first and a node a
  // match of the rule already covers starts none (the maximal chains, in
  // linear time). Likewise for a rule of sibling roots: each of n siblings
  // would find the same n-node match again.
  struct Found {
    size_t root, ruleIndex;
    const Rule* rule;
    Match match;
  };
  std::vector<Found> found;
  // State per node lives in vectors indexed by topological position (or in
  // hashed sets), never in trees keyed by node pointers: a lookup stays one
  // access however large the graph (bench/engine_scaling).
  std::unordered_map<const Rule*, std::vector<bool>> covered;  // by node index
  for (size_t i = order.nodes.size(); i-- > 0;) {
    const NodeRef n = order.nodes[i];
    const std::vector<const Rule*>& candidatesRules = matcher.rulesFor(g.node(n).op.str());
    for (size_t r = 0; r < candidatesRules.size(); ++r) {
      const Rule* rule = candidatesRules[r];
      if (rule->kind != Rule::Kind::Fusion) continue;
      const bool repeats = rule->pattern.roots.size() > 1 ||
                           std::any_of(rule->pattern.nodes.begin(), rule->pattern.nodes.end(),
                                       [](const PatternNode& p) { return p.repeat != PatternNode::Repeat::Once; });
      std::vector<bool>* cover = nullptr;
      if (repeats) {
        cover = &covered[rule];
        if (cover->empty()) cover->resize(order.nodes.size());
        if ((*cover)[i]) continue;
      }
      std::optional<Match> m = matcher.matchAt(g, n, *rule);
      if (!m) continue;
      if (cover)
        for (NodeRef x : m->allNodes()) (*cover)[order.index(x)] = true;
      found.push_back({i, r, rule, std::move(*m)});
    }
  }
  // Two rules matching the same nodes make one candidate: the rule of higher
  // priority's (a vendor pack's rule over the core one), then the first
  // declared, unless its family cannot build them: then the next rule's
  // (reduction_prologue_rows and reduction_prologue name two families for
  // reductions over innermost and other axes), the refused one not reported.
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return std::tuple(a.root, -a.rule->priority, a.ruleIndex) < std::tuple(b.root, -b.rule->priority, b.ruleIndex);
  });
  // Each node as a kernel of its own: the family that builds it (asked of
  // the families once per node: asking generates the kernel) and its
  // estimate, calibrated for that family.
  struct Alone {
    std::optional<Expected<const KernelFamily*>> family;
    std::optional<Estimate> estimate;
  };
  std::vector<Alone> alone(order.nodes.size());  // by node index
  auto aloneFamily = [&](NodeRef n) -> const Expected<const KernelFamily*>& {
    Alone& a = alone[order.index(n)];
    if (!a.family) a.family = families.select(g, {n}, rules.catalog, target);
    return *a.family;
  };
  auto aloneEstimate = [&](NodeRef n) -> const Estimate& {
    Alone& a = alone[order.index(n)];
    if (!a.estimate) {
      std::string family;
      if (hasCalibration(target))
        if (const Expected<const KernelFamily*>& f = aloneFamily(n)) family = f.value()->name();
      a.estimate = groupEstimate(g, {n}, rules.catalog, target, family);
    }
    return *a.estimate;
  };
  // ---- candidates
  auto sortedNodes = [&](const Match& m) {
    std::vector<NodeRef> nodes = m.allNodes();
    std::sort(nodes.begin(), nodes.end(), [&](NodeRef a, NodeRef b) { return order.index(a) < order.index(b); });
    return nodes;
  };
  std::unordered_set<std::vector<NodeRef>, NodeListHash> seenSets;
  for (const Found& f : found) {
    const Rule* rule = f.rule;
    const Match* m = &f.match;
    std::vector<NodeRef> nodes = sortedNodes(*m);
    if (nodes.size() < 2) continue;  // one node is no fusion
    if (seenSets.count(nodes)) continue;
    // Later rules matching the same nodes (the same root: next in `found`).
    std::vector<const Rule*> alternatives;
    for (auto later = found.begin() + (&f - found.data()) + 1; later != found.end() && later->root == f.root; ++later)
      if (sortedNodes(later->match) == nodes) alternatives.push_back(later->rule);
    std::optional<std::string> problem;  // asked of the family once, where there is a choice
    if (!alternatives.empty()) {
      problem = buildProblem(g, nodes, *rule, rules.catalog, target, families);
      if (!problem->empty() && std::any_of(alternatives.begin(), alternatives.end(), [&](const Rule* other) {
            return buildProblem(g, nodes, *other, rules.catalog, target, families).empty();
          }))
        continue;  // a later rule's family builds these nodes
    }
    seenSets.insert(nodes);
    Candidate c;
    c.id = plan.candidates.size();
    c.rule = rule;
    c.nodes = nodes;
    c.fused = groupEstimate(g, nodes, rules.catalog, target, rule->kernel);
    if (rule->flops || rule->bytes) {
      // The rule's own cost expressions replace the catalog's counts.
      const double flops = rule->flops ? matcher.evaluate(g, *m, *rule->flops).value_or(c.fused.flops) : c.fused.flops;
      const double bytes = rule->bytes ? matcher.evaluate(g, *m, *rule->bytes).value_or(c.fused.bytes) : c.fused.bytes;
      c.fused = rooflineEstimate(flops, bytes, target, -1, rule->kernel);
    }
    for (NodeRef x : nodes) c.unfusedSeconds += aloneEstimate(x).seconds;
    c.benefit = c.unfusedSeconds - c.fused.seconds;
    // ---- legality, then profitability
    std::set<NodeRef> members(nodes.begin(), nodes.end());
    if (leavesAndReturns(g, order, members)) {
      c.status = Candidate::Status::Illegal;
      c.why = "fusing would create a cycle: a path leaves the group and comes back";
    } else if (std::string r = limitProblem(g, nodes, rules.catalog, target); !r.empty()) {
      c.status = Candidate::Status::Illegal;
      c.why = r;
    } else if (std::string r = problem ? *problem : buildProblem(g, nodes, *rule, rules.catalog, target, families); !r.empty()) {
      c.status = Candidate::Status::Illegal;
      c.why = r;
    } else if (c.benefit <= 0) {
      c.status = Candidate::Status::Unprofitable;
      c.why = "no time saved by the roofline estimate";
    } else if (auto vetoed = splitBack.find(nodeIds(g, nodes)); vetoed != splitBack.end()) {
      c.status = Candidate::Status::SplitBack;
      c.why = vetoed->second;
    } else {
      c.status = Candidate::Status::Overlaps;  // decided below
    }
    plan.candidates.push_back(std::move(c));
  }
  // ---- greedy selection by (priority, benefit, stable id): of two
  // candidates that share nodes, the rule of higher priority wins, the
  // larger estimated benefit breaking a tie (docs/language.md, "Which
  // candidates are chosen").
  std::vector<size_t> ranked;
  for (const Candidate& c : plan.candidates)
    if (c.status == Candidate::Status::Overlaps) ranked.push_back(c.id);
  std::sort(ranked.begin(), ranked.end(), [&](size_t a, size_t b) {
    const Candidate& x = plan.candidates[a];
    const Candidate& y = plan.candidates[b];
    if (x.rule->priority != y.rule->priority) return x.rule->priority > y.rule->priority;
    if (x.benefit != y.benefit) return x.benefit > y.benefit;
    return x.id < y.id;
  });
  KernelGraph kernels(g, order);
  constexpr size_t kNoOwner = SIZE_MAX;
  std::vector<size_t> owner(order.nodes.size(), kNoOwner);  // node index -> chosen candidate
  for (size_t id : ranked) {
    Candidate& c = plan.candidates[id];
    const Candidate* conflict = nullptr;
    for (NodeRef n : c.nodes)
      if (const size_t o = owner[order.index(n)]; o != kNoOwner) {
        conflict = &plan.candidates[o];
        break;
      }
    if (conflict) {
      c.status = Candidate::Status::Overlaps;
      c.why = fmt::format("lost to candidate #{} (rule `{}`, priority {}, benefit {:.3g} us) against this one's "
                          "priority {}, benefit {:.3g} us: {}",
                          conflict->id, conflict->rule->name, conflict->rule->priority, conflict->benefit * 1e6,
                          c.rule->priority, c.benefit * 1e6,
                          conflict->rule->priority > c.rule->priority ? "a higher priority wins"
                          : conflict->benefit > c.benefit             ? "the same priority, and a larger benefit"
                                                                      : "the same priority and benefit, found first");
      continue;
    }
    std::vector<size_t> indexes;
    for (NodeRef n : c.nodes) indexes.push_back(order.index(n));
    if (!kernels.tryAdd(indexes)) {
      c.status = Candidate::Status::WouldCycle;
      c.why = "together with the groups chosen before it, it would make the graph of kernels cyclic";
      continue;
    }
    c.status = Candidate::Status::Chosen;
    for (NodeRef n : c.nodes) owner[order.index(n)] = c.id;
  }
  // ---- groups in topological order; single nodes for the rest
  std::vector<bool> emitted(plan.candidates.size());
  for (size_t i = 0; i < order.nodes.size(); ++i) {
    const NodeRef n = order.nodes[i];
    if (owner[i] == kNoOwner) {
      Group grp;
      grp.nodes = {n};
      const Expected<const KernelFamily*>& family = aloneFamily(n);
      if (family) grp.kernel = std::string(family.value()->name());
      else grp.unbuildable = family.error().message;
      grp.estimate = aloneEstimate(n);
      plan.groups.push_back(std::move(grp));
      continue;
    }
    if (emitted[owner[i]]) continue;
    emitted[owner[i]] = true;
    const Candidate& c = plan.candidates[owner[i]];
    Group grp;
    grp.nodes = c.nodes;
    grp.rule = c.rule;
    grp.kernel = c.rule->kernel;
    grp.estimate = c.fused;
    plan.groups.push_back(std::move(grp));
  }
  // Groups in dependency order: the kernel graph's own topological order.
  // (Where a group's last member is in the node order is not one: sibling
  // convs of two branches put that place after nodes of the first branch
  // that read the group's results.)
  std::vector<std::pair<size_t, size_t>> pos;  // (position of the group's vertex, group)
  for (size_t i = 0; i < plan.groups.size(); ++i)
    pos.emplace_back(kernels.position(order.index(plan.groups[i].nodes.front())), i);
  std::sort(pos.begin(), pos.end());
  std::vector<Group> sorted;
  for (auto [last, i] : pos) sorted.push_back(std::move(plan.groups[i]));
  plan.groups = std::move(sorted);
  plan.groupOf.reserve(order.nodes.size());
  for (size_t i = 0; i < plan.groups.size(); ++i) {
    Group& grp = plan.groups[i];
    grp.id = i;
    grp.name = "g" + std::to_string(i) + "_" + (grp.rule ? grp.rule->name : g.node(grp.nodes[0]).op.str());
    for (NodeRef n : grp.nodes) plan.groupOf[n] = i;
    plan.after += grp.estimate;
  }
  plan.before = Estimate{};
  for (NodeRef n : g.nodes()) plan.before += aloneEstimate(n);
  return plan;
}

Graph buildFusedGraph(const Graph& g, const Plan& plan) {
  Graph out = g.clone();
  out.info.opsetImports["fusec"] = 1;
  for (const Group& grp : plan.groups) {
    if (grp.nodes.size() < 2) continue;
    // Node handles of the clone: the same node ids.
    std::vector<NodeRef> members;
    std::unordered_map<NodeId, NodeRef> byId;
    for (NodeRef n : out.nodes()) byId[out.node(n).id] = n;
    for (NodeRef n : grp.nodes) members.push_back(byId.at(g.node(n).id));
    std::vector<std::string> ops, names;
    for (NodeRef n : members) {
      ops.push_back(out.node(n).op.str());
      names.push_back(out.node(n).name);
    }
    const GroupBoundary boundary = groupBoundary(out, members);
    const std::vector<ValueId>& inputs = boundary.inputs;
    const std::vector<ValueId>& escaping = boundary.outputs;
    // Fresh values take over the escaping results, then the members go.
    std::vector<ValueId> results;
    for (ValueId v : escaping) {
      Value& old = out.value(v);
      ValueId fresh = out.addValue(old.name, old.type);
      out.value(v).name += "_member";
      out.replaceAllUsesWith(v, fresh);
      results.push_back(fresh);
    }
    for (auto it = members.rbegin(); it != members.rend(); ++it) out.removeNode(*it);
    AttrMap attrs;
    attrs["kernel"] = grp.kernel;
    attrs["rule"] = grp.rule ? grp.rule->name : std::string();
    attrs["members"] = ops;
    attrs["member_names"] = names;
    attrs["est_flops"] = static_cast<float>(grp.estimate.flops);
    attrs["est_bytes"] = static_cast<float>(grp.estimate.bytes);
    attrs["est_time_us"] = static_cast<float>(grp.estimate.seconds * 1e6);
    out.addNode("Fused", inputs, results, std::move(attrs), grp.name, "fusec");
  }
  return out;
}

double exactBestBenefit(const Graph& g, const Plan& plan, size_t maxCandidates) {
  std::vector<const Candidate*> pool;
  for (const Candidate& c : plan.candidates)
    if (c.status != Candidate::Status::Illegal && c.status != Candidate::Status::Unprofitable &&
        c.status != Candidate::Status::SplitBack)
      pool.push_back(&c);
  if (pool.size() > maxCandidates) return -1;
  const Order order(g);
  double best = 0;
  std::vector<long> groupOf(order.nodes.size(), -1);
  std::function<void(size_t, double)> search = [&](size_t i, double total) {
    best = std::max(best, total);
    for (size_t k = i; k < pool.size(); ++k) {
      const Candidate& c = *pool[k];
      bool free = true;
      for (NodeRef n : c.nodes) free &= groupOf[order.index(n)] < 0;
      if (!free) continue;
      for (NodeRef n : c.nodes) groupOf[order.index(n)] = static_cast<long>(c.id);
      if (!groupsCycle(g, order, groupOf)) search(k + 1, total + c.benefit);
      for (NodeRef n : c.nodes) groupOf[order.index(n)] = -1;
    }
  };
  search(0, 0);
  return best;
}

}  // namespace fusec
