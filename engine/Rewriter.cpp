/// The rewrite driver (worklist to a fixpoint), the builder that turns a
/// rule's rewrite expressions into nodes, and the cleanup passes: constant
/// folding, dead-code elimination, common-subexpression elimination.
#include "fusec/engine/Rewriter.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <set>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "fusec/engine/Builtins.h"
#include "fusec/engine/Interpreter.h"
#include "fusec/engine/Window.h"

namespace fusec {
namespace {

/// Builds the nodes of one rewrite, then redirects the replaced values.
class RewriteBuilder {
 public:
  RewriteBuilder(Graph& g, const OpCatalog& catalog, const Match& m, const Target* target,
                 std::vector<NodeRef>& added)
      : g_(g), catalog_(catalog), m_(m), target_(target), added_(added) {}

  Status apply() {
    const Rule& rule = *m_.rule;
    built_.assign(rule.rewriteValues.size(), kNoValue);
    try {
      for (const RewriteStep& step : rule.rewrite) {
        std::vector<ValueId> results = build(step.value, step.results.size(), &step);
        for (size_t i = 0; i < step.results.size(); ++i) built_[static_cast<size_t>(step.results[i])] = results[i];
      }
    } catch (const UserError& e) {
      return Error{"rule `" + rule.name + "`: " + e.message};
    }
    for (size_t i = 0; i < rule.rewriteValues.size(); ++i) {
      const int b = rule.rewriteValues[i].replaces;
      if (b < 0) continue;
      const ValueId old = m_.values[static_cast<size_t>(b)];
      if (old == kNoValue || built_[i] == kNoValue || old == built_[i]) continue;
      Value& fresh = g_.value(built_[i]);
      Value& replaced = g_.value(old);
      if (!sameType(fresh.type, replaced.type))
        return Error{"rule `" + rule.name + "` replaces `" + replaced.name + "` (" + replaced.type.str() +
                     ") with a value of type " + fresh.type.str() +
                     "; a rewrite must keep the element type and shape of what it replaces"};
      if (fresh.type.dtype == DType::Undefined || !fresh.type.dims) fresh.type = replaced.type;
      // The replacement takes over the name where it can; the model's input
      // and output names never change (replaceKeepingInterface).
      if (!g_.isGraphOutput(old) && !g_.isInterface(built_[i])) {
        std::swap(fresh.name, replaced.name);
        replaced.name += "_replaced";
      }
      g_.replaceKeepingInterface(old, built_[i]);
    }
    return Status::success();
  }

 private:
  /// Whether the replacement `fresh` can have the type of what it
  /// replaces: element types equal where both are known; where both ranks
  /// are known, equal ranks, and per dim: equal sizes where both are
  /// static; where the replaced dim is a model's symbol (`N`, not ONNX's
  /// anonymous `unk__0`), the same symbol, so a rewrite that changes a
  /// symbolic dim (`Relu(x) -> Concat(x, x)` on a batch of N: `?` after) is
  /// refused as one that changes a static dim is. (A static dim against an
  /// unknown one is let through: ONNX's inference loses sizes that shape
  /// arithmetic computes, as in its window functions.)
  static bool sameType(const TensorType& fresh, const TensorType& replaced) {
    if (fresh.dtype != DType::Undefined && replaced.dtype != DType::Undefined && fresh.dtype != replaced.dtype) return false;
    if (!fresh.dims || !replaced.dims) return true;  // an op ONNX cannot type: it takes the replaced type
    if (fresh.dims->size() != replaced.dims->size()) return false;
    auto named = [](const Dim& d) { return !d.symbol.empty() && !d.symbol.starts_with("unk__"); };
    for (size_t i = 0; i < fresh.dims->size(); ++i) {
      const Dim &f = (*fresh.dims)[i], &r = (*replaced.dims)[i];
      if (f.isStatic() && r.isStatic() && f.size != r.size) return false;
      if (named(r) && !(f == r)) return false;
    }
    return true;
  }

  /// Unique within the graph and the same on every run: the next value id.
  std::string freshName(const std::string& base) { return base + "_rw" + std::to_string(g_.valueCapacity()); }

  /// A literal of the rewrite as a scalar of the element type it meets
  /// (float32 where that is unknown): `x * 2.0` on int32 multiplies by an
  /// int32 2. A float literal on integers truncates, as a cast would.
  ValueId constant(double v, DType like) {
    const DType dt = like == DType::Undefined || like == DType::String ? DType::Float32 : like;
    Tensor t = isFloatingPoint(dt) ? Tensor::scalar<float>(static_cast<float>(v)).castTo(dt)
                                   : Tensor::scalar<double>(std::trunc(v)).castTo(dt);
    return g_.addConstant(freshName("const"), std::move(t));
  }

