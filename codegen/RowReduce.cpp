/// The row_reduce family; see Emitters.h.
#include "Emitters.h"

#include <functional>
#include <sstream>

#include "ElementwiseEmitter.h"
#include "FamilyRegistry.h"

namespace fusec::codegen {
namespace {

constexpr int kLocal = 64;        // work-items per row; a power of two for the tree
constexpr int kRegisterRow = 16;  // rows up to kLocal * this stay in registers
/// A work-item's row (vectorRowPerWorkItem) of up to this many vectors
/// stays in registers between passes: 8 float16 are a quarter of
/// AVX-512's registers and all of AVX2's 16 ymm (spilled to the stack,
/// which the passes would otherwise read from out0 in the cache anyway).
constexpr int64_t kRegisterVectors = 8;

/// How many rows a vectorRowPerWorkItem work-item interleaves: up to
/// three, a divisor of the row count, while their vectors held at once
/// (`vectors` each) fit kRowItemVectors and enough work-items are left to
/// spread over the cores.
constexpr int64_t kRowItemVectors = 24;
int64_t rowsPerItem(int64_t rows, int64_t vectors) {
  for (int64_t r = 3; r > 1; --r)
    if (rows % r == 0 && r * vectors <= kRowItemVectors && rows / r >= 64) return r;
  return 1;
}

/// The length of the contiguous row `d` reduces, from the shape `xs` of
/// its input; 0 when the reduced elements are not one contiguous row.
/// Normalizations reduce the trailing axes from `axis` (Softmax and
/// LogSoftmax before opset 13 flatten there too); reductions name only the
/// innermost axis; global pools and instance norm reduce each plane.
int64_t rowLength(const Graph& g, const NodeData& d, const Shape& xs) {
  const int64_t rank = static_cast<int64_t>(xs.size());
  auto trailing = [&](int64_t axis) -> int64_t {
    if (axis < -rank || axis >= rank) return 0;
    if (axis < 0) axis += rank;
    int64_t n = 1;
    for (int64_t a = axis; a < rank; ++a) n *= xs[static_cast<size_t>(a)];
    return n;
  };
  if (d.op == "GlobalAveragePool" || d.op == "GlobalMaxPool" || d.op == "InstanceNormalization")
    return rank >= 3 ? shapeNumel(xs) / (xs[0] * xs[1]) : 0;
  if (d.op == "LayerNormalization") return trailing(d.attrInt("axis", -1));
  if ((d.op == "Softmax" || d.op == "LogSoftmax" || d.op == "Hardmax") && g.info.defaultOpset() < 13)
    return trailing(d.attrInt("axis", 1));
  const std::optional<std::vector<int64_t>> axes = reducedAxes(g, d, rank);
  return axes && *axes == std::vector<int64_t>{rank - 1} ? xs.back() : 0;
}

}  // namespace

bool isRowReduction(const Graph& g, NodeRef n) {
  static const std::set<std::string> kOps = {"Softmax", "LogSoftmax", "Hardmax", "LayerNormalization", "ReduceSum",
                                             "ReduceMean",      "ReduceMax",        "ReduceMin",          "ReduceL2",
                                             "ReduceSumSquare", "GlobalAveragePool", "GlobalMaxPool", "InstanceNormalization"};
  const NodeData& d = g.node(n);
  if (!d.domain.empty() || !kOps.count(d.op.str()) || d.inputs.empty() || d.inputs[0] == kNoValue) return false;
  const TensorType& t = g.value(d.inputs[0]).type;
  if (!t.isStatic() || t.dims->empty()) return false;
  return rowLength(g, d, t.staticShape()) > 0;
}

namespace {

/// A row_reduce group taken apart: its one row reduction, the members it
/// reads (the prologue) and the members after it (the epilogue, reading
/// the reduced value broadcast back along the row: RMSNorm's
/// `x * rsqrt(mean(x^2) + eps) * w`), each in the group's topological
/// order. nullopt unless exactly one member is a row reduction.
struct RowGroup {
  NodeRef reduction;
  std::vector<NodeRef> prologue, epilogue;
};

std::optional<RowGroup> splitRowGroup(const Graph& g, const std::vector<NodeRef>& members) {
  std::optional<NodeRef> reduction;
  for (NodeRef n : members)
    if (isRowReduction(g, n)) {
      if (reduction) return std::nullopt;
      reduction = n;
    }
  if (!reduction) return std::nullopt;
  // The prologue: the members the reduction depends on, walked up from it.
  const std::set<NodeRef> inGroup(members.begin(), members.end());
  std::set<NodeRef> ancestors;
  std::vector<NodeRef> work = {*reduction};
  while (!work.empty()) {
    const NodeRef n = work.back();
    work.pop_back();
    for (ValueId v : g.node(n).inputs) {
      if (v == kNoValue) continue;
      const std::optional<NodeRef> p = g.producer(v);
      if (p && inGroup.count(*p) && ancestors.insert(*p).second) work.push_back(*p);
    }
  }
  RowGroup rg{*reduction, {}, {}};
  for (NodeRef n : members)
    if (n != *reduction) (ancestors.count(n) ? rg.prologue : rg.epilogue).push_back(n);
  return rg;
}

/// How a one-pass reduction starts, folds an element (or a vector of them)
/// into its accumulator, combines two partial results, and finishes: max
/// and min with a NaN winning (detail::extremeWithNaN), squares summed for
/// ReduceL2 and ReduceSumSquare.
struct OnePass {
  bool isMax = false, isMin = false, squares = false, mean = false, root = false;

