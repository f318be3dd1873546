/// The rewrite driver and cleanup passes: results computed at compile time,
/// outputs unchanged, fixpoints reached or the cap reported.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include "TestUtil.h"
#include "fusec/engine/Builtins.h"
#include "fusec/engine/Rewriter.h"
#include "fusec/engine/Window.h"
#include "fusec/grammar/PackLoader.h"

using namespace fusec;

namespace {

Tensor randomTensor(Shape shape, unsigned seed, float lo = -1, float hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  Tensor t(DType::Float32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

size_t count(const Graph& g, const std::string& op) {
  size_t n = 0;
  for (NodeRef r : g.nodes()) n += g.node(r).op == op;
  return n;
}

/// Runs `g` before and after `change` on the same random inputs and checks
/// the outputs agree.
template <class F>
void checkSameOutputs(Graph& g, F&& change, float tol = 1e-4f) {
  std::vector<Tensor> inputs;
  unsigned seed = 1;
  for (ValueId v : g.inputs()) inputs.push_back(randomTensor(g.value(v).type.staticShape(), seed++));
  std::vector<Tensor> before = test::run(g, inputs);
  change(g);
  REQUIRE(g.verify().empty());
  std::vector<Tensor> after = test::run(g, inputs);
  REQUIRE(before.size() == after.size());
  for (size_t i = 0; i < before.size(); ++i) test::checkClose(after[i], before[i], tol);
}


}  // namespace

TEST_CASE("BatchNorm folds into Conv: the shipped rule's weights are those worked out by hand, outputs unchanged") {
  auto set = test::loadShippedPack("cnn/batchnorm.fuse");  // the rule as shipped, not a copy
  for (bool withBias : {true, false}) {
    INFO("conv bias: " << withBias);
    Graph g;
    ValueId x = g.addInput("x", TensorType::of(DType::Float32, {1, 3, 6, 6}));
    const Tensor wt = randomTensor({4, 3, 3, 3}, 11), bt = randomTensor({4}, 12), gamma = randomTensor({4}, 13),
                 beta = randomTensor({4}, 14), mean = randomTensor({4}, 15), var = randomTensor({4}, 16, 0.5f, 2.f);
    ValueId w = g.addConstant("w", wt);
    ValueId b = g.addConstant("b", bt);
    ValueId c = g.addValue("c", TensorType::of(DType::Float32, {1, 4, 4, 4}));
    std::vector<ValueId> convIn = {x, w};
    if (withBias) convIn.push_back(b);
    g.addNode("Conv", convIn, {c}, {{"strides", std::vector<int64_t>{1, 1}}}, "conv");
    ValueId y = g.addValue("y", TensorType::of(DType::Float32, {1, 4, 4, 4}));
    g.addNode("BatchNormalization",
              {c, g.addConstant("gamma", gamma), g.addConstant("beta", beta), g.addConstant("mean", mean),
               g.addConstant("var", var)},
              {y}, {{"epsilon", 1e-3f}}, "bn");
    g.addOutput(y);
    checkSameOutputs(g, [&](Graph& h) {
      Expected<RewriteStats> stats = rewriteToFixpoint(h, *set, nullptr);
      REQUIRE_MESSAGE(stats.ok(), test::why(stats));
      CHECK(stats->fired["fold_bn_into_conv"] == 1);
      CHECK_FALSE(stats->capHit);
      CHECK(stats->nodesFolded > 0);
    });
    CHECK(g.numNodes() == 1);
    NodeRef conv = g.nodes().front();
    CHECK(g.node(conv).op == "Conv");
    CHECK(g.node(conv).attr("strides"));  // attrs(c) copied
    REQUIRE(g.node(conv).inputs.size() == 3);
    CHECK(g.value(g.outputs()[0]).name == "y");  // the graph output keeps its name
    // s = gamma / sqrt(var + eps) per output channel: w' = w * s, b' = (b - mean) * s + beta.
    const ValueId w2 = g.node(conv).inputs[1], b2 = g.node(conv).inputs[2];
    REQUIRE(g.isConstant(w2));
    REQUIRE(g.isConstant(b2));
    const Tensor &fw = *g.value(w2).constant, &fb = *g.value(b2).constant;
    REQUIRE(fw.numel() == 4 * 27);
    REQUIRE(fb.numel() == 4);
    for (int m = 0; m < 4; ++m) {
      const double sm = gamma.data<float>()[m] / std::sqrt(double(var.data<float>()[m]) + 1e-3);
      for (int k = 0; k < 27; ++k)
        CHECK(fw.data<float>()[m * 27 + k] == doctest::Approx(wt.data<float>()[m * 27 + k] * sm).epsilon(1e-5));
      const double bias = withBias ? bt.data<float>()[m] : 0.0;
      CHECK(fb.data<float>()[m] == doctest::Approx((bias - mean.data<float>()[m]) * sm + beta.data<float>()[m]).epsilon(1e-5));
    }
  }
}

TEST_CASE("the guard protects shared values: no fold when the Conv result has another use") {
  auto set = test::loadShippedPack("cnn/batchnorm.fuse");
  Graph g = test::parse(test::model(
      "g (float[1,1,3,3] x, float[1,1,1,1] w = {2.0}, float[1] s = {1.0}, float[1] b = {0.0}, float[1] m = {0.0},"
      " float[1] v = {1.0}) => (float[1,1,3,3] y, float[1,1,3,3] c)",
      "c = Conv (x, w)\ny = BatchNormalization (c, s, b, m, v)"));
  Expected<RewriteStats> stats = rewriteToFixpoint(g, *set, nullptr);
  REQUIRE(stats.ok());
  CHECK(stats->fired["fold_bn_into_conv"] == 0);  // (batchnorm_to_affine may still rewrite the BatchNorm)
  REQUIRE(count(g, "Conv") == 1);
  for (NodeRef n : g.nodes())
    if (g.node(n).op == "Conv") {
      const ValueId w = g.node(n).inputs[1];
      REQUIRE(g.isConstant(w));
      CHECK(g.value(w).constant->data<float>()[0] == 2.0f);  // c, read back, still has its own weights
    }
}

namespace {

/// LayerNormalization written out as exporters do, over `float[2,8] x`,
/// with the exponent, epsilon and keepdims given.
Graph writtenOutLayerNorm(const std::string& exponent, const std::string& eps, int keepdims = 1) {
  const std::string kd = " keepdims = " + std::to_string(keepdims);
  return test::parse(test::model(
      "g (float[2,8] x, float two = {" + exponent + "}, float eps = {" + eps +
          "}, float[8] scale = {1,2,3,4,5,6,7,8}, float[8] bias = {0,1,0,1,0,1,0,1}) => (float[2,8] y)",
      "mu = ReduceMean <axes = [-1]," + kd + "> (x)\nd = Sub (x, mu)\nsq = Pow (d, two)\n"
      "var = ReduceMean <axes = [-1]," + kd + "> (sq)\nve = Add (var, eps)\nsd = Sqrt (ve)\nn = Div (d, sd)\n"
      "g = Mul (n, scale)\ny = Add (g, bias)", 13));
}

}  // namespace

TEST_CASE("the shipped recognize_layernorm keeps the model's epsilon and fires only on a square") {
  auto core = test::loadDefaultPacks();
  REQUIRE(core);
  // Epsilon 0.5 (far from LayerNormalization's default 1e-5), on rows whose
  // variance is small enough that it matters. Row [0, 1, 0, 1, ...]: mean
  // 0.5, variance 0.25, so n = (x - 0.5) / sqrt(0.75); y = n * scale + bias.
  Graph g = writtenOutLayerNorm("2.0", "0.5");
  Tensor x = test::floats({2, 8}, {0, 1, 0, 1, 0, 1, 0, 1, 2, 2, 2, 2, 2, 2, 2, 2});
  const float n = 0.5f / std::sqrt(0.75f);
  std::vector<float> want(16);
  for (int i = 0; i < 8; ++i) {
    want[static_cast<size_t>(i)] = (i % 2 ? n : -n) * float(i + 1) + float(i % 2);
    want[static_cast<size_t>(8 + i)] = float(i % 2);  // a constant row normalizes to 0
  }
  Expected<RewriteStats> stats = rewriteToFixpoint(g, *core, nullptr);
  REQUIRE(stats.ok());
  CHECK(stats->fired["recognize_layernorm"] == 1);
  CHECK(g.numNodes() == 1);
  REQUIRE(count(g, "LayerNormalization") == 1);
  test::checkClose(test::run(g, {x})[0], test::floats({2, 8}, want), 1e-5f);

  // A cube is not a variance; means that drop their axis broadcast along the
  // wrong one: neither is LayerNormalization.
  for (auto [exponent, keepdims] : {std::pair{"3.0", 1}, std::pair{"2.0", 0}}) {
    CAPTURE(exponent);
    CAPTURE(keepdims);
    Graph other = writtenOutLayerNorm(exponent, "0.5", keepdims);
    const size_t nodes = other.numNodes();
    Expected<RewriteStats> none = rewriteToFixpoint(other, *core, nullptr);
    REQUIRE(none.ok());
    CHECK(none->rewrites == 0);
    CHECK(other.numNodes() == nodes);
  }
}

TEST_CASE("a rule that always matches hits the cap, and says so") {
  auto set = test::compileRules("rule spin { match { y = Relu(x) } rewrite { y = Relu(x) } }");
  Graph g = test::parse(test::model("g (float[4] x) => (float[4] y)", "y = Relu (x)"));
  Expected<RewriteStats> stats = rewriteToFixpoint(g, *set, nullptr);
  REQUIRE(stats.ok());
  CHECK(stats->capHit);
  CHECK(stats->capRule == "spin");
  CHECK(g.verify().empty());
  // The pipeline the commands run refuses the half-rewritten graph, naming the rule.
  Graph again = test::parse(test::model("g (float[4] x) => (float[4] y)", "y = Relu (x)"));
  Expected<RewriteStats> refused = runRewritePipeline(again, *set, nullptr);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("rule `spin`") != std::string::npos);
}

TEST_CASE("constant folding, dead code and common subexpressions") {
  Graph g = test::parse(test::model(
      "g (float[2] x, float[2] a = {1.0, 2.0}, float[2] b = {3.0, 4.0}) => (float[2] y)",
      "k = Add (a, b)\nk2 = Mul (k, a)\np = Mul (x, k2)\nq = Mul (x, k2)\ndead = Exp (x)\ny = Add (p, q)"));
  checkSameOutputs(g, [&](Graph& h) {
    Expected<size_t> folded = foldConstants(h, test::coreCatalog());
    REQUIRE(folded.ok());
    CHECK(folded.value() == 2);
    CHECK(eliminateCommonSubexpressions(h, test::coreCatalog()) == 1);
    CHECK(eliminateDeadCode(h) == 1);
  });
  CHECK(g.numNodes() == 2);  // one Mul, one Add
  // By hand: k = a + b = {4, 6}, k2 = k * a = {4, 12}, folded into the
  // Mul's constant; y = 2 x k2.
  for (NodeRef n : g.nodes())
    if (g.node(n).op == "Mul") {
      const ValueId c = g.node(n).inputs[1];
      REQUIRE(g.isConstant(c));
      CHECK(g.value(c).constant->toFloats() == std::vector<float>{4, 12});
    }
  CHECK(test::run(g, {test::floats({2}, {0.5f, -1.0f})})[0].toFloats() == std::vector<float>{4, -24});
  // Equal constants count as the same operand.
  Graph h = test::parse(test::model("g (float[2] x, float[2] a = {1.0, 2.0}, float[2] b = {1.0, 2.0}) => (float[2] y)",
                                    "p = Mul (x, a)\nq = Mul (x, b)\ny = Add (p, q)"));
  CHECK(eliminateCommonSubexpressions(h, test::coreCatalog()) == 1);
  CHECK(h.numNodes() == 2);
}

TEST_CASE("common subexpressions: large equal constants merge by content, a one-element difference does not") {
  // BERT's export builds each layer's mask as Where(cond, -inf, zeros) with
  // its own copy of a [12,1,128] zeros constant (6 KiB): one kernel, not 12.
  Graph g;
  const ValueId cond = g.addInput("cond", TensorType::of(DType::Bool, {1, 1, 128}));
  const ValueId inf = g.addConstant("inf", Tensor::fromVector<float>({}, {-INFINITY}));
  std::vector<float> zeros(12 * 128, 0.0f), other = zeros;
  other[1000] = 1.0f;
  std::vector<ValueId> masks;
  for (int layer = 0; layer < 3; ++layer) {
    const ValueId z = g.addConstant("zeros" + std::to_string(layer),
                                    Tensor::fromVector<float>({12, 1, 128}, layer == 2 ? other : zeros));
    const ValueId m = g.addValue("mask" + std::to_string(layer), TensorType::of(DType::Float32, {12, 1, 128}));
    g.addNode("Where", {cond, inf, z}, {m});
    masks.push_back(m);
  }
  for (ValueId m : masks) g.addOutput(m);
  CHECK(eliminateCommonSubexpressions(g, test::coreCatalog()) == 1);
  eliminateDeadCode(g);
  // Layers 0 and 1 share one Where; layer 2's constant differs. Both
  // shared results are model outputs, whose names stay: the second is an
  // Identity copy of the first.
  CHECK(g.numNodes() == 3);
  for (int layer = 0; layer < 3; ++layer) CHECK(g.value(g.outputs()[layer]).name == "mask" + std::to_string(layer));
  REQUIRE(g.producer(g.outputs()[1]));
  CHECK(g.node(*g.producer(g.outputs()[1])).op == "Identity");
  CHECK(g.node(*g.producer(g.outputs()[1])).inputs[0] == g.outputs()[0]);
  CHECK(g.node(*g.producer(g.outputs()[2])).op == "Where");
}

TEST_CASE("Shape and Size of static shapes fold, and what follows from them") {
  Graph g = test::parse(test::model("g (float[2,3,4] x) => (float[6,4] y, int64 n)", R"(
    s = Shape <end = 2> (x)
    p = ReduceProd <keepdims = 1> (s)
    m = Constant <value = int64[1] {-1}> ()
    shape = Concat <axis = 0> (p, m)
    y = Reshape (x, shape)
    n = Size (x)
  )"));
  checkSameOutputs(g, [&](Graph& h) {
    Expected<size_t> folded = foldConstants(h, test::coreCatalog());
    REQUIRE(folded.ok());
    CHECK(folded.value() == 4);  // Shape, ReduceProd, Concat, Size
  });
  CHECK(g.numNodes() == 1);  // the Reshape, its shape now a constant
  // A symbolic dim keeps Shape as it is.
  Graph sym = test::parse(test::model("g (float[N,4] x) => (int64[2] s)", "s = Shape (x)"));
  Expected<size_t> none = foldConstants(sym, test::coreCatalog());
  REQUIRE(none.ok());
  CHECK(none.value() == 0);
}

TEST_CASE("shape arithmetic as exporters write it folds in one sweep, and shapes become static") {
  // Shape -> Gather -> Div -> Unsqueeze -> Concat -> Reshape, then a second
  // level that reads the Reshape's shape (Shape -> Slice -> Concat ->
  // Reshape) and a Size: ONNX's own inference cannot see through the first
  // Reshape, so the second level needs the first folded.
  Graph g = test::parse(test::model("g (float[2,6,4] x) => (float[2,3,8] y, int64 n)", R"(
    s = Shape (x)
    i1 = Constant <value = int64 {1}> ()
    c = Gather <axis = 0> (s, i1)
    two = Constant <value = int64 {2}> ()
    h = Div (c, two)
    ax = Constant <value = int64[1] {0}> ()
    hu = Unsqueeze (h, ax)
    lead = Constant <value = int64[1] {2}> ()
    rest = Constant <value = int64[2] {2, -1}> ()
    shape1 = Concat <axis = 0> (lead, hu, rest)
    r = Reshape (x, shape1)
    s2 = Shape (r)
    b = Constant <value = int64[1] {0}> ()
    e = Constant <value = int64[1] {2}> ()
    head = Slice (s2, b, e)
    m = Constant <value = int64[1] {-1}> ()
    shape2 = Concat <axis = 0> (head, m)
    y = Reshape (r, shape2)
    n = Size (r)
  )"));
  REQUIRE_FALSE(g.value(*g.findValue("r")).type.isStatic());  // import alone does not get there
  checkSameOutputs(g, [&](Graph& h) {
    Expected<size_t> folded = foldConstants(h, test::coreCatalog());
    REQUIRE(folded.ok());
    CHECK(folded.value() == 9);  // every node but the two Reshapes (Constant nodes are constants from import on)
  });
  CHECK(g.numNodes() == 2);
  CHECK(count(g, "Reshape") == 2);
  CHECK(g.value(*g.findValue("r")).type.str() == "float[2,3,2,4]");
  CHECK(g.value(g.outputs()[0]).type.str() == "float[2,3,8]");
  CHECK(requireStaticShapes(g, "").ok());
  CHECK(g.value(g.outputs()[1]).constant->scalarAt(0) == 48);
}

TEST_CASE("a shape that run-time data decides stays dynamic, and the message names that value") {
  Graph g = test::parse(test::model("g (float[6] x, int64[2] dims) => (float[?,?] y)", "y = Reshape (x, dims)"));
  REQUIRE(foldConstants(g, test::coreCatalog()).ok());
  Status st = requireStaticShapes(g, "bind it");
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message.find("the run-time values of `dims`") != std::string::npos);
}

TEST_CASE("nodes a rewrite creates are typed when they are created") {
  auto set = test::compileRules(R"(
rule relu_as_max {
  match { y = Relu(x) }
  rewrite { y = transpose(Max(transpose(x, [1, 0]), 0.0), [1, 0]) }
}
)");
  Graph g = test::parse(test::model("g (float[2,3] x) => (float[3,2] y)", "t = Transpose <perm = [1, 0]> (x)\ny = Relu (t)"));
  Expected<RewriteStats> stats = rewriteToFixpoint(g, *set, nullptr);
  REQUIRE(stats.ok());
  REQUIRE(stats->fired["relu_as_max"] == 1);
  // The rewrite's inner Transpose (of a [3,2] value) is [2,3]; nothing
  // copied the replaced value's type onto it.
  bool sawTranspose = false;
  for (NodeRef n : g.nodes()) {
    const NodeData& d = g.node(n);
    if (d.name.find("_rw") == std::string::npos) continue;
    for (ValueId v : d.outputs) CHECK_MESSAGE(g.value(v).type.isStatic(), d.name);
    if (d.op == "Transpose" && g.producer(d.inputs[0]) && g.node(*g.producer(d.inputs[0])).op == "Max")
      CHECK(g.value(d.outputs[0]).type.str() == "float[3,2]");
    else if (d.op == "Transpose") {
      sawTranspose = true;
      CHECK(g.value(d.outputs[0]).type.str() == "float[2,3]");
    }
  }
  CHECK(sawTranspose);
}

TEST_CASE("a rewrite that changes the shape of what it replaces is refused, naming the rule") {
  auto set = test::compileRules(R"(
rule transposes {
  match { y = Relu(x) }
  rewrite { y = transpose(x, [1, 0]) }
}
)");
  Graph g = test::parse(test::model("g (float[2,3] x) => (float[2,3] y)", "y = Relu (x)"));
  Expected<RewriteStats> stats = rewriteToFixpoint(g, *set, nullptr);
  REQUIRE_FALSE(stats.ok());
  CHECK(stats.error().message ==
        "rule `transposes` replaces `y` (float[2,3]) with a value of type float[3,2]; a rewrite must keep the element "
        "type and shape of what it replaces");
  // The same rule on a square input keeps the shape and runs.
  Graph square = test::parse(test::model("g (float[3,3] x) => (float[3,3] y)", "y = Relu (x)"));
  CHECK(rewriteToFixpoint(square, *set, nullptr).ok());
}

TEST_CASE("folding does not allocate what the shapes do not bound") {
  // Shape of a huge declared input folds from the shape alone; an Expand of
  // a constant to 2^40 elements stays a node.
  Graph g = test::parse(test::model("g (float[1073741824,1024] x) => (int64[2] s, float[1099511627776] y)", R"(
    s = Shape (x)
    one = Constant <value = float {1.0}> ()
    big = Constant <value = int64[1] {1099511627776}> ()
    y = Expand (one, big)
  )"));
  Expected<size_t> folded = foldConstants(g, test::coreCatalog());
  REQUIRE(folded.ok());
  CHECK(folded.value() == 1);
  CHECK(count(g, "Expand") == 1);
  CHECK(g.value(g.outputs()[0]).constant->scalarAt(0) == 1073741824);
}

TEST_CASE("every builtin a rewrite may use is built as ops that compute what the builtin table says") {
  // For each, a rule rewriting a matched node into the builtin applied to
  // the node's operands; the interpreter's result on the rewritten graph is
  // compared with the table's own evaluation, element by element.
  size_t tested = 0;
  for (const Builtin& b : builtins()) {
    if (!(b.uses & kInRewrite) || b.lowering.empty() || !b.eval) continue;
    INFO("builtin `" << b.name << "`");
    const size_t arity = b.minArgs;
    const bool logical = b.name == "and" || b.name == "or" || b.name == "not";
    std::string call;
    if (b.form == Builtin::Form::Prefix) call = b.name + " a";
    else if (b.form == Builtin::Form::Infix) call = "a " + b.name + " b";
    else call = b.name + (arity == 1 ? "(a)" : arity == 2 ? "(a, b)" : "(a, b, c)");
    if (b.name == "select") call = "select(a > b, b, c)";
    // A node of the same arity and element type class to replace.
    const std::string matched = logical ? (arity == 1 ? "Not(a)" : "Xor(a, b)")
                                : b.truth ? (arity == 1 ? "IsNaN(a)" : "Less(a, b)")
                                          : (arity == 1 ? "Neg(a)" : arity == 2 ? "Sub(a, b)" : "Sum(a, b, c)");
    const std::string rules = "rule r { match { y = " + matched + " } rewrite { y = " + call + " } }";
    std::unique_ptr<RuleSet> set = test::compileRules(rules);
    const std::string in = logical ? "bool[12]" : "float[12]";
    const std::string out = logical || b.truth ? "bool[12]" : "float[12]";
    std::string op = matched.substr(0, matched.find('('));
    std::string operands = arity == 1 ? "a" : arity == 2 ? "a, b" : "a, b, c";
    Graph g = test::parse("<ir_version: 8, opset_import: [\"\" : 17]>\ng (" + in + " a, " + in + " b, " + in +
                          " c) => (" + out + " y) {\n  y = " + op + " (" + operands + ")\n}\n");
    // (Rewriting `Sub` into `a - b` matches its own result until the cap,
    // which the pipeline refuses; the driver alone stops there.)
    Expected<RewriteStats> rw = rewriteToFixpoint(g, *set, nullptr);
    REQUIRE_MESSAGE(rw.ok(), test::why(rw));
    REQUIRE(rw->fired.count("r"));
    // Values where every function is defined somewhere and undefined
    // (NaN) elsewhere alike: both sides must agree on NaN too.
    std::vector<Tensor> inputs;
    for (unsigned k = 0; k < 3; ++k) {
      Tensor t = logical ? Tensor(DType::Bool, {12}) : randomTensor({12}, 7 + k, -3, 3);
      if (logical)
        for (int64_t i = 0; i < 12; ++i) t.data<bool>()[i] = ((i >> k) & 1) != 0;
      inputs.push_back(t);
    }
    std::vector<Tensor> got = test::run(g, inputs);
    for (int64_t i = 0; i < 12; ++i) {
      double args[3];
      for (size_t k = 0; k < 3; ++k)
        args[k] = logical ? double(inputs[k].data<bool>()[i]) : double(inputs[k].data<float>()[i]);
      if (b.name == "select") args[0] = args[0] > args[1], args[1] = inputs[1].data<float>()[i], args[2] = inputs[2].data<float>()[i];
      const double want = b.eval(args, arity);
      const double have = got[0].dtype() == DType::Bool ? double(got[0].data<bool>()[i]) : double(got[0].data<float>()[i]);
      INFO("element " << i << ": want " << want << ", got " << have);
      if (std::isnan(want)) CHECK(std::isnan(have));
      else CHECK(std::abs(have - want) <= 1e-5 * std::max(1.0, std::abs(want)));
    }
    ++tested;
  }
  CHECK(tested >= 30);
}

TEST_CASE("conv taps that read only padding are dropped, and every output stays the same") {
  struct Case {
    const char* what;
    Shape x, w;
    std::vector<int64_t> strides, dilations, pads;
    int64_t group;
    std::vector<int64_t> kernelAfter;  ///< the kernel's spatial shape after the pass
    bool firstTapDropped;              ///< the weight's first element is among the dropped
  };
  const std::vector<Case> cases = {
      {"2-D, dilation past the map: a 1x1 conv", {1, 3, 5, 5}, {4, 3, 3, 3}, {1, 1}, {6, 6}, {6, 6, 6, 6}, 1, {1, 1}, true},
      {"2-D, every tap reads the map at some output", {1, 3, 5, 5}, {4, 3, 3, 3}, {1, 1}, {4, 4}, {4, 4, 4, 4}, 1, {3, 3}, false},
      {"1-D, two taps on each side dropped", {2, 2, 7}, {3, 2, 5}, {1}, {8}, {16, 16}, 1, {1}, true},
      {"3-D, one axis of three", {1, 2, 4, 6, 6}, {2, 2, 3, 3, 3}, {1, 1, 1}, {1, 5, 7}, {1, 5, 7, 1, 5, 7}, 1, {3, 3, 1}, true},
      {"2-D, stride 2 in two groups", {1, 4, 9, 9}, {4, 2, 3, 3}, {2, 2}, {10, 10}, {10, 10, 10, 10}, 2, {1, 1}, true},
      {"1-D, a pad that would go negative keeps its tap", {1, 1, 3}, {1, 1, 2}, {1}, {5}, {3, 0}, 1, {2}, false},
      {"2-D, asymmetric pads: the trailing taps only", {1, 2, 6, 6}, {2, 2, 3, 3}, {1, 1}, {7, 7}, {0, 0, 14, 14}, 1, {1, 1}, false},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    for (bool nanWeight : {false, true}) {
      INFO("a NaN weight in the first tap: " << nanWeight);
      Graph g;
      const ValueId x = g.addInput("x", TensorType::of(DType::Float32, c.x));
      Tensor w = randomTensor(c.w, 3);
      if (nanWeight) w.data<float>()[0] = NAN;
      const ValueId wv = g.addConstant("w", w);
      const ValueId y = g.addValue("y");
      g.addNode("Conv", {x, wv}, {y},
                {{"strides", c.strides}, {"dilations", c.dilations}, {"pads", c.pads}, {"group", c.group}});
      g.addOutput(y);
      const Tensor input = randomTensor(c.x, 5);
      const std::vector<Tensor> before = test::run(g, {input});
      const size_t trimmed = trimDeadConvTaps(g);
      const std::vector<int64_t> kernelBefore(c.w.begin() + 2, c.w.end());
      // A dropped tap's NaN weight times the padding's zero is NaN: kept.
      const std::vector<int64_t> want = nanWeight && c.firstTapDropped ? kernelBefore : c.kernelAfter;
      const bool changes = want != kernelBefore;
      CHECK(trimmed == (changes ? 1u : 0u));
      const NodeData& conv = g.node(*g.producer(y));
      std::vector<int64_t> kernel(g.value(conv.inputs[1]).constant->shape().begin() + 2,
                                  g.value(conv.inputs[1]).constant->shape().end());
      CHECK(kernel == want);
      if (changes) CHECK(std::get<std::vector<int64_t>>(*conv.attr("kernel_shape")) == want);
      for (int64_t p : std::get<std::vector<int64_t>>(*conv.attr("pads"))) CHECK(p >= 0);
      CHECK(g.verify().empty());
      test::checkClose(test::run(g, {input})[0], before[0], 1e-5f);
    }
  }
}

TEST_CASE("convs sharing one weight get a trimmed weight each, under names of their own") {
  Graph g;
  const ValueId x = g.addInput("x", TensorType::of(DType::Float32, {1, 2, 5, 5}));
  const ValueId w = g.addConstant("w", randomTensor({2, 2, 3, 3}, 2));
  std::vector<ValueId> ys;
  for (int64_t d : {6, 8}) {
    ys.push_back(g.addValue("y" + std::to_string(d)));
    g.addNode("Conv", {x, w}, {ys.back()},
              {{"dilations", std::vector<int64_t>{d, d}}, {"pads", std::vector<int64_t>{d, d, d, d}}});
    g.addOutput(ys.back());
  }
  CHECK(trimDeadConvTaps(g) == 2);
  const ValueId a = g.node(*g.producer(ys[0])).inputs[1], b = g.node(*g.producer(ys[1])).inputs[1];
  CHECK(a != b);
  CHECK(g.value(a).name != g.value(b).name);
  CHECK(g.value(a).name != "w");
}

TEST_CASE("conv tap trimming leaves absurd attributes alone, without overflow") {
  for (int64_t big : {int64_t{1} << 40, std::numeric_limits<int64_t>::max()}) {
    Graph g;
    const ValueId x = g.addInput("x", TensorType::of(DType::Float32, {1, 1, 5}));
    const ValueId w = g.addConstant("w", randomTensor({1, 1, 3}, 1));
    const ValueId y = g.addValue("y");
    g.addNode("Conv", {x, w}, {y}, {{"dilations", std::vector<int64_t>{big}}, {"pads", std::vector<int64_t>{big, big}}});
    g.addOutput(y);
    CHECK(trimDeadConvTaps(g) == 0);
    // The shared window geometry refuses them, naming the attribute.
    Expected<WindowGeometry> win = windowGeometry(g.node(*g.producer(y)), {5}, {3}, false);
    REQUIRE_FALSE(win.ok());
    CHECK(win.error().message.find("`dilations`") != std::string::npos);
  }
}

TEST_CASE("rewrites keep a model's input and output names") {
  // The shipped packs on graphs whose rewritten values touch the interface:
  // an Identity of an input, two equal results that are both outputs
  // (common subexpressions), an Identity of an output that is an output
  // too. Every input and output keeps its name; the values stay right.
  auto packs = test::loadDefaultPacks();
  struct Case {
    const char* signature;
    const char* body;
    std::vector<std::string> inputs, outputs;
  };
  const std::vector<Case> cases = {
      {"g (float[4] x) => (float[4] y)", "b = Identity (x)\n y = Exp (b)", {"x"}, {"y"}},
      {"g (float[4] x) => (float[4] y, float[4] x2)", "y = Identity (x)\n x2 = Relu (x)", {"x"}, {"y", "x2"}},
      {"g (float[4] x) => (float[4] y1, float[4] y2, float[4] z)", "y1 = Relu (x)\n y2 = Relu (x)\n z = Identity (y1)",
       {"x"}, {"y1", "y2", "z"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.body);
    Graph g = test::parse(test::model(c.signature, c.body));
    const std::vector<Tensor> in = {Tensor::fromVector<float>({4}, {-1.0f, 0.5f, 2.0f, -3.0f})};
    Expected<std::vector<Tensor>> before = runGraph(g, in, &packs->catalog);
    REQUIRE(before.ok());
    REQUIRE(rewriteToFixpoint(g, *packs, nullptr).ok());
    eliminateDeadCode(g);
    REQUIRE(g.verify().empty());
    std::vector<std::string> inputs, outputs;
    for (ValueId v : g.inputs()) inputs.push_back(g.value(v).name);
    for (ValueId v : g.outputs()) outputs.push_back(g.value(v).name);
    CHECK(inputs == c.inputs);
    CHECK(outputs == c.outputs);
    Expected<std::vector<Tensor>> after = runGraph(g, in, &packs->catalog);
    REQUIRE(after.ok());
    for (size_t i = 0; i < before->size(); ++i)
      for (int64_t k = 0; k < 4; ++k) CHECK((*after)[i].scalarAt(k) == (*before)[i].scalarAt(k));
  }
}