  DType dtypeOf(ValueId v) const { return v == kNoValue ? DType::Undefined : g_.value(v).type.dtype; }

  ValueId node(const std::string& op, std::vector<ValueId> inputs, AttrMap attrs = {}, const RewriteStep* step = nullptr) {
    return nodeResults(op, std::move(inputs), 1, std::move(attrs), step)[0];
  }

  std::vector<ValueId> nodeResults(const std::string& op, std::vector<ValueId> inputs, size_t n, AttrMap attrs,
                                   const RewriteStep* step) {
    std::vector<ValueId> outs;
    for (size_t i = 0; i < n; ++i) outs.push_back(g_.addValue(freshName(op)));
    if (step) {
      AttrMap merged;
      for (int p : step->copyAttrsFrom)
        for (NodeRef src : m_.nodes[static_cast<size_t>(p)]) merged = g_.node(src).attrs;
      for (auto& [k, v] : attrs) merged[k] = v;
      attrs = std::move(merged);
    }
    // Omitted trailing operands are dropped; omitted middle ones stay empty.
    while (!inputs.empty() && inputs.back() == kNoValue) inputs.pop_back();
    NodeRef node = g_.addNode(op, std::move(inputs), outs, std::move(attrs), freshName(op));
    added_.push_back(node);
    // Typed there and then, so later steps, guards and codegen see shapes;
    // where ONNX cannot infer the op (LessOrEqual has no inference of its
    // own), the element type the catalog gives its result.
    if (std::string p = operandTypeProblem(g_, g_.node(node)); !p.empty())
      throw UserError{"it builds `" + op + "` on operands it does not take: " + p};
    inferNodeTypes(g_, node);
    const OpDef* def = catalog_.find(op);
    const ResultType result = def ? def->resultType : ResultType::SameAsOperands;
    for (ValueId o : outs) {
      Value& v = g_.value(o);
      if (v.type.dtype != DType::Undefined) continue;
      if (result == ResultType::Bool) v.type.dtype = DType::Bool;
      else if (result == ResultType::Int64) v.type.dtype = DType::Int64;
      else if (result == ResultType::Float) v.type.dtype = DType::Float32;
      else if (result == ResultType::SameAsOperands)
        for (ValueId in : g_.node(node).inputs)
          if (in != kNoValue && v.type.dtype == DType::Undefined) v.type.dtype = g_.value(in).type.dtype;
    }
    return outs;
  }

  Attribute attrValue(const RuleExpr& e) {
    switch (e.kind) {
      case RuleExpr::Kind::Number: case RuleExpr::Kind::Bool:
        if (e.type == ExprType::Int || e.kind == RuleExpr::Kind::Bool) return static_cast<int64_t>(e.number);
        return static_cast<float>(e.number);
      case RuleExpr::Kind::String: return e.text;
      case RuleExpr::Kind::List: {
        // Items are numbers, or negated numbers (`[-1]` is `-` applied to 1).
        std::vector<int64_t> v;
        for (const RuleExpr& x : e.args) {
          const Attribute item = attrValue(x);
          if (auto* i = std::get_if<int64_t>(&item)) v.push_back(*i);
          else if (auto* f = std::get_if<float>(&item)) v.push_back(static_cast<int64_t>(*f));
          else throw UserError{"a list attribute holds numbers"};
        }
        return v;
      }
      case RuleExpr::Kind::Unary:
        if (e.text == "-" && e.args[0].kind == RuleExpr::Kind::Number)
          return e.args[0].type == ExprType::Int ? Attribute(static_cast<int64_t>(-e.args[0].number))
                                                 : Attribute(static_cast<float>(-e.args[0].number));
        break;
      case RuleExpr::Kind::Binding:
        if (e.binding >= 0 && m_.attrs[static_cast<size_t>(e.binding)]) return *m_.attrs[static_cast<size_t>(e.binding)];
        break;
      default: break;
    }
    // Anything else is a number over the match: `epsilon: value(eps)`.
    if (std::optional<double> x = evaluateExpr(g_, m_, e, target_)) {
      if (e.type == ExprType::Int || e.type == ExprType::Bool) return static_cast<int64_t>(*x);
      return static_cast<float>(*x);
    }
    throw UserError{"cannot compute an attribute value from this expression"};
  }