  explicit OnePass(const std::string& op)
      : isMax(op == "ReduceMax" || op == "GlobalMaxPool"), isMin(op == "ReduceMin"),
        squares(op == "ReduceL2" || op == "ReduceSumSquare"), mean(op == "ReduceMean" || op == "GlobalAveragePool"),
        root(op == "ReduceL2") {}
  std::string init() const { return isMax ? "-INFINITY" : isMin ? "INFINITY" : "0.0f"; }
  std::string fold(const std::string& acc, const std::string& v) const {
    return isMax || isMin ? detail::extremeWithNaN(isMax, acc, v)
                 : squares ? "fma(" + v + ", " + v + ", " + acc + ")" : acc + " + " + v;
  }
  /// Partial results combined (squares are summed once made).
  std::string pair(const std::string& a, const std::string& b) const {
    return isMax || isMin ? detail::extremeWithNaN(isMax, a, b) : a + " + " + b;
  }
  std::string result(const std::string& total, int64_t n) const {
    return mean ? total + " / " + std::to_string(n) + ".0f" : root ? "sqrt(" + total + ")" : total;
  }
};

/// A reduction alone (no prologue), one work-item per row: the row read
/// as float16 vectors into one vector accumulator, its lanes combined at
/// the end, the tail past the last 16 element by element. No barriers:
/// on PoCL, EfficientNet-B0's global pools ran at 8-17 GB/s with a
/// work-group per row.
KernelSource rowPerWorkItem(const NodeData& r, const std::string& name, const std::string& comment, int64_t n,
                            int64_t rows) {
  const OnePass red(r.op.str());
  const int64_t whole = n / 16 * 16;
  KernelSource k;
  k.name = name;
  k.inputs = {r.inputs[0]};
  k.outputs = {r.outputs[0]};
  k.globalSize = static_cast<size_t>(rows);
  std::ostringstream src;
  src << "// " << comment << "\n// One work-item per row of " << n << ", read as float16 vectors.\n";
  src << "__kernel void " << name << "(\n    __global const float* restrict in0,\n    __global float* restrict out0) {\n";
  src << "  const int row = get_global_id(0);\n";
  src << "  const __global float* x = in0 + row * " << n << ";\n";
  src << "  float16 v = (float16)(" << red.init() << ");\n";
  src << "  for (int j = 0; j < " << whole << "; j += 16) v = " << red.fold("v", "vload16(0, x + j)") << ";\n";
  src << "  const float8 h = " << red.pair("v.lo", "v.hi") << ";\n  const float4 q = " << red.pair("h.lo", "h.hi") << ";\n";
  src << "  float acc = " << red.pair(red.pair("q.x", "q.y"), red.pair("q.z", "q.w")) << ";\n";
  if (whole < n) src << "  for (int j = " << whole << "; j < " << n << "; ++j) acc = " << red.fold("acc", "x[j]") << ";\n";
  src << "  out0[row] = " << red.result("acc", n) << ";\n}\n";
  k.source = src.str();
  return k;
}

/// Reductions of one pass over the row, whose prologue the per-work-item
/// vector kernel computes as it reads the row.
const std::set<std::string> kSimpleReductions = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2",
                                                 "ReduceSumSquare"};

/// The epilogue of a row_reduce group (RowGroup::epilogue) in two parts:
/// the members that depend on the row alone (on the reduced value and on
/// operands uniform along the row: RMSNorm's `+ eps`, Sqrt and
/// Reciprocal), computed once per row by `fusec_row`, and the members
/// computed at each element by `fusec_y`, which reads the first part's
/// results (`carried`: the reduced value itself, or what fusec_row
/// computes from it). The prologue's values the element part reads are
/// recomputed from the inputs in fusec_y (the device compiler drops the
/// rest), so nothing but the carried values passes between the passes.
/// Both functions take `params`, the kernel's parameters for `inputs` as
/// fusec_x takes them.
class RowEpilogue {
 public:
  RowEpilogue(const Graph& g, const OpCatalog& catalog, const RowGroup& rg, const std::vector<ValueId>& inputs,
              const Shape& xs, ValueId result, const std::string& params)
      : g_(g), catalog_(catalog), rg_(rg), inputs_(inputs), xs_(xs), result_(result), params_(params) {
    const ValueId reduced = g.node(rg.reduction).outputs[0];
    Shape kept = xs;
    kept.back() = 1;
    // A value is uniform along the row when it is the reduced value, a
    // row member's result, or an operand from outside the group whose
    // last dim (as it broadcasts to the row) is 1.
    std::set<ValueId> rowValues = {reduced};
    const std::set<NodeRef> inGroup(rg.prologue.begin(), rg.prologue.end());
    auto uniform = [&](ValueId v) {
      if (v == kNoValue || rowValues.count(v)) return true;
      const std::optional<NodeRef> p = g.producer(v);
      if (p && (inGroup.count(*p) || std::count(rg.epilogue.begin(), rg.epilogue.end(), *p))) return false;
      const TensorType& t = g.value(v).type;
      return t.isStatic() && (t.dims->empty() || t.staticShape().back() == 1);
    };
    for (NodeRef m : rg.epilogue) {
      const NodeData& d = g.node(m);
      const TensorType& t = g.value(d.outputs[0]).type;
      const bool row = xs.back() > 1 && d.outputs.size() == 1 && t.isStatic() && t.staticShape() == kept &&
                       std::all_of(d.inputs.begin(), d.inputs.end(), uniform);
      (row ? rowMembers_ : elementMembers_).push_back(m);
      if (row) rowValues.insert(d.outputs[0]);
    }
    // The prologue's members the element part reads, walked up from it.
    std::set<NodeRef> needed;
    std::vector<NodeRef> work = elementMembers_;
    while (!work.empty()) {
      const NodeRef m = work.back();
      work.pop_back();
      for (ValueId v : g.node(m).inputs)
        if (const std::optional<NodeRef> p = v == kNoValue ? std::nullopt : g.producer(v);
            p && inGroup.count(*p) && needed.insert(*p).second)
          work.push_back(*p);
    }
    std::vector<NodeRef> recomputed;
    for (NodeRef m : rg.prologue)
      if (needed.count(m)) recomputed.push_back(m);
    elementMembers_.insert(elementMembers_.begin(), recomputed.begin(), recomputed.end());
    // The row values the element part reads, the reduced value first.
    std::vector<ValueId> order = {reduced};
    for (NodeRef m : rowMembers_) order.push_back(g.node(m).outputs[0]);
    for (ValueId v : order)
      if (std::any_of(elementMembers_.begin(), elementMembers_.end(), [&](NodeRef m) {
            const std::vector<ValueId>& in = g.node(m).inputs;
            return std::find(in.begin(), in.end(), v) != in.end();
          }))
        carried_.push_back(v);
  }

