/// The code generator as a whole on the OpenCL device (PoCL here): device setup, SPIR-V, refusals with
/// reasons, tuning, schedules and buffers, specialization, pack ops, canonical programs.
#include <doctest/doctest.h>

#include "CodegenFixtures.h"

using namespace fusec;
using namespace fusec::codegen_test;
using codegen::canonicalProgram;

#ifdef __linux__
TEST_CASE("PoCL's CPU workers are pinned by default only where the process may run on every CPU and the user is silent") {
  // The runtime sets the variable as it opens a device: start from none,
  // and give the environment back as it was.
  std::map<std::string, std::optional<std::string>> saved;
  for (const char* name : {"POCL_AFFINITY", "POCL_MAX_PTHREAD_COUNT"}) {
    const char* v = std::getenv(name);
    saved[name] = v ? std::optional<std::string>(v) : std::nullopt;
    unsetenv(name);
  }
  auto affinity = [] {
    const char* v = std::getenv("POCL_AFFINITY");
    return v ? std::string(v) : std::string("(unset)");
  };
  cpu_set_t mask;
  REQUIRE(sched_getaffinity(0, sizeof mask, &mask) == 0);
  const bool everyCpu = CPU_COUNT(&mask) == sysconf(_SC_NPROCESSORS_ONLN);

  setenv("POCL_AFFINITY", "0", 1);  // the user's choice stays
  fusec::pinPoclWorkersByDefault();
  CHECK(affinity() == "0");
  unsetenv("POCL_AFFINITY");
  setenv("POCL_MAX_PTHREAD_COUNT", "1", 1);  // so does a thread count of the user's
  fusec::pinPoclWorkersByDefault();
  CHECK(affinity() == "(unset)");
  unsetenv("POCL_MAX_PTHREAD_COUNT");

  if (CPU_COUNT(&mask) > 1) {  // a mask of one CPU (as taskset -c would leave): not pinned
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int c = CPU_SETSIZE - 1; c >= 0; --c)
      if (CPU_ISSET(c, &mask)) {
        CPU_ZERO(&one);
        CPU_SET(c, &one);
      }
    REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
    fusec::pinPoclWorkersByDefault();
    CHECK(affinity() == "(unset)");
    REQUIRE(sched_setaffinity(0, sizeof mask, &mask) == 0);
  }
  fusec::pinPoclWorkersByDefault();  // this process's own mask
  CHECK(affinity() == (everyCpu ? "1" : "(unset)"));

  for (const auto& [name, value] : saved)
    if (value)
      setenv(name.c_str(), value->c_str(), 1);
    else
      unsetenv(name.c_str());
}
#endif

TEST_CASE("a fused pointwise group runs as one kernel and matches the interpreter and the unfused run") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  Graph g = test::parse(kModel);
  std::vector<Tensor> inputs = {randomTensor({4, 1}, 1), randomTensor({1, 8}, 2), randomTensor({8}, 3)};
  std::vector<Tensor> reference = test::run(g, inputs);

  Expected<codegen::DeviceRun> unfused = codegen::runOnDevice(device(), g, codegen::singleNodeGroups(g), ops->catalog, inputs);
  REQUIRE_MESSAGE(unfused.ok(), test::why(unfused));
  CHECK(unfused->kernelTimes.size() == 7);
  // Host to host spans the seven launches, run one after another.
  CHECK(unfused->hostSeconds > unfused->totalSeconds());
  Expected<std::vector<NodeRef>> order = g.topologicalOrder();
  REQUIRE(order.ok());
  Expected<codegen::DeviceRun> fused = codegen::runOnDevice(device(), g, {order.value()}, ops->catalog, inputs);
  REQUIRE_MESSAGE(fused.ok(), test::why(fused));
  CHECK(fused->kernelTimes.size() == 1);
  for (size_t i = 0; i < reference.size(); ++i) {
    test::checkClose(unfused->outputs[i], reference[i], 1e-5f);
    test::checkClose(fused->outputs[i], reference[i], 1e-5f);
  }
}

TEST_CASE("generated kernels are readable and valid SPIR-V") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  Graph g = test::parse(kModel);
  Expected<std::vector<NodeRef>> order = g.topologicalOrder();
  REQUIRE(order.ok());
  Expected<codegen::KernelSource> k = codegen::emitPointwise(g, order.value(), ops->catalog, "g0_pointwise",
                                                             "group g0 (rule elementwise_chain): Add, Relu, Exp, Neg, Mul, Clip, Sigmoid");
  REQUIRE_MESSAGE(k.ok(), test::why(k));
  CHECK(k->source.find("// group g0 (rule elementwise_chain)") == 0);
  CHECK(k->source.find("__kernel void g0_pointwise(") != std::string::npos);
  // Readable: the operands' loads name their values; then each op's
  // statement names the op and its node, in the group's order.
  size_t at = k->source.find("__kernel void g0_pointwise(");
  for (const char* line : {"// a\n", "// b\n", "// c\n", "// Add Add_0\n", "// Relu Relu_1\n", "// Exp Exp_2\n",
                           "// Neg Neg_3\n", "// Mul Mul_4\n", "// Clip Clip_5\n", "// Sigmoid Sigmoid_6\n"}) {
    const size_t next = k->source.find(line, at);
    const std::string missing = std::string(line) + " after offset " + std::to_string(at) + " in\n" + k->source;
    REQUIRE_MESSAGE(next != std::string::npos, missing);
    at = next;
  }
  CHECK(k->inputs.size() == 3);
  CHECK(k->outputs.size() == 2);  // `s` is a graph output too
  CHECK(k->globalSize == 32);
  INFO(k->source);
  Expected<codegen::SpirvModule> spv = codegen::compileToSpirv(k->source, k->name);
  REQUIRE_MESSAGE(spv.ok(), test::why(spv));
  CHECK(spv->words.size() > 5);
  CHECK(spv->words[0] == 0x07230203u);  // SPIR-V magic
  // A source that does not compile names the kernel and quotes the compiler.
  Expected<codegen::SpirvModule> bad = codegen::compileToSpirv("__kernel void broken( {", "broken");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("kernel `broken`: clang-14 cannot compile it") == 0);
}

