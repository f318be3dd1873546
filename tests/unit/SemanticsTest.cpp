/// The op catalog's scalar semantics agree with the reference interpreter:
/// for every elementwise and broadcast op, random inputs go through both the
/// interpreter's kernel and evaluateScalar, element by element. Both run
/// the catalog's formulas (two evaluators of one text); the formulas
/// themselves are checked against NumPy by tests/oracle/elementwise_numpy.py.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <sstream>

#include "fusec/engine/Interpreter.h"
#include "TestUtil.h"

using namespace fusec;

namespace {

/// Operands that are boolean (the rest are float).
bool boolOperand(const std::string& op, size_t i) {
  static const std::set<std::string> allBool = {"Not", "And", "Or", "Xor"};
  return allBool.count(op) || (op == "Where" && i == 0);
}

double numericAttr(const Attribute& a) {
  if (auto* i = std::get_if<int64_t>(&a)) return static_cast<double>(*i);
  if (auto* f = std::get_if<float>(&a)) return *f;
  return 0;
}

/// Operand `i` of a sample: mostly ordinary values, and every so often one
/// where formulas part ways: large magnitudes (exp overflows, Softplus
/// needs its large-x branch), tiny and subnormal ones (log1p, expm1), signed
/// zeros, infinities and NaN.
float special(int64_t i, std::mt19937& rng) {
  std::uniform_real_distribution<float> value(-2.f, 2.f), large(-300.f, 300.f);
  switch (i % 16) {
    case 3: case 11: return large(rng);
    case 5: return std::numeric_limits<float>::quiet_NaN();
    case 6: return std::numeric_limits<float>::infinity();
    case 7: return -std::numeric_limits<float>::infinity();
    case 9: return 1e-40f * value(rng);  // subnormal
    case 10: return i % 32 == 10 ? 0.0f : -0.0f;
    case 13: return 1e-6f * value(rng);
    case 14: return 1e30f * value(rng);
    default: return value(rng);
  }
}

}  // namespace

TEST_CASE("scalar semantics agree with the interpreter for every elementwise op") {
  std::unique_ptr<RuleSet> rules = test::loadShippedPack("core/ops.fuse");
  std::mt19937 rng(7);
  constexpr int64_t kN = 256;
  int checked = 0;
  for (const OpDef& op : rules->catalog.ops()) {
    if (!op.semantics) continue;
    const std::string name = op.name.str();
    INFO("op " << name);
    // Operands: every declared one (optional ones present), three for a variadic one.
    Graph g;
    std::vector<ValueId> inputs;
    std::vector<Tensor> data;
    std::vector<int> operandOf;  // param index of each graph input
    for (size_t p = 0; p < op.params.size(); ++p) {
      const size_t copies = op.params[p].variadic ? 3 : 1;
      for (size_t c = 0; c < copies; ++c) {
        const bool isBool = boolOperand(name, p);
        Tensor t(isBool ? DType::Bool : DType::Float32, {kN});
        for (int64_t i = 0; i < kN; ++i) {
          if (isBool) t.data<bool>()[i] = rng() % 2;
          else t.data<float>()[i] = special(i, rng);
        }
        // Clip's bounds are scalars.
        if (name == "Clip" && p > 0) t = Tensor::scalar(p == 1 ? -0.5f : 0.75f);
        inputs.push_back(g.addInput(op.params[p].name + std::to_string(c), TensorType::of(t.dtype(), t.shape())));
        data.push_back(t);
        operandOf.push_back(static_cast<int>(p));
      }
    }
    AttrMap attrs;
    std::vector<double> attrValues;
    for (const AttrSpec& a : op.attrs) {
      Attribute v = a.defaultValue ? *a.defaultValue : Attribute(int64_t{0});
      // Not the defaults: a formula that ignores its attribute must show.
      if (auto* f = std::get_if<float>(&v)) v = *f * 1.375f + 0.125f;
      if (name == "Cast" && a.name == "to") v = int64_t{1};  // to float
      if (name == "Mod" && a.name == "fmod") v = int64_t{1};  // required for floats
      if (a.defaultValue || a.required) attrs[a.name] = v;
      attrValues.push_back(numericAttr(v));
    }
    NodeRef n = g.addNodeWithNewOutputs(name, inputs, op.results.size(), attrs, "node");
    g.addOutput(g.node(n).outputs[0]);
    Expected<std::vector<Tensor>> out = runGraph(g, data, &rules->catalog);
    REQUIRE_MESSAGE(out.ok(), test::why(out));
    const Tensor& y = out.value()[0];
    for (int64_t i = 0; i < kN; ++i) {
      std::vector<std::vector<double>> operands(op.params.size());
      for (size_t k = 0; k < data.size(); ++k) {
        const Tensor& t = data[k];
        operands[static_cast<size_t>(operandOf[k])].push_back(t.scalarAt(t.numel() == 1 ? 0 : i));
      }
      // float results: the double value rounded to float (large values overflow).
      const double want = y.dtype() == DType::Float32 ? double(static_cast<float>(evaluateScalar(*op.semantics, operands, attrValues)))
                                                      : evaluateScalar(*op.semantics, operands, attrValues);
      const double got = y.scalarAt(i);
      INFO("element " << i << " (want " << want << ", got " << got << ")");
      if (std::isnan(want)) {
        CHECK(std::isnan(got));
      } else if (std::isinf(want)) {
        CHECK(got == want);
      } else {
        CHECK(got == doctest::Approx(want).epsilon(1e-5).scale(1.0));
      }
    }
    ++checked;
  }
  CHECK(checked >= 60);
}

TEST_CASE("absent optional operands take the semantics' default") {
  std::unique_ptr<RuleSet> rules = test::loadShippedPack("core/ops.fuse");
  const OpDef* clip = rules->catalog.find("Clip");
  REQUIRE(clip);
  REQUIRE(clip->semantics);
  // Clip(x) with no bounds is the identity; with only a lower bound, a max.
  CHECK(evaluateScalar(*clip->semantics, {{3.5}, {}, {}}, {}) == 3.5);
  CHECK(evaluateScalar(*clip->semantics, {{-3.5}, {-1.0}, {}}, {}) == -1.0);
}
