/// The compile pipeline; see Pipeline.h.
#include "fusec/driver/Pipeline.h"

#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <set>

#include "fusec/codegen/Families.h"
#include "fusec/codegen/Specialize.h"
#include "fusec/engine/TypeInference.h"

namespace fusec::driver {
namespace {

/// Sizes the graph inputs' symbolic dims from `inputs` and infers types.
Status bindInputShapes(Graph& g, const std::vector<Tensor>& inputs) {
  bool changed = false;
  for (size_t i = 0; i < inputs.size() && i < g.inputs().size(); ++i) {
    TensorType& t = g.value(g.inputs()[i]).type;
    if (t.isStatic()) continue;
    t = TensorType::of(inputs[i].dtype(), inputs[i].shape());
    changed = true;
  }
  return changed ? inferTypes(g) : Status::success();
}

/// Sizes the graph inputs' symbolic dims named in `dims` and infers types.
Status bindNamedDims(Graph& g, const std::map<std::string, int64_t>& dims) {
  if (dims.empty()) return Status::success();
  for (const auto& [name, size] : dims)
    if (size < 1 || size > (int64_t{1} << 31))
      return Error{"dim `" + name + "` = " + std::to_string(size) + " is out of range (1 to 2^31)"};
  std::set<std::string> symbols;
  for (ValueId v : g.inputs()) {
    TensorType& t = g.value(v).type;
    if (!t.dims) continue;
    for (Dim& d : *t.dims) {
      if (d.symbol.empty()) continue;
      symbols.insert(d.symbol);
      if (auto it = dims.find(d.symbol); it != dims.end()) d = Dim::of(it->second);
    }
  }
  for (const auto& entry : dims) {
    if (symbols.count(entry.first)) continue;
    std::string known;
    for (const std::string& s : symbols) known += (known.empty() ? "" : ", ") + s;
    return Error{"no input dim is named `" + entry.first + "`; " +
                 (known.empty() ? std::string("the inputs have no symbolic dims") : "the symbolic input dims are " + known)};
  }
  return inferTypes(g);
}

class Timer {
 public:
  explicit Timer(Compiled& c) : c_(c) {}
  void done(const std::string& stage) {
    const auto now = std::chrono::steady_clock::now();
    c_.stageSeconds.emplace_back(stage, std::chrono::duration<double>(now - start_).count());
    start_ = now;
  }

