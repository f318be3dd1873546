/// Elementwise and broadcast ops run from their catalog semantics: the
/// op's scalar expression (OpCatalog.h), with the node's attributes and
/// present operands bound, is compiled once per node into a flat program
/// over registers, then run per element of the broadcast result. Functions
/// and operators evaluate through the builtin table (Builtins.h), the same
/// table the kernel emitter spells, so the catalog, the interpreter and the
/// device compute the same thing by construction, and an op a pack declares
/// runs here too.
#include <algorithm>
#include <cmath>
#include <limits>

#include "KernelUtil.h"
#include "fusec/engine/Builtins.h"

namespace fusec::interp {
namespace {

/// A compiled expression: instruction i writes register i.
class ScalarProgram {
 public:
  /// `slots[p]`: the operand slots of parameter p (several for a variadic
  /// one, none when absent); `attrs[a]`: attribute a's numeric value.
  ScalarProgram(const ScalarExpr& e, const std::vector<std::vector<uint32_t>>& slots, const std::vector<double>& attrs)
      : slots_(slots), attrs_(attrs) {
    result_ = compile(e);
  }

  double run(const double* operands) const {
    double* r = regs_.data();
    double* args = args_.data();
    for (size_t i = 0; i < code_.size(); ++i) {
      const Instr& in = code_[i];
      if (in.operand >= 0) {
        r[i] = operands[in.operand];
      } else if (!in.fn) {
        r[i] = in.constant;
      } else {
        for (size_t k = 0; k < in.args.size(); ++k) args[k] = r[in.args[k]];
        r[i] = in.fn(args, in.args.size());
      }
    }
    return r[result_];
  }

 private:
  struct Instr {
    int operand = -1;  ///< load operand slot
    double constant = 0;
    double (*fn)(const double*, size_t) = nullptr;
    std::vector<uint32_t> args;
  };

  uint32_t emit(Instr in) {
    code_.push_back(std::move(in));
    regs_.push_back(0);
    return static_cast<uint32_t>(code_.size() - 1);
  }
  uint32_t constant(double v) {
    Instr in;
    in.constant = v;
    return emit(in);
  }

  uint32_t compile(const ScalarExpr& e) {
    using K = ScalarExpr::Kind;
    switch (e.kind) {
      case K::Constant: return constant(e.value);
      case K::Attr: return constant(attrs_.at(e.index));
      case K::Operand: {
        const auto& s = slots_.at(e.index);
        if (s.empty()) return constant(std::numeric_limits<double>::quiet_NaN());
        Instr in;
        in.operand = static_cast<int>(s.front());
        return emit(in);
      }
      case K::Default: {
        const ScalarExpr& first = e.args[0];
        const bool present = first.kind != K::Operand || !slots_.at(first.index).empty();
        return compile(present ? e.args[0] : e.args[1]);
      }
      case K::Unary: case K::Binary: case K::Call: break;
    }
    const Builtin::Form form = e.kind == K::Unary ? Builtin::Form::Prefix
                               : e.kind == K::Binary ? Builtin::Form::Infix
                                                     : Builtin::Form::Call;
    const Builtin* b = findBuiltin(e.op, form, kInSemantics);
    if (!b || !b->eval) throw UserError{"`" + e.op + "` has no evaluation", true};
    Instr in;
    in.fn = b->eval;
    for (const ScalarExpr& a : e.args) {
      if (a.kind == K::Operand && e.kind == K::Call && b->maxArgs == SIZE_MAX) {  // all values of a variadic operand
        for (uint32_t s : slots_.at(a.index)) {
          Instr load;
          load.operand = static_cast<int>(s);
          in.args.push_back(emit(load));
        }
        continue;
      }
      in.args.push_back(compile(a));
    }
    args_.resize(std::max(args_.size(), in.args.size()));
    return emit(std::move(in));
  }