  std::vector<int64_t> intList(const RuleExpr& e) {
    Attribute a = attrValue(e);
    if (auto* v = std::get_if<std::vector<int64_t>>(&a)) return *v;
    throw UserError{"expected a list of integers"};
  }

  /// One value (or `n` results of an op call) for a rewrite expression.
  std::vector<ValueId> build(const RuleExpr& e, size_t n, const RewriteStep* step) {
    if (e.kind == RuleExpr::Kind::OpCall) {
      // A literal operand takes the element type of the last tensor operand
      // before it, else after it (`Where(c, x, 0.0)` on double x: a double
      // 0), as literals beside an operator do.
      std::vector<ValueId> inputs(e.args.size(), kNoValue);
      for (size_t i = 0; i < e.args.size(); ++i)
        if (e.args[i].kind != RuleExpr::Kind::Number) inputs[i] = one(e.args[i]);
      auto numeric = [&](size_t j) { return dtypeOf(inputs[j]) == DType::Bool ? DType::Undefined : dtypeOf(inputs[j]); };
      for (size_t i = 0; i < e.args.size(); ++i) {
        if (e.args[i].kind != RuleExpr::Kind::Number) continue;
        DType like = DType::Undefined;
        for (size_t j = i; j-- > 0 && like == DType::Undefined;) like = numeric(j);
        for (size_t j = i + 1; j < e.args.size() && like == DType::Undefined; ++j) like = numeric(j);
        inputs[i] = constant(e.args[i].number, like);
      }
      AttrMap attrs;
      if (step)
        for (const auto& [name, value] : step->attrs) attrs[name] = attrValue(value);
      return nodeResults(e.op->name.str(), std::move(inputs), std::max<size_t>(n, 1), std::move(attrs), step);
    }
    return {one(e)};
  }

  ValueId one(const RuleExpr& e) {
    switch (e.kind) {
      case RuleExpr::Kind::Number: case RuleExpr::Kind::Bool: return constant(e.number, DType::Float32);
      case RuleExpr::Kind::Binding: {
        if (e.binding < -1) {
          const ValueId v = built_[static_cast<size_t>(-e.binding - 2)];
          if (v == kNoValue) throw UserError{"value `" + e.text + "` is used before it is computed"};
          return v;
        }
        const auto b = static_cast<size_t>(e.binding);
        if (m_.attrs[b]) {
          const Attribute& a = *m_.attrs[b];
          if (auto* f = std::get_if<float>(&a)) return constant(*f, DType::Float32);
          if (auto* i = std::get_if<int64_t>(&a)) return constant(static_cast<double>(*i), DType::Float32);
          throw UserError{"attribute `" + e.text + "` is not a number"};
        }
        return m_.values[b];
      }
      case RuleExpr::Kind::OpCall: return build(e, 1, nullptr)[0];
      case RuleExpr::Kind::Unary: {
        const Builtin* op = findBuiltin(e.text, Builtin::Form::Prefix, kInRewrite);
        if (!op) throw UserError{"operator `" + e.text + "` cannot be computed in a rewrite"};
        return lower(*op, {one(e.args[0])});
      }
      case RuleExpr::Kind::Binary: return binary(e);
      case RuleExpr::Kind::Builtin: return builtin(e);
      default: break;
    }
    throw UserError{"this expression cannot be computed in a rewrite"};
  }

  ValueId binary(const RuleExpr& e) {
    if (e.text == "??") {
      const RuleExpr& lhs = e.args[0];
      const ValueId v = lhs.binding >= 0 ? m_.values[static_cast<size_t>(lhs.binding)] : kNoValue;
      return v != kNoValue ? v : one(e.args[1]);
    }
    // Scalar literals take the element type of the tensor on the other side.
    auto side = [&](const RuleExpr& x, const RuleExpr& other) {
      if (x.kind == RuleExpr::Kind::Number) {
        ValueId o = one(other);
        return constant(x.number, dtypeOf(o));
      }
      return one(x);
    };
    const ValueId a = side(e.args[0], e.args[1]);
    const ValueId b = side(e.args[1], e.args[0]);
    const Builtin* op = findBuiltin(e.text, Builtin::Form::Infix, kInRewrite);
    if (!op) throw UserError{"operator `" + e.text + "` cannot be computed in a rewrite"};
    return lower(*op, {a, b});
  }

