/// The roofline cost model: FLOPs from the catalog, bytes at group
/// boundaries, time as the larger of compute and memory plus launch.
#include <doctest/doctest.h>

#include "TestUtil.h"
#include "fusec/engine/CostModel.h"
#include "fusec/grammar/PackLoader.h"

using namespace fusec;

namespace {

struct Fixture {
  std::unique_ptr<RuleSet> rules;
  Target target;
  Fixture() {
    rules = test::loadShippedPack("core/ops.fuse");
    Expected<Target> t = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
    REQUIRE(t.ok());
    target = test::uncalibrated(t.value());
  }
  NodeRef only(const Graph& g, const std::string& op) {
    for (NodeRef n : g.nodes())
      if (g.node(n).op == op) return n;
    FAIL("no node " << op);
    return {};
  }
};

}  // namespace

TEST_CASE("FLOPs of anchors, elementwise ops and reductions") {
  Fixture f;
  Graph conv = test::parse(test::model("g (float[1,3,8,8] x, float[4,3,3,3] w, float[4] b) => (float[1,4,8,8] y)",
                                       "y = Conv <pads = [1, 1, 1, 1]> (x, w, b)"));
  // 256 outputs x 27 multiply-adds x 2, plus the bias add.
  CHECK(nodeFlops(conv, f.only(conv, "Conv"), f.rules->catalog) == 2 * 256 * 27 + 256);
  Graph mm = test::parse(test::model("g (float[2,3] a, float[3,5] b) => (float[2,5] y)", "y = MatMul (a, b)"));
  CHECK(nodeFlops(mm, f.only(mm, "MatMul"), f.rules->catalog) == 2 * 10 * 3);
  Graph gemm = test::parse(test::model("g (float[3,2] a, float[5,3] b, float[5] c) => (float[2,5] y)",
                                       "y = Gemm <transA = 1, transB = 1> (a, b, c)"));
  CHECK(nodeFlops(gemm, f.only(gemm, "Gemm"), f.rules->catalog) == 2 * 10 * 3 + 10);
  // Sigmoid = 1 / (1 + exp(-x)): four operations per element.
  Graph sig = test::parse(test::model("g (float[10] x) => (float[10] y)", "y = Sigmoid (x)"));
  CHECK(nodeFlops(sig, f.only(sig, "Sigmoid"), f.rules->catalog) == 40);
  Graph sm = test::parse(test::model("g (float[4,8] x) => (float[4,8] y)", "y = Softmax (x)"));
  CHECK(nodeFlops(sm, f.only(sm, "Softmax"), f.rules->catalog) == 5 * 32);
  Graph pool = test::parse(test::model("g (float[1,1,4,4] x) => (float[1,1,2,2] y)",
                                       "y = MaxPool <kernel_shape = [2, 2], strides = [2, 2]> (x)"));
  CHECK(nodeFlops(pool, f.only(pool, "MaxPool"), f.rules->catalog) == 4 * 4);
  Graph reshape = test::parse(test::model("g (float[4,8] x, int64[1] s = {32}) => (float[32] y)", "y = Reshape (x, s)"));
  CHECK(nodeFlops(reshape, f.only(reshape, "Reshape"), f.rules->catalog) == 0);
}

TEST_CASE("a fused group pays only for the bytes that cross its boundary") {
  Fixture f;
  Graph g = test::parse(test::model("g (float[1024] x) => (float[1024] y, float[1024] a)",
                                    "a = Relu (x)\nb = Exp (a)\ny = Neg (b)"));
  std::vector<NodeRef> all = g.nodes();
  Estimate unfused = unfusedEstimate(g, f.rules->catalog, f.target);
  CHECK(unfused.kernels == 3);
  CHECK(unfused.bytes == 6 * 4096);
  Estimate fused = groupEstimate(g, all, f.rules->catalog, f.target);
  // Reads x; writes y and `a`, which is a graph output too. `b` stays inside.
  CHECK(fused.bytes == 3 * 4096);
  CHECK(fused.flops == unfused.flops);
  CHECK(fused.kernels == 1);
  CHECK(fused.seconds < unfused.seconds);
  CHECK(fused.joules < unfused.joules);
}

