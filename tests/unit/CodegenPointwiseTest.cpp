/// Pointwise kernels: broadcast rows, float vectors, exp/erf/tanh accuracy, integer and 16-bit
/// types, Softplus.
#include <doctest/doctest.h>

#include "CodegenFixtures.h"

using namespace fusec;
using namespace fusec::codegen_test;
using codegen::canonicalProgram;

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