  /// The ops a rewrite builds for builtin `b` on `args` (Builtins.h).
  ValueId lower(const Builtin& b, const std::vector<ValueId>& args) {
    if (b.lowering.empty()) throw UserError{"`" + b.name + "` cannot be computed in a rewrite"};
    size_t next = 0;
    ValueId result = kNoValue;
    for (const LoweringStep& step : b.lowering) {
      std::vector<ValueId> operands;
      if (result != kNoValue) operands.push_back(result);
      const OpDef* def = catalog_.find(step.op);
      const size_t takes = !def || def->maxOperands() == SIZE_MAX ? args.size() - next : def->minOperands() - operands.size();
      for (size_t i = 0; i < takes && next < args.size(); ++i) operands.push_back(args[next++]);
      result = node(step.op, operands, step.attrs);
    }
    return result;
  }

  ValueId builtin(const RuleExpr& e) {
    const std::string& f = e.text;
    if (const Builtin* b = findBuiltin(f, Builtin::Form::Call, kInRewrite); b && !b->lowering.empty()) {
      std::vector<ValueId> args;
      for (const RuleExpr& a : e.args) args.push_back(one(a));
      return lower(*b, args);
    }
    if (f == "unsqueeze" || f == "reshape") {
      std::vector<int64_t> list = intList(e.args[1]);
      ValueId shape = g_.addConstant(freshName(f == "unsqueeze" ? "axes" : "shape"),
                                     Tensor::fromVector<int64_t>({static_cast<int64_t>(list.size())}, list));
      return node(f == "unsqueeze" ? "Unsqueeze" : "Reshape", {one(e.args[0]), shape});
    }
    if (f == "transpose") return node("Transpose", {one(e.args[0])}, {{"perm", intList(e.args[1])}});
    if (f == "cast") {
      auto dt = dtypeFromName(e.args[1].text);
      if (!dt) throw UserError{"unknown element type `" + e.args[1].text + "`"};
      ValueId out = node("Cast", {one(e.args[0])}, {{"to", static_cast<int64_t>(*dt)}});
      g_.value(out).type.dtype = *dt;
      return out;
    }
    throw UserError{"function `" + f + "` cannot be computed in a rewrite"};
  }

