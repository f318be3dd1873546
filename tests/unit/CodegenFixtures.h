/// Shared by the code generator's tests (tests/unit/Codegen*Test.cpp): the
/// OpenCL device they all use, random inputs, and runs compared with the
/// interpreter.
#pragma once

#include <doctest/doctest.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <set>
#include "TestUtil.h"
#include "fusec/codegen/Canonical.h"
#include "fusec/codegen/CpuThreads.h"
#include "fusec/codegen/Executor.h"
#include "fusec/codegen/Families.h"
#include "fusec/codegen/Pointwise.h"
#include "Emitters.h"
#include "fusec/codegen/Gemm.h"
#include "fusec/engine/Planner.h"
#include "fusec/codegen/Spirv.h"
#include "fusec/codegen/Specialize.h"
#include "fusec/codegen/Tuner.h"

namespace fusec::codegen_test {

using namespace fusec;

inline codegen::Device& device() {
  static std::unique_ptr<codegen::Device> dev = [] {
    Expected<std::unique_ptr<codegen::Device>> d = codegen::Device::open();
    REQUIRE_MESSAGE(d.ok(), test::why(d));
    return std::move(d.value());
  }();
  return *dev;
}

inline Tensor randomTensor(Shape shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-2, 2);
  Tensor t(DType::Float32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

/// A random float input for each of `g`'s inputs, the first drawn from `seed`.
inline std::vector<Tensor> randomInputs(const Graph& g, unsigned seed) {
  std::vector<Tensor> inputs;
  for (ValueId v : g.inputs())
    inputs.push_back(randomTensor(g.value(v).type.staticShape(), seed + static_cast<unsigned>(inputs.size())));
  return inputs;
}

/// The nodes computing the values named `results`, in that order.
inline std::vector<NodeRef> producersOf(const Graph& g, const std::vector<const char*>& results) {
  std::vector<NodeRef> out;
  for (const char* r : results) out.push_back(*g.producer(*g.findValue(r)));
  return out;
}

/// How many of the plan's groups each rule formed.
inline std::map<std::string, int> groupsByRule(const Plan& plan) {
  std::map<std::string, int> byRule;
  for (const Group& grp : plan.groups)
    if (grp.rule) ++byRule[grp.rule->name];
  return byRule;
}

/// The plan's kernels with each GEMM tiling, every output checked against `reference`.
inline void checkTilings(const Graph& g, const Plan& plan, const OpCatalog& catalog, const std::vector<Tensor>& inputs,
                  const std::vector<Tensor>& reference, const std::vector<codegen::GemmTiling>& tilings, float tolerance) {
  const std::vector<codegen::KernelGroup> groups = codegen::planGroups(plan);
  for (const codegen::GemmTiling& t : tilings) {
    INFO("tiling " << t.rows << "x" << t.width << " local " << t.localRows << " depth " << t.depth << " row panels "
                   << t.convRowPanels << " staged prologue " << t.stagedPrologue << " panels " << t.panels);
    Expected<codegen::DeviceRun> run =
        codegen::runOnDevice(device(), g, groups, catalog, inputs, codegen::KernelOptions{.gemm = t, .gemmTilings = {}});
    REQUIRE_MESSAGE(run.ok(), test::why(run));
    for (size_t i = 0; i < reference.size(); ++i) {
      INFO(g.value(g.outputs()[i]).name);
      test::checkClose(run->outputs[i], reference[i], tolerance);
    }
  }
}

/// Runs `groups` on the device with `options` and checks each of `g`'s
/// outputs against `reference` within `tolerance`; the run, for more checks.
inline codegen::DeviceRun runAndCheck(const Graph& g, const std::vector<codegen::KernelGroup>& groups, const OpCatalog& catalog,
                               const std::vector<Tensor>& inputs, const std::vector<Tensor>& reference,
                               const codegen::KernelOptions& options, float tolerance) {
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), g, groups, catalog, inputs, options);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  for (size_t i = 0; i < reference.size(); ++i) {
    INFO(g.value(g.outputs()[i]).name);
    test::checkClose(run->outputs[i], reference[i], tolerance);
  }
  return std::move(run.value());
}

/// `g`'s nodes as kernel groups, in topological order: the nodes computing
/// the values `fused` as one group named `name`, every other node alone.
inline std::vector<codegen::KernelGroup> fuseOneGroup(const Graph& g, const std::set<std::string>& fused, const std::string& name) {
  Expected<std::vector<NodeRef>> order = g.topologicalOrder();
  REQUIRE(order.ok());
  std::vector<NodeRef> members;
  std::vector<codegen::KernelGroup> groups;
  for (NodeRef n : order.value()) {
    if (!fused.count(g.value(g.node(n).outputs[0]).name)) {
      groups.emplace_back(std::vector<NodeRef>{n}, "k" + std::to_string(groups.size()));
      continue;
    }
    members.push_back(n);
    if (members.size() == fused.size()) groups.emplace_back(members, name);
  }
  REQUIRE(members.size() == fused.size());
  return groups;
}

/// A graph of one Conv `y` of x [1, C, H, W] and w [M, C, KH, KW] (with
/// `attributes`, e.g. "<pads = [1, 1, 1, 1]> "), random inputs from `seed`,
/// the interpreter's output and the conv as one kernel group.
struct OneConv {
  Graph g;
  std::vector<Tensor> inputs, reference;
  std::vector<codegen::KernelGroup> groups;
};
inline OneConv oneConv(const Shape& x, const Shape& w, const std::string& attributes, unsigned seed) {
  auto dims = [](const Shape& s) {
    std::string out;
    for (int64_t d : s) out += (out.empty() ? "" : ",") + std::to_string(d);
    return out;
  };
  OneConv c{test::parse("<ir_version: 8, opset_import: [\"\" : 17]>\ng (float[" + dims(x) + "] x, float[" + dims(w) +
                        "] w) => (float[1," + std::to_string(w[0]) + ",h,v] y) {\n  y = Conv " + attributes + "(x, w)\n}\n"),
            {randomTensor(x, seed), randomTensor(w, seed + 1)}, {}, {}};
  c.reference = test::run(c.g, c.inputs);
  c.groups = fuseOneGroup(c.g, {"y"}, "conv");
  return c;
}

/// Runs the whole graph as one kernel group.
inline Expected<codegen::DeviceRun> runAsOneKernel(const Graph& g, const OpCatalog& catalog, const std::vector<Tensor>& inputs) {
  Expected<std::vector<NodeRef>> order = g.topologicalOrder();
  REQUIRE(order.ok());
  return codegen::runOnDevice(device(), g, {order.value()}, catalog, inputs);
}

inline constexpr const char* kModel = R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[4,1] a, float[1,8] b, float[8] c) => (float[4,8] y, float[4,8] s) {
  s = Add (a, b)
  r = Relu (s)
  e = Exp (r)
  n = Neg (e)
  m = Mul (n, c)
  t = Clip (m)
  y = Sigmoid (t)
}
)";

}  // namespace fusec::codegen_test
