/// Attention as one kernel: masks, scales, blocks, and Q, K, V read through view chains.
#include <doctest/doctest.h>

#include "CodegenFixtures.h"

using namespace fusec;
using namespace fusec::codegen_test;
using codegen::canonicalProgram;

TEST_CASE("attention as one kernel matches the interpreter: masks, scales, and sizes the blocks do not divide") {
  std::unique_ptr<RuleSet> ops = test::loadShippedPack("core/ops.fuse");
  // Shapes pick every block width: keys 32 (16 at a time), 24 (8), 12 (4),
  // and counts no width divides (a partial block last);
  // query rows 8 (4 per work-item), 6 (4, the last work-item's rows past
  // the end repeated and not stored), 5 and 7 (likewise), 2, 1; head sizes 16, 20.
  struct Case {
    const char* what;
    int64_t B, H, Sq, Sk, D, Dv;
    std::string mask;  // the mask's shape, or "" for none
    bool divide;
    int where = 0;     // the mask as Where's condition: 1 keeps the score where it holds, 2 fills there
  };
  const Case cases[] = {{"BERT-like padding mask", 2, 3, 8, 32, 16, 16, "2,1,1,32", false},
                        {"a full mask per head", 1, 2, 6, 24, 20, 20, "1,2,6,24", true},
                        {"a mask per query row", 1, 2, 6, 12, 8, 4, "6,1", false},
                        {"left padding masked with -inf", 1, 2, 4, 32, 16, 16, "1,1,1,32", false},
                        {"no mask", 2, 1, 8, 16, 16, 16, "", true},
                        {"a causal mask by Where, as GPT-2 exports it", 1, 2, 8, 8, 16, 16, "1,1,8,8", true, 1},
                        {"Where filling where a per-key condition holds", 2, 1, 4, 12, 8, 8, "2,1,1,12", false, 2},
                        {"13 keys: a block of 8 and a tail of 5, masked per key", 1, 2, 4, 13, 8, 8, "1,1,1,13", false},
                        {"19 keys: a block of 16 and a tail of 3, Where per key", 1, 1, 6, 19, 8, 12, "1,1,6,19", true, 1},
                        {"3 keys: only a tail", 2, 1, 2, 3, 4, 4, "", false},
                        {"5 queries a mask per row: the last work-item repeats row 4", 1, 2, 5, 12, 8, 8, "1,2,5,12", false},
                        {"7 queries in 2 batches, Where per key", 2, 1, 7, 13, 8, 8, "2,1,1,13", true, 2},
                        {"one query", 1, 2, 1, 12, 8, 8, "", false}};
  for (const Case& c : cases) {
    INFO(c.what);
    auto dims = [](std::initializer_list<int64_t> d) {
      std::string out;
      for (int64_t x : d) out += (out.empty() ? "" : ",") + std::to_string(x);
      return out;
    };
    const std::string qs = dims({c.B, c.H, c.Sq, c.D}), ks = dims({c.B, c.H, c.D, c.Sk}), vs = dims({c.B, c.H, c.Sk, c.Dv}),
                      os = dims({c.B, c.H, c.Sq, c.Dv});
    std::string text = "<ir_version: 8, opset_import: [\"\" : 17]>\ng (float[" + qs + "] q, float[" + ks + "] kt, float[" + vs +
                       "] v" + (c.mask.empty() ? "" : std::string(c.where ? ", bool[" : ", float[") + c.mask + "] mask") +
                       ") => (float[" + os + "] o) {\n" +
                       "  sc = Constant <value = float {" + (c.divide ? "4.0" : "0.25") + "}> ()\n  s = MatMul (q, kt)\n  z = " +
                       (c.divide ? "Div" : "Mul") + " (s, sc)\n";
    if (c.where) {
      text += std::string("  fill = Constant <value = float {") + (c.where == 1 ? "-3.4e38" : "-1e9") + "}> ()\n";
      text += c.where == 1 ? "  m = Where (mask, z, fill)\n" : "  m = Where (mask, fill, z)\n";
      text += "  p = Softmax <axis = -1> (m)\n";
    } else {
      text += c.mask.empty() ? "  p = Softmax <axis = -1> (z)\n" : "  m = Add (z, mask)\n  p = Softmax <axis = -1> (m)\n";
    }
    text += "  o = MatMul (p, v)\n}\n";
    Graph g = test::parse(text);
    std::vector<Tensor> inputs;
    for (ValueId v : g.inputs())
      inputs.push_back(g.value(v).type.dtype == DType::Bool ? Tensor(DType::Bool, g.value(v).type.staticShape())
                                                              : randomTensor(g.value(v).type.staticShape(), 90 + inputs.size()));
    if (c.where == 1) {  // causal: query i sees keys 0..i
      Tensor& mask = inputs.back();
      for (int64_t i = 0; i < c.Sq; ++i)
        for (int64_t j = 0; j < c.Sk; ++j) mask.data<bool>()[i * c.Sk + j] = j <= i;
    } else if (c.where == 2) {  // every third key filled
      Tensor& mask = inputs.back();
      for (int64_t i = 0; i < mask.numel(); ++i) mask.data<bool>()[i] = i % 3 == 1;
    } else if (!c.mask.empty()) {  // masked keys, as exporters write them: a large negative number, or -inf
      Tensor& mask = inputs.back();
      const bool padding = std::string(c.what).find("-inf") != std::string::npos;
      for (int64_t i = 0; i < mask.numel(); ++i)
        if (padding ? i < 20 : i % 3 == 0) mask.data<float>()[i] = padding ? -INFINITY : -10000.0f;
    }
    const std::vector<Tensor> reference = test::run(g, inputs);
    Expected<std::vector<NodeRef>> order = g.topologicalOrder();
    REQUIRE(order.ok());
    Expected<codegen::KernelSource> k = codegen::emitAttention(g, order.value(), ops->catalog, "attn", "attn");
    REQUIRE_MESSAGE(k.ok(), test::why(k));
    INFO(k->source);
    Expected<codegen::SpirvModule> spv = codegen::compileToSpirv(k->source, k->name);
    CHECK_MESSAGE(spv.ok(), test::why(spv));
    Expected<codegen::DeviceRun> run = codegen::runOnDevice(
        device(), g, {codegen::KernelGroup(order.value(), "attn", "", "attention")}, ops->catalog, inputs);
    REQUIRE_MESSAGE(run.ok(), test::why(run));
    CHECK(run->kernelTimes.size() == 1);
    test::checkClose(run->outputs[0], reference[0], 1e-4f);
    // A CPU's form: rows of scores in private memory, 3 query rows per
    // work-item (a count most cases do not divide) and 16.
    for (int rows : {3, 16}) {
      INFO("score rows ", rows);
      codegen::KernelOptions cpu;
      cpu.attention.scoreRows = rows;
      Expected<codegen::KernelSource> form = codegen::emitAttention(g, order.value(), ops->catalog, "attn", "attn", cpu.attention);
      REQUIRE_MESSAGE(form.ok(), test::why(form));
      CHECK(form->source.find("float sc[") != std::string::npos);
      CHECK(form->globalSize == static_cast<size_t>(c.B * c.H * ((c.Sq + std::min<int64_t>(rows, c.Sq) - 1) / std::min<int64_t>(rows, c.Sq))));
      runAndCheck(g, {codegen::KernelGroup(order.value(), "attn", "", "attention")}, ops->catalog, inputs, reference, cpu, 1e-4f);
    }
  }
  // MatMul, Softmax, MatMul: Sq queries of 8 against Sk keys.
  auto bare = [](int64_t Sq, int64_t Sk) {
    const std::string q = std::to_string(Sq), k = std::to_string(Sk);
    return test::parse("<ir_version: 8, opset_import: [\"\" : 17]>\ng (float[1," + q + ",8] q, float[1,8," + k +
                       "] kt, float[1," + k + ",8] v) => (float[1," + q + ",8] o) {\n  s = MatMul (q, kt)\n"
                       "  p = Softmax <axis = -1> (s)\n  o = MatMul (p, v)\n}\n");
  };
  // Rows of scores past 16 KiB (2048 keys: fewer than 4 rows fit) keep the online form.
  {
    Graph longRows = bare(8, 2048);
    Expected<std::vector<NodeRef>> order = longRows.topologicalOrder();
    REQUIRE(order.ok());
    Expected<codegen::KernelSource> k = codegen::emitAttention(longRows, order.value(), ops->catalog, "attn", "attn", {false, 16});
    REQUIRE_MESSAGE(k.ok(), test::why(k));
    CHECK(k->source.find("float sc[") == std::string::npos);
    CHECK(k->source.find("online softmax") != std::string::npos);
  }
  // What the kernel cannot take is refused with the reason, before it runs.
  Graph odd = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1,4,8] q, float[1,8,10] kt, float[1,10,8] v) => (float[1,4,8] o, float[1,4,10] p) {
  sc = Constant <value = float {0.5}> ()
  s = MatMul (q, kt)
  z = Mul (s, sc)
  p = Softmax <axis = -1> (z)
  o = MatMul (p, v)
}
)");
  Expected<std::vector<NodeRef>> order = odd.topologicalOrder();
  REQUIRE(order.ok());
  Expected<codegen::KernelSource> refused = codegen::emitAttention(odd, order.value(), ops->catalog, "attn", "attn");
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message == "`p` is read outside the group; the attention kernel keeps it in registers");
  // An odd number of queries (ViT's 197) still takes 4 rows per work-item:
  // 5 queries, 2 work-items.
  Graph oddRows = bare(5, 12);
  order = oddRows.topologicalOrder();
  REQUIRE(order.ok());
  Expected<codegen::KernelSource> grouped = codegen::emitAttention(oddRows, order.value(), ops->catalog, "attn", "attn");
  REQUIRE_MESSAGE(grouped.ok(), test::why(grouped));
  CHECK(grouped->globalSize == 2u);
  CHECK(grouped->source.find("min(i0 + 3, 4)") != std::string::npos);
  // A scalar Where condition, one truth for every score (rank 0: `fusec
  // verify` drew it, and the kernel read the last dim of an empty shape).
  Graph scalarMask = test::parse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1,4,8] q, float[1,8,8] kt, float[1,8,8] v, bool c) => (float[1,4,8] o) {
  sc = Constant <value = float {0.5}> ()
  fill = Constant <value = float {-1e9}> ()
  s = MatMul (q, kt)
  z = Mul (s, sc)
  m = Where (c, fill, z)
  p = Softmax <axis = -1> (m)
  o = MatMul (p, v)
}
)");
  std::vector<Tensor> inputs;
  for (ValueId v : scalarMask.inputs())
    if (scalarMask.value(v).type.dtype == DType::Float32)
      inputs.push_back(randomTensor(scalarMask.value(v).type.staticShape(), 120 + inputs.size()));
  inputs.push_back(Tensor(DType::Bool, {}));  // false: every score kept
  order = scalarMask.topologicalOrder();
  REQUIRE(order.ok());
  Expected<codegen::DeviceRun> run = codegen::runOnDevice(
      device(), scalarMask, {codegen::KernelGroup(order.value(), "attn", "", "attention")}, ops->catalog, inputs);
  REQUIRE_MESSAGE(run.ok(), test::why(run));
  test::checkClose(run->outputs[0], test::run(scalarMask, inputs)[0], 1e-4f);
}