  /// fusec_row's definition (when some members are per row) and fusec_y's
  /// (in vectors of `lanes`; 0: one element), appended to `src`; their
  /// vector helpers merged into `helpers`.
  Status functions(int lanes, std::string& src, std::string& helpers) const {
    const std::string reducedName = "red";
    if (!rowMembers_.empty()) {
      detail::Emitter e(g_, catalog_);
      e.bind(g_.node(rg_.reduction).outputs[0], reducedName);
      std::string ps, body;
      if (Status st = e.emitBody(rowMembers_, inputs_, xs_, "i", ps, body); !st) return st;
      if (ps != params_) return Error{"the epilogue's operands differ from the prologue's", true};
      src += "// The epilogue's values uniform along the row whose first element is i, from its reduced value red.\n";
      src += "inline void fusec_row(const int i, const float red,\n    " + params_;
      for (size_t c = 0; c < carried_.size(); ++c) src += ",\n    float* rv" + std::to_string(c);
      src += ") {\n" + body;
      for (size_t c = 0; c < carried_.size(); ++c)
        src += "  *rv" + std::to_string(c) + " = " + e.vars().at(carried_[c]) + ";\n";
      src += "}\n";
    }
    detail::Emitter e(g_, catalog_);
    if (lanes) e.vectorize(lanes, 1);
    for (size_t c = 0; c < carried_.size(); ++c) e.bind(carried_[c], "rv" + std::to_string(c));
    std::string ps, body;
    if (Status st = e.emitBody(elementMembers_, inputs_, xs_, "i", ps, body); !st) return st;
    if (ps != params_) return Error{"the epilogue's operands differ from the prologue's", true};
    const std::string type = lanes ? "float" + std::to_string(lanes) : "float";
    src += "// The group's result at linear indices i.. (the epilogue's elementwise part).\ninline " + type + " fusec_y(const int i";
    for (size_t c = 0; c < carried_.size(); ++c) src += ", const " + type + " rv" + std::to_string(c);
    src += ",\n    " + params_ + ") {\n" + body + "  return " + e.vars().at(result_) + ";\n}\n";
    if (lanes) helpers = detail::Emitter::helpersOnce(helpers, e.vectorHelpers());
    return Status::success();
  }

  /// Statements computing the carried values of the row starting at
  /// `base` from its reduced value `reduced`, named rv<c><suffix>.
  std::string perRow(const std::string& reduced, const std::string& base, const std::string& suffix,
                     const std::string& args) const {
    if (rowMembers_.empty()) return carried_.empty() ? "" : "  const float rv0" + suffix + " = " + reduced + ";\n";
    std::string s = "  float ";
    for (size_t c = 0; c < carried_.size(); ++c) s += (c ? ", rv" : "rv") + std::to_string(c) + suffix;
    s += ";\n  fusec_row(" + base + ", " + reduced + args;
    for (size_t c = 0; c < carried_.size(); ++c) s += ", &rv" + std::to_string(c) + suffix;
    return s + ");\n";
  }

  /// The call of fusec_y at `index`, the carried values splat to `type`.
  std::string element(const std::string& index, const std::string& suffix, const std::string& type,
                      const std::string& args) const {
    std::string s = "fusec_y(" + index;
    for (size_t c = 0; c < carried_.size(); ++c) s += ", (" + type + ")(rv" + std::to_string(c) + suffix + ")";
    return s + args + ")";
  }

