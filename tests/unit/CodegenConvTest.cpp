/// Convs with prologues (depthwise, 1x1, dense, channel scale), squeeze-and-excitation gates and
/// sibling convs as one launch, against the interpreter.
#include <doctest/doctest.h>

#include "CodegenFixtures.h"

using namespace fusec;
using namespace fusec::codegen_test;
using codegen::canonicalProgram;

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
