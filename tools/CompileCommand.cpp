/// `fusec compile MODEL [--rules P...] [--target T] -o DIR`: import, rewrite,
/// plan fusion; write the fused graph (`model.fused.onnx`), the plan
/// (`plan.json`) and a report (`report.txt`, also printed); with `--emit
/// opencl,spirv`, the generated kernels too; with `--emit html`, a page
/// with the graph drawn and the groups on the roofline; with `--emit bundle`, a
/// standalone OpenCL program that runs the model (DIR/bundle). `--dump-after
/// STAGE` prints the graph after `import`, `rewrite` or `plan` as ONNX text.
/// Where an OpenCL device is present, the kernels a run launches are built
/// into the kernel cache (`--no-build` skips it).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <iostream>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>

#include "Commands.h"
#include "Progress.h"
#include "Random.h"
#include "Session.h"
#include "fusec/codegen/Bundle.h"
#include "fusec/codegen/Canonical.h"
#include "fusec/codegen/Executor.h"
#include "fusec/codegen/Spirv.h"
#include "fusec/driver/Pipeline.h"
#include "fusec/driver/Report.h"
#include "fusec/engine/Files.h"
#include "fusec/engine/Interpreter.h"
#include "fusec/engine/OnnxIO.h"
#include "fusec/engine/Planner.h"
#include "fusec/engine/Rewriter.h"
#include "fusec/engine/TypeInference.h"