  Graph& g_;
  const OpCatalog& catalog_;
  const Match& m_;
  const Target* target_;
  std::vector<NodeRef>& added_;
  std::vector<ValueId> built_;
};

/// Whether `d` computes a function of its operands by the catalog: an op
/// the catalog declares and does not mark `nondeterministic`. Only these
/// fold or merge (an op fusec does not know might draw random numbers).
bool deterministic(const NodeData& d, const OpCatalog& catalog) {
  const OpDef* def = d.domain.empty() ? catalog.find(d.op.str()) : nullptr;
  return def && !def->nondeterministic;
}

/// Results larger than this are not folded: the node runs on the device
/// instead of a model growing a constant of that size at compile time.
constexpr int64_t kMaxFoldedBytes = int64_t{256} << 20;


/// Shape or Size of a value of static shape `shape`, computed from the shape
/// alone (no stand-in tensor of that size).
std::optional<Tensor> shapeOnly(const NodeData& d, const Shape& shape) {
  const auto rank = static_cast<int64_t>(shape.size());
  if (d.op == "Size") {
    int64_t n = 1;
    for (int64_t x : shape)
      if (__builtin_mul_overflow(n, x, &n)) return std::nullopt;
    return Tensor::scalar<int64_t>(n);
  }
  auto clampAxis = [&](int64_t a) { return std::clamp<int64_t>(a < 0 ? a + rank : a, 0, rank); };
  const int64_t start = clampAxis(d.attrInt("start", 0)), end = clampAxis(d.attrInt("end", rank));
  std::vector<int64_t> dims(shape.begin() + start, shape.begin() + std::max(start, end));
  return Tensor::fromVector<int64_t>({static_cast<int64_t>(dims.size())}, dims);
}

/// Folds one node if all its operands are constants, or if it is a Shape,
/// Size or EyeLike of a value with a static shape (its result depends on no
/// data).
/// Results whose size is unknown or above kMaxFoldedBytes stay nodes.
/// Returns true if folded.
Expected<bool> foldNode(Graph& g, NodeRef n, const OpCatalog& catalog) {
  const NodeData& d = g.node(n);
  const OpDef* def = d.domain.empty() ? catalog.find(d.op.str()) : nullptr;
  if (!d.domain.empty() || !(interpreterSupports(d.op.str()) || (def && def->semantics)) || d.outputs.empty())
    return false;
  if (!deterministic(d, catalog)) return false;
  const bool ofShape = (d.op == "Shape" || d.op == "Size" || d.op == "EyeLike") && d.inputs.size() == 1 &&
                       d.inputs[0] != kNoValue && !g.isConstant(d.inputs[0]) &&
                       g.value(d.inputs[0]).type.isStatic() && g.value(d.inputs[0]).type.dtype != DType::String;
  std::optional<Tensor> shapeResult, standIn;
  std::vector<const Tensor*> operands;
  if (ofShape && d.op != "EyeLike") {
    shapeResult = shapeOnly(d, g.value(d.inputs[0]).type.staticShape());
    if (!shapeResult) return false;
  } else if (ofShape) {  // EyeLike: a stand-in as large as its result
    const TensorType& in = g.value(d.inputs[0]).type;
    const std::optional<int64_t> bytes = checkedBytes(in.staticShape(), in.dtype);
    if (!bytes || *bytes > kMaxFoldedBytes) return false;
    standIn.emplace(g.value(d.inputs[0]).type.dtype, g.value(d.inputs[0]).type.staticShape());
    operands.push_back(&*standIn);
  }
  int64_t operandBytes = 0;
  for (ValueId v : ofShape ? std::vector<ValueId>{} : d.inputs) {
    if (v == kNoValue) {
      operands.push_back(nullptr);
      continue;
    }
    if (!g.isConstant(v)) return false;
    operands.push_back(g.value(v).constant.get());
    operandBytes += static_cast<int64_t>(g.value(v).constant->byteSize());
  }
  // Bound what folding allocates: by the inferred result types, or, where
  // inference could not tell, fold only shape-sized arithmetic.
  for (ValueId v : d.outputs) {
    if (v == kNoValue || ofShape) continue;
    const TensorType& type = g.value(v).type;
    if (type.isStatic()) {
      const std::optional<int64_t> bytes = checkedBytes(type.staticShape(), type.dtype);
      if (!bytes || *bytes > kMaxFoldedBytes) return false;  // too large (or overflowing): it stays a node
    } else if (operandBytes > static_cast<int64_t>(kInferenceDataBytes)) {
      return false;
    }
  }
  std::vector<Tensor> results;
  if (shapeResult) {
    results.push_back(std::move(*shapeResult));
  } else {
    Expected<std::vector<Tensor>> evaluated = evaluateNode(g, n, operands, &catalog);
    if (!evaluated) return evaluated.error();
    results = std::move(evaluated.value());
  }
  const std::vector<ValueId> outputs = d.outputs;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i] == kNoValue) continue;
    const std::string name = g.value(outputs[i]).name;
    g.value(outputs[i]).name = name + "_unfolded";
    ValueId c = g.addConstant(name, std::move(results[i]));
    g.replaceAllUsesWith(outputs[i], c);
  }
  g.removeNode(n);
  return true;
}

std::vector<NodeRef> orderedNodes(const Graph& g) {
  Expected<std::vector<NodeRef>> order = g.topologicalOrder();
  return order ? order.value() : g.nodes();
}

}  // namespace

Expected<size_t> foldConstants(Graph& g, const OpCatalog& catalog) {
  // One sweep in topological order reaches the fixpoint: each node's
  // operands are final (folded or typed) when it is visited.
  size_t folded = 0;
  for (NodeRef n : orderedNodes(g)) {
    inferNodeTypes(g, n);
    Expected<bool> f = foldNode(g, n, catalog);
    if (!f) return f.error();
    folded += f.value();
  }
  return folded;
}

