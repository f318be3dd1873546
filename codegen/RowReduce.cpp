/// The row_reduce family; see RowReduce.h.
#include "fusec/codegen/RowReduce.h"

#include <sstream>

#include "ElementwiseEmitter.h"

namespace fusec::codegen {
namespace {

constexpr int kLocal = 64;  // work-items per row; a power of two for the tree

/// The reduced axis is the innermost one: `axis` (-1 or rank-1) or `axes`
/// (attribute or constant operand) naming only it.
bool innermost(const Graph& g, const NodeData& d, int64_t rank) {
  auto last = [&](int64_t a) { return a == -1 || a == rank - 1; };
  if (d.op == "Softmax" || d.op == "LogSoftmax" || d.op == "LayerNormalization") {
    if (d.op != "LayerNormalization" && g.info.defaultOpset() < 13) return rank == 2 && [&] {
      const Attribute* a = d.attr("axis");
      return !a || last(std::get<int64_t>(*a)) || std::get<int64_t>(*a) == 1;
    }();
    const Attribute* a = d.attr("axis");
    return !a || (std::holds_alternative<int64_t>(*a) && last(std::get<int64_t>(*a)));
  }
  std::vector<int64_t> axes;
  if (const Attribute* a = d.attr("axes"); a && std::holds_alternative<std::vector<int64_t>>(*a))
    axes = std::get<std::vector<int64_t>>(*a);
  else if (d.inputs.size() > 1 && d.inputs[1] != kNoValue && g.isConstant(d.inputs[1]))
    axes = g.value(d.inputs[1]).constant->toInt64s();
  else if (rank == 1 && !(d.attr("noop_with_empty_axes") && std::get<int64_t>(*d.attr("noop_with_empty_axes")) != 0))
    axes = {0};
  return axes.size() == 1 && last(axes[0]);
}

}  // namespace

/// Ops whose rows are the (image, channel) planes of an N, C, spatial... tensor.
static bool reducesPlanes(const NodeData& d) {
  return d.op == "GlobalAveragePool" || d.op == "GlobalMaxPool" || d.op == "InstanceNormalization";
}

bool isRowReduction(const Graph& g, NodeRef n) {
  static const std::set<std::string> kOps = {"Softmax",         "LogSoftmax",       "LayerNormalization", "ReduceSum",
                                             "ReduceMean",      "ReduceMax",        "ReduceMin",          "ReduceL2",
                                             "ReduceSumSquare", "GlobalAveragePool", "GlobalMaxPool", "InstanceNormalization"};
  const NodeData& d = g.node(n);
  if (!d.domain.empty() || !kOps.count(d.op.str()) || d.inputs.empty() || d.inputs[0] == kNoValue) return false;
  const TensorType& t = g.value(d.inputs[0]).type;
  if (!t.isStatic() || t.dims->empty()) return false;
  // Global pools and instance norm reduce each (image, channel) plane: contiguous rows.
  if (reducesPlanes(d)) return t.dims->size() >= 3;
  return innermost(g, d, static_cast<int64_t>(t.dims->size()));
}

Expected<KernelSource> emitRowReduce(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                     const std::string& name, const std::string& comment) {
  if (members.empty() || !isRowReduction(g, members.back()))
    return Error{"group `" + name + "` does not end in a reduction over the innermost axis", true};
  const NodeRef rn = members.back();
  const NodeData& r = g.node(rn);
  const std::string op = r.op.str();
  for (size_t o = 1; o < r.outputs.size(); ++o)
    if (r.outputs[o] != kNoValue && (!g.uses(r.outputs[o]).empty() || g.isGraphOutput(r.outputs[o])))
      return Error{"`" + op + "` with its optional results used has no kernel path", true};
  const ValueId x = r.inputs[0];
  const Shape xs = g.value(x).type.staticShape();
  // The row: the innermost axis, or a spatial plane.
  const int64_t n = reducesPlanes(r) ? shapeNumel(xs) / (xs[0] * xs[1]) : xs.back();
  if (n <= 0) return Error{"an empty row has no kernel path", true};
  const int64_t rows = shapeNumel(xs) / n;
  const std::vector<NodeRef> prologue(members.begin(), members.end() - 1);

  detail::Emitter e(g, catalog);
  GroupBoundary boundary = groupBoundary(g, prologue);
  std::vector<ValueId> inputs = std::move(boundary.inputs);
  for (ValueId v : boundary.outputs)
    if (v != x) return Error{"a prologue value used outside the group (`" + g.value(v).name + "`) has no kernel path", true};
  if (prologue.empty()) inputs = {x};
  std::string params, body;
  if (Status st = e.emitBody(prologue, inputs, xs, "i", params, body); !st) return st.error();

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
  k.outputs = {y};
  k.localSize = kLocal;
  k.globalSize = static_cast<size_t>(rows) * kLocal;

  std::string args;  // the prologue's arguments, as passed from the kernel
  for (size_t a = 0; a < inputs.size(); ++a) args += ", in" + std::to_string(a);
  std::ostringstream src;
  src << "// " << comment << "\n" << detail::Emitter::prelude();
  src << "#define FUSEC_LOCAL " << kLocal << "\n";
  src << "#define FUSEC_N " << n << "\n";
  src << "// The reduction's input at linear index i (the fused prologue).\n";
  src << "inline float fusec_x(const int i,\n    " << params << ") {\n" << body;
  src << "  return " << e.vars().at(x) << ";\n}\n";
  src << "__kernel __attribute__((reqd_work_group_size(FUSEC_LOCAL, 1, 1))) void " << name << "(\n    " << params;
  for (size_t a = 0; a < extras.size(); ++a)
    src << ",\n    __global const float* restrict in" << inputs.size() + a;
  src << ",\n    __global float* restrict out0) {\n";
  src << "  const int row = get_group_id(0), lid = get_local_id(0);\n";
  src << "  const int base = row * FUSEC_N;\n";
  src << "  __local float scratch[FUSEC_LOCAL];\n";
  // A tree reduction of `acc` with `combine`, leaving the result in `var`.
  auto tree = [&](const std::string& var, const std::string& combine) {
    src << "  scratch[lid] = acc;\n  barrier(CLK_LOCAL_MEM_FENCE);\n";
    src << "  for (int s = FUSEC_LOCAL / 2; s > 0; s >>= 1) {\n";
    src << "    if (lid < s) scratch[lid] = " << combine << ";\n";
    src << "    barrier(CLK_LOCAL_MEM_FENCE);\n  }\n";
    src << "  const float " << var << " = scratch[0];\n  barrier(CLK_LOCAL_MEM_FENCE);\n";
  };
  const std::string xAt = "fusec_x(base + j" + args + ")";
  const std::string loop = "  for (int j = lid; j < FUSEC_N; j += FUSEC_LOCAL) ";
  const std::string sumCombine = "scratch[lid] + scratch[lid + s]";
  if (op == "Softmax" || op == "LogSoftmax") {
    src << "  float acc = -INFINITY;\n" << loop << "acc = fmax(acc, " << xAt << ");\n";
    tree("mx", "fmax(scratch[lid], scratch[lid + s])");
    src << "  acc = 0.0f;\n" << loop << "acc += exp(" << xAt << " - mx);\n";
    tree("sum", sumCombine);
    if (op == "Softmax") src << loop << "out0[base + j] = exp(" << xAt << " - mx) / sum;\n";
    else src << loop << "out0[base + j] = " << xAt << " - mx - log(sum);\n";
  } else if (op == "LayerNormalization" || instance) {
    float eps = 1e-5f;
    if (const Attribute* a = r.attr("epsilon"); a && std::holds_alternative<float>(*a)) eps = std::get<float>(*a);
    src << "  float acc = 0.0f;\n" << loop << "acc += " << xAt << ";\n";
    tree("mean", sumCombine);
    src << "  const float mu = mean / FUSEC_N;\n";
    src << "  acc = 0.0f;\n" << loop << "{ const float d = " << xAt << " - mu; acc += d * d; }\n";
    tree("sq", sumCombine);
    src << "  const float inv = rsqrt(sq / FUSEC_N + " << detail::floatLiteral(eps) << ");\n";
    const std::string at = instance ? "[row % " + std::to_string(xs[1]) + "]" : "[j]";
    const std::string scale = extras.size() > 0 ? "in" + std::to_string(inputs.size()) + at : "1.0f";
    const std::string bias = extras.size() > 1 ? "in" + std::to_string(inputs.size() + 1) + at : "0.0f";
    src << loop << "out0[base + j] = (" << xAt << " - mu) * inv * " << scale << " + " << bias << ";\n";
  } else {
    const bool isMax = op == "ReduceMax" || op == "GlobalMaxPool", isMin = op == "ReduceMin";
    const bool squares = op == "ReduceL2" || op == "ReduceSumSquare";
    src << "  float acc = " << (isMax ? "-INFINITY" : isMin ? "INFINITY" : "0.0f") << ";\n";
    src << loop << "{ const float v = " << xAt << "; acc = "
        << (isMax ? "fmax(acc, v)" : isMin ? "fmin(acc, v)" : squares ? "acc + v * v" : "acc + v") << "; }\n";
    tree("total", isMax ? "fmax(scratch[lid], scratch[lid + s])" : isMin ? "fmin(scratch[lid], scratch[lid + s])" : sumCombine);
    const std::string result = op == "ReduceMean" || op == "GlobalAveragePool" ? "total / FUSEC_N" : op == "ReduceL2" ? "sqrt(total)" : "total";
    src << "  if (lid == 0) out0[row] = " << result << ";\n";
  }
  src << "}\n";
  k.source = src.str();
  return k;
}

}  // namespace fusec::codegen
