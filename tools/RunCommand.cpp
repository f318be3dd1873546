/// `fusec run MODEL`: load a model, make seeded random inputs (or read them
/// from TensorProto files), execute it and print output shapes, checksums
/// and the time taken.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fmt/format.h>
#include <iostream>
#include <random>

#include "Commands.h"
#include "Random.h"
#include "fusec/codegen/Executor.h"
#include "fusec/engine/Interpreter.h"
#include "fusec/engine/OnnxIO.h"
#include "fusec/engine/Planner.h"
#include "fusec/engine/Rewriter.h"
#include "Session.h"
#include <map>

namespace fusec::tools {
namespace {

struct RunOptions {
  std::string model;
  bool opencl = false, noFuse = false, check = false;
  std::string device;
  std::vector<std::string> inputFiles;
  uint64_t seed = 0;
  int repeat = 1;
  int64_t symbolicDim = 1;
};

/// Compares outputs; prints the first mismatch. Tolerance as in onnx-test.
bool sameOutputs(const Graph& g, const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i].shape() != want[i].shape() || got[i].dtype() != want[i].dtype()) {
      std::cerr << "error: output `" << g.value(g.outputs()[i]).name << "` differs in shape or type\n";
      return false;
    }
    double maxErr = 0;
    for (int64_t k = 0; k < want[i].numel(); ++k) {
      const double a = got[i].scalarAt(k), b = want[i].scalarAt(k), err = std::abs(a - b);
      maxErr = std::max(maxErr, err);
      if (!(err <= 1e-5 + 1e-3 * std::abs(b)) && !(std::isnan(a) && std::isnan(b))) {
        std::cerr << fmt::format("error: output `{}` element {}: {} on the device, {} on the interpreter\n",
                                 g.value(g.outputs()[i]).name, k, a, b);
        return false;
      }
    }
    fmt::print("check  {:<24} matches the interpreter (max abs error {:.2g})\n", g.value(g.outputs()[i]).name, maxErr);
  }
  return true;
}

/// The model on OpenCL: the rewrite stage, fusion planned for the target
/// (or one kernel per op with --no-fuse), generated kernels, timed by
/// profiling events.
int runOpenCL(const RunOptions& o, const Graph& original, const std::vector<Tensor>& inputs) {
  std::optional<Target> target = loadTargetOrDefault("");
  if (!target) return 1;
  std::unique_ptr<RuleSet> rules = loadRules({}, *target);
  if (!rules) return 1;
  Expected<std::unique_ptr<codegen::Device>> device = codegen::Device::open(o.device);
  if (!device) {
    std::cerr << "error: " << device.error().message << "\n";
    return 1;
  }
  Graph g = original.clone();
  if (Expected<RewriteStats> rw = runRewritePipeline(g, *rules, &target.value()); !rw) {
    std::cerr << "error: " << rw.error().message << "\n";
    return 1;
  }
  if (Status st = inferTypes(g); !st) std::cerr << "warning: " << st.error().message << "\n";
  std::vector<std::vector<NodeRef>> groups;
  if (o.noFuse) {
    groups = codegen::singleNodeGroups(g);
  } else {
    for (const Group& grp : planFusion(g, *rules, target.value()).groups) groups.push_back(grp.nodes);
  }
  // The first run builds (or loads) the kernels; the timed runs reuse them.
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(**device, g, groups, rules->catalog, inputs);
  if (!run) {
    std::cerr << "error: " << o.model << ": " << run.error().message << "\n";
    return 1;
  }
  double best = 1e30;
  std::vector<std::pair<std::string, double>> bestTimes;
  for (int r = 0; r < std::max(1, o.repeat); ++r) {
    Expected<codegen::DeviceRun> timed = codegen::runOnDevice(**device, g, groups, rules->catalog, inputs);
    if (!timed) {
      std::cerr << "error: " << timed.error().message << "\n";
      return 1;
    }
    double total = 0;
    for (auto& [name, t] : timed->kernelTimes) total += t;
    if (total < best) {
      best = total;
      bestTimes = timed->kernelTimes;
      run = std::move(timed);
    }
  }
  fmt::print("device: {} ({})\n", (*device)->info().name, o.noFuse ? "one kernel per op" : "fused");
  std::sort(bestTimes.begin(), bestTimes.end(), [](auto& x, auto& y) { return x.second > y.second; });
  for (size_t i = 0; i < bestTimes.size() && i < 10; ++i)
    fmt::print("  {:<40} {:>10.3f} ms\n", bestTimes[i].first, bestTimes[i].second * 1e3);
  for (size_t i = 0; i < run->outputs.size(); ++i)
    fmt::print("output {:<24} {} {} checksum {:.6g}\n", g.value(g.outputs()[i]).name, dtypeName(run->outputs[i].dtype()),
               shapeToString(run->outputs[i].shape()), checksum(run->outputs[i]));
  fmt::print("kernels launched: {}, device time {:.3f} ms (best of {}; profiling events)\n", bestTimes.size(), best * 1e3,
             std::max(1, o.repeat));
  if (o.check) {
    Expected<std::vector<Tensor>> reference = runGraph(original, inputs);
    if (!reference) {
      std::cerr << "error: " << reference.error().message << "\n";
      return 1;
    }
    if (!sameOutputs(g, run->outputs, reference.value())) return 1;
  }
  return 0;
}

int runModel(const RunOptions& o) {
  Expected<Graph> loaded = importOnnxFile(o.model);
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
  if (o.opencl) return runOpenCL(o, g, inputs);
  std::vector<Tensor> outputs;
  double best = 0;
  for (int r = 0; r < std::max(1, o.repeat); ++r) {
    auto start = std::chrono::steady_clock::now();
    Expected<std::vector<Tensor>> result = runGraph(g, inputs);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!result) {
      std::cerr << "error: " << o.model << ": " << result.error().message << "\n";
      return 1;
    }
    best = r == 0 ? ms : std::min(best, ms);
    outputs = std::move(result.value());
  }
  for (size_t i = 0; i < outputs.size(); ++i)
    fmt::print("output {:<24} {} {} checksum {:.6g}\n", g.value(g.outputs()[i]).name,
               dtypeName(outputs[i].dtype()), shapeToString(outputs[i].shape()), checksum(outputs[i]));
  fmt::print("time: {:.3f} ms on the reference interpreter (best of {})\n", best, std::max(1, o.repeat));
  return 0;
}

}  // namespace

CommandRunner addRunCommand(CLI::App& sub) {
  auto o = std::make_shared<RunOptions>();
  sub.add_option("model", o->model, "model file (.onnx or ONNX text)")->required();
  sub.add_option("--input", o->inputFiles, "TensorProto files for the inputs, in order; the rest are random");
  sub.add_option("--seed", o->seed, "seed for random inputs");
  sub.add_option("--repeat", o->repeat, "run this many times and report the best time");
  sub.add_option("--dim", o->symbolicDim, "size used for symbolic dims of random inputs");
  sub.add_flag("--opencl", o->opencl, "compile with the core pack and run generated kernels on an OpenCL device");
  sub.add_flag("--no-fuse", o->noFuse, "with --opencl: one kernel per op (the same code generator)");
  sub.add_flag("--check", o->check, "with --opencl: compare every output with the reference interpreter");
  sub.add_option("--device", o->device, "with --opencl: the first device whose name contains this");
  return [o] { return runModel(*o); };
}

}  // namespace fusec::tools