 private:
  Compiled& c_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

/// The plan and codegen stages.
Status planAndGenerate(Compiled& c, const RuleSet& rules, const Target& target, const PipelineOptions& options,
                       Timer& timer) {
  const Graph& g = c.graph;
  // ---- plan
  if (options.fuse) {
    c.plan = planFusion(g, rules, target, codegen::kernelFamilies(), options.splitBack);
    c.groups = codegen::planGroups(c.plan);
  } else {
    c.groups = codegen::singleNodeGroups(g);
  }
  timer.done("plan");
  if (options.afterStage) options.afterStage("plan", options.fuse ? buildFusedGraph(g, c.plan) : g.clone());
  // ---- codegen
  if (options.generate) {
    if (Status st = requireStaticShapes(g, options.staticShapesHint); !st) return st;
    Expected<codegen::Schedule> schedule =
        codegen::scheduleGraph(g, c.groups, rules.catalog, codegen::KernelOptions::forTarget(target));
    if (!schedule) return schedule.error();
    c.schedule = std::move(schedule.value());
    timer.done("codegen");
  }
  return Status::success();
}

/// A node a rewrite built must have a kernel path of its own (or the
/// compile fails later with a message that does not name the rule): where
/// one has none, the rewrite is refused here, with the rule named. Nodes of
/// symbolic shape are left to the planning that binds them.
Status rewrittenNodesHaveKernels(const Graph& g, const RewriteStats& stats, const RuleSet& rules, const Target& target) {
  if (stats.builtBy.empty()) return Status::success();
  for (NodeRef n : g.nodes()) {
    auto by = stats.builtBy.find(g.node(n).id);
    if (by == stats.builtBy.end()) continue;
    bool sized = true;
    for (ValueId v : g.node(n).outputs) sized &= v == kNoValue || g.value(v).type.isStatic();
    if (!sized) continue;
    Expected<const KernelFamily*> family = codegen::kernelFamilies().select(g, {n}, rules.catalog, target);
    if (!family) {
      const Rule* rule = rules.find(by->second);
      const std::vector<ValueId>& in = g.node(n).inputs;
      const std::string operand = in.empty() || in[0] == kNoValue ? std::string() : " on " + g.value(in[0]).type.str();
      return Error{"rule `" + by->second + "`" + (rule ? " (" + rule->loc.str() + ")" : std::string()) + " builds " +
                   g.describe(n) + operand + ", and " + family.error().message + "; a rewrite must leave every node a kernel"};
    }
  }
  return Status::success();
}

}  // namespace

Expected<std::unique_ptr<Compiled>> compile(Graph model, const RuleSet& rules, const Target& target,
                                            const PipelineOptions& options) {
  // A limit in the target that names nothing the packs know would limit nothing.
  if (Status st = checkGroupLimits(target, rules.catalog); !st) return st.error();
  auto out = std::make_unique<Compiled>();
  Compiled& c = *out;
  c.graph = std::move(model);
  Graph& g = c.graph;
  auto after = [&](std::string_view stage, const Graph& shown) {
    if (options.afterStage) options.afterStage(stage, shown);
  };
  Timer timer(c);
  // ---- import: bind, specialize, fold
  for (NodeRef n : g.nodes())
    if (std::string p = missingOperandProblem(g, n, rules.catalog); !p.empty()) return Error{p};
  if (Status st = bindNamedDims(g, options.dims); !st) return st.error();
  if (options.inputs) {
    if (Status st = bindInputShapes(g, *options.inputs); !st) return st.error();
    if (options.specialize)
      if (Expected<std::vector<std::string>> fixed = codegen::specializeInputs(g, *options.inputs, rules.catalog); !fixed)
        return fixed.error();
  }
  Expected<size_t> folded = foldConstants(g, rules.catalog);
  if (!folded) return folded.error();
  c.foldedAtImport = folded.value();
  c.imported = unfusedEstimate(g, rules.catalog, target, &codegen::kernelFamilies());
  timer.done("import");
  after("import", g);
  // ---- rewrite
  if (options.rewrite) {
    Expected<RewriteStats> rw = runRewritePipeline(g, rules, &target);
    if (!rw) return rw.error();
    c.rewrites = std::move(rw.value());
    if (Status st = rewrittenNodesHaveKernels(g, c.rewrites, rules, target); !st) return st.error();
    timer.done("rewrite");
  }
  after("rewrite", g);
  if (Status st = planAndGenerate(c, rules, target, options, timer); !st) return st.error();
  return out;
}

Status replan(Compiled& c, const RuleSet& rules, const Target& target, const PipelineOptions& options) {
  Timer timer(c);
  return planAndGenerate(c, rules, target, options, timer);
}

Expected<std::vector<codegen::FusionTiming>> splitBackLosses(Compiled& c, codegen::Device& device, const RuleSet& rules,
                                                             const Target& target, PipelineOptions options,
                                                             codegen::SplitBackOptions split) {
  const codegen::KernelOptions kernelOptions = codegen::KernelOptions::forDevice(target, device.info());
  split.launchSeconds = target.launchOverhead;
  std::vector<codegen::FusionTiming> timings;
  constexpr int kRounds = 4;
  for (int round = 0; round < kRounds; ++round) {
    Expected<std::vector<codegen::FusionTiming>> measured =
        codegen::measureFusions(device, c.graph, c.groups, rules.catalog, kernelOptions, split);
    if (!measured) return measured.error();
    size_t added = 0;
    for (const codegen::FusionTiming& t : measured.value()) {
      if (std::none_of(timings.begin(), timings.end(), [&](const codegen::FusionTiming& x) { return x.nodes == t.nodes; }))
        timings.push_back(t);
      if (!t.splitBack || options.splitBack.count(t.nodes)) continue;
      options.splitBack[t.nodes] =
          fmt::format("split back: measured {:.3f} ms fused, {:.3f} ms as {} kernel(s) of its members on {}",
                      t.fusedSeconds * 1e3, t.unfusedSeconds * 1e3, t.memberKernels, device.info().name);
      ++added;
    }
    if (!added) break;
    if (Status st = replan(c, rules, target, options); !st) return st.error();
  }
  return timings;
}

}  // namespace fusec::driver
