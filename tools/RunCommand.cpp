/// `fusec run MODEL`: load a model, make seeded random inputs (or read them
/// from TensorProto files), compile it with the target's packs and run the
/// generated kernels on OpenCL (or the reference interpreter), printing the
/// time per kernel, device memory, output shapes and checksums.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <fmt/format.h>
#include <iostream>
#include <random>
#include <set>
#include <unistd.h>

#include "Commands.h"
#include "Progress.h"
#include "Random.h"
#include "fusec/codegen/Executor.h"
#include "fusec/codegen/SplitBack.h"
#include "fusec/codegen/Tuner.h"
#include "fusec/driver/Pipeline.h"
#include "fusec/driver/Report.h"
#include "fusec/engine/Files.h"
#include "fusec/engine/CostModel.h"
#include "fusec/engine/Interpreter.h"
#include "fusec/engine/OnnxIO.h"
#include "fusec/engine/OutputCheck.h"
#include "fusec/engine/Planner.h"
#include "fusec/engine/Rewriter.h"
#include "Session.h"
#include <map>
#include <nlohmann/json.hpp>

namespace fusec::tools {
namespace {

struct RunOptions {
  std::string model;
  bool interpreter = false, noFuse = false, compare = false, check = false, openclFlag = false, tune = false;
  bool keepLosses = false;  // --no-split-back
  std::string device, target;
  PackChoice rules;
  std::vector<std::string> inputFiles;
  uint64_t seed = 0;
  int repeat = 1;
  int64_t symbolicDim = 1;
  Tolerance tolerance;
  std::string outputDir;
  std::string jsonFile;
  std::string htmlFile;
  /// Where the output named `-` is kept until the human text is done.
  std::string* stdoutData = nullptr;
};

/// Writes `text` to `path`, or keeps it for stdout where `path` is `-`;
/// prints the error and returns false when it cannot.
bool writeData(const RunOptions& o, const std::string& path, std::string text) {
  if (path == "-" && o.stdoutData) {
    *o.stdoutData = std::move(text);
    return true;
  }
  if (Status st = writeOutputFile(path, text); !st) {
    std::cerr << "error: " << st.error().message << "\n";
    return false;
  }
  return true;
}

/// Checks every output against the reference; prints one line per output
/// and false at the first mismatch.
bool sameOutputs(const Graph& g, const std::vector<Tensor>& got, const std::vector<Tensor>& want, const Tolerance& tol) {
  for (size_t i = 0; i < want.size(); ++i) {
    const std::string& name = g.value(g.outputs()[i]).name;
    OutputCheck check = checkOutput(got[i], want[i], tol);
    if (!check.ok) {
      std::cerr << fmt::format("error: output `{}` differs from the interpreter: {}\n", name, check.summary);
      return false;
    }
    fmt::print("check  {:<24} matches the interpreter ({})\n", name, check.summary);
  }
  return true;
}

/// Which semantics `--check` compared with: standard ops run as ONNX
/// defines them (packs cannot redefine one), the model's other ops as the
/// packs that declare them say, named with their files.
std::string oracleSemantics(const Graph& model, const OpCatalog& catalog) {
  std::set<std::string> declared;
  for (NodeRef n : model.nodes()) {
    const std::string op = model.node(n).op.str();
    if (isStandardOnnxOp(op)) continue;
    if (const OpDef* d = catalog.find(op)) declared.insert("`" + op + "` from " + d->loc.file);
  }
  std::string text = "standard ops as ONNX defines them (the shipped catalog)";
  for (const std::string& d : declared) text += "; " + d;
  return text;
}

void printOutputs(const Graph& g, const std::vector<Tensor>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i)
    fmt::print("output {:<24} {} {} checksum {:.6g}\n", g.value(g.outputs()[i]).name, dtypeName(outputs[i].dtype()),
               shapeToString(outputs[i].shape()), checksum(outputs[i]));
}

/// With --output DIR: every output as DIR/output_<i>.pb (a TensorProto named
/// after the output). Prints an error and returns false when it cannot.
bool writeOutputs(const RunOptions& o, const Graph& g, const std::vector<Tensor>& outputs) {
  if (o.outputDir.empty()) return true;
  std::error_code ec;
  std::filesystem::create_directories(o.outputDir, ec);
  for (size_t i = 0; i < outputs.size() && !ec; ++i) {
    const std::filesystem::path file = std::filesystem::path(o.outputDir) / fmt::format("output_{}.pb", i);
    if (Status st = writeOutputFile(file.string(), serializeTensorProto(outputs[i], g.value(g.outputs()[i]).name)); !st) {
      std::cerr << "error: " << st.error().message << "\n";
      return false;
    }
  }
  if (ec) {
    std::cerr << "error: " << o.outputDir << ": " << ec.message() << "\n";
    return false;
  }
  fmt::print("wrote {} output(s) to {}\n", outputs.size(), o.outputDir);
  return true;
}

std::string megabytes(size_t bytes) { return fmt::format("{:.1f} MB", static_cast<double>(bytes) / 1e6); }

/// One way of running the model on the device, timed.
struct Measured {
  std::string label;
  std::optional<codegen::DeviceProgram> program;
  size_t kernels = 0;
  double buildSeconds = 0;                                // codegen, OpenCL build (or cache), upload
  size_t kernelsFromCache = 0;                            // programs whose binary came from the cache
  size_t programs = 0;                                    // distinct programs behind the kernels
  double seconds = 1e30;                                  // best device total of the repeats
  std::vector<double> wallSeconds;                        // host to host, each repeat
  std::vector<std::pair<std::string, double>> perKernel;  // of the best repeat
  std::map<std::string, Estimate> work;                   // per kernel: FLOPs, DRAM bytes and time (cost model)
  double launchOverhead = 0;                              // the target's, per kernel: in the estimates, not in events
  std::map<std::string, std::string> family;              // per kernel: the family that built it
  std::map<std::string, std::string> ops;                 // per kernel: its ops (`Conv[group=32] Clip`)
  codegen::MemoryPlan memory;
  std::vector<Tensor> outputs;
  /// With --tune: the tuned kernels' summed best times under the default
  /// tiling and under the kept one, measured in the same tuning pass.
  std::optional<std::pair<double, double>> tuning;
  size_t tunedKernels = 0, retiled = 0;

