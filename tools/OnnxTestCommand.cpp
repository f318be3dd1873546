/// `fusec onnx-test DIR...`: runs ONNX backend test cases (a folder with
/// model.onnx and test_data_set_*/{input,output}_*.pb) on the reference
/// interpreter. A DIR that holds no model.onnx is searched one level down.
/// Prints one line per case and, last, the summary line
///   onnx-test: P passed, F failed, U unsupported (of N)
/// With --expect FILE, exits 1 if any case named in FILE does not pass.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <iostream>
#include <set>

#include "Commands.h"
#include "fusec/engine/Printable.h"
#include "Progress.h"
#include "fusec/codegen/Executor.h"
#include "fusec/driver/Pipeline.h"
#include "fusec/engine/Files.h"
#include "fusec/engine/Interpreter.h"
#include "fusec/engine/Planner.h"
#include "fusec/engine/OnnxIO.h"
#include "fusec/engine/OutputCheck.h"
#include "fusec/engine/Rewriter.h"
#include "Session.h"

namespace fusec::tools {
namespace fs = std::filesystem;
namespace {

enum class Outcome { Pass, Fail, Unsupported };

struct CaseResult {
  Outcome outcome;
  std::string detail;
  double maxAbsError = 0;
};

/// The entries of `dir` named `prefix` and a number, in the number's order
/// (input_10.pb after input_9.pb); an error for an entry named `prefix`
/// and anything else, which the case cannot mean.
Expected<std::vector<fs::path>> sortedFiles(const fs::path& dir, const std::string& prefix) {
  std::vector<std::pair<long, fs::path>> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string digits = it->path().stem().string().substr(prefix.size());
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos)
      return Error{printable(it->path().string()) + ": not named " + prefix + "<number> (at most 9 digits)"};
    files.emplace_back(std::stol(digits), it->path());
  }
  if (ec) return Error{printable(dir.string()) + ": cannot list the folder: " + ec.message()};
  std::sort(files.begin(), files.end());
  std::vector<fs::path> sorted;
  for (auto& [number, path] : files) sorted.push_back(std::move(path));
  return sorted;
}

/// How a case is executed.
struct Engine {
  const RuleSet* packs = nullptr;        ///< the op catalog, rewrite and fusion rules
  const Target* target = nullptr;
  bool rewrite = false;                  ///< run the rewrite stage first
  bool exported = false;                 ///< run the model as fusec exports it (ONNX binary, imported back)
  codegen::Device* device = nullptr;     ///< run generated kernels instead of the interpreter
  bool fuse = false;                     ///< on the device: plan fusion
  Tolerance tolerance;
};

/// Runs one graph the way `engine` says: on the interpreter, after the
/// rewrite stage when asked; on the device through the pipeline, with the
/// inputs that decide shapes (a ReduceSum's axes, Slice's starts) fixed to
/// this data set's values, as kernels are generated for static shapes.
Expected<std::vector<Tensor>> execute(const Graph& model, const Engine& engine, const std::vector<Tensor>& inputs) {
  const OpCatalog& catalog = engine.packs->catalog;
  if (!engine.rewrite && !engine.device) return runGraph(model, inputs, &catalog);
  driver::PipelineOptions options;
  options.rewrite = engine.rewrite;
  options.fuse = engine.device && engine.fuse;
  if (engine.device) {
    options.inputs = &inputs;
    options.specialize = true;
  }
  Expected<std::unique_ptr<driver::Compiled>> compiled = driver::compile(model.clone(), *engine.packs, *engine.target, options);
  if (!compiled) return compiled.error();
  const driver::Compiled& c = *compiled.value();
  if (!engine.device) return runGraph(c.graph, inputs, &catalog);
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(*engine.device, c.graph, c.groups, catalog, inputs,
                                                           codegen::KernelOptions::forDevice(*engine.target, engine.device->info()));
  if (!run) return run.error();
  return std::move(run->outputs);
}

