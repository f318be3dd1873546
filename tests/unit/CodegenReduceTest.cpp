/// Row, column and any-axes reductions with fused prologues (row_reduce, reduce, axis_layernorm)
/// against the interpreter.
#include <doctest/doctest.h>

#include "CodegenFixtures.h"

using namespace fusec;
using namespace fusec::codegen_test;
using codegen::canonicalProgram;

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

namespace {

/// Row statistics read back along their rows, over [rows, n]: RMSNorm as
/// LLaMA writes it (x * rsqrt(mean(x^2) + eps) * w), with a residual
/// prologue and the weight first (w * (h / sqrt(mean(h*h) + eps))), an L2
/// normalization (a / sqrt(sum(a^2))) and exp(x - max(x)).
Graph rowStatisticsGraph(int64_t rows, int64_t n) {
  const std::string R = std::to_string(rows), N = std::to_string(n), RN = "float[" + R + "," + N + "] ";
  return test::parse("<ir_version: 8, opset_import: [\"\" : 17]>\n"
                     "g (" + RN + "x, float[" + N + "] w, " + RN + "a) => (" + RN + "rms, " + RN + "hf, " + RN + "l2, " + RN +
                     "c) {\n"
                     "  two = Constant <value = float {2.0}> ()\n  eps = Constant <value = float {1e-6}> ()\n"
                     "  sq = Pow (x, two)\n  ms = ReduceMean <axes = [-1]> (sq)\n  ve = Add (ms, eps)\n  sd = Sqrt (ve)\n"
                     "  rs = Reciprocal (sd)\n  nx = Mul (x, rs)\n  rms = Mul (nx, w)\n"
                     "  h = Add (x, a)\n  hh = Mul (h, h)\n  ms2 = ReduceMean <axes = [-1]> (hh)\n  ve2 = Add (ms2, eps)\n"
                     "  sd2 = Sqrt (ve2)\n  n2 = Div (h, sd2)\n  hf = Mul (w, n2)\n"
                     "  ss = ReduceSumSquare <axes = [-1]> (a)\n  nr = Sqrt (ss)\n  l2 = Div (a, nr)\n"
                     "  mx = ReduceMax <axes = [-1]> (x)\n  c0 = Sub (x, mx)\n  c = Exp (c0)\n}\n");
}

}  // namespace

TEST_CASE("a row statistic read back along its row (RMSNorm, L2 norm, x - max) is one kernel and matches the interpreter") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // Rows of 48 (16 lanes, in registers), 100 (4 lanes), 272 (16, walked
  // again), 30 and 7 (no whole vectors: element by element); 192 rows
  // interleave three to a work-item, 128 two. Each row form with a
  // work-item per row (CPUs) and the work-group tree (GPUs).
  for (auto [n, rows] : std::vector<std::pair<int64_t, int64_t>>{{48, 192}, {100, 5}, {272, 128}, {30, 5}, {7, 3}}) {
    INFO("row length " << n << ", " << rows << " rows");
    Graph g = rowStatisticsGraph(rows, n);
    std::vector<Tensor> inputs = {randomTensor({rows, n}, 11), randomTensor({n}, 12), randomTensor({rows, n}, 13)};
    const std::vector<Tensor> reference = test::run(g, inputs);
    std::vector<codegen::KernelGroup> groups;
    auto group = [&](const std::vector<const char*>& values, const std::string& name) {
      groups.emplace_back(producersOf(g, values), name, "", "row_reduce");
    };
    group({"sq", "ms", "ve", "sd", "rs", "nx", "rms"}, "rmsnorm");
    group({"h", "hh", "ms2", "ve2", "sd2", "n2", "hf"}, "weight_first");
    group({"ss", "nr", "l2"}, "l2norm");
    group({"mx", "c0", "c"}, "shifted_exp");
    for (bool perWorkItem : {true, false}) {
      INFO("a work-item per row: " << perWorkItem);
      for (const codegen::KernelGroup& grp : groups) {
        Expected<codegen::KernelSource> k = codegen::emitRowReduce(g, grp.nodes, ops->catalog, grp.name, grp.name, perWorkItem);
        REQUIRE_MESSAGE(k.ok(), test::why(k));
        INFO(k->source);
        REQUIRE(k->outputs.size() == 1u);  // the last result alone
        CHECK(g.value(k->outputs[0]).type.staticShape() == Shape{rows, n});
        CHECK(k->source.find("fusec_y(") != std::string::npos);
        // RMSNorm's + eps, Sqrt and Reciprocal (the L2 norm's Sqrt) once per row.
        CHECK((k->source.find("fusec_row(") != std::string::npos) == (grp.name != "shifted_exp"));
        if (perWorkItem) CHECK((k->source.find("computed as float") != std::string::npos) == (n % 4 == 0));
        // Valid SPIR-V in each form (vector rows of 48, element by element at 30).
        if (n == 48 || n == 30) CHECK_MESSAGE(codegen::compileToSpirv(k->source, k->name).ok(), k->source);
      }
      codegen::KernelOptions options;
      options.rowReducePerWorkItem = perWorkItem;
      CHECK(runAndCheck(g, groups, ops->catalog, inputs, reference, options, 1e-4f).kernelTimes.size() == groups.size());
    }
  }
}

TEST_CASE("row_reduce refuses an epilogue it cannot build, with the reason") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[4,8] x, float[4] b) => (float[4] y, float[4,8] z, float[4,1] v, float[4,8] p) {
  m = ReduceMean <axes = [-1], keepdims = 0> (x)
  y = Add (m, b)
  s = ReduceL2 <axes = [-1]> (x)
  v = Sqrt (s)
  z = Div (x, v)
  q = Softmax <axis = -1> (x)
  p = Neg (q)
}
)");
  auto refusal = [&](const std::vector<const char*>& values) {
    Expected<codegen::KernelSource> k = codegen::emitRowReduce(g, producersOf(g, values), ops->catalog, "k", "k", true);
    REQUIRE_FALSE(k.ok());
    CHECK(k.error().unsupported);
    return k.error().message;
  };
  CHECK(refusal({"m", "y"}).find("keeps the reduced axis") != std::string::npos);
  CHECK(refusal({"s", "v", "z"}).find("`v` is read outside the group") != std::string::npos);
  CHECK(refusal({"q", "p"}).find("only a sum, mean, extreme") != std::string::npos);
  CHECK(refusal({"y"}).find("does not hold one reduction") != std::string::npos);
  CHECK(refusal({"m", "s", "z"}).find("does not hold one reduction") != std::string::npos);
}
