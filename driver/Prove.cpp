/// Z3 proofs of rewrite rules; see Prove.h.
#include "fusec/driver/Prove.h"

#include <fmt/format.h>

#include <z3++.h>

#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "fusec/engine/TypeInference.h"

namespace fusec::driver {
namespace {

/// A rule or op that has no encoding; the message says which part.
struct NotProvable {
  std::string why;
};

/// One choice of op per pattern node and of presence per optional operand.
struct Choice {
  std::vector<const OpDef*> ops;
  std::vector<bool> present;  ///< per binding: an optional operand is there
};

class Encoder {
 public:
  Encoder(z3::context& z, const Rule& rule, const Choice& choice) : z_(z), rule_(rule), choice_(choice) {}

  /// The pattern's and the rewrite's expression for each replaced value.
  std::vector<std::pair<z3::expr, z3::expr>> goals() {
    const Pattern& p = rule_.pattern;
    for (const PatternNode& n : p.nodes) {
      if (n.repeat != PatternNode::Repeat::Once) throw NotProvable{"a repetition in the pattern"};
      for (const PatternOperand& o : n.operands)
        if (o.kind == PatternOperand::Kind::Rest) throw NotProvable{"`...` in the pattern"};
    }
    built_.assign(rule_.rewriteValues.size(), std::nullopt);
    for (const RewriteStep& step : rule_.rewrite) {
      if (step.results.size() != 1) throw NotProvable{"a rewrite statement with several results"};
      built_[static_cast<size_t>(step.results[0])] = rewrite(step.value, &step);
    }
    std::vector<std::pair<z3::expr, z3::expr>> out;
    for (size_t i = 0; i < rule_.rewriteValues.size(); ++i) {
      const int b = rule_.rewriteValues[i].replaces;
      if (b < 0) continue;
      out.emplace_back(binding(b), *built_[i]);
    }
    return out;
  }

  /// The guard's `value(c) == k` conjuncts: `c` is the number k
  /// everywhere (so `pow(x, c)` with k = 2 is a square). Before goals().
  void assumptions(const RuleExpr& e) {
    if (e.kind == RuleExpr::Kind::Binary && e.text == "and") {
      assumptions(e.args[0]);
      assumptions(e.args[1]);
      return;
    }
    const RuleExpr* body = &e;
    if (e.kind == RuleExpr::Kind::Builtin && e.text == "all") body = &e.args[0];
    if (body->kind != RuleExpr::Kind::Binary || body->text != "==") return;
    for (int side = 0; side < 2; ++side) {
      const RuleExpr& v = body->args[static_cast<size_t>(side)];
      const RuleExpr& k = body->args[static_cast<size_t>(1 - side)];
      if (v.kind == RuleExpr::Kind::Builtin && v.text == "value" && v.args[0].kind == RuleExpr::Kind::Binding &&
          k.kind == RuleExpr::Kind::Number && !p().bindings[static_cast<size_t>(v.args[0].binding)].optional &&
          p().bindings[static_cast<size_t>(v.args[0].binding)].producer < 0)
        leaves_.insert_or_assign(v.args[0].binding, number(k.number));
    }
  }

  /// Each pattern input read as a bool is 0 or 1. After goals().
  z3::expr booleans() {
    z3::expr all = z_.bool_val(true);
    for (int b : boolLeaves_)
      if (auto it = leaves_.find(b); it != leaves_.end()) all = all && (it->second == 0 || it->second == 1);
    return all;
  }

  /// Values of the pattern's inputs in a model where the sides differ.
  std::map<std::string, double> witness(const z3::model& m) {
    std::map<std::string, double> out;
    for (const auto& [b, e] : leaves_) {
      if (e.is_numeral()) continue;  // fixed by the guard
      z3::expr v = m.eval(e, true);
      if (v.is_numeral()) out[p().bindings[static_cast<size_t>(b)].name] = std::strtod(v.get_decimal_string(17).c_str(), nullptr);
    }
    return out;
  }

 private:
  const Pattern& p() const { return rule_.pattern; }

