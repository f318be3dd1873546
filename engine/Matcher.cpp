/// The matcher: backtracking over the compiled pattern, with continuations so
/// that a choice made early (operand order of a commutative op, which
/// consumer is a sibling root) is undone when something later fails.
#include "fusec/engine/Matcher.h"

#include <fmt/format.h>

#include "fusec/engine/Builtins.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

namespace fusec {
namespace {

struct State {
  std::vector<std::vector<NodeRef>> nodes;  // per pattern node; empty = not matched yet
  std::vector<bool> matched;                // per pattern node
  std::vector<ValueId> values;
  std::vector<bool> bound;
  std::vector<std::optional<Attribute>> attrs;
  std::vector<NodeRef> used;  // graph nodes in the match so far (patterns are small)
  bool uses(NodeRef n) const { return std::find(used.begin(), used.end(), n) != used.end(); }
};

using Cont = std::function<bool(State&)>;

/// An evaluated guard value.
struct Val {
  enum class Kind { Num, Str, List, DType, Tensor, Unknown } kind = Kind::Unknown;
  double num = 0;
  std::string str;
  std::vector<double> list;
  ValueId value = kNoValue;
};

Val fromAttribute(const Attribute& a) {
  Val v;
  if (auto* i = std::get_if<int64_t>(&a)) { v.kind = Val::Kind::Num; v.num = static_cast<double>(*i); }
  else if (auto* f = std::get_if<float>(&a)) { v.kind = Val::Kind::Num; v.num = *f; }
  else if (auto* s = std::get_if<std::string>(&a)) { v.kind = Val::Kind::Str; v.str = *s; }
  else if (auto* l = std::get_if<std::vector<int64_t>>(&a)) {
    v.kind = Val::Kind::List;
    for (int64_t x : *l) v.list.push_back(static_cast<double>(x));
  } else if (auto* l = std::get_if<std::vector<float>>(&a)) {
    v.kind = Val::Kind::List;
    v.list.assign(l->begin(), l->end());
  }
  return v;
}

/// An attribute of a node, or the catalog default when it is absent.
std::optional<Attribute> nodeAttr(const NodeData& d, const OpDef* op, const std::string& name) {
  if (const Attribute* a = d.attr(name)) return *a;
  if (op)
    if (const AttrSpec* spec = op->findAttr(name); spec && spec->defaultValue) return spec->defaultValue;
  return std::nullopt;
}

bool sameAttr(const Attribute& a, const Attribute& b) {
  Val x = fromAttribute(a), y = fromAttribute(b);
  if (x.kind != y.kind) return false;
  return x.kind == Val::Kind::Num ? x.num == y.num : x.kind == Val::Kind::Str ? x.str == y.str : x.list == y.list;
}

class Search {
 public:
  Search(const Graph& g, const Rule& rule, const Matcher& matcher) : g_(g), rule_(rule), matcher_(matcher), p_(rule.pattern) {}

  std::optional<Match> run(NodeRef n, MatchFailure* why) {
    wantWhy_ = why != nullptr;
    State s;
    s.nodes.resize(p_.nodes.size());
    s.matched.assign(p_.nodes.size(), false);
    s.values.assign(p_.bindings.size(), kNoValue);
    s.bound.assign(p_.bindings.size(), false);
    s.attrs.resize(p_.bindings.size());
    std::optional<Match> result;
    const int root = p_.roots.empty() ? 0 : p_.roots[0];
    const Cont rest = [&](State& done) { return matchOtherRoots(1, done, [&](State& all) { return finish(all, result); }); };
    if (!matchNode(root, n, s, rest)) matchEmptyRoot(root, n, s, rest);
    if (!result && why) *why = best_;
    return result;
  }

 private:
  /// Records why matching failed, keeping the failure that got furthest.
  /// Messages are only built when the caller asked why (explain), since
  /// most attempts fail at the first op check.
  template <class Reason>
  void fail(Reason&& reason, int patternNode, const State& s) {
    if (!wantWhy_) return;
    const size_t progress = static_cast<size_t>(std::count(s.matched.begin(), s.matched.end(), true));
    if (haveFailure_ && progress < bestProgress_) return;
    haveFailure_ = true;
    bestProgress_ = progress;
    best_.opsMatched = progress;
    best_.reason = reason();
    if (patternNode >= 0) best_.where = p_.nodes[static_cast<size_t>(patternNode)].loc;
    else best_.where = rule_.loc;
  }

  std::string describe(NodeRef n) const { return g_.describe(n); }

  const OpDef* opOf(int p, NodeRef n) const {
    const NodeData& d = g_.node(n);
    if (!d.domain.empty() && d.domain != "ai.onnx") return nullptr;
    for (const OpDef* op : p_.nodes[static_cast<size_t>(p)].ops)
      if (op->name == d.op) return op;
    return nullptr;
  }

  bool bindValue(int b, ValueId v, State& s) {
    if (s.bound[static_cast<size_t>(b)]) return s.values[static_cast<size_t>(b)] == v;
    s.bound[static_cast<size_t>(b)] = true;
    s.values[static_cast<size_t>(b)] = v;
    return true;
  }