size_t trimDeadConvTaps(Graph& g) {
  size_t trimmed = 0;
  for (NodeRef n : g.nodes()) {
    const NodeData& d = g.node(n);
    if (d.op != "Conv" || !d.domain.empty() || d.inputs.size() < 2 || d.inputs[0] == kNoValue ||
        d.inputs[1] == kNoValue || d.attrString("auto_pad", "NOTSET") != "NOTSET")
      continue;
    const TensorType& xt = g.value(d.inputs[0]).type;
    const std::shared_ptr<const Tensor> w = g.value(d.inputs[1]).constant;
    if (!xt.isStatic() || !w || w->rank() < 3 || xt.dims->size() != static_cast<size_t>(w->rank())) continue;
    const Shape x = xt.staticShape();
    const size_t spatial = static_cast<size_t>(w->rank()) - 2;
    // The window as the interpreter and the kernels see it (attributes
    // bounded, output sizes computed); a window it refuses is left alone.
    Expected<WindowGeometry> geometry =
        windowGeometry(d, Shape(x.begin() + 2, x.end()), Shape(w->shape().begin() + 2, w->shape().end()), false);
    if (!geometry) continue;
    const WindowGeometry& win = geometry.value();
    const std::vector<int64_t>& dil = win.dilations;
    std::vector<int64_t> pads = win.padBegin;
    pads.insert(pads.end(), win.padEnd.begin(), win.padEnd.end());
    // Per spatial axis, the first and last taps that read the input at some
    // output position (input index o*s - pb + k*dil in [0, in) for some o).
    std::vector<int64_t> lo(spatial), hi(spatial);
    bool change = false, valid = true;
    for (size_t a = 0; a < spatial && valid; ++a) {
      const int64_t in = win.in[a], k = win.kernel[a], s = win.strides[a], dl = dil[a], outs = win.out[a];
      const int64_t pb = win.padBegin[a], pe = win.padEnd[a];
      if (in <= 0 || pb < 0 || pe < 0) {
        valid = false;
        break;
      }
      auto live = [&](int64_t t) {  // some o in [0, outs) with 0 <= o*s - pb + t*dl < in
        const int64_t base = t * dl - pb;  // input index at o = 0
        const int64_t first = base >= 0 ? 0 : (-base + s - 1) / s;  // first o with index >= 0
        return first < outs && first * s + base < in;
      };
      lo[a] = 0;
      while (lo[a] < k && !live(lo[a])) ++lo[a];
      hi[a] = k - 1;
      while (hi[a] > lo[a] && !live(hi[a])) --hi[a];
      if (lo[a] == k) {  // no tap reads the input: the output is the bias alone; left as is
        valid = false;
        break;
      }
      // The new pads must stay non-negative.
      if (pb - lo[a] * dl < 0) lo[a] = 0;
      if (pe - (k - 1 - hi[a]) * dl < 0) hi[a] = k - 1;
      change |= lo[a] > 0 || hi[a] < k - 1;
    }
    if (!valid || !change) continue;
    // The sliced weight; the dropped weights must be finite.
    Shape kept = w->shape();
    for (size_t a = 0; a < spatial; ++a) kept[a + 2] = hi[a] - lo[a] + 1;
    Tensor sliced(w->dtype(), kept);
    const size_t bytes = dtypeSize(w->dtype());
    const bool floating = isFloatingPoint(w->dtype());
    bool finite = true;
    std::vector<int64_t> idx(static_cast<size_t>(w->rank()), 0);
    int64_t out = 0;
    for (int64_t i = 0; i < w->numel(); ++i) {
      int64_t rest = i;
      for (size_t r = idx.size(); r-- > 0;) {
        idx[r] = rest % w->dim(static_cast<int64_t>(r));
        rest /= w->dim(static_cast<int64_t>(r));
      }
      bool inside = true;
      for (size_t a = 0; a < spatial; ++a) inside &= idx[a + 2] >= lo[a] && idx[a + 2] <= hi[a];
      if (inside) {
        std::memcpy(sliced.raw() + out++ * bytes, w->raw() + i * bytes, bytes);
      } else if (floating && !std::isfinite(w->scalarAt(i))) {
        finite = false;
        break;
      }
    }
    if (!finite) continue;
    for (size_t a = 0; a < spatial; ++a) {
      pads[a] -= lo[a] * dil[a];
      pads[a + spatial] -= (w->dim(static_cast<int64_t>(a) + 2) - 1 - hi[a]) * dil[a];
    }
    std::vector<int64_t> shape(kept.begin() + 2, kept.end());
    NodeData& md = g.node(n);
    md.attrs["kernel_shape"] = shape;
    md.attrs["pads"] = pads;
    // A fresh name: convs sharing one weight get a slice each.
    const std::string name = g.value(d.inputs[1]).name + "_taps" + std::to_string(g.valueCapacity());
    g.setInput(n, 1, g.addConstant(name, std::move(sliced)));
    ++trimmed;
  }
  return trimmed;
}

size_t eliminateDeadCode(Graph& g) {
  size_t removed = 0;
  std::vector<NodeRef> order = orderedNodes(g);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    bool live = false;
    for (ValueId v : g.node(*it).outputs)
      if (v != kNoValue) live |= !g.uses(v).empty() || g.isGraphOutput(v);
    if (live) continue;
    g.removeNode(*it);
    ++removed;
  }
  return removed;
}