TEST_CASE("ops no kernel family generates say so") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  Graph g = test::parse(test::model("g (float[2,5] x) => (float[2,3] v, int64[2,3] i)",
                                    "k = Constant <value = int64[1] {3}> ()\nv, i = TopK (x, k)"));
  Expected<codegen::DeviceRun> run =
      codegen::runOnDevice(device(), g, codegen::singleNodeGroups(g), ops->catalog, {randomTensor({2, 5}, 1)});
  REQUIRE_FALSE(run.ok());
  CHECK(run.error().unsupported);
  CHECK(run.error().message == "op `TopK` has no kernel path: no kernel family takes it");
  // A kernel that does not build shows the OpenCL build log and the source.
  Expected<void*> k = device().kernel("__kernel void oops(__global float* x) { x[0] = undefined_thing; }", "oops");
  REQUIRE_FALSE(k.ok());
  CHECK(k.error().message.find("kernel `oops` does not build") == 0);
  CHECK(k.error().message.find("--- source ---") != std::string::npos);
}

TEST_CASE("kernels that leave their work-group size to the runtime are spread over work-groups on CPUs") {
  // The largest divisor of the work-items at most 1/groups of them.
  CHECK(codegen::spreadLocalSize(500, 16) == 25);
  CHECK(codegen::spreadLocalSize(24640, 16) == 880);  // 1540 is above 1024
  CHECK(codegen::spreadLocalSize(128, 16) == 8);
  CHECK(codegen::spreadLocalSize(3, 16) == 1);
  CHECK(codegen::spreadLocalSize(1 << 20, 16) == 1024);  // at most 1024 work-items a group
  CHECK(codegen::spreadLocalSize(1009, 16) == 1);        // prime: 1009 groups of one
  CHECK(codegen::spreadLocalSize(100003, 16) == 0);      // prime: too many groups; the runtime chooses
  CHECK(codegen::spreadLocalSize(500, 0) == 0);
  Expected<Target> cpu = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  Expected<Target> gpu = loadTarget(grammar::defaultRulesDir() + "/vendor/nvidia/h200.toml");
  REQUIRE(cpu.ok());
  REQUIRE(gpu.ok());
  const codegen::KernelOptions options = codegen::KernelOptions::forTarget(cpu.value());
  CHECK(options.spreadGroups == 8 * cpu->computeUnits);
  CHECK(codegen::KernelOptions::forTarget(gpu.value()).spreadGroups == 0);

  // A classifier's matrix-vector product (two rows per work-item, 500
  // work-items: one work-group, so one core, when the runtime chooses),
  // and a lone MaxPool: both launched in groups, and still right.
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1,96] x, float[1000,96] w, float[1000] b, float[1,4,19,19] im) => (float[1,1000] y, float[1,4,9,9] p) {
  y = Gemm <transB = 1> (x, w, b)
  p = MaxPool <kernel_shape = [3, 3], strides = [2, 2]> (im)
}
)");
  const std::vector<codegen::KernelGroup> groups = codegen::singleNodeGroups(g);
  REQUIRE(groups.size() == 2);
  for (const codegen::KernelGroup& group : groups) {
    Expected<codegen::KernelSource> k = codegen::emitKernel(g, group.nodes, "", ops->catalog, group.name, "", options);
    REQUIRE_MESSAGE(k.ok(), test::why(k));
    INFO(k->name << ": " << k->globalSize << " work-items");
    REQUIRE(k->localSize > 0);
    CHECK(k->globalSize % k->localSize == 0);
    CHECK(k->globalSize / k->localSize >= 8);
    codegen::KernelOptions runtimeChooses = options;
    runtimeChooses.spreadGroups = 0;
    Expected<codegen::KernelSource> left = codegen::emitKernel(g, group.nodes, "", ops->catalog, group.name, "", runtimeChooses);
    REQUIRE(left.ok());
    CHECK(left->localSize == 0);
  }
  std::vector<Tensor> inputs = {randomTensor({1, 96}, 1), randomTensor({1000, 96}, 2), randomTensor({1000}, 3),
                                randomTensor({1, 4, 19, 19}, 4)};
  runAndCheck(g, groups, ops->catalog, inputs, test::run(g, inputs), options, 1e-5f);
}