  /// Matches pattern node `p` with graph node `n` as its (last) node.
  bool matchNode(int p, NodeRef n, State& s, const Cont& k) {
    // Backtracking is bounded: many interchangeable sibling roots could
    // otherwise try every assignment of candidates to roots.
    if (++steps_ > kMaxMatchSteps) {
      if (!exhausted_) {
        exhausted_ = true;
        haveFailure_ = true;
        bestProgress_ = SIZE_MAX;
        best_.reason = "the matcher gave up after " + std::to_string(kMaxMatchSteps) +
                       " steps (a pattern with many interchangeable sibling roots; split the rule)";
        best_.where = rule_.loc;
      }
      return false;
    }
    const PatternNode& pn = p_.nodes[static_cast<size_t>(p)];
    if (s.matched[static_cast<size_t>(p)]) {
      if (s.nodes[static_cast<size_t>(p)].empty() || s.nodes[static_cast<size_t>(p)].back() != n) {
        fail([&] { return std::string("the pattern needs one node here, but two different nodes are involved"); }, p, s);
        return false;
      }
      return k(s);
    }
    if (s.uses(n)) {
      fail([&] { return std::string(describe(n) + " is already part of this match"); }, p, s);
      return false;
    }
    const OpDef* op = opOf(p, n);
    if (!op) {
      fail([&] { return std::string(describe(n) + " is not " + describeOps(pn)); }, p, s);
      return false;
    }
    if (pn.repeat == PatternNode::Repeat::Once) return matchChain(p, {n}, s, k);
    // A repetition collects a maximal chain upward, each node reading the
    // one before. Through operand 0 first; an elementwise or broadcast op
    // may read it through another operand where a diamond closes in the
    // chain (collectChain). When the longer chain leaves the
    // pattern unmatched (its first node does not read what the pattern
    // binds), the chain through operands 0 alone is tried: every match
    // through operand 0 still holds.
    bool besideOperand0 = false;
    std::vector<NodeRef> anyOperand = collectChain(p, n, s, true, &besideOperand0);
    if (matchChain(p, anyOperand, s, k)) return true;
    if (!besideOperand0) return false;  // the chain through operands 0 is the same
    std::vector<NodeRef> firstOperand = collectChain(p, n, s, false);
    return firstOperand != anyOperand && matchChain(p, firstOperand, s, k);
  }

  /// The chain of nodes of pattern node `p`'s ops ending at `n`: each node's
  /// producer through a link value read only by that node (no graph output), not
  /// yet in the match; through operand 0, or with `anyOperand` the first
  /// operand that qualifies when the node is elementwise or broadcast and
  /// its operand 0 is read higher up the chain: a diamond that closes in
  /// the chain (GELU's `Mul(x, 1 + erf(x / sqrt 2))`, SiLU's
  /// `Mul(x, Sigmoid(x))`), not a residual `Add(skip, bias add)`, whose
  /// bias add belongs to the MatMul before it.
  /// Linear in the chain's length, which kMaxRepetition bounds: collected
  /// bottom-up and reversed (producers only lead up an acyclic graph, so no
  /// node comes twice). `besideOperand0` tells whether a link other than
  /// operand 0 was taken.
  std::vector<NodeRef> collectChain(int p, NodeRef n, const State& s, bool anyOperand,
                                    bool* besideOperand0 = nullptr) const {
    std::vector<NodeRef> chain = {n};
    std::vector<size_t> through = {0};  // the operand each node reads the one above through
    for (NodeRef cur = n;;) {
      const NodeData& d = g_.node(cur);
      const OpDef* op = opOf(p, cur);
      const bool dataOperands = anyOperand && op && (op->kind == OpKind::Elementwise || op->kind == OpKind::Broadcast);
      std::optional<NodeRef> next;
      for (size_t i = 0; i < d.inputs.size() && !next && (i == 0 || dataOperands); ++i) {
        const ValueId link = d.inputs[i];
        if (link == kNoValue) continue;
        auto prev = g_.producer(link);
        if (!prev || s.uses(*prev) || !opOf(p, *prev)) continue;
        // The chain value is read by this node alone (`Mul(d, d)` reads it twice).
        const auto& uses = g_.uses(link);
        if (g_.isGraphOutput(link) || std::any_of(uses.begin(), uses.end(), [&](const Use& u) { return u.node != cur; })) continue;
        next = prev;
        through.back() = i;
      }
      if (!next || chain.size() == kMaxRepetition) break;
      chain.push_back(*next);
      through.push_back(0);
      cur = *next;
    }
    std::reverse(chain.begin(), chain.end());
    const bool beside = std::any_of(through.begin(), through.end(), [](size_t i) { return i != 0; });
    if (besideOperand0) *besideOperand0 = beside;
    if (!beside) return chain;
    std::reverse(through.begin(), through.end());
    // From the top down: a link through another operand than 0 whose
    // operand 0 nothing above reads (since the last cut) cuts the chain there.
    std::set<ValueId> readAbove;
    size_t top = 0;
    for (size_t j = 1; j < chain.size(); ++j) {
      const std::vector<ValueId>& above = g_.node(chain[j - 1]).inputs;
      readAbove.insert(above.begin(), above.end());
      if (through[j] == 0 || readAbove.count(g_.node(chain[j]).inputs[0])) continue;
      top = j;
      readAbove.clear();
    }
    chain.erase(chain.begin(), chain.begin() + static_cast<std::ptrdiff_t>(top));
    return chain;
  }

