/// Pooling, ConvTranspose and training-mode BatchNormalization (pool_epilogue) against the
/// interpreter.
#include <doctest/doctest.h>

#include "CodegenFixtures.h"

using namespace fusec;
using namespace fusec::codegen_test;
using codegen::canonicalProgram;

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