 private:
  const Graph& g_;
  const OpCatalog& catalog_;
  const RowGroup& rg_;
  const std::vector<ValueId>& inputs_;
  const Shape& xs_;
  ValueId result_;
  const std::string& params_;
  std::vector<NodeRef> rowMembers_;
  std::vector<NodeRef> elementMembers_;  ///< the prologue members it reads (recomputed) first
  std::vector<ValueId> carried_;
};

/// What a normalization kernel computes beyond its prologue: the row's
/// operands and results (emitRowReduce fills them in).
struct RowKernel {
  const NodeData& r;
  const std::vector<NodeRef>& prologue;
  const std::vector<ValueId>& inputs;  ///< the prologue's (or the row's own)
  size_t extras = 0;                   ///< LayerNormalization's scale and bias after them
  std::vector<ValueId> stats;          ///< its mean and 1/stddev results (kNoValue: unused)
  bool writeX = false;                 ///< the row's input is a result too (the last)
  Shape xs;
  int64_t n = 0, rows = 0;
  const RowEpilogue* epilogue = nullptr;  ///< a simple reduction read back along the row
};

/// Softmax, LogSoftmax, LayerNormalization or a one-pass reduction
/// (kSimpleReductions) over the innermost axis with its prologue, one
/// work-item per `rowsPerItem` rows: each row computed
/// as float vectors (the prologue vectorized along it, once per element),
/// kept in registers or in the result's row between passes, reduced into a
/// vector accumulator whose lanes are combined at the end. No barriers and
/// no local memory, for CPUs: on PoCL the work-group tree took BERT-base's
/// scale + mask + softmax 0.59 ms and its residual add + LayerNorm
/// 0.33-0.42 ms (kernel_roofline). A work-item's rows are interleaved,
/// every pass emitted for each row in turn: one row's passes are a chain
/// (reduce, combine the lanes, divide, scale) that the core cannot overlap
/// with the next row's, and three independent rows hide it (that softmax
/// 0.061 -> 0.042 ms with two or three rows per work-item, pyopencl,
/// alternating). Nothing when the row is not a whole number of 4-lane
/// vectors or the prologue has no vector form.
std::optional<KernelSource> vectorRowPerWorkItem(const Graph& g, const OpCatalog& catalog, const RowKernel& row,
                                                 KernelSource k, const std::string& comment) {
  const int64_t n = row.n;
  const int lanes = detail::vectorLanes(n);
  const std::string op = row.r.op.str();
  if (!lanes || n != row.xs.back()) return std::nullopt;
  detail::Emitter e(g, catalog);
  e.vectorize(lanes, 1);
  std::string params, body;
  if (!e.emitBody(row.prologue, row.inputs, row.xs, "i", params, body)) return std::nullopt;
  const std::string L = std::to_string(lanes), vec = "float" + L, N = std::to_string(n);
  std::string args;
  for (size_t a = 0; a < row.inputs.size(); ++a) args += ", in" + std::to_string(a);
  const bool inRegisters = n / lanes <= kRegisterVectors;
  const int64_t perItem = rowsPerItem(row.rows, inRegisters ? n / lanes : 1);
  std::ostringstream src;
  src << "// " << comment << "\n// One work-item per " << (perItem > 1 ? std::to_string(perItem) + " rows" : "row")
      << " of " << n << ", computed as " << vec << " vectors" << (inRegisters ? " kept in registers" : "")
      << (perItem > 1 ? ", the rows' passes interleaved.\n" : ".\n") << detail::Emitter::prelude();
  std::string helpers = e.vectorHelpers();
  const bool exponentials = op == "Softmax" || op == "LogSoftmax";
  if (exponentials && helpers.find("fusec_exp" + L + "(") == std::string::npos)
    helpers = detail::Emitter::vectorExp(lanes) + helpers;
  std::string epilogue;
  if (row.epilogue && !row.epilogue->functions(lanes, epilogue, helpers)) return std::nullopt;
  src << helpers;
  src << "// The reduction's input at linear indices i.. (the fused prologue).\n";
  src << "inline " << vec << " fusec_x(const int i,\n    " << params << ") {\n" << body;
  src << "  return " << e.vars().at(row.r.inputs[0]) << ";\n}\n" << epilogue;
  src << "__kernel void " << k.name << "(\n    " << params;
  for (size_t a = 0; a < row.extras; ++a) src << ",\n    __global const float* restrict in" << row.inputs.size() + a;
  for (size_t o = 0; o < k.outputs.size(); ++o) src << ",\n    __global float* restrict out" << o;
  src << ") {\n  const int row0 = get_global_id(0)" << (perItem > 1 ? " * " + std::to_string(perItem) : "") << ";\n";
  // The emitted names of row w of the work-item: its variables carry the
  // suffix `_w` (`acc_0`, `mx_1`), its vectors are `r<q>_w`.
  std::string W;
  auto rows = [&](const std::function<void()>& emit) {
    for (int64_t w = 0; w < perItem; ++w) {
      W = "_" + std::to_string(w);
      emit();
    }
  };
  auto acc = [&] { return "acc" + W; };
  rows([&] { src << "  const int base" << W << " = (row0 + " << W.substr(1) << ") * " << N << ";\n"; });
  // The lanes of each row's `acc` combined with `f` ("+" or "max") into
  // float `var`.
  auto combine = [&](const std::string& var, const std::string& f) {
    rows([&] {
      auto pair = [&](const std::string& a, const std::string& b) {
        return f == "+" ? a + " + " + b : detail::extremeWithNaN(f == "max", a, b);
      };
      std::string v = acc();
      if (lanes == 16) src << "  const float8 " << var << "8" << W << " = " << pair(v + ".lo", v + ".hi") << ";\n", v = var + "8" + W;
      if (lanes >= 8) src << "  const float4 " << var << "4" << W << " = " << pair(v + ".lo", v + ".hi") << ";\n", v = var + "4" + W;
      src << "  const float " << var << W << " = " << pair(pair(v + ".x", v + ".y"), pair(v + ".z", v + ".w")) << ";\n";
    });
  };
  // Each row's accumulator set to `value`.
  auto reset = [&](const std::string& value) {
    rows([&] { src << "  " << acc() << " = (" << vec << ")(" << value << ");\n"; });
  };
  // A row of at most kRegisterVectors vectors is computed once into
  // registers r0, r1, ... and every pass reads them there. A longer one:
  // the first pass computes it (the prologue once per element) and keeps
  // it in out0's row, where the later passes read it back from the cache.
  // The row is also written where it is a result itself (writeX).
  auto store = [&](const std::string& v, const std::string& out, const std::string& j) {
    return "    vstore" + L + "(" + v + ", 0, " + out + " + base" + W + " + " + j + ");\n";
  };
  // `step(v, j)` for each vector v of each row, j its offset in the row.
  using Step = std::function<std::string(const std::string&, const std::string&)>;
  auto each = [&](const Step& step) {
    if (!inRegisters) {
      src << "  for (int j = 0; j < " << N << "; j += " << L << ") {\n";
      rows([&] { src << step("v" + W, "j"); });
      src << "  }\n";
      return;
    }
    for (int64_t q = 0; q < n / lanes; ++q) {
      src << "  {\n";
      rows([&] { src << step("r" + std::to_string(q) + W, std::to_string(q * lanes)); });
      src << "  }\n";
    }
  };
  // The first pass: each vector computed, then `step`.
  auto first = [&](const Step& step) {
    if (inRegisters)
      rows([&] {
        src << "  " << vec << " r0" << W;
        for (int64_t q = 1; q < n / lanes; ++q) src << ", r" << q << W;
        src << ";\n";
      });
    each([&](const std::string& v, const std::string& j) {
      std::string s = "    " + (inRegisters ? "" : vec + " ") + v + " = fusec_x(base" + W + " + " + j + args + ");\n";
      if (!inRegisters) s += store(v, "out0", j);
      if (row.writeX) s += store(v, "out" + std::to_string(k.outputs.size() - 1), j);
      return s + step(v, j);
    });
  };
  // A later pass over the row as the first left it.
  auto pass = [&](const Step& step) {
    each([&](const std::string& v, const std::string& j) {
      return (inRegisters ? "" : "    " + vec + " " + v + " = vload" + L + "(0, out0 + base" + W + " + j);\n") + step(v, j);
    });
  };
  // Replaces vector v of the row with `value` for the passes after.
  auto keep = [&](const std::string& v, const std::string& j, const std::string& value) {
    return "    " + v + " = " + value + ";\n" + (inRegisters ? "" : store(v, "out0", j));
  };
  rows([&] { src << "  " << vec << " " << acc() << ";\n"; });
  if (kSimpleReductions.count(op)) {
    // One pass: each vector computed by the prologue and folded into the
    // accumulator.
    const OnePass red(op);
    reset(red.init());
    each([&](const std::string&, const std::string& j) {
      const std::string t = "t" + W;
      std::string step = "    const " + vec + " " + t + " = fusec_x(base" + W + " + " + j + args + ");\n";
      if (row.writeX) step += store(t, "out" + std::to_string(k.outputs.size() - 1), j);
      return step + "    " + acc() + " = " + red.fold(acc(), t) + ";\n";
    });
    combine("total", red.isMax ? "max" : red.isMin ? "min" : "+");
    if (row.epilogue) {
      // The reduced value read back along the row: a second pass.
      rows([&] { src << row.epilogue->perRow(red.result("total" + W, n), "base" + W, W, args); });
      each([&](const std::string&, const std::string& j) {
        return store(row.epilogue->element("base" + W + " + " + j, W, vec, args), "out0", j);
      });
    } else {
      rows([&] { src << "  out0[row0 + " << W.substr(1) << "] = " << red.result("total" + W, n) << ";\n"; });
    }
  } else if (op == "LayerNormalization") {
    float eps = 1e-5f;
    if (const Attribute* a = row.r.attr("epsilon"); a && std::holds_alternative<float>(*a)) eps = std::get<float>(*a);
    // Moments of x - x[0] (the shifted-data algorithm): near a large
    // offset (10^4 +- 0.01) the differences are exact, where a mean rounded
    // at the offset's ulp would move every deviation by it.
    rows([&] { src << "  const float shift" << W << " = fusec_x(base" << W << args << ").s0;\n"; });
    reset("0.0f");
    first([&](const std::string& v, const std::string&) { return "    " + acc() + " += " + v + " - shift" + W + ";\n"; });
    combine("total", "+");
    rows([&] { src << "  const float mu" << W << " = total" << W << " / " << N << ".0f;\n"; });
    reset("0.0f");
    pass([&](const std::string& v, const std::string&) {
      return "    const " + vec + " d" + W + " = (" + v + " - shift" + W + ") - mu" + W + ";\n    " + acc() + " = fma(d" + W +
             ", d" + W + ", " + acc() + ");\n";
    });
    combine("sq", "+");
    rows([&] {
      src << "  const float inv" << W << " = rsqrt(sq" << W << " / " << N << ".0f + " << detail::floatLiteral(eps) << ");\n";
    });
    auto param = [&](size_t which, const std::string& j, const char* none) {
      return row.extras > which ? "vload" + L + "(0, in" + std::to_string(row.inputs.size() + which) + " + " + j + ")"
                                : std::string(none);
    };
    pass([&](const std::string& v, const std::string& j) {
      return store("((" + v + " - shift" + W + ") - mu" + W + ") * inv" + W + " * " + param(0, j, "1.0f") + " + " +
                       param(1, j, "0.0f"),
                   "out0", j);
    });
    rows([&] {
      size_t o = 1;
      for (size_t st = 0; st < row.stats.size(); ++st)
        if (row.stats[st] != kNoValue)
          src << "  out" << o++ << "[row0 + " << W.substr(1) << "] = "
              << (st == 0 ? "shift" + W + " + mu" + W : "inv" + W) << ";\n";
    });
  } else {
    // The maximum as a compare and select (vmaxps), not fmax, whose NaN
    // handling costs two more instructions: a NaN element leaves every
    // result NaN all the same, through its own exponential in the sum.
    reset("-INFINITY");
    first([&](const std::string& v, const std::string&) {
      return "    " + acc() + " = " + v + " > " + acc() + " ? " + v + " : " + acc() + ";\n";
    });
    combine("mx", "max");
    reset("0.0f");
    if (op == "Softmax") {
      pass([&](const std::string& v, const std::string& j) {
        return keep(v, j, "fusec_exp" + L + "(" + v + " - mx" + W + ")") + "    " + acc() + " += " + v + ";\n";
      });
      combine("sum", "+");
      rows([&] { src << "  const float scale" << W << " = 1.0f / sum" << W << ";\n"; });
      pass([&](const std::string& v, const std::string& j) { return store(v + " * scale" + W, "out0", j); });
    } else {
      pass([&](const std::string& v, const std::string&) {
        return "    " + acc() + " += fusec_exp" + L + "(" + v + " - mx" + W + ");\n";
      });
      combine("sum", "+");
      rows([&] { src << "  const float shift" << W << " = mx" << W << " + log(sum" << W << ");\n"; });
      pass([&](const std::string& v, const std::string& j) { return store(v + " - shift" + W, "out0", j); });
    }
  }
  src << "}\n";
  k.source = src.str();
  k.globalSize = static_cast<size_t>(row.rows / perItem);
  k.localSize = 0;
  k.localMemBytes = 0;
  return k;
}

/// A one-pass reduction with its prologue whose row has no vector form (a
/// length that is not a multiple of 4): one work-item per row, element by
/// element, the prologue computed as each element is read. No barriers: on
/// PoCL the work-group tree took 40 us for 5 rows of 6 (Sqrt, ReduceMean).
/// With an `epilogue` (its functions' text in `functions`), the result is
/// written for every element of the row in a second pass.
KernelSource scalarRowPerWorkItem(const std::string& op, KernelSource k, const std::string& comment,
                                  const std::string& params, const std::string& body, const std::string& xVar, int64_t n,
                                  int64_t rows, size_t inputs, bool writeX, const RowEpilogue* epilogue,
                                  const std::string& functions) {
  const OnePass red(op);
  std::string args;
  for (size_t a = 0; a < inputs; ++a) args += ", in" + std::to_string(a);
  std::ostringstream src;
  src << "// " << comment << "\n// One work-item per row of " << n << ", element by element.\n"
      << detail::Emitter::prelude();
  src << "inline float fusec_x(const int i,\n    " << params << ") {\n" << body << "  return " << xVar << ";\n}\n"
      << functions;
  src << "__kernel void " << k.name << "(\n    " << params;
  for (size_t o = 0; o < k.outputs.size(); ++o) src << ",\n    __global float* restrict out" << o;
  src << ") {\n  const int row = get_global_id(0), base = row * " << n << ";\n";
  src << "  float acc = " << red.init() << ";\n";
  src << "  for (int j = 0; j < " << n << "; ++j) {\n    const float t = fusec_x(base + j" << args << ");\n";
  if (writeX) src << "    out" << k.outputs.size() - 1 << "[base + j] = t;\n";
  src << "    acc = " << red.fold("acc", "t") << ";\n  }\n";
  if (!epilogue) {
    src << "  out0[row] = " << red.result("acc", n) << ";\n}\n";
  } else {
    src << epilogue->perRow(red.result("acc", n), "base", "", args);
    src << "  for (int j = 0; j < " << n << "; ++j) out0[base + j] = " << epilogue->element("base + j", "", "float", args)
        << ";\n}\n";
  }
  k.source = src.str();
  k.globalSize = static_cast<size_t>(rows);
  k.localSize = 0;
  k.localMemBytes = 0;
  return k;
}

}  // namespace