TEST_CASE("kernel families refuse what they cannot build, with the reason") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  Expected<Target> target = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  REQUIRE(target.ok());
  Graph g = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[4,16] x, float[16] gamma) => (float[16,4] y, float[4,16] e) {
  e = Exp (x)
  n = LayerNormalization <axis = -1> (e, gamma)
  y = Transpose (n)
}
)");
  Expected<std::vector<NodeRef>> order = g.topologicalOrder();
  REQUIRE(order.ok());
  const std::vector<NodeRef> all = order.value();
  const KernelFamilies& families = codegen::kernelFamilies();
  auto reason = [&](const char* family, std::vector<NodeRef> group) {
    Status st = families.find(family)->canEmit(g, group, ops->catalog, target.value());
    return st ? std::string("ok") : st.error().message;
  };
  CHECK(reason("row_reduce", {all[0], all[1]}) == "ok");  // `e` is written as the row is loaded
  CHECK(reason("row_reduce", all) == "`Transpose` after the reduction has no kernel path: only elementwise ops may follow it");
  CHECK(reason("row_reduce", {all[0], all[2]}) == "it does not hold one reduction over the innermost axes");
  CHECK(reason("pointwise", {all[0], all[1]}) ==
        "it has an op that is neither elementwise nor broadcast with scalar semantics, nor data movement before them");
  CHECK(reason("index_map", {all[1], all[2]}) == "it has an op that is not data movement");
  CHECK(reason("gemm_epilogue", {all[0]}) == "it does not start with a MatMul or Gemm");
  // A target with real local memory (the row reduction's tree; where it
  // is emulated, a CPU's work-item takes the row alone, without it), too
  // little of it.
  Target tiny = target.value();
  tiny.localMemBytes = 64;
  std::erase(tiny.features, "local_mem_emulated");
  std::erase(tiny.features, "cpu");
  Status st = families.find("row_reduce")->canEmit(g, {all[0], all[1]}, ops->catalog, tiny);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message == "the kernel needs 256 bytes of local memory; the target has 64");
  // Single nodes: the first family that builds them.
  Expected<const KernelFamily*> single = families.select(g, {all[2]}, ops->catalog, target.value());
  REQUIRE(single.ok());
  CHECK(single.value()->name() == "index_map");
}

TEST_CASE("the tuner keeps the fastest tiling when it beats the default by the margin, else the default") {
  // Times worked out by hand; the default is candidate 0.
  CHECK(codegen::chooseTiling({1.0}, 0.9) == 0);
  CHECK(codegen::chooseTiling({1.0, 0.95, 1.2}, 0.9) == 0);   // 5 % faster: within the noise
  CHECK(codegen::chooseTiling({1.0, 0.8, 0.85, 0.5}, 0.9) == 3);  // the fastest, not the first below the margin
  CHECK(codegen::chooseTiling({1.0, 0.5, 0.7}, 0.9) == 1);
  CHECK(codegen::chooseTiling({2.0, 3.0, 4.0}, 0.9) == 0);    // never a slower one
  CHECK(codegen::chooseTiling({1.0, 0.89}, 0.9) == 1);
  CHECK(codegen::chooseTiling({1.0, 0.91}, 0.9) == 0);
}