  z3::expr number(double v) {
    if (!std::isfinite(v)) throw NotProvable{"an infinite or NaN constant"};
    return z_.real_val(std::to_string(v).c_str());
  }
  z3::expr truth(const z3::expr& c) { return z3::ite(c, z_.real_val(1), z_.real_val(0)); }
  z3::expr holds(const z3::expr& x) { return x != z_.real_val(0); }
  /// The largest integer not above x (Z3's to_int), back as a real.
  z3::expr floorOf(const z3::expr& x) { return z3::to_real(z3::expr(z_, Z3_mk_real2int(z_, x))); }

  z3::expr uninterpreted(const std::string& name, const std::vector<z3::expr>& args) {
    z3::sort_vector domain(z_);
    z3::expr_vector list(z_);
    for (const z3::expr& a : args) domain.push_back(z_.real_sort()), list.push_back(a);
    return z_.function(name.c_str(), domain, z_.real_sort())(list);
  }

  /// A function or operator of the builtin table over reals.
  z3::expr apply(const std::string& f, bool prefix, const std::vector<z3::expr>& a) {
    auto need = [&](size_t n) {
      if (a.size() < n) throw NotProvable{"`" + f + "` with too few arguments"};
    };
    if (prefix) {
      need(1);
      if (f == "-") return -a[0];
      if (f == "not") return truth(!holds(a[0]));
    }
    if (f == "+") return need(2), a[0] + a[1];
    if (f == "-") return need(2), a[0] - a[1];
    if (f == "*") return need(2), a[0] * a[1];
    if (f == "/") return need(2), a[0] / a[1];
    if (f == "<") return need(2), truth(a[0] < a[1]);
    if (f == "<=") return need(2), truth(a[0] <= a[1]);
    if (f == ">") return need(2), truth(a[0] > a[1]);
    if (f == ">=") return need(2), truth(a[0] >= a[1]);
    if (f == "==") return need(2), truth(a[0] == a[1]);
    if (f == "!=") return need(2), truth(a[0] != a[1]);
    if (f == "and") return need(2), truth(holds(a[0]) && holds(a[1]));
    if (f == "or") return need(2), truth(holds(a[0]) || holds(a[1]));
    if (f == "abs") return need(1), z3::ite(a[0] >= 0, a[0], -a[0]);
    if (f == "sign") return need(1), z3::ite(a[0] > 0, z_.real_val(1), z3::ite(a[0] < 0, z_.real_val(-1), z_.real_val(0)));
    if (f == "floor") return need(1), floorOf(a[0]);
    if (f == "ceil") return need(1), -floorOf(-a[0]);
    if (f == "trunc") return need(1), z3::ite(a[0] >= 0, floorOf(a[0]), -floorOf(-a[0]));
    if (f == "select") return need(3), z3::ite(holds(a[0]), a[1], a[2]);
    if (f == "fma") return need(3), a[0] * a[1] + a[2];
    if (f == "reciprocal") return need(1), z_.real_val(1) / a[0];
    if (f == "rsqrt") return need(1), z_.real_val(1) / uninterpreted("sqrt", {a[0]});
    if (f == "min" || f == "max") {
      need(1);
      z3::expr acc = a[0];
      for (size_t i = 1; i < a.size(); ++i)
        acc = f == "min" ? z3::ite(a[i] < acc, a[i], acc) : z3::ite(a[i] > acc, a[i], acc);
      return acc;
    }
    if (f == "sum" || f == "mean") {
      need(1);
      z3::expr acc = a[0];
      for (size_t i = 1; i < a.size(); ++i) acc = acc + a[i];
      return f == "sum" ? acc : acc / z_.real_val(static_cast<int>(a.size()));
    }
    if (f == "pow") {
      need(2);
      // Small whole exponents are products; others stay a function.
      int64_t k = 0;
      z3::expr y = a[1].simplify();
      if (y.is_numeral_i64(k) && k >= 0 && k <= 8) {
        z3::expr acc = z_.real_val(1);
        for (int64_t i = 0; i < k; ++i) acc = acc * a[0];
        return acc;
      }
      return uninterpreted("pow", a);
    }
    if (f == "isnan" || f == "isinf" || f == "round" || f == "%")
      throw NotProvable{"`" + f + "` has no meaning over the reals"};
    // exp, log, sqrt, erf, tanh, trigonometric and hyperbolic functions:
    // unknown functions, the same on both sides.
    return uninterpreted(f, a);
  }

