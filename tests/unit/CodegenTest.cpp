/// Generated pointwise kernels on the OpenCL device (PoCL here): fused and
/// unfused runs agree with the interpreter; kernels are valid SPIR-V.
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
#include "fusec/codegen/Emitters.h"
#include "fusec/codegen/Gemm.h"
#include "fusec/engine/Planner.h"
#include "fusec/codegen/Spirv.h"
#include "fusec/codegen/Specialize.h"
#include "fusec/codegen/Tuner.h"

using namespace fusec;
using codegen::canonicalProgram;

namespace {

codegen::Device& device() {
  static std::unique_ptr<codegen::Device> dev = [] {
    Expected<std::unique_ptr<codegen::Device>> d = codegen::Device::open();
    REQUIRE_MESSAGE(d.ok(), test::why(d));
    return std::move(d.value());
  }();
  return *dev;
}

Tensor randomTensor(Shape shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-2, 2);
  Tensor t(DType::Float32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

/// A random float input for each of `g`'s inputs, the first drawn from `seed`.
std::vector<Tensor> randomInputs(const Graph& g, unsigned seed) {
  std::vector<Tensor> inputs;
  for (ValueId v : g.inputs())
    inputs.push_back(randomTensor(g.value(v).type.staticShape(), seed + static_cast<unsigned>(inputs.size())));
  return inputs;
}

/// How many of the plan's groups each rule formed.
std::map<std::string, int> groupsByRule(const Plan& plan) {
  std::map<std::string, int> byRule;
  for (const Group& grp : plan.groups)
    if (grp.rule) ++byRule[grp.rule->name];
  return byRule;
}

/// The plan's kernels with each GEMM tiling, every output checked against `reference`.
void checkTilings(const Graph& g, const Plan& plan, const OpCatalog& catalog, const std::vector<Tensor>& inputs,
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
codegen::DeviceRun runAndCheck(const Graph& g, const std::vector<codegen::KernelGroup>& groups, const OpCatalog& catalog,
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
std::vector<codegen::KernelGroup> fuseOneGroup(const Graph& g, const std::set<std::string>& fused, const std::string& name) {
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
OneConv oneConv(const Shape& x, const Shape& w, const std::string& attributes, unsigned seed) {
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
Expected<codegen::DeviceRun> runAsOneKernel(const Graph& g, const OpCatalog& catalog, const std::vector<Tensor>& inputs) {
  Expected<std::vector<NodeRef>> order = g.topologicalOrder();
  REQUIRE(order.ok());
  return codegen::runOnDevice(device(), g, {order.value()}, catalog, inputs);
}

const char* kModel = R"(<ir_version: 8, opset_import: ["" : 17]>
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

}  // namespace

#ifdef __linux__
TEST_CASE("PoCL's CPU workers are pinned by default only where the process may run on every CPU and the user is silent") {
  // The runtime sets the variable as it opens a device: start from none,
  // and give the environment back as it was.
  std::map<std::string, std::optional<std::string>> saved;
  for (const char* name : {"POCL_AFFINITY", "POCL_MAX_PTHREAD_COUNT"}) {
    const char* v = std::getenv(name);
    saved[name] = v ? std::optional<std::string>(v) : std::nullopt;
    unsetenv(name);
  }
  auto affinity = [] {
    const char* v = std::getenv("POCL_AFFINITY");
    return v ? std::string(v) : std::string("(unset)");
  };
  cpu_set_t mask;
  REQUIRE(sched_getaffinity(0, sizeof mask, &mask) == 0);
  const bool everyCpu = CPU_COUNT(&mask) == sysconf(_SC_NPROCESSORS_ONLN);

  setenv("POCL_AFFINITY", "0", 1);  // the user's choice stays
  fusec::pinPoclWorkersByDefault();
  CHECK(affinity() == "0");
  unsetenv("POCL_AFFINITY");
  setenv("POCL_MAX_PTHREAD_COUNT", "1", 1);  // so does a thread count of the user's
  fusec::pinPoclWorkersByDefault();
  CHECK(affinity() == "(unset)");
  unsetenv("POCL_MAX_PTHREAD_COUNT");

  if (CPU_COUNT(&mask) > 1) {  // a mask of one CPU (as taskset -c would leave): not pinned
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int c = CPU_SETSIZE - 1; c >= 0; --c)
      if (CPU_ISSET(c, &mask)) {
        CPU_ZERO(&one);
        CPU_SET(c, &one);
      }
    REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
    fusec::pinPoclWorkersByDefault();
    CHECK(affinity() == "(unset)");
    REQUIRE(sched_setaffinity(0, sizeof mask, &mask) == 0);
  }
  fusec::pinPoclWorkersByDefault();  // this process's own mask
  CHECK(affinity() == (everyCpu ? "1" : "(unset)"));

  for (const auto& [name, value] : saved)
    if (value)
      setenv(name.c_str(), value->c_str(), 1);
    else
      unsetenv(name.c_str());
}
#endif

TEST_CASE("a fused pointwise group runs as one kernel and matches the interpreter and the unfused run") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  Graph g = test::parse(kModel);
  std::vector<Tensor> inputs = {randomTensor({4, 1}, 1), randomTensor({1, 8}, 2), randomTensor({8}, 3)};
  std::vector<Tensor> reference = test::run(g, inputs);

  Expected<codegen::DeviceRun> unfused = codegen::runOnDevice(device(), g, codegen::singleNodeGroups(g), ops->catalog, inputs);
  REQUIRE_MESSAGE(unfused.ok(), test::why(unfused));
  CHECK(unfused->kernelTimes.size() == 7);
  // Host to host spans the seven launches, run one after another.
  CHECK(unfused->hostSeconds > unfused->totalSeconds());
  Expected<std::vector<NodeRef>> order = g.topologicalOrder();
  REQUIRE(order.ok());
  Expected<codegen::DeviceRun> fused = codegen::runOnDevice(device(), g, {order.value()}, ops->catalog, inputs);
  REQUIRE_MESSAGE(fused.ok(), test::why(fused));
  CHECK(fused->kernelTimes.size() == 1);
  for (size_t i = 0; i < reference.size(); ++i) {
    test::checkClose(unfused->outputs[i], reference[i], 1e-5f);
    test::checkClose(fused->outputs[i], reference[i], 1e-5f);
  }
}

TEST_CASE("generated kernels are readable and valid SPIR-V") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  Graph g = test::parse(kModel);
  Expected<std::vector<NodeRef>> order = g.topologicalOrder();
  REQUIRE(order.ok());
  Expected<codegen::KernelSource> k = codegen::emitPointwise(g, order.value(), ops->catalog, "g0_pointwise",
                                                             "group g0 (rule elementwise_chain): Add, Relu, Exp, Neg, Mul, Clip, Sigmoid");
  REQUIRE_MESSAGE(k.ok(), test::why(k));
  CHECK(k->source.find("// group g0 (rule elementwise_chain)") == 0);
  CHECK(k->source.find("__kernel void g0_pointwise(") != std::string::npos);
  // Readable: the operands' loads name their values; then each op's
  // statement names the op and its node, in the group's order.
  size_t at = k->source.find("__kernel void g0_pointwise(");
  for (const char* line : {"// a\n", "// b\n", "// c\n", "// Add Add_0\n", "// Relu Relu_1\n", "// Exp Exp_2\n",
                           "// Neg Neg_3\n", "// Mul Mul_4\n", "// Clip Clip_5\n", "// Sigmoid Sigmoid_6\n"}) {
    const size_t next = k->source.find(line, at);
    const std::string missing = std::string(line) + " after offset " + std::to_string(at) + " in\n" + k->source;
    REQUIRE_MESSAGE(next != std::string::npos, missing);
    at = next;
  }
  CHECK(k->inputs.size() == 3);
  CHECK(k->outputs.size() == 2);  // `s` is a graph output too
  CHECK(k->globalSize == 32);
  INFO(k->source);
  Expected<codegen::SpirvModule> spv = codegen::compileToSpirv(k->source, k->name);
  REQUIRE_MESSAGE(spv.ok(), test::why(spv));
  CHECK(spv->words.size() > 5);
  CHECK(spv->words[0] == 0x07230203u);  // SPIR-V magic
  // A source that does not compile names the kernel and quotes the compiler.
  Expected<codegen::SpirvModule> bad = codegen::compileToSpirv("__kernel void broken( {", "broken");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("kernel `broken`: clang-14 cannot compile it") == 0);
}

TEST_CASE("ops no kernel family generates say so") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  Graph g = test::parse(test::model("g (float[2,5] x) => (float[2,3] v, int64[2,3] i)",
                                    "k = Constant <value = int64[1] {3}> ()\nv, i = TopK (x, k)"));
  Expected<codegen::DeviceRun> run =
      codegen::runOnDevice(device(), g, codegen::singleNodeGroups(g), ops->catalog, {randomTensor({2, 5}, 1)});
  REQUIRE_FALSE(run.ok());
  CHECK(run.error().unsupported);
  CHECK(run.error().message == "op `TopK` has no kernel path: no kernel family takes it");
  // A kernel that does not build shows the OpenCL build log and the source.
  Expected<void*> k = device().kernel("__kernel void oops(__global float* x) { x[0] = undefined_thing; }", "oops");
  REQUIRE_FALSE(k.ok());
  CHECK(k.error().message.find("kernel `oops` does not build") == 0);
  CHECK(k.error().message.find("--- source ---") != std::string::npos);
}

TEST_CASE("kernels that leave their work-group size to the runtime are spread over work-groups on CPUs") {
  // The largest divisor of the work-items at most 1/groups of them.
  CHECK(codegen::spreadLocalSize(500, 16) == 25);
  CHECK(codegen::spreadLocalSize(24640, 16) == 880);  // 1540 is above 1024
  CHECK(codegen::spreadLocalSize(128, 16) == 8);
  CHECK(codegen::spreadLocalSize(3, 16) == 1);
  CHECK(codegen::spreadLocalSize(1 << 20, 16) == 1024);  // at most 1024 work-items a group
  CHECK(codegen::spreadLocalSize(1009, 16) == 1);        // prime: 1009 groups of one
  CHECK(codegen::spreadLocalSize(100003, 16) == 0);      // prime: too many groups; the runtime chooses
  CHECK(codegen::spreadLocalSize(500, 0) == 0);
  Expected<Target> cpu = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  Expected<Target> gpu = loadTarget(grammar::defaultRulesDir() + "/vendor/nvidia/h200.toml");
  REQUIRE(cpu.ok());
  REQUIRE(gpu.ok());
  const codegen::KernelOptions options = codegen::KernelOptions::forTarget(cpu.value());
  CHECK(options.spreadGroups == 8 * cpu->computeUnits);
  CHECK(codegen::KernelOptions::forTarget(gpu.value()).spreadGroups == 0);

  // A classifier's matrix-vector product (two rows per work-item, 500
  // work-items: one work-group, so one core, when the runtime chooses),
  // and a lone MaxPool: both launched in groups, and still right.
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1,96] x, float[1000,96] w, float[1000] b, float[1,4,19,19] im) => (float[1,1000] y, float[1,4,9,9] p) {
  y = Gemm <transB = 1> (x, w, b)
  p = MaxPool <kernel_shape = [3, 3], strides = [2, 2]> (im)
}
)");
  const std::vector<codegen::KernelGroup> groups = codegen::singleNodeGroups(g);
  REQUIRE(groups.size() == 2);
  for (const codegen::KernelGroup& group : groups) {
    Expected<codegen::KernelSource> k = codegen::emitKernel(g, group.nodes, "", ops->catalog, group.name, "", options);
    REQUIRE_MESSAGE(k.ok(), test::why(k));
    INFO(k->name << ": " << k->globalSize << " work-items");
    REQUIRE(k->localSize > 0);
    CHECK(k->globalSize % k->localSize == 0);
    CHECK(k->globalSize / k->localSize >= 8);
    codegen::KernelOptions runtimeChooses = options;
    runtimeChooses.spreadGroups = 0;
    Expected<codegen::KernelSource> left = codegen::emitKernel(g, group.nodes, "", ops->catalog, group.name, "", runtimeChooses);
    REQUIRE(left.ok());
    CHECK(left->localSize == 0);
  }
  std::vector<Tensor> inputs = {randomTensor({1, 96}, 1), randomTensor({1000, 96}, 2), randomTensor({1000}, 3),
                                randomTensor({1, 4, 19, 19}, 4)};
  runAndCheck(g, groups, ops->catalog, inputs, test::run(g, inputs), options, 1e-5f);
}

TEST_CASE("row reductions with fused prologues match the interpreter") {
  std::unique_ptr<RuleSet> core = test::loadDefaultPacks();
  Expected<Target> target = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  REQUIRE(target.ok());
  // Residual add + LayerNorm, and scale + mask + softmax: the core pack's
  // row_reduce rules; rows longer than the work-group (100 > 64).
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[6,100] x, float[6,100] skip, float[100] gamma, float[100] beta, float[6,100] mask, float scale = {0.125})
  => (float[6,100] y, float[6,100] p, float[6,1] m) {
  r = Add (x, skip)
  y = LayerNormalization <epsilon = 0.001> (r, gamma, beta)
  s = Mul (x, scale)
  a = Add (s, mask)
  p = Softmax <axis = -1> (a)
  m = ReduceMean <axes = [-1]> (x)
}
)");
  std::vector<Tensor> inputs = {randomTensor({6, 100}, 1), randomTensor({6, 100}, 2), randomTensor({100}, 3),
                                randomTensor({100}, 4), randomTensor({6, 100}, 5)};
  std::vector<Tensor> reference = test::run(g, inputs);
  Plan plan = planFusion(g, *core, target.value(), codegen::kernelFamilies());
  std::vector<codegen::KernelGroup> groups = codegen::planGroups(plan);
  CHECK(groups.size() == 3);  // add+layernorm, mul+add+softmax, reducemean
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), g, groups, core->catalog, inputs);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  CHECK(run->kernelTimes.size() == 3);
  for (size_t i = 0; i < reference.size(); ++i) test::checkClose(run->outputs[i], reference[i], 1e-4f);
  // Every one of them is valid SPIR-V.
  for (const Group& grp : plan.groups) {
    Expected<codegen::KernelSource> k = codegen::emitRowReduce(g, grp.nodes, core->catalog, grp.name, grp.name);
    REQUIRE_MESSAGE(k.ok(), test::why(k));
    INFO(k->source);
    Expected<codegen::SpirvModule> spv = codegen::compileToSpirv(k->source, k->name);
    CHECK_MESSAGE(spv.ok(), test::why(spv));
  }
}

TEST_CASE("lone row reductions, a work-item per row, match the interpreter") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // Rows of 49 (three vectors and a tail), 16 (vectors only) and 5 (a tail
  // only); values up to 1e30 and infinities for the extremes.
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2,3,7,7] x, float[5,16] r, float[4,5] t)
  => (float[2,3,1,1] gap, float[2,3,1,1] gmp, float[5,1] sum, float[5,1] l2, float[4,1] mn, float[4,1] mean,
      float[4,1] sq) {
  axes = Constant <value = int64[1] {-1}> ()
  gap = GlobalAveragePool (x)
  gmp = GlobalMaxPool (x)
  sum = ReduceSum <keepdims = 1> (r, axes)
  l2 = ReduceL2 <axes = [-1]> (r)
  mn = ReduceMin <axes = [-1]> (t)
  mean = ReduceMean <axes = [-1]> (t)
  sq = ReduceSumSquare <axes = [-1]> (t)
}
)");
  std::vector<Tensor> inputs = {randomTensor({2, 3, 7, 7}, 81), randomTensor({5, 16}, 82), randomTensor({4, 5}, 83)};
  const float specials[] = {INFINITY, -INFINITY, 1e30f, -1e30f};
  // Specials in the first two planes; the last all below zero (its maximum is no 0).
  for (int64_t i = 0; i < 98; i += 23) inputs[0].data<float>()[i] = specials[(i / 23) % 4];
  for (int64_t i = 5 * 49; i < 6 * 49; ++i) inputs[0].data<float>()[i] = -2.0f - inputs[0].data<float>()[i];
  inputs[2].data<float>()[7] = -INFINITY;
  const std::vector<Tensor> reference = test::run(g, inputs);
  std::vector<codegen::KernelGroup> groups;
  for (NodeRef n : g.nodes())
    if (g.node(n).op != "Constant") groups.emplace_back(std::vector<NodeRef>{n}, "k" + std::to_string(groups.size()), "", "row_reduce");
  for (bool perWorkItem : {true, false}) {
    INFO("a work-item per row: " << perWorkItem);
    for (const codegen::KernelGroup& grp : groups) {
      Expected<codegen::KernelSource> k = codegen::emitRowReduce(g, grp.nodes, ops->catalog, grp.name, grp.name, perWorkItem);
      REQUIRE_MESSAGE(k.ok(), test::why(k));
      CHECK((k->source.find("One work-item per row") != std::string::npos) == perWorkItem);
      CHECK_MESSAGE(codegen::compileToSpirv(k->source, k->name).ok(), k->source);
    }
    codegen::KernelOptions options;
    options.rowReducePerWorkItem = perWorkItem;
    runAndCheck(g, groups, ops->catalog, inputs, reference, options, 1e-5f);
  }
}

TEST_CASE("normalizations a work-item per row (CPUs) compute as float vectors and match the interpreter") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // Rows of 48 (16 lanes), 40 (8) and 64 (16), kept in registers, 100 (4)
  // and 272 (16), too many vectors for registers, and 30 (no whole
  // vectors: the work-group kernel). Residual add + LayerNorm with its residual read
  // outside (written too), scale + broadcast mask (some -inf) + softmax,
  // a lone LogSoftmax, and LayerNorm's mean and 1/stddev results. 192
  // rows interleave three to a work-item, 128 rows two, 5 rows one.
  for (auto [n, rows] : std::vector<std::pair<int64_t, int64_t>>{{48, 192}, {40, 5}, {64, 128}, {100, 192}, {272, 128}, {30, 5}}) {
    INFO("row length " << n << ", " << rows << " rows");
    const std::string N = std::to_string(n), R = std::to_string(rows);
    Graph g = test::parse("<ir_version: 8, opset_import: [\"\" : 17]>\n"
                          "g (float[" + R + "," + N + "] x, float[" + R + "," + N + "] a, float[" + N + "] gamma, float[" + N +
                          "] beta, float[1," + N + "] mask, float scale = {0.125})\n"
                          "  => (float[" + R + "," + N + "] y, float[" + R + "," + N + "] res, float[" + R + "," + N + "] p, float[" + R +
                          "," + N + "] lp, float[" + R + "," + N + "] z, float[" + R + ",1] mu, float[" + R + ",1] inv) {\n"
                          "  r = Add (x, a)\n  y = LayerNormalization <epsilon = 0.001> (r, gamma, beta)\n"
                          "  res = Mul (r, scale)\n"
                          "  s = Mul (x, scale)\n  m = Add (s, mask)\n  p = Softmax <axis = -1> (m)\n"
                          "  lp = LogSoftmax <axis = -1> (a)\n"
                          "  z, mu, inv = LayerNormalization <axis = -1> (x, gamma)\n}\n");
    std::vector<Tensor> inputs = {randomTensor({rows, n}, 1), randomTensor({rows, n}, 2), randomTensor({n}, 3),
                                  randomTensor({n}, 4), randomTensor({1, n}, 5)};
    for (int64_t j = 3; j < n; j += 7) inputs[4].data<float>()[j] = -INFINITY;
    inputs[1].data<float>()[n + 2] = 80.0f;  // exp would overflow without the row's maximum taken out
    const std::vector<Tensor> reference = test::run(g, inputs);
    auto node = [&](const char* result) { return *g.producer(*g.findValue(result)); };
    std::vector<codegen::KernelGroup> groups = {
        codegen::KernelGroup({node("r"), node("y")}, "addln", "", "row_reduce"),
        codegen::KernelGroup({node("res")}, "residual"),
        codegen::KernelGroup({node("s"), node("m"), node("p")}, "softmax", "", "row_reduce"),
        codegen::KernelGroup({node("lp")}, "logsoftmax", "", "row_reduce"),
        codegen::KernelGroup({node("z")}, "stats", "", "row_reduce")};
    for (const codegen::KernelGroup& grp : groups) {
      if (grp.name == "residual") continue;
      Expected<codegen::KernelSource> k = codegen::emitRowReduce(g, grp.nodes, ops->catalog, grp.name, grp.name, true);
      REQUIRE_MESSAGE(k.ok(), test::why(k));
      INFO(k->source);
      CHECK((k->source.find("computed as float") != std::string::npos) == (n % 4 == 0));
      CHECK((k->source.find("kept in registers") != std::string::npos) == (n == 48 || n == 40 || n == 64));
      if (n % 4 == 0)
        CHECK((k->source.find(rows == 192 ? "One work-item per 3 rows" : rows == 128 ? "One work-item per 2 rows" : "One work-item per row of") !=
               std::string::npos));
      if (grp.name == "addln") CHECK(k->outputs.size() == 2u);  // the residual too
      if (grp.name == "stats") CHECK(k->outputs.size() == 3u);
      CHECK_MESSAGE(codegen::compileToSpirv(k->source, k->name).ok(), k->source);
    }
    codegen::KernelOptions options;
    options.rowReducePerWorkItem = true;
    CHECK(runAndCheck(g, groups, ops->catalog, inputs, reference, options, 1e-4f).kernelTimes.size() == groups.size());
  }
}

TEST_CASE("a row reduction whose prologue result is read outside the group writes it too (pre-LN residual)") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // Rows held in registers (48) and rows walked again in each pass (2000 >
  // 64 work-items x 16 registers).
  for (int64_t n : {48, 2000}) {
    INFO("row length " << n);
    const std::string len = std::to_string(n);
    Graph g = test::parse("<ir_version: 8, opset_import: [\"\" : 17]>\n"
                          "g (float[3," + len + "] x, float[3," + len + "] a, float[" + len + "] gamma) => (float[3," + len +
                          "] y) {\n  r = Add (x, a)\n  n = LayerNormalization <axis = -1> (r, gamma)\n  y = Add (r, n)\n}\n");
    std::vector<Tensor> inputs = {randomTensor({3, n}, 1), randomTensor({3, n}, 2), randomTensor({n}, 3)};
    Expected<std::vector<NodeRef>> order = g.topologicalOrder();
    REQUIRE(order.ok());
    const std::vector<NodeRef> group = {order.value()[0], order.value()[1]};  // Add, LayerNormalization
    Expected<codegen::KernelSource> k = codegen::emitRowReduce(g, group, ops->catalog, "preln", "preln");
    REQUIRE_MESSAGE(k.ok(), test::why(k));
    REQUIRE(k->outputs.size() == 2);  // the normalized row and the residual
    CHECK(g.value(k->outputs[1]).name == "r");
    // Hand-computed oracle: r = x + a; y = r + (r - mean) / sqrt(var + 1e-5) * gamma.
    Tensor want(DType::Float32, {3, n});
    for (int64_t row = 0; row < 3; ++row) {
      std::vector<double> r(static_cast<size_t>(n));
      double mean = 0, var = 0;
      for (int64_t j = 0; j < n; ++j) {
        r[j] = double(inputs[0].data<float>()[row * n + j]) + inputs[1].data<float>()[row * n + j];
        mean += r[j] / double(n);
      }
      for (int64_t j = 0; j < n; ++j) var += (r[j] - mean) * (r[j] - mean) / double(n);
      for (int64_t j = 0; j < n; ++j)
        want.data<float>()[row * n + j] =
            float(r[j] + (r[j] - mean) / std::sqrt(var + 1e-5) * inputs[2].data<float>()[j]);
    }
    std::vector<codegen::KernelGroup> groups = {codegen::KernelGroup(group, "preln", "", "row_reduce"),
                                                codegen::KernelGroup({order.value()[2]}, "residual")};
    Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), g, groups, ops->catalog, inputs);
    REQUIRE_MESSAGE(run.ok(), test::why(run));
    CHECK(run->kernelTimes.size() == 2);
    test::checkClose(run->outputs[0], want, 1e-4f);
  }
}

TEST_CASE("kernel families refuse what they cannot build, with the reason") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  Expected<Target> target = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  REQUIRE(target.ok());
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[4,16] x, float[16] gamma) => (float[16,4] y, float[4,16] e) {
  e = Exp (x)
  n = LayerNormalization <axis = -1> (e, gamma)
  y = Transpose (n)
}
)");
  Expected<std::vector<NodeRef>> order = g.topologicalOrder();
  REQUIRE(order.ok());
  const std::vector<NodeRef> all = order.value();
  const KernelFamilies& families = codegen::kernelFamilies();
  auto reason = [&](const char* family, std::vector<NodeRef> group) {
    Status st = families.find(family)->canEmit(g, group, ops->catalog, target.value());
    return st ? std::string("ok") : st.error().message;
  };
  CHECK(reason("row_reduce", {all[0], all[1]}) == "ok");  // `e` is written as the row is loaded
  CHECK(reason("row_reduce", all) == "it does not end in a reduction over the innermost axes");
  CHECK(reason("pointwise", {all[0], all[1]}) ==
        "it has an op that is neither elementwise nor broadcast with scalar semantics, nor data movement before them");
  CHECK(reason("index_map", {all[1], all[2]}) == "it has an op that is not data movement");
  CHECK(reason("gemm_epilogue", {all[0]}) == "it does not start with a MatMul or Gemm");
  // A target with real local memory (the row reduction's tree; where it
  // is emulated, a CPU's work-item takes the row alone, without it), too
  // little of it.
  Target tiny = target.value();
  tiny.localMemBytes = 64;
  std::erase(tiny.features, "local_mem_emulated");
  std::erase(tiny.features, "cpu");
  Status st = families.find("row_reduce")->canEmit(g, {all[0], all[1]}, ops->catalog, tiny);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message == "the kernel needs 256 bytes of local memory; the target has 64");
  // Single nodes: the first family that builds them.
  Expected<const KernelFamily*> single = families.select(g, {all[2]}, ops->catalog, target.value());
  REQUIRE(single.ok());
  CHECK(single.value()->name() == "index_map");
}

TEST_CASE("data movement kernels copy by bits and are valid SPIR-V") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2,3,4] x, int64[2] idx = {2, -1}, int64[6] pads = {0, 1, 0, 0, 1, 0}) => (float[4,3,2] t, float[2,2,4] gth,
   float[4,3,4] cat, float[2,5,4] pad) {
  t = Transpose (x)
  gth = Gather <axis = 1> (x, idx)
  cat = Concat <axis = 0> (x, x)
  pad = Pad (x, pads)
}
)");
  std::vector<Tensor> inputs = {randomTensor({2, 3, 4}, 9)};
  std::vector<Tensor> reference = test::run(g, inputs);
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), g, codegen::singleNodeGroups(g), ops->catalog, inputs);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  for (size_t i = 0; i < reference.size(); ++i) CHECK(run->outputs[i] == reference[i]);  // bit-exact
  for (NodeRef n : g.nodes()) {
    Expected<codegen::KernelSource> k = codegen::emitIndexMap(g, {n}, ops->catalog, "k_" + g.node(n).op.str(), g.node(n).op.str());
    REQUIRE_MESSAGE(k.ok(), test::why(k));
    INFO(k->source);
    Expected<codegen::SpirvModule> spv = codegen::compileToSpirv(k->source, k->name);
    CHECK_MESSAGE(spv.ok(), test::why(spv));
  }
}