TEST_CASE("tuned tilings compute what the default does, and are cached per machine in FUSEC_CACHE_DIR") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  Graph g = test::parse(test::model("g (float[1,8,12,12] x, float[16,8,3,3] w, float[4,16] a) => (float[1,16,12,12] y, float[4,144] z)",
                                    R"(
    c = Conv <pads = [1, 1, 1, 1]> (x, w)
    y = Relu (c)
    s = Constant <value = int64[2] {16, 144}> ()
    f = Reshape (y, s)
    z = MatMul (a, f)
  )"));
  std::vector<Tensor> inputs = {randomTensor({1, 8, 12, 12}, 1), randomTensor({16, 8, 3, 3}, 2), randomTensor({4, 16}, 3)};
  std::vector<Tensor> reference = test::run(g, inputs);
  std::vector<codegen::KernelGroup> groups = codegen::singleNodeGroups(g);
  codegen::KernelOptions options;
  Expected<std::vector<codegen::TunedKernel>> tuned =
      codegen::tuneKernels(device(), g, groups, ops->catalog, options, {.launches = 2, .margin = 0.9, .useCache = false, .progress = {}});
  REQUIRE_MESSAGE(tuned.ok(), test::why(tuned));
  REQUIRE(tuned->size() == 2);  // the Conv and the MatMul
  CHECK(options.gemmTilings.size() == 2);
  for (const codegen::TunedKernel& t : tuned.value()) {
    INFO(t.group);
    CHECK_FALSE(t.cached);
    const auto& c = codegen::gemmCandidates();
    CHECK(std::any_of(c.begin(), c.end(), [&](const codegen::GemmTiling& x) {
      return x.rows == t.tiling.rows && x.width == t.tiling.width && x.localRows == t.tiling.localRows && x.depth == t.tiling.depth;
    }));
  }
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), g, groups, ops->catalog, inputs, options);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  for (size_t i = 0; i < reference.size(); ++i) test::checkClose(run->outputs[i], reference[i], 1e-4f);
  // Tuned once per machine: the second time reads the cache, in the folder
  // FUSEC_CACHE_DIR names (ctest sets it inside the build tree).
  const char* cache = std::getenv("FUSEC_CACHE_DIR");
  REQUIRE_MESSAGE(cache, "ctest sets FUSEC_CACHE_DIR");
  const std::filesystem::path tuning = std::filesystem::path(cache) / "tuning";
  std::error_code ec;
  std::filesystem::remove_all(tuning, ec);
  // With a CPU target's options: the candidates and the cached tilings keep
  // its choices (panels owned by one work-item, GEMV rows per work-item),
  // only the tile changes.
  Expected<Target> cpu = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  REQUIRE(cpu.ok());
  codegen::KernelOptions first = codegen::KernelOptions::forTarget(cpu.value()), second = first;
  REQUIRE(codegen::tuneKernels(device(), g, groups, ops->catalog, first, {.launches = 1, .margin = 0.9, .useCache = true, .progress = {}}).ok());
  CHECK(std::distance(std::filesystem::directory_iterator(tuning), std::filesystem::directory_iterator()) == 2);
  Expected<std::vector<codegen::TunedKernel>> again = codegen::tuneKernels(device(), g, groups, ops->catalog, second, {.launches = 1, .margin = 0.9, .useCache = true, .progress = {}});
  REQUIRE_MESSAGE(again.ok(), test::why(again));
  for (const codegen::TunedKernel& t : again.value()) CHECK(t.cached);
  REQUIRE(second.gemmTilings.size() == first.gemmTilings.size());
  for (const auto& [node, t] : first.gemmTilings) {
    CHECK(second.gemmTilings.at(node).rows == t.rows);
    CHECK(second.gemmTilings.at(node).depth == t.depth);
    CHECK(second.gemmTilings.at(node).localRows == t.localRows);
    for (const codegen::GemmTiling* tiling : {&t, static_cast<const codegen::GemmTiling*>(&second.gemmTilings.at(node))}) {
      CHECK_FALSE(tiling->stagedPrologue);
      CHECK_FALSE(tiling->gemvSplitK);
      CHECK(tiling->shallowDepth == first.gemm.shallowDepth);
      CHECK(tiling->shallowLocalRows == 1);
    }
  }
}

TEST_CASE("a schedule views reshapes, reuses dead buffers and keeps outputs") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // a -> Relu -> Reshape (a view) -> Exp -> Neg -> Sigmoid (y); Relu's and
  // Exp's buffers die, so Neg and Sigmoid reuse them. `x` is returned as is.
  Graph g = test::parse(test::model("g (float[4,8] a, float[2] x) => (float[32] y, float[2] x2)", R"(
    r = Relu (a)
    shape = Constant <value = int64[1] {32}> ()
    f = Reshape (r, shape)
    e = Exp (f)
    n = Neg (e)
    y = Sigmoid (n)
    x2 = Identity (x)
  )"));
  Expected<codegen::Schedule> s = codegen::scheduleGraph(g, codegen::singleNodeGroups(g), ops->catalog);
  REQUIRE_MESSAGE(s.ok(), test::why(s));
  std::vector<std::string> names;
  for (const codegen::KernelSource& k : s->kernels) names.push_back(k.name);
  CHECK(names.size() == 4);  // Relu, Exp, Neg, Sigmoid: no Reshape, Constant or Identity kernel
  REQUIRE(s->arguments.size() == 4);
  CHECK(s->arguments[1][0] == s->arguments[0][1]);  // Exp reads Relu's buffer through the view
  CHECK(s->arguments[2][1] == s->arguments[0][1]);  // Neg reuses Relu's buffer, dead after Exp
  CHECK(s->arguments[3][1] == s->arguments[1][1]);  // Sigmoid reuses Exp's, dead after Neg
  CHECK(s->memory.buffers == 2);
  CHECK(s->memory.peak == 2 * 32 * 4);
  CHECK(s->memory.withoutReuse == 4 * 32 * 4);
  REQUIRE(s->inputBuffers.size() == 2);
  REQUIRE(s->outputBuffers.size() == 2);
  CHECK(s->outputBuffers[1] == *s->inputBuffers[1]);  // an output that views an input shares its buffer
  CHECK(s->buffers[*s->inputBuffers[0]].kind == codegen::ScheduledBuffer::Kind::Input);

  std::vector<Tensor> inputs = {randomTensor({4, 8}, 1), randomTensor({2}, 2)};
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), g, codegen::singleNodeGroups(g), ops->catalog, inputs);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  std::vector<Tensor> reference = test::run(g, inputs);
  test::checkClose(run->outputs[0], reference[0], 1e-5f);
  test::checkClose(run->outputs[1], inputs[1], 1e-7f);
}