  /// Matches pattern node `p` with the graph nodes `chain` (one node, or a
  /// repetition's chain), the last one giving the results and attributes.
  bool matchChain(int p, const std::vector<NodeRef>& chain, State& s, const Cont& k) {
    const PatternNode& pn = p_.nodes[static_cast<size_t>(p)];
    const NodeRef n = chain.back();
    const OpDef* op = opOf(p, n);
    State saved = s;
    s.matched[static_cast<size_t>(p)] = true;
    s.nodes[static_cast<size_t>(p)] = chain;
    for (NodeRef c : chain) s.used.push_back(c);
    const NodeData& last = g_.node(n);
    // Results.
    for (int b : pn.results) {
      const Binding& bind = p_.bindings[static_cast<size_t>(b)];
      const size_t r = static_cast<size_t>(bind.result);
      if (r >= last.outputs.size() || last.outputs[r] == kNoValue || !bindValue(b, last.outputs[r], s)) {
        fail([&] { return std::string("result " + std::to_string(r) + " of " + describe(n) + " does not fit `" + bind.name + "`"); }, p, s);
        s = saved;
        return false;
      }
    }
    // Attributes (of the last node of a chain).
    for (const AttrConstraint& c : pn.attrs) {
      std::optional<Attribute> a = nodeAttr(last, op, c.name);
      if (c.equals) {
        Attribute want = literalAttr(*c.equals);
        if (!a || !sameAttr(*a, want)) {
          fail([&] { return std::string("attribute `" + c.name + "` of " + describe(n) + " does not have the value the pattern requires"); }, p, s);
          s = saved;
          return false;
        }
      } else if (c.binding >= 0) {
        auto& slot = s.attrs[static_cast<size_t>(c.binding)];
        if (!a || (slot && !sameAttr(*slot, *a))) {
          fail([&] { return std::string("attribute `" + c.name + "` of " + describe(n) + (a ? " differs from another place that binds it" : " is not set")); }, p, s);
          s = saved;
          return false;
        }
        slot = a;
      }
    }
    // Operands, of the first node of the chain; commutative ops try both orders.
    const NodeData& first = g_.node(chain.front());
    const OpDef* firstOp = opOf(p, chain.front());
    std::vector<std::vector<size_t>> orders = {{}};
    for (size_t i = 0; i < pn.operands.size(); ++i) orders[0].push_back(i);
    const bool rest = !pn.operands.empty() && pn.operands.back().kind == PatternOperand::Kind::Rest;
    // `Mul(m, ...)` also matches a commutative pair with `m` second (a layer
    // scale written `gamma * x`).
    if (firstOp && firstOp->commutative && pn.operands.size() == 2 && (!rest || first.inputs.size() == 2))
      orders.push_back({1, 0});
    if (!rest) {
      size_t present = 0;
      for (ValueId v : first.inputs) present += v != kNoValue;
      size_t patternPresent = pn.operands.size();
      if (first.inputs.size() > pn.operands.size()) {
        bool extra = false;
        for (size_t i = pn.operands.size(); i < first.inputs.size(); ++i) extra |= first.inputs[i] != kNoValue;
        if (extra) {
          fail([&] { return std::string(describe(chain.front()) + " has more operands than the pattern (" + std::to_string(present) + " > " +
                   std::to_string(patternPresent) + ")"); }, p, s);
          s = saved;
          return false;
        }
      }
    }
    for (const std::vector<size_t>& order : orders) {
      State before = s;
      if (matchOperands(p, chain.front(), order, 0, s, k)) return true;
      s = before;
    }
    s = saved;
    return false;
  }

  std::string describeOps(const PatternNode& pn) const {
    std::string s;
    for (size_t i = 0; i < pn.ops.size() && i < 4; ++i) s += (i ? " | " : "") + pn.ops[i]->name.str();
    if (pn.ops.size() > 4) s += " | ... (" + std::to_string(pn.ops.size()) + " ops)";
    return "`" + s + "`";
  }

  static Attribute literalAttr(const RuleExpr& e) {
    switch (e.kind) {
      case RuleExpr::Kind::Number:
        if (e.type == ExprType::Int) return static_cast<int64_t>(e.number);
        return static_cast<float>(e.number);
      case RuleExpr::Kind::String: return e.text;
      case RuleExpr::Kind::Unary:
        if (e.args.size() == 1 && e.args[0].kind == RuleExpr::Kind::Number)
          return e.args[0].type == ExprType::Int ? Attribute(static_cast<int64_t>(-e.args[0].number))
                                                 : Attribute(static_cast<float>(-e.args[0].number));
        break;
      case RuleExpr::Kind::List: {
        std::vector<int64_t> v;
        for (const RuleExpr& x : e.args) {
          Attribute a = literalAttr(x);
          v.push_back(std::holds_alternative<int64_t>(a) ? std::get<int64_t>(a) : static_cast<int64_t>(std::get<float>(a)));
        }
        return v;
      }
      default: break;
    }
    return int64_t{0};
  }