TEST_CASE("a chain of data-movement ops is one index map: each element moves once, from input to result") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // ShuffleNet's channel shuffle of two branches, split in two; and a
  // Gather, a reversed strided Slice and a Pad composed.
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1,3,2,5] a, float[1,3,2,5] b, float[4,6] x, int64[3] idx)
  => (float[1,3,2,5] lo, float[1,3,2,5] hi, float[4,4] padded) {
  s5 = Constant <value = int64[5] {1, 2, 3, 2, 5}> ()
  s4 = Constant <value = int64[4] {1, 6, 2, 5}> ()
  cat = Concat <axis = 1> (a, b)
  r = Reshape (cat, s5)
  t = Transpose <perm = [0, 2, 1, 3, 4]> (r)
  f = Reshape (t, s4)
  sz = Constant <value = int64[2] {3, 3}> ()
  lo, hi = Split <axis = 1> (f, sz)
  gth = Gather <axis = 0> (x, idx)
  st = Constant <value = int64[1] {5}> ()
  en = Constant <value = int64[1] {0}> ()
  ax = Constant <value = int64[1] {1}> ()
  sp = Constant <value = int64[1] {-2}> ()
  sl = Slice (gth, st, en, ax, sp)
  pd = Constant <value = int64[4] {1, 0, 0, 1}> ()
  padded = Pad (sl, pd)
}
)");
  std::vector<Tensor> inputs = {randomTensor({1, 3, 2, 5}, 31), randomTensor({1, 3, 2, 5}, 32), randomTensor({4, 6}, 33),
                                test::ints({3}, {3, -4, 1})};
  auto group = [&](std::initializer_list<const char*> results) {
    std::vector<NodeRef> out;
    for (const char* r : results) out.push_back(*g.producer(*g.findValue(r)));
    return out;
  };
  const std::vector<NodeRef> shuffle = group({"cat", "r", "t", "f", "lo"}), gather = group({"gth", "sl", "padded"});
  for (const std::vector<NodeRef>* members : {&shuffle, &gather}) {
    Expected<codegen::KernelSource> k = codegen::emitIndexMap(g, *members, ops->catalog, "chain", "chain");
    REQUIRE_MESSAGE(k.ok(), test::why(k));
    INFO(k->source);
    // Reads only the group's inputs and writes only its results.
    CHECK(k->inputs.size() == 2u);
    CHECK(k->outputs.size() == (members == &shuffle ? 2u : 1u));
    Expected<codegen::SpirvModule> spv = codegen::compileToSpirv(k->source, k->name);
    CHECK_MESSAGE(spv.ok(), test::why(spv));
  }
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(
      device(), g, {codegen::KernelGroup(shuffle, "", "", "index_map"), codegen::KernelGroup(gather, "", "", "index_map")},
      ops->catalog, inputs);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  CHECK(run->kernelTimes.size() == 2);
  // By hand: shuffled channel k is channel k / 2 of `a` (k even) or `b`
  // (k odd); `lo` holds channels 0..2, `hi` 3..5.
  for (int64_t k = 0; k < 6; ++k)
    for (int64_t e = 0; e < 10; ++e) {
      const float want = inputs[k % 2].data<float>()[(k / 2) * 10 + e];
      CHECK(run->outputs[k < 3 ? 0 : 1].data<float>()[(k % 3) * 10 + e] == want);
    }
  // By hand: rows x[3], x[0], x[1] (index -4 wraps), columns 5, 3, 1, one
  // row of zeros before and a column of zeros after.
  const int64_t rows[] = {3, 0, 1}, cols[] = {5, 3, 1};
  const Tensor& padded = run->outputs[2];
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t c = 0; c < 4; ++c) {
      const float want = r == 0 || c == 3 ? 0.0f : inputs[2].data<float>()[rows[r - 1] * 6 + cols[c]];
      CHECK(padded.data<float>()[r * 4 + c] == want);
    }
}

namespace {

/// Runs `kernels` (one per group) in their CPU forms (a row per work-item
/// step) and checks every output bit for bit against `reference`.
void checkRowKernels(const Graph& g, const std::vector<codegen::KernelGroup>& kernels, const OpCatalog& catalog,
                     const std::vector<Tensor>& inputs, const std::vector<Tensor>& reference) {
  codegen::KernelOptions options;
  options.stridedRowCopies = true;
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), g, kernels, catalog, inputs, options);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  CHECK(run->kernelTimes.size() == kernels.size());
  for (size_t i = 0; i < reference.size(); ++i) {
    INFO(g.value(g.outputs()[i]).name);
    CHECK(run->outputs[i] == reference[i]);  // bit-exact
  }
}

}  // namespace

TEST_CASE("views copied a row at a time (CPUs) move the same bits as the element-per-work-item kernels") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // Rows of 3 (two per work-item, the last work-item's second past the
  // end), a strided Slice whose dims merge into rows of 5 at stride 2, a
  // head split (Reshape then Transpose, one group), 64-bit elements, a
  // Slice of whole rows (one contiguous run, cut for more work-items), and
  // a reversed Slice, which is not a strided view and keeps the element form.
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[9,15,3] x, float[4,10,12] z, float[1,6,8] h, int64[5,7] n, float[4,600] big)
  => (float[15,9,3] t, float[2,10,5] sl, float[1,2,6,4] heads, int64[7,5] nt, float[4,10,3] rev, float[2,600] rows) {
  t = Transpose <perm = [1, 0, 2]> (x)
  st = Constant <value = int64[2] {1, 3}> ()
  en = Constant <value = int64[2] {3, 12}> ()
  ax = Constant <value = int64[2] {0, 2}> ()
  sp = Constant <value = int64[2] {1, 2}> ()
  sl = Slice (z, st, en, ax, sp)
  s4 = Constant <value = int64[4] {1, 6, 2, 4}> ()
  r = Reshape (h, s4)
  heads = Transpose <perm = [0, 2, 1, 3]> (r)
  nt = Transpose (n)
  rst = Constant <value = int64[1] {11}> ()
  ren = Constant <value = int64[1] {0}> ()
  rax = Constant <value = int64[1] {2}> ()
  rsp = Constant <value = int64[1] {-4}> ()
  rev = Slice (z, rst, ren, rax, rsp)
  bst = Constant <value = int64[1] {1}> ()
  ben = Constant <value = int64[1] {3}> ()
  rows = Slice (big, bst, ben)
}
)");
  std::vector<int64_t> counting(35);
  for (size_t i = 0; i < counting.size(); ++i) counting[i] = (int64_t{1} << 40) + static_cast<int64_t>(i);
  std::vector<Tensor> inputs = {randomTensor({9, 15, 3}, 41), randomTensor({4, 10, 12}, 42), randomTensor({1, 6, 8}, 43),
                                test::ints({5, 7}, counting), randomTensor({4, 600}, 44)};
  std::vector<Tensor> reference = test::run(g, inputs);
  auto group = [&](std::initializer_list<const char*> results) {
    std::vector<NodeRef> out;
    for (const char* r : results) out.push_back(*g.producer(*g.findValue(r)));
    return out;
  };
  const std::vector<std::vector<NodeRef>> groups = {group({"t"}),  group({"sl"}),   group({"r", "heads"}),
                                                    group({"nt"}), group({"rows"}), group({"rev"})};
  std::vector<codegen::KernelGroup> kernels;
  for (const std::vector<NodeRef>& members : groups) {
    Expected<codegen::KernelSource> k = codegen::emitIndexMap(g, members, ops->catalog, "rows", "rows", true);
    REQUIRE_MESSAGE(k.ok(), test::why(k));
    INFO(k->source);
    const bool rows = k->source.find("one row) at a time") != std::string::npos;
    CHECK(rows == (&members != &groups.back()));
    if (&members == &groups[0]) CHECK(k->source.find("2 row(s) per work-item") != std::string::npos);
    if (&members == &groups[1]) CHECK(k->source.find("copied 5 elements") != std::string::npos);
    // Two rows of 600 merge into one of 1200, cut again at 600.
    if (&members == &groups[4]) CHECK(k->source.find("copied 600 elements") != std::string::npos);
    Expected<codegen::SpirvModule> spv = codegen::compileToSpirv(k->source, k->name);
    CHECK_MESSAGE(spv.ok(), test::why(spv));
    kernels.emplace_back(members, "", "", "index_map");
  }
  checkRowKernels(g, kernels, ops->catalog, inputs, reference);
}

TEST_CASE("chains of data movement whose results are runs of their inputs copy a run per work-item (CPUs)") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // ShuffleNet's channel shuffle ending in two Slices (rows of 12); the
  // same on 48x48 maps ending in a Split (runs of 2304, copied in two
  // pieces); a Concat then a Slice of every other channel (a step along
  // an outer axis keeps the runs); and a Concat then a Slice of the
  // innermost axis, whose runs are single elements: the element form.
  // GPT-2's packed projection split along its last axis into Q, K and V
  // (rows of 16), Q's heads split off (rows of 8); a Concat along the
  // last axis of pieces of 8 and 16 (rows of 8), flattened; a Split of 20
  // into 8 and 12 (rows of 4, too short: the element form), flattened.
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1,4,3,4] a, float[1,4,3,4] b, float[1,1,48,48] p, float[1,1,48,48] q, float[1,4,48] qkv, float[1,2,8] c1,
   float[1,2,16] c2, float[1,3,20] u)
  => (float[1,4,3,4] lo, float[1,4,3,4] hi, float[1,1,48,48] plo, float[1,1,48,48] phi, float[1,4,3,4] odd,
      float[1,8,3,2] cut, float[1,4,16] pk, float[1,4,16] pv, float[1,2,4,8] qh, float[1,48] ccr, float[1,24] u0r,
      float[1,3,12] u1) {
  s5 = Constant <value = int64[5] {1, 2, 4, 3, 4}> ()
  s4 = Constant <value = int64[4] {1, 8, 3, 4}> ()
  cat = Concat <axis = 1> (a, b)
  r = Reshape (cat, s5)
  t = Transpose <perm = [0, 2, 1, 3, 4]> (r)
  f = Reshape (t, s4)
  z = Constant <value = int64[1] {0}> ()
  m = Constant <value = int64[1] {4}> ()
  e = Constant <value = int64[1] {8}> ()
  one = Constant <value = int64[1] {1}> ()
  two = Constant <value = int64[1] {2}> ()
  lo = Slice (f, z, m, one)
  hi = Slice (f, m, e, one)
  p5 = Constant <value = int64[5] {1, 2, 1, 48, 48}> ()
  p4 = Constant <value = int64[4] {1, 2, 48, 48}> ()
  pc = Concat <axis = 1> (p, q)
  pr = Reshape (pc, p5)
  pt = Transpose <perm = [0, 2, 1, 3, 4]> (pr)
  pf = Reshape (pt, p4)
  halves = Constant <value = int64[2] {1, 1}> ()
  plo, phi = Split <axis = 1> (pf, halves)
  cat2 = Concat <axis = 1> (a, b)
  odd = Slice (cat2, one, e, one, two)
  cat3 = Concat <axis = 1> (a, b)
  three = Constant <value = int64[1] {3}> ()
  last = Constant <value = int64[1] {3}> ()
  cut = Slice (cat3, one, three, last)
  thirds = Constant <value = int64[3] {16, 16, 16}> ()
  pq, pk, pv = Split <axis = 2> (qkv, thirds)
  heads = Constant <value = int64[4] {1, 4, 2, 8}> ()
  qr = Reshape (pq, heads)
  qh = Transpose <perm = [0, 2, 1, 3]> (qr)
  cc = Concat <axis = 2> (c1, c2)
  flat48 = Constant <value = int64[2] {1, 48}> ()
  ccr = Reshape (cc, flat48)
  uneven = Constant <value = int64[2] {8, 12}> ()
  u0, u1 = Split <axis = -1> (u, uneven)
  flat24 = Constant <value = int64[2] {1, 24}> ()
  u0r = Reshape (u0, flat24)
}
)");
  std::vector<Tensor> inputs = {randomTensor({1, 4, 3, 4}, 51), randomTensor({1, 4, 3, 4}, 52), randomTensor({1, 1, 48, 48}, 53),
                                randomTensor({1, 1, 48, 48}, 54), randomTensor({1, 4, 48}, 55), randomTensor({1, 2, 8}, 56),
                                randomTensor({1, 2, 16}, 57), randomTensor({1, 3, 20}, 58)};
  std::vector<Tensor> reference = test::run(g, inputs);
  auto group = [&](std::initializer_list<const char*> results) {
    std::vector<NodeRef> out;
    for (const char* r : results) out.push_back(*g.producer(*g.findValue(r)));
    return out;
  };
  const std::vector<std::vector<NodeRef>> groups = {group({"cat", "r", "t", "f", "lo", "hi"}),
                                                    group({"pc", "pr", "pt", "pf", "plo"}), group({"cat2", "odd"}),
                                                    group({"pk", "qr", "qh"}), group({"cc", "ccr"}),
                                                    group({"u0", "u0r"}), group({"cat3", "cut"})};
  std::vector<codegen::KernelGroup> kernels;
  for (const std::vector<NodeRef>& members : groups) {
    Expected<codegen::KernelSource> k = codegen::emitIndexMap(g, members, ops->catalog, "chain", "chain", true);
    REQUIRE_MESSAGE(k.ok(), test::why(k));
    INFO(k->source);
    const bool runs = k->source.find("copies a run of one result") != std::string::npos;
    CHECK(runs == (&members != &groups.back() && &members != &groups[5]));
    if (&members == &groups[0]) CHECK(k->globalSize == 8u);  // two results, four runs of 12 each
    if (&members == &groups[1]) CHECK(k->globalSize == 4u);   // two results, one run of 2304 each, two pieces per run
    if (&members == &groups[3]) CHECK(k->globalSize == 16u);  // K and V four rows of 16 each, Q's heads eight of 8
    if (&members == &groups[4]) CHECK(k->globalSize == 6u);   // rows of 8: 2 x 24 / 8
    Expected<codegen::SpirvModule> spv = codegen::compileToSpirv(k->source, k->name);
    CHECK_MESSAGE(spv.ok(), test::why(spv));
    kernels.emplace_back(members, "", "", "index_map");
  }
  checkRowKernels(g, kernels, ops->catalog, inputs, reference);
}

TEST_CASE("a pointwise kernel reads data movement before it through the index map, never storing it") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // DenseNet's Concat -> BatchNorm (as a multiply-add) -> ReLU, and a
  // transpose of a reshape feeding a Sigmoid.
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1,1,2,3] p, float[1,2,2,3] q, float[3,1,1] s, float[6,2] x) => (float[1,3,2,3] y, float[3,4] z) {
  c = Concat <axis = 1> (p, q)
  m = Mul (c, s)
  y = Relu (m)
  sh = Constant <value = int64[2] {4, 3}> ()
  r = Reshape (x, sh)
  t = Transpose <perm = [1, 0]> (r)
  z = Neg (t)
}
)");
  std::vector<Tensor> inputs = {randomTensor({1, 1, 2, 3}, 41), randomTensor({1, 2, 2, 3}, 42),
                                test::floats({3, 1, 1}, {2.0f, -1.0f, 0.5f}), randomTensor({6, 2}, 43)};
  auto group = [&](std::initializer_list<const char*> results) {
    std::vector<NodeRef> out;
    for (const char* r : results) out.push_back(*g.producer(*g.findValue(r)));
    return out;
  };
  const std::vector<NodeRef> dense = group({"c", "m", "y"}), shuffle = group({"r", "t", "z"});
  for (const std::vector<NodeRef>* members : {&dense, &shuffle}) {
    Expected<codegen::KernelSource> k = codegen::emitPointwise(g, *members, ops->catalog, "k", "k");
    REQUIRE_MESSAGE(k.ok(), test::why(k));
    INFO(k->source);
    // The movement's inputs are read; its results are neither read nor written.
    CHECK(k->outputs.size() == 1u);
    for (ValueId v : k->inputs) CHECK_FALSE(g.producer(v).has_value());
    Expected<codegen::SpirvModule> spv = codegen::compileToSpirv(k->source, k->name);
    CHECK_MESSAGE(spv.ok(), test::why(spv));
  }
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(
      device(), g, {codegen::KernelGroup(dense, "", "", "pointwise"), codegen::KernelGroup(shuffle, "", "", "pointwise")},
      ops->catalog, inputs);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  CHECK(run->kernelTimes.size() == 2);
  // By hand: channel 0 is p scaled by 2, channels 1 and 2 are q's scaled by
  // -1 and 0.5, then ReLU; z[i][j] = -x's element j * 3 + i.
  const float scale[] = {2.0f, -1.0f, 0.5f};
  for (int64_t ch = 0; ch < 3; ++ch)
    for (int64_t e = 0; e < 6; ++e) {
      const float in = ch == 0 ? inputs[0].data<float>()[e] : inputs[1].data<float>()[(ch - 1) * 6 + e];
      CHECK(run->outputs[0].data<float>()[ch * 6 + e] == std::max(in * scale[ch], 0.0f));
    }
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) CHECK(run->outputs[1].data<float>()[i * 4 + j] == -inputs[3].data<float>()[j * 3 + i]);
  // A Concat along an inner axis (its inputs interleave in the result):
  // each work-group still reads one input.
  Graph inner = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[3,70] a, float[3,5] b) => (float[3,75] y) {
  c = Concat <axis = -1> (a, b)
  y = Neg (c)
}
)");
  Expected<std::vector<NodeRef>> all = inner.topologicalOrder();
  REQUIRE(all.ok());
  Expected<codegen::KernelSource> segmented = codegen::emitPointwise(inner, all.value(), ops->catalog, "k", "k");
  REQUIRE_MESSAGE(segmented.ok(), test::why(segmented));
  CHECK(segmented->localSize == 64u);
  const std::vector<Tensor> ab = {randomTensor({3, 70}, 44), randomTensor({3, 5}, 45)};
  Expected<codegen::DeviceRun> cat = codegen::runOnDevice(device(), inner, {codegen::KernelGroup(all.value(), "", "", "pointwise")},
                                                          ops->catalog, ab);
  REQUIRE_MESSAGE(cat.ok(), test::why(cat));
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 75; ++c) {
      const float want = c < 70 ? ab[0].data<float>()[r * 70 + c] : ab[1].data<float>()[r * 5 + c - 70];
      CHECK(cat->outputs[0].data<float>()[r * 75 + c] == -want);
    }
  // A movement result read outside the group cannot be left unstored.
  Graph h = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2,3] x) => (float[3,2] t, float[3,2] y) {
  t = Transpose (x)
  y = Exp (t)
}
)");
  Expected<std::vector<NodeRef>> order = h.topologicalOrder();
  REQUIRE(order.ok());
  Expected<codegen::KernelSource> refused = codegen::emitPointwise(h, order.value(), ops->catalog, "k", "k");
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("is a graph output") != std::string::npos);
}

TEST_CASE("pointwise kernels with broadcast operands and Concats compute rows in a loop and match the interpreter") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // Per-channel scale and shift (rows of 7x7, and of 3000 cut in pieces),
  // a bias along the last axis, an operand that runs along the rows but is
  // broadcast across channels, a scalar; a Concat at batch 2 with rows of 9
  // before a per-channel multiply, and one whose rows are cut in pieces.
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2,5,7,7] x, float[5,1,1] s, float[1,5,1,1] b, float[1,1,7,7] m, float[1,4,3000] big, float[4,1] bs,
   float[3,11] rowx, float[11] bias, float[2,2,3,3] p, float[2,3,3,3] q, float[5,1,1] cs,
   float[1,1,2100] u, float[1,2,2100] v, float[3,1] us)
  => (float[2,5,7,7] y, float[1,4,3000] z, float[3,11] w, float[2,5,3,3] cat, float[1,3,2100] ucat, float[2,5,3,3] lone) {
  x1 = Mul (x, s)
  x2 = Add (x1, b)
  x3 = Mul (x2, m)
  h = Constant <value = float {0.5}> ()
  x4 = Mul (x3, h)
  y = Relu (x4)
  z0 = Mul (big, bs)
  z = Abs (z0)
  w = Add (rowx, bias)
  c = Concat <axis = 1> (p, q)
  c1 = Mul (c, cs)
  cat = Relu (c1)
  uc = Concat <axis = 1> (u, v)
  ucat = Mul (uc, us)
  lone = Concat <axis = 1> (p, q)
}
)");
  const std::vector<Tensor> inputs = randomInputs(g, 51);
  const std::vector<Tensor> reference = test::run(g, inputs);
  auto group = [&](std::initializer_list<const char*> results) {
    std::vector<NodeRef> out;
    for (const char* r : results) out.push_back(*g.producer(*g.findValue(r)));
    return out;
  };
  const std::vector<std::vector<NodeRef>> groups = {
      group({"x1", "x2", "x3", "x4", "y"}), group({"z0", "z"}), group({"w"}), group({"c", "c1", "cat"}), group({"uc", "ucat"})};
  // Items: rows (or pieces of rows) of the trailing dims along which every operand runs or is constant.
  const size_t items[] = {2 * 5, 4 * 2, 3, 2 * 5, 3 * 2};
  std::vector<codegen::KernelGroup> kernels;
  for (size_t i = 0; i < groups.size(); ++i) {
    Expected<codegen::KernelSource> k = codegen::emitPointwise(g, groups[i], ops->catalog, "k", "k", true);
    REQUIRE_MESSAGE(k.ok(), test::why(k));
    INFO(k->source);
    CHECK(k->source.find("for (int j = ") != std::string::npos);
    CHECK(k->globalSize == items[i]);
    kernels.emplace_back(groups[i], "", "", "pointwise");
    // Not for GPUs (neighbouring work-items a row apart): one element each.
    Expected<codegen::KernelSource> gpu = codegen::emitPointwise(g, groups[i], ops->catalog, "k", "k");
    REQUIRE_MESSAGE(gpu.ok(), test::why(gpu));
    CHECK(gpu->source.find("for (int j = ") == std::string::npos);
  }
  codegen::KernelOptions cpu;
  cpu.stridedRowCopies = true;
  // A lone Concat (not written in place: its inputs are the model's) copies rows the same way.
  const std::vector<NodeRef> lone = group({"lone"});
  Expected<codegen::KernelSource> copy = codegen::emitIndexMap(g, lone, ops->catalog, "k", "k", true);
  REQUIRE_MESSAGE(copy.ok(), test::why(copy));
  CHECK(copy->source.find("for (int j = ") != std::string::npos);
  CHECK(copy->globalSize == 2 * 5);
  kernels.emplace_back(lone, "", "", "index_map");
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), g, kernels, ops->catalog, inputs, cpu);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  CHECK(run->kernelTimes.size() == groups.size() + 1);
  REQUIRE(run->outputs.size() == 6u);
  for (size_t i = 0; i < reference.size(); ++i) test::checkClose(run->outputs[i], reference[i], 1e-5f);
  // Splits copy runs of each result: GPT-2's Q, K and V (the last axis,
  // here at batch 2), and runs cut in pieces (the first axis of one dim).
  Graph split = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2,3,30] qkv, float[5000] v) => (float[2,3,10] q, float[2,3,12] k, float[2,3,8] w, float[2500] a, float[2500] b) {
  sz = Constant <value = int64[3] {10, 12, 8}> ()
  q, k, w = Split <axis = 2> (qkv, sz)
  halves = Constant <value = int64[2] {2500, 2500}> ()
  a, b = Split (v, halves)
}
)");
  const std::vector<Tensor> splitInputs = randomInputs(split, 71), splitReference = test::run(split, splitInputs);
  std::vector<codegen::KernelGroup> splits;
  for (NodeRef n : split.nodes()) {
    if (split.node(n).op != "Split") continue;
    Expected<codegen::KernelSource> k = codegen::emitIndexMap(split, {n}, ops->catalog, "k", "k", true);
    REQUIRE_MESSAGE(k.ok(), test::why(k));
    INFO(k->source);
    CHECK(k->source.find("for (int j = ") != std::string::npos);
    CHECK(k->globalSize == (split.node(n).outputs.size() == 3 ? 3u * 6 : 2u * 2));  // runs of each result (pieces of 1264)
    splits.emplace_back(std::vector<NodeRef>{n}, "", "", "index_map");
  }
  Expected<codegen::DeviceRun> splitRun = codegen::runOnDevice(device(), split, splits, ops->catalog, splitInputs, cpu);
  REQUIRE_MESSAGE(splitRun.ok(), test::why(splitRun));
  for (size_t i = 0; i < splitReference.size(); ++i) test::checkClose(splitRun->outputs[i], splitReference[i], 1e-6f);
  // Rows shorter than 8 keep one element per work-item.
  Graph narrow = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[4,6] x, float[4,1] s) => (float[4,6] y) {
  y = Mul (x, s)
}
)");
  Expected<std::vector<NodeRef>> all = narrow.topologicalOrder();
  REQUIRE(all.ok());
  Expected<codegen::KernelSource> k = codegen::emitPointwise(narrow, all.value(), ops->catalog, "k", "k", true);
  REQUIRE_MESSAGE(k.ok(), test::why(k));
  CHECK(k->source.find("for (int j = ") == std::string::npos);
  CHECK(k->globalSize == 24u);
}

