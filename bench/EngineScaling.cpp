/// Benchmark: matching + rewriting + planning time per node on synthetic
/// CNN-like and transformer-like graphs of growing size, with all shipped
/// packs. Prints a table (best of repeated runs per size) and the ratio of
/// per-node time at the largest size to the smallest (linear scaling gives
/// about 1).
///   build/bench/engine_scaling [MAX_NODES [MIN_NODES [cnn|transformer]]]
/// (default 100000 1000, both graphs). The rewrite and plan columns split the
/// per-node time between the rewrite pipeline and fusion planning.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>

#include "fusec/codegen/Families.h"
#include "fusec/engine/Planner.h"
#include "fusec/engine/Rewriter.h"
#include "fusec/grammar/PackLoader.h"

using namespace fusec;

namespace {

Tensor random(Shape shape, std::mt19937& rng, float lo = -1, float hi = 1) {
  std::uniform_real_distribution<float> d(lo, hi);
  Tensor t(DType::Float32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

ValueId node(Graph& g, const char* op, std::vector<ValueId> in, TensorType type, AttrMap attrs = {}) {
  ValueId out = g.addValue("", type);
  g.addNode(op, std::move(in), {out}, std::move(attrs));
  g.value(out).name = "v" + std::to_string(out);
  return out;
}

/// Residual blocks: Conv-BN-Relu-Conv-BN-Add-Relu (7 nodes per block).
Graph cnn(size_t nodes, std::mt19937& rng) {
  Graph g;
  const TensorType t = TensorType::of(DType::Float32, {1, 8, 4, 4});
  ValueId x = g.addInput("x", t);
  auto bn = [&](ValueId in) {
    return node(g, "BatchNormalization", {in, g.addConstant("", random({8}, rng, 0.5f, 1.5f)), g.addConstant("", random({8}, rng)),
                                          g.addConstant("", random({8}, rng)), g.addConstant("", random({8}, rng, 0.5f, 1.5f))}, t);
  };
  while (g.numNodes() + 7 <= nodes) {
    ValueId c1 = node(g, "Conv", {x, g.addConstant("", random({8, 8, 1, 1}, rng))}, t);
    ValueId r1 = node(g, "Relu", {bn(c1)}, t);
    ValueId c2 = node(g, "Conv", {r1, g.addConstant("", random({8, 8, 1, 1}, rng))}, t);
    ValueId a = node(g, "Add", {bn(c2), x}, t);
    x = node(g, "Relu", {a}, t);
  }
  g.addOutput(x);
  return g;
}

/// Encoder-like layers: projections with bias, scaled masked softmax,
/// residual + LayerNorm, an MLP with the erf GELU (22 nodes per layer).
Graph transformer(size_t nodes, std::mt19937& rng) {
  Graph g;
  const int64_t s = 8, d = 16;
  const TensorType t = TensorType::of(DType::Float32, {s, d});
  const TensorType sq = TensorType::of(DType::Float32, {s, s});
  ValueId x = g.addInput("x", t);
  ValueId mask = g.addInput("mask", sq);
  auto proj = [&](ValueId in) {
    ValueId m = node(g, "MatMul", {in, g.addConstant("", random({d, d}, rng))}, t);
    return node(g, "Add", {m, g.addConstant("", random({d}, rng))}, t);
  };
  auto scalar = [&](float v) { return g.addConstant("", Tensor::scalar(v)); };
  while (g.numNodes() + 22 <= nodes) {
    ValueId q = proj(x), k = proj(x), v = proj(x);
    ValueId kt = node(g, "Transpose", {k}, TensorType::of(DType::Float32, {d, s}), {{"perm", std::vector<int64_t>{1, 0}}});
    ValueId sc = node(g, "Div", {node(g, "MatMul", {q, kt}, sq), scalar(4.f)}, sq);
    ValueId p = node(g, "Softmax", {node(g, "Add", {sc, mask}, sq)}, sq, {{"axis", int64_t{-1}}});
    ValueId h = node(g, "LayerNormalization", {node(g, "Add", {x, proj(node(g, "MatMul", {p, v}, t))}, t),
                                                 g.addConstant("", random({d}, rng)), g.addConstant("", random({d}, rng))}, t);
    ValueId f = proj(h);
    ValueId e = node(g, "Erf", {node(g, "Div", {f, scalar(1.41421356f)}, t)}, t);
    ValueId gelu = node(g, "Mul", {node(g, "Mul", {f, node(g, "Add", {e, scalar(1.f)}, t)}, t), scalar(0.5f)}, t);
    x = node(g, "Add", {h, gelu}, t);
  }
  g.addOutput(x);
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t maxNodes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 100000;
  const size_t minNodes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1000;
  grammar::SourceManager sources;
  grammar::DiagnosticEngine diags(sources);
  grammar::ast::AstContext context;
  const std::string dir = grammar::defaultRulesDir();
  Expected<Target> target = loadTarget(dir + "/targets/pocl-cpu.toml");
  Expected<std::vector<std::string>> packs =
      target ? grammar::defaultPackPaths(target.value()) : Expected<std::vector<std::string>>(target.error());
  auto loaded = grammar::loadPacks(packs ? packs.value() : std::vector<std::string>{}, sources, context, diags);
  if (!loaded.rules || !target || !packs) {
    std::fprintf(stderr, "cannot load the shipped packs or target\n");
    return 1;
  }
  std::printf("%-12s %10s %10s %10s %12s %12s %12s %12s\n", "graph", "nodes", "groups", "rewrites", "total ms",
              "us/node", "rewrite us", "plan us");
  const std::string only = argc > 3 ? argv[3] : "";
  for (const char* kind : {"cnn", "transformer"}) {
    if (!only.empty() && only != kind) continue;
    double first = 0, last = 0;
    for (size_t n = minNodes; n <= maxNodes; n *= 10) {
      // Small sizes finish in tens of milliseconds, where one scheduler
      // hiccup moves the figure by a third: each size is run until about
      // two seconds have been spent on it (at least once), and the best run
      // is kept.
      double ms = 0, spent = 0, rewriteMs = 0, planMs = 0;
      size_t nodes = 0, groups = 0, rewrites = 0;
      for (int rep = 0; rep == 0 || spent < 2000; ++rep) {
        std::mt19937 rng(1);
        Graph g = std::string(kind) == "cnn" ? cnn(n, rng) : transformer(n, rng);
        nodes = g.numNodes();
        auto start = std::chrono::steady_clock::now();
        Expected<RewriteStats> rw = runRewritePipeline(g, *loaded.rules, &target.value());
        if (!rw) {
          std::fprintf(stderr, "%s\n", rw.error().message.c_str());
          return 1;
        }
        const auto rewritten = std::chrono::steady_clock::now();
        Plan plan = planFusion(g, *loaded.rules, target.value(), codegen::kernelFamilies());
        const auto end = std::chrono::steady_clock::now();
        const double runMs = std::chrono::duration<double, std::milli>(end - start).count();
        if (rep == 0 || runMs < ms) {
          rewriteMs = std::chrono::duration<double, std::milli>(rewritten - start).count();
          planMs = std::chrono::duration<double, std::milli>(end - rewritten).count();
        }
        ms = rep == 0 ? runMs : std::min(ms, runMs);
        spent += runMs;
        groups = plan.groups.size();
        rewrites = rw->rewrites;
      }
      const double perNode = ms * 1000 / static_cast<double>(nodes);
      if (first == 0) first = perNode;
      last = perNode;
      std::printf("%-12s %10zu %10zu %10zu %12.1f %12.2f %12.2f %12.2f\n", kind, nodes, groups, rewrites, ms, perNode,
                  rewriteMs * 1000 / static_cast<double>(nodes), planMs * 1000 / static_cast<double>(nodes));
      std::fflush(stdout);
    }
    std::printf("%-12s per-node time, largest / smallest: %.2f\n", kind, last / first);
  }
  return 0;
}
