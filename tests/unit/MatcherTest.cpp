/// The matcher: each pattern feature, and the graphs where a naive matcher
/// goes wrong (diamonds that are not, values used outside a chain).
#include <doctest/doctest.h>

#include <sstream>

#include "TestUtil.h"
#include "fusec/engine/Matcher.h"
#include "fusec/grammar/PackLoader.h"

using namespace fusec;

namespace {

NodeRef node(const Graph& g, const std::string& op, int nth = 0) {
  for (NodeRef n : g.nodes())
    if (g.node(n).op == op && nth-- == 0) return n;
  FAIL("no node " << op);
  return {};
}

std::string bound(const Graph& g, const Match& m, const std::string& name) {
  int b = m.rule->pattern.findBinding(name);
  REQUIRE(b >= 0);
  ValueId v = m.values[static_cast<size_t>(b)];
  return v == kNoValue ? "<absent>" : g.value(v).name;
}

struct Fixture {
  std::unique_ptr<RuleSet> set;
  Matcher matcher;
  explicit Fixture(const std::string& text) : set(test::compileRules(text)), matcher(*set, nullptr) {}
  const Rule& rule() const { return set->rules.front(); }
};

}  // namespace

TEST_CASE("a two-node pattern binds operands, and an absent optional operand") {
  Fixture f("rule r { fuse { c = Conv(x, w, b?) y = Relu(c) } kernel conv_epilogue }");
  Graph g = test::parse(test::model("g (float[1,3,8,8] in, float[4,3,3,3] k) => (float[1,4,6,6] out)",
                                    "t = Conv (in, k)\nout = Relu (t)"));
  auto m = f.matcher.matchAt(g, node(g, "Relu"), f.rule());
  REQUIRE(m);
  CHECK(bound(g, *m, "x") == "in");
  CHECK(bound(g, *m, "w") == "k");
  CHECK(bound(g, *m, "b") == "<absent>");
  CHECK(bound(g, *m, "c") == "t");
  CHECK(m->allNodes().size() == 2);
  // Not at the Conv: the root is the Relu.
  MatchFailure why;
  CHECK_FALSE(f.matcher.matchAt(g, node(g, "Conv"), f.rule(), &why));
  CHECK(why.reason == "'Conv_0' (Conv) is not `Relu`");
  CHECK(why.where.line == 2);
}

TEST_CASE("a shared name is a diamond only when the values really are one") {
  Fixture f("rule d { fuse { a = Relu(x) b = Sigmoid(x) y = Add(a, b) } kernel pointwise }");
  Graph yes = test::parse(test::model("g (float[4] p) => (float[4] q)", "a = Relu (p)\nb = Sigmoid (p)\nq = Add (a, b)"));
  CHECK(f.matcher.matchAt(yes, node(yes, "Add"), f.rule()));
  Graph no = test::parse(test::model("g (float[4] p, float[4] r) => (float[4] q)",
                                     "a = Relu (p)\nb = Sigmoid (r)\nq = Add (a, b)"));
  MatchFailure why;
  CHECK_FALSE(f.matcher.matchAt(no, node(no, "Add"), f.rule(), &why));
  CHECK(why.reason.find("would stand for two different values") != std::string::npos);
}

TEST_CASE("commutative ops match either operand order; others do not") {
  Fixture f("rule fma { match { m = Mul(x, a) y = Add(m, b) } rewrite { y = Relu(b) } }");
  Graph g = test::parse(test::model("g (float[4] p, float[4] q, float[4] r) => (float[4] o)",
                                    "m = Mul (p, q)\no = Add (r, m)"));
  auto m = f.matcher.matchAt(g, node(g, "Add"), f.rule());
  REQUIRE(m);
  CHECK(bound(g, *m, "b") == "r");
  Fixture sub("rule s { match { m = Mul(x, a) y = Sub(m, b) } rewrite { y = Relu(b) } }");
  Graph h = test::parse(test::model("g (float[4] p, float[4] q, float[4] r) => (float[4] o)",
                                    "m = Mul (p, q)\no = Sub (r, m)"));
  CHECK_FALSE(sub.matcher.matchAt(h, node(h, "Sub"), sub.rule()));
}

TEST_CASE("a commutative pair matches `op(m, ...)` with m as either operand") {
  // ConvNeXt's layer scale: `gamma * x` after the Transpose back.
  Fixture f("rule r { fuse { m = Transpose(x) y = Elementwise+(m, ...) } kernel pointwise }");
  Graph g = test::parse(test::model("g (float[1,4,2,2] p, float[4] gamma, float[1,2,2,4] r) => (float[1,2,2,4] o)",
                                    "t = Transpose <perm = [0, 2, 3, 1]> (p)\ns = Mul (gamma, t)\no = Add (s, r)"));
  auto m = f.matcher.matchAt(g, node(g, "Add"), f.rule());
  REQUIRE(m);
  CHECK(m->allNodes().size() == 3);
  CHECK(bound(g, *m, "m") == "t");
  // Not a Sub: its operands do not commute.
  Graph h = test::parse(test::model("g (float[1,4,2,2] p, float[4] gamma) => (float[1,2,2,4] o)",
                                    "t = Transpose <perm = [0, 2, 3, 1]> (p)\no = Sub (gamma, t)"));
  CHECK_FALSE(f.matcher.matchAt(h, node(h, "Sub"), f.rule()));
}