  const std::vector<std::vector<uint32_t>>& slots_;
  const std::vector<double>& attrs_;
  std::vector<Instr> code_;
  mutable std::vector<double> regs_, args_;
  uint32_t result_ = 0;
};

/// The numeric value of attribute `spec` on the node (or its default).
double attrValue(const KernelContext& ctx, const AttrSpec& spec) {
  const Attribute* a = ctx.node().attr(spec.name);
  if (!a && spec.defaultValue) a = &*spec.defaultValue;
  if (!a) {
    if (spec.required) ctx.fail("attribute `" + spec.name + "` is required");
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (const auto* i = std::get_if<int64_t>(a)) return static_cast<double>(*i);
  if (const auto* f = std::get_if<float>(a)) return static_cast<double>(*f);
  return std::numeric_limits<double>::quiet_NaN();  // not numeric: unused by semantics (checked by the front end)
}

bool isWideInteger(DType t) { return t == DType::Int64 || t == DType::UInt64; }

}  // namespace

bool catalogRuns(const OpDef& op, const NodeData& node, int64_t opset, const std::vector<const Tensor*>& operands) {
  if (!op.semantics || (op.kind != OpKind::Elementwise && op.kind != OpKind::Broadcast)) return false;
  if (op.resultType == ResultType::Any || op.results.size() != 1 || node.outputs.size() != 1) return false;
  // The catalog states opset-17 semantics; older forms (Clip's bounds as
  // attributes, legacy broadcasting by `axis`, per-channel PRelu) run on
  // their own kernels.
  if ((op.name == "Clip" && opset < 11) || (op.name == "PRelu" && opset < 7) || node.attr("broadcast") ||
      node.attr("axis"))
    return false;
  // 64-bit integers keep exact integer kernels: a double holds 53 bits.
  for (const Tensor* t : operands)
    if (t && (isWideInteger(t->dtype()) || t->dtype() == DType::String)) return false;
  return true;
}

void runFromCatalog(KernelContext& ctx, const OpDef& op) {
  // Operand slots per parameter: a variadic parameter takes the rest.
  std::vector<std::vector<uint32_t>> slots(op.params.size());
  std::vector<const Tensor*> present;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    const size_t p = std::min(i, op.params.size() - 1);
    if (i >= op.params.size() && !op.params.back().variadic) ctx.fail("too many operands");
    if (!ctx.has(i)) continue;
    slots[p].push_back(static_cast<uint32_t>(present.size()));
    present.push_back(&ctx.in(i));
  }
  for (size_t p = 0; p < op.params.size(); ++p)
    if (slots[p].empty() && !op.params[p].optional && !op.params[p].variadic)
      ctx.fail("operand `" + op.params[p].name + "` is required");
  if (present.empty()) ctx.fail("needs at least one operand");
  std::vector<double> attrs;
  for (const AttrSpec& a : op.attrs) attrs.push_back(attrValue(ctx, a));
  const ScalarProgram program(*op.semantics, slots, attrs);

  std::vector<Shape> shapes;
  for (const Tensor* t : present) shapes.push_back(t->shape());
  const Shape shape = broadcastShapes(ctx, shapes);
  if (op.kind == OpKind::Elementwise && shape != present[0]->shape())
    ctx.fail("operand shapes differ for an elementwise op");
  // Operands as doubles, read through broadcast strides.
  const size_t k = present.size();
  std::vector<Tensor> values;
  std::vector<Shape> strides;
  for (const Tensor* t : present) {
    values.push_back(t->dtype() == DType::Float64 ? *t : t->castTo(DType::Float64));
    strides.push_back(broadcastStrides(t->shape(), shape));
  }
  const DType in = present[0]->dtype();
  const DType out = op.resultType == ResultType::Bool ? DType::Bool
                    : op.resultType == ResultType::Float ? DType::Float32
                    : op.resultType == ResultType::Int64 ? DType::Int64
                                                         : in;
  Tensor result(DType::Float64, shape);
  double* dst = result.data<double>();
  const int64_t n = shapeNumel(shape), rank = static_cast<int64_t>(shape.size());
  std::vector<int64_t> index(static_cast<size_t>(rank), 0), offset(k, 0);
  std::vector<double> args(k);
  for (int64_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < k; ++j) args[j] = values[j].data<double>()[offset[j]];
    dst[i] = program.run(args.data());
    // Next coordinate (row-major), moving each operand's offset along.
    for (int64_t d = rank - 1; d >= 0; --d) {
      const auto du = static_cast<size_t>(d);
      for (size_t j = 0; j < k; ++j) offset[j] += strides[j][du];
      if (++index[du] < shape[du]) break;
      for (size_t j = 0; j < k; ++j) offset[j] -= strides[j][du] * shape[du];
      index[du] = 0;
    }
  }
  if (out == DType::Float64) return ctx.setOutput(0, std::move(result));
  if (out == DType::Bool || !isFloatingPoint(out)) {
    // Integers compute exactly in doubles (at most 32 bits) and wrap into
    // their type; a quotient by zero has no integer value.
    Tensor wide(DType::Int64, shape);
    for (int64_t i = 0; i < n; ++i) {
      const double v = dst[i];
      if (!std::isfinite(v) || std::abs(v) >= 9.2e18) ctx.fail("integer division by zero or overflow");
      wide.data<int64_t>()[i] = out == DType::Bool ? int64_t(v != 0) : static_cast<int64_t>(v);
    }
    return ctx.setOutput(0, wide.castTo(out));
  }
  ctx.setOutput(0, result.castTo(out));
}

}  // namespace fusec::interp