  /// An op's scalar semantics over operand and attribute expressions.
  z3::expr semantics(const ScalarExpr& e, const std::vector<std::vector<z3::expr>>& operands,
                     const std::vector<std::optional<z3::expr>>& attrs) {
    using K = ScalarExpr::Kind;
    switch (e.kind) {
      case K::Constant: return number(e.value);
      case K::Attr:
        if (!attrs.at(e.index)) throw NotProvable{"an attribute without a value"};
        return *attrs.at(e.index);
      case K::Operand:
        if (operands.at(e.index).empty()) throw NotProvable{"an absent operand read without `??`"};
        return operands.at(e.index).front();
      case K::Default: {
        const ScalarExpr& first = e.args[0];
        const bool present = first.kind != K::Operand || !operands.at(first.index).empty();
        return semantics(present ? e.args[0] : e.args[1], operands, attrs);
      }
      case K::Unary: case K::Binary: case K::Call: break;
    }
    std::vector<z3::expr> args;
    for (const ScalarExpr& a : e.args) {
      if (a.kind == K::Operand && e.kind == K::Call && (e.op == "min" || e.op == "max" || e.op == "sum" || e.op == "mean"))
        for (const z3::expr& x : operands.at(a.index)) args.push_back(x);
      else
        args.push_back(semantics(a, operands, attrs));
    }
    return apply(e.op, e.kind == K::Unary, args);
  }

  /// The attribute values of an op node: given, else the catalog default.
  std::vector<std::optional<z3::expr>> attributes(const OpDef& op, const std::map<std::string, z3::expr>& given) {
    std::vector<std::optional<z3::expr>> out;
    for (const AttrSpec& a : op.attrs) {
      if (auto it = given.find(a.name); it != given.end()) out.push_back(it->second);
      else if (a.defaultValue && std::holds_alternative<int64_t>(*a.defaultValue))
        out.push_back(z_.real_val(static_cast<int>(std::get<int64_t>(*a.defaultValue))));
      else if (a.defaultValue && std::holds_alternative<float>(*a.defaultValue))
        out.push_back(number(std::get<float>(*a.defaultValue)));
      else
        out.push_back(std::nullopt);
    }
    return out;
  }

  const OpDef& withSemantics(const OpDef* op) {
    if (!op->semantics) throw NotProvable{"`" + op->name.str() + "` has no scalar semantics"};
    // A conversion (Cast, CastLike: a result of any type, its operand as
    // the number): the truncation or rounding to the new type is not in
    // its semantics.
    if (op->resultType == ResultType::Any && op->semantics->kind == ScalarExpr::Kind::Operand)
      throw NotProvable{"`" + op->name.str() + "` converts the element type"};
    return *op;
  }


  /// The attributes a pattern node pins or binds.
  std::map<std::string, z3::expr> nodeAttrs(size_t node) {
    if (auto it = nodeAttrs_.find(node); it != nodeAttrs_.end()) return it->second;
    std::map<std::string, z3::expr> out;
    for (const AttrConstraint& c : p().nodes[node].attrs) {
      if (c.binding >= 0) out.emplace(c.name, binding(c.binding));
      else if (c.equals && c.equals->kind == RuleExpr::Kind::Number) out.emplace(c.name, number(c.equals->number));
      else if (c.equals && c.equals->kind == RuleExpr::Kind::Unary && c.equals->args[0].kind == RuleExpr::Kind::Number)
        out.emplace(c.name, number(-c.equals->args[0].number));
      else throw NotProvable{"attribute `" + c.name + "` is not a number"};
    }
    nodeAttrs_.emplace(node, out);
    return out;
  }