/// With `engine.rewrite`, the rewrite stage runs before execution, so the
/// case checks that rewriting kept the model's meaning.
CaseResult runCase(const fs::path& dir, const Engine& engine) {
  Expected<Graph> g = importOnnxFile((dir / "model.onnx").string());
  if (!g) return {g.error().unsupported ? Outcome::Unsupported : Outcome::Fail, g.error().message};
  if (engine.exported) {  // the case's expected outputs judge the export: what it lost shows in the results
    Expected<Graph> back = importOnnxBuffer(exportOnnxBinary(g.value()), (dir / "model.onnx").string() + " (exported)");
    if (!back) return {Outcome::Fail, "the exported model does not import: " + back.error().message};
    g = std::move(back);
  }
  Expected<std::vector<fs::path>> sets = sortedFiles(dir, "test_data_set_");
  if (!sets) return {Outcome::Fail, sets.error().message};
  if (sets->empty()) return {Outcome::Fail, "no test_data_set_* folders"};
  double maxErr = 0;
  for (const fs::path& set : sets.value()) {
    std::vector<Tensor> inputs, expected;
    Expected<std::vector<fs::path>> inputFiles = sortedFiles(set, "input_"), outputFiles = sortedFiles(set, "output_");
    if (!inputFiles) return {Outcome::Fail, inputFiles.error().message};
    if (!outputFiles) return {Outcome::Fail, outputFiles.error().message};
    for (const fs::path& f : inputFiles.value()) {
      Expected<Tensor> t = loadTensorProtoFile(f.string());
      if (!t) return {t.error().unsupported ? Outcome::Unsupported : Outcome::Fail, t.error().message};
      inputs.push_back(std::move(t.value()));
    }
    for (const fs::path& f : outputFiles.value()) {
      Expected<Tensor> t = loadTensorProtoFile(f.string());
      if (!t) return {t.error().unsupported ? Outcome::Unsupported : Outcome::Fail, t.error().message};
      expected.push_back(std::move(t.value()));
    }
    // The suite stores 16-bit float data as uint16; read it as the declared type.
    for (size_t i = 0; i < inputs.size() && i < g->inputs().size(); ++i) {
      DType declared = g->value(g->inputs()[i]).type.dtype;
      if ((declared == DType::Float16 || declared == DType::BFloat16) && inputs[i].dtype() == DType::UInt16)
        inputs[i] = inputs[i].bitcast(declared);
    }
    for (size_t i = 0; i < expected.size() && i < g->outputs().size(); ++i) {
      DType declared = g->value(g->outputs()[i]).type.dtype;
      if ((declared == DType::Float16 || declared == DType::BFloat16) && expected[i].dtype() == DType::UInt16)
        expected[i] = expected[i].bitcast(declared);
    }
    // Some cases feed fewer inputs than the graph declares (optional inputs).
    if (inputs.size() != g->inputs().size())
      return {Outcome::Unsupported, fmt::format("{} input files for {} graph inputs", inputs.size(), g->inputs().size())};
    Expected<std::vector<Tensor>> out = execute(g.value(), engine, inputs);
    if (!out) return {out.error().unsupported ? Outcome::Unsupported : Outcome::Fail, out.error().message};
    if (out->size() != expected.size())
      return {Outcome::Fail, fmt::format("{} outputs, expected {}", out->size(), expected.size())};
    for (size_t i = 0; i < expected.size(); ++i) {
      OutputCheck check = checkOutput(out.value()[i], expected[i], engine.tolerance);
      if (!check.ok) return {Outcome::Fail, fmt::format("{}: output {}: {}", set.filename().string(), i, check.summary)};
      maxErr = std::max(maxErr, check.figures.maxAbsError);
    }
  }
  return {Outcome::Pass, {}, maxErr};
}

struct OnnxTestOptions {
  std::vector<std::string> dirs;
  bool rewrite = false, exported = false;
  bool opencl = false;
  bool fuse = false;
  std::string device;
  std::vector<std::string> packs;
  std::string expectFile;
  std::string writePasses;
  bool quiet = false;
  Tolerance tolerance;
};

