/// The axis_layernorm family: a LayerNormalization over one axis that is
/// not the innermost, as exporters write it (a Transpose moving the axis
/// last, LayerNormalization over it, the inverse Transpose); see Emitters.h.
#include <algorithm>
#include <numeric>
#include <sstream>

#include "ElementwiseEmitter.h"
#include "Emitters.h"
#include "FamilyRegistry.h"

namespace fusec::codegen {
namespace {

/// The perm that moves axis `a` of a rank-`rank` tensor last, keeping the
/// others in order, and its inverse.
std::vector<int64_t> axisLast(int64_t rank, int64_t a) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < rank; ++i)
    if (i != a) p.push_back(i);
  p.push_back(a);
  return p;
}

/// A Transpose's perm; without one, the axes reversed.
std::vector<int64_t> permOf(const NodeData& t, int64_t rank) {
  const Attribute* a = t.attr("perm");
  if (a && std::holds_alternative<std::vector<int64_t>>(*a)) return std::get<std::vector<int64_t>>(*a);
  std::vector<int64_t> p(static_cast<size_t>(rank));
  std::iota(p.rbegin(), p.rend(), 0);
  return p;
}

std::vector<int64_t> inverse(const std::vector<int64_t>& p) {
  std::vector<int64_t> q(p.size());
  for (size_t i = 0; i < p.size(); ++i) q[static_cast<size_t>(p[i])] = static_cast<int64_t>(i);
  return q;
}

/// What the group normalizes, or why it is not this family's.
struct AxisNorm {
  ValueId x = kNoValue, scale = kNoValue, bias = kNoValue, y = kNoValue;
  Shape shape;    ///< x's (and y's) shape
  int64_t axis = 0;
  float epsilon = 1e-5f;
};

Expected<AxisNorm> axisNorm(const Graph& g, const std::vector<NodeRef>& members) {
  const Error notOurs{"it is not a Transpose moving one axis last, LayerNormalization over that axis and the inverse "
                      "Transpose",
                      true};
  if (members.size() != 3) return notOurs;
  const NodeData &t1 = g.node(members[0]), &ln = g.node(members[1]), &t2 = g.node(members[2]);
  if (t1.op != "Transpose" || ln.op != "LayerNormalization" || t2.op != "Transpose") return notOurs;
  if (ln.inputs.empty() || ln.inputs[0] != t1.outputs[0] || t2.inputs.empty() || t2.inputs[0] != ln.outputs[0])
    return notOurs;
  AxisNorm n;
  n.x = t1.inputs[0];
  n.y = t2.outputs[0];
  const TensorType &xt = g.value(n.x).type, &yt = g.value(n.y).type;
  if (!xt.isStatic() || !yt.isStatic() || xt.dtype != DType::Float32 || yt.dtype != DType::Float32)
    return Error{"axis_layernorm builds float32 tensors of static shapes only", true};
  n.shape = xt.staticShape();
  const int64_t rank = static_cast<int64_t>(n.shape.size());
  const std::vector<int64_t> perm = permOf(t1, rank);
  if (rank < 2 || static_cast<int64_t>(perm.size()) != rank) return notOurs;
  n.axis = perm.back();
  if (n.axis < 0 || n.axis >= rank - 1 || perm != axisLast(rank, n.axis) || permOf(t2, rank) != inverse(perm))
    return Error{"the Transposes do not move one axis last and back", true};
  if (ln.attrInt("axis", -1) != -1 && ln.attrInt("axis", -1) != rank - 1)
    return Error{"the LayerNormalization is not over the last axis alone", true};
  for (size_t o = 1; o < ln.outputs.size(); ++o)
    if (ln.outputs[o] != kNoValue && (!g.uses(ln.outputs[o]).empty() || g.isGraphOutput(ln.outputs[o])))
      return Error{"LayerNormalization with its optional results used has no axis_layernorm path", true};
  const int64_t length = n.shape[static_cast<size_t>(n.axis)];
  for (size_t k = 1; k < ln.inputs.size() && k < 3; ++k) {
    if (ln.inputs[k] == kNoValue) continue;
    const TensorType& t = g.value(ln.inputs[k]).type;
    if (!t.isStatic() || t.dtype != DType::Float32 || t.staticShape() != Shape{length})
      return Error{"LayerNormalization's scale and bias must be float vectors along the normalized axis", true};
    (k == 1 ? n.scale : n.bias) = ln.inputs[k];
  }
  if (n.scale == kNoValue) return Error{"LayerNormalization needs its scale", true};
  if (const Attribute* a = ln.attr("epsilon"); a && std::holds_alternative<float>(*a)) n.epsilon = std::get<float>(*a);
  return n;
}

}  // namespace

bool isAxisLayerNormGroup(const Graph& g, const std::vector<NodeRef>& members) {
  return members.size() == 3 && g.node(members[0]).op == "Transpose" &&
         g.node(members[1]).op == "LayerNormalization" && g.node(members[2]).op == "Transpose";
}

