/// Data movement (index_map): copies by bits, composed index maps, row copies, pointwise kernels
/// reading movement through index maps; Pad, CumSum and Resize.
#include <doctest/doctest.h>

#include "CodegenFixtures.h"

using namespace fusec;
using namespace fusec::codegen_test;
using codegen::canonicalProgram;

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