TEST_CASE("a Transpose that moves only dims of size 1 is a view; one that moves others is a kernel") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // ViT's [1, S, E] -> [S, 1, E] before its packed projection; [2, 3] -> [3, 2] moves elements.
  Graph g = test::parse(test::model("g (float[1,5,4] x, float[4,3] w, float[2,3] z) => (float[5,1,3] y, float[3,2] t)", R"(
    xt = Transpose <perm = [1, 0, 2]> (x)
    y = MatMul (xt, w)
    t = Transpose (z)
  )"));
  Expected<codegen::Schedule> s = codegen::scheduleGraph(g, codegen::singleNodeGroups(g), ops->catalog);
  REQUIRE_MESSAGE(s.ok(), test::why(s));
  CHECK(s->kernels.size() == 2);  // the MatMul and the second Transpose
  const std::vector<Tensor> inputs = randomInputs(g, 150), reference = test::run(g, inputs);
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), g, codegen::singleNodeGroups(g), ops->catalog, inputs);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  for (size_t i = 0; i < reference.size(); ++i) test::checkClose(run->outputs[i], reference[i], 1e-5f);
}

TEST_CASE("a Concat's inputs are written in place by their producers where the device can start a sub-buffer there") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // p = Relu(x) and n = Relu(-x) fill the two halves of c (2 KiB each);
  // `n` is also read after c's reader, and w (as large as c) is computed in
  // between: c's slot must outlive every reader of its parts, or w takes it.
  Graph g = test::parse(test::model(
      "g (float[1,32,4,4] x) => (float[1,64,4,4] y, float[1,64,4,4] w, float[1,32,4,4] z)", R"(
    p = Relu (x)
    m = Neg (x)
    n = Relu (m)
    c = Concat <axis = 1> (p, n)
    y = Sigmoid (c)
    w = Neg (y)
    z = Add (n, x)
  )"));
  const std::vector<codegen::KernelGroup> groups = codegen::singleNodeGroups(g);
  codegen::KernelOptions inPlace;
  inPlace.subBufferAlignment = 128;
  Expected<codegen::Schedule> s = codegen::scheduleGraph(g, groups, ops->catalog, inPlace);
  REQUIRE_MESSAGE(s.ok(), test::why(s));
  std::vector<std::string> names;
  for (const codegen::KernelSource& k : s->kernels) names.push_back(k.name);
  const std::vector<std::string> launched = {"k0_Relu_0", "k1_Neg_1", "k2_Relu_2", "k4_Sigmoid_4", "k5_Neg_5", "k6_Add_6"};
  CHECK(names == launched);  // no k3_Concat_3
  REQUIRE(s->arguments.size() == 6);
  const codegen::ScheduledBuffer& p = s->buffers[s->arguments[0][1]];
  const codegen::ScheduledBuffer& n = s->buffers[s->arguments[2][1]];
  REQUIRE(p.kind == codegen::ScheduledBuffer::Kind::Part);
  REQUIRE(n.kind == codegen::ScheduledBuffer::Kind::Part);
  CHECK(p.offset == 0);
  CHECK(n.offset == 32 * 16 * 4);
  CHECK(p.bytes == 32 * 16 * 4);
  CHECK(p.parent == n.parent);
  CHECK(s->arguments[3][0] == p.parent);            // Sigmoid reads the whole of c
  CHECK(s->arguments[5][0] == s->arguments[2][1]);  // Add reads n in place
  CHECK(s->arguments[4][1] != p.parent);            // w does not take c's slot while n is to be read

  // Against values worked out by hand: y = sigmoid(max(x, 0) | max(-x, 0)),
  // w = -y, z = max(-x, 0) + x = max(x, 0).
  const Tensor x = randomTensor({1, 32, 4, 4}, 5);
  Expected<codegen::DeviceProgram> program =
      codegen::DeviceProgram::build(device(), g, groups, ops->catalog, inPlace);
  REQUIRE_MESSAGE(program.ok(), test::why(program));
  CHECK(program->kernels().size() == 6);
  Expected<codegen::DeviceRun> run = program->run({x});
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  const float* y = run->outputs[0].data<float>();
  const float* w = run->outputs[1].data<float>();
  const float* z = run->outputs[2].data<float>();
  const float* xs = x.data<float>();
  for (int i = 0; i < 512; ++i) {
    CHECK(y[i] == doctest::Approx(1 / (1 + std::exp(-std::max(xs[i], 0.0f)))).epsilon(1e-5));
    CHECK(y[512 + i] == doctest::Approx(1 / (1 + std::exp(-std::max(-xs[i], 0.0f)))).epsilon(1e-5));
    CHECK(w[i] == -y[i]);
    CHECK(z[i] == doctest::Approx(std::max(xs[i], 0.0f)).epsilon(1e-6));
  }

  // Each reason for a copy: the Concat stays a kernel.
  auto concatKernels = [&](const std::string& signature, const std::string& body, size_t alignment) {
    Graph h = test::parse(test::model(signature, body));
    codegen::KernelOptions options;
    options.subBufferAlignment = alignment;
    Expected<codegen::Schedule> hs = codegen::scheduleGraph(h, codegen::singleNodeGroups(h), ops->catalog, options);
    REQUIRE_MESSAGE(hs.ok(), test::why(hs));
    size_t concats = 0;
    for (const codegen::KernelSource& k : hs->kernels) concats += k.name.find("Concat") != std::string::npos;
    return concats;
  };
  const std::string sig = "g (float[1,32,4,4] x) => (float[1,64,4,4] c)";
  CHECK(concatKernels(sig, "p = Relu (x)\n n = Neg (x)\n c = Concat <axis = 1> (p, n)", 128) == 0);
  CHECK(concatKernels(sig, "p = Relu (x)\n n = Neg (x)\n c = Concat <axis = 1> (p, n)", 0) == 1);  // not asked
  CHECK(concatKernels(sig, "p = Relu (x)\n c = Concat <axis = 1> (p, x)", 128) == 1);  // a graph input
  CHECK(concatKernels(sig, "p = Relu (x)\n c = Concat <axis = 1> (p, p)", 128) == 1);  // the same value twice
  CHECK(concatKernels("g (float[1,32,4,4] x) => (float[1,64,4,4] c, float[1,32,4,4] p)",
                      "p = Relu (x)\n n = Neg (x)\n c = Concat <axis = 1> (p, n)", 128) == 1);  // p is read back
  CHECK(concatKernels("g (float[2,32,4,4] x) => (float[2,64,4,4] c)",
                      "p = Relu (x)\n n = Neg (x)\n c = Concat <axis = 1> (p, n)", 128) == 1);  // 2 images: interleaved
  CHECK(concatKernels("g (float[1,3,4,4] x) => (float[1,6,4,4] c)",
                      "p = Relu (x)\n n = Neg (x)\n c = Concat <axis = 1> (p, n)", 128) == 1);  // n at 192 bytes
  CHECK(concatKernels("g (float[1,3,4,4] x) => (float[1,6,4,4] c)",
                      "p = Relu (x)\n n = Neg (x)\n c = Concat <axis = 1> (p, n)", 64) == 0);
}