size_t eliminateCommonSubexpressions(Graph& g, const OpCatalog& catalog) {
  // Key: op, domain, attributes (printed), operands (constants up to 1 MiB
  // by content: a hash in the key, the bytes compared when keys meet, so
  // exporters' per-layer copies of one mask or shape constant merge).
  constexpr size_t kContentKeyedBytes = size_t{1} << 20;
  auto byContent = [&](ValueId v) {
    return v != kNoValue && g.value(v).constant && g.value(v).constant->byteSize() <= kContentKeyedBytes;
  };
  std::unordered_map<ValueId, std::string> constantKeys;
  auto operandKey = [&](ValueId v) -> std::string {
    if (v == kNoValue) return "-";
    if (!byContent(v)) return "v" + std::to_string(v);
    auto [it, fresh] = constantKeys.emplace(v, std::string());
    if (fresh) {
      const Tensor& t = *g.value(v).constant;
      const std::string_view bytes(reinterpret_cast<const char*>(t.raw()), t.byteSize());
      it->second = "c" + std::to_string(static_cast<int>(t.dtype())) + shapeToString(t.shape()) + "#" +
                   std::to_string(std::hash<std::string_view>{}(bytes));
    }
    return it->second;
  };
  auto sameOperands = [&](const NodeData& a, const NodeData& b) {
    for (size_t i = 0; i < a.inputs.size(); ++i) {
      const ValueId x = a.inputs[i], y = b.inputs[i];
      if (x == y) continue;
      if (!byContent(x) || !byContent(y)) return false;
      const Tensor &s = *g.value(x).constant, &t = *g.value(y).constant;
      if (s.dtype() != t.dtype() || s.shape() != t.shape() || std::memcmp(s.raw(), t.raw(), s.byteSize()) != 0) return false;
    }
    return true;
  };
  auto attrKey = [](const AttrMap& attrs) {
    std::ostringstream os;
    for (const auto& [k, a] : attrs) {
      os << k << '=';
      std::visit([&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, float> || std::is_same_v<T, std::string>) os << v;
        else if constexpr (std::is_same_v<T, Tensor>) os.write(reinterpret_cast<const char*>(v.raw()), static_cast<std::streamsize>(v.byteSize()));
        else if constexpr (std::is_same_v<T, OpaqueAttr>) os << v.serializedProto;
        else for (const auto& x : v) os << x << ',';
      }, a);
      os << ';';
    }
    return os.str();
  };
  std::unordered_map<std::string, NodeRef> seen;
  size_t merged = 0;
  for (NodeRef n : orderedNodes(g)) {
    const NodeData& d = g.node(n);
    if (!deterministic(d, catalog)) continue;
    std::string key = d.domain + "|" + d.op.str() + "|" + attrKey(d.attrs) + "|" + std::to_string(d.outputs.size());
    for (ValueId v : d.inputs) key += "|" + operandKey(v);
    auto [it, fresh] = seen.emplace(key, n);
    if (fresh) continue;
    const NodeData& keep = g.node(it->second);
    if (!sameOperands(d, keep)) continue;  // two constants' hashes collide: both stay
    const std::vector<ValueId> outs = d.outputs;
    for (size_t i = 0; i < outs.size(); ++i)
      if (outs[i] != kNoValue && keep.outputs[i] != kNoValue) g.replaceKeepingInterface(outs[i], keep.outputs[i]);
    bool dead = true;
    for (ValueId v : outs)
      if (v != kNoValue) dead &= g.uses(v).empty() && !g.isGraphOutput(v);
    if (dead) g.removeNode(n);
    ++merged;
  }
  return merged;
}

