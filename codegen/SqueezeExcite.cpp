/// The squeeze_excite family: a squeeze-and-excitation gate (channel
/// means, a 1x1 conv down, its activation, a 1x1 conv back up, the gate's
/// activation) as one kernel; see Emitters.h.
#include <algorithm>
#include <sstream>

#include "ElementwiseEmitter.h"
#include "Emitters.h"
#include "FamilyRegistry.h"

namespace fusec::codegen {
namespace {

/// A 1x1 conv on one pixel per image: a matrix-vector product per image.
struct PixelConv {
  NodeRef node{};
  ValueId weight = kNoValue, bias = kNoValue, y = kNoValue;
  int64_t out = 0;  ///< output channels
};

/// The gate's parts, or why the group is not this family's.
struct Gate {
  ValueId x = kNoValue;
  Shape xs;
  int64_t pixels = 0;  ///< H x W (x ...): what each mean averages
  PixelConv squeeze, excite;
  std::vector<NodeRef> between, after;  ///< the elementwise ops after each conv
};

bool isChannelMean(const Graph& g, const NodeData& d) {
  if (!d.domain.empty() || d.inputs.empty() || d.inputs[0] == kNoValue) return false;
  if (d.op == "GlobalAveragePool") return true;
  if (d.op != "ReduceMean" || d.attrInt("keepdims", 1) == 0) return false;
  const TensorType& t = g.value(d.inputs[0]).type;
  if (!t.isStatic()) return false;
  const int64_t rank = static_cast<int64_t>(t.dims->size());
  const std::optional<std::vector<int64_t>> axes = reducedAxes(g, d, rank);
  if (!axes || rank < 3 || static_cast<int64_t>(axes->size()) != rank - 2) return false;
  for (int64_t a = 0; a < rank - 2; ++a)
    if ((*axes)[static_cast<size_t>(a)] != a + 2) return false;
  return true;
}

/// `d` as a 1x1 conv of `channels` channels on one pixel, or why not.
Expected<PixelConv> pixelConv(const Graph& g, NodeRef n, int64_t channels) {
  const NodeData& d = g.node(n);
  PixelConv c;
  c.node = n;
  c.y = d.outputs[0];
  c.weight = d.inputs.size() > 1 ? d.inputs[1] : kNoValue;
  c.bias = d.inputs.size() > 2 ? d.inputs[2] : kNoValue;
  if (c.weight == kNoValue) return Error{"Conv needs a weight", true};
  for (ValueId v : {c.weight, c.bias, c.y})
    if (v != kNoValue && (!g.value(v).type.isStatic() || g.value(v).type.dtype != DType::Float32))
      return Error{"squeeze_excite builds float32 tensors of static shapes only", true};
  const Shape ws = g.value(c.weight).type.staticShape(), ys = g.value(c.y).type.staticShape();
  if (d.attrInt("group", 1) != 1 || ws.size() < 3 || ws[1] != channels ||
      std::any_of(ws.begin() + 2, ws.end(), [](int64_t k) { return k != 1; }))
    return Error{"the gate's convs must be 1x1 convs of one group", true};
  c.out = ws[0];
  if (ys.size() != ws.size() || ys[1] != c.out || std::any_of(ys.begin() + 2, ys.end(), [](int64_t k) { return k != 1; }))
    return Error{"the gate's convs must keep one pixel (no padding)", true};
  if (c.bias != kNoValue && g.value(c.bias).type.staticShape() != Shape{c.out})
    return Error{"the conv's bias is not one value per output channel", true};
  return c;
}

Expected<Gate> gateOf(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog) {
  const Error notOurs{"it is not a channel mean, a 1x1 conv, elementwise ops, a 1x1 conv and elementwise ops", true};
  if (members.size() < 3 || !isChannelMean(g, g.node(members[0]))) return notOurs;
  std::vector<size_t> convs;
  for (size_t i = 1; i < members.size(); ++i) {
    const NodeData& d = g.node(members[i]);
    if (d.domain.empty() && d.op == "Conv") {
      convs.push_back(i);
      continue;
    }
    const OpDef* op = d.domain.empty() ? catalog.find(d.op.str()) : nullptr;
    if (!op || !op->semantics || (op->kind != OpKind::Elementwise && op->kind != OpKind::Broadcast)) return notOurs;
  }
  if (convs.size() != 2 || convs[0] != 1) return notOurs;
  Gate gate;
  const NodeData& mean = g.node(members[0]);
  gate.x = mean.inputs[0];
  const TensorType& xt = g.value(gate.x).type;
  if (!xt.isStatic() || xt.dtype != DType::Float32 || !g.value(mean.outputs[0]).type.isStatic())
    return Error{"squeeze_excite builds float32 tensors of static shapes only", true};
  gate.xs = xt.staticShape();
  if (gate.xs.size() < 3 || shapeNumel(gate.xs) == 0) return Error{"the gate needs a non-empty image batch", true};
  gate.pixels = shapeNumel(Shape(gate.xs.begin() + 2, gate.xs.end()));
  if (g.node(members[1]).inputs.empty() || g.node(members[1]).inputs[0] != mean.outputs[0])
    return Error{"the first conv does not read the channel means", true};
  Expected<PixelConv> squeeze = pixelConv(g, members[1], gate.xs[1]);
  if (!squeeze) return squeeze.error();
  gate.squeeze = squeeze.value();
  gate.between.assign(members.begin() + 2, members.begin() + static_cast<std::ptrdiff_t>(convs[1]));
  gate.after.assign(members.begin() + static_cast<std::ptrdiff_t>(convs[1]) + 1, members.end());
  // The squeezed vector is kept in local memory: only the second conv may
  // read the values computed before it, and it reads the last of them.
  const auto exciteAt = members.begin() + static_cast<std::ptrdiff_t>(convs[1]);
  const NodeRef exciteNode = *exciteAt;
  for (auto it = members.begin(); it != exciteAt; ++it)
    for (ValueId v : g.node(*it).outputs) {
      if (v == kNoValue) continue;
      if (g.isGraphOutput(v)) return Error{"a value before the second conv is a graph output", true};
      for (const Use& u : g.uses(v))
        if (std::find(members.begin(), exciteAt + 1, u.node) == exciteAt + 1)
          return Error{"a value before the second conv is read after it or outside the group", true};
    }
  const ValueId squeezed = g.node(exciteNode).inputs.empty() ? kNoValue : g.node(exciteNode).inputs[0];
  const ValueId last = gate.between.empty() ? gate.squeeze.y : g.node(gate.between.back()).outputs[0];
  if (squeezed == kNoValue || squeezed != last)
    return Error{"the second conv does not read the result of the first and the ops after it", true};
  Expected<PixelConv> excite = pixelConv(g, exciteNode, gate.squeeze.out);
  if (!excite) return excite.error();
  gate.excite = excite.value();
  // Each elementwise op computes one value per image and channel of its conv.
  for (const auto& [ops, head] : {std::pair{&gate.between, gate.squeeze.y}, std::pair{&gate.after, gate.excite.y}})
    for (NodeRef n : *ops)
      for (ValueId v : g.node(n).outputs)
        if (v != kNoValue && (!g.value(v).type.isStatic() || g.value(v).type.staticShape() != g.value(head).type.staticShape()))
          return Error{"an elementwise op after a conv changes the shape of its result", true};
  return gate;
}

/// The sum of a float vector's lanes.
std::string laneSum(const std::string& v, int lanes) {
  if (lanes == 1) return v;
  if (lanes == 2) return "(" + v + ".s0 + " + v + ".s1)";
  if (lanes == 4) return "((" + v + ".s0 + " + v + ".s1) + (" + v + ".s2 + " + v + ".s3))";
  return laneSum("(" + v + ".lo + " + v + ".hi)", lanes / 2);
}

/// The widest of 8, 4, 2 and 1 lanes that divides `n`.
int lanesFor(int64_t n) {
  for (int l : {8, 4, 2})
    if (n % l == 0) return l;
  return 1;
}

}  // namespace

bool isSqueezeExciteGroup(const Graph& g, const std::vector<NodeRef>& members) {
  if (members.size() < 3 || !isChannelMean(g, g.node(members[0]))) return false;
  return std::count_if(members.begin(), members.end(), [&](NodeRef n) { return g.node(n).op == "Conv"; }) == 2;
}

Expected<KernelSource> emitSqueezeExcite(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                         const std::string& name, const std::string& comment, bool oneWorkItem) {
  Expected<Gate> found = gateOf(g, members, catalog);
  if (!found) return found.error();
  const Gate& gate = found.value();
  const int64_t images = gate.xs[0], C = gate.xs[1], S = gate.squeeze.out, E = gate.excite.out, P = gate.pixels;
  const ValueId squeezed = g.node(gate.excite.node).inputs[0];

  KernelSource k;
  k.name = name;
  k.inputs = {gate.x, gate.squeeze.weight};
  if (gate.squeeze.bias != kNoValue) k.inputs.push_back(gate.squeeze.bias);
  const size_t exciteWeightAt = k.inputs.size();
  k.inputs.push_back(gate.excite.weight);
  if (gate.excite.bias != kNoValue) k.inputs.push_back(gate.excite.bias);

  // Each conv's elementwise ops, on its [images, channels, 1, ...] result
  // bound to `acc`; their operands follow the convs' parameters.
  detail::Emitter e1(g, catalog), e2(g, catalog);
  auto stage = [&](detail::Emitter& e, const std::vector<NodeRef>& ops, ValueId head, std::string& params,
                   std::string& body) -> Status {
    std::vector<NodeRef> withHead = {head == gate.squeeze.y ? gate.squeeze.node : gate.excite.node};
    withHead.insert(withHead.end(), ops.begin(), ops.end());
    Expected<detail::Emitter::Epilogue> epi = e.epilogue(withHead, head, "squeeze_excite");
    if (!epi) return epi.error();
    e.bind(head, "acc");
    const size_t first = k.inputs.size();
    k.inputs.insert(k.inputs.end(), epi->inputs.begin(), epi->inputs.end());
    return e.emitBody(epi->members, epi->inputs, g.value(head).type.staticShape(), "i", params, body, first);
  };
  std::string params1, body1, params2, body2;
  if (Status st = stage(e1, gate.between, gate.squeeze.y, params1, body1); !st) return st.error();
  if (Status st = stage(e2, gate.after, gate.excite.y, params2, body2); !st) return st.error();
  for (ValueId v : groupBoundary(g, members).outputs) {
    if (!e2.vars().count(v)) return Error{"a result of the gate is not computed after the second conv", true};
    k.outputs.push_back(v);
  }
  if (k.outputs.empty()) return Error{"group `" + name + "` computes nothing that is used", true};

  // One work-group per image: the means, the squeezed vector and the gate
  // pass through local memory between barriers. On CPUs the group is one
  // work-item running the three loops with vector loads (PoCL would run a
  // wide group's items one after another at each barrier anyway).
  const int L = oneWorkItem ? 1 : 64;
  k.globalSize = static_cast<size_t>(images * L);
  k.localSize = static_cast<size_t>(L);
  k.localMemBytes = static_cast<size_t>(C + S) * sizeof(float);
  // Each loop takes R rows at a time (channels to average, weight rows to
  // multiply), R independent sums in flight: one sum per row is a chain of
  // dependent adds (MobileNetV3-small's 576 x 49 means and 576 x 144
  // products: 87 us as chains, against 44 us for the three kernels apart).
  const int R = oneWorkItem ? 8 : 1;

  std::ostringstream src;
  src << "// " << comment << "\n";
  src << "// Squeeze-and-excitation gate of " << shapeToString(gate.xs) << ": the means of " << C << " channels over "
      << P << " pixels, a 1x1 conv to " << S << " channels and its elementwise ops, a 1x1 conv to " << E
      << " and its ops,\n// one work-group per image, the vectors in local memory, " << R << " rows at a time.\n";
  src << detail::Emitter::prelude();
  src << "__kernel __attribute__((reqd_work_group_size(" << L << ", 1, 1))) void " << name << "(";
  std::string params;
  const size_t convParams = exciteWeightAt + (gate.excite.bias != kNoValue ? 2 : 1);
  for (size_t a = 0; a < convParams; ++a)
    params += std::string(a ? ",\n    " : "\n    ") + "__global const float* restrict in" + std::to_string(a);
  for (const std::string* p : {&params1, &params2})
    if (!p->empty()) params += ",\n    " + *p;
  for (size_t o = 0; o < k.outputs.size(); ++o)
    params += ",\n    __global float* restrict out" + std::to_string(o);
  src << params << ") {\n";
  src << "  __local float pooled[" << C << "];\n  __local float squeezed[" << S << "];\n";
  src << "  const int n = get_group_id(0), lid = get_local_id(0);\n";
  // for each block of R rows r0.. of `rows`: row r's data at `data` (rows
  // past the last clamped to it), reduced along `length` into a vector
  // each, `finish` run for the rows that exist with `acc` = the row's sum.
  auto blocked = [&](int64_t rows, const std::string& data, int64_t length, const std::string& other,
                     const std::string& finish) {
    const int lanes = lanesFor(length);
    const std::string Ls = std::to_string(lanes), vec = lanes > 1 ? "float" + Ls : "float";
    auto load = [&](const std::string& at) { return lanes > 1 ? "vload" + Ls + "(0, " + at + ")" : "(" + at + ")[0]"; };
    src << "  for (int r0 = lid * " << R << "; r0 < " << rows << "; r0 += " << L * R << ") {\n";
    for (int r = 0; r < R; ++r)
      src << "    const __global float* d" << r << " = " << data << " + min(r0 + " << r << ", " << rows - 1 << ") * "
          << length << ";\n    " << vec << " a" << r << " = (" << vec << ")(0.0f);\n";
    src << "    for (int j = 0; j < " << length << "; j += " << lanes << ") {\n";
    if (!other.empty()) src << "      const " << vec << " b = " << load(other + " + j") << ";\n";
    for (int r = 0; r < R; ++r)
      src << "      a" << r << (other.empty() ? " += " + load("d" + std::to_string(r) + " + j")
                                              : " = fma(" + load("d" + std::to_string(r) + " + j") + ", b, a" +
                                                    std::to_string(r) + ")")
          << ";\n";
    src << "    }\n";
    for (int r = 0; r < R; ++r)
      src << "    if (r0 + " << r << " < " << rows << ") {\n      const int row = r0 + " << r
          << ";\n      float acc = " << laneSum("a" + std::to_string(r), lanes) << ";\n"
          << finish << "    }\n";
    src << "  }\n";
  };
  auto indented = [](const std::string& body) {
    std::string out;
    std::istringstream lines(body);
    for (std::string line; std::getline(lines, line);) out += "    " + line + "\n";
    return out;
  };
  blocked(C, "in0 + n * " + std::to_string(C * P), P, "",
          "      pooled[row] = acc / " + std::to_string(P) + ".0f;\n");
  src << "  barrier(CLK_LOCAL_MEM_FENCE);\n";
  blocked(S, "in1", C, "pooled",
          (gate.squeeze.bias != kNoValue ? "      acc += in2[row];\n" : std::string()) + "      const int i = n * " +
              std::to_string(S) + " + row;\n" + indented(body1) + "      squeezed[row] = " + e1.vars().at(squeezed) + ";\n");
  src << "  barrier(CLK_LOCAL_MEM_FENCE);\n";
  std::string stores;
  for (size_t o = 0; o < k.outputs.size(); ++o)
    stores += "      out" + std::to_string(o) + "[i] = " + e2.vars().at(k.outputs[o]) + ";\n";
  blocked(E, "in" + std::to_string(exciteWeightAt), S, "squeezed",
          (gate.excite.bias != kNoValue ? "      acc += in" + std::to_string(exciteWeightAt + 1) + "[row];\n"
                                        : std::string()) +
              "      const int i = n * " + std::to_string(E) + " + row;\n" + indented(body2) + stores);
  src << "}\n";
  k.source = src.str();
  return k;
}

FUSEC_KERNEL_FAMILY(squeeze_excite) {
  return {"squeeze_excite",
          "a squeeze-and-excitation gate: the channel means (GlobalAveragePool, or ReduceMean over "
          "the spatial axes), a 1x1 conv and elementwise ops on its result, a 1x1 conv and elementwise ops on that "
          "(float32, static shapes), as one kernel: a work-group per image, the means and the squeezed vector in local "
          "memory",
          "it is not a channel mean, a 1x1 conv, elementwise ops, a 1x1 conv and elementwise ops",
          {"#e0ecd4", "#5a7d2a"},
          [](const Graph& g, const std::vector<NodeRef>& group, const OpCatalog&) { return isSqueezeExciteGroup(g, group); },
          [](const EmitRequest& r) {
            return emitSqueezeExcite(r.graph, r.group, r.catalog, r.name, r.comment, r.options.vectorColumns);
          }};
}

}  // namespace fusec::codegen