TEST_CASE("attribute patterns compare and bind") {
  Fixture f("rule a { fuse { c = Conv(x, w) { group: 1 } y = BatchNormalization(c, s, b, m, v) { epsilon: eps } }"
            " where c.group == 1 kernel conv_epilogue }");
  const std::string sig = "g (float[1,4,8,8] in, float[4,1,3,3] k, float[4] s, float[4] b, float[4] m, float[4] v)"
                          " => (float[1,4,6,6] out)";
  Graph g1 = test::parse(test::model(sig, "t = Conv (in, k)\nout = BatchNormalization <epsilon = 0.001> (t, s, b, m, v)"));
  // `k` has 1 input channel per group: group 1 would need 4. The pattern only checks the attribute.
  auto m = f.matcher.matchAt(g1, node(g1, "BatchNormalization"), f.rule());
  REQUIRE(m);
  const int eps = f.rule().pattern.findBinding("eps");
  REQUIRE(m->attrs[static_cast<size_t>(eps)]);
  CHECK(std::get<float>(*m->attrs[static_cast<size_t>(eps)]) == doctest::Approx(0.001f));
  Graph g4 = test::parse(test::model(sig, "t = Conv <group = 4> (in, k)\nout = BatchNormalization (t, s, b, m, v)"));
  MatchFailure why;
  CHECK_FALSE(f.matcher.matchAt(g4, node(g4, "BatchNormalization"), f.rule(), &why));
  CHECK(why.reason == "attribute `group` of 'Conv_0' (Conv) does not have the value the pattern requires");
}

TEST_CASE("a repetition matches a maximal chain, stopping where a value is used elsewhere") {
  Fixture f("rule chain { fuse { y = Unary+(x) } kernel pointwise }");
  Graph g = test::parse(test::model("g (float[4] p) => (float[4] q)", "a = Relu (p)\nb = Exp (a)\nq = Neg (b)"));
  auto m = f.matcher.matchAt(g, node(g, "Neg"), f.rule());
  REQUIRE(m);
  REQUIRE(m->nodes[0].size() == 3);
  CHECK(g.node(m->nodes[0][0]).op == "Relu");
  CHECK(bound(g, *m, "x") == "p");
  Graph h = test::parse(test::model("g (float[4] p) => (float[4] q, float[4] a)", "a = Relu (p)\nb = Exp (a)\nq = Neg (b)"));
  auto n = f.matcher.matchAt(h, node(h, "Neg"), f.rule());
  REQUIRE(n);
  CHECK(n->nodes[0].size() == 2);  // `a` is a graph output: Relu stays out
  CHECK(bound(h, *n, "x") == "a");
}

TEST_CASE("a repetition of elementwise ops follows the chain through any operand, else through operands 0") {
  // GELU as exporters write it: the erf chain reaches the Mul as its second operand.
  Fixture f("rule chain { fuse { y = Elementwise+(x, ...) } kernel pointwise }");
  Graph g = test::parse(test::model("g (float[4] p, float[] s, float[] one, float[] half) => (float[4] q)",
                                    "a = Div (p, s)\nb = Erf (a)\nc = Add (b, one)\nd = Mul (p, c)\nq = Mul (d, half)"));
  auto m = f.matcher.matchAt(g, node(g, "Mul", 1), f.rule());
  REQUIRE(m);
  REQUIRE(m->nodes[0].size() == 5);
  CHECK(g.node(m->nodes[0][0]).op == "Div");
  CHECK(bound(g, *m, "x") == "p");
  // A residual Add reads the bias Add as its second operand, but nothing
  // above reads the skip: no diamond, the bias Add stays with its MatMul.
  Graph res = test::parse(test::model("g (float[4,8] a, float[8,8] w, float[8] b, float[4,8] skip) => (float[4,8] q)",
                                      "m = MatMul (a, w)\nc = Add (m, b)\nq = Add (skip, c)"));
  auto r = f.matcher.matchAt(res, node(res, "Add", 1), f.rule());
  REQUIRE(r);
  CHECK(r->allNodes().size() == 1);
  CHECK(bound(res, *r, "x") == "skip");
  // The longer chain's first node (the Neg) does not read the Conv the
  // pattern needs; the chain through operands 0 (the Add) does.
  Fixture epi("rule e { fuse { c = Conv(x, w) y = Elementwise+(c, ...) } kernel conv_epilogue }");
  Graph h = test::parse(test::model("g (float[1,1,3,3] in, float[1,1,1,1] k, float[1,1,3,3] r) => (float[1,1,3,3] out)",
                                    "t = Conv (in, k)\nn = Neg (r)\nout = Add (t, n)"));
  auto e = epi.matcher.matchAt(h, node(h, "Add"), epi.rule());
  REQUIRE(e);
  CHECK(e->allNodes().size() == 2);
  CHECK(bound(h, *e, "c") == "t");
}