TEST_CASE("a Slice of one contiguous run of its operand is read in place where the device can start a sub-buffer there") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // ShuffleNet's halves: c = Relu(x) sliced into channels 0..31 and
  // 32..63 (2 KiB each); `hi` is also read after `y` is computed, and `w`
  // (as large as c) in between: c's slot must outlive every reader of its
  // slices. `mid` starts 24 channels in (1.5 KiB: no sub-buffer at 1 KiB
  // alignment) and `odd` steps by 2: both stay kernels.
  Graph g = test::parse(test::model(
      "g (float[1,64,4,4] x) => (float[1,32,4,4] y, float[1,64,4,4] w, float[1,32,4,4] z, float[1,16,4,4] mid, "
      "float[1,32,4,4] odd)",
      R"(
    c = Relu (x)
    z0 = Constant <value = int64[1] {0}> ()
    h = Constant <value = int64[1] {32}> ()
    e = Constant <value = int64[1] {64}> ()
    ax = Constant <value = int64[1] {1}> ()
    lo = Slice (c, z0, h, ax)
    hi = Slice (c, h, e, ax)
    y = Neg (lo)
    w = Neg (x)
    z = Add (hi, y)
    m0 = Constant <value = int64[1] {24}> ()
    m1 = Constant <value = int64[1] {40}> ()
    mid = Slice (c, m0, m1, ax)
    two = Constant <value = int64[1] {2}> ()
    odd = Slice (c, z0, e, ax, two)
  )"));
  const std::vector<codegen::KernelGroup> groups = codegen::singleNodeGroups(g);
  codegen::KernelOptions inPlace;
  inPlace.subBufferAlignment = 1024;
  const codegen::BufferAliases aliases = codegen::aliasBuffers(g, groups, ops->catalog, inPlace.subBufferAlignment);
  CHECK(aliases.sliceViews == 2);
  Expected<codegen::Schedule> s = codegen::scheduleGraph(g, groups, ops->catalog, inPlace);
  REQUIRE_MESSAGE(s.ok(), test::why(s));
  std::vector<std::string> names;
  for (const codegen::KernelSource& k : s->kernels) names.push_back(k.name);
  const std::vector<std::string> launched = {"k0_Relu_0", "k3_Neg_3", "k4_Neg_4", "k5_Add_5", "k6_Slice_6", "k7_Slice_7"};
  CHECK(names == launched);  // no k1_Slice_1, k2_Slice_2
  REQUIRE(s->arguments.size() == 6);
  const size_t c = s->arguments[0][1];
  const codegen::ScheduledBuffer& lo = s->buffers[s->arguments[1][0]];
  const codegen::ScheduledBuffer& hi = s->buffers[s->arguments[3][0]];
  REQUIRE(lo.kind == codegen::ScheduledBuffer::Kind::View);
  REQUIRE(hi.kind == codegen::ScheduledBuffer::Kind::View);
  CHECK(lo.parent == c);
  CHECK(hi.parent == c);
  CHECK(lo.offset == 0);
  CHECK(hi.offset == 32 * 16 * 4);
  CHECK(s->arguments[2][1] != c);  // w does not take c's slot while hi is to be read

  // Against the interpreter, bit for bit.
  const Tensor x = randomTensor({1, 64, 4, 4}, 7);
  std::vector<Tensor> reference = test::run(g, {x});
  Expected<codegen::DeviceProgram> program = codegen::DeviceProgram::build(device(), g, groups, ops->catalog, inPlace);
  REQUIRE_MESSAGE(program.ok(), test::why(program));
  CHECK(program->kernels().size() == 6);
  Expected<codegen::DeviceRun> run = program->run({x});
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  for (size_t i = 0; i < reference.size(); ++i) {
    INFO(g.value(g.outputs()[i]).name);
    CHECK(run->outputs[i] == reference[i]);
  }
  // Without sub-buffers every Slice is a kernel.
  CHECK(codegen::aliasBuffers(g, groups, ops->catalog, 0).sliceViews == 0);
}