Expected<RewriteStats> rewriteToFixpoint(Graph& g, const RuleSet& rules, const Target* target,
                                         const RewriteOptions& options) {
  RewriteStats stats;
  Matcher matcher(rules, target);
  const size_t cap = std::max<size_t>(64, g.numNodes() * options.maxRewritesPerNode);
  // Rules by priority, then declaration order, per root op.
  auto ordered = [&](const std::string& op) {
    std::vector<const Rule*> rs;
    for (const Rule* r : matcher.rulesFor(op))
      if (r->kind == Rule::Kind::Rewrite) rs.push_back(r);
    std::stable_sort(rs.begin(), rs.end(), [](const Rule* a, const Rule* b) { return a->priority > b->priority; });
    return rs;
  };
  std::deque<NodeRef> worklist;
  std::unordered_set<NodeRef> queued;
  auto push = [&](NodeRef n) {
    if (queued.insert(n).second) worklist.push_back(n);
  };
  for (NodeRef n : orderedNodes(g)) push(n);
  std::unordered_set<NodeRef> alive(worklist.begin(), worklist.end());
  while (!worklist.empty()) {
    NodeRef n = worklist.front();
    worklist.pop_front();
    queued.erase(n);
    if (!alive.count(n)) continue;
    for (const Rule* rule : ordered(g.node(n).op.str())) {
      std::optional<Match> m = matcher.matchAt(g, n, *rule);
      if (!m) continue;
      if (stats.rewrites >= cap) {
        stats.capHit = true;
        stats.capRule = rule->name;
        return stats;
      }
      std::vector<NodeRef> added;
      Status st = RewriteBuilder(g, rules.catalog, *m, target, added).apply();
      if (!st) return st.error();
      ++stats.rewrites;
      ++stats.fired[rule->name];
      for (NodeRef a : added) stats.builtBy[g.node(a).id] = rule->name;
      // Fold what the rewrite computed from constants, drop what it replaced.
      for (NodeRef a : added) {
        Expected<bool> folded = foldNode(g, a, rules.catalog);
        if (!folded) return folded.error();
        if (folded.value()) ++stats.nodesFolded;
        else alive.insert(a);
      }
      std::erase_if(added, [&](NodeRef a) { return !alive.count(a); });
      // Remove what the rewrite left dead: the matched nodes and, through
      // their operands, producers that nothing reads any more.
      std::vector<NodeRef> candidates;
      for (const auto& ns : m->nodes) candidates.insert(candidates.end(), ns.begin(), ns.end());
      while (!candidates.empty()) {
        NodeRef c = candidates.back();
        candidates.pop_back();
        if (!alive.count(c)) continue;
        bool live = false;
        for (ValueId v : g.node(c).outputs)
          if (v != kNoValue) live |= !g.uses(v).empty() || g.isGraphOutput(v);
        if (live) continue;
        for (ValueId v : g.node(c).inputs)
          if (v != kNoValue)
            if (auto p = g.producer(v)) candidates.push_back(*p);
        alive.erase(c);
        g.removeNode(c);
        ++stats.nodesRemoved;
      }
      // Revisit what the rewrite added and what now reads it.
      for (NodeRef a : added) {
        if (!alive.count(a)) continue;
        push(a);
        for (NodeRef c : g.consumers(a)) push(c);
      }
      for (const auto& ns : m->nodes)
        for (NodeRef matched : ns)
          if (alive.count(matched)) push(matched);
      break;
    }
  }
  return stats;
}

Expected<RewriteStats> runRewritePipeline(Graph& g, const RuleSet& rules, const Target* target,
                                          const RewriteOptions& options) {
  Expected<size_t> folded = foldConstants(g, rules.catalog);
  if (!folded) return folded.error();
  Expected<RewriteStats> stats = rewriteToFixpoint(g, rules, target, options);
  if (!stats) return stats;
  if (stats->capHit) {
    // A rule that matches its own output would rewrite forever: the graph
    // is half rewritten, so nothing compiled from it could be trusted.
    const auto most = std::max_element(stats->fired.begin(), stats->fired.end(),
                                       [](const auto& a, const auto& b) { return a.second < b.second; });
    const Rule* r = rules.find(stats->capRule);
    return Error{fmt::format("rewriting stopped at the cap of {} rewrites: rule `{}`{} matched again (it fired {} "
                             "times; `{}` fired most, {} times); a rule whose rewrite matches its own pattern never "
                             "reaches a fixpoint",
                             stats->rewrites, stats->capRule, r ? " (pack " + r->pack + ")" : std::string(),
                             stats->fired[stats->capRule], most->first, most->second)};
  }
  stats->nodesFolded += folded.value();
  stats->convsTrimmed = trimDeadConvTaps(g);
  stats->nodesRemoved += eliminateCommonSubexpressions(g, rules.catalog);
  stats->nodesRemoved += eliminateDeadCode(g);
  std::vector<std::string> problems = g.verify();
  if (!problems.empty()) return Error{"internal error: the rewritten graph is malformed: " + problems.front()};
  return stats;
}

}  // namespace fusec