  bool matchOperands(int p, NodeRef n, const std::vector<size_t>& order, size_t i, State& s, const Cont& k) {
    const PatternNode& pn = p_.nodes[static_cast<size_t>(p)];
    const NodeData& node = g_.node(n);
    if (i == order.size()) return k(s);
    const size_t patternIndex = order[i];
    const PatternOperand& po = pn.operands[patternIndex];
    const ValueId v = i < node.inputs.size() ? node.inputs[i] : kNoValue;
    auto next = [&](State& st) { return matchOperands(p, n, order, i + 1, st, k); };
    // `...` ends the operands, or (a commutative pair's swapped order) stands for operand 0.
    if (po.kind == PatternOperand::Kind::Rest) return i + 1 == order.size() ? k(s) : next(s);
    switch (po.kind) {
      case PatternOperand::Kind::Wildcard: return next(s);
      case PatternOperand::Kind::Binding: {
        const Binding& b = p_.bindings[static_cast<size_t>(po.index)];
        if (v == kNoValue) {
          if (!po.optional) {
            fail([&] { return std::string("operand " + std::to_string(i + 1) + " of " + describe(n) + " is absent"); }, p, s);
            return false;
          }
          if (s.bound[static_cast<size_t>(po.index)] && s.values[static_cast<size_t>(po.index)] != kNoValue) {
            fail([&] { return std::string("`" + b.name + "` is present in one place and absent in another"); }, p, s);
            return false;
          }
          s.bound[static_cast<size_t>(po.index)] = true;
          return next(s);
        }
        if (s.bound[static_cast<size_t>(po.index)] && s.values[static_cast<size_t>(po.index)] != v) {
          fail([&] { return std::string("`" + b.name + "` would stand for two different values (`" + valueName(s.values[static_cast<size_t>(po.index)]) +
                   "` and `" + valueName(v) + "`)"); }, p, s);
          return false;
        }
        s.bound[static_cast<size_t>(po.index)] = true;
        s.values[static_cast<size_t>(po.index)] = v;
        if (b.producer < 0) return next(s);
        return matchProducer(b.producer, b.result, v, s, next);
      }
      case PatternOperand::Kind::Node:
        if (v == kNoValue) {
          fail([&] { return std::string("operand " + std::to_string(i + 1) + " of " + describe(n) + " is absent"); }, p, s);
          return false;
        }
        return matchProducer(po.index, 0, v, s, next);
      case PatternOperand::Kind::Rest: break;
    }
    return next(s);
  }

  std::string valueName(ValueId v) const { return v == kNoValue ? "<absent>" : g_.value(v).name; }

  /// Value `v` must be result `result` of a node matching pattern node `q`.
  bool matchProducer(int q, int result, ValueId v, State& s, const Cont& k) {
    const PatternNode& qn = p_.nodes[static_cast<size_t>(q)];
    auto prod = g_.producer(v);
    const bool zeroOk = qn.repeat == PatternNode::Repeat::ZeroOrMore;
    // Reached again through a shared name (a DAG): the same node, nothing to do.
    if (prod && s.matched[static_cast<size_t>(q)] && !s.nodes[static_cast<size_t>(q)].empty() &&
        s.nodes[static_cast<size_t>(q)].back() == *prod)
      return k(s);
    if (!prod || g_.value(v).producerOutput != static_cast<uint32_t>(result) || !opOf(q, *prod) || s.uses(*prod)) {
      if (zeroOk && !s.matched[static_cast<size_t>(q)]) return matchEmptyRepetition(q, v, s, k);
      fail([&] { return std::string("`" + valueName(v) + "` is not produced by " + describeOps(qn) +
               (prod ? " (it comes from " + describe(*prod) + ")" : " (it is an input or a constant)")); }, q, s);
      return false;
    }
    // An intermediate value used outside the match is fine for rewrites (the
    // driver keeps what is still used); fusion legality is the planner's job.
    State before = s;
    if (matchNode(q, *prod, s, k)) return true;
    s = before;
    if (zeroOk && !s.matched[static_cast<size_t>(q)]) return matchEmptyRepetition(q, v, s, k);
    return false;
  }

  /// `X*` matching nothing: its result is its operand 0 itself.
  bool matchEmptyRepetition(int q, ValueId v, State& s, const Cont& k) {
    const PatternNode& qn = p_.nodes[static_cast<size_t>(q)];
    State saved = s;
    s.matched[static_cast<size_t>(q)] = true;
    for (int b : qn.results)
      if (!bindValue(b, v, s)) {
        s = saved;
        return false;
      }
    if (qn.operands.empty()) return k(s);
    const PatternOperand& po = qn.operands[0];
    bool ok = false;
    if (po.kind == PatternOperand::Kind::Node) {  // `Relu*(Conv(x, w))`: the conv gives v
      ok = matchProducer(po.index, 0, v, s, k);
    } else if (po.kind != PatternOperand::Kind::Binding) {
      ok = k(s);
    } else if (bindValue(po.index, v, s)) {
      const Binding& b = p_.bindings[static_cast<size_t>(po.index)];
      ok = b.producer < 0 ? k(s) : matchProducer(b.producer, b.result, v, s, k);
    }
    if (!ok) s = saved;
    return ok;
  }

  /// A root `X*` that matches nothing (`y = Activation*(d, ...)` where no
  /// activation follows the conv `d`): the match starts at `n`, one of
  /// whose results is the root's operand 0, and holds `n`.
  bool matchEmptyRoot(int root, NodeRef n, State& s, const Cont& k) {
    const PatternNode& pn = p_.nodes[static_cast<size_t>(root)];
    if (pn.repeat != PatternNode::Repeat::ZeroOrMore || pn.operands.empty()) return false;
    for (ValueId v : g_.node(n).outputs) {
      if (v == kNoValue) continue;
      if (matchEmptyRepetition(root, v, s, [&](State& st) { return st.uses(n) && k(st); })) return true;
    }
    return false;
  }