TEST_CASE("inputs that decide shapes are fixed to one run's values, and other values are refused") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // `axes` reaches ReduceSum through an Abs; `start` and `limit` decide
  // Range's length; `x` is data and stays an input.
  Graph g = test::parse(test::model("g (float[2,3] x, int64[1] a, int64 start, int64 limit) => (float[2,1] y, int64[?] r)",
                                    R"(
    axes = Abs (a)
    y = ReduceSum (x, axes)
    one = Constant <value = int64 {1}> ()
    r = Range (start, limit, one)
  )"));
  CHECK(codegen::inputsDecidingShapes(g, test::coreCatalog()) == std::vector<size_t>{1, 2, 3});
  std::vector<Tensor> inputs = {randomTensor({2, 3}, 7), test::ints({1}, {-1}), Tensor::fromVector<int64_t>({}, {2}),
                                Tensor::fromVector<int64_t>({}, {6})};
  std::vector<Tensor> reference = test::run(g, inputs);

  Graph s = g.clone();
  Expected<std::vector<std::string>> fixed = codegen::specializeInputs(s, inputs, test::coreCatalog());
  REQUIRE_MESSAGE(fixed.ok(), test::why(fixed));
  CHECK(fixed.value() == std::vector<std::string>{"a", "start", "limit"});
  CHECK(s.value(s.outputs()[1]).type.staticShape() == Shape{4});  // Range folded to a constant
  Expected<codegen::DeviceProgram> program =
      codegen::DeviceProgram::build(device(), s, codegen::singleNodeGroups(s), ops->catalog);
  REQUIRE_MESSAGE(program.ok(), test::why(program));
  CHECK(program->kernels().size() == 1);  // the reduction; Abs and Range folded
  Expected<codegen::DeviceRun> run = program->run(inputs);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  test::checkClose(run->outputs[0], reference[0], 1e-5f);
  CHECK(run->outputs[1].scalarAt(3) == reference[1].scalarAt(3));

  inputs[1] = test::ints({1}, {0});  // another reduction axis: the kernels do not fit
  Expected<codegen::DeviceRun> other = program->run(inputs);
  REQUIRE_FALSE(other.ok());
  CHECK(other.error().message.find("input `a` was fixed") != std::string::npos);
}

TEST_CASE("an op a pack declares runs on the interpreter and on OpenCL from its semantics alone") {
  // Declared only here, as a rule author would: no C++ anywhere knows it.
  std::unique_ptr<RuleSet> pack = test::compileRules("op ScaledFma(a, b, c) broadcast { k: float = 0.5 } = k * a * b + c");
  const OpCatalog& catalog = pack->catalog;
  REQUIRE(catalog.find("ScaledFma"));
  // Built directly: ONNX's checker (rightly) knows no such op.
  Graph g;
  g.info.opsetImports[""] = 17;
  const ValueId a = g.addInput("a", TensorType::of(DType::Float32, {3, 4}));
  const ValueId b = g.addInput("b", TensorType::of(DType::Float32, {4}));
  const ValueId c = g.addInput("c", TensorType::of(DType::Float32, {3, 1}));
  const ValueId y = g.addValue("y", TensorType::of(DType::Float32, {3, 4}));
  g.addNode("ScaledFma", {a, b, c}, {y}, {{"k", 2.0f}}, "scaled_fma");
  g.addOutput(y);
  std::vector<Tensor> inputs = {randomTensor({3, 4}, 1), randomTensor({4}, 2), randomTensor({3, 1}, 3)};
  Tensor want(DType::Float32, {3, 4});
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j)
      want.data<float>()[i * 4 + j] =
          2.0f * inputs[0].data<float>()[i * 4 + j] * inputs[1].data<float>()[j] + inputs[2].data<float>()[i];
  Expected<std::vector<Tensor>> interpreted = runGraph(g, inputs, &catalog);
  REQUIRE_MESSAGE(interpreted.ok(), test::why(interpreted));
  test::checkClose(interpreted.value()[0], want, 1e-6f);
  // Without the pack's catalog the interpreter does not know the op.
  Expected<std::vector<Tensor>> unknown = runGraph(g, inputs, &test::coreCatalog());
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().message.find("`ScaledFma` is not supported") != std::string::npos);
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(device(), g, codegen::singleNodeGroups(g), catalog, inputs);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  test::checkClose(run->outputs[0], want, 1e-6f);
}

