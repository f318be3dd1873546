/// `fusec explain MODEL --rule NAME [--node NAME]`: for each place the rule
/// could start, the pattern step or guard that failed (with the rule's source
/// location), or, where it matched, what the planner did with it and why.
/// Rewrite rules are explained on the imported graph; fusion rules on the
/// graph after the rewrite stage, where the planner sees them.
#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <iostream>

#include "Commands.h"
#include "Session.h"
#include "fusec/driver/Pipeline.h"
#include "fusec/engine/Planner.h"
#include "fusec/engine/Rewriter.h"

namespace fusec::tools {
namespace {

struct ExplainOptions {
  std::string model, target, rule, node;
  std::vector<std::string> packs;
};

std::string seconds(double s) { return fmt::format("{:.3g} us", s * 1e6); }

int explain(const ExplainOptions& o) {
  std::unique_ptr<Session> s = openSession(o.model, o.packs, o.target);
  if (!s) return 1;
  const Rule* rule = s->rules->find(o.rule);
  if (!rule) {
    std::cerr << "error: no rule `" << o.rule << "` in the loaded packs; rules are:";
    for (const Rule& r : s->rules->rules) std::cerr << " " << r.name;
    std::cerr << "\n";
    return 1;
  }
  // A fusion rule is explained on the graph the planner sees (the
  // pipeline's), a rewrite rule on the model as imported.
  std::unique_ptr<driver::Compiled> compiled;
  if (rule->kind == Rule::Kind::Fusion) {
    Expected<std::unique_ptr<driver::Compiled>> c = driver::compile(std::move(s->graph), *s->rules, s->target);
    if (!c) {
      std::cerr << "error: " << c.error().message << "\n";
      return 1;
    }
    compiled = std::move(c.value());
  }
  Graph& g = compiled ? compiled->graph : s->graph;
  const PatternNode& root = rule->pattern.nodes[static_cast<size_t>(rule->pattern.roots.at(0))];
  std::vector<NodeRef> starts;
  for (NodeRef n : g.nodes()) {
    const NodeData& d = g.node(n);
    if (!o.node.empty()) {
      if (d.name == o.node) starts.push_back(n);
      continue;
    }
    for (const OpDef* op : root.ops)
      if (op->name == d.op && d.domain.empty()) starts.push_back(n);
  }
  fmt::print("rule `{}` ({}, {}) starts at {}\n", rule->name, rule->kind == Rule::Kind::Fusion ? "fusion" : "rewrite",
             rule->loc.str(), root.ops.size() == 1 ? "`" + root.ops[0]->name.str() + "`" : "its root pattern");
  if (starts.empty()) {
    if (!o.node.empty()) {
      std::cerr << "error: no node named `" << o.node << "` in " << o.model << "\n";
      return 1;
    }
    fmt::print("no node of the model can start it\n");
    return 0;
  }
  Matcher matcher(*s->rules, &s->target);
  const Plan* plan = compiled ? &compiled->plan : nullptr;
  std::vector<std::pair<NodeRef, MatchFailure>> misses;
  for (NodeRef n : starts) {
    MatchFailure why;
    std::optional<Match> m = matcher.matchAt(g, n, *rule, &why);
    const std::string at = g.describe(n);
    if (!m) {
      fmt::print("{}: no match: {} [{}]\n", at, why.reason, why.where.str());
      misses.emplace_back(n, why);
      continue;
    }
    std::string members;
    for (NodeRef x : m->allNodes()) members += (members.empty() ? "" : ", ") + g.node(x).name;
    fmt::print("{}: matches {{{}}}\n", at, members);
    if (!plan) continue;
    if (m->allNodes().size() < 2) {
      fmt::print("  planner: a single node is not a fusion; it runs as its own kernel\n");
      continue;
    }
    for (const Candidate& c : plan->candidates) {
      if (c.rule != rule || std::find(c.nodes.begin(), c.nodes.end(), n) == c.nodes.end()) continue;
      fmt::print("  planner: {} (saves {} of {}: fused {}, bytes {:.0f})", candidateStatusName(c.status), seconds(c.benefit),
                 seconds(c.unfusedSeconds), seconds(c.fused.seconds), c.fused.bytes);
      if (!c.why.empty()) fmt::print(": {}", c.why);
      if (c.status == Candidate::Status::Chosen) fmt::print(" as {}", plan->groups[plan->groupOf.at(n)].name);
      fmt::print("\n");
    }
  }
  // The nearest misses: where the most of the pattern matched (a guard that
  // failed on a whole match first); the three nearest, repeats left out.
  if (misses.size() > 1) {
    std::stable_sort(misses.begin(), misses.end(), [](const auto& a, const auto& b) {
      return std::pair(a.second.guardFailed, a.second.opsMatched) > std::pair(b.second.guardFailed, b.second.opsMatched);
    });
    const size_t patternOps = rule->pattern.nodes.size();
    fmt::print("nearest misses ({} of {} nodes that could start it did not match):\n", misses.size(), starts.size());
    std::set<std::string> shown;
    for (const auto& [n, why] : misses) {
      if (shown.size() == 3) break;
      if (!shown.insert(why.reason).second) continue;
      fmt::print("  {}: {} of {} pattern ops matched, then {}\n", g.describe(n), why.opsMatched, patternOps, why.reason);
    }
  }
  return 0;
}

}  // namespace

CommandRunner addExplainCommand(CLI::App& sub) {
  auto o = std::make_shared<ExplainOptions>();
  sub.add_option("model", o->model, "model file (.onnx or ONNX text)")->required();
  sub.add_option("--rule", o->rule, "the rule to explain")->required();
  sub.add_option("--node", o->node, "only this node (by name)");
  sub.add_option("--rules", o->packs, "rule packs (default: the target's default packs)");
  sub.add_option("--target", o->target, "target profile (.toml)");
  return [o] { return explain(*o); };
}

}  // namespace fusec::tools
