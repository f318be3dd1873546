/// `fusec compile MODEL [--rules P...] [--target T] -o DIR`: import, rewrite,
/// plan fusion; write the fused graph (`model.fused.onnx`), the plan
/// (`plan.json`) and a report (`report.txt`, also printed); with `--emit
/// opencl,spirv`, the generated kernels too; with `--emit bundle`, a
/// standalone OpenCL program that runs the model (DIR/bundle). `--dump-after
/// STAGE` prints the graph after `import`, `rewrite` or `plan` as ONNX text.
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "Commands.h"
#include "Random.h"
#include "Session.h"
#include "fusec/codegen/Bundle.h"
#include "fusec/codegen/Executor.h"
#include "fusec/codegen/Spirv.h"
#include "fusec/driver/Pipeline.h"
#include "fusec/engine/Files.h"
#include "fusec/engine/Interpreter.h"
#include "fusec/engine/OnnxIO.h"
#include "fusec/engine/Planner.h"
#include "fusec/engine/Rewriter.h"

namespace fusec::tools {
namespace {

struct CompileOptions {
  std::string model, target, outDir, dumpAfter;
  std::vector<std::string> packs;
  std::vector<std::string> emit = {"onnx", "plan", "report"};
  int64_t symbolicDim = 1;  // bundles: the size of symbolic input dims
  uint64_t seed = 0;        // bundles: the sample inputs
};

std::string human(double v, const char* unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T"};
  int i = 0;
  while (std::abs(v) >= 1000 && i < 4) {
    v /= 1000;
    ++i;
  }
  return fmt::format("{:.3g} {}{}", v, prefixes[i], unit);
}

/// `x: float[1,3,224,224], ...`: the graph inputs' types as compiled.
std::string inputTypes(const Graph& g) {
  std::string out;
  for (ValueId v : g.inputs()) out += (out.empty() ? "" : ", ") + g.value(v).name + ": " + g.value(v).type.str();
  return out;
}

std::string seconds(double s) {
  if (s >= 1) return fmt::format("{:.3g} s", s);
  if (s >= 1e-3) return fmt::format("{:.3g} ms", s * 1e3);
  return fmt::format("{:.3g} us", s * 1e6);
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

std::string report(const Session& s, const driver::Compiled& c, const std::string& model) {
  const RewriteStats& rw = c.rewrites;
  const Plan& plan = c.plan;
  std::ostringstream os;
  std::string packs;
  for (const std::string& p : s.packs) packs += (packs.empty() ? "" : ", ") + std::filesystem::path(p).filename().string();
  os << fmt::format("fusec compile: {} for {} with {}\n\n", model, s.target.name, packs);
  os << fmt::format("import: {} inputs ({}), {} nodes of shape arithmetic and constants folded\n\n", c.graph.inputs().size(),
                    inputTypes(c.graph), c.foldedAtImport);
  os << "rewrites";
  if (rw.fired.empty()) os << ": none";
  os << "\n";
  for (const auto& [rule, n] : rw.fired) os << fmt::format("  {:<32} {:>5}x\n", rule, n);
  if (rw.capHit) os << "  (stopped at the rewrite cap)\n";
  os << fmt::format("  constants folded: {}, nodes removed: {}\n\n", rw.nodesFolded, rw.nodesRemoved);
  std::map<std::string, std::pair<size_t, size_t>> fusions;  // rule -> (chosen, candidates)
  for (const Candidate& c : plan.candidates) {
    auto& f = fusions[c.rule->name];
    ++f.second;
    f.first += c.status == Candidate::Status::Chosen;
  }
  os << "fusions (chosen of candidates)\n";
  for (const auto& [rule, f] : fusions) os << fmt::format("  {:<32} {:>5} of {}\n", rule, f.first, f.second);
  os << refusals(c.graph, plan);
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
  return os.str();
}

nlohmann::json planJson(const Graph& g, const Plan& plan) {
  using nlohmann::json;
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
  auto est = [](const Estimate& e) {
    return json{{"kernels", e.kernels}, {"flops", e.flops}, {"bytes", e.bytes}, {"seconds", e.seconds}, {"joules", e.joules}};
  };
  return {{"groups", groups}, {"candidates", candidates}, {"before", est(plan.before)}, {"after", est(plan.after)}};
}

bool wants(const CompileOptions& o, const std::string& what) {
  return std::find(o.emit.begin(), o.emit.end(), what) != o.emit.end();
}

/// Writes DIR/kernels/<group>.cl (and .spv, validated) for every group a
/// generated kernel family covers; says which groups have no family yet.
/// Returns false after printing an error.
bool emitKernels(const CompileOptions& o, const Session& s, const driver::Compiled& c, std::string& summary) {
  const std::filesystem::path dir = std::filesystem::path(o.outDir) / "kernels";
  std::filesystem::create_directories(dir);
  size_t written = 0, validated = 0;
  std::map<std::string, size_t> missing;
  // The kernels `fusec run` builds for this target, tile for tile.
  const codegen::KernelOptions options = codegen::KernelOptions::forTarget(s.target);
  // No kernel for reshape views and Concats written in place.
  const codegen::BufferAliases aliases =
      codegen::aliasBuffers(c.graph, c.groups, s.rules->catalog, options.subBufferAlignment);
  for (size_t gi = 0; gi < c.groups.size(); ++gi) {
    const codegen::KernelGroup& grp = c.groups[gi];
    if (aliases.noKernel[gi]) continue;
    Expected<codegen::KernelSource> k = codegen::emitKernel(c.graph, grp.nodes, grp.family, s.rules->catalog, grp.name,
                                                            codegen::kernelComment(c.graph, grp, grp.name), options);
    if (!k) {
      ++missing[c.graph.node(grp.nodes.front()).op.str()];
      continue;
    }
    if (Status st = writeOutputFile((dir / (grp.name + ".cl")).string(), k->source); !st) {
      std::cerr << "error: " << st.error().message << "\n";
      return false;
    }
    ++written;
    if (!wants(o, "spirv")) continue;
    Expected<codegen::SpirvModule> spv = codegen::compileToSpirv(k->source, k->name);
    if (!spv) {
      std::cerr << "error: " << spv.error().message << "\n";
      return false;
    }
    const std::string_view words(reinterpret_cast<const char*>(spv->words.data()), spv->words.size() * 4);
    if (Status st = writeOutputFile((dir / (grp.name + ".spv")).string(), words); !st) {
      std::cerr << "error: " << st.error().message << "\n";
      return false;
    }
    ++validated;
  }
  summary = fmt::format("\nkernels: {} OpenCL C files, {} SPIR-V modules validated, in {} ({} reshape(s) are views, "
                        "{} concat(s) written in place by their inputs' producers: no kernel)\n",
                        written, validated, dir.string(), aliases.viewGroups, aliases.inPlaceConcats);
  for (const auto& [op, n] : missing) summary += fmt::format("  no kernel family builds {} node(s) of op {}\n", n, op);
  return true;
}

/// Writes DIR/bundle: the model's schedule with a host program, sample
/// inputs and the interpreter's outputs for them (see codegen/Bundle.h).
/// `original` is the imported model, `inputs` the sample its shapes were
/// bound to. Returns false after printing an error.
bool emitBundle(const CompileOptions& o, const Session& s, const driver::Compiled& c, const Graph& original,
                const std::vector<Tensor>& inputs, std::string& summary) {
  auto fail = [&](const std::string& message) {
    std::cerr << "error: " << o.model << ": " << message << "\n";
    return false;
  };
  const std::optional<codegen::Schedule>& schedule = c.schedule;
  Expected<std::vector<Tensor>> expected = runGraph(original, inputs, &s.rules->catalog);
  if (!expected) return fail("the reference interpreter cannot run it: " + expected.error().message);
  std::string packs;
  for (const std::string& p : s.packs) packs += (packs.empty() ? "" : ", ") + std::filesystem::path(p).filename().string();
  const std::string title = fmt::format("{} for {} with {}", std::filesystem::path(o.model).filename().string(),
                                        s.target.name, packs);
  const std::filesystem::path dir = std::filesystem::path(o.outDir) / "bundle";
  if (Status st = codegen::writeBundle(dir, c.graph, *schedule, {inputs, expected.value()}, title); !st)
    return fail(st.error().message);
  const codegen::MemoryPlan& m = schedule->memory;
  summary += fmt::format("\nbundle: {} kernels, {} device buffers (constants {:.1f} MB, intermediates {:.1f} MB), "
                         "sample inputs (seed {}, symbolic dims {}) and expected outputs, in {}\n"
                         "  build and run: see {}\n",
                         schedule->kernels.size(), schedule->buffers.size(), m.constants / 1e6, m.peak / 1e6, o.seed,
                         o.symbolicDim, dir.string(), (dir / "README.md").string());
  return true;
}

int compile(const CompileOptions& o) {
  const std::vector<std::string_view> stages(driver::kStages.begin(), driver::kStages.end() - 1);  // codegen: no graph
  if (!o.dumpAfter.empty() && std::find(stages.begin(), stages.end(), o.dumpAfter) == stages.end()) {
    std::cerr << "error: unknown stage `" << o.dumpAfter << "`; stages are import, rewrite, plan\n";
    return 1;
  }
  for (const std::string& e : o.emit)
    if (e != "onnx" && e != "plan" && e != "report" && e != "opencl" && e != "spirv" && e != "bundle") {
      std::cerr << "error: unknown output `" << e << "`; outputs are onnx, plan, report, opencl, spirv, bundle\n";
      return 1;
    }
  if (wants(o, "bundle") && o.outDir.empty()) {
    std::cerr << "error: --emit bundle needs an output folder (-o DIR)\n";
    return 1;
  }
  std::unique_ptr<Session> s = openSession(o.model, o.packs, o.target);
  if (!s) return 1;
  driver::PipelineOptions options;
  options.afterStage = [&](std::string_view stage, const Graph& g) {
    if (stage == o.dumpAfter) std::cout << exportOnnxText(g);
  };
  // A bundle runs fixed shapes: symbolic input dims are bound (--dim) to
  // the sample inputs it ships, and every kernel is generated.
  Graph original;
  std::vector<Tensor> sample;
  if (wants(o, "bundle")) {
    original = s->graph.clone();
    std::mt19937_64 rng(o.seed);
    for (ValueId v : original.inputs()) {
      Expected<Tensor> t = randomInput(original, v, rng, o.symbolicDim);
      if (!t) {
        std::cerr << "error: " << o.model << ": " << t.error().message << "\n";
        return 1;
      }
      sample.push_back(std::move(t.value()));
    }
    options.inputs = &sample;
    options.generate = true;
    options.staticShapesHint = "--dim sets the size of symbolic input dims";
  }
  Expected<std::unique_ptr<driver::Compiled>> compiled =
      driver::compile(std::move(s->graph), *s->rules, s->target, options);
  if (!compiled) {
    std::cerr << "error: " << o.model << ": " << compiled.error().message << "\n";
    return 1;
  }
  const driver::Compiled& c = *compiled.value();
  const std::string text = report(*s, c, o.model);
  if (o.outDir.empty()) {
    if (o.dumpAfter.empty()) std::cout << text;
    return 0;
  }
  std::error_code ec;
  std::filesystem::create_directories(o.outDir, ec);
  if (ec) {
    std::cerr << "error: " << o.outDir << ": cannot create folder: " << ec.message() << "\n";
    return 1;
  }
  const std::filesystem::path dir(o.outDir);
  if (wants(o, "onnx"))
    if (Status st = exportOnnxFile(buildFusedGraph(c.graph, c.plan), (dir / "model.fused.onnx").string()); !st) {
      std::cerr << "error: " << st.error().message << "\n";
      return 1;
    }
  auto write = [](const std::filesystem::path& path, const std::string& text) {
    Status st = writeOutputFile(path.string(), text);
    if (!st) std::cerr << "error: " << st.error().message << "\n";
    return st.ok();
  };
  if (wants(o, "plan") && !write(dir / "plan.json", planJson(c.graph, c.plan).dump(2) + "\n")) return 1;
  std::string kernels;
  if ((wants(o, "opencl") || wants(o, "spirv")) && !emitKernels(o, *s, c, kernels)) return 1;
  if (wants(o, "bundle") && !emitBundle(o, *s, c, original, sample, kernels)) return 1;
  if (wants(o, "report") && !write(dir / "report.txt", text + kernels)) return 1;
  if (o.dumpAfter.empty()) std::cout << text << kernels;
  return 0;
}

}  // namespace

CommandRunner addCompileCommand(CLI::App& sub) {
  auto o = std::make_shared<CompileOptions>();
  sub.add_option("model", o->model, "model file (.onnx or ONNX text)")->required();
  sub.add_option("--rules", o->packs, "rule packs (default: the target's default packs)");
  sub.add_option("--target", o->target, "target profile (.toml; default: the shipped pocl-cpu profile)");
  sub.add_option("-o,--output", o->outDir, "folder for model.fused.onnx, plan.json and report.txt");
  sub.add_option("--emit", o->emit,
                 "what to write: onnx, plan, report, opencl (one .cl per group), spirv (validated), bundle (a "
                 "standalone OpenCL program in DIR/bundle)")
      ->delimiter(',');
  sub.add_option("--dim", o->symbolicDim, "bundle: the size of symbolic input dims")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  sub.add_option("--seed", o->seed, "bundle: the seed of the sample inputs");
  sub.add_option("--dump-after", o->dumpAfter, "print the graph after a stage: import, rewrite, plan");
  return [o] { return compile(*o); };
}

}  // namespace fusec::tools