  z3::expr node(size_t i) {
    if (auto it = nodes_.find(i); it != nodes_.end()) return it->second;
    const PatternNode& n = p().nodes[i];
    const OpDef& op = withSemantics(choice_.ops[i]);
    std::vector<std::vector<z3::expr>> operands(op.params.size());
    for (size_t k = 0; k < n.operands.size(); ++k) {
      const PatternOperand& o = n.operands[k];
      const size_t param = std::min(k, op.params.size() - 1);  // a variadic last parameter takes the rest
      if (o.kind == PatternOperand::Kind::Wildcard) throw NotProvable{"`_` in the pattern"};
      if (o.kind == PatternOperand::Kind::Node) operands[param].push_back(node(static_cast<size_t>(o.index)));
      else if (o.kind == PatternOperand::Kind::Binding) {
        if (p().bindings[static_cast<size_t>(o.index)].optional && !choice_.present[static_cast<size_t>(o.index)]) continue;
        operands[param].push_back(binding(o.index));
        // An operand ONNX takes as bool only (`And`, `Not`, `Where`'s
        // condition) holds 0 or 1, not any real.
        if (schemaOperandTypes(choice_.ops[i]->name.str(), k) == std::vector<DType>{DType::Bool})
          boolLeaves_.insert(o.index);
      }
    }
    z3::expr out = semantics(*op.semantics, operands, attributes(op, nodeAttrs(i)));
    nodes_.emplace(i, out);
    return out;
  }

  z3::expr binding(int b) {
    const Binding& bd = p().bindings[static_cast<size_t>(b)];
    if (bd.kind == Binding::Kind::Value && bd.producer >= 0) {
      if (bd.result != 0) throw NotProvable{"a second result of an op"};
      return node(static_cast<size_t>(bd.producer));
    }
    if (auto it = leaves_.find(b); it != leaves_.end()) return it->second;
    z3::expr v = z_.real_const(bd.name.c_str());
    leaves_.emplace(b, v);
    return v;
  }

  z3::expr rewrite(const RuleExpr& e, const RewriteStep* step) {
    switch (e.kind) {
      case RuleExpr::Kind::Number: case RuleExpr::Kind::Bool: return number(e.number);
      case RuleExpr::Kind::Binding: {
        if (e.binding < -1) {  // a value an earlier statement of the rewrite computed (`s` in `y = x * s`)
          const auto i = static_cast<size_t>(-e.binding - 2);
          if (i >= built_.size() || !built_[i]) throw NotProvable{"`" + e.text + "` is used before it is computed"};
          return *built_[i];
        }
        if (e.binding < 0) throw NotProvable{"`" + e.text + "` is not bound"};
        const std::string& name = p().bindings[static_cast<size_t>(e.binding)].name;
        if (p().bindings[static_cast<size_t>(e.binding)].optional && !choice_.present[static_cast<size_t>(e.binding)])
          throw NotProvable{"`" + name + "` is absent here"};
        return binding(e.binding);
      }
      case RuleExpr::Kind::Unary: return apply(e.text, true, {rewrite(e.args[0], nullptr)});
      case RuleExpr::Kind::Binary: {
        if (e.text == "??") {
          const int b = e.args[0].binding;
          return choice_.present[static_cast<size_t>(b)] ? binding(b) : rewrite(e.args[1], nullptr);
        }
        return apply(e.text, false, {rewrite(e.args[0], nullptr), rewrite(e.args[1], nullptr)});
      }
      case RuleExpr::Kind::Builtin: {
        if (e.text == "value" && e.args[0].kind == RuleExpr::Kind::Binding) return binding(e.args[0].binding);
        if (e.text == "unsqueeze" || e.text == "reshape" || e.text == "transpose" || e.text == "cast")
          throw NotProvable{"`" + e.text + "` moves or converts data"};
        std::vector<z3::expr> args;
        for (const RuleExpr& a : e.args) args.push_back(rewrite(a, nullptr));
        return apply(e.text, false, args);
      }
      case RuleExpr::Kind::OpCall: {
        const OpDef& op = withSemantics(e.op);
        std::vector<std::vector<z3::expr>> operands(op.params.size());
        for (size_t k = 0; k < e.args.size(); ++k) {
          const size_t param = std::min(k, op.params.size() - 1);
          operands[param].push_back(rewrite(e.args[k], nullptr));
        }
        std::map<std::string, z3::expr> given;
        if (step) {
          for (int from : step->copyAttrsFrom)
            for (auto& [name, value] : nodeAttrs(static_cast<size_t>(from))) given.insert_or_assign(name, value);
          for (const auto& [name, value] : step->attrs) given.insert_or_assign(name, rewrite(value, nullptr));
        }
        return semantics(*op.semantics, operands, attributes(op, given));
      }
      case RuleExpr::Kind::NodeAttr: {
        const Binding& bd = p().bindings[static_cast<size_t>(e.binding)];
        auto attrs = nodeAttrs(static_cast<size_t>(bd.producer));
        if (auto it = attrs.find(e.text); it != attrs.end()) return it->second;
        throw NotProvable{"attribute `" + e.text + "` is not pinned by the pattern"};
      }
      default: break;
    }
    throw NotProvable{"a rewrite expression with no scalar meaning"};
  }