TEST_CASE("pointwise kernels that call exp or erf compute float vectors on CPUs and match the interpreter") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // SiLU, exact GELU with its constants as scalars, a sigmoid gate scaled
  // per channel (an operand broadcast across the lanes' axis), a Tanh of
  // rows of 8 (float8); an innermost extent of 6, and a group without exp
  // or erf, keep the scalar form.
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2,3,64] x, float[] r2, float[] one, float[] half, float[1,5,16,16] c, float[5,1,1] s, float[3,8] t,
   float[4,6] odd, float[2,32] plain)
  => (float[2,3,64] silu, float[2,3,64] gelu, float[1,5,16,16] gate, float[3,8] th, float[4,6] e, float[2,32] p) {
  sg = Sigmoid (x)
  silu = Mul (x, sg)
  a = Div (x, r2)
  b = Erf (a)
  b1 = Add (b, one)
  d = Mul (x, b1)
  gelu = Mul (d, half)
  cs = Mul (c, s)
  gs = Sigmoid (cs)
  gate = Mul (gs, c)
  th = Tanh (t)
  e = Exp (odd)
  p = Relu (plain)
}
)");
  const std::vector<Tensor> inputs = randomInputs(g, 83);
  const std::vector<Tensor> reference = test::run(g, inputs);
  auto group = [&](std::initializer_list<const char*> results) {
    std::vector<NodeRef> out;
    for (const char* r : results) out.push_back(*g.producer(*g.findValue(r)));
    return out;
  };
  const std::vector<std::vector<NodeRef>> groups = {group({"sg", "silu"}), group({"a", "b", "b1", "d", "gelu"}),
                                                    group({"cs", "gs", "gate"}), group({"th"}), group({"e"}), group({"p"})};
  // Work-items: one per vector of 16 (8 for rows of 8); one per element in the scalar form.
  const size_t items[] = {2 * 3 * 64 / 16, 2 * 3 * 64 / 16, 5 * 16 * 16 / 16, 3, 4 * 6, 2 * 32};
  const bool vector[] = {true, true, true, true, false, false};
  std::vector<codegen::KernelGroup> kernels;
  for (size_t i = 0; i < groups.size(); ++i) {
    Expected<codegen::KernelSource> k = codegen::emitPointwise(g, groups[i], ops->catalog, "k", "k", true);
    REQUIRE_MESSAGE(k.ok(), test::why(k));
    INFO(k->source);
    CHECK((k->source.find("results per work-item along the innermost axis") != std::string::npos) == vector[i]);
    CHECK(k->globalSize == items[i]);
    kernels.emplace_back(groups[i], "", "", "pointwise");
    // Not for GPUs: one element per work-item.
    Expected<codegen::KernelSource> gpu = codegen::emitPointwise(g, groups[i], ops->catalog, "k", "k");
    REQUIRE_MESSAGE(gpu.ok(), test::why(gpu));
    CHECK(gpu->source.find("vstore") == std::string::npos);
  }
  codegen::KernelOptions cpu;
  cpu.stridedRowCopies = true;
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), g, kernels, ops->catalog, inputs, cpu);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  REQUIRE(run->outputs.size() == reference.size());
  for (size_t i = 0; i < reference.size(); ++i) test::checkClose(run->outputs[i], reference[i], 1e-5f);
}

TEST_CASE("erf, tanh and exp are within 1e-6 of the standard ones, relatively; a division by a constant multiplies") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // Rows of 64 (float16 vectors) and of 6 (one element per work-item):
  // both forms of the erf and tanh helpers, the rows of 6 on values around
  // 0 taken from the 64s. The rows of 64 are also divided by a constant
  // sqrt 2, and by a constant 0 (no reciprocal).
  std::vector<float> xs;
  for (int i = 0; i < 8 * 64 - 13; ++i) xs.push_back(-9.0f + 18.0f * static_cast<float>(i) / (8 * 64 - 14));
  for (float x : {0.0f, -0.0f, 1e-30f, -3e-5f, 1e-3f, 0.07f, 3.9f, 4.5f, INFINITY, -INFINITY, NAN, -1e-6f, -3000.0f})
    xs.push_back(x);
  const std::vector<float> rows6(xs.begin() + 226, xs.begin() + 226 + 8 * 6);  // -0.85 .. 0.85
  // exp over its whole range, past its overflow and underflow.
  std::vector<float> es;
  for (int i = 0; i < 8 * 64 - 11; ++i) es.push_back(-100.0f + 200.0f * static_cast<float>(i) / (8 * 64 - 12));
  for (float x : {88.72f, 88.73f, 88.75f, 89.5f, -86.9f, -87.3f, 0.0f, 1e-7f, INFINITY, -INFINITY, NAN}) es.push_back(x);
  Graph g;
  const ValueId x = g.addInput("x", TensorType::of(DType::Float32, {8, 64}));
  const ValueId x6 = g.addInput("x6", TensorType::of(DType::Float32, {8, 6}));
  const ValueId root2 = g.addConstant("root2", test::floats({}, {1.41421356f}));
  const ValueId zero = g.addConstant("zero", test::floats({1}, {0.0f}));
  const ValueId e = g.addValue("e", TensorType::of(DType::Float32, {8, 64}));
  const ValueId e6 = g.addValue("e6", TensorType::of(DType::Float32, {8, 6}));
  const ValueId h = g.addValue("h", TensorType::of(DType::Float32, {8, 64}));
  const ValueId z = g.addValue("z", TensorType::of(DType::Float32, {8, 64}));
  const ValueId xe = g.addInput("xe", TensorType::of(DType::Float32, {8, 64}));
  const ValueId ex = g.addValue("ex", TensorType::of(DType::Float32, {8, 64}));
  const ValueId th = g.addValue("th", TensorType::of(DType::Float32, {8, 64}));
  const ValueId th6 = g.addValue("th6", TensorType::of(DType::Float32, {8, 6}));
  const std::vector<NodeRef> erf = {g.addNode("Erf", {x}, {e})}, erf6 = {g.addNode("Erf", {x6}, {e6})},
                             halve = {g.addNode("Div", {x, root2}, {h})}, byZero = {g.addNode("Div", {x, zero}, {z})},
                             exp = {g.addNode("Exp", {xe}, {ex})}, tanh = {g.addNode("Tanh", {x}, {th})},
                             tanh6 = {g.addNode("Tanh", {x6}, {th6})};
  for (ValueId out : {e, e6, h, z, ex, th, th6}) g.addOutput(out);
  const std::vector<Tensor> inputs = {test::floats({8, 64}, xs), test::floats({8, 6}, rows6), test::floats({8, 64}, es)};
  const std::vector<Tensor> reference = test::run(g, inputs);

  Expected<codegen::KernelSource> vec = codegen::emitPointwise(g, erf, ops->catalog, "k", "k", true);
  Expected<codegen::KernelSource> scalar = codegen::emitPointwise(g, erf6, ops->catalog, "k", "k", true);
  Expected<codegen::KernelSource> div = codegen::emitPointwise(g, halve, ops->catalog, "k", "k", true);
  Expected<codegen::KernelSource> div0 = codegen::emitPointwise(g, byZero, ops->catalog, "k", "k", true);
  for (const Expected<codegen::KernelSource>* k : {&vec, &scalar, &div, &div0}) REQUIRE_MESSAGE(k->ok(), test::why(*k));
  CHECK(vec->source.find("fusec_erf16(") != std::string::npos);
  CHECK(scalar->source.find("fusec_erf16(") == std::string::npos);
  for (const std::vector<NodeRef>* t : {&tanh, &tanh6}) {  // not OpenCL's tanh, a library call
    Expected<codegen::KernelSource> k = codegen::emitPointwise(g, *t, ops->catalog, "k", "k", true);
    REQUIRE_MESSAGE(k.ok(), test::why(k));
    CHECK(k->source.find(t == &tanh ? "= (float16)(fusec_tanh16(" : "= (float)(fusec_tanh(") != std::string::npos);
  }
  // The statement computing the Div's result.
  auto divLine = [](const std::string& source) {
    const size_t end = source.find("// Div"), start = source.rfind('\n', end);
    return end == std::string::npos ? std::string() : source.substr(start, end - start);
  };
  CHECK_MESSAGE(divLine(div->source).find("* (0.707106769f)") != std::string::npos, div->source);
  CHECK_MESSAGE(divLine(div0->source).find(" / ") != std::string::npos, div0->source);

  codegen::KernelOptions cpu;
  cpu.stridedRowCopies = true;
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(
      device(), g,
      {codegen::KernelGroup(erf, "", "", "pointwise"), codegen::KernelGroup(erf6, "", "", "pointwise"),
       codegen::KernelGroup(halve, "", "", "pointwise"), codegen::KernelGroup(byZero, "", "", "pointwise"),
       codegen::KernelGroup(exp, "", "", "pointwise"), codegen::KernelGroup(tanh, "", "", "pointwise"),
       codegen::KernelGroup(tanh6, "", "", "pointwise")},
      ops->catalog, inputs, cpu);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  for (int out : {0, 1, 5, 6}) {  // erf, tanh: vectors and one element per work-item
    const Tensor& got = run->outputs[out];
    for (int64_t i = 0; i < got.numel(); ++i) {
      const double in = got.numel() == 48 ? rows6[i] : xs[i], want = out == 0 || out == 1 ? std::erf(in) : std::tanh(in),
                   y = got.scalarAt(i);
      INFO("output " << out << " of erf(" << in << ") or tanh = " << y << ", want " << want);
      if (std::isnan(in)) CHECK(std::isnan(y));
      else CHECK((std::abs(y - want) <= 1e-6 && std::abs(y - want) <= 1e-6 * std::abs(want) + 1e-37));
      // Exactly +-1 past saturation, so that 1 + f(x) is 0 for x far below
      // (GELU's factor), not the rational's 1.2e-7 times x.
      if (std::abs(in) > (out <= 1 ? 3.65 : 8.0)) CHECK(std::abs(y) == 1.0);
    }
  }
  test::checkClose(run->outputs[2], reference[2], 1e-6f);  // within 1.5 ulp of x / sqrt 2
  test::checkClose(run->outputs[3], reference[3], 0.0f);   // the infinities and NaN of x / 0
  for (int64_t i = 0; i < run->outputs[4].numel(); ++i) {
    const double in = es[i], want = static_cast<float>(std::exp(in)), y = run->outputs[4].scalarAt(i);
    INFO("exp(" << in << ") = " << y << ", want " << want);
    if (std::isnan(in)) CHECK(std::isnan(y));
    else if (std::isinf(want)) CHECK(y == want);
    else CHECK(std::abs(y - want) <= 1e-6 * want + 1e-37);  // 0 below -87.33
  }
}

TEST_CASE("Sigmoid is 1 / (1 + exp(-x)) with the straight-line exp: relatively accurate in both tails, NaN kept") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // Rows of 64 (float16 vectors) and of 6 (one element per work-item), on
  // [-30, 30] (past tanh's saturation at |x| = 16) and the specials.
  std::vector<float> xs;
  for (int i = 0; i < 8 * 64 - 8; ++i) xs.push_back(-30.0f + 60.0f * static_cast<float>(i) / (8 * 64 - 9));
  for (float x : {0.0f, 1e-30f, -15.8f, INFINITY, -INFINITY, NAN, -3000.0f, 3000.0f}) xs.push_back(x);
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[8,64] x, float[8,6] x6) => (float[8,64] y, float[8,6] y6) {
  y = Sigmoid (x)
  y6 = Sigmoid (x6)
}
)");
  const std::vector<codegen::KernelGroup> groups = codegen::singleNodeGroups(g);
  Expected<codegen::KernelSource> vec = codegen::emitPointwise(g, groups[0].nodes, ops->catalog, "k", "k", true);
  Expected<codegen::KernelSource> scalar = codegen::emitPointwise(g, groups[1].nodes, ops->catalog, "k", "k", true);
  REQUIRE_MESSAGE(vec.ok(), test::why(vec));
  REQUIRE_MESSAGE(scalar.ok(), test::why(scalar));
  CHECK(vec->source.find("= (float16)(fusec_sigmoid16(") != std::string::npos);
  CHECK(scalar->source.find("= (float)(fusec_sigmoid(") != std::string::npos);
  // The division with the straight-line exp, on vectors too; no tanh.
  CHECK(vec->source.find("fusec_exp16(-x)") != std::string::npos);
  CHECK(scalar->source.find("fusec_exp(-x)") != std::string::npos);
  for (const codegen::KernelSource* k : {&vec.value(), &scalar.value()}) {
    CHECK(k->source.find("fusec_tanh16(") == std::string::npos);
    CHECK_MESSAGE(codegen::compileToSpirv(k->source, k->name).ok(), k->source);
  }
  const std::vector<float> xs6(xs.begin() + 200, xs.begin() + 248);  // -6.6 .. -1.0
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), g, groups, ops->catalog,
                                                          {test::floats({8, 64}, xs), test::floats({8, 6}, xs6)});
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  for (size_t o = 0; o < 2; ++o)
    for (int64_t i = 0; i < run->outputs[o].numel(); ++i) {
      const double in = o == 0 ? xs[i] : xs6[i], y = run->outputs[o].scalarAt(i);
      const double want = 1.0 / (1.0 + std::exp(-in));
      INFO("sigmoid(" << in << ") = " << y << ", want " << want);
      if (std::isnan(in)) {
        CHECK(std::isnan(y));
        continue;
      }
      CHECK(y >= 0.0);
      CHECK(y <= 1.0);
      // Relative accuracy everywhere, the far negative tail included
      // (sigmoid(-30) = 9.4e-14, which SiLU multiplies by x and a weight may
      // multiply by thousands); 0 only where float has no normal number.
      CHECK(std::abs(y - want) <= 5e-7 * want);
      if (in < 0 && in > -80) CHECK(y > 0.0);
    }
}

TEST_CASE("convs and gemms with fused epilogues match the interpreter for every tiling") {
  std::unique_ptr<RuleSet> core = test::loadDefaultPacks();
  Expected<Target> target = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  REQUIRE(target.ok());
  // Dense conv + bias + residual + relu (one conv_epilogue group), strided
  // and dilated, grouped, depthwise, 1x1 (no gather), 1-D; Gemm with
  // transposes, alpha, beta and a row addend; MatMul with broadcast batch
  // dims and a vector operand. Sizes are not multiples of the tiles.
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2,6,9,7] x, float[10,6,3,3] w, float[10] b, float[2,10,9,7] skip, float[6,3,3,3] wg, float[6,1,3,3] wd,
   float[5,6,1,1] w1, float[2,6,11] x1, float[4,6,3] wl, float[13,5] ga, float[19,13] gb, float[19] gc,
   float[3,1,5,13] ma, float[4,13,17] mb, float[13] mv, float[7,1,13] sa, float[13,9] sw, float[9] sbias,
   float[1,13,9] sw1, float[12,1,3,3] wm, float[12] bm, float[6,1,5,2] wa, float[6,1,3] w1d, float[2,6,23,21] xw,
   float[1,130] lx, float[37,130] lw, float[37] lb, float[1,130,1,1] se, float[24,130,1,1] sew, float[24] seb,
   float[130,1] lcol, float[5,6,3,3] w6, float[2,81,5,5] xc, float[81,1,3,3] wc, float[6,1,5,5] w5,
   float[1,6,5,27] xs)
  => (float[2,10,9,7] y, float[2,6,2,2] sd, float[2,6,4,3] grp, float[2,6,9,7] dw, float[2,5,9,7] pw, float[2,4,5] l,
      float[5,19] gm, float[3,4,5,17] mm, float[3,1,5] mvec, float[7,1,9] seq, float[3,1,5,9] seq1,
      float[2,12,5,3] dwm, float[2,6,7,9] dwa, float[2,6,11] dw1, float[2,6,23,21] dwr,
      float[1,37] lin, float[1,24,1,1] sev, float[1,1] dot, float[2,5,23,21] wide, float[2,5,12,11] wide2,
      float[2,81,3,3] dwc, float[2,6,23,21] dwh, float[2,6,7,7] dw5, float[2,6,12,11] dws,
      float[1,6,3,14] dwt) {
  c = Conv <pads = [1, 1, 1, 1]> (x, w, b)
  r = Add (c, skip)
  y = Relu (r)
  s0 = Constant <value = int64[1] {0}> ()
  s6 = Constant <value = int64[1] {6}> ()
  w1_6 = Slice (w, s0, s6, s0)
  sd = Conv <strides = [3, 2], dilations = [2, 2], pads = [1, 0, 0, 0]> (x, w1_6)
  grp = Conv <group = 2, strides = [2, 2], pads = [0, 0, 0, 1]> (x, wg)
  dw = Conv <group = 6, pads = [1, 1, 1, 1]> (x, wd)
  pw = Conv (x, w1)
  l = Conv <strides = [2], pads = [1, 0]> (x1, wl)
  gm = Gemm <transA = 1, transB = 1, alpha = 0.5, beta = 2.0> (ga, gb, gc)
  mm = MatMul (ma, mb)
  mvec = MatMul (ma, mv)
  sm = MatMul (sa, sw)
  seq = Add (sm, sbias)
  seq1 = MatMul (ma, sw1)
  s0f = Constant <value = float {0.0}> ()
  s6f = Constant <value = float {6.0}> ()
  dwm0 = Conv <group = 6, strides = [2, 2], pads = [1, 1, 1, 1], dilations = [1, 2]> (x, wm, bm)
  dwm = Clip (dwm0, s0f, s6f)
  dwa = Conv <group = 6, pads = [2, 0, 0, 3]> (x, wa)
  dw1 = Conv <group = 6, strides = [1], pads = [1, 1]> (x1, w1d)
  dwr0 = Conv <group = 6, pads = [1, 1, 1, 1]> (xw, wd)
  dwr1 = Add (dwr0, xw)
  dwr = Relu (dwr1)
  lin0 = Gemm <transB = 1, alpha = 0.5, beta = 2.0> (lx, lw, lb)
  lin = Relu (lin0)
  sev0 = Conv (se, sew, seb)
  sev = HardSigmoid (sev0)
  dot = MatMul (lx, lcol)
  wide = Conv <pads = [1, 1, 1, 1]> (xw, w6)
  wide2 = Conv <strides = [2, 2], pads = [1, 1, 1, 1]> (xw, w6)
  dwc = Conv <group = 81, strides = [2, 2], pads = [1, 1, 1, 1]> (xc, wc)
  dwh = Conv <group = 6, dilations = [2, 1], pads = [2, 1, 2, 1]> (xw, wd)
  dw5 = Conv <group = 6, pads = [1, 2, 1, 2]> (x, w5)
  dws = Conv <group = 6, strides = [2, 2], pads = [2, 2, 2, 2]> (xw, w5)
  dwt = Conv <group = 6, strides = [2, 2], pads = [1, 1, 1, 1]> (xs, wd)
}
)");
  std::vector<Tensor> inputs;
  for (ValueId v : g.inputs()) inputs.push_back(randomTensor(g.value(v).type.staticShape(), 20 + inputs.size()));
  std::vector<Tensor> reference = test::run(g, inputs);
  Plan plan = planFusion(g, *core, target.value(), codegen::kernelFamilies());
  std::vector<codegen::KernelGroup> groups = codegen::planGroups(plan);
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), g, groups, core->catalog, inputs);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  for (size_t i = 0; i < reference.size(); ++i) {
    INFO(g.value(g.outputs()[i]).name);
    test::checkClose(run->outputs[i], reference[i], 1e-4f);
  }
  // The first group is the conv with its whole epilogue.
  CHECK(plan.groups.front().nodes.size() == 3);
  // A shared B (2-D, or batch dims of 1) makes A's batches rows of one
  // product: [7,1,13] x [13,9] is one 7x9 GEMM, not seven 1x9 ones.
  for (const char* out : {"seq", "seq1"}) {
    const ValueId v = *g.findValue(out);
    const NodeRef producer = *g.producer(v);
    const NodeRef matmul = g.node(producer).op == "Add" ? *g.producer(g.node(producer).inputs[0]) : producer;
    Expected<codegen::KernelSource> k = codegen::emitGemm(g, {matmul}, core->catalog, "k", "k");
    REQUIRE_MESSAGE(k.ok(), test::why(k));
    CHECK_MESSAGE(k->source.find(std::string(out) == "seq" ? "C[7x9] = A[7x13]" : "C[15x9] = A[15x13]") != std::string::npos,
                  k->source);
    CHECK(k->source.find("batches") == std::string::npos);
  }
  // Every tiling computes the same, with and without local memory, with
  // tiles shrunk for a GPU's work-items, and with the depthwise and GEMV
  // kernels off (their products tiled as GEMMs), with each tap of a depthwise
  // conv gathering its own lanes, with the panels of the convs on 21-wide
  // rows (`wide`, `wide2` at stride 2) as input-row segments at widths 8 and
  // 4 and gathered at 16, with short products (K <= 13) staged by
  // threes or each panel owned by one work-item (also all products with
  // K <= 256 with gathered panels, and all products), and matrix-vector products a row pair per work-item (K = 130: a
  // tail past the last 16, 37 rows: a pair past the last), with depthwise
  // work-items owning their input rows (whole planes; 81 x 2 planes two at a
  // time in `dwc`; in 600 bytes, blocks of 1-4 output rows, computed a
  // few at a time and the rest in halves, `dwh` dilated along H, `dw5`'s
  // 5x5 window on 7 rows as 4, 2 and 1 at a time); every kernel
  // is valid SPIR-V.
  for (codegen::GemmTiling t : {codegen::GemmTiling{1, 4, 0, 0}, codegen::GemmTiling{5, 8, 3, 7, true, true, 0, false},
                                codegen::GemmTiling{12, 16, 16, 256, false, false, 1 << 20},
                                codegen::GemmTiling{12, 16, 16, 256, true, true, 0, true, 13, 3, false},
                                codegen::GemmTiling{12, 16, 16, 256, true, true, 0, true, 13, 1, false},
                                codegen::GemmTiling{6, 16, 16, 128, true, true, 0, true, 256, 1, false, false},
                                codegen::GemmTiling{6, 16, 16, 128, true, true, 0, true, 1 << 20, 1, false},
                                codegen::GemmTiling{.rows = 5, .width = 8, .localRows = 3, .depth = 7, .depthwiseOwnedBytes = 600},
                                codegen::GemmTiling{.rows = 4, .width = 16, .localRows = 0, .depth = 0,
                                                    .depthwiseOwnedBytes = codegen::KernelOptions::kDepthwiseOwnedBytes},
                                codegen::GemmTiling{.rows = 12, .width = 16, .shallowDepth = 1 << 20, .shallowLocalRows = 1,
                                                    .panels = 2},
                                codegen::GemmTiling{.rows = 5, .width = 4, .shallowDepth = 1 << 20, .shallowLocalRows = 1,
                                                    .convRowPanels = false, .panels = 2},
                                codegen::GemmTiling{.rows = 3, .width = 8, .shallowDepth = 1 << 20, .shallowLocalRows = 1,
                                                    .panels = 2},
                                codegen::GemmTiling{.rows = 6, .width = 16, .shallowDepth = 1 << 20, .shallowLocalRows = 1,
                                                    .narrowTail = true},
                                codegen::GemmTiling{.rows = 5, .width = 8, .shallowDepth = 1 << 20, .shallowLocalRows = 1,
                                                    .convRowPanels = false, .narrowTail = true}}) {
    INFO("tiling " << t.rows << "x" << t.width << " local " << t.localRows << " depth " << t.depth << " shallow "
                   << t.shallowDepth << "/" << t.shallowLocalRows << " depthwise owned " << t.depthwiseOwnedBytes << " panels "
                   << t.panels << (t.narrowTail ? std::string(", narrow tail") : std::string()));
    Expected<codegen::DeviceRun> tiled = codegen::runOnDevice(device(), g, groups, core->catalog, inputs, codegen::KernelOptions{.gemm = t, .gemmTilings = {}});
    REQUIRE_MESSAGE(tiled.ok(), test::why(tiled));
    for (size_t i = 0; i < reference.size(); ++i) test::checkClose(tiled->outputs[i], reference[i], 1e-4f);
    int ownedRows = 0, pairs = 0, narrow = 0, tapLoads = 0;
    for (const codegen::KernelGroup& grp : groups) {
      if (!codegen::isGemmGroup(g, grp.nodes)) continue;
      Expected<codegen::KernelSource> k = codegen::emitGemm(g, grp.nodes, core->catalog, "k", "k", t);
      REQUIRE_MESSAGE(k.ok(), test::why(k));
      INFO(k->source);
      ownedRows += k->source.find("zero-padded, into its local memory") != std::string::npos;
      pairs += k->source.find("two neighbouring column panels") != std::string::npos;
      narrow += k->source.find("at most half the panel's columns are results") != std::string::npos;
      tapLoads += k->source.find(" tap0 = (c >= 0) & (c < ") != std::string::npos;
      if (t.rows <= 5) {  // the depthwise kernel with and without row gathers
        Expected<codegen::SpirvModule> spv = codegen::compileToSpirv(k->source, k->name);
        CHECK_MESSAGE(spv.ok(), test::why(spv));
      }
    }
    // dw, dwm, dwa, dw1, dwr, dwc, dwh, dw5, dws, dwt: every depthwise
    // conv in the owned form, but the windows of 5 rows of 34 and 36
    // floats (dwh; dws at stride 2) in 600 bytes. At stride 2 the rows are
    // split into even and odd columns: dws's 21 columns after 2 of padding
    // move as 16 and 5, dwt's 27 after 1 as 16, 8 and 3.
    // (dw5, a 7x7 plane, is held in registers instead: the test below.)
    CHECK(ownedRows == (t.depthwiseOwnedBytes == 600 ? 7 : t.depthwiseOwnedBytes > 0 ? 9 : 0));
    // Two panels per work-item wherever a product has two or more (the
    // conv with its residual, the grouped, strided and 21-wide convs, ...;
    // not the 7-wide convs' 7 row panels of 8 lanes at width 16).
    if (t.panels == 2) CHECK(pairs >= 4);
    else CHECK(pairs == 0);
    // Half-width tiles where a panel holds at most half its columns' results.
    if (t.narrowTail) CHECK(narrow >= 3);
    else CHECK(narrow == 0);
    // An owned row panel's window rows are masked input-row loads (the
    // first and last rows of `x` and `xw` past the tensor's ends gathered).
    // (Widths 8 and 4: the 7- and 21-wide rows waste too many of 16 lanes.)
    if (t.shallowLocalRows == 1 && t.convRowPanels && t.width < 16) CHECK(tapLoads >= 2);
    if (!t.convRowPanels || t.shallowLocalRows != 1) CHECK(tapLoads == 0);
  }
}