  /// How many ops a path from one of `node`'s operands up to the node
  /// may pass: its pattern subtree's ops, a repetition counted as
  /// kRepeatReach of them.
  int reach(int node) const {
    static constexpr int kRepeatReach = 8;
    const PatternNode& pn = p_.nodes[static_cast<size_t>(node)];
    int deepest = 0;
    for (const PatternOperand& po : pn.operands) {
      int producer = po.kind == PatternOperand::Kind::Node ? po.index : -1;
      if (po.kind == PatternOperand::Kind::Binding) producer = p_.bindings[static_cast<size_t>(po.index)].producer;
      if (producer >= 0 && producer != node) deepest = std::max(deepest, reach(producer));
    }
    return deepest + (pn.repeat == PatternNode::Repeat::Once ? 1 : kRepeatReach);
  }

  /// Sibling roots: search among the nodes downstream of the values bound
  /// so far, as far as the root's pattern reaches (`q = Add(MatMul(x, w),
  /// b)` beside another product of x is two ops from x), nearest first.
  bool matchOtherRoots(size_t r, State& s, const Cont& k) {
    if (r >= p_.roots.size()) return k(s);
    const int root = p_.roots[r];
    if (s.matched[static_cast<size_t>(root)]) return matchOtherRoots(r + 1, s, k);
    std::vector<NodeRef> candidates;
    std::set<NodeRef> seen;
    std::vector<ValueId> values;
    for (ValueId v : s.values)
      if (v != kNoValue) values.push_back(v);
    for (int level = reach(root); level > 0 && !values.empty(); --level) {
      std::vector<ValueId> next;
      for (ValueId v : values)
        for (const Use& u : g_.uses(v)) {
          if (!seen.insert(u.node).second) continue;
          candidates.push_back(u.node);
          for (ValueId out : g_.node(u.node).outputs)
            if (out != kNoValue) next.push_back(out);
        }
      values = std::move(next);
    }
    candidates.erase(std::remove_if(candidates.begin(), candidates.end(), [&](NodeRef n) { return s.uses(n); }),
                     candidates.end());
    for (NodeRef c : candidates) {
      State before = s;
      if (matchNode(root, c, s, [&](State& st) { return matchOtherRoots(r + 1, st, k); })) return true;
      s = before;
    }
    fail([&] { return std::string("no sibling matches the pattern at " + p_.nodes[static_cast<size_t>(root)].loc.str()); }, root, s);
    return false;
  }

  bool finish(State& s, std::optional<Match>& result) {
    for (size_t p = 0; p < s.matched.size(); ++p)
      if (!s.matched[p]) {
        fail([&] { return std::string("part of the pattern is not connected to the rest"); }, static_cast<int>(p), s);
        return false;
      }
    Match m;
    m.rule = &rule_;
    m.nodes = s.nodes;
    m.values = s.values;
    m.attrs = s.attrs;
    if (rule_.guard) {
      std::optional<double> ok = matcher_.evaluate(g_, m, *rule_.guard);
      if (!ok || *ok == 0) {
        haveFailure_ = true;
        bestProgress_ = SIZE_MAX;
        best_.opsMatched = p_.nodes.size();
        best_.guardFailed = true;
        best_.reason = std::string(ok ? "the guard is false: " : "the guard cannot be evaluated (a shape, or what a constant holds, is not known): ") +
                       explainGuard(g_, m, *rule_.guard, matcher_.target());
        best_.where = rule_.guard->loc;
        return false;
      }
    }
    result = std::move(m);
    return true;
  }

  const Graph& g_;
  const Rule& rule_;
  const Matcher& matcher_;
  const Pattern& p_;
  MatchFailure best_;
  bool wantWhy_ = false;
  bool haveFailure_ = false;
  size_t bestProgress_ = 0;
  size_t steps_ = 0;        ///< pattern nodes tried at graph nodes, this search
  bool exhausted_ = false;  ///< past kMaxMatchSteps
};

}  // namespace

std::vector<NodeRef> Match::allNodes() const {
  std::vector<NodeRef> out;
  for (const auto& ns : nodes)
    for (NodeRef n : ns)
      if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  return out;
}

Matcher::Matcher(const RuleSet& rules, const Target* target) : rules_(rules), target_(target) {
  for (const Rule& r : rules_.rules) {
    if (r.pattern.roots.empty()) continue;
    // The root's ops; where the root is `X*`, which may match nothing, also
    // the ops of what gives its operand 0 (and so on down empty ones).
    int p = r.pattern.roots[0];
    for (size_t depth = 0; p >= 0 && depth < r.pattern.nodes.size(); ++depth) {
      const PatternNode& node = r.pattern.nodes[static_cast<size_t>(p)];
      for (const OpDef* op : node.ops) {
        auto& list = byRootOp_[op->name.str()];
        if (std::find(list.begin(), list.end(), &r) == list.end()) list.push_back(&r);
      }
      if (node.repeat != PatternNode::Repeat::ZeroOrMore || node.operands.empty()) break;
      const PatternOperand& first = node.operands[0];
      p = first.kind == PatternOperand::Kind::Node      ? first.index
          : first.kind == PatternOperand::Kind::Binding ? r.pattern.bindings[static_cast<size_t>(first.index)].producer
                                                        : -1;
    }
  }
}

const std::vector<const Rule*>& Matcher::rulesFor(const std::string& op) const {
  static const std::vector<const Rule*> kNone;
  auto it = byRootOp_.find(op);
  return it == byRootOp_.end() ? kNone : it->second;
}

std::optional<Match> Matcher::matchAt(const Graph& g, NodeRef n, const Rule& rule, MatchFailure* why) const {
  return Search(g, rule, *this).run(n, why);
}

namespace {

/// Guard evaluation over a match.
class Evaluator {
 public:
  Evaluator(const Graph& g, const Match& m, const Target* t, bool symbolicAsOne = false)
      : g_(g), m_(m), t_(t), symbolicAsOne_(symbolicAsOne) {}

