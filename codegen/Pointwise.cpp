/// The pointwise kernel family; see Pointwise.h. The work is done by the
/// shared elementwise emitter (ElementwiseEmitter.h), with the index_map
/// family's fetch functions for a data-movement prologue.
#include "fusec/codegen/Pointwise.h"

#include <optional>
#include <sstream>

#include "ElementwiseEmitter.h"
#include "fusec/codegen/Emitters.h"

namespace fusec::codegen {

namespace {

/// A Concat read by elementwise ops, as segments: each work-group reads one
/// input, so the choice of input is the same for all its work-items (a
/// per-element choice among n inputs costs every work-item n masked loads
/// once the work-items are vectorized: 4.7x the time on a DenseNet Concat of
/// 17 inputs). Only where the group computes over the Concat's shape.
std::optional<detail::SegmentedPrologue> concatSegments(const Graph& g, NodeRef concat,
                                                        const std::vector<ValueId>& outputs) {
  constexpr int64_t kLocal = 64;
  const NodeData& d = g.node(concat);
  const ValueId out = d.outputs[0];
  const TensorType& t = g.value(out).type;
  if (!t.isStatic() || t.dtype != DType::Float32 || d.inputs.size() > 48) return std::nullopt;
  const Shape shape = t.staticShape();
  for (ValueId v : outputs)
    if (!g.value(v).type.isStatic() || g.value(v).type.staticShape() != shape) return std::nullopt;
  const Attribute* a = d.attr("axis");
  int64_t axis = a && std::holds_alternative<int64_t>(*a) ? std::get<int64_t>(*a) : 0;
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank || shapeNumel(shape) >= (int64_t{1} << 31)) return std::nullopt;
  int64_t inner = 1;
  for (int64_t k = axis + 1; k < rank; ++k) inner *= shape[static_cast<size_t>(k)];
  const int64_t total = shape[static_cast<size_t>(axis)];
  detail::SegmentedPrologue seg;
  seg.value = out;
  seg.var = "v" + std::to_string(out);
  std::ostringstream head, params;
  head << "  const int group = get_group_id(0), lane = get_local_id(0);\n  int i;\n  float " << seg.var << ";\n";
  int64_t firstGroup = 0, offset = 0;
  for (size_t k = 0; k < d.inputs.size(); ++k) {
    const ValueId in = d.inputs[k];
    if (!g.value(in).type.isStatic() || g.value(in).type.dtype != DType::Float32) return std::nullopt;
    const Shape s = g.value(in).type.staticShape();
    const int64_t n = shapeNumel(s), extent = s[static_cast<size_t>(axis)];
    if (n == 0) continue;
    const int64_t groups = (n + kLocal - 1) / kLocal;
    const std::string p = "in" + std::to_string(seg.inputs.size());
    params << (seg.inputs.empty() ? "" : ",\n    ") << "__global const float* restrict " << p;
    seg.inputs.push_back(in);
    // Element j of input k sits at (j / (extent * inner)) * (total * inner) + offset * inner + j % (extent * inner).
    const std::string j = "(group - " + std::to_string(firstGroup) + ") * " + std::to_string(kLocal) + " + lane";
    const std::string block = std::to_string(extent * inner);
    const std::string where = extent == total ? "j" :
        "(j / " + block + ") * " + std::to_string(total * inner) + " + " + std::to_string(offset * inner) + " + j % " + block;
    head << "  " << (firstGroup ? "else " : "") << "if (group < " << firstGroup + groups << ") {\n"
         << "    const int j = " << j << ";\n    if (j >= " << n << ") return;\n"
         << "    i = " << where << ";\n    " << seg.var << " = " << p << "[j];\n  }\n";
    firstGroup += groups;
    offset += extent;
  }
  if (seg.inputs.empty()) return std::nullopt;
  head << "  else return;\n";
  seg.head = head.str();
  seg.params = params.str();
  seg.globalSize = static_cast<size_t>(firstGroup * kLocal);
  seg.localSize = static_cast<size_t>(kLocal);
  return seg;
}

}  // namespace

Expected<KernelSource> emitPointwise(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                     const std::string& name, const std::string& comment) {
  std::vector<NodeRef> movement, scalar;
  for (NodeRef n : members) (isIndexMapOp(g, n) ? movement : scalar).push_back(n);
  if (movement.empty()) return detail::Emitter(g, catalog).emit(members, name, comment);
  if (scalar.empty()) return Error{"group `" + name + "` has only data movement (the index_map family's work)", true};
  // The prologue's values are computed where the elementwise members read
  // them, never stored: nothing outside the group may read one.
  const std::set<NodeRef> inGroup(members.begin(), members.end());
  std::set<ValueId> fetched;
  for (NodeRef n : movement)
    for (ValueId v : g.node(n).outputs) {
      if (v == kNoValue) continue;
      if (g.isGraphOutput(v)) return Error{"data-movement result `" + g.value(v).name + "` is a graph output", true};
      for (const Use& u : g.uses(v))
        if (!inGroup.count(u.node))
          return Error{"data-movement result `" + g.value(v).name + "` is read outside the group", true};
      fetched.insert(v);
    }
  for (NodeRef n : scalar)
    for (ValueId v : g.node(n).inputs)
      if (v != kNoValue && !fetched.count(v) && g.producer(v) && inGroup.count(*g.producer(v)) &&
          isIndexMapOp(g, *g.producer(v)))
        return Error{"internal: a movement result read but not fetched", true};
  for (NodeRef n : movement)
    for (ValueId v : g.node(n).inputs)
      if (v != kNoValue && g.producer(v) && inGroup.count(*g.producer(v)) && !isIndexMapOp(g, *g.producer(v)))
        return Error{"data movement after an elementwise member: the movement must come first", true};
  if (movement.size() == 1 && g.node(movement[0]).op == "Concat")
    if (std::optional<detail::SegmentedPrologue> seg = concatSegments(g, movement[0], groupBoundary(g, members).outputs))
      return detail::Emitter(g, catalog).emit(scalar, name, comment, nullptr, {}, &*seg);
  Expected<IndexMapFetches> fetches = indexMapFetches(g, movement, 0);
  if (!fetches) return fetches.error();
  return detail::Emitter(g, catalog).emit(scalar, name, comment, &fetches.value(), fetched);
}

}  // namespace fusec::codegen