TEST_CASE("3-D convs are tiled implicit GEMMs and match the interpreter for every tiling") {
  std::unique_ptr<RuleSet> core = test::loadDefaultPacks();
  Expected<Target> target = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  REQUIRE(target.ok());
  // Video and volumetric convs: 3x3x3 on 16-wide rows (row panels), at
  // stride 2 over two images (gathered), dilated in two groups with uneven
  // pads, depthwise, 1x1x1 strided, temporal only with a bias and a residual,
  // a depth of 1 in four groups of three outputs (not the 2-D depthwise form).
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1,4,5,9,16] x, float[2,4,7,11,13] x2, float[6,4,3,3,3] w1, float[5,4,3,3,3] w2, float[4,2,2,3,3] w3,
   float[4,1,3,3,3] w4, float[3,4,1,1,1] w5, float[4,4,3,1,1] w6, float[4] b6, float[3,4,1,4,4] x7, float[12,1,1,2,2] w7)
  => (float[1,6,5,9,16] y1, float[2,5,4,6,7] y2, float[1,4,5,9,16] y3, float[1,4,5,9,16] y4, float[1,3,3,9,8] y5,
      float[1,4,5,9,16] y6, float[3,12,1,3,3] y7) {
  c1 = Conv <pads = [1, 1, 1, 1, 1, 1]> (x, w1)
  y1 = Relu (c1)
  c2 = Conv <strides = [2, 2, 2], pads = [1, 1, 1, 1, 1, 1]> (x2, w2)
  y2 = Sigmoid (c2)
  c3 = Conv <group = 2, dilations = [2, 1, 2], pads = [1, 1, 2, 1, 1, 2]> (x, w3)
  y3 = Relu (c3)
  c4 = Conv <group = 4, pads = [1, 1, 1, 1, 1, 1]> (x, w4)
  y4 = Tanh (c4)
  y5 = Conv <strides = [2, 1, 2]> (x, w5)
  c6 = Conv <pads = [1, 0, 0, 1, 0, 0]> (x, w6, b6)
  r6 = Add (c6, x)
  y6 = Relu (r6)
  c7 = Conv <group = 4, strides = [2, 2, 1], pads = [0, 1, 0, 0, 1, 0]> (x7, w7)
  y7 = HardSigmoid (c7)
}
)");
  std::vector<Tensor> inputs;
  for (ValueId v : g.inputs()) inputs.push_back(randomTensor(g.value(v).type.staticShape(), 40 + inputs.size()));
  const std::vector<Tensor> reference = test::run(g, inputs);
  const Plan plan = planFusion(g, *core, target.value(), codegen::kernelFamilies());
  const std::vector<codegen::KernelGroup> groups = codegen::planGroups(plan);
  // Staged in local memory with a tile per work-item, owned row panels in
  // pairs, owned gathered panels (no row panels) with narrow tails: the
  // forms of the implicit GEMM a 3-D window changes.
  for (codegen::GemmTiling t : {codegen::GemmTiling{5, 8, 3, 7, true, true, 0, false},
                                codegen::GemmTiling{.rows = 12, .width = 16, .shallowDepth = 1 << 20, .shallowLocalRows = 1,
                                                    .panels = 2},
                                codegen::GemmTiling{.rows = 5, .width = 8, .shallowDepth = 1 << 20, .shallowLocalRows = 1,
                                                    .convRowPanels = false, .narrowTail = true}}) {
    INFO("tiling " << t.rows << "x" << t.width << " local " << t.localRows << " depth " << t.depth << " shallow "
                   << t.shallowDepth << "/" << t.shallowLocalRows << " panels " << t.panels);
    Expected<codegen::DeviceRun> tiled =
        codegen::runOnDevice(device(), g, groups, core->catalog, inputs, codegen::KernelOptions{.gemm = t, .gemmTilings = {}});
    REQUIRE_MESSAGE(tiled.ok(), test::why(tiled));
    for (size_t i = 0; i < reference.size(); ++i) {
      INFO(g.value(g.outputs()[i]).name);
      test::checkClose(tiled->outputs[i], reference[i], 1e-4f);
    }
    int convs = 0;
    for (const codegen::KernelGroup& grp : groups) {
      if (!codegen::isGemmGroup(g, grp.nodes)) continue;
      Expected<codegen::KernelSource> k = codegen::emitGemm(g, grp.nodes, core->catalog, "k", "k", t);
      REQUIRE_MESSAGE(k.ok(), test::why(k));
      CHECK_MESSAGE(k->source.find("Conv as an implicit GEMM") != std::string::npos, k->source);
      ++convs;
    }
    CHECK(convs == 7);
  }
}

TEST_CASE("a conv and its projection shortcut are one implicit GEMM and match the interpreter for every tiling") {
  Expected<Target> target = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  REQUIRE(target.ok());
  // The default packs and the opt-in projection rule.
  Expected<std::vector<std::string>> paths = grammar::defaultPackPaths(target.value());
  REQUIRE(paths.ok());
  paths->push_back(grammar::defaultRulesDir() + "/cnn/launch-bound/projection.fuse");
  std::unique_ptr<RuleSet> packs = test::loadPackFiles(paths.value());
  // ResNet's downsampling block (3x3 conv + a 1x1 stride-2 projection of
  // the block's input, odd sizes), ResNet-50's stride-1 projection beside a
  // 1x1 conv (which the rule leaves to the conv alone), one on 22-wide rows
  // (the conv's panels are row segments), and
  // a padded 1x1 "shortcut" the family refuses: that block stays a
  // conv_residual_activation plus its own conv.
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2,6,11,10] x, float[8,6,3,3] w1, float[8,8,3,3] w2, float[8] b2, float[8,6,1,1] wd, float[8] bd,
   float[12,8,1,1] w3, float[12] b3, float[2,5,6,5] xs, float[12,5,1,1] wp,
   float[1,4,22,22] hw, float[6,4,3,3] ww, float[1,3,43,44] xw, float[6,3,1,1] wdw, float[8,6,1,1] wpad)
  => (float[2,8,6,5] y, float[2,12,6,5] y2, float[1,6,22,22] yw, float[2,8,6,5] yp) {
  h0 = Conv <strides = [2, 2], pads = [1, 1, 1, 1]> (x, w1)
  h = Relu (h0)
  c = Conv <pads = [1, 1, 1, 1]> (h, w2, b2)
  d = Conv <strides = [2, 2]> (x, wd, bd)
  r = Add (d, c)
  y = Relu (r)
  q = Conv (h, w3, b3)
  p = Conv (xs, wp)
  r2 = Add (q, p)
  y2 = Relu (r2)
  cw = Conv <pads = [1, 1, 1, 1]> (hw, ww)
  dw = Conv <strides = [2, 2]> (xw, wdw)
  rw = Add (cw, dw)
  yw = Relu (rw)
  cp = Conv <pads = [1, 1, 1, 1]> (h, w2)
  dp = Conv <strides = [2, 2], pads = [1, 0, 0, 0]> (x, wpad)
  rp = Add (cp, dp)
  yp = Relu (rp)
}
)");
  const std::vector<Tensor> inputs = randomInputs(g, 70), reference = test::run(g, inputs);
  Plan plan = planFusion(g, *packs, target.value(), codegen::kernelFamilies());
  std::map<std::string, int> byRule = groupsByRule(plan);
  for (const Group& grp : plan.groups)
    if (grp.rule && grp.rule->name == "conv_projection_residual_activation") CHECK(grp.nodes.size() == 4);
  CHECK(byRule["conv_projection_residual_activation"] == 2);
  // The padded 1x1 stays apart, and so does the projection beside a 1x1
  // conv (the rule leaves those to the conv alone).
  CHECK(byRule["conv_residual_activation"] == 2);
  checkTilings(g, plan, packs->catalog, inputs, reference,
               {codegen::GemmTiling{}, codegen::GemmTiling{1, 4, 0, 0}, codegen::GemmTiling{5, 8, 3, 7},
                codegen::GemmTiling{12, 16, 16, 256, false, false, 1 << 20},
                codegen::GemmTiling{4, 8, 0, 256, true, true, 0, true, 0, 2, false},
                codegen::GemmTiling{6, 16, 16, 128, true, true, 0, true, 1 << 20, 1, false, true, false}},
               1e-4f);
  // The refusal names what the family builds.
  const NodeRef cp = *g.producer(*g.findValue("cp")), dp = *g.producer(*g.findValue("dp"));
  const NodeRef rp = *g.producer(*g.findValue("rp")), yp = *g.producer(*g.findValue("yp"));
  Expected<codegen::KernelSource> refused = codegen::emitGemm(g, {cp, dp, rp, yp}, packs->catalog, "k", "k");
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("1x1 projection shortcut") != std::string::npos);
}

TEST_CASE("depthwise convs on rows of 8 or fewer hold their planes in registers") {
  // EfficientNet's 7x7 stage (5x5, bias, SiLU), a channel multiplier of 2
  // with a dilated window and uneven padding, a map of 8x8 (whole float8
  // rows), and one of 9 rows: its 9 output rows do not fit (the local
  // rows instead), nor does stride 2.
  std::unique_ptr<RuleSet> core = test::loadDefaultPacks();
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1,16,7,7] x, float[16,1,5,5] w, float[16] b, float[1,3,6,5] xm, float[6,1,3,3] wm, float[1,4,8,8] x8,
   float[4,1,3,3] w8, float[1,4,9,7] x9)
  => (float[1,16,7,7] y, float[1,6,4,4] ym, float[1,4,8,8] y8, float[1,4,9,7] y9, float[1,4,4,4] ys) {
  c = Conv <group = 16, pads = [2, 2, 2, 2]> (x, w, b)
  s = Sigmoid (c)
  y = Mul (c, s)
  ym = Conv <group = 3, dilations = [2, 2], pads = [1, 2, 1, 1]> (xm, wm)
  y8 = Conv <group = 4, pads = [1, 1, 1, 1]> (x8, w8)
  y9 = Conv <group = 4, pads = [1, 1, 1, 1]> (x9, w8)
  ys = Conv <group = 4, strides = [2, 2], pads = [1, 1, 1, 1]> (x8, w8)
}
)");
  const std::vector<Tensor> inputs = randomInputs(g, 83), reference = test::run(g, inputs);
  const std::vector<codegen::KernelGroup> groups = fuseOneGroup(g, {"c", "s", "y"}, "silu");
  const codegen::GemmTiling t{.depthwiseOwnedBytes = codegen::KernelOptions::kDepthwiseOwnedBytes};
  runAndCheck(g, groups, core->catalog, inputs, reference, codegen::KernelOptions{.gemm = t, .gemmTilings = {}}, 1e-4f);
  std::map<std::string, bool> inRegisters;
  for (const codegen::KernelGroup& grp : groups) {
    Expected<codegen::KernelSource> k = codegen::emitGemm(g, grp.nodes, core->catalog, "k", "k", t);
    REQUIRE_MESSAGE(k.ok(), test::why(k));
    const std::string out = g.value(g.node(grp.nodes.back()).outputs[0]).name;
    inRegisters[out] = k->source.find("shifts it in registers") != std::string::npos;
    if (inRegisters[out]) CHECK(k->localMemBytes == 0);
  }
  CHECK(inRegisters["y"]);
  CHECK(inRegisters["ym"]);
  CHECK(inRegisters["y8"]);
  CHECK_FALSE(inRegisters["y9"]);
  CHECK_FALSE(inRegisters["ys"]);
}

TEST_CASE("3x3 stride-1 convs with constant weights by Winograd's F(2x2, 3x3) match the interpreter") {
  // Tiles along rows: an odd map (25x27: the last tile row has one output
  // row, the last tile column one column) with bias and ReLU, 20 output
  // channels (not a multiple of 8); two images of 3 channels with uneven
  // pads and no bias, a residual Add fused; a 2-row map of 64 channels,
  // whose output channels are split over work-items. Consecutive tiles of
  // narrower maps: 22 wide (6x22, 33 tiles: 3 work-items, 11 tiles a
  // row), and 9x5 with uneven pads (5x3 = 15 tiles, one lane past the
  // map), bias and ReLU fused. A stride-2 conv stays an implicit GEMM.
  // The weights are constants (transformed once).
  std::unique_ptr<RuleSet> core = test::loadDefaultPacks();
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1,5,25,27] x1, float[20,5,3,3] w1, float[20] b1, float[2,3,24,40] x2, float[9,3,3,3] w2, float[2,9,24,39] r2,
   float[1,6,2,40] x5, float[64,6,3,3] w5, float[1,4,6,22] x3, float[7,4,3,3] w3, float[1,16,9,5] x6,
   float[33,16,3,3] w6, float[33] b6)
  => (float[1,20,25,27] y1, float[2,9,24,39] y2, float[1,64,2,40] y5, float[1,7,6,22] y3, float[1,7,3,11] y4,
      float[1,33,9,5] y6) {
  c1 = Conv <pads = [1, 1, 1, 1]> (x1, w1, b1)
  y1 = Relu (c1)
  c2 = Conv <pads = [0, 1, 2, 0]> (x2, w2)
  y2 = Add (c2, r2)
  y5 = Conv <pads = [1, 1, 1, 1]> (x5, w5)
  y3 = Conv <pads = [1, 1, 1, 1]> (x3, w3)
  y4 = Conv <strides = [2, 2], pads = [1, 1, 1, 1]> (x3, w3)
  c6 = Conv <pads = [1, 0, 1, 2]> (x6, w6, b6)
  y6 = Relu (c6)
}
)");
  unsigned seed = 90;
  for (const char* name : {"w1", "w2", "w5", "w3", "w6"}) {
    const ValueId w = g.findValue(name).value();
    g.replaceAllUsesWith(w, g.addConstant(std::string(name) + "c", randomTensor(g.value(w).type.staticShape(), ++seed)));
  }
  const std::vector<Tensor> inputs = randomInputs(g, 91), reference = test::run(g, inputs);
  const codegen::GemmTiling t{.winogradLocalBytes = 1 << 19};
  const codegen::KernelOptions options{.gemm = t, .gemmTilings = {}};
  std::map<std::string, std::string> sources;
  for (const auto& [fused, name] : std::vector<std::pair<std::set<std::string>, std::string>>{{{"c1", "y1"}, "relu"},
                                                                                              {{"c2", "y2"}, "residual"},
                                                                                              {{"c6", "y6"}, "relu6"}}) {
    const std::vector<codegen::KernelGroup> groups = fuseOneGroup(g, fused, name);
    runAndCheck(g, groups, core->catalog, inputs, reference, options, 1e-4f);
    for (const codegen::KernelGroup& grp : groups) {
      if (g.node(grp.nodes.front()).op != "Conv") continue;
      Expected<codegen::KernelSource> k = codegen::emitGemm(g, grp.nodes, core->catalog, "k", "k", t);
      REQUIRE_MESSAGE(k.ok(), test::why(k));
      const bool winograd = k->source.find("Winograd") != std::string::npos;
      CHECK(winograd == (k->derived.size() == 1));
      sources[g.value(g.node(grp.nodes.back()).outputs[0]).name] = winograd ? k->source : "";
    }
  }
  CHECK_FALSE(sources["y1"].empty());
  CHECK_FALSE(sources["y2"].empty());
  CHECK_FALSE(sources["y5"].empty());
  CHECK(sources["y5"].find("split = grp % 2") != std::string::npos);
  CHECK(sources["y3"].find("16 consecutive tiles") != std::string::npos);
  CHECK(sources["y6"].find("16 consecutive tiles") != std::string::npos);
  CHECK(sources["y1"].find("16 consecutive tiles") == std::string::npos);
  CHECK(sources["y4"].empty());
  // Without the budget for 16 x C vectors of local memory: the implicit GEMM.
  for (const codegen::KernelGroup& grp : fuseOneGroup(g, {"c1", "y1"}, "relu"))
    if (grp.name == "relu") {
      Expected<codegen::KernelSource> k =
          codegen::emitGemm(g, grp.nodes, core->catalog, "k", "k", codegen::GemmTiling{.winogradLocalBytes = 16 * 5 * 64 - 1});
      REQUIRE_MESSAGE(k.ok(), test::why(k));
      CHECK(k->derived.empty());
    }
}

TEST_CASE("owned panels in pairs, M split among work-items, match the interpreter") {
  // 300 output channels on a 7x7 map: 49 columns are 4 panels of 16, 2
  // pairs; 25 row tiles of 12 split in two (at least 128 rows a split),
  // the second pair's second panel past the last column (valid 0).
  // A 3x3 conv (gathered window rows: row panels off) with its bias and
  // ReLU, and the same shape as a 1x1 conv on 52 columns (4 panels, the
  // last partial).
  std::unique_ptr<RuleSet> core = test::loadDefaultPacks();
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1,8,7,7] x, float[300,8,3,3] w, float[300] b, float[1,8,4,13] x1, float[300,8,1,1] w1)
  => (float[1,300,7,7] y, float[1,300,4,13] y1) {
  c = Conv <pads = [1, 1, 1, 1]> (x, w, b)
  y = Relu (c)
  y1 = Conv (x1, w1)
}
)");
  std::vector<Tensor> inputs;
  for (ValueId v : g.inputs()) inputs.push_back(randomTensor(g.value(v).type.staticShape(), 40 + inputs.size()));
  const std::vector<Tensor> reference = test::run(g, inputs);
  const std::vector<codegen::KernelGroup> groups = fuseOneGroup(g, {"c", "y"}, "conv");
  for (int panels : {1, 2}) {
    const codegen::GemmTiling t{
        .rows = 12, .width = 16, .shallowDepth = 1 << 20, .shallowLocalRows = 1, .convRowPanels = false, .panels = panels};
    INFO("panels " << panels);
    runAndCheck(g, groups, core->catalog, inputs, reference, codegen::KernelOptions{.gemm = t, .gemmTilings = {}}, 1e-4f);
    for (const codegen::KernelGroup& grp : groups) {
      Expected<codegen::KernelSource> k = codegen::emitGemm(g, grp.nodes, core->catalog, "k", "k", t);
      REQUIRE_MESSAGE(k.ok(), test::why(k));
      CHECK(k->globalSize == static_cast<size_t>(4 / panels * 2));  // panels (or pairs) x 2 splits
      CHECK(k->localMemBytes == static_cast<size_t>(panels) * (grp.nodes.size() > 1 ? 72 : 8) * 16 * sizeof(float));
      CHECK((k->source.find("two neighbouring column panels") != std::string::npos) == (panels == 2));
    }
    // Streamed (GemmTiling::streamDepth 8): the 1x1 conv (K = 8, a plain
    // panel) gives each work-group one of its 25 row tiles; the 3x3 conv's
    // gathered rows (K = 72) keep their two splits.
    codegen::GemmTiling streamed = t;
    streamed.streamDepth = 8;
    runAndCheck(g, groups, core->catalog, inputs, reference, codegen::KernelOptions{.gemm = streamed, .gemmTilings = {}},
                1e-4f);
    for (const codegen::KernelGroup& grp : groups) {
      Expected<codegen::KernelSource> k = codegen::emitGemm(g, grp.nodes, core->catalog, "k", "k", streamed);
      REQUIRE_MESSAGE(k.ok(), test::why(k));
      CHECK(k->globalSize == static_cast<size_t>(4 / panels * (grp.nodes.size() > 1 ? 2 : 25)));
    }
  }
  // With row panels the 3x3 conv's 7-wide rows take one panel of 8 lanes
  // each, its window rows masked loads instead of gathers, and 16 rows a
  // tile: 7 panels (no pairs of an odd count) x 2 splits of 19 tiles.
  const codegen::GemmTiling rows{.rows = 12, .width = 16, .shallowDepth = 1 << 20, .shallowLocalRows = 1, .panels = 2};
  runAndCheck(g, groups, core->catalog, inputs, reference, codegen::KernelOptions{.gemm = rows, .gemmTilings = {}}, 1e-4f);
  const codegen::KernelGroup& conv = groups[0].name == "conv" ? groups[0] : groups[1];
  REQUIRE(conv.name == "conv");
  Expected<codegen::KernelSource> k = codegen::emitGemm(g, conv.nodes, core->catalog, "k", "k", rows);
  REQUIRE_MESSAGE(k.ok(), test::why(k));
  INFO(k->source);
  CHECK(k->globalSize == 14u);
  CHECK(k->source.find("float8 acc15 = ") != std::string::npos);
  CHECK(k->source.find(" tap0 = (c >= 0) & (c < 7)") != std::string::npos);
}

TEST_CASE("an owned row panel's window rows are masked input-row loads and match the interpreter") {
  // Stride 1 at any width that wastes at most a quarter of the lanes (14
  // wide: one panel of 16), dilated, a 1x5 window padded past both row
  // ends, and stride 2 on rows of 3 panels; two images, so rows near both
  // ends of the input take the gathered fallback and the rows between the
  // images read across them (masked).
  std::unique_ptr<RuleSet> core = test::loadDefaultPacks();
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2,5,14,14] x, float[7,5,3,3] w, float[2,3,14,30] xd, float[6,3,3,3] wd, float[6,3,1,5] w15,
   float[1,3,20,100] xs, float[9,3,3,3] ws)
  => (float[2,7,14,14] y, float[2,6,14,30] yd, float[2,6,14,30] y15, float[1,9,10,50] ys) {
  y = Conv <pads = [1, 1, 1, 1]> (x, w)
  yd = Conv <pads = [2, 2, 2, 2], dilations = [2, 2]> (xd, wd)
  y15 = Conv <pads = [0, 3, 0, 1]> (xd, w15)
  ys = Conv <strides = [2, 2], pads = [1, 1, 1, 1]> (xs, ws)
}
)");
  std::vector<Tensor> inputs;
  for (ValueId v : g.inputs()) inputs.push_back(randomTensor(g.value(v).type.staticShape(), 60 + inputs.size()));
  const std::vector<Tensor> reference = test::run(g, inputs);
  Expected<std::vector<NodeRef>> order = g.topologicalOrder();
  REQUIRE(order.ok());
  std::vector<codegen::KernelGroup> groups;
  for (NodeRef n : order.value()) groups.emplace_back(std::vector<NodeRef>{n}, "k" + std::to_string(groups.size()));
  for (int panels : {1, 2}) {
    const codegen::GemmTiling t{.rows = 6, .width = 16, .shallowDepth = 1 << 20, .shallowLocalRows = 1, .panels = panels};
    INFO("panels " << panels);
    for (const codegen::KernelGroup& grp : groups) {
      Expected<codegen::KernelSource> k = codegen::emitGemm(g, grp.nodes, core->catalog, "k", "k", t);
      REQUIRE_MESSAGE(k.ok(), test::why(k));
      INFO(k->source);
      CHECK(k->source.find(" tap0 = (c >= 0) & (c < ") != std::string::npos);
    }
    runAndCheck(g, groups, core->catalog, inputs, reference, codegen::KernelOptions{.gemm = t, .gemmTilings = {}}, 1e-4f);
  }
}

TEST_CASE("a large product's owned panels split M further where the cores do not divide their work-groups") {
  // A 1x1 conv on a 13x13 map: 11 column panels of 16, one work-group
  // each; with 2 cores and 512 x 256 (at least 2^17) weights, M is split
  // in two (22 work-groups); not with the cores unknown, nor for 256 rows.
  std::unique_ptr<RuleSet> core = test::loadDefaultPacks();
  for (int64_t M : {512, 256}) {
    const OneConv c = oneConv({1, 256, 13, 13}, {M, 256, 1, 1}, "", 52);
    for (int64_t cores : {0, 2}) {
      INFO("output channels " << M << ", cores " << cores);
      const codegen::GemmTiling t{.rows = 12, .width = 16, .shallowDepth = 1 << 20, .shallowLocalRows = 1, .cores = cores};
      Expected<codegen::KernelSource> k = codegen::emitGemm(c.g, c.groups.front().nodes, core->catalog, "k", "k", t);
      REQUIRE_MESSAGE(k.ok(), test::why(k));
      CHECK(k->globalSize == (M == 512 && cores == 2 ? 22u : 11u));
      runAndCheck(c.g, c.groups, core->catalog, c.inputs, c.reference, codegen::KernelOptions{.gemm = t, .gemmTilings = {}},
                  1e-4f);
    }
  }
}

TEST_CASE("gathered panels stay apart where pairing them would split M more often") {
  // 520 output channels of a 3x3 conv on a 7x7 map: 4 gathered panels of
  // 16 columns (row panels off, which take 8-lane rows on such maps). Apart they take 2 splits of M (8 work-items, 8 panels
  // built); as 2 pairs they would take 4 (16 built), so the panels stay
  // apart. The same conv with 260 channels (at most 2 splits either way)
  // keeps its pairs.
  std::unique_ptr<RuleSet> core = test::loadDefaultPacks();
  for (int64_t M : {520, 260}) {
    INFO("output channels " << M);
    const OneConv c = oneConv({1, 8, 7, 7}, {M, 8, 3, 3}, "<pads = [1, 1, 1, 1]> ", 50);
    const codegen::GemmTiling t{
        .rows = 12, .width = 16, .shallowDepth = 1 << 20, .shallowLocalRows = 1, .convRowPanels = false, .panels = 2};
    Expected<codegen::KernelSource> k = codegen::emitGemm(c.g, c.groups.front().nodes, core->catalog, "k", "k", t);
    REQUIRE_MESSAGE(k.ok(), test::why(k));
    const bool paired = M == 260;
    CHECK((k->source.find("two neighbouring column panels") != std::string::npos) == paired);
    CHECK(k->globalSize == static_cast<size_t>(paired ? 2 * 2 : 4 * 2));  // pairs or panels x 2 splits
    runAndCheck(c.g, c.groups, core->catalog, c.inputs, c.reference, codegen::KernelOptions{.gemm = t, .gemmTilings = {}},
                1e-4f);
  }
}