  /// A kernel's estimated time on the device, what its profiling event
  /// measures: the estimate without the host's launch overhead.
  double deviceEstimate(const Estimate& w) const { return std::max(0.0, w.seconds - launchOverhead * double(w.kernels)); }

  double medianWall() const {
    std::vector<double> w = wallSeconds;
    if (w.empty()) return 0;
    std::nth_element(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(w.size() / 2), w.end());
    return w[w.size() / 2];
  }
};

using codegen::FusionTiming;
using Clock = std::chrono::steady_clock;
double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

/// Builds the program for `groups` (kernels built or taken from the cache),
/// timed, after tuning when asked.
std::optional<Measured> prepare(const RunOptions& o, codegen::Device& device, const Graph& g,
                                const std::vector<codegen::KernelGroup>& groups, const OpCatalog& catalog,
                                const Target& target, const std::string& label, bool fused) {
  codegen::KernelOptions options = codegen::KernelOptions::forDevice(target, device.info());
  if (!fused) options.subBufferAlignment = 0;  // one kernel per op: Concats copy too
  std::optional<std::pair<double, double>> tuning;
  size_t tunedCount = 0, retiled = 0;
  Progress progress;
  if (o.tune) {
    codegen::TuningOptions tuningOptions;
    tuningOptions.progress = [&](size_t done, size_t total) { progress.show(label + ": tuning", done, total); };
    Expected<std::vector<codegen::TunedKernel>> tuned =
        codegen::tuneKernels(device, g, groups, catalog, options, tuningOptions);
    progress.clear();
    if (!tuned) {
      std::cerr << "error: " << o.model << ": tuning: " << tuned.error().message << "\n";
      return std::nullopt;
    }
    double before = 0, after = 0;
    size_t changed = 0, cached = 0;
    for (const codegen::TunedKernel& t : tuned.value()) {
      before += t.defaultSeconds;
      after += t.tunedSeconds;
      changed += t.tunedSeconds < t.defaultSeconds;
      cached += t.cached;
    }
    fmt::print("{}: tuned {} gemm_epilogue kernels ({} from the cache): {} retiled, {:.3f} -> {:.3f} ms in those "
               "kernels when tuned ({:.2f}x)\n",
               label, tuned->size(), cached, changed, before * 1e3, after * 1e3, after > 0 ? before / after : 1.0);
    tuning = std::pair{before, after};
    tunedCount = tuned->size();
    retiled = changed;
  }
  Measured m;
  m.label = label;
  m.tuning = tuning;
  m.tunedKernels = tunedCount;
  m.retiled = retiled;
  const size_t hitsBefore = device.cacheHits();
  const Clock::time_point start = Clock::now();
  Expected<codegen::DeviceProgram> program = codegen::DeviceProgram::build(
      device, g, groups, catalog, options,
      [&](size_t done, size_t total) { progress.show(label + ": building kernels", done, total); });
  progress.clear();
  m.buildSeconds = since(start);
  if (!program) {
    std::cerr << "error: " << o.model << ": " << program.error().message << "\n";
    return std::nullopt;
  }
  m.kernelsFromCache = device.cacheHits() - hitsBefore;
  m.kernels = program->kernels().size();
  m.programs = program->programs();
  m.launchOverhead = target.launchOverhead;
  for (const codegen::KernelGroup& grp : groups) {
    if (grp.name.empty()) continue;
    const std::string family =
        grp.family.empty() ? codegen::kernelFamilies().selectName(g, grp.nodes, catalog, target) : grp.family;
    m.work[grp.name] = groupEstimate(g, grp.nodes, catalog, target, family);
    m.family[grp.name] = family;
    std::string& ops = m.ops[grp.name];
    for (NodeRef n : grp.nodes) {
      const NodeData& d = g.node(n);
      const int64_t convGroups = d.op == "Conv" ? d.attrInt("group", 1) : 1;
      ops += (ops.empty() ? "" : " ") + d.op.str() + (convGroups > 1 ? fmt::format("[group={}]", convGroups) : "");
    }
  }
  m.memory = program->memory();
  m.program = std::move(program.value());
  return m;
}

/// One timed run; `timed` is false for the warm-up. Returns false after
/// printing an error.
bool runOnce(const RunOptions& o, Measured& m, const std::vector<Tensor>& inputs, bool timed) {
  Expected<codegen::DeviceRun> run = m.program->run(inputs);
  if (!run) {
    std::cerr << "error: " << o.model << ": " << run.error().message << "\n";
    return false;
  }
  if (timed) {
    m.wallSeconds.push_back(run->hostSeconds);
    if (run->totalSeconds() < m.seconds) {
      m.seconds = run->totalSeconds();
      m.perKernel = run->kernelTimes;
    }
  }
  m.outputs = std::move(run->outputs);
  return true;
}

/// A kernel measured more than this many times its estimate is a finding:
/// the cost model misjudged it, or its code is slower than it should be.
constexpr double kFindingRatio = 4;

void printMeasured(const Measured& m, size_t top) {
  std::vector<std::pair<std::string, double>> sorted = m.perKernel;
  std::sort(sorted.begin(), sorted.end(), [](auto& x, auto& y) { return x.second > y.second; });
  fmt::print("{}: {} kernels launched, device time {:.3f} ms (profiling events), {:.3f} ms per inference host to "
             "host (median of {}); built in {:.0f} ms ({} distinct programs, {} of them from the cache)\n",
             m.label, m.kernels, m.seconds * 1e3, m.medianWall() * 1e3, m.wallSeconds.size(), m.buildSeconds * 1e3,
             m.programs, m.kernelsFromCache);
  fmt::print("  {:<44} {:>9} {:>6} {:>9} {:>8}\n", "kernel", "ms", "share", "GFLOP/s", "GB/s");
  for (size_t i = 0; i < sorted.size() && i < top; ++i) {
    const auto& [name, sec] = sorted[i];
    auto w = m.work.find(name);
    const double gflops = w == m.work.end() ? 0 : w->second.flops / sec / 1e9;
    const double gbs = w == m.work.end() ? 0 : w->second.bytes / sec / 1e9;
    fmt::print("  {:<44} {:>9.3f} {:>5.1f}% {:>9.1f} {:>8.1f}\n", name, sec * 1e3, 100 * sec / m.seconds, gflops, gbs);
  }
  if (sorted.size() > top) fmt::print("  ({} more)\n", sorted.size() - top);
  // Like with like: the estimates without launch overhead against the
  // profiling events, with it against host to host.
  double estimated = 0, withLaunches = 0;
  for (const auto& [name, w] : m.work) {
    estimated += m.deviceEstimate(w);
    withLaunches += w.seconds;
  }
  fmt::print("  estimated {:.3f} ms in all on the device ({:.2f}x the measured device time), {:.3f} ms with {} launches "
             "({:.2f}x the measured host to host)\n",
             estimated * 1e3, m.seconds > 0 ? estimated / m.seconds : 0.0, withLaunches * 1e3, m.kernels,
             m.medianWall() > 0 ? withLaunches / m.medianWall() : 0.0);
  // Findings: kernels far slower than the cost model said, worst first.
  size_t off = 0;
  for (const auto& [name, sec] : sorted) {
    auto w = m.work.find(name);
    const double want = w == m.work.end() ? 0 : m.deviceEstimate(w->second);
    if (want <= 0 || sec <= kFindingRatio * want) continue;
    if (off++ < top)
      fmt::print("  finding: {} took {:.3f} ms, {:.1f}x its estimate of {:.3f} ms ({})\n", name, sec * 1e3, sec / want,
                 want * 1e3,
                 m.family.count(name) && !m.family.at(name).empty() ? m.family.at(name) : "family unknown");
  }
  if (off > top) fmt::print("  ({} more kernels over {}x their estimates)\n", off - top, kFindingRatio);
  fmt::print("  device memory: constants {}, intermediates {} in {} buffers ({} without reuse)\n",
             megabytes(m.memory.constants), megabytes(m.memory.peak), m.memory.buffers, megabytes(m.memory.withoutReuse));
}

/// The model on OpenCL: the rewrite stage, fusion planned for the target
/// (and/or one kernel per op), generated kernels, timed by profiling events.
/// With --json FILE: what run measured, for scripts (bench/run).
bool writeJson(const RunOptions& o, const Graph& g, const RewriteStats& rw, const std::map<std::string, size_t>& fusions,
               const std::map<std::string, double>& stages, const std::vector<Measured>& runs,
               const std::vector<FusionTiming>& splitBack) {
  if (o.jsonFile.empty()) return true;
  using nlohmann::json;
  json variants = json::array();
  for (const Measured& m : runs) {
    json kernels = json::array();
    for (const auto& [name, sec] : m.perKernel) {
      auto w = m.work.find(name);
      kernels.push_back({{"name", name},
                         {"seconds", sec},
                         {"estimated_seconds", w == m.work.end() ? 0.0 : m.deviceEstimate(w->second)},
                         {"family", m.family.count(name) ? m.family.at(name) : ""},
                         {"flops", w == m.work.end() ? 0.0 : w->second.flops},
                         {"bytes", w == m.work.end() ? 0.0 : w->second.bytes},
                         {"ops", m.ops.count(name) ? m.ops.at(name) : ""}});
    }
    variants.push_back({{"label", m.label},
                        {"kernels", m.kernels},
                        {"build_seconds", m.buildSeconds},
                        {"programs", m.programs},
                        {"programs_from_cache", m.kernelsFromCache},
                        {"device_seconds", m.seconds},
                        {"wall_seconds_median", m.medianWall()},
                        {"wall_seconds", m.wallSeconds},
                        {"memory", {{"constants", m.memory.constants}, {"peak", m.memory.peak},
                                    {"without_reuse", m.memory.withoutReuse}, {"buffers", m.memory.buffers}}},
                        {"per_kernel", kernels}});
    if (m.tuning)
      variants.back()["tuning"] = {{"kernels", m.tunedKernels}, {"retiled", m.retiled},
                                   {"default_seconds", m.tuning->first}, {"tuned_seconds", m.tuning->second}};
  }
  json checked = json::array();
  for (const FusionTiming& t : splitBack)
    checked.push_back({{"group", t.group}, {"fused_seconds", t.fusedSeconds}, {"unfused_seconds", t.unfusedSeconds},
                       {"member_kernels", t.memberKernels}, {"cached", t.cached}, {"split_back", t.splitBack}});
  json out = {{"model", o.model},
              {"nodes_after_rewrite", g.numNodes()},
              {"fusions_measured", checked},
              {"rules_fired", rw.fired},
              {"fusions_chosen", fusions},
              {"stage_seconds", stages},
              {"runs", variants}};
  return writeData(o, o.jsonFile, out.dump(1) + "\n");
}

/// Never a loss (driver::splitBackLosses), with progress; prints what it
/// did, or the error and false.
bool splitBackLosses(const RunOptions& o, codegen::Device& device, driver::Compiled& c, const RuleSet& rules,
                     const Target& target, const driver::PipelineOptions& options, std::vector<FusionTiming>& timings) {
  Progress progress;
  codegen::SplitBackOptions split;
  split.progress = [&](size_t done, size_t total) { progress.show("fused: measuring fusions", done, total); };
  Expected<std::vector<FusionTiming>> measured = driver::splitBackLosses(c, device, rules, target, options, split);
  progress.clear();
  if (!measured) {
    std::cerr << "error: " << o.model << ": measuring fusions: " << measured.error().message << "\n";
    return false;
  }
  timings = std::move(measured.value());
  size_t cached = 0, lost = 0;
  for (const FusionTiming& t : timings) {
    cached += t.cached;
    lost += t.splitBack;
  }
  fmt::print("fused: {} fusion(s) measured against their members unfused ({} from the cache), {} split back\n",
             timings.size(), cached, lost);
  for (const FusionTiming& t : timings)
    if (t.splitBack)
      fmt::print("  split back {:<40} {:.3f} ms fused > {:.3f} ms unfused ({} kernel(s))\n", t.group,
                 t.fusedSeconds * 1e3, t.unfusedSeconds * 1e3, t.memberKernels);
  return true;
}

int runOpenCL(const RunOptions& o, const Graph& original, const std::vector<Tensor>& inputs, double importSeconds) {
  std::map<std::string, double> stages = {{"import", importSeconds}};
  std::optional<Target> target = loadTargetOrDefault(o.target);
  if (!target) return 1;
  std::vector<std::string> packs;
  std::unique_ptr<RuleSet> rules = loadRules(o.rules, *target, &packs);
  if (!rules) return 1;
  // A profile given with --target describes one device: running its plan on
  // another would measure a plan made for the wrong machine.
  const bool matchTarget = o.device.empty() && !o.target.empty() && !target->deviceMatch.empty();
  Expected<std::unique_ptr<codegen::Device>> device = codegen::Device::open(matchTarget ? target->deviceMatch : o.device);
  if (!device) {
    std::cerr << "error: " << device.error().message;
    if (matchTarget)
      std::cerr << " (the target profile " << o.target << " has device_match = \"" << target->deviceMatch
                << "\"; pass --device to choose a device)";
    std::cerr << "\n";
    return 1;
  }
  // Import (symbolic dims bound to the inputs', shapes folded), rewrite,
  // plan and generate: the pipeline; the fused plan when fusing at all.
  const bool fused = !o.noFuse || o.compare;
  driver::PipelineOptions options;
  options.inputs = &inputs;
  options.fuse = fused;
  options.generate = true;  // codegen timed apart (DeviceProgram::build below generates again, then builds)
  options.staticShapesHint = "--interpreter runs it anyway";
  Expected<std::unique_ptr<driver::Compiled>> compiled = driver::compile(original.clone(), *rules, *target, options);
  if (!compiled) {
    std::cerr << "error: " << o.model << ": " << compiled.error().message << "\n";
    return 1;
  }
  const driver::Compiled& c = *compiled.value();
  const Graph& g = c.graph;
  for (const auto& [stage, sec] : c.stageSeconds) stages[stage] += sec;
  fmt::print("device: {} (target profile {}{}, {} pack{})\n", (*device)->info().name, target->name,
             target->calibrationPath.empty() ? "" : ", calibrated", packs.size(), packs.size() == 1 ? "" : "s");
  std::vector<FusionTiming> splitBack;
  if (fused && !o.keepLosses && !splitBackLosses(o, **device, *compiled.value(), *rules, *target, options, splitBack))
    return 1;
  std::vector<Measured> runs;
  std::map<std::string, size_t> fusions;  // fusion rule -> groups chosen
  if (fused) {
    for (const Group& grp : c.plan.groups)
      if (grp.rule) ++fusions[grp.rule->name];
    std::optional<Measured> m = prepare(o, **device, g, c.groups, rules->catalog, *target, "fused", true);
    if (!m) return 1;
    runs.push_back(std::move(*m));
  }
  if (o.noFuse || o.compare) {
    std::optional<Measured> m =
        prepare(o, **device, g, codegen::singleNodeGroups(g), rules->catalog, *target, "one kernel per op", false);
    if (!m) return 1;
    runs.push_back(std::move(*m));
  }
  if (!runs.empty()) stages["build"] = runs.front().buildSeconds;
  // Run 0 warms up; then the ways take turns, so load from other processes
  // on a shared machine falls on both alike.
  for (int r = 0; r <= std::max(1, o.repeat); ++r)
    for (Measured& m : runs)
      if (!runOnce(o, m, inputs, r > 0)) return 1;
  for (const Measured& m : runs) printMeasured(m, 10);
  fmt::print("(best of {} runs each, after one warm-up; GFLOP/s and GB/s from the cost model's FLOPs and DRAM bytes)\n",
             std::max(1, o.repeat));
  if (runs.size() == 2) {
    const Measured &f = runs[0], &u = runs[1];
    fmt::print("fusion: {} -> {} kernels ({:.2f}x fewer), {:.3f} -> {:.3f} ms ({:.2f}x faster), intermediates {} -> {}\n",
               u.kernels, f.kernels, static_cast<double>(u.kernels) / static_cast<double>(f.kernels), u.seconds * 1e3,
               f.seconds * 1e3, u.seconds / f.seconds, megabytes(u.memory.peak), megabytes(f.memory.peak));
  }
  printOutputs(g, runs.front().outputs);
  if (!writeOutputs(o, g, runs.front().outputs)) return 1;
  if (!writeJson(o, g, c.rewrites, fusions, stages, runs, splitBack)) return 1;
  if (!o.htmlFile.empty() && fused) {
    // The fused run's best repeat, kernel by kernel, beside the estimates.
    driver::HtmlOptions html;
    for (const auto& [name, sec] : runs.front().perKernel) html.measuredSeconds[name] += sec;
    if (!writeData(o, o.htmlFile, driver::htmlReport(c, {o.model, target->name, packs, target->calibrationPath}, *rules, *target, html))) return 1;
  }
  if (o.check) {
    Progress progress;
    size_t evaluated = 0;
    const size_t total = original.numNodes();
    Expected<std::vector<Tensor>> reference =
        runGraph(original, inputs, &rules->catalog, [&](NodeRef, const std::vector<const Tensor*>&, std::vector<Tensor>&) {
          progress.show("check: reference interpreter, nodes", ++evaluated, total);
        });
    progress.clear();
    if (!reference) {
      std::cerr << "error: " << reference.error().message << "\n";
      return 1;
    }
    fmt::print("check  against the reference interpreter: {}\n", oracleSemantics(original, rules->catalog));
    for (const Measured& m : runs) {
      if (runs.size() > 1) fmt::print("{}:\n", m.label);
      if (!sameOutputs(g, m.outputs, reference.value(), o.tolerance)) return 1;
    }
  }
  return 0;
}

int runModel(const RunOptions& o) {
  const Clock::time_point start = Clock::now();
  Expected<Graph> loaded = importOnnxFile(o.model);
  const double importSeconds = since(start);
  if (!loaded) {
    std::cerr << "error: " << loaded.error().message << "\n";
    return 1;
  }
  const Graph& g = loaded.value();
  std::vector<Tensor> inputs;
  std::mt19937_64 rng(o.seed);
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    if (i < o.inputFiles.size()) {
      Expected<Tensor> t = loadTensorProtoFile(o.inputFiles[i]);
      if (!t) {
        std::cerr << "error: " << t.error().message << "\n";
        return 1;
      }
      inputs.push_back(std::move(t.value()));
      continue;
    }
    Expected<Tensor> t = randomInput(g, g.inputs()[i], rng, o.symbolicDim);
    if (!t) {
      std::cerr << "error: " << o.model << ": " << t.error().message << "\n";
      return 1;
    }
    inputs.push_back(std::move(t.value()));
  }
  fmt::print("model: {} ({} nodes, {} inputs, {} outputs, opset {})\n", o.model, g.numNodes(),
             g.inputs().size(), g.outputs().size(), g.info.defaultOpset());
  for (size_t i = 0; i < inputs.size(); ++i)
    fmt::print("input  {:<24} {} {}{}\n", g.value(g.inputs()[i]).name, dtypeName(inputs[i].dtype()),
               shapeToString(inputs[i].shape()), i < o.inputFiles.size() ? "" : fmt::format(" (random, seed {})", o.seed));
  if (!o.interpreter) return runOpenCL(o, g, inputs, importSeconds);
  // The packs' op catalog: elementwise ops run from their semantics.
  std::optional<Target> target = loadTargetOrDefault(o.target);
  if (!target) return 1;
  std::unique_ptr<RuleSet> rules = loadRules(o.rules, *target);
  if (!rules) return 1;
  std::vector<Tensor> outputs;
  double best = 0;
  for (int r = 0; r < std::max(1, o.repeat); ++r) {
    auto start = std::chrono::steady_clock::now();
    Expected<std::vector<Tensor>> result = runGraph(g, inputs, &rules->catalog);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!result) {
      std::cerr << "error: " << o.model << ": " << result.error().message << "\n";
      return 1;
    }
    best = r == 0 ? ms : std::min(best, ms);
    outputs = std::move(result.value());
  }
  printOutputs(g, outputs);
  if (!writeOutputs(o, g, outputs)) return 1;
  fmt::print("time: {:.3f} ms on the reference interpreter (best of {})\n", best, std::max(1, o.repeat));
  return 0;
}

