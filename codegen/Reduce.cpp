/// The reduce family; see Emitters.h.
#include "Emitters.h"

#include <set>
#include <sstream>

#include "ElementwiseEmitter.h"
#include "FamilyRegistry.h"

namespace fusec::codegen {
namespace {

const std::set<std::string>& reduceOps() {
  static const std::set<std::string> kOps = {"ReduceSum", "ReduceMean",   "ReduceMax",    "ReduceMin",
                                             "ReduceProd", "ReduceL1",    "ReduceL2",     "ReduceLogSum",
                                             "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin",
                                             "Softmax", "LogSoftmax", "Hardmax"};
  return kOps;
}

}  // namespace

/// The reduced axes, normalized and sorted; nullopt when they are not known
/// at generation time (a computed `axes` operand) or out of range.
std::optional<std::vector<int64_t>> reducedAxes(const Graph& g, const NodeData& d, int64_t rank) {
  std::vector<int64_t> axes;
  const bool arg = d.op == "ArgMax" || d.op == "ArgMin";
  if (d.op == "Softmax" || d.op == "LogSoftmax" || d.op == "Hardmax") {
    // One axis from opset 13 (before, they flatten: row_reduce's rows).
    if (g.info.defaultOpset() < 13) return std::nullopt;
    axes = {d.attrInt("axis", -1)};
  } else if (arg) {
    axes = {d.attrInt("axis", 0)};
  } else if (d.inputs.size() > 1 && d.inputs[1] != kNoValue) {
    if (!g.isConstant(d.inputs[1])) return std::nullopt;
    axes = g.value(d.inputs[1]).constant->toInt64s();
  } else if (const Attribute* a = d.attr("axes"); a && std::holds_alternative<std::vector<int64_t>>(*a)) {
    axes = std::get<std::vector<int64_t>>(*a);
  }
  if (axes.empty() && !arg && d.attrInt("noop_with_empty_axes", 0) == 0)
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
  std::set<int64_t> out;
  for (int64_t a : axes) {
    if (a < -rank || a >= rank) return std::nullopt;
    out.insert(a < 0 ? a + rank : a);
  }
  return std::vector<int64_t>(out.begin(), out.end());
}

bool isAxisReduction(const Graph& g, NodeRef n) {
  const NodeData& d = g.node(n);
  if (!d.domain.empty() || !reduceOps().count(d.op.str()) || d.inputs.empty() || d.inputs[0] == kNoValue) return false;
  const TensorType& t = g.value(d.inputs[0]).type;
  return t.isStatic() && reducedAxes(g, d, static_cast<int64_t>(t.dims->size())).has_value();
}

Expected<KernelSource> emitReduce(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                  const std::string& name, const std::string& comment, bool vectorColumns) {
  if (members.empty() || !isAxisReduction(g, members.back()))
    return Error{"group `" + name + "` does not end in a reduction with known axes", true};
  const NodeData& r = g.node(members.back());
  const std::string op = r.op.str();
  const bool arg = op == "ArgMax" || op == "ArgMin";
  const bool normalize = op == "Softmax" || op == "LogSoftmax" || op == "Hardmax";  // a result per element
  const ValueId x = r.inputs[0], y = r.outputs[0];
  const Shape xs = g.value(x).type.staticShape();
  const int64_t rank = static_cast<int64_t>(xs.size());
  const std::vector<int64_t> axes = *reducedAxes(g, r, rank);
  if (!g.value(y).type.isStatic()) return Error{"value `" + g.value(y).name + "` has no static shape", true};
  const DType xt = g.value(x).type.dtype, yt = g.value(y).type.dtype;
  if (detail::cType(xt).empty() || detail::cType(yt).empty())
    return Error{"`" + op + "` on `" + std::string(dtypeName(xt)) + "` has no kernel path", true};
  int64_t count = 1;
  for (int64_t a : axes) count *= xs[static_cast<size_t>(a)];
  if (arg && count == 0) return Error{"the arg of an empty axis has no value", true};
  if (normalize && (xt != DType::Float32 || yt != DType::Float32))
    return Error{"`" + op + "` on other than float has no kernel path", true};
  const bool integer = isInteger(xt);
  if (integer && count == 0 && (op == "ReduceMax" || op == "ReduceMin"))
    return Error{"reducing an empty integer tensor has no value", true};

  // The prologue's values are computed at each element of the loop.
  const std::vector<NodeRef> prologue(members.begin(), members.end() - 1);
  GroupBoundary boundary = groupBoundary(g, prologue);
  std::vector<ValueId> inputs = prologue.empty() ? std::vector<ValueId>{x} : std::move(boundary.inputs);
  for (ValueId v : boundary.outputs)
    if (v != x) return Error{"a prologue value used outside the group (`" + g.value(v).name + "`) has no kernel path", true};
  detail::Emitter e(g, catalog);
  e.allowDouble();
  std::string params, body;
  // The prologue's coordinates are the loops' (declared in loop() below):
  // none is divided out of the index inside the loop.
  if (Status st = e.emitBody(prologue, inputs, xs, "i", params, body, 0, false); !st) return st.error();
  const std::string value = e.vars().at(x);

  // Kept axes index the output (keepdims only inserts 1s: same order);
  // reduced axes are walked by nested loops.
  const Shape strides = stridesOf(xs);
  std::vector<size_t> kept, reduced;
  for (size_t a = 0; a < xs.size(); ++a)
    (std::binary_search(axes.begin(), axes.end(), static_cast<int64_t>(a)) ? reduced : kept).push_back(a);
  Shape keptShape;
  for (size_t a : kept) keptShape.push_back(xs[a]);
  const Shape keptStrides = stridesOf(keptShape);

  // The accumulator: integers in 64 bits for sums, products and extremes;
  // float otherwise (the interpreter accumulates in double).
  const bool integerAcc = integer && op != "ReduceL2" && op != "ReduceLogSum" && op != "ReduceLogSumExp";
  const std::string real = xt == DType::Float64 ? "double" : "float";
  const std::string acc = integerAcc ? (detail::isUnsignedType(xt) ? "ulong" : "long") : real;
  const std::string elem = "(" + acc + ")" + value;
  const auto [lowest, highest] = integer ? detail::integerLimits(xt) : std::pair<std::string, std::string>{"-INFINITY", "INFINITY"};
  std::string init = "0", update, result = "acc";
  if (op == "ReduceSum" || op == "ReduceMean" || op == "ReduceLogSum") update = "acc += " + elem + ";";
  if (op == "ReduceMean") result = "acc / (" + acc + ")" + std::to_string(count);
  if (op == "ReduceLogSum") result = "log(acc)";
  if (op == "ReduceSumSquare" || op == "ReduceL2") update = "acc += " + elem + " * " + elem + ";";
  if (op == "ReduceL2") result = "sqrt(acc)";
  if (op == "ReduceL1") update = integerAcc ? "acc += " + elem + " < 0 ? -" + elem + " : " + elem + ";" : "acc += fabs(" + elem + ");";
  if (op == "ReduceProd") init = "1", update = "acc *= " + elem + ";";
  // A NaN element is the extreme (numpy's max and min): it fails every
  // comparison, so once in the accumulator it stays.
  const std::string nanWins = integerAcc ? "" : " || " + elem + " != " + elem;
  if (op == "ReduceMax") init = lowest, update = "acc = " + elem + " > acc" + nanWins + " ? " + elem + " : acc;";
  if (op == "ReduceMin") init = highest, update = "acc = " + elem + " < acc" + nanWins + " ? " + elem + " : acc;";
  if (op == "ReduceLogSumExp")
    update = "acc += " + std::string(real == "float" ? "fusec_exp(" : "exp(") + elem + " - peak);", result = "log(acc) + peak";
  if (arg) {
    // The first (or with select_last_index the last) extreme along the axis.
    const bool last = r.attrInt("select_last_index", 0) != 0;
    const std::string cmp = std::string(op == "ArgMax" ? ">" : "<") + (last ? "=" : "");
    init = "0";
    update = "if (r" + std::to_string(reduced.size() - 1) + " == 0 || " + elem + " " + cmp +
             " best) { best = " + elem + "; acc = r" + std::to_string(reduced.size() - 1) + "; }";
  }

  // On CPUs a work-item computes `lanes` neighbouring outputs along the
  // kept innermost axis as one vector (the prologue vectorized along it):
  // PoCL walks a work-item's loop over the reduced axes before the next
  // work-item's, so across work-items nothing is vectorized (ConvNeXt-T's
  // channel variance over 96 x 56 x 56: 0.55-0.58 ms in scalars).
  static const std::set<std::string> kVectorOps = {"ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL1",
                                                   "ReduceL2",  "ReduceMax",  "ReduceMin"};
  int lanes = 0;
  detail::Emitter ve(g, catalog);
  std::string vectorBody;
  if (vectorColumns && kVectorOps.count(op) && xt == DType::Float32 && yt == DType::Float32 && !kept.empty() &&
      kept.back() == xs.size() - 1)
    if (const int l = detail::vectorLanes(xs.back())) {
      ve.vectorize(l, 1);
      std::string vectorParams;
      if (ve.emitBody(prologue, inputs, xs, "i", vectorParams, vectorBody, 0, false)) lanes = l;
    }

  KernelSource k;
  k.name = name;
  k.inputs = inputs;
  k.outputs = {y};
  k.globalSize = static_cast<size_t>(shapeNumel(keptShape) / std::max(lanes, 1));
  // A work-group per work-item: left to choose, PoCL groups a few hundred
  // work-items into work-groups too large to keep both cores busy
  // (ConvNeXt's channel variance: 0.136 -> 0.089-0.116 ms).
  if (lanes) k.localSize = 1;
  std::ostringstream src;
  src << "// " << comment << "\n";
  if (e.usesDouble() || yt == DType::Float64) src << "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
  src << detail::Emitter::prelude() << (lanes ? ve.vectorHelpers() : "");
  src << "__kernel void " << name << "(\n    " << params << ",\n    __global " << detail::cType(yt) << "* restrict out0) {\n";
  src << "  const int o = get_global_id(0)" << (lanes ? " * " + std::to_string(lanes) : "") << ";\n";
  std::string base = "0";
  for (size_t j = 0; j < kept.size(); ++j) {
    const std::string c = "o" + std::to_string(j);
    src << "  const int " << c << " = (o / " << std::max<int64_t>(keptStrides[j], 1) << ") % " << std::max<int64_t>(keptShape[j], 1) << ";\n";
    base += " + " + c + " * " + std::to_string(strides[kept[j]]);
  }
  src << "  const int base = " << base << ";\n";
  // One walk over the reduced elements, `inner` at the innermost point.
  auto loop = [&](const std::string& inner, const std::string& text) {
    std::string index = "base", indent = "  ";
    std::ostringstream l;
    for (size_t j = 0; j < reduced.size(); ++j) {
      const std::string rv = "r" + std::to_string(j);
      l << indent << "for (int " << rv << " = 0; " << rv << " < " << xs[reduced[j]] << "; ++" << rv << ") {\n";
      index += " + " + rv + " * " + std::to_string(strides[reduced[j]]);
      indent += "  ";
    }
    l << indent << "const int i = " << index << ";\n";
    // Coordinate c<d> of the element: a kept axis's from the output index
    // (loop-invariant: a broadcast operand's load leaves the loop), a
    // reduced axis's loop variable. ConvNeXt's channel variance with the
    // mean's coordinates divided out of i: 0.052 -> 0.023 ms.
    for (size_t d = 0; d < xs.size(); ++d) {
      const std::string c = "c" + std::to_string(d);
      if (!detail::Emitter::names(text, c)) continue;
      const auto k = std::find(kept.begin(), kept.end(), d);
      const auto rd = std::find(reduced.begin(), reduced.end(), d);
      l << indent << "const int " << c << " = "
        << (k != kept.end() ? "o" + std::to_string(k - kept.begin()) : "r" + std::to_string(rd - reduced.begin())) << ";\n";
    }
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) l << indent << line.substr(2) << "\n";
    l << indent << inner << "\n";
    for (size_t j = reduced.size(); j-- > 0;) {
      indent.resize(indent.size() - 2);
      l << indent << "}\n";
    }
    return l.str();
  };
  if (op == "ReduceLogSumExp") {  // the largest element first, for a stable sum
    src << "  " << real << " peak = -INFINITY;\n" << loop("peak = fmax(peak, " + elem + ");", body);
    src << "  if (isinf(peak)) peak = 0;\n";
  }
  if (normalize) {
    // Along its axis: the maximum, then the sum of exponentials (or the
    // first maximum's index), then every element's result.
    src << "  float peak = -INFINITY;\n" << loop("peak = fmax(peak, " + elem + ");", body);
    if (op == "Hardmax") {
      src << "  int first = -1;\n" << loop("if (first < 0 && " + elem + " == peak) first = r0;", body);
      src << loop("out0[i] = r0 == first ? 1.0f : 0.0f;", body) << "}\n";
    } else {
      src << "  float sum = 0.0f;\n" << loop("sum += fusec_exp(" + elem + " - peak);", body);
      src << (op == "Softmax" ? loop("out0[i] = fusec_exp(" + elem + " - peak) / sum;", body)
                              : loop("out0[i] = " + elem + " - peak - log(sum);", body))
          << "}\n";
    }
    k.source = src.str();
    return k;
  }
  if (lanes) {
    const std::string vec = "float" + std::to_string(lanes), v = ve.vars().at(x);
    const std::string update = op == "ReduceMax" || op == "ReduceMin" ? "acc = " + detail::extremeWithNaN(op == "ReduceMax", "acc", v) + ";"
                               : op == "ReduceSumSquare" || op == "ReduceL2" ? "acc = fma(" + v + ", " + v + ", acc);"
                               : op == "ReduceL1" ? "acc += fabs(" + v + ");" : "acc += " + v + ";";
    const std::string first = op == "ReduceMax" ? "-INFINITY" : op == "ReduceMin" ? "INFINITY" : "0.0f";
    const std::string out = op == "ReduceMean" ? "acc / " + std::to_string(count) + ".0f" : op == "ReduceL2" ? "sqrt(acc)" : "acc";
    src << "  " << vec << " acc = (" << vec << ")(" << first << ");\n" << loop(update, vectorBody);
    src << "  vstore" << lanes << "(" << out << ", 0, out0 + o);\n}\n";
    k.source = src.str();
    return k;
  }
  if (arg) src << "  " << detail::cType(xt) << " best = 0;\n";
  src << "  " << (arg ? "long" : acc) << " acc = " << init << ";\n" << loop(update, body);
  src << "  out0[o] = (" << detail::cType(yt) << ")(" << result << ");\n}\n";
  k.source = src.str();
  return k;
}

FUSEC_KERNEL_FAMILY(reduce) {
  return {"reduce",
          "elementwise ops feeding one reduction over any axes known when the kernel is generated (Reduce*, "
          "ArgMax, ArgMin, Softmax over an outer axis), which ends the group",
          "it does not end in a reduction with known axes",
          {"#f8efc9", "#a88414"},
          [](const Graph& g, const std::vector<NodeRef>& group, const OpCatalog&) { return isAxisReduction(g, group.back()); },
          [](const EmitRequest& r) {
            return emitReduce(r.graph, r.group, r.catalog, r.name, r.comment, r.options.vectorColumns);
          }};
}

}  // namespace fusec::codegen