TEST_CASE("a depthwise conv as the prologue of the 1x1 conv after it matches the interpreter for every tiling") {
  std::unique_ptr<RuleSet> packs = test::loadDefaultPacks();
  // Planned for a GPU: on a CPU the rules leave maps narrower than 32
  // apart (checked at the end); the kernels are checked in every tiling, the
  // CPU's included.
  Expected<Target> target = loadTarget(grammar::defaultRulesDir() + "/vendor/nvidia/h200.toml");
  REQUIRE(target.ok());
  // MobileNetV2's block ending (ReLU6 as Clip, the residual add), a
  // stride-2 depthwise conv with bias and a ReLU after the 1x1 conv, a
  // 30-wide map without an activation (ShuffleNet), a 5x5 window on a
  // 7-wide map (8 lanes) with HardSwish; sizes the panels do not divide;
  // 130 output channels on a 7x7 map, which the CPU form splits among
  // work-items (each recomputing the panel).
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1,6,9,10] x, float[6,1,3,3] wd, float[6] bd, float[5,6,1,1] w, float[5] b, float[1,5,9,10] skip,
   float[2,4,13,14] x2, float[4,1,3,3] wd2, float[4] bd2, float[7,4,1,1] w2,
   float[1,3,30,30] x3, float[3,1,3,3] wd3, float[4,3,1,1] w3,
   float[1,4,7,7] x4, float[4,1,5,5] wd4, float[4] bd4, float[6,4,1,1] w4, float[6] b4,
   float[1,9,7,7] x5, float[9,1,3,3] wd5, float[130,9,1,1] w5)
  => (float[1,5,9,10] y, float[2,7,7,7] y2, float[1,4,30,30] y3, float[1,6,7,7] y4, float[1,130,7,7] y5) {
  lo = Constant <value = float {0.0}> ()
  hi = Constant <value = float {6.0}> ()
  d = Conv <group = 6, pads = [1, 1, 1, 1]> (x, wd, bd)
  a = Clip (d, lo, hi)
  c = Conv (a, w, b)
  y = Add (c, skip)
  d2 = Conv <group = 4, strides = [2, 2], pads = [1, 1, 1, 1]> (x2, wd2, bd2)
  c2 = Conv (d2, w2)
  y2 = Relu (c2)
  d3 = Conv <group = 3, pads = [1, 1, 1, 1]> (x3, wd3)
  y3 = Conv (d3, w3)
  d4 = Conv <group = 4, pads = [2, 2, 2, 2]> (x4, wd4, bd4)
  a4 = HardSwish (d4)
  y4 = Conv (a4, w4, b4)
  d5 = Conv <group = 9, pads = [1, 1, 1, 1]> (x5, wd5)
  y5 = Conv (d5, w5)
}
)");
  const std::vector<Tensor> inputs = randomInputs(g, 110), reference = test::run(g, inputs);
  Plan plan = planFusion(g, *packs, target.value(), codegen::kernelFamilies());
  std::map<std::string, int> byRule = groupsByRule(plan);
  CHECK(byRule["depthwise_pointwise_residual"] == 1);
  CHECK(byRule["depthwise_pointwise_activation"] == 1);
  CHECK(byRule["depthwise_pointwise"] == 3);
  CHECK(plan.groups.size() == 5);  // each block one kernel
  // Row-segment panels (8 or 16 lanes) and gathered ones, 4-lane panels
  // with one row per tile, tiles shrunk for a GPU; the CPU form (each
  // work-item owns its panel) with each of those.
  codegen::GemmTiling gathered;
  gathered.convRowPanels = false;
  std::vector<codegen::GemmTiling> tilings = {codegen::GemmTiling{}, gathered, codegen::GemmTiling{1, 4, 0, 0},
                                              codegen::GemmTiling{12, 16, 16, 256, false, false, 1 << 20}};
  for (size_t i = 0, staged = tilings.size(); i < staged; ++i) {
    tilings.push_back(tilings[i]);
    tilings.back().stagedPrologue = false;
  }
  // Owned panels in pairs: both computed by the prologue (rows of 8 and
  // 16 lanes, gathered and row segments).
  for (size_t i = tilings.size() / 2, n = tilings.size(); i < n; ++i) {
    tilings.push_back(tilings[i]);
    tilings.back().panels = 2;
  }
  checkTilings(g, plan, packs->catalog, inputs, reference, tilings, 1e-4f);
  // Blocks of whole output rows (the CPU profile's form), on 8- and
  // 16-lane tiles of the 1x1 conv; with 300 owned bytes the 30-wide map's
  // three padded input rows (408 bytes) do not fit and that block keeps
  // the panel form.
  std::vector<codegen::GemmTiling> rowBlocks;
  for (int width : {8, 16})
    for (int64_t bytes : {int64_t{16384}, int64_t{300}}) {
      codegen::GemmTiling t;
      t.width = width;
      t.stagedPrologue = false;
      t.depthwiseRowBlocks = 1;
      t.depthwiseOwnedBytes = bytes;
      rowBlocks.push_back(t);
    }
  checkTilings(g, plan, packs->catalog, inputs, reference, rowBlocks, 1e-4f);
  // How many of the blocks' kernels at tiling `t` have `text` in their source.
  auto kernelsWith = [&](const codegen::GemmTiling& t, const std::string& text) {
    int count = 0;
    for (const Group& grp : plan.groups) {
      Expected<codegen::KernelSource> k = codegen::emitGemm(g, grp.nodes, packs->catalog, "k", "k", t);
      REQUIRE_MESSAGE(k.ok(), test::why(k));
      count += k->source.find(text) != std::string::npos;
    }
    return count;
  };
  for (const codegen::GemmTiling& t : rowBlocks)
    CHECK(kernelsWith(t, "output rows: for each of the") == (t.depthwiseOwnedBytes > 300 ? 5 : 4));
  // The CPU form: one work-item per work-group, the panel all of K; on
  // the 7x7 map M's 130 rows stay one split (each split rebuilds the
  // panel, so a split has at least 128 rows).
  codegen::GemmTiling own;
  own.stagedPrologue = false;
  const NodeRef c5 = *g.producer(*g.findValue("y5"));
  for (const Group& grp : plan.groups)
    if (std::find(grp.nodes.begin(), grp.nodes.end(), c5) != grp.nodes.end()) {
      Expected<codegen::KernelSource> k = codegen::emitGemm(g, grp.nodes, packs->catalog, "k", "k", own);
      REQUIRE_MESSAGE(k.ok(), test::why(k));
      CHECK(k->localSize == 1);
      CHECK(k->localMemBytes == 9 * 8 * sizeof(float));
      CHECK(k->globalSize == 7);  // 7 row panels of 8 lanes
    }
  // In pairs, the blocks with an even count of panels (or 8 and more).
  codegen::GemmTiling ownPairs = own;
  ownPairs.panels = 2;
  CHECK(kernelsWith(ownPairs, "two neighbouring column panels") >= 2);
  // Prefetching the next work-group's row segments changes no result; the
  // four blocks whose panels are row segments prefetch, gathered panels
  // do not.
  std::vector<codegen::GemmTiling> prefetching;
  for (codegen::GemmTiling t : {own, ownPairs, gathered}) {
    t.stagedPrologue = false;
    t.prefetchRows = true;
    prefetching.push_back(t);
  }
  checkTilings(g, plan, packs->catalog, inputs, reference, prefetching, 1e-4f);
  for (const codegen::GemmTiling& t : prefetching)
    CHECK(kernelsWith(t, "FUSEC_PREFETCH(row + ix0 + ") == (t.convRowPanels ? 4 : 0));
  // On the CPU profile only blocks on maps 32 and wider are fused: none of
  // these (30 wide and narrower), but the 30-wide block on a 32-wide map.
  Expected<Target> cpu = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  REQUIRE(cpu.ok());
  byRule = groupsByRule(planFusion(g, *packs, cpu.value(), codegen::kernelFamilies()));
  CHECK(byRule["depthwise_pointwise_residual"] == 0);
  CHECK(byRule["depthwise_pointwise"] == 0);
  CHECK(byRule["depthwise_pointwise_activation"] == 0);
  Graph wide = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1,3,32,32] x3, float[3,1,3,3] wd3, float[4,3,1,1] w3) => (float[1,4,32,32] y3) {
  d3 = Conv <group = 3, pads = [1, 1, 1, 1]> (x3, wd3)
  y3 = Conv (d3, w3)
}
)");
  CHECK(groupsByRule(planFusion(wide, *packs, cpu.value(), codegen::kernelFamilies()))["depthwise_pointwise"] == 1);
}

TEST_CASE("a 1x1 conv as the prologue of the depthwise conv after it matches the interpreter on a CPU target") {
  std::unique_ptr<RuleSet> packs = test::loadDefaultPacks();
  Expected<Target> cpu = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  REQUIRE(cpu.ok());
  // MobileNetV3's block start (hard swish after both convs, a 5x5 window,
  // 10 channels: two planes at once), EfficientNet's (SiLU, stride 2 on
  // 14x14, 9 channels: one plane at a time, no bias on the 1x1 conv) and
  // MobileNetV2's on a map narrower than 8 (ReLU6 as Clip, two images, rows
  // of 6 that the plane's vectors cross, 8 channels: four planes at once,
  // in two passes). Each is one kernel.
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1,6,7,7] x, float[10,6,1,1] w, float[10] b, float[10,1,5,5] wd, float[10] bd,
   float[1,5,14,14] x2, float[9,5,1,1] w2, float[9,1,3,3] wd2, float[9] bd2,
   float[2,4,5,6] x3, float[8,4,1,1] w3, float[8] b3, float[8,1,3,3] wd3, float[8] bd3)
  => (float[1,10,7,7] y, float[1,9,7,7] y2, float[2,8,5,6] y3) {
  p = Conv (x, w, b)
  s = HardSigmoid <alpha = 0.1666667> (p)
  a = Mul (p, s)
  d = Conv <group = 10, pads = [2, 2, 2, 2]> (a, wd, bd)
  t = HardSigmoid <alpha = 0.1666667> (d)
  y = Mul (d, t)
  p2 = Conv (x2, w2)
  s2 = Sigmoid (p2)
  a2 = Mul (p2, s2)
  d2 = Conv <group = 9, strides = [2, 2], pads = [1, 1, 1, 1]> (a2, wd2, bd2)
  t2 = Sigmoid (d2)
  y2 = Mul (d2, t2)
  lo = Constant <value = float {0.0}> ()
  hi = Constant <value = float {6.0}> ()
  p3 = Conv (x3, w3, b3)
  a3 = Clip (p3, lo, hi)
  d3 = Conv <group = 8, pads = [1, 1, 1, 1]> (a3, wd3, bd3)
  y3 = Clip (d3, lo, hi)
}
)");
  const std::vector<Tensor> inputs = randomInputs(g, 111), reference = test::run(g, inputs);
  Plan plan = planFusion(g, *packs, cpu.value(), codegen::kernelFamilies());
  std::map<std::string, int> byRule = groupsByRule(plan);
  CHECK(byRule["pointwise_depthwise_gated"] == 2);
  CHECK(byRule["pointwise_depthwise"] == 1);
  CHECK(plan.groups.size() == 3);
  const codegen::KernelOptions options = codegen::KernelOptions::forTarget(cpu.value());
  runAndCheck(g, codegen::planGroups(plan), packs->catalog, inputs, reference, options, 1e-4f);
  std::map<int, int> together;  // channels computed at once -> kernels
  for (const Group& grp : plan.groups) {
    Expected<codegen::KernelSource> k = codegen::emitGemm(g, grp.nodes, packs->catalog, "k", "k", options.gemm);
    REQUIRE_MESSAGE(k.ok(), test::why(k));
    CHECK(k->source.find("The input rows are the 1x1 conv's") != std::string::npos);
    int channels = 1;
    while (k->source.find("float8 s0_" + std::to_string(channels) + " = ") != std::string::npos) ++channels;
    ++together[channels];
  }
  CHECK(together == std::map<int, int>{{1, 1}, {2, 1}, {4, 1}});  // 9 channels one at a time, 10 in pairs, 8 in fours
  // Where the depthwise kernel does not own its rows (a GPU's tiling) the
  // family refuses the group at planning time, with the reason.
  Expected<Target> gpu = loadTarget(grammar::defaultRulesDir() + "/vendor/nvidia/h200.toml");
  REQUIRE(gpu.ok());
  Plan onGpu = planFusion(g, *packs, gpu.value(), codegen::kernelFamilies());
  CHECK(groupsByRule(onGpu)["pointwise_depthwise_gated"] == 0);
  bool refused = false;
  for (const Candidate& c : onGpu.candidates)
    refused |= c.rule->name == "pointwise_depthwise_gated" && c.status == Candidate::Status::Illegal &&
               c.why.find("direct depthwise kernel whose work-items own their input rows") != std::string::npos;
  CHECK(refused);
}

TEST_CASE("a 1x1 conv prologue fills every input row of the depthwise plane, also those no window reads") {
  // A stride-2 depthwise conv on 4 rows reads rows 0-2 only; the prologue
  // computes all 4, and the fourth once ran past its channel's plane into
  // the next channel's (and past the local array), which fusec verify
  // found once the rule admitted maps 8 wide and more.
  std::unique_ptr<RuleSet> packs = test::loadDefaultPacks();
  Expected<Target> cpu = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  REQUIRE(cpu.ok());
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[3,4,4,4] x, float[2,4,1,1] w, float[2] b, float[2,1,1,1] wd, float[2] bd) => (float[3,2,2,6] y) {
  p = Conv (x, w, b)
  a = Relu (p)
  d = Conv <group = 2, pads = [0, 1, 0, 1], strides = [2, 1]> (a, wd, bd)
  y = Relu (d)
}
)");
  const std::vector<Tensor> inputs = randomInputs(g, 112), reference = test::run(g, inputs);
  Plan plan = planFusion(g, *packs, cpu.value(), codegen::kernelFamilies());
  REQUIRE(groupsByRule(plan)["pointwise_depthwise"] == 1);
  runAndCheck(g, codegen::planGroups(plan), packs->catalog, inputs, reference,
              codegen::KernelOptions::forTarget(cpu.value()), 1e-4f);
}

TEST_CASE("a dense conv as the prologue of the 1x1 conv after it matches the interpreter on a CPU target") {
  Expected<Target> target = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  REQUIRE(target.ok());
  // The default packs and the opt-in bottleneck rule.
  Expected<std::vector<std::string>> paths = grammar::defaultPackPaths(target.value());
  REQUIRE(paths.ok());
  paths->push_back(grammar::defaultRulesDir() + "/cnn/launch-bound/bottleneck.fuse");
  std::unique_ptr<RuleSet> packs = test::loadPackFiles(paths.value());
  // ResNet-50's bottleneck from its 3x3 conv on (3x3 + bias -> ReLU -> 1x1
  // + bias -> + x -> ReLU); the stride-2 block's on two images and a 7-wide
  // map (8 lanes), without biases; 20 channels between the convs (not a
  // multiple of the tile's rows) on a 30-wide map.
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1,6,9,10] x, float[5,6,3,3] wd, float[5] bd, float[7,5,1,1] w, float[7] b, float[1,7,9,10] skip,
   float[2,4,13,14] x2, float[6,4,3,3] wd2, float[5,6,1,1] w2, float[2,5,7,7] skip2,
   float[1,3,30,30] x3, float[20,3,3,3] wd3, float[4,20,1,1] w3, float[1,4,30,30] skip3)
  => (float[1,7,9,10] y, float[2,5,7,7] y2, float[1,4,30,30] y3) {
  d = Conv <pads = [1, 1, 1, 1]> (x, wd, bd)
  a = Relu (d)
  c = Conv (a, w, b)
  r = Add (c, skip)
  y = Relu (r)
  d2 = Conv <strides = [2, 2], pads = [1, 1, 1, 1]> (x2, wd2)
  a2 = Relu (d2)
  c2 = Conv (a2, w2)
  r2 = Add (skip2, c2)
  y2 = Relu (r2)
  d3 = Conv <pads = [1, 1, 1, 1]> (x3, wd3)
  a3 = Relu (d3)
  c3 = Conv (a3, w3)
  r3 = Add (c3, skip3)
  y3 = Relu (r3)
}
)");
  const std::vector<Tensor> inputs = randomInputs(g, 120), reference = test::run(g, inputs);
  Plan plan = planFusion(g, *packs, target.value(), codegen::kernelFamilies());
  CHECK(groupsByRule(plan)["conv_pointwise_residual_activation"] == 3);
  CHECK(plan.groups.size() == 3);  // each block one kernel
  // The CPU form only (each work-item owns its panel): row-segment and
  // gathered panels, 4-lane panels with one row per tile, the prologue's
  // window staged 7 rows at a time (its sums carried across blocks in the
  // panel).
  std::vector<codegen::GemmTiling> tilings = {codegen::GemmTiling{}, codegen::GemmTiling{}, codegen::GemmTiling{1, 4, 0, 0},
                                              codegen::GemmTiling{5, 8, 3, 7}, codegen::GemmTiling{6, 16, 16, 128}};
  tilings[1].convRowPanels = false;
  for (codegen::GemmTiling& t : tilings) t.stagedPrologue = false;
  checkTilings(g, plan, packs->catalog, inputs, reference, tilings, 1e-4f);
  // One work-item per panel, never split; the panel and the window's rows
  // in local memory. Staged for a GPU's work-group it is refused.
  const NodeRef d2 = *g.producer(*g.findValue("d2"));
  for (const Group& grp : plan.groups)
    if (std::find(grp.nodes.begin(), grp.nodes.end(), d2) != grp.nodes.end()) {
      Expected<codegen::KernelSource> k = codegen::emitGemm(g, grp.nodes, packs->catalog, "k", "k", tilings[0]);
      REQUIRE_MESSAGE(k.ok(), test::why(k));
      CHECK(k->localSize == 1);
      CHECK(k->globalSize == 2 * 7);  // 7 row panels of 8 lanes per image
      CHECK(k->localMemBytes == (6 + 36) * 8 * sizeof(float));
      Expected<codegen::KernelSource> staged = codegen::emitGemm(g, grp.nodes, packs->catalog, "k", "k");
      REQUIRE_FALSE(staged.ok());
      CHECK(staged.error().message.find("computes its own panel") != std::string::npos);
    }
  // A GPU profile (no `cpu` feature) leaves the convs apart.
  Expected<Target> gpu = loadTarget(grammar::defaultRulesDir() + "/vendor/nvidia/h200.toml");
  REQUIRE(gpu.ok());
  CHECK(groupsByRule(planFusion(g, *packs, gpu.value(), codegen::kernelFamilies()))["conv_pointwise_residual_activation"] == 0);
}

TEST_CASE("a channel scale (squeeze-and-excitation) is the prologue of the conv after it and matches the interpreter") {
  std::unique_ptr<RuleSet> packs = test::loadDefaultPacks();
  Expected<Target> target = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  REQUIRE(target.ok());
  // EfficientNet's block ending (the scale first in the Mul, one per image,
  // then the 1x1 projection and the residual add), one scale for all
  // images before a 1x1 conv, and the SE block's own 1x1 conv on one pixel,
  // which the rules leave alone. Then, grouped by hand, the same prologue
  // before a strided, grouped 3x3 conv (rows are channel x taps); padded,
  // it is refused (a padded zero times an infinite factor would be NaN).
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2,6,9,10] x, float[2,6,1,1] s, float[5,6,1,1] w, float[5] b, float[2,5,9,10] skip,
   float[1,4,7,7] x2, float[1,4,1,1] s2, float[3,4,1,1] w2,
   float[1,4,1,1] x3, float[1,4,1,1] s3, float[3,4,1,1] w3,
   float[2,4,8,9] x4, float[1,4,1,1] s4, float[6,2,3,3] w4, float[6] b4)
  => (float[2,5,9,10] y, float[1,3,7,7] y2, float[1,3,1,1] y3, float[2,6,3,4] y4) {
  m = Mul (s, x)
  c = Conv (m, w, b)
  y = Add (c, skip)
  m2 = Mul (x2, s2)
  y2 = Conv (m2, w2)
  m3 = Mul (x3, s3)
  y3 = Conv (m3, w3)
  m4 = Mul (x4, s4)
  y4 = Conv <group = 2, strides = [2, 2]> (m4, w4, b4)
}
)");
  const std::vector<Tensor> inputs = randomInputs(g, 140), reference = test::run(g, inputs);
  Plan plan = planFusion(g, *packs, target.value(), codegen::kernelFamilies());
  std::map<std::string, int> byRule = groupsByRule(plan);
  CHECK(byRule["channel_scale_conv_residual"] == 1);
  CHECK(byRule["channel_scale_conv"] == 1);  // y2's (the rules take 1x1 ungrouped convs)
  const NodeRef m3 = *g.producer(*g.findValue("m3"));
  for (const Group& grp : plan.groups)
    if (std::find(grp.nodes.begin(), grp.nodes.end(), m3) != grp.nodes.end()) CHECK(grp.nodes.size() == 1);
  const std::vector<codegen::GemmTiling> tilings = {codegen::GemmTiling{}, codegen::GemmTiling{1, 4, 0, 0},
                                                    codegen::GemmTiling{5, 8, 3, 7},
                                                    codegen::GemmTiling{12, 16, 16, 256, false, false, 1 << 20},
                                                    codegen::GemmTiling{4, 8, 0, 256, true, true, 0, true, 0, 2, false},
                                                    codegen::GemmTiling{6, 16, 16, 128, true, true, 0, true, 1 << 20, 1, false, true, false}};
  checkTilings(g, plan, packs->catalog, inputs, reference, tilings, 1e-4f);
  // The grouped 3x3 conv with its scale as one kernel, the rest one kernel per op.
  std::vector<codegen::KernelGroup> byHand;
  const NodeRef m4 = *g.producer(*g.findValue("m4")), c4 = *g.producer(*g.findValue("y4"));
  Expected<std::vector<NodeRef>> order = g.topologicalOrder();
  REQUIRE(order.ok());
  for (NodeRef n : order.value())
    if (n == m4) byHand.emplace_back(std::vector<NodeRef>{m4, c4});
    else if (n != c4) byHand.emplace_back(std::vector<NodeRef>{n});
  for (const codegen::GemmTiling& t : tilings) {
    Expected<codegen::DeviceRun> run =
        codegen::runOnDevice(device(), g, byHand, packs->catalog, inputs, codegen::KernelOptions{.gemm = t, .gemmTilings = {}});
    REQUIRE_MESSAGE(run.ok(), test::why(run));
    test::checkClose(run->outputs[3], reference[3], 1e-4f);
  }
  // Before a padded conv, the scale is refused with the reason.
  {
    Graph padded = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1,4,5,5] x, float[1,4,1,1] s, float[3,4,3,3] w) => (float[1,3,5,5] y) {
  m = Mul (x, s)
  y = Conv <pads = [1, 1, 1, 1]> (m, w)
}
)");
    const std::vector<NodeRef> both = padded.topologicalOrder().value();
    Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), padded, {codegen::KernelGroup{both}}, packs->catalog,
                                                            randomInputs(padded, 3));
    REQUIRE_FALSE(run.ok());
    CHECK(run.error().message.find("only into an unpadded conv") != std::string::npos);
  }
  // A Mul that is no channel scale (s per pixel) is refused with the reason.
  Graph bad = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1,4,5,5] x, float[1,4,5,5] s, float[3,4,1,1] w) => (float[1,3,5,5] y) {
  m = Mul (x, s)
  y = Conv (m, w)
}
)");
  Expected<std::vector<NodeRef>> badOrder = bad.topologicalOrder();
  REQUIRE(badOrder.ok());
  Expected<codegen::KernelSource> refused = codegen::emitGemm(bad, badOrder.value(), packs->catalog, "k", "k");
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("scale the channels") != std::string::npos);
}

TEST_CASE("empty products build and launch nothing; an empty K gives the bias") {
  std::unique_ptr<RuleSet> packs = test::loadDefaultPacks();
  Expected<Target> target = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  REQUIRE(target.ok());
  // Zero rows (a Slice that keeps nothing, as verify draws), zero columns,
  // and K = 0: every output element is the addend alone.
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[0,4] a, float[4,3] b, float[3] c, float[2,4] a2, float[4,0] b2, float[2,0] a3, float[0,3] b3)
  => (float[0,3] y, float[2,0] y2, float[2,3] y3) {
  m = MatMul (a, b)
  y = Add (m, c)
  y2 = MatMul (a2, b2)
  m3 = MatMul (a3, b3)
  y3 = Add (m3, c)
}
)");
  const std::vector<Tensor> inputs = randomInputs(g, 130), reference = test::run(g, inputs);
  REQUIRE(reference[2].numel() == 6);
  Plan plan = planFusion(g, *packs, target.value(), codegen::kernelFamilies());
  checkTilings(g, plan, packs->catalog, inputs, reference, {codegen::GemmTiling{}, codegen::GemmTiling{1, 4, 0, 0}}, 1e-6f);
}

TEST_CASE("vector epilogues compute lane by lane what scalar ones do, at edges, with NaN and infinities") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // A MatMul with a bias along its rows read as a vector (N = 37: an edge
  // tile reads it lane by lane) and GELU written out (erf); a 1x1 conv with SiLU
  // (exp); a depthwise conv with LeakyRelu (select) and Clip over NaN and
  // infinities; a conv whose epilogue has no vector form (a truth value
  // used as a number) and runs lane by lane.
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[5,13] a, float[13,37] b, float[37] res, float[1,6,9,7] x, float[10,6,1,1] w, float[10] bias,
   float[1,6,5,19] xd, float[6,1,3,3] wd, float[1] lo, float[1] hi)
  => (float[5,37] gelu, float[1,10,9,7] silu, float[1,6,5,19] dwc, float[1,10,9,7] step) {
  m = MatMul (a, b)
  h = Add (m, res)
  sqrt2 = Constant <value = float {1.41421356}> ()
  one = Constant <value = float {1.0}> ()
  half = Constant <value = float {0.5}> ()
  q = Div (h, sqrt2)
  e = Erf (q)
  e1 = Add (e, one)
  p = Mul (h, e1)
  gelu = Mul (p, half)
  c = Conv (x, w, bias)
  sg = Sigmoid (c)
  silu = Mul (c, sg)
  d = Conv <group = 6, pads = [1, 1, 1, 1]> (xd, wd)
  lr = LeakyRelu <alpha = 0.1> (d)
  dwc = Clip (lr, lo, hi)
  c2 = Conv (x, w, bias)
  zero = Constant <value = float {0.0}> ()
  gt = Greater (c2, zero)
  step = Cast <to = 1> (gt)
}
)");
  std::vector<Tensor> inputs;
  for (ValueId v : g.inputs()) inputs.push_back(randomTensor(g.value(v).type.staticShape(), 70 + inputs.size()));
  Tensor& xd = inputs[6];
  const float specials[] = {NAN, INFINITY, -INFINITY, 1e30f, -1e30f};
  for (int64_t i = 0; i < xd.numel(); i += 7) xd.data<float>()[i] = specials[(i / 7) % 5];
  inputs[8] = test::floats({1}, {-0.5f});
  inputs[9] = test::floats({1}, {2.0f});
  const std::vector<Tensor> reference = test::run(g, inputs);

  // The groups: each anchor with the ops after it.
  auto nodes = [&](std::initializer_list<const char*> results) {
    std::vector<NodeRef> out;
    for (const char* r : results) out.push_back(*g.producer(*g.findValue(r)));
    return out;
  };
  const std::vector<std::vector<NodeRef>> anchors = {nodes({"m", "h", "q", "e", "e1", "p", "gelu"}),
                                                     nodes({"c", "sg", "silu"}), nodes({"d", "lr", "dwc"}),
                                                     nodes({"c2", "gt", "step"})};
  std::vector<codegen::KernelGroup> groups;
  for (const std::vector<NodeRef>& a : anchors)
    groups.emplace_back(a, "", "", g.node(a.front()).op == "Conv" ? "conv_epilogue" : "gemm_epilogue");

  // What each kernel computes its epilogue with, at the default tiling.
  const char* forms[] = {"fusec_erf16(", "fusec_sigmoid16(", "select(", "(SUMS_).s0;"};
  for (size_t i = 0; i < anchors.size(); ++i) {
    Expected<codegen::KernelSource> k = codegen::emitGemm(g, anchors[i], ops->catalog, "k", "k");
    REQUIRE_MESSAGE(k.ok(), test::why(k));
    INFO(k->source);
    CHECK(k->source.find(forms[i]) != std::string::npos);
    const bool vector = i < 3;  // the truth value used as a number has no vector form
    // (the depthwise conv's rows are 19 wide: 16 outputs per work-item)
    CHECK((k->source.find("float16 acc = SUMS_") != std::string::npos) == vector);
  }
  for (codegen::GemmTiling t : {codegen::GemmTiling{}, codegen::GemmTiling{5, 8, 3, 7}, codegen::GemmTiling{1, 4, 0, 0}}) {
    INFO("tiling " << t.rows << "x" << t.width);
    Expected<codegen::DeviceRun> run =
        codegen::runOnDevice(device(), g, groups, ops->catalog, inputs, codegen::KernelOptions{.gemm = t, .gemmTilings = {}});
    REQUIRE_MESSAGE(run.ok(), test::why(run));
    for (size_t o = 0; o < reference.size(); ++o) {
      INFO(g.value(g.outputs()[o]).name);
      const Tensor &got = run->outputs[o], &want = reference[o];
      REQUIRE(got.numel() == want.numel());
      for (int64_t i = 0; i < want.numel(); ++i) {
        const double x = want.scalarAt(i), y = got.scalarAt(i);
        INFO("element " << i << ": " << y << " for " << x);
        if (std::isnan(x) || std::isinf(x)) CHECK((std::isnan(y) == std::isnan(x) && (std::isnan(x) || y == x)));
        else CHECK(y == doctest::Approx(x).epsilon(1e-4).scale(1.0));
      }
    }
  }
}

