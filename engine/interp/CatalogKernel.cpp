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
    // Constants' columns point into registers_, which compile() grew: set them now.
    for (size_t i = 0; i < code_.size(); ++i)
      if (!code_[i].fn && code_[i].operand < 0) columns_[i] = registers_.data() + code_[i].slot * kBlock;
  }

  /// Runs the program over `n` (at most kBlock) elements: `operands[j]`
  /// is operand slot j's column, `out` receives the results.
  void run(const double* const* operands, size_t n, double* out) const {
    for (size_t i = 0; i < code_.size(); ++i) {
      const Instr& in = code_[i];
      if (in.operand >= 0) {
        columns_[i] = operands[in.operand];
        continue;
      }
      if (!in.fn) continue;  // a constant's column, filled when compiled
      double* r = registers_.data() + in.slot * kBlock;
      columns_[i] = r;
      if (in.args.size() == 1) {
        const double* a = columns_[in.args[0]];
        for (size_t e = 0; e < n; ++e) r[e] = in.fn(&a[e], 1);
      } else if (in.args.size() == 2) {
        const double *a = columns_[in.args[0]], *b = columns_[in.args[1]];
        double args[2];
        for (size_t e = 0; e < n; ++e) {
          args[0] = a[e];
          args[1] = b[e];
          r[e] = in.fn(args, 2);
        }
      } else {
        double* args = args_.data();
        for (size_t e = 0; e < n; ++e) {
          for (size_t k = 0; k < in.args.size(); ++k) args[k] = columns_[in.args[k]][e];
          r[e] = in.fn(args, in.args.size());
        }
      }
    }
    std::copy(columns_[result_], columns_[result_] + n, out);
  }

  /// Elements a run() computes at most.
  static constexpr size_t kBlock = 512;

 private:
  struct Instr {
    int operand = -1;  ///< load operand slot
    size_t slot = 0;   ///< its column in registers_ (a constant's or a result's; a load has none)
    double constant = 0;
    double (*fn)(const double*, size_t) = nullptr;
    std::vector<uint32_t> args;
  };

  uint32_t emit(Instr in) {
    if (in.operand < 0) {  // a load reads its operand's column; others have their own
      in.slot = registers_.size() / kBlock;
      registers_.resize(registers_.size() + kBlock, in.constant);  // a constant's column filled once
    }
    code_.push_back(std::move(in));
    columns_.push_back(nullptr);
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
  /// A column of kBlock doubles per constant and per result: constants'
  /// filled once, results' per block; columns_ points at each
  /// instruction's values (a load's straight at its operand's column).
  mutable std::vector<double> registers_, args_;
  mutable std::vector<const double*> columns_;
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
  // Operands read through broadcast strides: float32 and float64 where
  // they are, other types converted to doubles first.
  const size_t k = present.size();
  std::vector<Tensor> converted(k);
  std::vector<const float*> floats(k, nullptr);
  std::vector<const double*> doubles(k, nullptr);
  std::vector<Shape> strides;
  for (size_t j = 0; j < k; ++j) {
    const Tensor* t = present[j];
    if (t->dtype() == DType::Float32) {
      floats[j] = t->data<float>();
    } else if (t->dtype() == DType::Float64) {
      doubles[j] = t->data<double>();
    } else {
      converted[j] = t->castTo(DType::Float64);
      doubles[j] = converted[j].data<double>();
    }
    strides.push_back(broadcastStrides(t->shape(), shape));
  }
  const DType in = present[0]->dtype();
  const DType out = op.resultType == ResultType::Bool ? DType::Bool
                    : op.resultType == ResultType::Float ? DType::Float32
                    : op.resultType == ResultType::Int64 ? DType::Int64
                                                         : in;
  const int64_t n = shapeNumel(shape);
  // A float32 result is rounded a block at a time (as castTo would), with
  // no result in doubles.
  const bool toFloat = out == DType::Float32;
  Tensor result = Tensor::uninitialized(toFloat ? DType::Float32 : DType::Float64, shape);  // every element is written
  std::vector<double> block(toFloat ? ScalarProgram::kBlock : 0);
  // Dims merged where every operand walks them as one (a weight [M, C, 3, 3]
  // times a per-channel [M, 1, 1, 1] is [M, 9C] by [M, 1]): the innermost
  // run is then long, and the operands' values are gathered a row segment
  // at a time into the columns of a block.
  Shape dims;
  std::vector<Shape> steps(k);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !dims.empty();
    for (size_t j = 0; j < k && merge; ++j) merge = steps[j].back() == strides[j][d] * shape[d];
    if (merge) {
      dims.back() *= shape[d];
      for (size_t j = 0; j < k; ++j) steps[j].back() = strides[j][d];
    } else {
      dims.push_back(shape[d]);
      for (size_t j = 0; j < k; ++j) steps[j].push_back(strides[j][d]);
    }
  }
  if (dims.empty()) {
    dims.push_back(1);
    for (size_t j = 0; j < k; ++j) steps[j].push_back(0);
  }
  const size_t rank = dims.size(), last = rank - 1;
  // Blocks hold a column per operand: shorter for a variadic op with
  // thousands of operands, so the columns stay within ~8 MB.
  const size_t B = std::clamp<size_t>((size_t{1} << 20) / k, 1, ScalarProgram::kBlock);
  std::vector<double> columns(k * B);
  std::vector<const double*> operandColumns(k);
  for (size_t j = 0; j < k; ++j) operandColumns[j] = columns.data() + j * B;
  std::vector<int64_t> index(rank, 0), offset(k, 0);  // the row's outer index and each operand's offset at the row's start
  int64_t along = 0;                                  // position in the current row
  for (int64_t done = 0; done < n;) {
    size_t filled = 0;
    while (filled < B && done + static_cast<int64_t>(filled) < n) {
      const int64_t take = std::min<int64_t>(dims[last] - along, static_cast<int64_t>(B - filled));
      for (size_t j = 0; j < k; ++j) {
        const int64_t step = steps[j][last], at = offset[j] + along * step;
        double* col = columns.data() + j * B + filled;
        if (floats[j])
          for (int64_t e = 0; e < take; ++e) col[e] = floats[j][at + e * step];
        else
          for (int64_t e = 0; e < take; ++e) col[e] = doubles[j][at + e * step];
      }
      filled += static_cast<size_t>(take);
      along += take;
      if (along < dims[last]) continue;
      along = 0;  // next row (row-major over the outer dims)
      for (size_t d = last; d-- > 0;) {
        for (size_t j = 0; j < k; ++j) offset[j] += steps[j][d];
        if (++index[d] < dims[d]) break;
        for (size_t j = 0; j < k; ++j) offset[j] -= steps[j][d] * dims[d];
        index[d] = 0;
      }
    }
    if (toFloat) {
      program.run(operandColumns.data(), filled, block.data());
      float* to = result.data<float>() + done;
      for (size_t e = 0; e < filled; ++e) to[e] = static_cast<float>(block[e]);
    } else {
      program.run(operandColumns.data(), filled, result.data<double>() + done);
    }
    done += static_cast<int64_t>(filled);
  }
  if (toFloat) return ctx.setOutput(0, std::move(result));
  const double* dst = result.data<double>();
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
