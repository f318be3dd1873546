/// fusec verify's parts: symbolic proofs (what is proved, what is refused
/// and why), instance generation (every choice a pattern leaves open is
/// drawn), and the verifier's verdicts on right and wrong rules.
#include <doctest/doctest.h>

#include <set>

#include "TestUtil.h"
#include "fusec/driver/Prove.h"
#include "fusec/driver/Verify.h"
#include "fusec/engine/Instances.h"
#include "fusec/engine/Matcher.h"
#include "fusec/engine/TypeInference.h"

using namespace fusec;

namespace {

driver::ProofResult prove(const std::string& text) {
  auto set = test::compileRules(text);
  return driver::proveRewrite(set->rules.front());
}

}  // namespace

TEST_CASE("Z3 proves rewrites that hold for every real, and no others") {
  // Identities of the catalog's semantics, as the catalog states them.
  CHECK(prove("rule r { match { y = Relu(Relu(x)) } rewrite { y = Relu(x) } }").proved);
  CHECK(prove("rule r { match { y = Neg(Neg(x)) } rewrite { y = x } }").proved);
  CHECK(prove("rule r { match { m = Mul(x, a) y = Add(m, b) } rewrite { y = fma(x, a, b) } }").proved);
  // Clip with both bounds is max then min; the bounds swapped are not.
  CHECK(prove("rule r { match { y = Clip(x, lo, hi) } rewrite { y = min(max(x, lo), hi) } }").proved);
  CHECK_FALSE(prove("rule r { match { y = Clip(x, lo, hi) } rewrite { y = min(max(x, hi), lo) } }").proved);
  // An optional operand: both cases are proved, with `??` picking the default.
  driver::ProofResult optional = prove("rule r { match { y = Clip(x, lo?, hi?) } rewrite { y = min(max(x, lo ?? -100000.0), hi ?? 100000.0) } }");
  CHECK_FALSE(optional.proved);  // -inf is not -100000: the absent bound is a real difference
  // exp is unknown to Z3: proved for any function, since both sides use the same one.
  CHECK(prove("rule r { match { y = Exp(Neg(Neg(x))) } rewrite { y = exp(x) } }").proved);
  // A bias moved past the activation, a scale moved into it: not equal.
  driver::ProofResult bias = prove("rule r { match { h = Add(x, b) y = Relu(h) } rewrite { y = Relu(x) + b } }");
  CHECK_FALSE(bias.proved);
  CHECK(bias.detail.find("differ") != std::string::npos);
  // The guard's value(c) == k is a fact the proof may use.
  CHECK(prove("rule r { match { y = Pow(x, p) } where value(p) == 2.0 rewrite { y = x * x } }").proved);
  CHECK_FALSE(prove("rule r { match { y = Pow(x, p) } where const(p) rewrite { y = x * x } }").proved);
  // A bound attribute is an unknown on both sides; dropping it is wrong.
  CHECK(prove("rule r { match { y = LeakyRelu(x) { alpha: a } } rewrite { y = select(x >= 0.0, x, a * x) } }").proved);
  CHECK_FALSE(prove("rule r { match { y = LeakyRelu(x) { alpha: a } } rewrite { y = select(x >= 0.0, x, 0.01 * x) } }").proved);
}

TEST_CASE("proofs are not attempted where the reals say nothing, and say why") {
  driver::ProofResult nan = prove("rule r { match { y = IsNaN(x) } rewrite { y = x != x } }");
  CHECK_FALSE(nan.proved);
  CHECK(nan.detail == "no proof attempted: `isnan` has no meaning over the reals");
  driver::ProofResult conv = prove("rule r { match { c = Conv(x, w) y = Relu(c) } rewrite { y = Relu(Conv(x, w)) } }");
  CHECK_FALSE(conv.proved);
  CHECK(conv.detail == "no proof attempted: `Conv` has no scalar semantics");
  driver::ProofResult chain = prove("rule r { match { y = Relu+(x) } rewrite { y = Relu(x) } }");
  CHECK(chain.detail == "no proof attempted: a repetition in the pattern");
}