Expected<KernelSource> emitRowReduce(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                     const std::string& name, const std::string& comment, bool perWorkItem) {
  const std::optional<RowGroup> split = splitRowGroup(g, members);
  if (!split) return Error{"group `" + name + "` does not hold one reduction over the innermost axes", true};
  const RowGroup& rg = *split;
  const bool withEpilogue = !rg.epilogue.empty();
  const NodeData& r = g.node(rg.reduction);
  const std::string op = r.op.str();
  const ValueId x = r.inputs[0];
  const Shape xs = g.value(x).type.staticShape();
  const int64_t n = rowLength(g, r, xs);
  if (n <= 0) return Error{"an empty row has no kernel path", true};
  const int64_t rows = shapeNumel(xs) / n;
  // LayerNormalization's optional results: each row's mean and 1/stddev.
  std::vector<ValueId> stats;
  for (size_t o = 1; o < r.outputs.size(); ++o) {
    const ValueId v = r.outputs[o];
    if (v == kNoValue || (g.uses(v).empty() && !g.isGraphOutput(v))) continue;
    if (op != "LayerNormalization" || !g.value(v).type.isStatic() || g.value(v).type.dtype != DType::Float32 ||
        shapeNumel(g.value(v).type.staticShape()) != rows)
      return Error{"`" + op + "` with its optional results used has no kernel path", true};
    stats.resize(o, kNoValue);
    stats[o - 1] = v;
  }
  const std::vector<NodeRef>& prologue = rg.prologue;
  // An epilogue reads the reduced value back along the row: a one-pass
  // reduction over the innermost axis that keeps it.
  ValueId result = r.outputs[0];
  if (withEpilogue) {
    for (NodeRef m : rg.epilogue) {
      const NodeData& d = g.node(m);
      const OpDef* def = d.domain.empty() ? catalog.find(d.op.str()) : nullptr;
      if (!def || (def->kind != OpKind::Elementwise && def->kind != OpKind::Broadcast))
        return Error{"`" + d.op.str() + "` after the reduction has no kernel path: only elementwise ops may follow it", true};
    }
    if (!kSimpleReductions.count(op))
      return Error{"elementwise ops after `" + op + "` have no kernel path: only a sum, mean, extreme, L2 norm or sum of "
                   "squares is read back along its row",
                   true};
    Shape kept = xs;
    kept.back() = 1;
    const TensorType& rt = g.value(r.outputs[0]).type;
    if (!rt.isStatic() || rt.staticShape() != kept)
      return Error{"elementwise ops read `" + op + "`'s result back along the row only when it keeps the reduced axis "
                   "(keepdims 1)",
                   true};
    const std::vector<ValueId> escaping = groupBoundary(g, members).outputs;
    for (ValueId v : escaping)
      if (g.producer(v) != rg.epilogue.back())
        return Error{"`" + printable(g.value(v).name) + "` is read outside the group: a row_reduce group with an "
                     "epilogue writes only its last result",
                     true};
    if (escaping.size() != 1) return Error{"a row_reduce group with an epilogue writes one result", true};
    result = escaping[0];
    const TensorType& yt = g.value(result).type;
    if (!yt.isStatic() || yt.staticShape() != xs || yt.dtype != DType::Float32)
      return Error{"the epilogue's result `" + printable(g.value(result).name) + "` is not float32 of the row's shape " +
                       shapeToString(xs),
                   true};
  }
  static const std::set<std::string> kLone = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2",
                                              "ReduceSumSquare", "GlobalAveragePool", "GlobalMaxPool"};
  if (perWorkItem && prologue.empty() && !withEpilogue && stats.empty() && kLone.count(op) && g.value(x).type.dtype == DType::Float32 &&
      g.value(r.outputs[0]).type.dtype == DType::Float32)
    return rowPerWorkItem(r, name, comment, n, rows);

  detail::Emitter e(g, catalog);
  GroupBoundary boundary = groupBoundary(g, prologue);
  std::vector<ValueId> inputs = std::move(boundary.inputs);
  if (!withEpilogue)
    for (ValueId v : boundary.outputs)
      if (v != x) return Error{"a prologue value used outside the group (`" + g.value(v).name + "`) has no kernel path", true};
  // The reduction's input, when the group computes it and it is read
  // outside too (a pre-LN residual), is written as the row is loaded.
  const std::vector<ValueId> escaping = groupBoundary(g, members).outputs;
  const bool writeX = !withEpilogue && !prologue.empty() && std::find(escaping.begin(), escaping.end(), x) != escaping.end();
  if (prologue.empty()) inputs = {x};
  if (withEpilogue) {
    // Both passes take every operand of the elementwise members (and the
    // row itself), not the reduction's own (an `axes` operand).
    std::vector<NodeRef> elementwise = prologue;
    elementwise.insert(elementwise.end(), rg.epilogue.begin(), rg.epilogue.end());
    const std::vector<ValueId>& reduced = r.outputs;
    for (ValueId v : groupBoundary(g, elementwise).inputs)
      if (std::find(reduced.begin(), reduced.end(), v) == reduced.end() &&
          std::find(inputs.begin(), inputs.end(), v) == inputs.end())
        inputs.push_back(v);
  }
  std::string params, body;
  if (Status st = e.emitBody(prologue, inputs, xs, "i", params, body); !st) return st.error();
  std::optional<RowEpilogue> epilogue;
  if (withEpilogue) epilogue.emplace(g, catalog, rg, inputs, xs, result, params);

  // The reduction's other operands: LayerNormalization's scale and bias
  // (per element of the row), InstanceNormalization's (per channel).
  std::vector<ValueId> extras;
  const bool instance = op == "InstanceNormalization";
  if (instance)
    for (size_t k = 1; k < 3; ++k) {
      if (k >= r.inputs.size() || r.inputs[k] == kNoValue) return Error{"InstanceNormalization needs scale and bias", true};
      const Value& v = g.value(r.inputs[k]);
      if (!v.type.isStatic() || shapeNumel(v.type.staticShape()) != xs[1] || v.type.dtype != DType::Float32)
        return Error{"InstanceNormalization with scale or bias not per channel has no kernel path", true};
      extras.push_back(r.inputs[k]);
    }
  if (op == "LayerNormalization")
    for (size_t k = 1; k < r.inputs.size() && k < 3; ++k)
      if (r.inputs[k] != kNoValue) {
        const Value& v = g.value(r.inputs[k]);
        if (!v.type.isStatic() || shapeNumel(v.type.staticShape()) != n || v.type.dtype != DType::Float32)
          return Error{"LayerNormalization with scale or bias not of the row's length has no kernel path", true};
        extras.push_back(r.inputs[k]);
      }
  const ValueId y = r.outputs[0];
  if (g.value(y).type.dtype != DType::Float32 || g.value(x).type.dtype != DType::Float32)
    return Error{"`" + op + "` on other than float has no kernel path", true};

  KernelSource k;
  k.name = name;
  k.inputs = inputs;
  k.inputs.insert(k.inputs.end(), extras.begin(), extras.end());
  k.outputs = {result};
  for (ValueId v : stats)
    if (v != kNoValue) k.outputs.push_back(v);
  if (writeX) k.outputs.push_back(x);
  if (perWorkItem && (op == "Softmax" || op == "LogSoftmax" || op == "LayerNormalization" ||
                      (kSimpleReductions.count(op) && stats.empty())))
    if (std::optional<KernelSource> v = vectorRowPerWorkItem(
            g, catalog,
            RowKernel{r, prologue, inputs, extras.size(), stats, writeX, xs, n, rows, epilogue ? &*epilogue : nullptr}, k,
            comment))
      return std::move(v.value());
  std::string functions, noHelpers;
  if (epilogue)
    if (Status st = epilogue->functions(0, functions, noHelpers); !st) return st.error();
  if (perWorkItem && kSimpleReductions.count(op) && stats.empty())
    return scalarRowPerWorkItem(op, std::move(k), comment, params, body, e.vars().at(x), n, rows, inputs.size(), writeX,
                                epilogue ? &*epilogue : nullptr, functions);
  // A row is shared by `lanes` work-items (a power of two), few enough
  // that each holds at most kRegisterRow elements; short rows pack several
  // to a work-group, so barriers and work-groups are shared by them.
  int64_t lanes = 1;
  while (lanes < kLocal && (n + lanes - 1) / lanes > kRegisterRow) lanes *= 2;
  const int64_t perGroup = kLocal / lanes;
  const int64_t groups = (rows + perGroup - 1) / perGroup;
  k.localSize = static_cast<size_t>(kLocal);
  k.localMemBytes = static_cast<size_t>(kLocal) * sizeof(float);
  k.globalSize = static_cast<size_t>(groups * kLocal);
  // Each work-item loads its `per` elements once (computing the prologue
  // once), in straight-line code the compiler vectorizes across
  // work-items; rows too long for registers are walked again in each pass.
  const int64_t per = (n + lanes - 1) / lanes;
  const bool inRegisters = per <= kRegisterRow;
  const bool ragged = rows % perGroup != 0;  // the last group has rows past the end

  std::string args;  // the prologue's arguments, as passed from the kernel
  for (size_t a = 0; a < inputs.size(); ++a) args += ", in" + std::to_string(a);
  std::ostringstream src;
  src << "// " << comment << "\n" << detail::Emitter::prelude();
  src << "#define FUSEC_LOCAL " << kLocal << "\n";
  src << "#define FUSEC_LANES " << lanes << "  // work-items per row\n";
  src << "#define FUSEC_N " << n << "\n";
  src << "// The reduction's input at linear index i (the fused prologue).\n";
  src << "inline float fusec_x(const int i,\n    " << params << ") {\n" << body;
  src << "  return " << e.vars().at(x) << ";\n}\n" << functions;
  src << "__kernel __attribute__((reqd_work_group_size(FUSEC_LOCAL, 1, 1))) void " << name << "(\n    " << params;
  for (size_t a = 0; a < extras.size(); ++a)
    src << ",\n    __global const float* restrict in" << inputs.size() + a;
  for (size_t o = 0; o < k.outputs.size(); ++o) src << ",\n    __global float* restrict out" << o;
  src << ") {\n";
  src << "  const int lid = get_local_id(0), lane = lid % FUSEC_LANES;\n";
  src << "  const int row = get_group_id(0) * " << perGroup << " + lid / FUSEC_LANES;\n";
  src << "  const int base = row * FUSEC_N;\n";
  if (ragged) src << "  const int live = row < " << rows << ";\n";
  src << "  __local float scratch[FUSEC_LOCAL];\n";
  // A tree reduction of `acc` with `combine`, leaving the result in `var`.
  auto tree = [&](const std::string& var, const std::string& combine) {
    src << "  scratch[lid] = acc;\n  barrier(CLK_LOCAL_MEM_FENCE);\n";
    src << "  for (int s = FUSEC_LANES / 2; s > 0; s >>= 1) {\n";
    src << "    if (lane < s) scratch[lid] = " << combine << ";\n";
    src << "    barrier(CLK_LOCAL_MEM_FENCE);\n  }\n";
    src << "  const float " << var << " = scratch[lid - lane];\n  barrier(CLK_LOCAL_MEM_FENCE);\n";
  };
  // Emits `step(v, j)` for every element of this work-item's share of the
  // row (v its value, j its index in the row). In registers: unrolled over
  // x0, x1, ...; otherwise a loop that recomputes the prologue.
  using Step = std::function<std::string(const std::string&, const std::string&)>;
  auto each = [&](const Step& step) {
    if (!inRegisters) {
      src << "  for (int j = lane; j < FUSEC_N" << (ragged ? " && live" : "") << "; j += FUSEC_LANES) { const float v = fusec_x(base + j" << args << "); "
          << step("v", "j") << " }\n";
      return;
    }
    for (int64_t q = 0; q < per; ++q) {
      const std::string j = "(lane + " + std::to_string(q * lanes) + ")";
      std::string guard = (q + 1) * lanes > n ? j + " < FUSEC_N" : "";  // only the last slice can run past the row
      if (ragged) guard += (guard.empty() ? "" : " && ") + std::string("live");
      src << "  " << (guard.empty() ? "" : "if (" + guard + ") ") << "{ " << step("x" + std::to_string(q), j) << " }\n";
    }
  };
  if (inRegisters)
    for (int64_t q = 0; q < per; ++q) {
      const std::string j = "lane + " + std::to_string(q * lanes);
      std::string guard = (q + 1) * lanes > n ? j + " < FUSEC_N" : "";
      if (ragged) guard += (guard.empty() ? "" : " && ") + std::string("live");
      src << "  const float x" << q << " = " << (guard.empty() ? "" : "(" + guard + ") ? ") << "fusec_x(base + " << j << args
          << ")" << (guard.empty() ? "" : " : 0.0f") << ";\n";
    }
  if (writeX) {
    const std::string out = "out" + std::to_string(k.outputs.size() - 1);
    each([&](const std::string& v, const std::string& j) { return out + "[base + " + j + "] = " + v + ";"; });
  }
  const std::string sumCombine = "scratch[lid] + scratch[lid + s]";
  const std::string lane0 = ragged ? "lane == 0 && live" : "lane == 0";  // writes a row's single result
  if (op == "Softmax" || op == "LogSoftmax") {
    src << "  float acc = -INFINITY;\n";
    each([](const std::string& v, const std::string&) { return "acc = fmax(acc, " + v + ");"; });
    tree("mx", "fmax(scratch[lid], scratch[lid + s])");
    src << "  acc = 0.0f;\n";
    each([](const std::string& v, const std::string&) { return "acc += fusec_exp(" + v + " - mx);"; });
    tree("sum", sumCombine);
    if (op == "Softmax") {
      src << "  const float scale = 1.0f / sum;\n";
      each([](const std::string& v, const std::string& j) { return "out0[base + " + j + "] = fusec_exp(" + v + " - mx) * scale;"; });
    } else {
      src << "  const float shift = mx + log(sum);\n";
      each([](const std::string& v, const std::string& j) { return "out0[base + " + j + "] = " + v + " - shift;"; });
    }
  } else if (op == "Hardmax") {
    // 1 at the first maximum of the row: the maximum, then its least index.
    src << "  float acc = -INFINITY;\n";
    each([](const std::string& v, const std::string&) { return "acc = fmax(acc, " + v + ");"; });
    tree("mx", "fmax(scratch[lid], scratch[lid + s])");
    src << "  acc = FUSEC_N;\n";
    each([](const std::string& v, const std::string& j) { return "if (" + v + " == mx) acc = fmin(acc, (float)" + j + ");"; });
    tree("first", "fmin(scratch[lid], scratch[lid + s])");
    each([](const std::string&, const std::string& j) { return "out0[base + " + j + "] = " + j + " == (int)first ? 1.0f : 0.0f;"; });
  } else if (op == "LayerNormalization" || instance) {
    float eps = 1e-5f;
    if (const Attribute* a = r.attr("epsilon"); a && std::holds_alternative<float>(*a)) eps = std::get<float>(*a);
    // Moments of x - x[0], as in the row form.
    src << "  const float shift = " << (ragged ? "live ? fusec_x(base" + args + ") : 0.0f" : "fusec_x(base" + args + ")")
        << ";\n";
    src << "  float acc = 0.0f;\n";
    each([](const std::string& v, const std::string&) { return "acc += " + v + " - shift;"; });
    tree("total", sumCombine);
    src << "  const float mu = total / FUSEC_N;\n";
    src << "  acc = 0.0f;\n";
    each([](const std::string& v, const std::string&) { return "const float d = (" + v + " - shift) - mu; acc += d * d;"; });
    tree("sq", sumCombine);
    src << "  const float inv = rsqrt(sq / FUSEC_N + " << detail::floatLiteral(eps) << ");\n";
    // Scale and bias: per element of the row (LayerNormalization) or per channel.
    auto param = [&](size_t which, const std::string& j, const char* none) {
      if (extras.size() <= which) return std::string(none);
      const std::string p = "in" + std::to_string(inputs.size() + which);
      return p + (instance ? "[row % " + std::to_string(xs[1]) + "]" : "[" + j + "]");
    };
    each([&](const std::string& v, const std::string& j) {
      return "out0[base + " + j + "] = ((" + v + " - shift) - mu) * inv * " + param(0, j, "1.0f") + " + " +
             param(1, j, "0.0f") + ";";
    });
    size_t o = 1;
    for (size_t st = 0; st < stats.size(); ++st)
      if (stats[st] != kNoValue)
        src << "  if (" << lane0 << ") out" << o++ << "[row] = " << (st == 0 ? "shift + mu" : "inv") << ";\n";
  } else {
    const bool isMax = op == "ReduceMax" || op == "GlobalMaxPool", isMin = op == "ReduceMin";
    const bool squares = op == "ReduceL2" || op == "ReduceSumSquare";
    src << "  float acc = " << (isMax ? "-INFINITY" : isMin ? "INFINITY" : "0.0f") << ";\n";
    each([&](const std::string& v, const std::string&) {
      return "acc = " +
             (isMax || isMin ? detail::extremeWithNaN(isMax, "acc", v) : squares ? "acc + " + v + " * " + v : "acc + " + v) +
             ";";
    });
    tree("total", isMax || isMin ? detail::extremeWithNaN(isMax, "scratch[lid]", "scratch[lid + s]") : sumCombine);
    const std::string reduced =
        op == "ReduceMean" || op == "GlobalAveragePool" ? "total / FUSEC_N" : op == "ReduceL2" ? "sqrt(total)" : "total";
    if (epilogue) {
      src << epilogue->perRow(reduced, ragged ? "(live ? base : 0)" : "base", "", args);  // no loads past the end
      each([&](const std::string&, const std::string& j) {
        return "out0[base + " + j + "] = " + epilogue->element("base + " + j, "", "float", args) + ";";
      });
    } else {
      src << "  if (" << lane0 << ") out0[row] = " << reduced << ";\n";
    }
  }
  src << "}\n";
  k.source = src.str();
  return k;
}

FUSEC_KERNEL_FAMILY(row_reduce) {
  return {"row_reduce",
          "elementwise ops feeding one reduction over contiguous rows (Reduce* over the innermost axis, "
          "Softmax, LogSoftmax, LayerNormalization, global pools, InstanceNormalization); the reduction's input is "
          "written too when it is read outside; after a sum, mean, extreme, L2 norm or sum of squares that keeps its "
          "axis, elementwise ops may read the result back along the row (RMSNorm's x * rsqrt(mean(x^2) + eps) * w) "
          "and the group writes their last result",
          "it does not hold one reduction over the innermost axes",
          {"#fbe3cf", "#c0641a"},
          [](const Graph& g, const std::vector<NodeRef>& group, const OpCatalog&) {
            return splitRowGroup(g, group).has_value();
          },
          [](const EmitRequest& r) {
            return emitRowReduce(r.graph, r.group, r.catalog, r.name, r.comment, r.options.rowReducePerWorkItem);
          }};
}

}  // namespace fusec::codegen