TEST_CASE("an empty repetition binds its result to its operand") {
  Fixture f("rule z { fuse { c = Conv(x, w) e = Unary*(c) y = Relu(e) } kernel conv_epilogue }");
  Graph direct = test::parse(test::model("g (float[1,1,3,3] in, float[1,1,1,1] k) => (float[1,1,3,3] out)",
                                         "t = Conv (in, k)\nout = Relu (t)"));
  auto m = f.matcher.matchAt(direct, node(direct, "Relu"), f.rule());
  REQUIRE(m);
  CHECK(bound(direct, *m, "e") == "t");
  Graph via = test::parse(test::model("g (float[1,1,3,3] in, float[1,1,1,1] k) => (float[1,1,3,3] out)",
                                      "t = Conv (in, k)\nu = Neg (t)\nv = Abs (u)\nout = Relu (v)"));
  auto n = f.matcher.matchAt(via, node(via, "Relu"), f.rule());
  REQUIRE(n);
  CHECK(n->allNodes().size() == 4);
}

TEST_CASE("a pattern ending in an empty repetition matches at the op before it") {
  // ShuffleNet's branch: 1x1 conv, ReLU, depthwise conv, and no activation after it.
  Fixture f("rule t { fuse { p = Conv(x, w) a = Relu(p) d = Conv(a, wd) y = Unary*(d) } kernel conv_epilogue }");
  CHECK(f.matcher.rulesFor("Conv").size() == 1);  // the root may be empty: its operand's op starts a match too
  CHECK(f.matcher.rulesFor("Relu").size() == 1);
  Graph bare = test::parse(test::model("g (float[1,2,3,3] in, float[2,2,1,1] k, float[2,1,1,1] kd) => (float[1,2,3,3] out)",
                                       "t = Conv (in, k)\nr = Relu (t)\nout = Conv <group = 2> (r, kd)"));
  auto m = f.matcher.matchAt(bare, node(bare, "Conv", 1), f.rule());
  REQUIRE(m);
  CHECK(m->allNodes().size() == 3);
  CHECK(bound(bare, *m, "y") == "out");
  CHECK(bound(bare, *m, "d") == "out");
  CHECK_FALSE(f.matcher.matchAt(bare, node(bare, "Conv", 0), f.rule()));  // the first conv gives no `d`
  // With an activation after it, the match at the activation holds it.
  Graph act = test::parse(test::model("g (float[1,2,3,3] in, float[2,2,1,1] k, float[2,1,1,1] kd) => (float[1,2,3,3] out)",
                                      "t = Conv (in, k)\nr = Relu (t)\nd = Conv <group = 2> (r, kd)\nout = Neg (d)"));
  auto n = f.matcher.matchAt(act, node(act, "Neg"), f.rule());
  REQUIRE(n);
  CHECK(n->allNodes().size() == 4);
  // The repetition's operand written inline: the op it names is matched.
  Fixture inl("rule i { fuse { y = Unary*(Conv(x, w)) } kernel conv_epilogue }");
  Graph one = test::parse(test::model("g (float[1,1,3,3] in, float[1,1,1,1] k) => (float[1,1,3,3] out)", "out = Conv (in, k)"));
  auto o = inl.matcher.matchAt(one, node(one, "Conv"), inl.rule());
  REQUIRE(o);
  CHECK(o->allNodes().size() == 1);
  CHECK(bound(one, *o, "x") == "in");
}

TEST_CASE("sibling roots are found among the consumers of a shared input") {
  Fixture f("rule qkv { fuse { q = MatMul(x, wq) k = MatMul(x, wk) v = MatMul(x, wv) } where const(wq, wk, wv)"
            " kernel gemm_horizontal }");
  Graph g = test::parse(test::model(
      "g (float[2,4] x, float[4,4] a = {1,0,0,0, 0,1,0,0, 0,0,1,0, 0,0,0,1}, float[4,4] b = {1,0,0,0, 0,1,0,0, 0,0,1,0, 0,0,0,1},"
      " float[4,4] c = {1,0,0,0, 0,1,0,0, 0,0,1,0, 0,0,0,1}) => (float[2,4] p, float[2,4] q, float[2,4] r)",
      "p = MatMul (x, a)\nq = MatMul (x, b)\nr = MatMul (x, c)"));
  auto m = f.matcher.matchAt(g, node(g, "MatMul", 0), f.rule());
  REQUIRE(m);
  CHECK(m->allNodes().size() == 3);
  CHECK(bound(g, *m, "wk") != bound(g, *m, "wq"));
  CHECK(f.matcher.rulesFor("MatMul").size() == 1);
  CHECK(f.matcher.rulesFor("Relu").empty());
}

