/// The IR's editing operations and verifier.
#include <doctest/doctest.h>

#include "TestUtil.h"
#include "fusec/engine/Graph.h"

using namespace fusec;

namespace {
TensorType f32(Shape s) { return TensorType::of(DType::Float32, s); }

/// x -> Relu -> a -> Exp -> b (graph output)
struct Chain {
  Graph g;
  ValueId x, a, b;
  NodeRef relu, exp;
  Chain() {
    x = g.addInput("x", f32({4}));
    a = g.addValue("a", f32({4}));
    b = g.addValue("b", f32({4}));
    relu = g.addNode("Relu", {x}, {a}, {}, "relu");
    exp = g.addNode("Exp", {a}, {b}, {}, "exp");
    g.addOutput(b);
  }
};
}  // namespace

TEST_CASE("symbols are interned") {
  Symbol a("Conv"), b(std::string("Co") + "nv"), c("Relu");
  CHECK(a == b);
  CHECK(&a.str() == &b.str());
  CHECK(a != c);
}

TEST_CASE("uses and producers follow edits") {
  Chain c;
  CHECK(c.g.verify().empty());
  CHECK(c.g.producer(c.a) == c.relu);
  CHECK_FALSE(c.g.producer(c.x).has_value());
  REQUIRE(c.g.uses(c.a).size() == 1);
  CHECK(c.g.uses(c.a)[0].node == c.exp);
  CHECK(c.g.consumers(c.relu) == std::vector<NodeRef>{c.exp});

  // Insert a Neg between Relu and Exp by redirecting uses.
  ValueId n = c.g.addValue("n", f32({4}));
  NodeRef neg = c.g.addNode("Neg", {c.a}, {n}, {}, "neg");
  c.g.setInput(c.exp, 0, n);
  CHECK(c.g.uses(c.a).size() == 1);
  CHECK(c.g.uses(c.a)[0].node == neg);
  CHECK(c.g.verify().empty());
  auto order = c.g.topologicalOrder();
  REQUIRE(order.ok());
  CHECK(order.value() == std::vector<NodeRef>{c.relu, neg, c.exp});
}

TEST_CASE("replaceAllUsesWith redirects graph outputs too") {
  Chain c;
  ValueId d = c.g.addValue("d", f32({4}));
  c.g.addNode("Sigmoid", {c.a}, {d}, {}, "sig");
  c.g.replaceAllUsesWith(c.b, d);
  CHECK(c.g.outputs() == std::vector<ValueId>{d});
  CHECK(c.g.uses(c.b).empty());
  c.g.removeNode(c.exp);
  CHECK_FALSE(c.g.value(c.b).alive);
  CHECK(c.g.numNodes() == 2);
  CHECK(c.g.verify().empty());
}

TEST_CASE("node refs stay valid when other nodes are removed") {
  Chain c;
  ValueId y = c.g.addValue("y", f32({4}));
  NodeRef tail = c.g.addNode("Neg", {c.b}, {y}, {}, "tail");
  c.g.replaceAllUsesWith(c.b, c.a);  // Exp result now unused
  c.g.setInput(tail, 0, c.a);
  c.g.removeNode(c.exp);
  CHECK(c.g.node(tail).name == "tail");
  CHECK(c.g.node(c.relu).name == "relu");
  CHECK(c.g.verify().empty());
}

TEST_CASE("topological order holds for nodes added out of order") {
  Graph g;
  ValueId x = g.addInput("x", f32({2}));
  ValueId a = g.addValue("a", f32({2}));
  ValueId b = g.addValue("b", f32({2}));
  NodeRef second = g.addNode("Exp", {a}, {b}, {}, "second");  // reads `a` before it is defined
  NodeRef first = g.addNode("Relu", {x}, {a}, {}, "first");
  g.addOutput(b);
  CHECK(g.verify().empty());
  auto order = g.topologicalOrder();
  REQUIRE(order.ok());
  CHECK(order.value() == std::vector<NodeRef>{first, second});
  Graph copy = g.clone();
  CHECK(copy.verify().empty());
  CHECK(exportOnnxText(copy) == exportOnnxText(g));
}

TEST_CASE("verifier reports cycles, undefined operands and bad constants") {
  SUBCASE("cycle") {
    Chain c;
    c.g.setInput(c.relu, 0, c.b);  // relu reads exp's result: a cycle
    auto problems = c.g.verify();
    REQUIRE_FALSE(problems.empty());
    CHECK(problems[0].find("cycle through node") != std::string::npos);
    CHECK_FALSE(c.g.topologicalOrder().ok());
  }
  SUBCASE("undefined operand") {
    Chain c;
    ValueId ghost = c.g.addValue("ghost", f32({4}));
    c.g.setInput(c.exp, 0, ghost);
    auto problems = c.g.verify();
    REQUIRE(problems.size() == 1);
    CHECK(problems[0] == "node 'exp' (Exp): operand 0 `ghost` is not defined by any node, input or constant");
  }
  SUBCASE("constant whose data disagrees with its type") {
    Graph g;
    ValueId k = g.addConstant("k", test::floats({2}, {1, 2}));
    g.value(k).type = f32({3});
    g.addOutput(k);
    auto problems = g.verify();
    REQUIRE(problems.size() == 1);
    CHECK(problems[0] == "constant `k` is declared float[3] but holds float[2]");
  }
  SUBCASE("mixed element types") {
    Graph g;
    ValueId x = g.addInput("x", f32({2}));
    ValueId i = g.addInput("i", TensorType::of(DType::Int64, {2}));
    ValueId y = g.addValue("y");
    g.addNode("Add", {x, i}, {y}, {}, "add");
    g.addOutput(y);
    auto problems = g.verify();
    REQUIRE(problems.size() == 1);
    CHECK(problems[0] == "node 'add' (Add): operands have different element types (`float` and `int64`)");
  }
  SUBCASE("undefined graph output") {
    Graph g;
    g.addOutput(g.addValue("nowhere"));
    auto problems = g.verify();
    REQUIRE(problems.size() == 1);
    CHECK(problems[0] == "graph output `nowhere` is not defined");
  }
}

TEST_CASE("tensor types print with symbolic dims") {
  TensorType t;
  t.dtype = DType::Float32;
  t.dims = std::vector<Dim>{Dim::named("N"), Dim::of(3), Dim{}};
  CHECK(t.str() == "float[N,3,?]");
  CHECK_FALSE(t.isStatic());
  CHECK(f32({2, 3}).isStatic());
  CHECK(f32({2, 3}).staticShape() == Shape{2, 3});
}