  z3::context& z_;
  const Rule& rule_;
  const Choice& choice_;
  std::map<size_t, z3::expr> nodes_;
  std::map<int, z3::expr> leaves_;
  std::set<int> boolLeaves_;
  std::map<size_t, std::map<std::string, z3::expr>> nodeAttrs_;
  std::vector<std::optional<z3::expr>> built_;
};

/// Every combination of alternative ops and optional operands, or none when
/// there are more than `limit`.
std::vector<Choice> choices(const Rule& rule, size_t limit) {
  std::vector<Choice> out(1);
  out[0].present.assign(rule.pattern.bindings.size(), true);
  for (const PatternNode& n : rule.pattern.nodes) {
    std::vector<Choice> next;
    for (const Choice& c : out)
      for (const OpDef* op : n.ops) {
        Choice d = c;
        d.ops.push_back(op);
        next.push_back(std::move(d));
      }
    out = std::move(next);
    if (out.size() > limit) return {};
  }
  for (size_t b = 0; b < rule.pattern.bindings.size(); ++b) {
    if (!rule.pattern.bindings[b].optional || rule.pattern.bindings[b].kind != Binding::Kind::Value) continue;
    std::vector<Choice> next;
    for (const Choice& c : out)
      for (bool present : {true, false}) {
        Choice d = c;
        d.present[b] = present;
        next.push_back(std::move(d));
      }
    out = std::move(next);
    if (out.size() > limit) return {};
  }
  return out;
}

}  // namespace

namespace {
ProofResult notProved(std::string why) { return ProofResult{false, std::move(why), {}}; }
}  // namespace

ProofResult proveRewrite(const Rule& rule, unsigned timeoutMs) {
  if (rule.kind != Rule::Kind::Rewrite) return notProved("a fusion rule changes no value");
  constexpr size_t kMaxChoices = 256;
  const std::vector<Choice> cases = choices(rule, kMaxChoices);
  if (cases.empty()) return notProved("more than 256 combinations of alternative ops to prove");
  try {
    for (const Choice& choice : cases) {
      z3::context z;
      z3::params params(z);
      params.set("timeout", timeoutMs);
      z3::solver s(z);
      s.set(params);
      Encoder enc(z, rule, choice);
      if (rule.guard) enc.assumptions(*rule.guard);
      std::vector<std::pair<z3::expr, z3::expr>> goals = enc.goals();
      z3::expr differ = z.bool_val(false);
      for (auto& [before, after] : goals) differ = differ || before != after;
      s.add(differ);
      s.add(enc.booleans());
      switch (s.check()) {
        case z3::unsat: break;
        case z3::sat: {
          ProofResult r{false, "Z3 finds real values where the two sides differ", enc.witness(s.get_model())};
          if (!r.witness.empty()) {
            std::string values;
            for (const auto& [name, v] : r.witness) values += (values.empty() ? "" : ", ") + name + " = " + fmt::format("{:.7g}", v);
            r.detail += ": " + values;
          }
          return r;
        }
        case z3::unknown: return notProved("Z3 could not decide (" + s.reason_unknown() + ")");
      }
    }
  } catch (const NotProvable& n) {
    return notProved("no proof attempted: " + n.why);
  } catch (const z3::exception& e) {
    return notProved(std::string("no proof: Z3: ") + e.msg());
  }
  return ProofResult{true, "over the reals, for every element" + std::string(cases.size() > 1 ? ", each of " + std::to_string(cases.size()) + " cases" : ""), {}};
}

}  // namespace fusec::driver