TEST_CASE("a fused member on a broadcast operand is computed at every point, and exp costs the target's weight") {
  Fixture f;
  // A squeeze-and-excitation scale: Sigmoid of 8 channels, then a Mul over 8 x 4096.
  Graph g = test::parse(test::model("g (float[1,8,64,64] x, float[1,8,1,1] s) => (float[1,8,64,64] y)",
                                    "e = Sigmoid (s)\ny = Mul (x, e)"));
  const double points = 8 * 4096;
  Target t = f.target;
  t.transcendentalFlops = 100;
  Estimate fused = groupEstimate(g, g.nodes(), f.rules->catalog, t);
  // Sigmoid is 1 / (1 + exp(-x)): 4 operations, at each of the Mul's points; the Mul 1.
  CHECK(fused.flops == 5 * points);
  // Its time: the exp weighs 100, so 3 + 100 + 1 FLOPs of peak a point, against 2 x 128 KiB of DRAM traffic.
  const double bytes = 2 * 4 * points + 4 * 8;
  CHECK(fused.bytes == bytes);
  // (relative tolerance only: Approx's default scale of 1 would pass any two times of microseconds)
  CHECK(fused.seconds ==
        doctest::Approx(std::max(104 * points / t.peakFlopsFp32, bytes / t.dramBandwidth) + t.launchOverhead).scale(0));
  CHECK(104 * points / t.peakFlopsFp32 > bytes / t.dramBandwidth);  // compute bound: the weight decides
  // Alone, the Sigmoid runs once per channel.
  Estimate alone = groupEstimate(g, {f.only(g, "Sigmoid")}, f.rules->catalog, t);
  CHECK(alone.flops == 4 * 8);
  CHECK(alone.seconds == doctest::Approx(std::max(103 * 8 / t.peakFlopsFp32, 64 / t.dramBandwidth) + t.launchOverhead).scale(0));
}

TEST_CASE("roofline: memory bound below the ridge, compute bound above it") {
  Fixture f;
  const Target& t = f.target;
  Estimate mem = rooflineEstimate(1e6, 1e8, t);
  CHECK(mem.seconds == doctest::Approx(1e8 / t.dramBandwidth + t.launchOverhead).scale(0));
  Estimate compute = rooflineEstimate(1e12, 1e6, t);
  CHECK(compute.seconds == doctest::Approx(1e12 / t.peakFlopsFp32 + t.launchOverhead).scale(0));
  Estimate empty = rooflineEstimate(0, 0, t);
  CHECK(empty.seconds == doctest::Approx(t.launchOverhead).scale(0));
}

TEST_CASE("whole models: estimates are positive and fusion of everything saves launches") {
  Fixture f;
  Expected<Graph> g = importOnnxFile(std::string(FUSEC_SOURCE_DIR) + "/examples/models/resblock.onnxtxt");
  REQUIRE(g.ok());
  Estimate unfused = unfusedEstimate(g.value(), f.rules->catalog, f.target);
  CHECK(unfused.kernels == static_cast<int64_t>(g->numNodes()));
  CHECK(unfused.flops > 2 * 8 * 3 * 9 * 32 * 32);  // at least the first conv
  Estimate one = groupEstimate(g.value(), g->nodes(), f.rules->catalog, f.target);
  // As one kernel, DRAM sees the image (3x32x32), the weights (w1 216, b1 8,
  // BatchNorm 2 x 4 x 8, w2 576, wp 24, fc 80 + 10) and the logits (10),
  // float32, once each: (3072 + 978 + 10) x 4 bytes at N = 1.
  CHECK(one.bytes == (3072 + 978 + 10) * 4);
  CHECK(one.kernels == 1);
}

TEST_CASE("an op's FLOPs come from its catalog cost: attributes, absent operands and a pack's own op") {
  Fixture f;
  // Gemm with A transposed: K is A's first dim (5), no C.
  Graph gemm = test::parse(test::model("g (float[5,10] a, float[5,3] b) => (float[10,3] y)", "y = Gemm <transA = 1> (a, b)"));
  CHECK(nodeFlops(gemm, f.only(gemm, "Gemm"), f.rules->catalog) == 2 * 30 * 5);
  // Conv without bias, 2 groups: W is [4, 1, 3, 3], 9 multiply-adds per output.
  Graph conv = test::parse(test::model("g (float[1,2,6,6] x, float[4,1,3,3] w) => (float[1,4,4,4] y)",
                                       "y = Conv <group = 2> (x, w)"));
  CHECK(nodeFlops(conv, f.only(conv, "Conv"), f.rules->catalog) == 2 * 64 * 9);
  // An op a pack declares, with its own cost over an attribute.
  std::unique_ptr<RuleSet> pack =
      test::compileRules("op Stencil(X) anchor { taps: int = 3 } cost { flops = 2 * taps * numel(Y) }");
  Graph g;
  g.info.opsetImports[""] = 17;
  const ValueId x = g.addInput("x", TensorType::of(DType::Float32, {8, 8}));
  const ValueId y = g.addValue("y", TensorType::of(DType::Float32, {8, 8}));
  g.addNode("Stencil", {x}, {y}, {{"taps", int64_t{5}}}, "stencil");
  CHECK(nodeFlops(g, f.only(g, "Stencil"), pack->catalog) == 2 * 5 * 64);
  g.node(f.only(g, "Stencil")).attrs.erase("taps");  // the declared default
  CHECK(nodeFlops(g, f.only(g, "Stencil"), pack->catalog) == 2 * 3 * 64);
}