namespace fusec::tools {
namespace {

struct CompileOptions {
  std::string model, target, outDir, dumpAfter, jsonFile;
  PackChoice packs;
  std::vector<std::string> emit = {"onnx", "plan", "report"};
  int64_t symbolicDim = 1;  // bundles: the size of symbolic input dims
  uint64_t seed = 0;        // bundles: the sample inputs
  bool noBuild = false;     // --no-build
};

bool wants(const CompileOptions& o, const std::string& what) {
  return std::find(o.emit.begin(), o.emit.end(), what) != o.emit.end();
}

/// Writes DIR/kernels/<group>.cl (and .spv, validated) for every group a
/// generated kernel family covers; says which groups have no family yet.
/// Returns false after printing an error.
bool emitKernels(const CompileOptions& o, const Session& s, const driver::Compiled& c, std::string& summary) {
  const std::filesystem::path dir = std::filesystem::path(o.outDir) / "kernels";
  std::filesystem::create_directories(dir);
  Expected<driver::KernelSources> sources = driver::kernelSources(c, s.rules->catalog, s.target);
  if (!sources) {
    std::cerr << "error: " << o.model << ": " << sources.error().message << "\n";
    return false;
  }
  size_t validated = 0;
  std::set<std::string> programs;  // what the device builds: groups that compute the same thing share one
  for (const auto& [name, source] : sources->kernels) {
    programs.insert(codegen::canonicalProgram(source, name).text);
    if (Status st = writeOutputFile((dir / (name + ".cl")).string(), source); !st) {
      std::cerr << "error: " << st.error().message << "\n";
      return false;
    }
    if (!wants(o, "spirv")) continue;
    Expected<codegen::SpirvModule> spv = codegen::compileToSpirv(source, name);
    if (!spv) {
      std::cerr << "error: " << spv.error().message << "\n";
      return false;
    }
    const std::string_view words(reinterpret_cast<const char*>(spv->words.data()), spv->words.size() * 4);
    if (Status st = writeOutputFile((dir / (name + ".spv")).string(), words); !st) {
      std::cerr << "error: " << st.error().message << "\n";
      return false;
    }
    ++validated;
  }
  summary = fmt::format("\nkernels: {} OpenCL C files ({} distinct programs), {} SPIR-V modules validated, in {} ({} "
                        "reshape(s) are views, {} concat(s) written in place by their inputs' producers, {} slice(s) "
                        "read in place: no kernel)\n",
                        sources->kernels.size(), programs.size(), validated, dir.string(), sources->views,
                        sources->inPlaceConcats, sources->sliceViews);
  for (const auto& [op, n] : sources->unbuilt) summary += fmt::format("  no kernel family builds {} node(s) of op {}\n", n, op);
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

/// Builds what `fusec run` launches for this plan into the kernel cache,
/// so that a run, a script or a service starts warm: the fusions timed
/// against their members (run's split-back check; the verdicts are cached)
/// and the program's kernels, each distinct program once. Prints one line
/// to `out`; without a device, or with symbolic input dims (a run binds
/// them to its inputs), it says why nothing was built. Returns false after
/// printing an error: a kernel of an accepted plan that does not build.
bool buildKernels(const CompileOptions& o, const Session& s, driver::Compiled& c, std::FILE* out) {
  if (Status st = requireStaticShapes(c.graph, ""); !st) {
    fmt::print(out, "build: skipped: the model has symbolic input dims (run sizes them from its inputs)\n");
    return true;
  }
  Expected<std::unique_ptr<codegen::Device>> device = codegen::Device::open(s.target.deviceMatch);
  if (!device) {
    fmt::print(out, "build: skipped: {}\n", device.error().message);
    return true;
  }
  const auto start = std::chrono::steady_clock::now();
  Progress progress;
  codegen::SplitBackOptions split;
  split.progress = [&](size_t done, size_t total) { progress.show("build: timing fusions", done, total); };
  driver::PipelineOptions options;
  Expected<std::vector<codegen::FusionTiming>> timed =
      driver::splitBackLosses(c, **device, *s.rules, s.target, options, split);
  progress.clear();
  if (!timed) {
    std::cerr << "error: " << o.model << ": timing fusions: " << timed.error().message << "\n";
    return false;
  }
  Expected<codegen::DeviceProgram::Prepared> program = codegen::DeviceProgram::prepareKernels(
      **device, c.graph, c.groups, s.rules->catalog, codegen::KernelOptions::forDevice(s.target, (*device)->info()),
      [&](size_t done, size_t total) { progress.show("build: kernels", done, total); });
  progress.clear();
  if (!program) {
    std::cerr << "error: " << o.model << ": " << program.error().message << "\n";
    return false;
  }
  size_t lost = 0;
  for (const codegen::FusionTiming& t : timed.value()) lost += t.splitBack;
  fmt::print(out,
             "build: {} kernels from {} distinct programs, {} programs compiled and {} from the cache (with the "
             "fusions' members) on {} in {:.1f} s; {} fusion(s) timed against their members, {} to split back when "
             "run\n",
             program->kernels, program->programs, (*device)->programsBuilt(), (*device)->cacheHits(),
             (*device)->info().name,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), timed->size(), lost);
  return true;
}

int compile(const CompileOptions& o) {
  const std::vector<std::string_view> stages(driver::kStages.begin(), driver::kStages.end() - 1);  // codegen: no graph
  if (!o.dumpAfter.empty() && std::find(stages.begin(), stages.end(), o.dumpAfter) == stages.end()) {
    std::cerr << "error: unknown stage `" << o.dumpAfter << "`; stages are import, rewrite, plan\n";
    return 1;
  }
  for (const std::string& e : o.emit)
    if (e != "onnx" && e != "plan" && e != "report" && e != "html" && e != "opencl" && e != "spirv" && e != "bundle") {
      std::cerr << "error: unknown output `" << e << "`; outputs are onnx, plan, report, html, opencl, spirv, bundle\n";
      return 1;
    }
  if (o.jsonFile == "-" && !o.dumpAfter.empty()) {
    std::cerr << "error: --json - and --dump-after both want stdout\n";
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
  driver::Compiled& c = *compiled.value();
  const driver::ReportContext context{o.model, s->target.name, s->packs, s->target.calibrationPath};
  const std::string text = driver::reportText(c, context);
  auto write = [](const std::filesystem::path& path, const std::string& text) {
    Status st = writeOutputFile(path.string(), text);
    if (!st) std::cerr << "error: " << st.error().message << "\n";
    return st.ok();
  };
  // The report on stdout; with --json, as data too (to a file, or in its
  // place on stdout for `-`): the report's figures and the plan's groups.
  auto finish = [&](const std::string& more) {
    if (!o.dumpAfter.empty()) return 0;
    if (o.jsonFile.empty()) {
      std::cout << text << more << std::flush;
      return o.noBuild || buildKernels(o, *s, c, stdout) ? 0 : 1;
    }
    nlohmann::json j = driver::reportJson(c, context);
    j["groups"] = driver::planJson(c.graph, c.plan)["groups"];
    j["output_folder"] = o.outDir;
    if (o.jsonFile == "-") {
      std::cout << j.dump(1) << "\n" << std::flush;
      return o.noBuild || buildKernels(o, *s, c, stderr) ? 0 : 1;
    }
    std::cout << text << more << std::flush;
    if (!write(o.jsonFile, j.dump(1) + "\n")) return 1;
    return o.noBuild || buildKernels(o, *s, c, stdout) ? 0 : 1;
  };
  if (o.outDir.empty()) return finish("");
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
  if (wants(o, "plan") && !write(dir / "plan.json", driver::planJson(c.graph, c.plan).dump(2) + "\n")) return 1;
  if (wants(o, "html") &&
      !write(dir / "report.html", driver::htmlReport(c, context, *s->rules, s->target)))
    return 1;
  std::string kernels;
  if ((wants(o, "opencl") || wants(o, "spirv")) && !emitKernels(o, *s, c, kernels)) return 1;
  if (wants(o, "bundle") && !emitBundle(o, *s, c, original, sample, kernels)) return 1;
  if (wants(o, "report") && !write(dir / "report.txt", text + kernels)) return 1;
  return finish(kernels);
}

}  // namespace

CommandRunner addCompileCommand(CLI::App& sub) {
  auto o = std::make_shared<CompileOptions>();
  sub.add_option("model", o->model, "model file (.onnx or ONNX text)")->required();
  addPackOptions(sub, o->packs);
  sub.add_option("--target", o->target, "target profile (.toml; default: the shipped pocl-cpu profile)");
  sub.add_option("-o,--output", o->outDir, "folder for model.fused.onnx, plan.json and report.txt");
  sub.add_option("--emit", o->emit,
                 "what to write: onnx, plan, report, html (report.html: the graph with its fused groups, the "
                 "roofline, rules and top kernels, self-contained), opencl (one .cl per group), spirv (validated), "
                 "bundle (a standalone OpenCL program in DIR/bundle)")
      ->delimiter(',');
  sub.add_option("--dim", o->symbolicDim, "bundle: the size of symbolic input dims")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  sub.add_option("--seed", o->seed, "bundle: the seed of the sample inputs");
  sub.add_option("--json", o->jsonFile,
                 "write the report as JSON (figures per stage, rules fired, fusions, the plan's groups) to this "
                 "file; `-`: to stdout, in place of the text");
  sub.add_option("--dump-after", o->dumpAfter, "print the graph after a stage: import, rewrite, plan");
  sub.add_flag("--no-build", o->noBuild,
               "do not build the kernels (by default, where an OpenCL device is present, every distinct kernel "
               "program a run launches is built into the kernel cache, and the fusions timed, so a run starts warm)");
  return [o] { return compile(*o); };
}

}  // namespace fusec::tools