  Val eval(const RuleExpr& e) {
    Val v;
    switch (e.kind) {
      case RuleExpr::Kind::Number: case RuleExpr::Kind::Bool: return num(e.number);
      case RuleExpr::Kind::String: v.kind = Val::Kind::Str; v.str = e.text; return v;
      case RuleExpr::Kind::DTypeName: v.kind = Val::Kind::DType; v.str = e.text; return v;
      case RuleExpr::Kind::List:
        v.kind = Val::Kind::List;
        for (const RuleExpr& x : e.args) v.list.push_back(eval(x).num);
        return v;
      case RuleExpr::Kind::Binding: {
        if (e.binding < 0) return v;
        const auto b = static_cast<size_t>(e.binding);
        if (m_.attrs[b]) return fromAttribute(*m_.attrs[b]);
        v.kind = Val::Kind::Tensor;
        v.value = m_.values[b];
        return v;
      }
      case RuleExpr::Kind::NodeAttr: {
        ValueId val = m_.values[static_cast<size_t>(e.binding)];
        if (val == kNoValue) return v;
        auto p = g_.producer(val);
        if (!p) return v;
        const Attribute* a = g_.node(*p).attr(e.text);
        if (a) return fromAttribute(*a);
        // Fall back to the catalog default of the op that matched.
        for (const PatternNode& pn : m_.rule->pattern.nodes)
          for (const OpDef* op : pn.ops)
            if (op->name == g_.node(*p).op)
              if (const AttrSpec* s = op->findAttr(e.text); s && s->defaultValue) return fromAttribute(*s->defaultValue);
        return v;
      }
      case RuleExpr::Kind::Target: {
        if (!t_) return v;
        auto p = t_->property(e.text);
        return p ? num(*p) : v;
      }
      case RuleExpr::Kind::TargetHas: return t_ ? num(t_->has(e.args[0].text)) : v;
      case RuleExpr::Kind::Builtin: return builtin(e);
      case RuleExpr::Kind::Unary: {
        Val x = eval(e.args[0]);
        const Builtin* f = findBuiltin(e.text, Builtin::Form::Prefix, kInGuard);
        if (x.kind != Val::Kind::Num || !f || !f->eval) return v;
        return num(f->eval(&x.num, 1));
      }
      case RuleExpr::Kind::Index: {
        Val list = eval(e.args[0]), index = eval(e.args[1]);
        if (list.kind != Val::Kind::List || index.kind != Val::Kind::Num) return v;
        auto i = static_cast<int64_t>(index.num);
        if (i < 0) i += static_cast<int64_t>(list.list.size());
        if (i < 0 || i >= static_cast<int64_t>(list.list.size())) return v;
        return num(list.list[static_cast<size_t>(i)]);
      }
      case RuleExpr::Kind::Binary: return binary(e);
      case RuleExpr::Kind::OpCall: return v;
    }
    return v;
  }

 private:
  static Val num(double d) {
    Val v;
    v.kind = Val::Kind::Num;
    v.num = d;
    return v;
  }

  Val binary(const RuleExpr& e) {
    Val a = eval(e.args[0]);
    if (e.text == "and" && a.kind == Val::Kind::Num && a.num == 0) return num(0);  // short-circuit
    if (e.text == "or" && a.kind == Val::Kind::Num && a.num != 0) return num(1);
    Val b = eval(e.args[1]);
    const std::string& op = e.text;
    if (op == "==" || op == "!=") {
      if (a.kind == Val::Kind::Unknown || b.kind == Val::Kind::Unknown) return {};
      bool eq;
      if (a.kind == Val::Kind::Num && b.kind == Val::Kind::Num) eq = a.num == b.num;
      else if (a.kind == Val::Kind::List && b.kind == Val::Kind::List) eq = a.list == b.list;
      else eq = a.kind == b.kind && a.str == b.str;
      return num(op == "==" ? eq : !eq);
    }
    if (a.kind != Val::Kind::Num || b.kind != Val::Kind::Num) return {};
    if ((op == "/" || op == "%") && b.num == 0) return {};  // unknown, so the guard fails
    const Builtin* f = findBuiltin(op, Builtin::Form::Infix, kInGuard);
    if (!f || !f->eval) return {};
    const double args[2] = {a.num, b.num};
    return num(f->eval(args, 2));
  }