TEST_CASE("instances draw every choice the pattern leaves open, and the rule matches them whole") {
  auto set = test::compileRules(R"(
rule r {
  match {
    c = Conv(x, w, b?)
    m = ReduceMean(c) { axes: [-1] }
    y = Activation+(m)
  }
  rewrite { y = m }
})");
  const Rule& rule = set->rules.front();
  Matcher matcher(*set, nullptr);
  std::mt19937_64 rng(7);
  std::set<std::string> activations;
  std::set<int64_t> keepdims, chain;
  std::set<bool> bias;
  int matched = 0;
  for (int i = 0; i < 600; ++i) {
    Expected<Instance> inst = generateInstance(rule, rng);
    if (!inst) continue;
    const Graph& g = inst->graph;
    REQUIRE(g.verify().empty());
    // Shapes are consistent: ONNX's inference typed every value.
    for (NodeRef n : g.nodes())
      for (ValueId v : g.node(n).outputs) CHECK(g.value(v).type.isStatic());
    // The generated graph is the whole match.
    std::optional<Match> m = matcher.matchAt(g, inst->matched.back(), rule);
    if (!m) continue;
    ++matched;
    CHECK(m->allNodes().size() == inst->matched.size());
    int64_t length = 0;
    for (NodeRef n : inst->matched) {  // (not the readers drawn outside the pattern)
      const NodeData& d = g.node(n);
      if (d.op == "Conv") bias.insert(d.inputs.size() == 3);
      else if (d.op == "ReduceMean") keepdims.insert(d.attrInt("keepdims", 1));
      else activations.insert(d.op.str()), ++length;
    }
    chain.insert(length);
  }
  CHECK(matched >= 100);
  CHECK(bias == std::set<bool>{false, true});
  CHECK(keepdims == std::set<int64_t>{0, 1});  // left free by the pattern, so drawn
  CHECK(chain == std::set<int64_t>{1, 2, 3});
  CHECK(activations.size() >= 8);
}

TEST_CASE("the verifier proves, verifies and refutes, with a shrunk counterexample") {
  auto set = test::compileRules(R"(
rule fold_neg { match { y = Neg(Neg(x)) } rewrite { y = x } }
rule mean_of_scaled { match { m = Mul(x, s) r = ReduceMean(m) { axes: [-1], keepdims: 1 } }
                      where const(s) and numel(s) == 1 and (dtype(x) == float or dtype(x) == double)
                      rewrite { t = ReduceMean(x) { axes: [-1], keepdims: 1 }  r = t * s } }
rule scale_into_relu { match { h = Mul(x, s) y = Relu(h) } where const(s) rewrite { y = Relu(x) * s } }
)");
  Expected<Target> target = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  REQUIRE(target.ok());
  driver::VerifyOptions options;
  options.target = &target.value();
  options.instances = 30;
  std::vector<driver::RuleVerdict> v = driver::verifyRules(*set, options);
  REQUIRE(v.size() == 3);
  CHECK(v[0].kind == driver::RuleVerdict::Kind::Proved);
  CHECK(v[0].instances >= 30);  // and more until every element type and kind of data is covered thrice
  CHECK(v[1].kind == driver::RuleVerdict::Kind::Verified);
  CHECK(v[1].detail == "no proof attempted: `ReduceMean` has no scalar semantics");
  REQUIRE(v[2].kind == driver::RuleVerdict::Kind::Counterexample);
  const driver::Counterexample& c = *v[2].counterexample;
  // The counterexample fails for the reason the rule is wrong: a negative
  // scale, and it is small after shrinking.
  bool negative = false;
  for (ValueId k : c.instance.graph.constants())
    for (int64_t i = 0; i < c.instance.graph.value(k).constant->numel(); ++i)
      negative |= c.instance.graph.value(k).constant->scalarAt(i) < 0;
  CHECK(negative);
  CHECK(c.instance.size() <= 16);
  const std::string text = driver::describeCounterexample(v[2]);
  CHECK(text.find("rule `scale_into_relu`: counterexample: output") != std::string::npos);
  CHECK(text.find("Relu (") != std::string::npos);  // the graph, in ONNX text
}