TEST_CASE("attention as one kernel matches the interpreter: masks, scales, and sizes the blocks do not divide") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // Shapes pick every block width: keys 32 (16 at a time), 24 (8), 12 (4),
  // and counts no width divides (a partial block last);
  // query rows 8 (4 per work-item), 6 (4, the last work-item's rows past
  // the end repeated and not stored), 5 and 7 (likewise), 2, 1; head sizes 16, 20.
  struct Case {
    const char* what;
    int64_t B, H, Sq, Sk, D, Dv;
    std::string mask;  // the mask's shape, or "" for none
    bool divide;
    int where = 0;     // the mask as Where's condition: 1 keeps the score where it holds, 2 fills there
  };
  const Case cases[] = {{"BERT-like padding mask", 2, 3, 8, 32, 16, 16, "2,1,1,32", false},
                        {"a full mask per head", 1, 2, 6, 24, 20, 20, "1,2,6,24", true},
                        {"a mask per query row", 1, 2, 6, 12, 8, 4, "6,1", false},
                        {"left padding masked with -inf", 1, 2, 4, 32, 16, 16, "1,1,1,32", false},
                        {"no mask", 2, 1, 8, 16, 16, 16, "", true},
                        {"a causal mask by Where, as GPT-2 exports it", 1, 2, 8, 8, 16, 16, "1,1,8,8", true, 1},
                        {"Where filling where a per-key condition holds", 2, 1, 4, 12, 8, 8, "2,1,1,12", false, 2},
                        {"13 keys: a block of 8 and a tail of 5, masked per key", 1, 2, 4, 13, 8, 8, "1,1,1,13", false},
                        {"19 keys: a block of 16 and a tail of 3, Where per key", 1, 1, 6, 19, 8, 12, "1,1,6,19", true, 1},
                        {"3 keys: only a tail", 2, 1, 2, 3, 4, 4, "", false},
                        {"5 queries a mask per row: the last work-item repeats row 4", 1, 2, 5, 12, 8, 8, "1,2,5,12", false},
                        {"7 queries in 2 batches, Where per key", 2, 1, 7, 13, 8, 8, "2,1,1,13", true, 2},
                        {"one query", 1, 2, 1, 12, 8, 8, "", false}};
  for (const Case& c : cases) {
    INFO(c.what);
    auto dims = [](std::initializer_list<int64_t> d) {
      std::string out;
      for (int64_t x : d) out += (out.empty() ? "" : ",") + std::to_string(x);
      return out;
    };
    const std::string qs = dims({c.B, c.H, c.Sq, c.D}), ks = dims({c.B, c.H, c.D, c.Sk}), vs = dims({c.B, c.H, c.Sk, c.Dv}),
                      os = dims({c.B, c.H, c.Sq, c.Dv});
    std::string text = "<ir_version: 8, opset_import: [\"\" : 17]>\ng (float[" + qs + "] q, float[" + ks + "] kt, float[" + vs +
                       "] v" + (c.mask.empty() ? "" : std::string(c.where ? ", bool[" : ", float[") + c.mask + "] mask") +
                       ") => (float[" + os + "] o) {\n" +
                       "  sc = Constant <value = float {" + (c.divide ? "4.0" : "0.25") + "}> ()\n  s = MatMul (q, kt)\n  z = " +
                       (c.divide ? "Div" : "Mul") + " (s, sc)\n";
    if (c.where) {
      text += std::string("  fill = Constant <value = float {") + (c.where == 1 ? "-3.4e38" : "-1e9") + "}> ()\n";
      text += c.where == 1 ? "  m = Where (mask, z, fill)\n" : "  m = Where (mask, fill, z)\n";
      text += "  p = Softmax <axis = -1> (m)\n";
    } else {
      text += c.mask.empty() ? "  p = Softmax <axis = -1> (z)\n" : "  m = Add (z, mask)\n  p = Softmax <axis = -1> (m)\n";
    }
    text += "  o = MatMul (p, v)\n}\n";
    Graph g = test::parse(text);
    std::vector<Tensor> inputs;
    for (ValueId v : g.inputs())
      inputs.push_back(g.value(v).type.dtype == DType::Bool ? Tensor(DType::Bool, g.value(v).type.staticShape())
                                                              : randomTensor(g.value(v).type.staticShape(), 90 + inputs.size()));
    if (c.where == 1) {  // causal: query i sees keys 0..i
      Tensor& mask = inputs.back();
      for (int64_t i = 0; i < c.Sq; ++i)
        for (int64_t j = 0; j < c.Sk; ++j) mask.data<bool>()[i * c.Sk + j] = j <= i;
    } else if (c.where == 2) {  // every third key filled
      Tensor& mask = inputs.back();
      for (int64_t i = 0; i < mask.numel(); ++i) mask.data<bool>()[i] = i % 3 == 1;
    } else if (!c.mask.empty()) {  // masked keys, as exporters write them: a large negative number, or -inf
      Tensor& mask = inputs.back();
      const bool padding = std::string(c.what).find("-inf") != std::string::npos;
      for (int64_t i = 0; i < mask.numel(); ++i)
        if (padding ? i < 20 : i % 3 == 0) mask.data<float>()[i] = padding ? -INFINITY : -10000.0f;
    }
    const std::vector<Tensor> reference = test::run(g, inputs);
    Expected<std::vector<NodeRef>> order = g.topologicalOrder();
    REQUIRE(order.ok());
    Expected<codegen::KernelSource> k = codegen::emitAttention(g, order.value(), ops->catalog, "attn", "attn");
    REQUIRE_MESSAGE(k.ok(), test::why(k));
    INFO(k->source);
    Expected<codegen::SpirvModule> spv = codegen::compileToSpirv(k->source, k->name);
    CHECK_MESSAGE(spv.ok(), test::why(spv));
    Expected<codegen::DeviceRun> run = codegen::runOnDevice(
        device(), g, {codegen::KernelGroup(order.value(), "attn", "", "attention")}, ops->catalog, inputs);
    REQUIRE_MESSAGE(run.ok(), test::why(run));
    CHECK(run->kernelTimes.size() == 1);
    test::checkClose(run->outputs[0], reference[0], 1e-4f);
    // A CPU's form: rows of scores in private memory, 3 query rows per
    // work-item (a count most cases do not divide) and 16.
    for (int rows : {3, 16}) {
      INFO("score rows ", rows);
      codegen::KernelOptions cpu;
      cpu.attention.scoreRows = rows;
      Expected<codegen::KernelSource> form = codegen::emitAttention(g, order.value(), ops->catalog, "attn", "attn", cpu.attention);
      REQUIRE_MESSAGE(form.ok(), test::why(form));
      CHECK(form->source.find("float sc[") != std::string::npos);
      CHECK(form->globalSize == static_cast<size_t>(c.B * c.H * ((c.Sq + std::min<int64_t>(rows, c.Sq) - 1) / std::min<int64_t>(rows, c.Sq))));
      runAndCheck(g, {codegen::KernelGroup(order.value(), "attn", "", "attention")}, ops->catalog, inputs, reference, cpu, 1e-4f);
    }
  }
  // MatMul, Softmax, MatMul: Sq queries of 8 against Sk keys.
  auto bare = [](int64_t Sq, int64_t Sk) {
    const std::string q = std::to_string(Sq), k = std::to_string(Sk);
    return test::parse("<ir_version: 8, opset_import: [\"\" : 17]>\ng (float[1," + q + ",8] q, float[1,8," + k +
                       "] kt, float[1," + k + ",8] v) => (float[1," + q + ",8] o) {\n  s = MatMul (q, kt)\n"
                       "  p = Softmax <axis = -1> (s)\n  o = MatMul (p, v)\n}\n");
  };
  // Rows of scores past 16 KiB (2048 keys: fewer than 4 rows fit) keep the online form.
  {
    Graph longRows = bare(8, 2048);
    Expected<std::vector<NodeRef>> order = longRows.topologicalOrder();
    REQUIRE(order.ok());
    Expected<codegen::KernelSource> k = codegen::emitAttention(longRows, order.value(), ops->catalog, "attn", "attn", {false, 16});
    REQUIRE_MESSAGE(k.ok(), test::why(k));
    CHECK(k->source.find("float sc[") == std::string::npos);
    CHECK(k->source.find("online softmax") != std::string::npos);
  }
  // What the kernel cannot take is refused with the reason, before it runs.
  Graph odd = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1,4,8] q, float[1,8,10] kt, float[1,10,8] v) => (float[1,4,8] o, float[1,4,10] p) {
  sc = Constant <value = float {0.5}> ()
  s = MatMul (q, kt)
  z = Mul (s, sc)
  p = Softmax <axis = -1> (z)
  o = MatMul (p, v)
}
)");
  Expected<std::vector<NodeRef>> order = odd.topologicalOrder();
  REQUIRE(order.ok());
  Expected<codegen::KernelSource> refused = codegen::emitAttention(odd, order.value(), ops->catalog, "attn", "attn");
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message == "`p` is read outside the group; the attention kernel keeps it in registers");
  // An odd number of queries (ViT's 197) still takes 4 rows per work-item:
  // 5 queries, 2 work-items.
  Graph oddRows = bare(5, 12);
  order = oddRows.topologicalOrder();
  REQUIRE(order.ok());
  Expected<codegen::KernelSource> grouped = codegen::emitAttention(oddRows, order.value(), ops->catalog, "attn", "attn");
  REQUIRE_MESSAGE(grouped.ok(), test::why(grouped));
  CHECK(grouped->globalSize == 2u);
  CHECK(grouped->source.find("min(i0 + 3, 4)") != std::string::npos);
  // A scalar Where condition, one truth for every score (rank 0: `fusec
  // verify` drew it, and the kernel read the last dim of an empty shape).
  Graph scalarMask = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1,4,8] q, float[1,8,8] kt, float[1,8,8] v, bool c) => (float[1,4,8] o) {
  sc = Constant <value = float {0.5}> ()
  fill = Constant <value = float {-1e9}> ()
  s = MatMul (q, kt)
  z = Mul (s, sc)
  m = Where (c, fill, z)
  p = Softmax <axis = -1> (m)
  o = MatMul (p, v)
}
)");
  std::vector<Tensor> inputs;
  for (ValueId v : scalarMask.inputs())
    if (scalarMask.value(v).type.dtype == DType::Float32)
      inputs.push_back(randomTensor(scalarMask.value(v).type.staticShape(), 120 + inputs.size()));
  inputs.push_back(Tensor(DType::Bool, {}));  // false: every score kept
  order = scalarMask.topologicalOrder();
  REQUIRE(order.ok());
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(
      device(), scalarMask, {codegen::KernelGroup(order.value(), "attn", "", "attention")}, ops->catalog, inputs);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  test::checkClose(run->outputs[0], test::run(scalarMask, inputs)[0], 1e-4f);
}

TEST_CASE("attention reads Q, K and V through view chains and writes its result through one, copying nothing") {
  std::unique_ptr<RuleSet> packs = test::loadDefaultPacks();
  Expected<Target> target = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  REQUIRE(target.ok());
  // torch's MultiheadAttention: one packed projection [S, B, 3E] sliced
  // into Q, K and V, each reshaped into heads and transposed (K to
  // [heads, D, S]: its rows along the head, the keys-as-rows scores), the
  // result transposed back and the heads merged. 5 queries (not a multiple
  // of 4), 2 heads of 8. With B = 2, merging B and the heads is not a view
  // of the packed buffer: the family refuses, and the plain attention rule
  // fuses the core alone.
  auto mha = [](int64_t B) {
    const std::string b = std::to_string(B), bh = std::to_string(2 * B), rows = std::to_string(5 * B);
    return R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[5,)" + b + R"(,48] qkv, float[)" + bh + R"(,1,5] mask) => (float[)" + rows + R"(,16] y) {
  s0 = Constant <value = int64[1] {0}> ()
  s16 = Constant <value = int64[1] {16}> ()
  s32 = Constant <value = int64[1] {32}> ()
  s48 = Constant <value = int64[1] {48}> ()
  ax = Constant <value = int64[1] {2}> ()
  heads = Constant <value = int64[3] {5, )" + bh + R"(, 8}> ()
  merged = Constant <value = int64[2] {)" + rows + R"(, 16}> ()
  scale = Constant <value = float {0.35}> ()
  q0 = Slice (qkv, s0, s16, ax)
  k0 = Slice (qkv, s16, s32, ax)
  v0 = Slice (qkv, s32, s48, ax)
  q1 = Reshape (q0, heads)
  q = Transpose <perm = [1, 0, 2]> (q1)
  k1 = Reshape (k0, heads)
  kt = Transpose <perm = [1, 2, 0]> (k1)
  v1 = Reshape (v0, heads)
  v = Transpose <perm = [1, 0, 2]> (v1)
  sc = MatMul (q, kt)
  z = Mul (sc, scale)
  m = Add (z, mask)
  p = Softmax <axis = -1> (m)
  o = MatMul (p, v)
  ot = Transpose <perm = [1, 0, 2]> (o)
  y = Reshape (ot, merged)
}
)";
  };
  // Strides no path loads as vectors: K's elements and keys both strided
  // (gathered), V's rows strided along the head, the result's too.
  const std::string strided = R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2,5,8] q, float[5,8,2] kx, float[8,5,2] vx) => (float[8,5,2] y) {
  scale = Constant <value = float {2.0}> ()
  kt = Transpose <perm = [2, 1, 0]> (kx)
  v = Transpose <perm = [2, 1, 0]> (vx)
  sc = MatMul (q, kt)
  z = Div (sc, scale)
  p = Softmax <axis = -1> (z)
  o = MatMul (p, v)
  y = Transpose <perm = [2, 1, 0]> (o)
}
)";
  struct Case {
    std::string model, rule;
    size_t members;
  };
  for (const Case& c : {Case{mha(1), "attention_views", 16}, Case{mha(2), "attention", 5},
                        Case{strided, "attention_views_unmasked", 7}}) {
    Graph g = test::parse(c.model);
    const std::vector<Tensor> inputs = randomInputs(g, 90), reference = test::run(g, inputs);
    Plan plan = planFusion(g, *packs, target.value(), codegen::kernelFamilies());
    const auto attention = std::find_if(plan.groups.begin(), plan.groups.end(),
                                        [](const Group& grp) { return grp.kernel == "attention"; });
    REQUIRE(attention != plan.groups.end());
    CHECK(attention->rule->name == c.rule);
    CHECK(attention->nodes.size() == c.members);
    checkTilings(g, plan, packs->catalog, inputs, reference, {codegen::GemmTiling{}}, 1e-5f);
    // On a CPU, keys stored as rows (through the views) are transposed
    // into each work-item's local memory (5 keys: a block of 4 and a tail;
    // two chunks of query rows per head).
    const codegen::KernelOptions cpu = codegen::KernelOptions::forTarget(target.value());
    REQUIRE(cpu.attention.ownedKeys);
    REQUIRE(cpu.attention.scoreRows > 0);
    Expected<codegen::KernelSource> owned = codegen::emitAttention(g, attention->nodes, packs->catalog, "attn", "attn", cpu.attention);
    REQUIRE_MESSAGE(owned.ok(), test::why(owned));
    CHECK((owned->source.find("__local float kl[") != std::string::npos) == (c.rule != "attention"));
    // Rows of scores where the keys are read as vectors: given transposed, or owned.
    CHECK(owned->source.find("float sc[") != std::string::npos);
    CHECK_MESSAGE(codegen::compileToSpirv(owned->source, owned->name).ok(), owned->source);
    runAndCheck(g, codegen::planGroups(plan), packs->catalog, inputs, reference, cpu, 1e-5f);
    if (c.rule == "attention_views")  // the whole block is one kernel: nothing copied before or after
      CHECK(plan.groups.size() == 1);
  }
}

TEST_CASE("the tuner keeps the fastest tiling when it beats the default by the margin, else the default") {
  // Times worked out by hand; the default is candidate 0.
  CHECK(codegen::chooseTiling({1.0}, 0.9) == 0);
  CHECK(codegen::chooseTiling({1.0, 0.95, 1.2}, 0.9) == 0);   // 5 % faster: within the noise
  CHECK(codegen::chooseTiling({1.0, 0.8, 0.85, 0.5}, 0.9) == 3);  // the fastest, not the first below the margin
  CHECK(codegen::chooseTiling({1.0, 0.5, 0.7}, 0.9) == 1);
  CHECK(codegen::chooseTiling({2.0, 3.0, 4.0}, 0.9) == 0);    // never a slower one
  CHECK(codegen::chooseTiling({1.0, 0.89}, 0.9) == 1);
  CHECK(codegen::chooseTiling({1.0, 0.91}, 0.9) == 0);
}

TEST_CASE("tuned tilings compute what the default does, and are cached per machine in FUSEC_CACHE_DIR") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  Graph g = test::parse(test::model("g (float[1,8,12,12] x, float[16,8,3,3] w, float[4,16] a) => (float[1,16,12,12] y, float[4,144] z)",
                                    R"(
    c = Conv <pads = [1, 1, 1, 1]> (x, w)
    y = Relu (c)
    s = Constant <value = int64[2] {16, 144}> ()
    f = Reshape (y, s)
    z = MatMul (a, f)
  )"));
  std::vector<Tensor> inputs = {randomTensor({1, 8, 12, 12}, 1), randomTensor({16, 8, 3, 3}, 2), randomTensor({4, 16}, 3)};
  std::vector<Tensor> reference = test::run(g, inputs);
  std::vector<codegen::KernelGroup> groups = codegen::singleNodeGroups(g);
  codegen::KernelOptions options;
  Expected<std::vector<codegen::TunedKernel>> tuned =
      codegen::tuneKernels(device(), g, groups, ops->catalog, options, {.launches = 2, .margin = 0.9, .useCache = false, .progress = {}});
  REQUIRE_MESSAGE(tuned.ok(), test::why(tuned));
  REQUIRE(tuned->size() == 2);  // the Conv and the MatMul
  CHECK(options.gemmTilings.size() == 2);
  for (const codegen::TunedKernel& t : tuned.value()) {
    INFO(t.group);
    CHECK_FALSE(t.cached);
    const auto& c = codegen::gemmCandidates();
    CHECK(std::any_of(c.begin(), c.end(), [&](const codegen::GemmTiling& x) {
      return x.rows == t.tiling.rows && x.width == t.tiling.width && x.localRows == t.tiling.localRows && x.depth == t.tiling.depth;
    }));
  }
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), g, groups, ops->catalog, inputs, options);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  for (size_t i = 0; i < reference.size(); ++i) test::checkClose(run->outputs[i], reference[i], 1e-4f);
  // Tuned once per machine: the second time reads the cache, in the folder
  // FUSEC_CACHE_DIR names (ctest sets it inside the build tree).
  const char* cache = std::getenv("FUSEC_CACHE_DIR");
  REQUIRE_MESSAGE(cache, "ctest sets FUSEC_CACHE_DIR");
  const std::filesystem::path tuning = std::filesystem::path(cache) / "tuning";
  std::error_code ec;
  std::filesystem::remove_all(tuning, ec);
  // With a CPU target's options: the candidates and the cached tilings keep
  // its choices (panels owned by one work-item, GEMV rows per work-item),
  // only the tile changes.
  Expected<Target> cpu = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  REQUIRE(cpu.ok());
  codegen::KernelOptions first = codegen::KernelOptions::forTarget(cpu.value()), second = first;
  REQUIRE(codegen::tuneKernels(device(), g, groups, ops->catalog, first, {.launches = 1, .margin = 0.9, .useCache = true, .progress = {}}).ok());
  CHECK(std::distance(std::filesystem::directory_iterator(tuning), std::filesystem::directory_iterator()) == 2);
  Expected<std::vector<codegen::TunedKernel>> again = codegen::tuneKernels(device(), g, groups, ops->catalog, second, {.launches = 1, .margin = 0.9, .useCache = true, .progress = {}});
  REQUIRE_MESSAGE(again.ok(), test::why(again));
  for (const codegen::TunedKernel& t : again.value()) CHECK(t.cached);
  REQUIRE(second.gemmTilings.size() == first.gemmTilings.size());
  for (const auto& [node, t] : first.gemmTilings) {
    CHECK(second.gemmTilings.at(node).rows == t.rows);
    CHECK(second.gemmTilings.at(node).depth == t.depth);
    CHECK(second.gemmTilings.at(node).localRows == t.localRows);
    for (const codegen::GemmTiling* tiling : {&t, static_cast<const codegen::GemmTiling*>(&second.gemmTilings.at(node))}) {
      CHECK_FALSE(tiling->stagedPrologue);
      CHECK_FALSE(tiling->gemvSplitK);
      CHECK(tiling->shallowDepth == first.gemm.shallowDepth);
      CHECK(tiling->shallowLocalRows == 1);
    }
  }
}

TEST_CASE("a schedule views reshapes, reuses dead buffers and keeps outputs") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // a -> Relu -> Reshape (a view) -> Exp -> Neg -> Sigmoid (y); Relu's and
  // Exp's buffers die, so Neg and Sigmoid reuse them. `x` is returned as is.
  Graph g = test::parse(test::model("g (float[4,8] a, float[2] x) => (float[32] y, float[2] x2)", R"(
    r = Relu (a)
    shape = Constant <value = int64[1] {32}> ()
    f = Reshape (r, shape)
    e = Exp (f)
    n = Neg (e)
    y = Sigmoid (n)
    x2 = Identity (x)
  )"));
  Expected<codegen::Schedule> s = codegen::scheduleGraph(g, codegen::singleNodeGroups(g), ops->catalog);
  REQUIRE_MESSAGE(s.ok(), test::why(s));
  std::vector<std::string> names;
  for (const codegen::KernelSource& k : s->kernels) names.push_back(k.name);
  CHECK(names.size() == 4);  // Relu, Exp, Neg, Sigmoid: no Reshape, Constant or Identity kernel
  REQUIRE(s->arguments.size() == 4);
  CHECK(s->arguments[1][0] == s->arguments[0][1]);  // Exp reads Relu's buffer through the view
  CHECK(s->arguments[2][1] == s->arguments[0][1]);  // Neg reuses Relu's buffer, dead after Exp
  CHECK(s->arguments[3][1] == s->arguments[1][1]);  // Sigmoid reuses Exp's, dead after Neg
  CHECK(s->memory.buffers == 2);
  CHECK(s->memory.peak == 2 * 32 * 4);
  CHECK(s->memory.withoutReuse == 4 * 32 * 4);
  REQUIRE(s->inputBuffers.size() == 2);
  REQUIRE(s->outputBuffers.size() == 2);
  CHECK(s->outputBuffers[1] == *s->inputBuffers[1]);  // an output that views an input shares its buffer
  CHECK(s->buffers[*s->inputBuffers[0]].kind == codegen::ScheduledBuffer::Kind::Input);

  std::vector<Tensor> inputs = {randomTensor({4, 8}, 1), randomTensor({2}, 2)};
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), g, codegen::singleNodeGroups(g), ops->catalog, inputs);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  std::vector<Tensor> reference = test::run(g, inputs);
  test::checkClose(run->outputs[0], reference[0], 1e-5f);
  test::checkClose(run->outputs[1], inputs[1], 1e-7f);
}

TEST_CASE("a Transpose that moves only dims of size 1 is a view; one that moves others is a kernel") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // ViT's [1, S, E] -> [S, 1, E] before its packed projection; [2, 3] -> [3, 2] moves elements.
  Graph g = test::parse(test::model("g (float[1,5,4] x, float[4,3] w, float[2,3] z) => (float[5,1,3] y, float[3,2] t)", R"(
    xt = Transpose <perm = [1, 0, 2]> (x)
    y = MatMul (xt, w)
    t = Transpose (z)
  )"));
  Expected<codegen::Schedule> s = codegen::scheduleGraph(g, codegen::singleNodeGroups(g), ops->catalog);
  REQUIRE_MESSAGE(s.ok(), test::why(s));
  CHECK(s->kernels.size() == 2);  // the MatMul and the second Transpose
  const std::vector<Tensor> inputs = randomInputs(g, 150), reference = test::run(g, inputs);
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), g, codegen::singleNodeGroups(g), ops->catalog, inputs);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  for (size_t i = 0; i < reference.size(); ++i) test::checkClose(run->outputs[i], reference[i], 1e-5f);
}