  /// Static dims of a value; nullopt if the rank is unknown.
  std::optional<std::vector<double>> shape(ValueId v) {
    if (v == kNoValue) return std::nullopt;
    const TensorType& t = g_.value(v).type;
    if (!t.dims) return std::nullopt;
    std::vector<double> dims;
    for (const Dim& d : *t.dims) dims.push_back(d.isStatic() ? static_cast<double>(d.size) : symbolicAsOne_ ? 1.0 : -1.0);
    return dims;
  }

  /// The element of constant `v` that `value(v)` reads: its only one, or
  /// inside all/any the current lane's (a one-element constant broadcasts).
  Val constantElement(const Val& v) {
    if (v.kind == Val::Kind::Num) return v;  // an attribute binding holds its number
    if (v.kind != Val::Kind::Tensor || v.value == kNoValue || !g_.isConstant(v.value)) return {};
    const Tensor& t = *g_.value(v.value).constant;
    if (!isFloatingPoint(t.dtype()) && !isInteger(t.dtype()) && t.dtype() != DType::Bool) return {};
    if (t.numel() == 1) return num(t.scalarAt(0));
    if (!lane_ || *lane_ >= t.numel()) return {};
    return num(t.scalarAt(*lane_));
  }

  /// The most elements of a constant that `value(...)` reads inside `e`.
  int64_t lanes(const RuleExpr& e) {
    int64_t n = 1;
    if (e.kind == RuleExpr::Kind::Builtin && e.text == "value" && e.args[0].kind == RuleExpr::Kind::Binding &&
        e.args[0].binding >= 0) {
      const ValueId v = m_.values[static_cast<size_t>(e.args[0].binding)];
      if (v != kNoValue && g_.isConstant(v)) n = g_.value(v).constant->numel();
    }
    for (const RuleExpr& a : e.args) n = std::max(n, lanes(a));
    return n;
  }

  /// all(cond) / any(cond): `cond` for each element of the constants it
  /// reads with value(...). Unknown when one is not a constant.
  Val quantified(const RuleExpr& e) {
    constexpr int64_t kMaxLanes = int64_t{1} << 24;
    const bool every = e.text == "all";
    const int64_t n = lanes(e.args[0]);
    if (n > kMaxLanes) return {};
    const std::optional<int64_t> outer = lane_;
    Val result = num(every ? 1 : 0);
    for (int64_t i = 0; i < n; ++i) {
      lane_ = i;
      Val c = eval(e.args[0]);
      if (c.kind != Val::Kind::Num) {
        result = {};
        break;
      }
      if ((c.num != 0) != every) {
        result = num(every ? 0 : 1);
        break;
      }
    }
    lane_ = outer;
    return result;
  }

  Val builtin(const RuleExpr& e) {
    const std::string& f = e.text;
    if (f == "all" || f == "any") return quantified(e);
    std::vector<Val> args;
    for (const RuleExpr& a : e.args) args.push_back(eval(a));
    if (f == "const") {
      for (const Val& a : args)
        if (a.kind != Val::Kind::Tensor || a.value == kNoValue || !g_.isConstant(a.value)) return num(0);
      return num(1);
    }
    if (const Builtin* b = findBuiltin(f, Builtin::Form::Call, kInGuard); b && b->eval) {
      std::vector<double> numbers;
      for (const Val& a : args) {
        if (a.kind != Val::Kind::Num) return {};
        numbers.push_back(a.num);
      }
      return num(b->eval(numbers.data(), numbers.size()));
    }
    if (f == "len") return args[0].kind == Val::Kind::List ? num(static_cast<double>(args[0].list.size())) : Val{};
    if (f == "prod") {
      if (args[0].kind != Val::Kind::List) return {};
      double p = 1;
      for (double x : args[0].list) p *= x;
      return num(p);
    }
    if (f == "present") return num(args[0].kind == Val::Kind::Tensor && args[0].value != kNoValue);
    if (f == "value") return constantElement(args[0]);
    if (args.empty() || args[0].kind != Val::Kind::Tensor || args[0].value == kNoValue) return {};
    const ValueId v = args[0].value;
    if (f == "uses") return num(static_cast<double>(g_.uses(v).size() + (g_.isGraphOutput(v) ? 1 : 0)));
    if (f == "is_output") return num(g_.isGraphOutput(v));
    if (f == "is_input") return num(g_.value(v).isGraphInput);
    if (f == "dtype") {
      Val d;
      d.kind = Val::Kind::DType;
      d.str = std::string(dtypeName(g_.value(v).type.dtype));
      return d;
    }
    auto dims = shape(v);
    if (!dims) return {};
    if (f == "rank") return num(static_cast<double>(dims->size()));
    if (f == "shape") {
      Val l;
      l.kind = Val::Kind::List;
      l.list = *dims;
      return l;
    }
    if (f == "numel") {
      double n = 1;
      for (double d : *dims) {
        if (d < 0) return {};
        n *= d;
      }
      return num(n);
    }
    return {};
  }

