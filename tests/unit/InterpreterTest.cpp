/// Reference interpreter corners the ONNX suite does not reach: broadcasting,
/// negative axes, empty tensors, opset-dependent forms, and errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "TestUtil.h"

using namespace fusec;
using test::floats;
using test::ints;
using test::model;
using test::parse;

namespace {
/// Runs a one-node graph with inputs x (and y, z) and returns output 0.
Tensor eval1(const std::string& signature, const std::string& body, const std::vector<Tensor>& in,
             int opset = 17) {
  Graph g = parse(model(signature, body, opset));
  return test::run(g, in).at(0);
}
}  // namespace

TEST_CASE("broadcasting corners") {
  SUBCASE("column against row") {
    Tensor y = eval1("g (float[3,1] a, float[1,4] b) => (float[3,4] y)", "y = Add (a, b)",
                     {floats({3, 1}, {0, 10, 20}), floats({1, 4}, {1, 2, 3, 4})});
    test::checkClose(y, floats({3, 4}, {1, 2, 3, 4, 11, 12, 13, 14, 21, 22, 23, 24}));
  }
  SUBCASE("scalar against tensor, lower rank on the left") {
    Tensor y = eval1("g (float a, float[2,2] b) => (float[2,2] y)", "y = Sub (a, b)",
                     {Tensor::scalar(1.f), floats({2, 2}, {1, 2, 3, 4})});
    test::checkClose(y, floats({2, 2}, {0, -1, -2, -3}));
  }
  SUBCASE("zero-size dim broadcasts against 1") {
    Tensor y = eval1("g (float[0,3] a, float[1,3] b) => (float[0,3] y)", "y = Mul (a, b)",
                     {Tensor(DType::Float32, {0, 3}), floats({1, 3}, {1, 2, 3})});
    CHECK(y.shape() == Shape{0, 3});
  }
  SUBCASE("three-way Where") {
    Graph g = parse(model("g (bool[2,1] c, float[1,3] x, float y) => (float[2,3] z)", "z = Where (c, x, y)"));
    Tensor c(DType::Bool, {2, 1});
    c.data<bool>()[0] = true;
    auto out = test::run(g, {c, floats({1, 3}, {1, 2, 3}), Tensor::scalar(9.f)});
    test::checkClose(out[0], floats({2, 3}, {1, 2, 3, 9, 9, 9}));
  }
  SUBCASE("incompatible shapes are an error naming the node") {
    Graph g = parse(model("g (float[2,3] a, float[4] b) => (float[2,3] y)", "y = Add (a, b)"));
    std::string err = test::runError(g, {floats({2, 3}, {1, 2, 3, 4, 5, 6}), floats({4}, {1, 2, 3, 4})});
    CHECK(err == "node 'Add_0' (Add): operand shapes cannot be broadcast together: [2, 3] [4]");
  }
  SUBCASE("variadic Max over three shapes") {
    Tensor y = eval1("g (float[2,1] a, float[3] b, float c) => (float[2,3] y)", "y = Max (a, b, c)",
                     {floats({2, 1}, {0, 5}), floats({3}, {1, 2, 3}), Tensor::scalar(2.5f)});
    test::checkClose(y, floats({2, 3}, {2.5f, 2.5f, 3, 5, 5, 5}));
  }
}

TEST_CASE("negative axes") {
  Tensor x = floats({2, 3}, {1, 2, 3, 4, 5, 6});
  SUBCASE("Softmax axis -1") {
    Tensor y = eval1("g (float[2,3] x) => (float[2,3] y)", "y = Softmax <axis = -1> (x)", {x});
    double e = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
    CHECK(y.data<float>()[2] == doctest::Approx(std::exp(3.0) / e));
    CHECK(y.data<float>()[5] == doctest::Approx(std::exp(3.0) / e));
  }
  SUBCASE("Concat axis -1") {
    Tensor y = eval1("g (float[2,3] x) => (float[2,6] y)", "y = Concat <axis = -1> (x, x)", {x});
    test::checkClose(y, floats({2, 6}, {1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6}));
  }
  SUBCASE("ReduceSum axes [-1] without keepdims") {
    Graph g = parse(model("g (float[2,3] x, int64[1] axes = {-1}) => (float[2] y)",
                          "y = ReduceSum <keepdims = 0> (x, axes)"));
    test::checkClose(test::run(g, {x})[0], floats({2}, {6, 15}));
  }
  SUBCASE("Gather axis -1 with a negative index") {
    Graph g = parse(model("g (float[2,3] x, int64[2] i = {-1, 0}) => (float[2,2] y)", "y = Gather <axis = -1> (x, i)"));
    test::checkClose(test::run(g, {x})[0], floats({2, 2}, {3, 1, 6, 4}));
  }
  SUBCASE("Unsqueeze -1 and Squeeze -3") {
    Graph g = parse(model("g (float[2,3] x, int64[1] a = {-1}, int64[1] b = {-3}) => (float[2,3] y)",
                          "u = Unsqueeze (x, a)\nt = Transpose <perm = [2, 0, 1]> (u)\ny = Squeeze (t, b)"));
    test::checkClose(test::run(g, {x})[0], x);
  }
  SUBCASE("ArgMax axis -1, last index on ties") {
    Tensor y = eval1("g (float[2,3] x) => (int64[2,1] y)", "y = ArgMax <axis = -1, select_last_index = 1> (x)",
                     {floats({2, 3}, {5, 1, 5, 0, 0, 0})});
    CHECK(y.toInt64s() == std::vector<int64_t>{2, 2});
  }
  SUBCASE("axis out of range is an error") {
    Graph g = parse(model("g (float[2,3] x) => (float[2,6] y)", "y = Concat <axis = 2> (x, x)"), {true, false, {}});
    CHECK(test::runError(g, {x}).find("axis 2 is out of range for rank 2") != std::string::npos);
  }
}

