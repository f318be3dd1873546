/// `fusec run MODEL`: load a model, make seeded random inputs (or read them
/// from TensorProto files), execute it and print output shapes, checksums
/// and the time taken.
#include <chrono>
#include <fmt/format.h>
#include <iostream>
#include <random>

#include "Commands.h"
#include "Random.h"
#include "fusec/engine/Interpreter.h"
#include "fusec/engine/OnnxIO.h"

namespace fusec::tools {
namespace {

struct RunOptions {
  std::string model;
  std::vector<std::string> inputFiles;
  uint64_t seed = 0;
  int repeat = 1;
  int64_t symbolicDim = 1;
};

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
  return [o] { return runModel(*o); };
}

}  // namespace fusec::tools