  const Graph& g_;
  const Match& m_;
  const Target* t_;
  bool symbolicAsOne_;
  std::optional<int64_t> lane_;  ///< inside all/any: the element value(...) reads
};

}  // namespace

namespace {

std::string numberText(double d) {
  if (d == static_cast<double>(static_cast<int64_t>(d)) && std::abs(d) < 1e15) return std::to_string(static_cast<int64_t>(d));
  return fmt::format("{:g}", d);
}

/// A guard expression as written (near enough: fully parenthesized where it nests).
std::string exprText(const RuleExpr& e, const Rule& rule) {
  auto args = [&](size_t from) {
    std::string out;
    for (size_t i = from; i < e.args.size(); ++i) out += (i > from ? ", " : "") + exprText(e.args[i], rule);
    return out;
  };
  auto nested = [&](const RuleExpr& x) {
    const std::string t = exprText(x, rule);
    return x.kind == RuleExpr::Kind::Binary ? "(" + t + ")" : t;
  };
  switch (e.kind) {
    case RuleExpr::Kind::Number: return numberText(e.number);
    case RuleExpr::Kind::Bool: return e.number != 0 ? "true" : "false";
    case RuleExpr::Kind::String: return "\"" + e.text + "\"";
    case RuleExpr::Kind::DTypeName: return e.text;
    case RuleExpr::Kind::List: return "[" + args(0) + "]";
    case RuleExpr::Kind::Binding:
      return e.binding >= 0 && static_cast<size_t>(e.binding) < rule.pattern.bindings.size()
                 ? rule.pattern.bindings[static_cast<size_t>(e.binding)].name
                 : "?";
    case RuleExpr::Kind::NodeAttr: {
      RuleExpr b = e;
      b.kind = RuleExpr::Kind::Binding;
      return exprText(b, rule) + "." + e.text;
    }
    case RuleExpr::Kind::Target: return "target." + e.text;
    case RuleExpr::Kind::TargetHas: return "target.has(" + args(0) + ")";
    case RuleExpr::Kind::Builtin: return e.text + "(" + args(0) + ")";
    case RuleExpr::Kind::OpCall: return (e.op ? e.op->name.str() : std::string("?")) + "(" + args(0) + ")";
    case RuleExpr::Kind::Unary: return e.text + (e.text == "not" ? " " : "") + nested(e.args[0]);
    case RuleExpr::Kind::Index: return nested(e.args[0]) + "[" + exprText(e.args[1], rule) + "]";
    case RuleExpr::Kind::Binary: return nested(e.args[0]) + " " + e.text + " " + nested(e.args[1]);
  }
  return "?";
}

std::string valText(const Val& v, const Graph& g) {
  switch (v.kind) {
    case Val::Kind::Num: return numberText(v.num);
    case Val::Kind::Str: return "\"" + v.str + "\"";
    case Val::Kind::DType: return v.str;
    case Val::Kind::List: {
      std::string out = "[";
      for (size_t i = 0; i < v.list.size(); ++i) out += (i ? ", " : "") + numberText(v.list[i]);
      return out + "]";
    }
    case Val::Kind::Tensor: return v.value == kNoValue ? "absent" : "`" + g.value(v.value).name + "`";
    case Val::Kind::Unknown: return "unknown";
  }
  return "unknown";
}

/// What a leaf of the guard evaluated to, and its operands' values: `uses(c)
/// == 1` is false (uses(c) = 2).
std::string leafWhy(const RuleExpr& e, Evaluator& ev, const Graph& g, const Rule& rule, const Val& got) {
  std::string why = "`" + exprText(e, rule) + "` is " + (got.kind == Val::Kind::Num ? "false" : "unknown");
  std::vector<std::string> seen;
  auto show = [&](const RuleExpr& x) {
    if (x.kind == RuleExpr::Kind::Number || x.kind == RuleExpr::Kind::Bool || x.kind == RuleExpr::Kind::String ||
        x.kind == RuleExpr::Kind::DTypeName || x.kind == RuleExpr::Kind::List)
      return;
    seen.push_back(exprText(x, rule) + " = " + valText(ev.eval(x), g));
  };
  if (e.kind == RuleExpr::Kind::Binary)
    for (const RuleExpr& a : e.args) show(a);
  else if (e.kind == RuleExpr::Kind::Unary && !e.args.empty())
    show(e.args[0]);
  if (!seen.empty()) {
    why += " (";
    for (size_t i = 0; i < seen.size(); ++i) why += (i ? ", " : "") + seen[i];
    why += ")";
  }
  return why;
}

/// The first conjunct of a failing guard that is false, with its values.
std::string guardWhy(const RuleExpr& e, Evaluator& ev, const Graph& g, const Rule& rule) {
  if (e.kind == RuleExpr::Kind::Binary && e.text == "and") {
    const Val left = ev.eval(e.args[0]);
    if (left.kind != Val::Kind::Num || left.num == 0) return guardWhy(e.args[0], ev, g, rule);
    return guardWhy(e.args[1], ev, g, rule);
  }
  return leafWhy(e, ev, g, rule, ev.eval(e));
}

}  // namespace

std::string explainGuard(const Graph& g, const Match& m, const RuleExpr& guard, const Target* target) {
  Evaluator ev(g, m, target);
  return guardWhy(guard, ev, g, *m.rule);
}

std::optional<double> Matcher::evaluate(const Graph& g, const Match& m, const RuleExpr& e) const {
  return evaluateExpr(g, m, e, target_);
}

std::optional<double> evaluateExpr(const Graph& g, const Match& m, const RuleExpr& e, const Target* target,
                                   bool symbolicAsOne) {
  Val v = Evaluator(g, m, target, symbolicAsOne).eval(e);
  if (v.kind != Val::Kind::Num) return std::nullopt;
  return v.num;
}

}  // namespace fusec