/// While alive, what `run` prints for people goes to stderr, so that the
/// one output named `-` (--json or --html) has stdout to itself; it is
/// written after this is gone.
class HumanTextOnStderr {
 public:
  explicit HumanTextOnStderr(bool active) {
    if (!active) return;
    std::cout.flush();
    std::fflush(stdout);
    saved_ = ::dup(STDOUT_FILENO);
    if (saved_ >= 0) ::dup2(STDERR_FILENO, STDOUT_FILENO);
  }
  ~HumanTextOnStderr() {
    if (saved_ < 0) return;
    std::cout.flush();
    std::fflush(stdout);
    ::dup2(saved_, STDOUT_FILENO);
    ::close(saved_);
  }
  HumanTextOnStderr(const HumanTextOnStderr&) = delete;
  HumanTextOnStderr& operator=(const HumanTextOnStderr&) = delete;

 private:
  int saved_ = -1;
};

}  // namespace

CommandRunner addRunCommand(CLI::App& sub) {
  auto o = std::make_shared<RunOptions>();
  sub.add_option("model", o->model, "model file (.onnx or ONNX text)")->required();
  sub.add_option("--input", o->inputFiles, "TensorProto files for the inputs, in order; the rest are random");
  sub.add_option("--seed", o->seed, "seed for random inputs");
  sub.add_option("--repeat", o->repeat, "run this many times and report the best time");
  sub.add_option("--dim", o->symbolicDim, "size used for symbolic dims of random inputs")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  sub.add_flag("--interpreter", o->interpreter, "run on the reference interpreter instead of OpenCL");
  sub.add_flag("--tune", o->tune,
               "time a few tilings of every gemm_epilogue kernel first and keep the fastest (cached per machine)");
  sub.add_flag("--no-fuse", o->noFuse, "one kernel per op (the same code generator), to measure what fusion gives");
  sub.add_flag("--no-split-back", o->keepLosses,
               "keep every fusion the plan chose, without timing each fused kernel against its members unfused");
  sub.add_flag("--compare", o->compare, "run fused and one kernel per op side by side and print the ratios");
  sub.add_flag("--check", o->check, "compare every output with the reference interpreter; fail on a mismatch");
  addToleranceOptions(sub, o->tolerance);
  sub.add_option("--json", o->jsonFile,
                 "write the measurements (stage times, build, device and host-to-host time, memory, per-kernel "
                 "times with FLOPs and bytes) to this file; `-`: stdout, and the rest of the text to stderr");
  sub.add_option("--html", o->htmlFile,
                 "write the HTML report (graph, roofline, rules, top kernels) with the fused run's measured times; `-`: stdout");
  sub.add_option("--output", o->outputDir,
                 "write every output to this folder as a TensorProto (output_0.pb, ...), as onnx-test cases hold them");
  sub.add_option("--device", o->device, "the first OpenCL device whose name contains this");
  sub.add_option("--target", o->target, "target profile (.toml); default: the shipped pocl-cpu profile");
  addPackOptions(sub, o->rules);
  // Accepted for scripts written when OpenCL was not the default.
  sub.add_flag("--opencl", o->openclFlag, "run on OpenCL (the default)")->group("");
  return [o] {
    if (o->jsonFile == "-" && o->htmlFile == "-") {
      std::cerr << "error: --json - and --html - both want stdout\n";
      return 1;
    }
    // The data named `-` is written last, to the real stdout; everything
    // printed before it goes to stderr.
    const bool dataOnStdout = o->jsonFile == "-" || o->htmlFile == "-";
    std::string data;
    RunOptions options = *o;
    options.stdoutData = &data;
    int status = 0;
    {
      HumanTextOnStderr redirect(dataOnStdout);
      status = runModel(options);
    }
    if (status == 0 && dataOnStdout) {
      if (Status st = writeOutputFile("-", data); !st) {
        std::cerr << "error: " << st.error().message << "\n";
        return 1;
      }
    }
    return status;
  };
}

}  // namespace fusec::tools