Expected<KernelSource> emitAxisLayerNorm(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog&,
                                         const std::string& name, const std::string& comment, bool vectorColumns) {
  Expected<AxisNorm> found = axisNorm(g, members);
  if (!found) return found.error();
  const AxisNorm& n = found.value();
  const Shape& s = n.shape;
  const int64_t length = s[static_cast<size_t>(n.axis)];
  if (length <= 0 || shapeNumel(s) == 0) return Error{"an empty tensor has no axis_layernorm path", true};
  // Work-item p owns position p of the other axes in x's layout; the
  // normalized axis is walked at its stride, three times (sum, centred
  // squares, result: the later walks hit the cache). On CPUs `lanes`
  // neighbouring positions, contiguous within a stride, are one vector
  // (PoCL runs a work-item's loop before the next work-item's: across
  // work-items nothing would be vectorized), and each work-item is a
  // work-group of its own: left to choose, PoCL groups a few hundred
  // work-items into work-groups too few to keep both cores busy (96 x 56 x
  // 56: 0.151 -> 0.092 ms). A run of several vectors per work-item measured
  // slower (0.077-0.105 against 0.061-0.070 ms: fewer work-items to share).
  const Shape strides = stridesOf(s);
  const int64_t stride = strides[static_cast<size_t>(n.axis)];
  const int lanes = vectorColumns ? std::max(detail::vectorLanes(stride), 1) : 1;
  const std::string L = lanes > 1 ? std::to_string(lanes) : "";
  const std::string vec = "float" + L;
  auto load = [&](const std::string& at) {
    return lanes > 1 ? "vload" + L + "(0, " + at + ")" : "*(" + at + ")";
  };

  KernelSource k;
  k.name = name;
  k.inputs = {n.x, n.scale};
  if (n.bias != kNoValue) k.inputs.push_back(n.bias);
  k.outputs = {n.y};
  k.globalSize = static_cast<size_t>(shapeNumel(s) / length / lanes);
  if (vectorColumns) k.localSize = 1;
  std::ostringstream src;
  src << "// " << comment << "\n"
      << "// LayerNormalization over axis " << n.axis << " of " << shapeToString(s) << " (" << length
      << " elements " << stride << " apart), read and written in place of the Transposes around it"
      << (lanes > 1 ? "; " + L + " neighbouring positions per work-item" : "") << ".\n";
  src << "__kernel void " << name << "(\n    __global const float* restrict in0,\n"
      << "    __global const float* restrict in1,\n";
  if (n.bias != kNoValue) src << "    __global const float* restrict in2,\n";
  src << "    __global float* restrict out0) {\n";
  // The position's offset: its index among the positions, with the
  // normalized axis taken out, spread back over x's strides.
  src << "  const int p = get_global_id(0)" << (lanes > 1 ? " * " + L : "") << ";\n";
  src << "  const int base = (p / " << stride << ") * " << stride * length << " + p % " << stride << ";\n";
  const std::string at = "in0 + base + c * " + std::to_string(stride);
  // The mean of the shifted values x - x[0] (the shifted-data algorithm):
  // near a large offset (values 10^4 +- 1) the differences are exact, and
  // a mean rounded at the offset's ulp would move every deviation by it.
  src << "  const " << vec << " shift = " << load("in0 + base") << ";\n";
  src << "  " << vec << " acc = (" << vec << ")(0.0f);\n";
  src << "  for (int c = 0; c < " << length << "; ++c) acc += " << load(at) << " - shift;\n";
  src << "  const " << vec << " mu = acc / " << length << ".0f;\n";
  src << "  acc = (" << vec << ")(0.0f);\n";
  src << "  for (int c = 0; c < " << length << "; ++c) {\n"
      << "    const " << vec << " d = (" << load(at) << " - shift) - mu;\n"
      << "    acc = fma(d, d, acc);\n  }\n";
  src << "  const " << vec << " inv = rsqrt(acc / " << length << ".0f + " << detail::floatLiteral(n.epsilon) << ");\n";
  src << "  for (int c = 0; c < " << length << "; ++c) {\n"
      << "    const " << vec << " v = ((" << load(at) << " - shift) - mu) * inv * in1[c]"
      << (n.bias != kNoValue ? " + in2[c]" : "") << ";\n"
      << (lanes > 1 ? "    vstore" + L + "(v, 0, out0 + base + c * " + std::to_string(stride) + ");\n"
                    : "    out0[base + c * " + std::to_string(stride) + "] = v;\n")
      << "  }\n}\n";
  k.source = src.str();
  return k;
}

FUSEC_KERNEL_FAMILY(axis_layernorm) {
  return {"axis_layernorm",
          "LayerNormalization over one axis that is not the innermost, as exporters write it: a "
          "Transpose moving the axis last, LayerNormalization over the last axis, the inverse Transpose (float32, static "
          "shapes; ConvNeXt's LayerNorm2d), as one kernel that reads and writes the tensor in its own layout",
          "it is not a Transpose, LayerNormalization and Transpose",
          {"#fde8d8", "#b5522a"},
          [](const Graph& g, const std::vector<NodeRef>& group, const OpCatalog&) { return isAxisLayerNormGroup(g, group); },
          [](const EmitRequest& r) {
            return emitAxisLayerNorm(r.graph, r.group, r.catalog, r.name, r.comment, r.options.vectorColumns);
          }};
}

}  // namespace fusec::codegen