TEST_CASE("a Concat's inputs are written in place by their producers where the device can start a sub-buffer there") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // p = Relu(x) and n = Relu(-x) fill the two halves of c (2 KiB each);
  // `n` is also read after c's reader, and w (as large as c) is computed in
  // between: c's slot must outlive every reader of its parts, or w takes it.
  Graph g = test::parse(test::model(
      "g (float[1,32,4,4] x) => (float[1,64,4,4] y, float[1,64,4,4] w, float[1,32,4,4] z)", R"(
    p = Relu (x)
    m = Neg (x)
    n = Relu (m)
    c = Concat <axis = 1> (p, n)
    y = Sigmoid (c)
    w = Neg (y)
    z = Add (n, x)
  )"));
  const std::vector<codegen::KernelGroup> groups = codegen::singleNodeGroups(g);
  codegen::KernelOptions inPlace;
  inPlace.subBufferAlignment = 128;
  Expected<codegen::Schedule> s = codegen::scheduleGraph(g, groups, ops->catalog, inPlace);
  REQUIRE_MESSAGE(s.ok(), test::why(s));
  std::vector<std::string> names;
  for (const codegen::KernelSource& k : s->kernels) names.push_back(k.name);
  const std::vector<std::string> launched = {"k0_Relu_0", "k1_Neg_1", "k2_Relu_2", "k4_Sigmoid_4", "k5_Neg_5", "k6_Add_6"};
  CHECK(names == launched);  // no k3_Concat_3
  REQUIRE(s->arguments.size() == 6);
  const codegen::ScheduledBuffer& p = s->buffers[s->arguments[0][1]];
  const codegen::ScheduledBuffer& n = s->buffers[s->arguments[2][1]];
  REQUIRE(p.kind == codegen::ScheduledBuffer::Kind::Part);
  REQUIRE(n.kind == codegen::ScheduledBuffer::Kind::Part);
  CHECK(p.offset == 0);
  CHECK(n.offset == 32 * 16 * 4);
  CHECK(p.bytes == 32 * 16 * 4);
  CHECK(p.parent == n.parent);
  CHECK(s->arguments[3][0] == p.parent);            // Sigmoid reads the whole of c
  CHECK(s->arguments[5][0] == s->arguments[2][1]);  // Add reads n in place
  CHECK(s->arguments[4][1] != p.parent);            // w does not take c's slot while n is to be read

  // Against values worked out by hand: y = sigmoid(max(x, 0) | max(-x, 0)),
  // w = -y, z = max(-x, 0) + x = max(x, 0).
  const Tensor x = randomTensor({1, 32, 4, 4}, 5);
  Expected<codegen::DeviceProgram> program =
      codegen::DeviceProgram::build(device(), g, groups, ops->catalog, inPlace);
  REQUIRE_MESSAGE(program.ok(), test::why(program));
  CHECK(program->kernels().size() == 6);
  Expected<codegen::DeviceRun> run = program->run({x});
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  const float* y = run->outputs[0].data<float>();
  const float* w = run->outputs[1].data<float>();
  const float* z = run->outputs[2].data<float>();
  const float* xs = x.data<float>();
  for (int i = 0; i < 512; ++i) {
    CHECK(y[i] == doctest::Approx(1 / (1 + std::exp(-std::max(xs[i], 0.0f)))).epsilon(1e-5));
    CHECK(y[512 + i] == doctest::Approx(1 / (1 + std::exp(-std::max(-xs[i], 0.0f)))).epsilon(1e-5));
    CHECK(w[i] == -y[i]);
    CHECK(z[i] == doctest::Approx(std::max(xs[i], 0.0f)).epsilon(1e-6));
  }

  // Each reason for a copy: the Concat stays a kernel.
  auto concatKernels = [&](const std::string& signature, const std::string& body, size_t alignment) {
    Graph h = test::parse(test::model(signature, body));
    codegen::KernelOptions options;
    options.subBufferAlignment = alignment;
    Expected<codegen::Schedule> hs = codegen::scheduleGraph(h, codegen::singleNodeGroups(h), ops->catalog, options);
    REQUIRE_MESSAGE(hs.ok(), test::why(hs));
    size_t concats = 0;
    for (const codegen::KernelSource& k : hs->kernels) concats += k.name.find("Concat") != std::string::npos;
    return concats;
  };
  const std::string sig = "g (float[1,32,4,4] x) => (float[1,64,4,4] c)";
  CHECK(concatKernels(sig, "p = Relu (x)\n n = Neg (x)\n c = Concat <axis = 1> (p, n)", 128) == 0);
  CHECK(concatKernels(sig, "p = Relu (x)\n n = Neg (x)\n c = Concat <axis = 1> (p, n)", 0) == 1);  // not asked
  CHECK(concatKernels(sig, "p = Relu (x)\n c = Concat <axis = 1> (p, x)", 128) == 1);  // a graph input
  CHECK(concatKernels(sig, "p = Relu (x)\n c = Concat <axis = 1> (p, p)", 128) == 1);  // the same value twice
  CHECK(concatKernels("g (float[1,32,4,4] x) => (float[1,64,4,4] c, float[1,32,4,4] p)",
                      "p = Relu (x)\n n = Neg (x)\n c = Concat <axis = 1> (p, n)", 128) == 1);  // p is read back
  CHECK(concatKernels("g (float[2,32,4,4] x) => (float[2,64,4,4] c)",
                      "p = Relu (x)\n n = Neg (x)\n c = Concat <axis = 1> (p, n)", 128) == 1);  // 2 images: interleaved
  CHECK(concatKernels("g (float[1,3,4,4] x) => (float[1,6,4,4] c)",
                      "p = Relu (x)\n n = Neg (x)\n c = Concat <axis = 1> (p, n)", 128) == 1);  // n at 192 bytes
  CHECK(concatKernels("g (float[1,3,4,4] x) => (float[1,6,4,4] c)",
                      "p = Relu (x)\n n = Neg (x)\n c = Concat <axis = 1> (p, n)", 64) == 0);
}

TEST_CASE("a Slice of one contiguous run of its operand is read in place where the device can start a sub-buffer there") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // ShuffleNet's halves: c = Relu(x) sliced into channels 0..31 and
  // 32..63 (2 KiB each); `hi` is also read after `y` is computed, and `w`
  // (as large as c) in between: c's slot must outlive every reader of its
  // slices. `mid` starts 24 channels in (1.5 KiB: no sub-buffer at 1 KiB
  // alignment) and `odd` steps by 2: both stay kernels.
  Graph g = test::parse(test::model(
      "g (float[1,64,4,4] x) => (float[1,32,4,4] y, float[1,64,4,4] w, float[1,32,4,4] z, float[1,16,4,4] mid, "
      "float[1,32,4,4] odd)",
      R"(
    c = Relu (x)
    z0 = Constant <value = int64[1] {0}> ()
    h = Constant <value = int64[1] {32}> ()
    e = Constant <value = int64[1] {64}> ()
    ax = Constant <value = int64[1] {1}> ()
    lo = Slice (c, z0, h, ax)
    hi = Slice (c, h, e, ax)
    y = Neg (lo)
    w = Neg (x)
    z = Add (hi, y)
    m0 = Constant <value = int64[1] {24}> ()
    m1 = Constant <value = int64[1] {40}> ()
    mid = Slice (c, m0, m1, ax)
    two = Constant <value = int64[1] {2}> ()
    odd = Slice (c, z0, e, ax, two)
  )"));
  const std::vector<codegen::KernelGroup> groups = codegen::singleNodeGroups(g);
  codegen::KernelOptions inPlace;
  inPlace.subBufferAlignment = 1024;
  const codegen::BufferAliases aliases = codegen::aliasBuffers(g, groups, ops->catalog, inPlace.subBufferAlignment);
  CHECK(aliases.sliceViews == 2);
  Expected<codegen::Schedule> s = codegen::scheduleGraph(g, groups, ops->catalog, inPlace);
  REQUIRE_MESSAGE(s.ok(), test::why(s));
  std::vector<std::string> names;
  for (const codegen::KernelSource& k : s->kernels) names.push_back(k.name);
  const std::vector<std::string> launched = {"k0_Relu_0", "k3_Neg_3", "k4_Neg_4", "k5_Add_5", "k6_Slice_6", "k7_Slice_7"};
  CHECK(names == launched);  // no k1_Slice_1, k2_Slice_2
  REQUIRE(s->arguments.size() == 6);
  const size_t c = s->arguments[0][1];
  const codegen::ScheduledBuffer& lo = s->buffers[s->arguments[1][0]];
  const codegen::ScheduledBuffer& hi = s->buffers[s->arguments[3][0]];
  REQUIRE(lo.kind == codegen::ScheduledBuffer::Kind::View);
  REQUIRE(hi.kind == codegen::ScheduledBuffer::Kind::View);
  CHECK(lo.parent == c);
  CHECK(hi.parent == c);
  CHECK(lo.offset == 0);
  CHECK(hi.offset == 32 * 16 * 4);
  CHECK(s->arguments[2][1] != c);  // w does not take c's slot while hi is to be read

  // Against the interpreter, bit for bit.
  const Tensor x = randomTensor({1, 64, 4, 4}, 7);
  std::vector<Tensor> reference = test::run(g, {x});
  Expected<codegen::DeviceProgram> program = codegen::DeviceProgram::build(device(), g, groups, ops->catalog, inPlace);
  REQUIRE_MESSAGE(program.ok(), test::why(program));
  CHECK(program->kernels().size() == 6);
  Expected<codegen::DeviceRun> run = program->run({x});
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  for (size_t i = 0; i < reference.size(); ++i) {
    INFO(g.value(g.outputs()[i]).name);
    CHECK(run->outputs[i] == reference[i]);
  }
  // Without sub-buffers every Slice is a kernel.
  CHECK(codegen::aliasBuffers(g, groups, ops->catalog, 0).sliceViews == 0);
}


TEST_CASE("2-D pooling a row segment at a time matches the interpreter inside the image and at its edges") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // 37 wide: rows of 8 outputs read inside the image (vector path), the
  // padded first tiles and the last ones whose windows overhang the row
  // (scalar path); partial last tiles inside the row (33 and 18 outputs:
  // 1 and 2 past the last 8) on the vector path, reading on into the next
  // row, but in the input's last rows, where that would leave it.
  const char* pools[] = {
      "y = MaxPool <kernel_shape = [3, 3], strides = [2, 2], pads = [1, 1, 1, 1]> (x)",
      "y = MaxPool <kernel_shape = [3, 3], strides = [2, 2], ceil_mode = 1> (x)",
      "y = MaxPool <kernel_shape = [2, 3], strides = [1, 1], dilations = [2, 2]> (x)",
      "y = AveragePool <kernel_shape = [2, 2], strides = [2, 2]> (x)",
      "y = AveragePool <kernel_shape = [3, 3], strides = [2, 2], pads = [1, 1, 1, 1], count_include_pad = 1, ceil_mode = 1> (x)",
      "y = AveragePool <kernel_shape = [3, 3], strides = [2, 1], pads = [2, 1, 0, 1]> (x)",
  };
  for (const char* pool : pools) {
    INFO(std::string(pool));
    Graph g = test::parse(test::model("g (float[1,3,37,37] x) => (float[1,3,h,w] y)", pool));
    const std::vector<Tensor> inputs = {randomTensor({1, 3, 37, 37}, 11)};
    const std::vector<Tensor> want = test::run(g, inputs);
    Expected<codegen::DeviceRun> got = runAsOneKernel(g, ops->catalog, inputs);
    REQUIRE_MESSAGE(got.ok(), test::why(got));
    test::checkClose(got->outputs[0], want[0], 1e-6f);
  }
}

TEST_CASE("integer kernels compute in their own type, exactly") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // int64 values beyond float's 24-bit mantissa, negative operands for the
  // floor-division Mod and truncating Div, limits for Clip without bounds.
  Graph g = test::parse(test::model("g (int64[6] a, int64[6] b, int32[6] c) => (int64[6] s, int64[6] m, int64[6] f, "
                                    "int64[6] q, int32[6] r, bool[6] lt)",
                                    R"(
    s = Add (a, b)
    m = Mod (a, b)
    f = Mod <fmod = 1> (a, b)
    q = Div (a, b)
    r = Clip (c)
    lt = Less (a, b)
  )"));
  const int64_t big = (int64_t{1} << 53) + 1;
  std::vector<Tensor> inputs = {test::ints({6}, {big, -7, 7, -7, 9, 0}), test::ints({6}, {2, 3, -3, -3, 4, 5}),
                                Tensor::fromVector<int32_t>({6}, {-5, 3, 0, -1, 2147483647, -2147483647})};
  std::vector<Tensor> reference = test::run(g, inputs);
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), g, codegen::singleNodeGroups(g), ops->catalog, inputs);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  for (size_t i = 0; i < reference.size(); ++i) {
    INFO("output " << i);
    REQUIRE(run->outputs[i].dtype() == reference[i].dtype());
    for (int64_t k = 0; k < reference[i].numel(); ++k) CHECK(run->outputs[i].scalarAt(k) == reference[i].scalarAt(k));
  }
  CHECK(run->outputs[0].data<int64_t>()[0] == big + 2);  // exact, not rounded through float
  CHECK(run->outputs[1].data<int64_t>()[1] == 2);       // -7 mod 3 takes the divisor's sign
  CHECK(run->outputs[3].data<int64_t>()[1] == -2);      // -7 / 3 truncates

  // Division by zero never traps the device: the quotient and the
  // remainder are 0 (the interpreter reports an error).
  Graph z = test::parse(test::model("g (int32[2] a, int32[2] b) => (int32[2] q, int32[2] m)", "q = Div (a, b)\nm = Mod (a, b)"));
  Expected<codegen::DeviceRun> zero = codegen::runOnDevice(
      device(), z, codegen::singleNodeGroups(z), ops->catalog,
      {Tensor::fromVector<int32_t>({2}, {5, -2147483647 - 1}), Tensor::fromVector<int32_t>({2}, {0, -1})});
  REQUIRE_MESSAGE(zero.ok(), test::why(zero));
  CHECK(zero->outputs[0].data<int32_t>()[0] == 0);
  CHECK(zero->outputs[0].data<int32_t>()[1] == -2147483647 - 1);  // INT_MIN / -1 wraps
  CHECK(zero->outputs[1].data<int32_t>()[0] == 0);
  CHECK(zero->outputs[1].data<int32_t>()[1] == 0);
}

TEST_CASE("16-bit floats are stored as such, computed in float and rounded to nearest even") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  Graph g = test::parse(test::model("g (float16[5] a, float[5] b, float[5] x) => (float16[5] s, bfloat16[5] r, float[5] w)",
                                    R"(
    af = Cast <to = 1> (a)
    sf = Add (af, b)
    s = Cast <to = 10> (sf)
    r = Cast <to = 16> (x)
    h = Cast <to = 10> (x)
    w = Cast <to = 1> (h)
  )"));
  // 1 + 2^-8 lies halfway between two bfloat16 values, 1 + 3 * 2^-8
  // too: nearest even rounds the first down and the second up. 65520 is
  // float16's halfway point to infinity; 1e-7 is a float16 subnormal.
  const float ulp = 1.0f / 256;
  Tensor x = Tensor::fromVector<float>({5}, {1 + ulp, 1 + 3 * ulp, 65520.0f, 1e-7f, -2.5f});
  std::vector<Tensor> inputs = {x.castTo(DType::Float16), Tensor::fromVector<float>({5}, {0.5f, 1, -1, 2, 0}),
                                x};
  std::vector<Tensor> reference = test::run(g, inputs);
  Expected<std::vector<NodeRef>> order = g.topologicalOrder();
  REQUIRE(order.ok());
  for (const std::vector<codegen::KernelGroup>& groups : {codegen::singleNodeGroups(g), std::vector<codegen::KernelGroup>{order.value()}}) {
    Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), g, groups, ops->catalog, inputs);
    REQUIRE_MESSAGE(run.ok(), test::why(run));
    for (size_t i = 0; i < reference.size(); ++i) {
      INFO("output " << i << ", " << groups.size() << " groups");
      REQUIRE(run->outputs[i].dtype() == reference[i].dtype());
      REQUIRE(run->outputs[i].byteSize() == reference[i].byteSize());
      CHECK(std::memcmp(run->outputs[i].raw(), reference[i].raw(), reference[i].byteSize()) == 0);
    }
    CHECK(run->outputs[1].scalarAt(0) == 1.0);
    CHECK(run->outputs[1].scalarAt(1) == 1 + 4 * ulp);
    CHECK(std::isinf(run->outputs[2].scalarAt(2)));
    CHECK(run->outputs[2].scalarAt(3) > 0);
  }
}

TEST_CASE("inputs that decide shapes are fixed to one run's values, and other values are refused") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // `axes` reaches ReduceSum through an Abs; `start` and `limit` decide
  // Range's length; `x` is data and stays an input.
  Graph g = test::parse(test::model("g (float[2,3] x, int64[1] a, int64 start, int64 limit) => (float[2,1] y, int64[?] r)",
                                    R"(
    axes = Abs (a)
    y = ReduceSum (x, axes)
    one = Constant <value = int64 {1}> ()
    r = Range (start, limit, one)
  )"));
  CHECK(codegen::inputsDecidingShapes(g, test::coreCatalog()) == std::vector<size_t>{1, 2, 3});
  std::vector<Tensor> inputs = {randomTensor({2, 3}, 7), test::ints({1}, {-1}), Tensor::fromVector<int64_t>({}, {2}),
                                Tensor::fromVector<int64_t>({}, {6})};
  std::vector<Tensor> reference = test::run(g, inputs);

  Graph s = g.clone();
  Expected<std::vector<std::string>> fixed = codegen::specializeInputs(s, inputs, test::coreCatalog());
  REQUIRE_MESSAGE(fixed.ok(), test::why(fixed));
  CHECK(fixed.value() == std::vector<std::string>{"a", "start", "limit"});
  CHECK(s.value(s.outputs()[1]).type.staticShape() == Shape{4});  // Range folded to a constant
  Expected<codegen::DeviceProgram> program =
      codegen::DeviceProgram::build(device(), s, codegen::singleNodeGroups(s), ops->catalog);
  REQUIRE_MESSAGE(program.ok(), test::why(program));
  CHECK(program->kernels().size() == 1);  // the reduction; Abs and Range folded
  Expected<codegen::DeviceRun> run = program->run(inputs);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  test::checkClose(run->outputs[0], reference[0], 1e-5f);
  CHECK(run->outputs[1].scalarAt(3) == reference[1].scalarAt(3));

  inputs[1] = test::ints({1}, {0});  // another reduction axis: the kernels do not fit
  Expected<codegen::DeviceRun> other = program->run(inputs);
  REQUIRE_FALSE(other.ok());
  CHECK(other.error().message.find("input `a` was fixed") != std::string::npos);
}

TEST_CASE("reductions over any axes, with a fused prologue, and arg reductions match the interpreter") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // Column and middle-axis reductions (not the innermost: the reduce
  // family), one with an elementwise prologue in the same kernel.
  Graph g = test::parse(test::model(
      "g (float[3,5,4] x, float[4] b) => (float[1,5,4] s, float[3,4] m, float[3,1,1] l, int64[3,4] a, int64[5,4] z)", R"(
    t = Add (x, b)
    e = Exp (t)
    ax = Constant <value = int64[1] {0}> ()
    s = ReduceSum <keepdims = 1> (e, ax)
    m = ReduceMax <axes = [1], keepdims = 0> (x)
    l = ReduceLogSumExp <axes = [1, 2]> (x)
    a = ArgMax <axis = 1, keepdims = 0, select_last_index = 1> (x)
    z = ArgMin <axis = 0, keepdims = 0> (x)
  )", 13));
  Tensor x = randomTensor({3, 5, 4}, 7);
  x.data<float>()[4] = x.data<float>()[0] = 5.f;  // a tie along axis 1: select_last_index decides
  std::vector<Tensor> inputs = {x, randomTensor({4}, 8)};
  std::vector<Tensor> reference = test::run(g, inputs);
  // Add and Exp fused into the ReduceSum's kernel; the rest alone.
  const std::vector<codegen::KernelGroup> groups = fuseOneGroup(g, {"t", "e", "s"}, "sum_of_exp");
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), g, groups, ops->catalog, inputs);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  CHECK(run->kernelTimes.size() == 5);
  for (size_t i = 0; i < 3; ++i) test::checkClose(run->outputs[i], reference[i], 1e-5f);
  for (size_t i = 3; i < 5; ++i)
    for (int64_t k = 0; k < reference[i].numel(); ++k) CHECK(run->outputs[i].data<int64_t>()[k] == reference[i].data<int64_t>()[k]);
  CHECK(run->outputs[3].data<int64_t>()[0] == 1);  // the last of the tied maxima
}

TEST_CASE("column reductions a vector of outputs per work-item (CPUs) match the interpreter") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // Innermost axes of 16, 24, 12 and 4 kept (vectors of 16, 8, 4 and 4
  // outputs), 7 (no whole vectors: one output per work-item); a prologue
  // with an operand broadcast along the reduced axis; infinities for the
  // extremes.
  Graph g = test::parse(test::model(
      "g (float[3,6,16] x, float[1,1,16] mu, float[2,5,24] y, float[4,3,12] w, float[3,5,4] v, float[5,7] u) => "
      "(float[3,1,16] var, float[24] mean, float[3,12] mx, float[3,4] l2, float[7] mn, float[3,1,4] l1)", R"(
    d = Sub (x, mu)
    q = Mul (d, d)
    var = ReduceMean <axes = [1]> (q)
    mean = ReduceMean <axes = [0, 1], keepdims = 0> (y)
    mx = ReduceMax <axes = [0], keepdims = 0> (w)
    l2 = ReduceL2 <axes = [1], keepdims = 0> (v)
    mn = ReduceMin <axes = [0], keepdims = 0> (u)
    l1 = ReduceL1 <axes = [1]> (v)
  )", 17));
  std::vector<Tensor> inputs = randomInputs(g, 51);
  inputs[3].data<float>()[5] = INFINITY;
  inputs[3].data<float>()[36 + 7] = -INFINITY;
  const std::vector<Tensor> reference = test::run(g, inputs);
  const std::vector<codegen::KernelGroup> groups = fuseOneGroup(g, {"d", "q", "var"}, "variance");
  REQUIRE(groups.size() == 6);
  for (const codegen::KernelGroup& grp : groups) {
    Expected<codegen::KernelSource> k = codegen::emitReduce(g, grp.nodes, ops->catalog, grp.name, grp.name, true);
    REQUIRE_MESSAGE(k.ok(), test::why(k));
    INFO(k->source);
    const bool minOf7 = g.node(grp.nodes.back()).op == "ReduceMin";
    CHECK((k->source.find("vstore") != std::string::npos) == !minOf7);
    // The broadcast mean is read at the loops' coordinates: no division of the element's index.
    CHECK(k->source.find("(i / ") == std::string::npos);
    CHECK_MESSAGE(codegen::compileToSpirv(k->source, k->name).ok(), k->source);
  }
  codegen::KernelOptions options;
  options.vectorColumns = true;
  const codegen::DeviceRun run = runAndCheck(g, groups, ops->catalog, inputs, reference, options, 1e-5f);
  CHECK(std::isinf(run.outputs[2].data<float>()[5]));
}

TEST_CASE("a LayerNormalization over a middle axis between its Transposes is one kernel and matches the interpreter") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // ConvNeXt's LayerNorm2d (channels of NCHW: 40 positions a stride, 8
  // lanes; with a bias and an epsilon of its own), the same on a 7x7 map
  // (49: no whole vectors) without a bias, a rank-3 tensor's middle axis,
  // and axis 2 of a rank-4 tensor.
  Graph g = test::parse(test::model(
      "g (float[2,6,5,8] x, float[6] s, float[6] b, float[1,5,7,7] x2, float[5] s2, float[3,4,6] x3, float[4] s3, "
      "float[4] b3, float[1,3,4,8] x4, float[4] s4, float[4] b4) => "
      "(float[2,6,5,8] y, float[1,5,7,7] y2, float[3,4,6] y3, float[1,3,4,8] y4)", R"(
    t = Transpose <perm = [0, 2, 3, 1]> (x)
    n = LayerNormalization <epsilon = 0.001> (t, s, b)
    y = Transpose <perm = [0, 3, 1, 2]> (n)
    t2 = Transpose <perm = [0, 2, 3, 1]> (x2)
    n2 = LayerNormalization (t2, s2)
    y2 = Transpose <perm = [0, 3, 1, 2]> (n2)
    t3 = Transpose <perm = [0, 2, 1]> (x3)
    n3 = LayerNormalization <axis = 2> (t3, s3, b3)
    y3 = Transpose <perm = [0, 2, 1]> (n3)
    t4 = Transpose <perm = [0, 1, 3, 2]> (x4)
    n4 = LayerNormalization (t4, s4, b4)
    y4 = Transpose <perm = [0, 1, 3, 2]> (n4)
  )", 17));
  std::vector<Tensor> inputs = randomInputs(g, 61);
  for (int64_t i = 0; i < 80; ++i) inputs[0].data<float>()[i] += 30.f;  // a mean far from 0
  const std::vector<Tensor> reference = test::run(g, inputs);
  std::vector<codegen::KernelGroup> groups;
  const std::vector<NodeRef> nodes = g.nodes();  // in the order written
  for (size_t k = 0; k < 4; ++k)
    groups.emplace_back(std::vector<NodeRef>(nodes.begin() + 3 * k, nodes.begin() + 3 * k + 3), "norm" + std::to_string(k));
  for (const bool vectorColumns : {false, true}) {
    CAPTURE(vectorColumns);
    for (size_t k = 0; k < groups.size(); ++k) {
      Expected<codegen::KernelSource> src =
          codegen::emitAxisLayerNorm(g, groups[k].nodes, ops->catalog, groups[k].name, groups[k].name, vectorColumns);
      REQUIRE_MESSAGE(src.ok(), test::why(src));
      INFO(src->source);
      CHECK((src->source.find("vstore8") != std::string::npos) == (vectorColumns && (k == 0 || k == 3)));
      CHECK_MESSAGE(codegen::compileToSpirv(src->source, src->name).ok(), src->source);
    }
    codegen::KernelOptions options;
    options.vectorColumns = vectorColumns;
    CHECK(runAndCheck(g, groups, ops->catalog, inputs, reference, options, 1e-4f).kernelTimes.size() == 4);
  }
  // What the family refuses, and says so: axes not moved last and back in
  // order, a LayerNormalization over more than the moved axis.
  Graph bad = test::parse(test::model("g (float[2,3,4,5] x, float[3] s, float[60] s2) => (float[2,5,4,3] y, float[2,3,4,5] z)", R"(
    t = Transpose <perm = [0, 3, 2, 1]> (x)
    n = LayerNormalization (t, s)
    y = Transpose <perm = [0, 1, 2, 3]> (n)
    u = Transpose <perm = [0, 2, 3, 1]> (x)
    m = LayerNormalization <axis = 1> (u, s2)
    z = Transpose <perm = [0, 3, 1, 2]> (m)
  )", 17));
  const std::vector<NodeRef> all = bad.nodes();
  Expected<codegen::KernelSource> wrongPerm =
      codegen::emitAxisLayerNorm(bad, {all[0], all[1], all[2]}, ops->catalog, "p", "p", true);
  REQUIRE_FALSE(wrongPerm.ok());
  CHECK(wrongPerm.error().message.find("do not move one axis last and back") != std::string::npos);
  Expected<codegen::KernelSource> wideNorm =
      codegen::emitAxisLayerNorm(bad, {all[3], all[4], all[5]}, ops->catalog, "w", "w", true);
  REQUIRE_FALSE(wideNorm.ok());
  CHECK(wideNorm.error().message.find("not over the last axis alone") != std::string::npos);
}

TEST_CASE("a squeeze-and-excitation gate is one kernel and matches the interpreter, a work-group or a work-item per image") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // MobileNetV3's gate (ReLU, HardSigmoid; 7x7 = 49 pixels: no whole
  // vectors) on two images; EfficientNet's (SiLU written out, Sigmoid; no
  // biases; means by ReduceMean) with channel counts no block of 8 rows
  // divides; and a gate whose result is also read by an op after it.
  Graph g = test::parse(test::model(
      "g (float[2,20,7,7] x, float[6,20,1,1] w1, float[6] b1, float[20,6,1,1] w2, float[20] b2, float[1,11,4,6] x2, "
      "float[3,11,1,1] v1, float[11,3,1,1] v2) => (float[2,20,1,1] y, float[1,11,1,1] y2, float[1,11,1,1] z2)", R"(
    p = GlobalAveragePool (x)
    c1 = Conv (p, w1, b1)
    a = Relu (c1)
    c2 = Conv (a, w2, b2)
    y = HardSigmoid <alpha = 0.16666667> (c2)
    q = ReduceMean <axes = [2, 3]> (x2)
    d1 = Conv (q, v1)
    s = Sigmoid (d1)
    e = Mul (d1, s)
    d2 = Conv (e, v2)
    y2 = Sigmoid (d2)
    z2 = Neg (y2)
  )", 17));
  std::vector<Tensor> inputs = randomInputs(g, 67);
  const std::vector<Tensor> reference = test::run(g, inputs);
  const std::vector<NodeRef> nodes = g.nodes();  // in the order written
  std::vector<codegen::KernelGroup> groups;
  groups.emplace_back(std::vector<NodeRef>(nodes.begin(), nodes.begin() + 5), "mnv3");
  groups.emplace_back(std::vector<NodeRef>(nodes.begin() + 5, nodes.begin() + 11), "effnet");
  groups.emplace_back(std::vector<NodeRef>{nodes[11]}, "neg");
  for (const bool oneWorkItem : {false, true}) {
    CAPTURE(oneWorkItem);
    for (size_t k = 0; k < 2; ++k) {
      Expected<codegen::KernelSource> src =
          codegen::emitSqueezeExcite(g, groups[k].nodes, ops->catalog, groups[k].name, groups[k].name, oneWorkItem);
      REQUIRE_MESSAGE(src.ok(), test::why(src));
      INFO(src->source);
      CHECK(src->localSize == (oneWorkItem ? 1u : 64u));
      CHECK(src->globalSize == src->localSize * (k == 0 ? 2u : 1u));
      CHECK_MESSAGE(codegen::compileToSpirv(src->source, src->name).ok(), src->source);
    }
    codegen::KernelOptions options;
    options.vectorColumns = oneWorkItem;
    CHECK(runAndCheck(g, groups, ops->catalog, inputs, reference, options, 1e-5f).kernelTimes.size() == 3);
  }
  // What the family refuses, and says so: a 3x3 conv, the squeezed vector
  // read outside the gate.
  Graph bad = test::parse(test::model(
      "g (float[1,4,5,5] x, float[2,4,3,3] w1, float[4,2,1,1] w2, float[2,4,1,1] u1) => "
      "(float[1,4,1,1] y, float[1,4,1,1] z, float[1,2,1,1] t)", R"(
    p = GlobalAveragePool (x)
    c1 = Conv <pads = [1, 1, 1, 1]> (p, w1)
    r = Relu (c1)
    y = Conv (r, w2)
    q = GlobalAveragePool (x)
    d1 = Conv (q, u1)
    a = Relu (d1)
    z = Conv (a, w2)
    t = Neg (a)
  )", 17));
  const std::vector<NodeRef> all = bad.nodes();
  Expected<codegen::KernelSource> wide = codegen::emitSqueezeExcite(bad, {all[0], all[1], all[2], all[3]}, ops->catalog, "w", "w", true);
  REQUIRE_FALSE(wide.ok());
  CHECK(wide.error().unsupported);
  CHECK(wide.error().message.find("1x1 convs") != std::string::npos);
  Expected<codegen::KernelSource> read = codegen::emitSqueezeExcite(bad, {all[4], all[5], all[6], all[7]}, ops->catalog, "r", "r", true);
  REQUIRE_FALSE(read.ok());
  CHECK(read.error().message.find("read after it or outside the group") != std::string::npos);
}

TEST_CASE("the straight-line exp is accurate over float's whole range") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  Graph g = test::parse(test::model("g (float[4001] x) => (float[4001] y)", "y = Exp (x)"));
  std::vector<float> xs;
  for (int i = 0; i <= 4000; ++i) xs.push_back(-100.f + 0.05f * static_cast<float>(i));  // -100 .. 100
  xs[0] = -INFINITY;
  xs[4000] = INFINITY;
  Tensor x = test::floats({4001}, xs);
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), g, codegen::singleNodeGroups(g), ops->catalog, {x});
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = std::exp(static_cast<double>(xs[i])), got = run->outputs[0].data<float>()[i];
    if (want == 0 || std::isinf(want) || want < 1.2e-38 || want > 3.4e38) {
      CHECK((got == static_cast<float>(want) || (want < 1.2e-38 && got < 1.2e-38)));  // underflow to 0, overflow to inf
      continue;
    }
    worst = std::max(worst, std::abs(got - want) / want);
  }
  CHECK(worst < 5e-7);
  MESSAGE("exp: worst relative error " << worst);
}