int runOnnxTests(const OnnxTestOptions& o) {
  std::vector<fs::path> cases;
  for (const std::string& d : o.dirs) {
    fs::path p(d);
    if (fs::exists(p / "model.onnx")) {
      cases.push_back(p);
      continue;
    }
    if (!fs::is_directory(p)) {
      std::cerr << "error: " << d << ": not a test case folder or a folder of them\n";
      return 1;
    }
    std::vector<fs::path> found;
    for (const auto& e : fs::directory_iterator(p))
      if (fs::exists(e.path() / "model.onnx")) found.push_back(e.path());
    std::sort(found.begin(), found.end());
    cases.insert(cases.end(), found.begin(), found.end());
  }
  std::optional<Target> target;
  std::unique_ptr<RuleSet> rules;
  // The packs' op catalog: the interpreter runs elementwise ops from it.
  target = loadTargetOrDefault("");
  if (!target) return 1;
  rules = loadRules(PackChoice{o.packs, {}}, *target);
  if (!rules) return 1;
  Engine engine;
  engine.tolerance = o.tolerance;
  engine.packs = rules.get();
  engine.target = &*target;
  engine.rewrite = o.rewrite || o.fuse;  // fusion plans the rewritten graph, as compile does
  engine.exported = o.exported;
  std::unique_ptr<codegen::Device> device;
  if (o.opencl) {
    Expected<std::unique_ptr<codegen::Device>> d = codegen::Device::open(o.device);
    if (!d) {
      std::cerr << "error: " << d.error().message << "\n";
      return 1;
    }
    device = std::move(d.value());
    engine.device = device.get();
    engine.fuse = o.fuse;
  }
  size_t passed = 0, failed = 0, unsupported = 0;
  std::vector<std::string> passNames;
  std::set<std::string> passing;
  Progress progress;
  for (const fs::path& c : cases) {
    progress.show("cases", passed + failed + unsupported, cases.size());
    CaseResult r = runCase(c, engine);
    progress.clear();
    std::string name = c.filename().string();
    switch (r.outcome) {
      case Outcome::Pass:
        ++passed;
        passing.insert(name);
        passNames.push_back(name);
        if (!o.quiet) fmt::print("pass         {} (max abs error {:.2g})\n", name, r.maxAbsError);
        break;
      case Outcome::Fail:
        ++failed;
        fmt::print("fail         {}: {}\n", name, r.detail);
        break;
      case Outcome::Unsupported:
        ++unsupported;
        if (!o.quiet) fmt::print("unsupported  {}: {}\n", name, r.detail);
        break;
    }
  }
  int status = 0;
  if (!o.expectFile.empty()) {
    std::ifstream in(o.expectFile);
    if (!in) {
      std::cerr << "error: " << o.expectFile << ": cannot open file\n";
      return 1;
    }
    std::string line;
    size_t regressions = 0;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      if (!passing.count(line)) {
        fmt::print("regression   {}: listed as passing in {}\n", line, o.expectFile);
        ++regressions;
      }
    }
    if (regressions) status = 1;
  }
  if (!o.writePasses.empty()) {
    std::string text = "# ONNX backend test cases that pass on the reference interpreter.\n"
                       "# Regenerate with: fusec onnx-test DIR --write-passes FILE\n";
    for (const std::string& n : passNames) text += n + "\n";
    if (Status st = writeOutputFile(o.writePasses, text); !st) {
      std::cerr << "error: " << st.error().message << "\n";
      return 1;
    }
  }
  fmt::print("onnx-test: {} passed, {} failed, {} unsupported (of {})\n", passed, failed, unsupported,
             cases.size());
  // With --expect, the list decides (cases known to fail may fail); without
  // it, any failure does.
  if (o.expectFile.empty() && failed > 0) status = 1;
  return status;
}

}  // namespace

CommandRunner addOnnxTestCommand(CLI::App& sub) {
  auto o = std::make_shared<OnnxTestOptions>();
  sub.add_option("dirs", o->dirs, "test case folders, or folders of them")->required();
  sub.add_option("--expect", o->expectFile, "file of case names that must pass; exit 1 if one does not");
  sub.add_option("--write-passes", o->writePasses, "write the names of passing cases to this file");
  sub.add_flag("--quiet", o->quiet, "print only failures, regressions and the summary");
  sub.add_flag("--rewrite", o->rewrite, "run the rewrite stage (constant folding, rule rewrites, CSE, DCE) first");
  sub.add_flag("--exported", o->exported,
               "run each model as fusec exports it (to ONNX and imported back): the expected outputs judge the export");
  sub.add_option("--rules", o->packs, "packs for --rewrite (default: the shipped core pack)");
  sub.add_flag("--opencl", o->opencl, "run generated OpenCL kernels instead of the interpreter");
  sub.add_flag("--fuse", o->fuse, "with --opencl: plan fusion and run one kernel per group");
  sub.add_option("--device", o->device, "with --opencl: the first device whose name contains this");
  addToleranceOptions(sub, o->tolerance);
  return [o] { return runOnnxTests(*o); };
}

}  // namespace fusec::tools