TEST_CASE("empty tensors flow through") {
  Tensor e(DType::Float32, {0, 4});
  CHECK(eval1("g (float[0,4] x) => (float[0,4] y)", "y = Relu (x)", {e}).numel() == 0);
  Graph g = parse(model("g (float[0,4] x, int64[1] a = {0}) => (float[4] y)", "y = ReduceSum <keepdims = 0> (x, a)"));
  test::checkClose(test::run(g, {e})[0], floats({4}, {0, 0, 0, 0}));
  Tensor m = eval1("g (float[2,0] a, float[0,3] b) => (float[2,3] y)", "y = MatMul (a, b)",
                   {Tensor(DType::Float32, {2, 0}), Tensor(DType::Float32, {0, 3})});
  test::checkClose(m, floats({2, 3}, {0, 0, 0, 0, 0, 0}));
  Tensor c = eval1("g (float[0,2] a, float[3,2] b) => (float[3,2] y)", "y = Concat <axis = 0> (a, b)",
                   {Tensor(DType::Float32, {0, 2}), floats({3, 2}, {1, 2, 3, 4, 5, 6})});
  test::checkClose(c, floats({3, 2}, {1, 2, 3, 4, 5, 6}));
}

TEST_CASE("convolution and pooling") {
  // 1x1x3x3 input 1..9, 2x2 ones kernel: sums of 2x2 windows.
  Tensor x = floats({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor w = floats({1, 1, 2, 2}, {1, 1, 1, 1});
  SUBCASE("valid conv with bias") {
    Graph g = parse(model("g (float[1,1,3,3] x, float[1,1,2,2] w, float[1] b = {0.5}) => (float[1,1,2,2] y)",
                          "y = Conv (x, w, b)"));
    test::checkClose(test::run(g, {x, w})[0], floats({1, 1, 2, 2}, {12.5f, 16.5f, 24.5f, 28.5f}));
  }
  SUBCASE("SAME_UPPER with stride 2") {
    Tensor y = eval1("g (float[1,1,3,3] x, float[1,1,2,2] w) => (float[1,1,2,2] y)",
                     "y = Conv <auto_pad = \"SAME_UPPER\", strides = [2, 2]> (x, w)", {x, w});
    test::checkClose(y, floats({1, 1, 2, 2}, {12, 9, 15, 9}));
  }
  SUBCASE("depthwise groups") {
    Tensor x2 = floats({1, 2, 1, 2}, {1, 2, 3, 4});
    Tensor w2 = floats({2, 1, 1, 1}, {10, 100});
    Tensor y = eval1("g (float[1,2,1,2] x, float[2,1,1,1] w) => (float[1,2,1,2] y)", "y = Conv <group = 2> (x, w)",
                     {x2, w2});
    test::checkClose(y, floats({1, 2, 1, 2}, {10, 20, 300, 400}));
  }
  SUBCASE("ConvTranspose is the adjoint of Conv") {
    Tensor y = eval1("g (float[1,1,2,2] x, float[1,1,2,2] w) => (float[1,1,3,3] y)", "y = ConvTranspose (x, w)",
                     {floats({1, 1, 2, 2}, {1, 2, 3, 4}), w});
    test::checkClose(y, floats({1, 1, 3, 3}, {1, 3, 2, 4, 10, 6, 3, 7, 4}));
  }
  SUBCASE("MaxPool with pads ignores the padding") {
    Tensor y = eval1("g (float[1,1,3,3] x) => (float[1,1,2,2] y)",
                     "y = MaxPool <kernel_shape = [2, 2], pads = [1, 1, 0, 0], strides = [2, 2]> (x)",
                     {floats({1, 1, 3, 3}, {-1, -2, -3, -4, -5, -6, -7, -8, -9})});
    test::checkClose(y, floats({1, 1, 2, 2}, {-1, -2, -4, -5}));
  }
  SUBCASE("AveragePool count_include_pad") {
    Tensor a = eval1("g (float[1,1,3,3] x) => (float[1,1,3,3] y)",
                     "y = AveragePool <kernel_shape = [3, 3], pads = [1, 1, 1, 1]> (x)", {x});
    Tensor b = eval1("g (float[1,1,3,3] x) => (float[1,1,3,3] y)",
                     "y = AveragePool <kernel_shape = [3, 3], pads = [1, 1, 1, 1], count_include_pad = 1> (x)", {x});
    CHECK(a.data<float>()[0] == doctest::Approx(3.f));        // (1+2+4+5)/4
    CHECK(b.data<float>()[0] == doctest::Approx(12.f / 9.f));  // padded zeros count
  }
  SUBCASE("GlobalAveragePool") {
    Tensor y = eval1("g (float[1,1,3,3] x) => (float[1,1,1,1] y)", "y = GlobalAveragePool (x)", {x});
    test::checkClose(y, floats({1, 1, 1, 1}, {5}));
  }
  SUBCASE("channel mismatch is an error") {
    Graph g = parse(model("g (float[1,2,3,3] x, float[1,3,2,2] w) => (float[1,1,2,2] y)", "y = Conv (x, w)"),
                    {false, false, {}});
    std::string err = test::runError(g, {Tensor(DType::Float32, {1, 2, 3, 3}), Tensor(DType::Float32, {1, 3, 2, 2})});
    CHECK(err.find("node 'Conv_0' (Conv): weight shape [1, 3, 2, 2] does not match 2 input channels") == 0);
  }
}

TEST_CASE("normalization") {
  SUBCASE("BatchNormalization") {
    Graph g = parse(model("g (float[1,2,1,1] x, float[2] s = {1, 2}, float[2] b = {0, 1}, float[2] m = {1, 1},"
                          " float[2] v = {4, 1}) => (float[1,2,1,1] y)",
                          "y = BatchNormalization <epsilon = 0.0> (x, s, b, m, v)"));
    test::checkClose(test::run(g, {floats({1, 2, 1, 1}, {3, 3})})[0], floats({1, 2, 1, 1}, {1, 5}));
  }
  SUBCASE("LayerNormalization over the last axis, with Mean and InvStdDev") {
    Graph g = parse(model("g (float[1,4] x, float[4] s = {1, 1, 1, 1}) => (float[1,4] y, float[1,1] mean, float[1,1] inv)",
                          "y, mean, inv = LayerNormalization <epsilon = 0.0> (x, s)"));
    auto out = test::run(g, {floats({1, 4}, {1, 2, 3, 4})});
    CHECK(out[1].data<float>()[0] == doctest::Approx(2.5f));
    CHECK(out[2].data<float>()[0] == doctest::Approx(1 / std::sqrt(1.25)));
    CHECK(out[0].data<float>()[0] == doctest::Approx(-1.5 / std::sqrt(1.25)));
  }
}

TEST_CASE("contractions") {
  SUBCASE("batched MatMul broadcasts the batch") {
    Tensor a = floats({2, 1, 2}, {1, 2, 3, 4});
    Tensor b = floats({2, 1}, {10, 1});
    Tensor y = eval1("g (float[2,1,2] a, float[2,1] b) => (float[2,1,1] y)", "y = MatMul (a, b)", {a, b});
    test::checkClose(y, floats({2, 1, 1}, {12, 34}));
  }
  SUBCASE("MatMul with a vector") {
    Tensor y = eval1("g (float[2] a, float[2,3] b) => (float[3] y)", "y = MatMul (a, b)",
                     {floats({2}, {1, 2}), floats({2, 3}, {1, 2, 3, 4, 5, 6})});
    test::checkClose(y, floats({3}, {9, 12, 15}));
  }
  SUBCASE("Gemm transB, alpha, beta, broadcast C") {
    Tensor y = eval1("g (float[1,2] a, float[3,2] b, float[3] c) => (float[1,3] y)",
                     "y = Gemm <transB = 1, alpha = 2.0, beta = 0.5> (a, b, c)",
                     {floats({1, 2}, {1, 1}), floats({3, 2}, {1, 2, 3, 4, 5, 6}), floats({3}, {2, 4, 6})});
    test::checkClose(y, floats({1, 3}, {7, 16, 25}));
  }
  SUBCASE("Einsum: matmul, trace, implicit output and ellipsis") {
    Tensor a = floats({2, 2}, {1, 2, 3, 4});
    test::checkClose(eval1("g (float[2,2] a) => (float[2,2] y)", "y = Einsum <equation = \"ij,jk->ik\"> (a, a)", {a}),
                     floats({2, 2}, {7, 10, 15, 22}));
    test::checkClose(eval1("g (float[2,2] a) => (float y)", "y = Einsum <equation = \"ii\"> (a)", {a}),
                     Tensor::scalar(5.f));
    test::checkClose(eval1("g (float[2,2] a) => (float[2,2] y)", "y = Einsum <equation = \"ij->ji\"> (a)", {a}),
                     floats({2, 2}, {1, 3, 2, 4}));
    test::checkClose(eval1("g (float[1,2,2] a) => (float[1,2] y)", "y = Einsum <equation = \"...ij->...i\"> (a)",
                           {a.reshaped({1, 2, 2})}),
                     floats({1, 2}, {3, 7}));
  }
}

TEST_CASE("data movement") {
  Tensor x = floats({2, 3}, {1, 2, 3, 4, 5, 6});
  SUBCASE("Reshape with 0 and -1") {
    Graph g = parse(model("g (float[2,3] x, int64[3] s = {0, -1, 1}) => (float[2,3,1] y)", "y = Reshape (x, s)"));
    CHECK(test::run(g, {x})[0].shape() == Shape{2, 3, 1});
  }
  SUBCASE("Reshape to a wrong size is an error") {
    Graph g = parse(model("g (float[2,3] x, int64[1] s = {4}) => (float[4] y)", "y = Reshape (x, s)"), {false, false, {}});
    CHECK(test::runError(g, {x}) == "node 'Reshape_0' (Reshape): cannot reshape [2, 3] (6 elements) to [4]");
  }
  SUBCASE("Slice with negative step and clamped ends") {
    Graph g = parse(model("g (float[2,3] x, int64[1] st = {-1}, int64[1] en = {-100}, int64[1] ax = {1},"
                          " int64[1] sp = {-2}) => (float[2,2] y)",
                          "y = Slice (x, st, en, ax, sp)"));
    test::checkClose(test::run(g, {x})[0], floats({2, 2}, {3, 1, 6, 4}));
  }
  SUBCASE("Slice in the opset-9 attribute form") {
    Tensor y = eval1("g (float[2,3] x) => (float[2,1] y)", "y = Slice <starts = [1], ends = [2], axes = [1]> (x)", {x}, 9);
    test::checkClose(y, floats({2, 1}, {2, 5}));
  }
  SUBCASE("Split evenly and by sizes") {
    Graph g = parse(model("g (float[2,3] x, int64[2] s = {1, 2}) => (float[2,1] a, float[2,2] b)",
                          "a, b = Split <axis = 1> (x, s)"));
    auto out = test::run(g, {x});
    test::checkClose(out[1], floats({2, 2}, {2, 3, 5, 6}));
  }
  SUBCASE("Pad reflect and edge") {
    Graph g = parse(model("g (float[1,3] x, int64[4] p = {0, 2, 0, 1}) => (float[1,6] y)",
                          "y = Pad <mode = \"reflect\"> (x, p)"));
    test::checkClose(test::run(g, {floats({1, 3}, {1, 2, 3})})[0], floats({1, 6}, {3, 2, 1, 2, 3, 2}));
    Graph e = parse(model("g (float[1,3] x, int64[4] p = {0, 2, 0, 1}) => (float[1,6] y)",
                          "y = Pad <mode = \"edge\"> (x, p)"));
    test::checkClose(test::run(e, {floats({1, 3}, {1, 2, 3})})[0], floats({1, 6}, {1, 1, 1, 2, 3, 3}));
  }
  SUBCASE("Transpose, Tile, Expand, DepthToSpace") {
    test::checkClose(eval1("g (float[2,3] x) => (float[3,2] y)", "y = Transpose (x)", {x}),
                     floats({3, 2}, {1, 4, 2, 5, 3, 6}));
    Graph t = parse(model("g (float[1,2] x, int64[2] r = {2, 2}) => (float[2,4] y)", "y = Tile (x, r)"));
    test::checkClose(test::run(t, {floats({1, 2}, {1, 2})})[0], floats({2, 4}, {1, 2, 1, 2, 1, 2, 1, 2}));
    Graph e = parse(model("g (float[2,1] x, int64[2] s = {2, 3}) => (float[2,3] y)", "y = Expand (x, s)"));
    test::checkClose(test::run(e, {floats({2, 1}, {1, 2})})[0], floats({2, 3}, {1, 1, 1, 2, 2, 2}));
    Tensor d = eval1("g (float[1,4,1,1] x) => (float[1,1,2,2] y)", "y = DepthToSpace <blocksize = 2> (x)",
                     {floats({1, 4, 1, 1}, {1, 2, 3, 4})});
    test::checkClose(d, floats({1, 1, 2, 2}, {1, 2, 3, 4}));
    Tensor s = eval1("g (float[1,1,2,2] x) => (float[1,4,1,1] y)", "y = SpaceToDepth <blocksize = 2> (x)",
                     {floats({1, 1, 2, 2}, {1, 2, 3, 4})});
    test::checkClose(s, floats({1, 4, 1, 1}, {1, 2, 3, 4}));
  }
  SUBCASE("Resize nearest doubles, linear interpolates") {
    Graph n = parse(model("g (float[1,2] x, float[2] s = {1.0, 2.0}) => (float[1,4] y)",
                          "y = Resize <mode = \"nearest\"> (x, , s)"));
    test::checkClose(test::run(n, {floats({1, 2}, {1, 2})})[0], floats({1, 4}, {1, 1, 2, 2}));
    Graph l = parse(model("g (float[1,2] x, float[2] s = {1.0, 2.0}) => (float[1,4] y)",
                          "y = Resize <mode = \"linear\"> (x, , s)"));
    test::checkClose(test::run(l, {floats({1, 2}, {1, 2})})[0], floats({1, 4}, {1, 1.25f, 1.75f, 2}));
  }
}

TEST_CASE("generators, scans and casts") {
  Graph r = parse(model("g (int64 a, int64 b, int64 c) => (int64[?] y)", "y = Range (a, b, c)"));
  CHECK(test::run(r, {Tensor::scalar<int64_t>(10), Tensor::scalar<int64_t>(4), Tensor::scalar<int64_t>(-3)})[0]
            .toInt64s() == std::vector<int64_t>{10, 7});
  Graph c = parse(model("g (int64[2] s) => (int64[?,?] y)", "y = ConstantOfShape <value = int64[1] {7}> (s)"));
  CHECK(test::run(c, {ints({2}, {2, 1})})[0].toInt64s() == std::vector<int64_t>{7, 7});
  Graph cs = parse(model("g (float[4] x, int64 a) => (float[4] y)", "y = CumSum <exclusive = 1, reverse = 1> (x, a)"));
  test::checkClose(test::run(cs, {floats({4}, {1, 2, 3, 4}), Tensor::scalar<int64_t>(0)})[0], floats({4}, {9, 7, 4, 0}));
  Tensor cast = eval1("g (float[3] x) => (int64[3] y)", "y = Cast <to = 7> (x)", {floats({3}, {-1.5f, 0.4f, 2.9f})});
  CHECK(cast.toInt64s() == std::vector<int64_t>{-1, 0, 2});
  Tensor shape = eval1("g (float[2,3,4] x) => (int64[2] y)", "y = Shape <start = -2> (x)", {Tensor(DType::Float32, {2, 3, 4})});
  CHECK(shape.toInt64s() == std::vector<int64_t>{3, 4});
}

TEST_CASE("elementwise semantics") {
  Tensor x = floats({4}, {-2, -0.5f, 0.5f, 2});
  auto unary = [&](const std::string& op) {
    return eval1("g (float[4] x) => (float[4] y)", "y = " + op + " (x)", {x}).toFloats();
  };
  CHECK(unary("Relu") == std::vector<float>{0, 0, 0.5f, 2});
  CHECK(unary("LeakyRelu <alpha = 0.1>")[0] == doctest::Approx(-0.2f));
  CHECK(unary("HardSigmoid")[3] == doctest::Approx(0.9f));
  // Published values, not the formulas again: HardSwish(2) = 2 * 5/6,
  // erf(2) and ln(1 + e^-2) to 16 digits (Abramowitz & Stegun, table 7.1).
  CHECK(unary("HardSwish")[3] == doctest::Approx(5.0 / 3.0).epsilon(1e-6));
  CHECK(unary("Erf")[3] == doctest::Approx(0.9953222650189527).epsilon(1e-6));
  CHECK(unary("Softplus")[0] == doctest::Approx(0.1269280110429725).epsilon(1e-6));
  CHECK(unary("Round") == std::vector<float>{-2, -0.f, 0, 2});  // half to even
  CHECK(unary("Clip")[0] == -2.f);
  Graph clip = parse(model("g (float[4] x, float lo = {-1.0}, float hi = {1.0}) => (float[4] y)", "y = Clip (x, lo, hi)"));
  CHECK(test::run(clip, {x})[0].toFloats() == std::vector<float>{-1, -0.5f, 0.5f, 1});
  Tensor clip6 = eval1("g (float[4] x) => (float[4] y)", "y = Clip <min = 0.0, max = 1.0> (x)", {x}, 6);
  CHECK(clip6.toFloats() == std::vector<float>{0, 0, 0.5f, 1});
  Tensor pw = eval1("g (float[4] x, int64 e) => (float[4] y)", "y = Pow (x, e)", {x, Tensor::scalar<int64_t>(2)});
  CHECK(pw.toFloats() == std::vector<float>{4, 0.25f, 0.25f, 4});
  Tensor mod = eval1("g (int64[2] a, int64[2] b) => (int64[2] y)", "y = Mod (a, b)", {ints({2}, {-7, 7}), ints({2}, {3, -3})});
  CHECK(mod.toInt64s() == std::vector<int64_t>{2, -2});  // sign of the divisor
  Graph div = parse(model("g (int64[1] a, int64[1] b) => (int64[1] y)", "y = Div (a, b)"));
  CHECK(test::runError(div, {ints({1}, {1}), ints({1}, {0})}) == "node 'Div_0' (Div): integer division by zero");
}

TEST_CASE("opset-dependent Softmax") {
  Tensor x = floats({1, 2, 2}, {0, 0, 0, 0});
  // Opset 11 flattens from axis 1: all four entries share one softmax.
  Tensor y11 = eval1("g (float[1,2,2] x) => (float[1,2,2] y)", "y = Softmax (x)", {x}, 11);
  CHECK(y11.data<float>()[0] == doctest::Approx(0.25f));
  Tensor y13 = eval1("g (float[1,2,2] x) => (float[1,2,2] y)", "y = Softmax (x)", {x}, 13);
  CHECK(y13.data<float>()[0] == doctest::Approx(0.5f));
}

TEST_CASE("graph inputs are checked against their declared types") {
  Graph g = parse(model("g (float[2,3] x) => (float[2,3] y)", "y = Relu (x)"));
  CHECK(test::runError(g, {Tensor(DType::Float32, {3, 2})}) == "input `x` must have shape float[2,3], got [3, 2]");
  CHECK(test::runError(g, {Tensor(DType::Int64, {2, 3})}) == "input `x` must be `float`, got `int64`");
  CHECK(test::runError(g, {}) == "model takes 1 inputs, got 0");
}

TEST_CASE("Lp pooling") {
  Tensor x = floats({1, 1, 2, 2}, {3, 4, 0, 0});
  Tensor g = eval1("g (float[1,1,2,2] x) => (float[1,1,1,1] y)", "y = GlobalLpPool <p = 2> (x)", {x});
  test::checkClose(g, floats({1, 1, 1, 1}, {5}));
  Tensor l = eval1("g (float[1,1,2,2] x) => (float[1,1,1,2] y)", "y = LpPool <kernel_shape = [2, 1], p = 1> (x)", {x});
  test::checkClose(l, floats({1, 1, 1, 2}, {3, 4}));
}

TEST_CASE("Constant nodes built in code evaluate") {
  // The importer folds Constant nodes; rewrites may still create them.
  Graph g;
  ValueId out = g.addValue("c");
  g.addNode("Constant", {}, {out}, {{"value_ints", std::vector<int64_t>{4, 5}}}, "k");
  g.addOutput(out);
  auto result = test::run(g, {});
  CHECK(result[0].toInt64s() == std::vector<int64_t>{4, 5});
  Graph bad;
  ValueId o2 = bad.addValue("c");
  bad.addNode("Constant", {}, {o2}, {}, "empty");
  bad.addOutput(o2);
  CHECK(test::runError(bad, {}) == "node 'empty' (Constant): has no supported value attribute");
}

TEST_CASE("ScatterND, ScatterElements and Trilu (folded when their operands are constants)") {
  SUBCASE("ScatterND replaces slices, negative indices counted from the end") {
    Tensor y = eval1("g (float[2,3] x, int64[2,1] i, float[2,3] u) => (float[2,3] y)", "y = ScatterND (x, i, u)",
                     {floats({2, 3}, {0, 0, 0, 0, 0, 0}), ints({2, 1}, {-1, 0}), floats({2, 3}, {1, 2, 3, 4, 5, 6})});
    test::checkClose(y, floats({2, 3}, {4, 5, 6, 1, 2, 3}));
  }
  SUBCASE("ScatterND of single elements with reduction add") {
    Tensor y = eval1("g (float[2,2] x, int64[3,2] i, float[3] u) => (float[2,2] y)",
                     "y = ScatterND <reduction = \"add\"> (x, i, u)",
                     {floats({2, 2}, {1, 1, 1, 1}), ints({3, 2}, {0, 1, 0, 1, 1, 0}), floats({3}, {10, 20, 30})});
    test::checkClose(y, floats({2, 2}, {1, 31, 31, 1}));
  }
  SUBCASE("ScatterND refuses an index out of range and updates of another shape") {
    Graph g = parse(model("g (float[2,3] x, int64[1,1] i, float[1,3] u) => (float[2,3] y)", "y = ScatterND (x, i, u)"));
    CHECK(test::runError(g, {floats({2, 3}, {0, 0, 0, 0, 0, 0}), ints({1, 1}, {2}), floats({1, 3}, {1, 2, 3})}) ==
          "node 'ScatterND_0' (ScatterND): index 2 is out of range for a dim of 2");
    Graph h = parse(model("g (float[2,3] x, int64[1,1] i, float[1,2] u) => (float[2,3] y)", "y = ScatterND (x, i, u)"));
    CHECK(test::runError(h, {floats({2, 3}, {0, 0, 0, 0, 0, 0}), ints({1, 1}, {0}), floats({1, 2}, {1, 2})}) ==
          "node 'ScatterND_0' (ScatterND): updates have shape [1, 2], not [1, 3]");
  }
  SUBCASE("ScatterElements along the last axis, with max") {
    Tensor y = eval1("g (float[2,3] x, int64[2,2] i, float[2,2] u) => (float[2,3] y)",
                     "y = ScatterElements <axis = -1, reduction = \"max\"> (x, i, u)",
                     {floats({2, 3}, {5, 5, 5, 5, 5, 5}), ints({2, 2}, {2, 0, 1, 1}), floats({2, 2}, {7, 3, 9, 4})});
    test::checkClose(y, floats({2, 3}, {5, 5, 7, 5, 9, 5}));
  }
  SUBCASE("Trilu keeps the upper triangle from diagonal k, or the lower one") {
    Tensor x = floats({2, 3}, {1, 2, 3, 4, 5, 6});
    test::checkClose(eval1("g (float[2,3] x, int64 k) => (float[2,3] y)", "y = Trilu (x, k)", {x, ints({}, {1})}),
                     floats({2, 3}, {0, 2, 3, 0, 0, 6}));
    test::checkClose(eval1("g (float[2,3] x) => (float[2,3] y)", "y = Trilu <upper = 0> (x)", {x}),
                     floats({2, 3}, {1, 0, 0, 4, 5, 0}));
  }
}

TEST_CASE("a NaN among the reduced elements is the max and the min, as numpy's and PyTorch's have it") {
  // Wherever the NaN sits in the row: first, middle, last; rows without one
  // keep their extreme, an infinity included.
  const Tensor x = floats({4, 3}, {NAN, 1, 2, 1, NAN, -INFINITY, 1, 2, NAN, 5, -INFINITY, 3});
  const Tensor mx = eval1("g (float[4,3] x) => (float[4,1] y)", "y = ReduceMax <axes = [1]> (x)", {x});
  const Tensor mn = eval1("g (float[4,3] x) => (float[4,1] y)", "y = ReduceMin <axes = [1]> (x)", {x});
  const Tensor gp = eval1("g (float[1,4,3] x) => (float[1,4,1] y)", "y = GlobalMaxPool (x)", {x.reshaped({1, 4, 3})});
  for (int64_t r = 0; r < 3; ++r) {
    CHECK(std::isnan(mx.data<float>()[r]));
    CHECK(std::isnan(mn.data<float>()[r]));
    CHECK(std::isnan(gp.data<float>()[r]));
  }
  CHECK(mx.data<float>()[3] == 5);
  CHECK(mn.data<float>()[3] == -INFINITY);
  CHECK(gp.data<float>()[3] == 5);
}

namespace {
std::string dimsText(const Shape& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? "," : "") + std::to_string(s[i]);
  return t + "]";
}
/// The row-major index of `at` in `shape`, each dim of size 1 read at 0
/// (numpy broadcasting, `at` right-aligned to the longer shape).
int64_t broadcastIndex(const Shape& shape, const Shape& at) {
  int64_t i = 0;
  const size_t off = at.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d) i = i * shape[d] + (shape[d] == 1 ? 0 : at[off + d]);
  return i;
}
}  // namespace

