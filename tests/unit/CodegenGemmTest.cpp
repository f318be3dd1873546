/// MatMul, Gemm and Conv as tiled (implicit) GEMMs for every tiling, depthwise and Winograd convs,
/// owned and gathered panels, vector epilogues, horizontal GEMMs (gemm_epilogue, conv_epilogue,
/// gemm_horizontal) against the interpreter.
#include <doctest/doctest.h>

#include "CodegenFixtures.h"

using namespace fusec;
using namespace fusec::codegen_test;
using codegen::canonicalProgram;

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
  auto nodes = [&](const std::vector<const char*>& results) { return producersOf(g, results); };
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

TEST_CASE("a gated MLP (SwiGLU, GeGLU with biases) is one gemm_gated kernel and matches the interpreter") {
  std::unique_ptr<RuleSet> packs = test::loadDefaultPacks();
  Expected<Target> target = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  REQUIRE(target.ok());
  // Columns in float8 (48), float4 (20) and one at a time (7); rows a
  // multiple of the 6-row tile (12), not (5 and 2x7 = 14, the last tile
  // clamped), and K of one (1).
  for (auto [rows, k, n] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{12, 32, 48}, {5, 16, 20}, {14, 9, 7}, {6, 1, 8}}) {
    INFO("rows " << rows << ", K " << k << ", N " << n);
    const std::string R = std::to_string(rows), K = std::to_string(k), N = std::to_string(n);
    // SwiGLU over a rank-3 input; GeGLU (erf GELU) with a bias on each product.
    Graph g = test::parse("<ir_version: 8, opset_import: [\"\" : 17]>\n"
                          "g (float[1," + R + "," + K + "] x, float[" + K + "," + N + "] wg, float[" + K + "," + N + "] wu, float[" +
                          N + "] bg, float[" + N + "] bu) => (float[1," + R + "," + N + "] s, float[1," + R + "," + N + "] e) {\n"
                          "  a = MatMul (x, wg)\n  b = MatMul (x, wu)\n  sg = Sigmoid (a)\n  si = Mul (a, sg)\n  s = Mul (si, b)\n"
                          "  a2 = MatMul (x, wu)\n  ab = Add (a2, bg)\n  b2 = MatMul (x, wg)\n  bb = Add (b2, bu)\n"
                          "  r2 = Constant <value = float {1.41421356}> ()\n  half = Constant <value = float {0.5}> ()\n"
                          "  one = Constant <value = float {1.0}> ()\n"
                          "  d = Div (ab, r2)\n  f = Erf (d)\n  f1 = Add (f, one)\n  m = Mul (ab, f1)\n  ge = Mul (m, half)\n"
                          "  e = Mul (ge, bb)\n}\n");
    const std::vector<Tensor> inputs = randomInputs(g, 21);
    const std::vector<Tensor> reference = test::run(g, inputs);
    Plan plan = planFusion(g, *packs, target.value(), codegen::kernelFamilies());
    CHECK(groupsByRule(plan)["gated_mlp"] == 2);
    for (const Group& grp : plan.groups) {
      if (grp.kernel != "gemm_gated") continue;
      const codegen::CodegenFamily* f = codegen::findFamily("gemm_gated");
      REQUIRE(f != nullptr);
      Expected<codegen::KernelSource> ks = f->build({g, grp.nodes, packs->catalog, grp.name, grp.name, {}}, nullptr);
      REQUIRE_MESSAGE(ks.ok(), test::why(ks));
      CHECK(ks->outputs.size() == 1u);  // the gated result alone: the products stay in registers
      CHECK_MESSAGE(codegen::compileToSpirv(ks->source, ks->name).ok(), ks->source);
    }
    runAndCheck(g, codegen::planGroups(plan), packs->catalog, inputs, reference, codegen::KernelOptions{}, 1e-4f);
  }
}

TEST_CASE("gemm_gated refuses what it cannot build, with the reason") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[4,8] x, float[4,8] z, float[8,16] w, float[8,16] v) => (float[4,16] y, float[4,16] a, float[4,16] q) {
  a = MatMul (x, w)
  b = MatMul (x, v)
  y = Mul (a, b)
  c = MatMul (z, v)
  q = Mul (a, c)
}
)");
  const codegen::CodegenFamily* f = codegen::findFamily("gemm_gated");
  REQUIRE(f != nullptr);
  auto refusal = [&](const std::vector<const char*>& values) {
    Expected<codegen::KernelSource> k = f->build({g, producersOf(g, values), ops->catalog, "k", "k", {}}, nullptr);
    REQUIRE_FALSE(k.ok());
    CHECK(k.error().unsupported);
    return k.error().message;
  };
  CHECK(refusal({"a", "b", "y"}).find("`a` is read outside the group") != std::string::npos);
  CHECK(refusal({"a", "c", "q"}) == "it is not two MatMuls of one input followed by elementwise ops");
}
