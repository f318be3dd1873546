/// Benchmark: a chain of 8 elementwise ops on N floats, run on the OpenCL
/// device as 8 generated kernels and as one fused kernel, side by side.
/// Prints device time (profiling events, best of 5), the ratio, and the
/// fused kernel's effective bandwidth.
///   build/bench/pointwise_fusion [N]   (default 16777216)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "fusec/codegen/Executor.h"
#include "fusec/grammar/PackLoader.h"

using namespace fusec;

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : (int64_t{1} << 24);
  grammar::SourceManager sources;
  grammar::DiagnosticEngine diags(sources);
  grammar::ast::AstContext context;
  auto ops = grammar::loadPacks({grammar::defaultRulesDir() + "/core/ops.fuse"}, sources, context, diags).rules;
  Expected<std::unique_ptr<codegen::Device>> device = codegen::Device::open();
  if (!ops || !device) {
    std::fprintf(stderr, "%s\n", device ? "cannot load the op catalog" : device.error().message.c_str());
    return 1;
  }
  Graph g;
  const TensorType t = TensorType::of(DType::Float32, {n});
  ValueId x = g.addInput("x", t);
  ValueId half = g.addConstant("half", Tensor::scalar(0.5f));
  const char* chain[] = {"Relu", "Mul", "Exp", "Neg", "Add", "Sigmoid", "Abs", "Sqrt"};
  for (const char* op : chain) {
    ValueId y = g.addValue(std::string(op) + "_out", t);
    std::vector<ValueId> in = {x};
    if (std::string(op) == "Mul" || std::string(op) == "Add") in.push_back(half);
    g.addNode(op, in, {y});
    x = y;
  }
  g.addOutput(x);
  Tensor input(DType::Float32, {n});
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1, 1);
  for (int64_t i = 0; i < n; ++i) input.data<float>()[i] = d(rng);
  auto order = g.topologicalOrder();
  auto best = [&](const std::vector<codegen::KernelGroup>& groups, size_t& kernels) {
    double bestTime = 1e30;
    for (int r = 0; r < 5; ++r) {
      Expected<codegen::DeviceRun> run = codegen::runOnDevice(**device, g, groups, ops->catalog, {input});
      if (!run) {
        std::fprintf(stderr, "%s\n", run.error().message.c_str());
        std::exit(1);
      }
      double total = 0;
      for (auto& [name, s] : run->kernelTimes) total += s;
      bestTime = std::min(bestTime, total);
      kernels = run->kernelTimes.size();
    }
    return bestTime;
  };
  size_t kUnfused = 0, kFused = 0;
  const double unfused = best(codegen::singleNodeGroups(g), kUnfused);
  const double fused = best({order.value()}, kFused);
  std::printf("device: %s\n", (*device)->info().name.c_str());
  std::printf("elements %lld, chain of %zu ops\n", static_cast<long long>(n), std::size(chain));
  std::printf("unfused: %zu kernels, %.3f ms\n", kUnfused, unfused * 1e3);
  std::printf("fused:   %zu kernel,  %.3f ms  (%.2fx faster; %.1f GB/s effective, read + write)\n", kFused, fused * 1e3,
              unfused / fused, 2.0 * 4.0 * static_cast<double>(n) / fused / 1e9);
  return 0;
}