TEST_CASE("a rule's tolerance clause is what the verifier allows it") {
  // erf(x) and tanh(1.2 x) differ by at most 0.0195: an approximation a
  // rule may state, and no more. (Erf takes integers too, Tanh does not:
  // floats only.)
  const std::string rule =
      "rule erf_approx { match { y = Erf(x) } where dtype(x) == float or dtype(x) == double rewrite { y = tanh(x * 1.2) } ";
  auto loose = test::compileRules(rule + "tolerance { atol = 0.02 rtol = 0 } }");
  auto strict = test::compileRules(rule + "tolerance { atol = 0.015 rtol = 0 } }");
  auto none = test::compileRules(rule + "}");
  REQUIRE(loose->rules.front().atol == doctest::Approx(0.02));
  Expected<Target> target = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  REQUIRE(target.ok());
  driver::VerifyOptions options;
  options.target = &target.value();
  options.instances = 60;
  CHECK(driver::verifyRules(*loose, options)[0].kind == driver::RuleVerdict::Kind::Verified);
  CHECK(driver::verifyRules(*strict, options)[0].kind == driver::RuleVerdict::Kind::Counterexample);
  CHECK(driver::verifyRules(*none, options)[0].kind == driver::RuleVerdict::Kind::Counterexample);
}

TEST_CASE("instance data drawn after the guard is the data drawn at once") {
  // verify draws a leaf's data only once the rule's guard accepts the draw
  // (Data::Deferred): graph inputs, and constants too large for type
  // inference to read. Same seed, same instance, same numbers either way;
  // the guard's value() constant is drawn at once.
  auto set = test::compileRules(R"(
rule r {
  match { m = Mul(x, s) y = Add(m, b) }
  where value(s) != 3.0
  rewrite { y = fma(x, s, b) }
})");
  const Rule& rule = set->rules.front();
  const InstanceLimits wide{3, 64, 1, false};  // up to 64^3 elements: constants past inference's 64 KiB
  int compared = 0, deferredInputs = 0, deferredConstants = 0;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    std::mt19937_64 a(seed), b(seed);
    Expected<Instance> now = generateInstance(rule, a, wide, Data::Drawn);
    Expected<Instance> late = generateInstance(rule, b, wide, Data::Deferred);
    REQUIRE(static_cast<bool>(now) == static_cast<bool>(late));
    CHECK(a() == b());  // the structure consumed the same draws
    if (!now) continue;
    CHECK(now->pending.empty());
    for (const Instance::PendingData& p : late->pending) {
      if (!p.constant) {
        ++deferredInputs;
        CHECK(late->inputs[p.input].byteSize() <= sizeof(double));  // no tensor until drawn
        continue;
      }
      ++deferredConstants;
      // Never the guard's value(s): the guard reads it before the data is drawn.
      for (ValueId v : late->graph.constants())
        if (late->graph.value(v).constant.get() == p.constant.get()) {
          CHECK(late->graph.value(v).name.rfind("s_", 0) != 0);
          CHECK(p.constant->byteSize() > kInferenceDataBytes);
        }
    }
    CHECK(late->size() == now->size());
    late->drawData();
    CHECK(late->pending.empty());
    REQUIRE(late->inputs.size() == now->inputs.size());
    for (size_t i = 0; i < now->inputs.size(); ++i) CHECK(late->inputs[i] == now->inputs[i]);
    const std::vector<ValueId> cn = now->graph.constants(), cl = late->graph.constants();
    REQUIRE(cn.size() == cl.size());
    for (size_t i = 0; i < cn.size(); ++i) CHECK(*late->graph.value(cl[i]).constant == *now->graph.value(cn[i]).constant);
    ++compared;
  }
  CHECK(compared >= 50);
  CHECK(deferredInputs >= 20);
  CHECK(deferredConstants >= 5);
}
