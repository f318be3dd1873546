/// Reports of a compilation; see Report.h.
#include "fusec/driver/Report.h"

#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <sstream>

#include "Units.h"
#include "fusec/codegen/Executor.h"
#include "fusec/engine/TypeInference.h"

namespace fusec::driver {
namespace {

using nlohmann::json;

/// `core.fuse, cnn`: the packs' file names.
std::string packNames(const std::vector<std::string>& packs) {
  std::string out;
  for (const std::string& p : packs) out += (out.empty() ? "" : ", ") + std::filesystem::path(p).filename().string();
  return out;
}


json estimateJson(const Estimate& e) {
  return json{{"kernels", e.kernels}, {"flops", e.flops}, {"bytes", e.bytes}, {"seconds", e.seconds}, {"joules", e.joules}};
}

/// `x: float[1,3,224,224], ...`: the graph inputs' types as compiled.
std::string inputTypes(const Graph& g) {
  std::string out;
  for (ValueId v : g.inputs()) out += (out.empty() ? "" : ", ") + g.value(v).name + ": " + g.value(v).type.str();
  return out;
}

/// The candidates no kernel family can build, by rule and reason (located
/// at the rule), and the nodes no family builds at all.
std::string refusals(const Graph& g, const Plan& plan) {
  std::map<std::pair<const Rule*, std::string>, std::vector<std::string>> refused;
  for (const Candidate& c : plan.candidates)
    if (c.status == Candidate::Status::Illegal && c.why.rfind("fusing would create a cycle", 0) != 0)
      refused[{c.rule, c.why}].push_back(g.node(c.nodes.front()).name);
  std::map<std::string, std::pair<size_t, std::string>> unbuilt;  // op -> (nodes, reason)
  for (const Group& grp : plan.groups)
    if (!grp.unbuildable.empty()) {
      auto& u = unbuilt[g.node(grp.nodes.front()).op.str()];
      if (!u.first++) u.second = grp.unbuildable;
    }
  if (refused.empty() && unbuilt.empty()) return {};
  std::string out = "\nrefused\n";
  for (const auto& [key, at] : refused)
    out += fmt::format("  {}: rule `{}`: {} ({} candidate(s), first at node `{}`)\n", key.first->loc.str(),
                       key.first->name, key.second, at.size(), at.front());
  for (const auto& [op, u] : unbuilt) out += fmt::format("  {} node(s) of op {}: {}\n", u.first, op, u.second);
  return out;
}

}  // namespace

std::map<std::string, std::pair<size_t, size_t>> fusionCounts(const Plan& plan) {
  std::map<std::string, std::pair<size_t, size_t>> fusions;
  for (const Candidate& c : plan.candidates) {
    auto& f = fusions[c.rule->name];
    ++f.second;
    f.first += c.status == Candidate::Status::Chosen;
  }
  return fusions;
}

std::string reportText(const Compiled& c, const ReportContext& context) {
  const RewriteStats& rw = c.rewrites;
  const Plan& plan = c.plan;
  std::ostringstream os;
  os << fmt::format("fusec compile: {} for {} with {}\n\n", context.model, context.target, packNames(context.packs));
  os << fmt::format("import: {} inputs ({}), {} nodes of shape arithmetic and constants folded\n\n", c.graph.inputs().size(),
                    inputTypes(c.graph), c.foldedAtImport);
  os << "rewrites";
  if (rw.fired.empty()) os << ": none";
  os << "\n";
  for (const auto& [rule, n] : rw.fired) os << fmt::format("  {:<36} {:>5}x\n", rule, n);
  if (rw.capHit) os << "  (stopped at the rewrite cap)\n";
  os << fmt::format("  constants folded: {}, nodes removed: {}", rw.nodesFolded, rw.nodesRemoved);
  if (rw.convsTrimmed) os << fmt::format(", convs trimmed of taps that read only padding: {}", rw.convsTrimmed);
  os << "\n\n";
  os << "fusions (chosen of candidates)\n";
  for (const auto& [rule, f] : fusionCounts(plan)) os << fmt::format("  {:<36} {:>5} of {}\n", rule, f.first, f.second);
  os << refusals(c.graph, plan);
  std::string lost;
  for (const Candidate& cand : plan.candidates)
    if (cand.status == Candidate::Status::SplitBack)
      lost += fmt::format("  rule `{}` at node `{}`: {}\n", cand.rule->name, c.graph.node(cand.nodes.front()).name, cand.why);
  if (!lost.empty()) os << "\nsplit back (measured slower than unfused)\n" << lost;
  os << "\ngroups\n";
  for (const Group& grp : plan.groups) {
    if (grp.nodes.size() < 2) continue;
    std::string ops;  // the first few members, then how many in all
    for (size_t i = 0; i < grp.nodes.size() && i < 8; ++i) ops += (i ? " " : "") + c.graph.node(grp.nodes[i]).op.str();
    if (grp.nodes.size() > 8) ops += fmt::format(" ... ({} ops)", grp.nodes.size());
    os << fmt::format("  {:<40} {:<16} {:>10}  {}\n", grp.name, grp.kernel, seconds(grp.estimate.seconds), ops);
  }
  const Estimate& b = c.imported;
  const Estimate& a = plan.after;
  os << "\n";
  const Estimate& r = plan.before;
  auto row = [&](const char* what, const std::string& x, const std::string& y, const std::string& z, const std::string& note) {
    os << fmt::format("{:<14} {:>12} {:>12} {:>12}  {}\n", what, x, y, z, note);
  };
  row("", "imported", "rewritten", "fused", "");
  row("kernels", std::to_string(b.kernels), std::to_string(r.kernels), std::to_string(a.kernels),
      fmt::format("({:.2f}x fewer launches)", static_cast<double>(b.kernels) / std::max<int64_t>(a.kernels, 1)));
  row("DRAM traffic", human(b.bytes, "B"), human(r.bytes, "B"), human(a.bytes, "B"),
      fmt::format("({:.2f}x less)", b.bytes / std::max(a.bytes, 1.0)));
  row("FLOPs", human(b.flops, "FLOP"), human(r.flops, "FLOP"), human(a.flops, "FLOP"), "");
  row("time (est.)", seconds(b.seconds), seconds(r.seconds), seconds(a.seconds),
      fmt::format("({:.2f}x faster)", b.seconds / std::max(a.seconds, 1e-12)));
  row("energy (est.)", human(b.joules, "J"), human(r.joules, "J"), human(a.joules, "J"), "");
  os << (context.calibration.empty() ? std::string("(times: the roofline, uncalibrated)\n")
                                     : "(times: the roofline calibrated by " + context.calibration + ")\n");
  return os.str();
}

nlohmann::json planJson(const Graph& g, const Plan& plan) {
  json groups = json::array();
  for (const Group& grp : plan.groups) {
    json nodes = json::array();
    for (NodeRef n : grp.nodes) nodes.push_back({{"name", g.node(n).name}, {"op", g.node(n).op.str()}});
    groups.push_back({{"name", grp.name}, {"kernel", grp.kernel}, {"rule", grp.rule ? grp.rule->name : ""},
                      {"nodes", nodes}, {"flops", grp.estimate.flops}, {"bytes", grp.estimate.bytes},
                      {"seconds", grp.estimate.seconds}, {"joules", grp.estimate.joules}});
  }
  json candidates = json::array();
  for (const Candidate& c : plan.candidates) {
    json nodes = json::array();
    for (NodeRef n : c.nodes) nodes.push_back(g.node(n).name);
    candidates.push_back({{"id", c.id}, {"rule", c.rule->name}, {"nodes", nodes},
                          {"status", std::string(candidateStatusName(c.status))}, {"why", c.why},
                          {"benefit_seconds", c.benefit}});
  }
  return {{"groups", groups}, {"candidates", candidates}, {"before", estimateJson(plan.before)},
          {"after", estimateJson(plan.after)}};
}

json reportJson(const Compiled& c, const ReportContext& context) {
  json inputs = json::array();
  for (ValueId v : c.graph.inputs())
    inputs.push_back({{"name", c.graph.value(v).name}, {"type", c.graph.value(v).type.str()}});
  json fusions = json::object();
  for (const auto& [rule, f] : fusionCounts(c.plan)) fusions[rule] = {{"chosen", f.first}, {"candidates", f.second}};
  json stages = json::object();
  for (const auto& [stage, sec] : c.stageSeconds) stages[stage] = sec;
  return {{"model", context.model},
          {"target", context.target},
          {"calibration", context.calibration},
          {"packs", context.packs},
          {"inputs", inputs},
          {"folded_at_import", c.foldedAtImport},
          {"rules_fired", c.rewrites.fired},
          {"constants_folded", c.rewrites.nodesFolded},
          {"nodes_removed", c.rewrites.nodesRemoved},
          {"convs_trimmed", c.rewrites.convsTrimmed},
          {"rewrite_cap_hit", c.rewrites.capHit},
          {"fusions", fusions},
          {"estimates",
           {{"imported", estimateJson(c.imported)},
            {"rewritten", estimateJson(c.plan.before)},
            {"fused", estimateJson(c.plan.after)}}},
          {"stage_seconds", stages}};
}

Expected<KernelSources> kernelSources(const Compiled& c, const OpCatalog& catalog, const Target& target) {
  if (Status st = requireStaticShapes(c.graph, "bind the symbolic input dims"); !st) return st.error();
  const codegen::KernelOptions options = codegen::KernelOptions::forTarget(target);
  // No kernel for reshape views, Concats written in place and Slices read in place.
  const codegen::BufferAliases aliases = codegen::aliasBuffers(c.graph, c.groups, catalog, options.subBufferAlignment);
  KernelSources out;
  out.views = aliases.viewGroups;
  out.inPlaceConcats = aliases.inPlaceConcats;
  out.sliceViews = aliases.sliceViews;
  for (size_t gi = 0; gi < c.groups.size(); ++gi) {
    const codegen::KernelGroup& grp = c.groups[gi];
    if (aliases.noKernel[gi]) continue;
    Expected<codegen::KernelSource> k = codegen::emitKernel(c.graph, grp.nodes, grp.family, catalog, grp.name,
                                                            codegen::kernelComment(c.graph, grp, grp.name), options);
    if (!k) {
      ++out.unbuilt[c.graph.node(grp.nodes.front()).op.str()];
      continue;
    }
    out.kernels.emplace_back(grp.name, std::move(k->source));
  }
  return out;
}

}  // namespace fusec::driver