TEST_CASE("a grouped, strided ConvTranspose with bias and a fused activation matches the interpreter") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  Graph g = test::parse(test::model("g (float[2,4,5,6] x, float[4,3,3,2] w, float[6] b) => (float[2,6,10,11] y)", R"(
    t = ConvTranspose <group = 2, strides = [2, 2], pads = [1, 0, 1, 1], output_padding = [1, 0], dilations = [1, 1]> (x, w, b)
    y = Relu (t)
  )"));
  std::vector<Tensor> inputs = {randomTensor({2, 4, 5, 6}, 1), randomTensor({4, 3, 3, 2}, 2), randomTensor({6}, 3)};
  std::vector<Tensor> reference = test::run(g, inputs);
  Expected<codegen::DeviceRun> run = runAsOneKernel(g, ops->catalog, inputs);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  CHECK(run->kernelTimes.size() == 1);
  test::checkClose(run->outputs[0], reference[0], 1e-5f);
}

TEST_CASE("training-mode BatchNormalization with a fused activation matches the interpreter, statistics too") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // 3 x 5 x 7 = 105 elements per channel: more than the 64 lanes of a group.
  Graph g = test::parse(test::model(
      "g (float[3,4,5,7] x, float[4] s, float[4] b, float[4] m, float[4] v) => (float[3,4,5,7] y, float[4] rm, float[4] rv)",
      R"(
    t, rm, rv = BatchNormalization <training_mode = 1, momentum = 0.8, epsilon = 0.01> (x, s, b, m, v)
    y = Relu (t)
  )"));
  Tensor var = randomTensor({4}, 5);
  for (int64_t i = 0; i < 4; ++i) var.data<float>()[i] = std::abs(var.data<float>()[i]);
  std::vector<Tensor> inputs = {randomTensor({3, 4, 5, 7}, 1), randomTensor({4}, 2), randomTensor({4}, 3),
                                randomTensor({4}, 4), var};
  for (int64_t i = 0; i < inputs[0].numel(); ++i) inputs[0].data<float>()[i] += 3.0f;  // a mean far from 0
  std::vector<Tensor> reference = test::run(g, inputs);
  Expected<codegen::DeviceRun> run = runAsOneKernel(g, ops->catalog, inputs);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  CHECK(run->kernelTimes.size() == 1);
  for (size_t i = 0; i < 3; ++i) test::checkClose(run->outputs[i], reference[i], 1e-5f);
}

TEST_CASE("Pad's edge, reflect and wrap modes match the interpreter") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  for (const char* mode : {"constant", "edge", "reflect", "wrap"}) {
    INFO("mode " << mode);
    Graph g = test::parse(test::model("g (float[2,3,4] x) => (float[4,5,8] y)",
                                      std::string("pads = Constant <value = int64[6] {1, 0, 2, 1, 2, 2}> ()\n"
                                                  "y = Pad <mode = \"") + mode + "\"> (x, pads)", 19));
    std::vector<Tensor> inputs = {randomTensor({2, 3, 4}, 4)};
    std::vector<Tensor> reference = test::run(g, inputs);
    Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), g, codegen::singleNodeGroups(g), ops->catalog, inputs);
    REQUIRE_MESSAGE(run.ok(), test::why(run));
    test::checkClose(run->outputs[0], reference[0], 1e-7f);
  }
}

TEST_CASE("CumSum along a middle axis, reversed and exclusive, matches the interpreter") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  for (const char* attrs : {"", "<exclusive = 1>", "<reverse = 1>", "<exclusive = 1, reverse = 1>"}) {
    INFO("attributes " << attrs);
    Graph g = test::parse(test::model("g (int32[3,4,5] x) => (int32[3,4,5] y)",
                                      std::string("axis = Constant <value = int64 {-2}> ()\ny = CumSum ") + attrs + " (x, axis)"));
    std::vector<int32_t> values(60);
    for (int i = 0; i < 60; ++i) values[static_cast<size_t>(i)] = (i * 7) % 11 - 5;
    std::vector<Tensor> inputs = {Tensor::fromVector<int32_t>({3, 4, 5}, values)};
    std::vector<Tensor> reference = test::run(g, inputs);
    Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), g, codegen::singleNodeGroups(g), ops->catalog, inputs);
    REQUIRE_MESSAGE(run.ok(), test::why(run));
    for (int64_t k = 0; k < 60; ++k) CHECK(run->outputs[0].data<int32_t>()[k] == reference[0].data<int32_t>()[k]);
  }
}

TEST_CASE("Resize with constant scales, nearest and linear, matches the interpreter") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  for (const char* attrs : {"<mode = \"nearest\">", "<mode = \"linear\">",
                            "<mode = \"linear\", coordinate_transformation_mode = \"align_corners\">",
                            "<mode = \"nearest\", coordinate_transformation_mode = \"asymmetric\", nearest_mode = \"ceil\">"}) {
    INFO("attributes " << attrs);
    Graph g = test::parse(test::model("g (float[1,2,3,5] x) => (float[1,2,7,4] y)",
                                      std::string("scales = Constant <value = float[4] {1.0, 1.0, 2.5, 0.8}> ()\n"
                                                  "y = Resize ") + attrs + " (x, , scales)", 13));
    std::vector<Tensor> inputs = {randomTensor({1, 2, 3, 5}, 9)};
    std::vector<Tensor> reference = test::run(g, inputs);
    Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), g, codegen::singleNodeGroups(g), ops->catalog, inputs);
    REQUIRE_MESSAGE(run.ok(), test::why(run));
    test::checkClose(run->outputs[0], reference[0], 1e-6f);
  }
}

TEST_CASE("an op a pack declares runs on the interpreter and on OpenCL from its semantics alone") {
  // Declared only here, as a rule author would: no C++ anywhere knows it.
  std::unique_ptr<RuleSet> pack = test::compileRules("op ScaledFma(a, b, c) broadcast { k: float = 0.5 } = k * a * b + c");
  const OpCatalog& catalog = pack->catalog;
  REQUIRE(catalog.find("ScaledFma"));
  // Built directly: ONNX's checker (rightly) knows no such op.
  Graph g;
  g.info.opsetImports[""] = 17;
  const ValueId a = g.addInput("a", TensorType::of(DType::Float32, {3, 4}));
  const ValueId b = g.addInput("b", TensorType::of(DType::Float32, {4}));
  const ValueId c = g.addInput("c", TensorType::of(DType::Float32, {3, 1}));
  const ValueId y = g.addValue("y", TensorType::of(DType::Float32, {3, 4}));
  g.addNode("ScaledFma", {a, b, c}, {y}, {{"k", 2.0f}}, "scaled_fma");
  g.addOutput(y);
  std::vector<Tensor> inputs = {randomTensor({3, 4}, 1), randomTensor({4}, 2), randomTensor({3, 1}, 3)};
  Tensor want(DType::Float32, {3, 4});
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j)
      want.data<float>()[i * 4 + j] =
          2.0f * inputs[0].data<float>()[i * 4 + j] * inputs[1].data<float>()[j] + inputs[2].data<float>()[i];
  Expected<std::vector<Tensor>> interpreted = runGraph(g, inputs, &catalog);
  REQUIRE_MESSAGE(interpreted.ok(), test::why(interpreted));
  test::checkClose(interpreted.value()[0], want, 1e-6f);
  // Without the pack's catalog the interpreter does not know the op.
  Expected<std::vector<Tensor>> unknown = runGraph(g, inputs, &test::coreCatalog());
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().message.find("`ScaledFma` is not supported") != std::string::npos);
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), g, codegen::singleNodeGroups(g), catalog, inputs);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  test::checkClose(run->outputs[0], want, 1e-6f);
}

TEST_CASE("sibling convs of one input as one launch (sibling_convs) match the interpreter on a CPU target") {
  // SqueezeNet's fire module: a 1x1 and a 3x3 expand conv of one tensor,
  // concatenated; and a second module whose 3x3 convs differ in stride,
  // so each product's window gather has its own geometry (a function of
  // its own per product, or the kernel would not build).
  std::unique_ptr<RuleSet> packs = test::loadDefaultPacks();
  Expected<Target> cpu = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  REQUIRE(cpu.ok());
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1,8,13,20] x, float[16,8,1,1] w1, float[16] b1, float[12,8,3,3] w3, float[12] b3, float[6,28,3,3] v1,
   float[5,28,3,3] v2, float[5] c2) => (float[1,28,13,20] y, float[1,6,13,20] z1, float[1,5,7,10] z2) {
  e1 = Conv (x, w1, b1)
  r1 = Relu (e1)
  e3 = Conv <pads = [1, 1, 1, 1]> (x, w3, b3)
  r3 = Relu (e3)
  y = Concat <axis = 1> (r1, r3)
  f1 = Conv <pads = [1, 1, 1, 1]> (y, v1)
  z1 = Relu (f1)
  f2 = Conv <pads = [1, 1, 1, 1], strides = [2, 2]> (y, v2, c2)
  z2 = Sigmoid (f2)
}
)");
  const std::vector<Tensor> inputs = randomInputs(g, 113), reference = test::run(g, inputs);
  Plan plan = planFusion(g, *packs, cpu.value(), codegen::kernelFamilies());
  CHECK(groupsByRule(plan)["sibling_convs"] == 2);
  const codegen::KernelOptions options = codegen::KernelOptions::forTarget(cpu.value());
  const codegen::DeviceRun run = runAndCheck(g, codegen::planGroups(plan), packs->catalog, inputs, reference, options, 1e-4f);
  CHECK(run.kernelTimes.size() == 2);  // the Concat's parts written in place (16 x 260 floats: aligned)
  // The lighter product's work-groups come first (PoCL's threads take
  // work-groups in chunks, the first ones large): the
  // strided conv (5 x 70 x 252) before the one declared first (6 x 260 x 252).
  bool reordered = false;
  for (const Group& grp : plan.groups) {
    if (grp.rule == nullptr || grp.rule->name != "sibling_convs") continue;
    Expected<codegen::KernelSource> k =
        codegen::emitGemmHorizontal(g, grp.nodes, packs->catalog, "k", "k", [&](const NodeData&) { return options.gemm; });
    REQUIRE_MESSAGE(k.ok(), test::why(k));
    const size_t strided = k->source.find("C[5x70]"), plain = k->source.find("C[6x260]");
    if (strided == std::string::npos) continue;
    REQUIRE(plain != std::string::npos);
    CHECK(strided < plain);
    reordered = true;
  }
  CHECK(reordered);
  // A depthwise sibling is computed directly, in a kernel of its own: the
  // family refuses it, with the reason.
  Graph dw = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1,8,9,9] x, float[8,1,3,3] wd, float[4,8,1,1] wp) => (float[1,8,9,9] a, float[1,4,9,9] b) {
  d = Conv <group = 8, pads = [1, 1, 1, 1]> (x, wd)
  a = Relu (d)
  p = Conv (x, wp)
  b = Relu (p)
}
)");
  Expected<std::vector<NodeRef>> order = dw.topologicalOrder();
  REQUIRE(order.ok());
  REQUIRE(codegen::isHorizontalGemmGroup(dw, order.value()));
  Expected<codegen::KernelSource> k =
      codegen::emitGemmHorizontal(dw, order.value(), packs->catalog, "k", "k", [&](const NodeData&) { return options.gemm; });
  REQUIRE_FALSE(k.ok());
  CHECK(k.error().message.find("is a depthwise conv, computed directly in a kernel of its own") != std::string::npos);
}

TEST_CASE("Softplus is one formula: the catalog's, on the interpreter and on OpenCL, finite at large x") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[10] x) => (float[10] y) {
  y = Softplus (x)
}
)");
  const std::vector<float> xs = {-500.f, -88.f, -30.f, -1.f, 0.f, 1e-3f, 1.f, 30.f, 197.f, 500.f};
  Tensor x = test::floats({10}, xs);
  // Oracle: log(1 + e^x) = max(x, 0) + log(1 + e^-|x|), in long double.
  Tensor want(DType::Float32, {10});
  for (size_t i = 0; i < xs.size(); ++i) {
    const long double v = xs[i];
    want.data<float>()[i] = static_cast<float>(std::max(v, 0.0L) + std::log1p(std::exp(-std::fabs(v))));
  }
  std::vector<Tensor> interpreted = test::run(g, {x});
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), g, codegen::singleNodeGroups(g), ops->catalog, {x});
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  for (size_t i = 0; i < xs.size(); ++i) {
    INFO("x = " << xs[i]);
    const float w = want.data<float>()[i];
    CHECK(interpreted[0].data<float>()[i] == doctest::Approx(w).epsilon(1e-6));
    CHECK(std::isfinite(run->outputs[0].data<float>()[i]));
    CHECK(run->outputs[0].data<float>()[i] == doctest::Approx(w).epsilon(1e-5));
  }
}

TEST_CASE("sibling products of one input as one launch (gemm_horizontal) match the interpreter in every tiling") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // Three products of x ([2, 24, 40]: its batches rows of one product) of
  // 32, 20 and 48 columns (20: a partial panel), the first two with a
  // bias, the third with exact GELU's Erf and Tanh (vector helpers printed
  // once), a fourth op reading x outside the group.
  Graph g = test::parse(test::model(
      "g (float[2,24,40] x, float[40,32] wq, float[32] bq, float[40,20] wk, float[20] bk, float[40,48] wv) => "
      "(float[2,24,32] q, float[2,24,20] k, float[2,24,48] v, float[2,24,40] r)", R"(
    mq = MatMul (x, wq)
    q = Add (mq, bq)
    mk = MatMul (x, wk)
    k = Add (bk, mk)
    mv = MatMul (x, wv)
    ev = Erf (mv)
    v = Tanh (ev)
    r = Relu (x)
  )", 17));
  const std::vector<Tensor> inputs = randomInputs(g, 23);
  const std::vector<Tensor> reference = test::run(g, inputs);
  const std::vector<codegen::KernelGroup> groups = fuseOneGroup(g, {"mq", "q", "mk", "k", "mv", "ev", "v"}, "qkv");
  REQUIRE(groups.size() == 2);
  const codegen::KernelGroup& qkv = groups[0].name == "qkv" ? groups[0] : groups[1];
  REQUIRE(codegen::isHorizontalGemmGroup(g, qkv.nodes));
  // Panels owned by one work-item (CPUs), with K in one pass or three
  // (depth 16), and untiled (a work-item per tile, no local memory).
  codegen::GemmTiling owned{6, 16, 16, 128}, shallow{5, 8, 4, 16};
  owned.shallowDepth = shallow.shallowDepth = 1024;
  owned.shallowLocalRows = shallow.shallowLocalRows = 1;
  for (const codegen::GemmTiling& t : {owned, shallow, codegen::GemmTiling{3, 4, 0, 0}}) {
    INFO("tiling " << t.rows << "x" << t.width << " local " << t.localRows << " depth " << t.depth);
    Expected<codegen::KernelSource> k =
        codegen::emitGemmHorizontal(g, qkv.nodes, ops->catalog, "qkv", "qkv", [&](const NodeData&) { return t; });
    REQUIRE_MESSAGE(k.ok(), test::why(k));
    INFO(k->source);
    CHECK(k->outputs.size() == 3);
    CHECK((k->localMemBytes > 0) == (t.shallowLocalRows == 1));
    CHECK_MESSAGE(codegen::compileToSpirv(k->source, k->name).ok(), k->source);
    // The erf helper once, though two products call it.
    const std::string helper = "fusec_erf" + std::to_string(t.width) + "(const";
    const size_t at = k->source.find(helper);
    CHECK((at != std::string::npos && k->source.find(helper, at + 1) == std::string::npos));
    const codegen::DeviceRun run = runAndCheck(g, groups, ops->catalog, inputs, reference, codegen::KernelOptions{.gemm = t, .gemmTilings = {}}, 1e-4f);
    CHECK(run.kernelTimes.size() == 2);
  }
  // Work-groups staging panels between barriers are refused.
  Expected<codegen::KernelSource> staged =
      codegen::emitGemmHorizontal(g, qkv.nodes, ops->catalog, "qkv", "qkv", [&](const NodeData&) { return codegen::GemmTiling{}; });
  REQUIRE_FALSE(staged.ok());
  CHECK(staged.error().message.find("staging its panel between barriers") != std::string::npos);
  // What the family refuses, and why: an op reading two products; a
  // matrix-vector product (one row), which has its own kernel.
  Graph two = test::parse(test::model("g (float[1,64] x, float[32,64] wq, float[32,64] wk) => (float[1,32] s)",
                                      "mq = Gemm <transB = 1> (x, wq)\nmk = Gemm <transB = 1> (x, wk)\ns = Add (mq, mk)"));
  const codegen::CodegenFamily* family = codegen::findFamily("gemm_horizontal");
  REQUIRE(family);
  Expected<std::vector<NodeRef>> order = two.topologicalOrder();
  REQUIRE(order.ok());
  CHECK_FALSE(codegen::isHorizontalGemmGroup(two, order.value()));
  Status mixed = family->canEmit(two, order.value(), ops->catalog, Target{});
  REQUIRE_FALSE(mixed.ok());
  CHECK(mixed.error().message.find("it is not two or more MatMuls, Gemms or Convs of one input") != std::string::npos);
  const std::vector<NodeRef> products(order->begin(), order->begin() + 2);
  Status gemv = family->canEmit(two, products, ops->catalog, Target{});
  REQUIRE_FALSE(gemv.ok());
  CHECK(gemv.error().message.find("matrix-vector product") != std::string::npos);
}

TEST_CASE("groups that compute the same thing share one program and keep their own names") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  Graph g = test::parse(test::model(
      "g (float[1,8,16,16] a, float[1,8,16,16] b, float[1,8,16,8] c) => (float[1,8,16,16] y, float[1,8,16,16] z, "
      "float[1,8,16,16] w, float[1,8,16,8] u, float[1,8,16,16] p, float[1,8,16,16] q, float[1,8,16,16] r, "
      "float[1,8,16,16] s, float[1,8,16,16] t, float[1,8,16,16] sa, float[1,8,16,16] sb, float[1,8,16,8] sc)",
      R"(
    y = LeakyRelu <alpha = 0.1> (a)
    z = LeakyRelu <alpha = 0.1> (b)
    w = LeakyRelu <alpha = 0.2> (a)
    u = LeakyRelu <alpha = 0.1> (c)
    k2 = Constant <value = float {2.0}> ()
    k4 = Constant <value = float {4.0}> ()
    k3 = Constant <value = float {3.0}> ()
    p = Div (a, k2)
    q = Div (b, k2)
    r = Div (a, k4)
    s = Mul (a, k2)
    t = Mul (a, k3)
    sa = Softmax <axis = -1> (a)
    sb = Softmax <axis = -1> (b)
    sc = Softmax <axis = -1> (c)
  )"));
  const std::vector<codegen::KernelGroup> groups = codegen::singleNodeGroups(g);
  Expected<codegen::DeviceProgram> program = codegen::DeviceProgram::build(device(), g, groups, ops->catalog);
  REQUIRE_MESSAGE(program.ok(), test::why(program));
  std::map<std::string, size_t> at;  // kernel name by the value it writes -> its index
  for (size_t i = 0; i < program->kernels().size(); ++i)
    at[g.value(program->kernels()[i].outputs[0]).name] = i;
  REQUIRE(at.size() == 12);
  // Each kernel's readable source names its own group; the programs they
  // launch are shared where the computation is the same.
  auto same = [&](const std::string& x, const std::string& y) {
    const codegen::KernelSource& kx = program->kernels()[at.at(x)];
    const codegen::KernelSource& ky = program->kernels()[at.at(y)];
    CHECK(kx.name != ky.name);
    return canonicalProgram(kx.source, kx.name).text == canonicalProgram(ky.source, ky.name).text;
  };
  CHECK(same("y", "z"));   // the same op on another input
  CHECK(!same("y", "w"));  // another attribute
  CHECK(same("y", "u"));   // another shape, which only the launch's size sees
  CHECK(same("sa", "sb"));
  CHECK(!same("sa", "sc"));  // rows of 16, rows of 8: another shape in the code
  CHECK(same("p", "q"));
  CHECK(!same("p", "r"));  // another constant folded into the code
  CHECK(same("s", "t"));   // constants read from buffers: one code, two buffers
  CHECK(program->programs() == 7);  // {y,z,u} w {p,q} r {s,t} {sa,sb} sc

  const std::vector<Tensor> inputs = randomInputs(g, 21);
  Expected<codegen::DeviceRun> run = program->run(inputs);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  std::set<std::string> timed;
  for (const auto& [name, seconds] : run->kernelTimes) timed.insert(name);
  for (const codegen::KernelSource& k : program->kernels()) CHECK(timed.count(k.name));
  CHECK(timed.size() == 12);
  const float* a = inputs[0].data<float>();
  const float* b = inputs[1].data<float>();
  const float* c = inputs[2].data<float>();
  for (int i = 0; i < 8 * 16 * 8; ++i) CHECK(run->outputs[3].data<float>()[i] == (c[i] < 0 ? 0.1f * c[i] : c[i]));
  for (int row = 0; row < 8 * 16; ++row) {  // softmax rows of b (16) and c (8), each on its own data
    float sumB = 0, sumC = 0;
    for (int j = 0; j < 16; ++j) sumB += std::exp(b[row * 16 + j]);
    for (int j = 0; j < 8; ++j) sumC += std::exp(c[row * 8 + j]);
    CHECK(run->outputs[10].data<float>()[row * 16 + 3] == doctest::Approx(std::exp(b[row * 16 + 3]) / sumB).epsilon(1e-5));
    CHECK(run->outputs[11].data<float>()[row * 8 + 3] == doctest::Approx(std::exp(c[row * 8 + 3]) / sumC).epsilon(1e-5));
  }
  // Shared programs, each launch on its own buffers.
  for (int i = 0; i < 8 * 16 * 16; ++i) {
    CHECK(run->outputs[0].data<float>()[i] == (a[i] < 0 ? 0.1f * a[i] : a[i]));
    CHECK(run->outputs[1].data<float>()[i] == (b[i] < 0 ? 0.1f * b[i] : b[i]));
    CHECK(run->outputs[4].data<float>()[i] == a[i] * 0.5f);
    CHECK(run->outputs[5].data<float>()[i] == b[i] * 0.5f);
    CHECK(run->outputs[6].data<float>()[i] == a[i] * 0.25f);
    CHECK(run->outputs[7].data<float>()[i] == a[i] * 2.0f);
    CHECK(run->outputs[8].data<float>()[i] == a[i] * 3.0f);
  }
}