TEST_CASE("attention reads Q, K and V through view chains and writes its result through one, copying nothing") {
  std::unique_ptr<RuleSet> packs = test::loadDefaultPacks();
  Expected<Target> target = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  REQUIRE(target.ok());
  // torch's MultiheadAttention: one packed projection [S, B, 3E] sliced
  // into Q, K and V, each reshaped into heads and transposed (K to
  // [heads, D, S]: its rows along the head, the keys-as-rows scores), the
  // result transposed back and the heads merged. 5 queries (not a multiple
  // of 4), 2 heads of 8. With B = 2, merging B and the heads is not a view
  // of the packed buffer: the family refuses, and the plain attention rule
  // fuses the core alone.
  auto mha = [](int64_t B) {
    const std::string b = std::to_string(B), bh = std::to_string(2 * B), rows = std::to_string(5 * B);
    return R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[5,)" + b + R"(,48] qkv, float[)" + bh + R"(,1,5] mask) => (float[)" + rows + R"(,16] y) {
  s0 = Constant <value = int64[1] {0}> ()
  s16 = Constant <value = int64[1] {16}> ()
  s32 = Constant <value = int64[1] {32}> ()
  s48 = Constant <value = int64[1] {48}> ()
  ax = Constant <value = int64[1] {2}> ()
  heads = Constant <value = int64[3] {5, )" + bh + R"(, 8}> ()
  merged = Constant <value = int64[2] {)" + rows + R"(, 16}> ()
  scale = Constant <value = float {0.35}> ()
  q0 = Slice (qkv, s0, s16, ax)
  k0 = Slice (qkv, s16, s32, ax)
  v0 = Slice (qkv, s32, s48, ax)
  q1 = Reshape (q0, heads)
  q = Transpose <perm = [1, 0, 2]> (q1)
  k1 = Reshape (k0, heads)
  kt = Transpose <perm = [1, 2, 0]> (k1)
  v1 = Reshape (v0, heads)
  v = Transpose <perm = [1, 0, 2]> (v1)
  sc = MatMul (q, kt)
  z = Mul (sc, scale)
  m = Add (z, mask)
  p = Softmax <axis = -1> (m)
  o = MatMul (p, v)
  ot = Transpose <perm = [1, 0, 2]> (o)
  y = Reshape (ot, merged)
}
)";
  };
  // Strides no path loads as vectors: K's elements and keys both strided
  // (gathered), V's rows strided along the head, the result's too.
  const std::string strided = R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2,5,8] q, float[5,8,2] kx, float[8,5,2] vx) => (float[8,5,2] y) {
  scale = Constant <value = float {2.0}> ()
  kt = Transpose <perm = [2, 1, 0]> (kx)
  v = Transpose <perm = [2, 1, 0]> (vx)
  sc = MatMul (q, kt)
  z = Div (sc, scale)
  p = Softmax <axis = -1> (z)
  o = MatMul (p, v)
  y = Transpose <perm = [2, 1, 0]> (o)
}
)";
  struct Case {
    std::string model, rule;
    size_t members;
  };
  for (const Case& c : {Case{mha(1), "attention_views", 16}, Case{mha(2), "attention", 5},
                        Case{strided, "attention_views_unmasked", 7}}) {
    Graph g = test::parse(c.model);
    const std::vector<Tensor> inputs = randomInputs(g, 90), reference = test::run(g, inputs);
    Plan plan = planFusion(g, *packs, target.value(), codegen::kernelFamilies());
    const auto attention = std::find_if(plan.groups.begin(), plan.groups.end(),
                                        [](const Group& grp) { return grp.kernel == "attention"; });
    REQUIRE(attention != plan.groups.end());
    CHECK(attention->rule->name == c.rule);
    CHECK(attention->nodes.size() == c.members);
    checkTilings(g, plan, packs->catalog, inputs, reference, {codegen::GemmTiling{}}, 1e-5f);
    // On a CPU, keys stored as rows (through the views) are transposed
    // into each work-item's local memory (5 keys: a block of 4 and a tail;
    // two chunks of query rows per head).
    const codegen::KernelOptions cpu = codegen::KernelOptions::forTarget(target.value());
    REQUIRE(cpu.attention.ownedKeys);
    REQUIRE(cpu.attention.scoreRows > 0);
    Expected<codegen::KernelSource> owned = codegen::emitAttention(g, attention->nodes, packs->catalog, "attn", "attn", cpu.attention);
    REQUIRE_MESSAGE(owned.ok(), test::why(owned));
    CHECK((owned->source.find("__local float kl[") != std::string::npos) == (c.rule != "attention"));
    // Rows of scores where the keys are read as vectors: given transposed, or owned.
    CHECK(owned->source.find("float sc[") != std::string::npos);
    CHECK_MESSAGE(codegen::compileToSpirv(owned->source, owned->name).ok(), owned->source);
    runAndCheck(g, codegen::planGroups(plan), packs->catalog, inputs, reference, cpu, 1e-5f);
    if (c.rule == "attention_views")  // the whole block is one kernel: nothing copied before or after
      CHECK(plan.groups.size() == 1);
  }
}