TEST_CASE("groups that compute the same thing share one program and keep their own names") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  Graph g = test::parse(test::model(
      "g (float[1,8,16,16] a, float[1,8,16,16] b, float[1,8,16,8] c) => (float[1,8,16,16] y, float[1,8,16,16] z, "
      "float[1,8,16,16] w, float[1,8,16,8] u, float[1,8,16,16] p, float[1,8,16,16] q, float[1,8,16,16] r, "
      "float[1,8,16,16] s, float[1,8,16,16] t, float[1,8,16,16] sa, float[1,8,16,16] sb, float[1,8,16,8] sc)",
      R"(
    y = LeakyRelu <alpha = 0.1> (a)
    z = LeakyRelu <alpha = 0.1> (b)
    w = LeakyRelu <alpha = 0.2> (a)
    u = LeakyRelu <alpha = 0.1> (c)
    k2 = Constant <value = float {2.0}> ()
    k4 = Constant <value = float {4.0}> ()
    k3 = Constant <value = float {3.0}> ()
    p = Div (a, k2)
    q = Div (b, k2)
    r = Div (a, k4)
    s = Mul (a, k2)
    t = Mul (a, k3)
    sa = Softmax <axis = -1> (a)
    sb = Softmax <axis = -1> (b)
    sc = Softmax <axis = -1> (c)
  )"));
  const std::vector<codegen::KernelGroup> groups = codegen::singleNodeGroups(g);
  Expected<codegen::DeviceProgram> program = codegen::DeviceProgram::build(device(), g, groups, ops->catalog);
  REQUIRE_MESSAGE(program.ok(), test::why(program));
  std::map<std::string, size_t> at;  // kernel name by the value it writes -> its index
  for (size_t i = 0; i < program->kernels().size(); ++i)
    at[g.value(program->kernels()[i].outputs[0]).name] = i;
  REQUIRE(at.size() == 12);
  // Each kernel's readable source names its own group; the programs they
  // launch are shared where the computation is the same.
  auto same = [&](const std::string& x, const std::string& y) {
    const codegen::KernelSource& kx = program->kernels()[at.at(x)];
    const codegen::KernelSource& ky = program->kernels()[at.at(y)];
    CHECK(kx.name != ky.name);
    return canonicalProgram(kx.source, kx.name).text == canonicalProgram(ky.source, ky.name).text;
  };
  CHECK(same("y", "z"));   // the same op on another input
  CHECK(!same("y", "w"));  // another attribute
  CHECK(same("y", "u"));   // another shape, which only the launch's size sees
  CHECK(same("sa", "sb"));
  CHECK(!same("sa", "sc"));  // rows of 16, rows of 8: another shape in the code
  CHECK(same("p", "q"));
  CHECK(!same("p", "r"));  // another constant folded into the code
  CHECK(same("s", "t"));   // constants read from buffers: one code, two buffers
  CHECK(program->programs() == 7);  // {y,z,u} w {p,q} r {s,t} {sa,sb} sc

  const std::vector<Tensor> inputs = randomInputs(g, 21);
  Expected<codegen::DeviceRun> run = program->run(inputs);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  std::set<std::string> timed;
  for (const auto& [name, seconds] : run->kernelTimes) timed.insert(name);
  for (const codegen::KernelSource& k : program->kernels()) CHECK(timed.count(k.name));
  CHECK(timed.size() == 12);
  const float* a = inputs[0].data<float>();
  const float* b = inputs[1].data<float>();
  const float* c = inputs[2].data<float>();
  for (int i = 0; i < 8 * 16 * 8; ++i) CHECK(run->outputs[3].data<float>()[i] == (c[i] < 0 ? 0.1f * c[i] : c[i]));
  for (int row = 0; row < 8 * 16; ++row) {  // softmax rows of b (16) and c (8), each on its own data
    float sumB = 0, sumC = 0;
    for (int j = 0; j < 16; ++j) sumB += std::exp(b[row * 16 + j]);
    for (int j = 0; j < 8; ++j) sumC += std::exp(c[row * 8 + j]);
    CHECK(run->outputs[10].data<float>()[row * 16 + 3] == doctest::Approx(std::exp(b[row * 16 + 3]) / sumB).epsilon(1e-5));
    CHECK(run->outputs[11].data<float>()[row * 8 + 3] == doctest::Approx(std::exp(c[row * 8 + 3]) / sumC).epsilon(1e-5));
  }
  // Shared programs, each launch on its own buffers.
  for (int i = 0; i < 8 * 16 * 16; ++i) {
    CHECK(run->outputs[0].data<float>()[i] == (a[i] < 0 ? 0.1f * a[i] : a[i]));
    CHECK(run->outputs[1].data<float>()[i] == (b[i] < 0 ? 0.1f * b[i] : b[i]));
    CHECK(run->outputs[4].data<float>()[i] == a[i] * 0.5f);
    CHECK(run->outputs[5].data<float>()[i] == b[i] * 0.5f);
    CHECK(run->outputs[6].data<float>()[i] == a[i] * 0.25f);
    CHECK(run->outputs[7].data<float>()[i] == a[i] * 2.0f);
    CHECK(run->outputs[8].data<float>()[i] == a[i] * 3.0f);
  }
}