TEST_CASE("elementwise ops and Transpose over large, partly broadcast tensors match an element-by-element reference") {
  // Shapes of rank 1 to 5 with dims of 1 (broadcast), small dims and one
  // long enough that results span several of the interpreter's blocks;
  // operands drop leading dims or set dims to 1 at random.
  std::mt19937 rng(7);
  auto dim = [&](bool lng) { return lng ? int64_t(513 + rng() % 100) : int64_t(1 + rng() % 4); };
  for (int trial = 0; trial < 24; ++trial) {
    const size_t rank = 1 + rng() % 5;
    Shape out;
    for (size_t d = 0; d < rank; ++d) out.push_back(dim(d == rng() % rank));
    auto operandShape = [&] {
      Shape s(out.begin() + static_cast<int64_t>(rng() % rank), out.end());  // maybe fewer leading dims
      for (int64_t& d : s)
        if (rng() % 3 == 0) d = 1;
      return s;
    };
    const Shape a = operandShape(), b = operandShape(), c = operandShape();
    std::vector<Tensor> in;
    for (const Shape& s : {a, b, c}) {
      Tensor t(DType::Float32, s);
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 7.f;
      in.push_back(t);
    }
    // The result shape: the operands' shapes broadcast together (it may
    // have fewer dims than `out`, or 1 where all three have 1).
    const size_t r = std::max({a.size(), b.size(), c.size()});
    Shape res(r, 1);
    for (const Shape& s : {a, b, c})
      for (size_t d = 0; d < s.size(); ++d) res[r - s.size() + d] = std::max(res[r - s.size() + d], s[d]);
    CAPTURE(dimsText(a));
    CAPTURE(dimsText(b));
    CAPTURE(dimsText(c));
    Graph g = parse(model("g (float" + dimsText(a) + " a, float" + dimsText(b) + " b, float" + dimsText(c) + " c) => (float" +
                              dimsText(res) + " y, double" + dimsText(res) + " w)",
                          "p = Mul (a, b)\n y = Add (p, c)\n pd = Cast <to = 11> (p)\n cd = Cast <to = 11> (c)\n w = Sub (pd, cd)"));
    std::vector<Tensor> got = test::run(g, in);
    REQUIRE(got[0].shape() == res);
    Shape at(r, 0);
    bool same = true;
    for (int64_t i = 0; i < shapeNumel(res) && same; ++i) {
      const float x = in[0].data<float>()[broadcastIndex(a, at)], y = in[1].data<float>()[broadcastIndex(b, at)],
                  z = in[2].data<float>()[broadcastIndex(c, at)];
      const float p = static_cast<float>(double(x) * y);
      same = got[0].data<float>()[i] == static_cast<float>(double(p) + z) && got[1].data<double>()[i] == double(p) - double(z);
      for (size_t d = r; d-- > 0;)
        if (++at[d] < res[d]) break;
        else at[d] = 0;
    }
    CHECK(same);
  }
  // Transpose: every permutation of random rank-1 to rank-5 shapes, for
  // element sizes 1, 2, 4 and 8.
  for (int trial = 0; trial < 24; ++trial) {
    const size_t rank = 1 + rng() % 5;
    Shape s;
    const size_t longAxis = rng() % (rank + 1);  // one long dim at most (rank: none)
    for (size_t d = 0; d < rank; ++d) s.push_back(dim(d == longAxis));
    std::vector<int64_t> perm(rank);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    Shape ts;
    for (int64_t p : perm) ts.push_back(s[static_cast<size_t>(p)]);
    std::string permText;
    for (int64_t p : perm) permText += (permText.empty() ? "" : ", ") + std::to_string(p);
    for (const char* type : {"uint8", "float16", "int32", "int64"}) {
      CAPTURE(dimsText(s));
      CAPTURE(permText);
      CAPTURE(type);
      Graph g = parse(model(std::string("g (int64") + dimsText(s) + " x) => (" + type + dimsText(ts) + " y)",
                            "c = Cast <to = " +
                                std::to_string(std::string(type) == "uint8" ? 2 : std::string(type) == "float16" ? 10
                                                                                : std::string(type) == "int32" ? 6
                                                                                                               : 7) +
                                "> (x)\n y = Transpose <perm = [" + permText + "]> (c)"));
      Tensor x(DType::Int64, s);
      for (int64_t i = 0; i < x.numel(); ++i) x.data<int64_t>()[i] = i % 251;
      const Tensor y = test::run(g, {x}).at(0).castTo(DType::Int64);
      REQUIRE(y.shape() == ts);
      // y at index t (in the transposed shape) is x at the index whose dim
      // perm[d] is t[d].
      Shape t(rank, 0), src(rank, 0);
      const Shape xs = stridesOf(s);
      bool same = true;
      for (int64_t i = 0; i < y.numel() && same; ++i) {
        int64_t from = 0;
        for (size_t d = 0; d < rank; ++d) from += t[d] * xs[static_cast<size_t>(perm[d])];
        same = y.data<int64_t>()[i] == from % 251;
        for (size_t d = rank; d-- > 0;)
          if (++t[d] < ts[d]) break;
          else t[d] = 0;
      }
      CHECK(same);
    }
  }
}