TEST_CASE("guards decide last, and say so") {
  Fixture f("rule g { fuse { c = Conv(x, w) y = Relu(c) } where uses(c) == 1 and rank(x) == 4 kernel conv_epilogue }");
  Graph g = test::parse(test::model("g (float[1,1,3,3] in, float[1,1,1,1] k) => (float[1,1,3,3] out, float[1,1,3,3] t)",
                                    "t = Conv (in, k)\nout = Relu (t)"));
  MatchFailure why;
  CHECK_FALSE(f.matcher.matchAt(g, node(g, "Relu"), f.rule(), &why));
  CHECK(why.reason == "the guard is false: `uses(c) == 1` is false (uses(c) = 2)");
  CHECK(why.where.line == 2);
}

TEST_CASE("guards read shapes, element types, constants and the target") {
  Fixture f("rule t { fuse { y = Softmax(x) } where dtype(x) == float and shape(x)[rank(x) - 1] * 4 <= target.local_mem_bytes"
            " and numel(x) == 32 and not const(x) kernel row_reduce }");
  Graph g = test::parse(test::model("g (float[4,8] x) => (float[4,8] y)", "y = Softmax (x)"));
  Target small;
  small.localMemBytes = 16;
  Target big;
  big.localMemBytes = 1 << 20;
  CHECK_FALSE(Matcher(*f.set, &small).matchAt(g, node(g, "Softmax"), f.rule()));
  CHECK(Matcher(*f.set, &big).matchAt(g, node(g, "Softmax"), f.rule()));
  CHECK_FALSE(Matcher(*f.set, nullptr).matchAt(g, node(g, "Softmax"), f.rule()));  // no target: unknown, so no
}

TEST_CASE("guards read what constants hold: value, all and any") {
  Fixture one("rule r { match { y = Pow(x, p) } where value(p) == 2.0 rewrite { y = x * x } }");
  Fixture every("rule r { match { y = Mul(x, s) } where all(value(s) == 1.0) rewrite { y = x } }");
  Fixture some("rule r { match { y = Mul(x, s) } where any(value(s) < 0.0) rewrite { y = x } }");
  auto mul = [](const std::string& s) {
    return test::parse(test::model("g (float[3] x, float[3] s = {" + s + "}) => (float[3] y)", "y = Mul (x, s)"));
  };
  auto pow = [](const std::string& sig) {
    return test::parse(test::model("g (float[3] x, " + sig + ") => (float[3] y)", "y = Pow (x, p)"));
  };
  // value(): the one element of a constant, whatever its rank.
  Graph two = pow("float[1] p = {2.0}");
  CHECK(one.matcher.matchAt(two, node(two, "Pow"), one.rule()));
  Graph three = pow("float p = {3.0}");
  MatchFailure why;
  CHECK_FALSE(one.matcher.matchAt(three, node(three, "Pow"), one.rule(), &why));
  CHECK(why.reason == "the guard is false: `value(p) == 2` is false (value(p) = 3)");
  // Several elements, or no constant at all: value() has no answer, and the
  // guard cannot hold.
  Graph many = pow("float[2] p = {2.0, 2.0}");
  CHECK_FALSE(one.matcher.matchAt(many, node(many, "Pow"), one.rule(), &why));
  CHECK(why.reason == "the guard cannot be evaluated (a shape, or what a constant holds, is not known): "
                      "`value(p) == 2` is unknown (value(p) = unknown)");
  Graph input = pow("float p");
  CHECK_FALSE(one.matcher.matchAt(input, node(input, "Pow"), one.rule()));
  // all() and any(): every element, or one of them.
  Graph ones = mul("1.0, 1.0, 1.0"), mixed = mul("1.0, -2.0, 1.0"), last = mul("1.0, 1.0, -0.5");
  CHECK(every.matcher.matchAt(ones, node(ones, "Mul"), every.rule()));
  CHECK_FALSE(every.matcher.matchAt(mixed, node(mixed, "Mul"), every.rule()));
  CHECK_FALSE(every.matcher.matchAt(last, node(last, "Mul"), every.rule()));
  CHECK_FALSE(some.matcher.matchAt(ones, node(ones, "Mul"), some.rule()));
  CHECK(some.matcher.matchAt(mixed, node(mixed, "Mul"), some.rule()));
  CHECK(some.matcher.matchAt(last, node(last, "Mul"), some.rule()));
}
