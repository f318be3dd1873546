/// The compiler as a library: one call takes a model through the named
/// stages, each visible to the caller.
#include <doctest/doctest.h>

#include "TestUtil.h"
#include "fusec/driver/Pipeline.h"
#include "fusec/engine/Interpreter.h"

using namespace fusec;

TEST_CASE("the pipeline runs the stages in order, and its kernels compute what the model does") {
  std::unique_ptr<RuleSet> core = test::loadDefaultPacks();
  Expected<Target> target = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  REQUIRE(target.ok());
  // A symbolic batch, a shape computed from it (folds once bound), a
  // residual Add + LayerNormalization (the core pack's row_reduce rule).
  const char* model = R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[N,16] x, float[N,16] skip, float[16] gamma) => (float[N,16] y) {
  r = Add (x, skip)
  n = LayerNormalization (r, gamma)
  s = Shape (n)
  y = Reshape (n, s)
}
)";
  std::vector<Tensor> inputs = {test::floats({2, 16}, std::vector<float>(32, 0.5f)),
                                test::floats({2, 16}, std::vector<float>(32, -0.25f)),
                                test::floats({16}, std::vector<float>(16, 2.0f))};
  for (int i = 0; i < 32; ++i) inputs[0].data<float>()[i] = static_cast<float>(i % 7) - 3;
  std::vector<std::string> seen;
  driver::PipelineOptions options;
  options.inputs = &inputs;
  options.generate = true;
  options.afterStage = [&](std::string_view stage, const Graph& g) {
    seen.push_back(std::string(stage) + ":" + std::to_string(g.numNodes()));
  };
  Expected<std::unique_ptr<driver::Compiled>> c = driver::compile(test::parse(model), *core, target.value(), options);
  REQUIRE_MESSAGE(c.ok(), test::why(c));
  const driver::Compiled& compiled = *c.value();
  // Shape folded at import once N was bound; after planning, the fused
  // Add + LayerNormalization and the Reshape (a view: no kernel).
  CHECK(seen == std::vector<std::string>{"import:3", "rewrite:3", "plan:2"});
  CHECK(compiled.foldedAtImport == 1);
  std::vector<std::string> stages;
  for (const auto& [stage, sec] : compiled.stageSeconds) stages.push_back(stage);
  CHECK(stages == std::vector<std::string>{"import", "rewrite", "plan", "codegen"});
  REQUIRE(compiled.groups.size() == 2);
  CHECK(compiled.groups[0].family == "row_reduce");
  CHECK(codegen::isViewGroup(compiled.graph, compiled.groups[1].nodes, core->catalog));
  REQUIRE(compiled.schedule.has_value());
  CHECK(compiled.schedule->kernels.size() == 1);
  // Hand-computed: each row r = x - 0.25, normalized, times 2.
  std::vector<Tensor> got = test::run(compiled.graph, inputs);
  for (int row = 0; row < 2; ++row) {
    double mean = 0, var = 0;
    for (int j = 0; j < 16; ++j) mean += (inputs[0].data<float>()[row * 16 + j] - 0.25) / 16;
    for (int j = 0; j < 16; ++j) var += std::pow(inputs[0].data<float>()[row * 16 + j] - 0.25 - mean, 2) / 16;
    for (int j = 0; j < 16; ++j)
      CHECK(got[0].data<float>()[row * 16 + j] ==
            doctest::Approx((inputs[0].data<float>()[row * 16 + j] - 0.25 - mean) / std::sqrt(var + 1e-5) * 2).epsilon(1e-5));
  }
}

TEST_CASE("the pipeline stops with the stage's error: no kernels for shapes it cannot know") {
  std::unique_ptr<RuleSet> core = test::loadDefaultPacks();
  Expected<Target> target = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  REQUIRE(target.ok());
  driver::PipelineOptions options;
  options.generate = true;
  options.staticShapesHint = "give the inputs";
  Expected<std::unique_ptr<driver::Compiled>> c = driver::compile(
      test::parse("<ir_version: 8, opset_import: [\"\" : 17]>\ng (float[N] x) => (float[N] y) {\n  y = Relu (x)\n}\n"),
      *core, target.value(), options);
  REQUIRE_FALSE(c.ok());
  CHECK(c.error().message.find("give the inputs") != std::string::npos);
}
