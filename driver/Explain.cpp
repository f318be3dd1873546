/// Why a rule fires or does not, for `fusec explain` and scripts. See Explain.h.
#include "fusec/driver/Explain.h"

#include <algorithm>
#include <fmt/format.h>
#include <set>

#include "fusec/engine/Matcher.h"
#include "fusec/engine/Planner.h"

namespace fusec::driver {
namespace {

std::string seconds(double s) { return fmt::format("{:.3g} us", s * 1e6); }

}  // namespace

Expected<std::string> explainRule(Graph model, const RuleSet& rules, const Target& target, const std::string& ruleName,
                                  const std::string& nodeName) {
  const Rule* rule = rules.find(ruleName);
  if (!rule) {
    std::string names;
    for (const Rule& r : rules.rules) names += " " + r.name;
    return Error{"no rule `" + ruleName + "` in the loaded packs; rules are:" + names};
  }
  std::string out;
  // A fusion rule is explained on the graph the planner sees (the
  // pipeline's), a rewrite rule on the model as imported.
  std::unique_ptr<Compiled> compiled;
  if (rule->kind == Rule::Kind::Fusion) {
    Expected<std::unique_ptr<Compiled>> c = compile(std::move(model), rules, target);
    if (!c) return c.error();
    compiled = std::move(c.value());
  }
  Graph& g = compiled ? compiled->graph : model;
  const PatternNode& root = rule->pattern.nodes[static_cast<size_t>(rule->pattern.roots.at(0))];
  std::vector<NodeRef> starts;
  for (NodeRef n : g.nodes()) {
    const NodeData& d = g.node(n);
    if (!nodeName.empty()) {
      if (d.name == nodeName) starts.push_back(n);
      continue;
    }
    for (const OpDef* op : root.ops)
      if (op->name == d.op && d.domain.empty()) starts.push_back(n);
  }
  out += fmt::format("rule `{}` ({}, {}) starts at {}\n", rule->name, rule->kind == Rule::Kind::Fusion ? "fusion" : "rewrite",
             rule->loc.str(), root.ops.size() == 1 ? "`" + root.ops[0]->name.str() + "`" : "its root pattern");
  if (starts.empty()) {
    if (!nodeName.empty()) {
      return Error{"no node named `" + nodeName + "` in the model (" + std::to_string(g.numNodes()) + " nodes)"};
    }
    out += "no node of the model can start it\n";
    return out;
  }
  Matcher matcher(rules, &target);
  const Plan* plan = compiled ? &compiled->plan : nullptr;
  std::vector<std::pair<NodeRef, MatchFailure>> misses;
  for (NodeRef n : starts) {
    MatchFailure why;
    std::optional<Match> m = matcher.matchAt(g, n, *rule, &why);
    const std::string at = g.describe(n);
    if (!m) {
      out += fmt::format("{}: no match: {} [{}]\n", at, why.reason, why.where.str());
      misses.emplace_back(n, why);
      continue;
    }
    std::string members;
    for (NodeRef x : m->allNodes()) members += (members.empty() ? "" : ", ") + g.node(x).name;
    out += fmt::format("{}: matches {{{}}}\n", at, members);
    if (!plan) continue;
    if (m->allNodes().size() < 2) {
      out += fmt::format("  planner: a single node is not a fusion; it runs as its own kernel\n");
      continue;
    }
    for (const Candidate& c : plan->candidates) {
      if (c.rule != rule || std::find(c.nodes.begin(), c.nodes.end(), n) == c.nodes.end()) continue;
      out += fmt::format("  planner: {} (saves {} of {}: fused {}, bytes {:.0f})", candidateStatusName(c.status), seconds(c.benefit),
                 seconds(c.unfusedSeconds), seconds(c.fused.seconds), c.fused.bytes);
      if (!c.why.empty()) out += fmt::format(": {}", c.why);
      if (c.status == Candidate::Status::Chosen) out += fmt::format(" as {}", plan->groups[plan->groupOf.at(n)].name);
      out += fmt::format("\n");
    }
  }
  // The nearest misses: where the most of the pattern matched (a guard that
  // failed on a whole match first); the three nearest, repeats left out.
  if (misses.size() > 1) {
    std::stable_sort(misses.begin(), misses.end(), [](const auto& a, const auto& b) {
      return std::pair(a.second.guardFailed, a.second.opsMatched) > std::pair(b.second.guardFailed, b.second.opsMatched);
    });
    const size_t patternOps = rule->pattern.nodes.size();
    out += fmt::format("nearest misses ({} of {} nodes that could start it did not match):\n", misses.size(), starts.size());
    std::set<std::string> shown;
    for (const auto& [n, why] : misses) {
      if (shown.size() == 3) break;
      if (!shown.insert(why.reason).second) continue;
      out += fmt::format("  {}: {} of {} pattern ops matched, then {}\n", g.describe(n), why.opsMatched, patternOps, why.reason);
    }
  }
  return out;
}

}  // namespace fusec::driver
