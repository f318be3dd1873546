/// The pointwise kernel family; see Pointwise.h. The work is done by the
/// shared elementwise emitter (ElementwiseEmitter.h), with the index_map
/// family's fetch functions for a data-movement prologue.
#include "fusec/codegen/Pointwise.h"

#include <optional>

#include "ElementwiseEmitter.h"
#include "Emitters.h"
#include "FamilyRegistry.h"

namespace fusec::codegen {

Expected<KernelSource> emitPointwise(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                     const std::string& name, const std::string& comment, bool rowLoops) {
  std::vector<NodeRef> movement, scalar;
  for (NodeRef n : members) (isIndexMapOp(g, n) ? movement : scalar).push_back(n);
  if (movement.empty()) return detail::Emitter(g, catalog).rowLoops(rowLoops).emit(members, name, comment);
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
  for (NodeRef n : movement)
    for (ValueId v : g.node(n).inputs)
      if (v != kNoValue && g.producer(v) && inGroup.count(*g.producer(v)) && !isIndexMapOp(g, *g.producer(v)))
        return Error{"data movement after an elementwise member: the movement must come first", true};
  if (movement.size() == 1 && g.node(movement[0]).op == "Concat" &&
      g.value(g.node(movement[0]).outputs[0]).type.dtype == DType::Float32) {
    // Rows along which the other operands run or are constant (rowDims).
    const ValueId joined = g.node(movement[0]).outputs[0];
    detail::Emitter e(g, catalog);
    std::vector<ValueId> operands = groupBoundary(g, scalar).inputs;
    std::erase(operands, joined);
    const size_t rowDims =
        rowLoops && g.value(joined).type.isStatic() ? e.rowDims(operands, g.value(joined).type.staticShape()) : 0;
    if (std::optional<detail::SegmentedPrologue> seg =
            detail::concatSegments(g, movement[0], groupBoundary(g, members).outputs, "float", rowDims))
      return e.emit(scalar, name, comment, nullptr, {}, &*seg);
  }
  Expected<IndexMapFetches> fetches = indexMapFetches(g, movement, 0);
  if (!fetches) return fetches.error();
  return detail::Emitter(g, catalog).emit(scalar, name, comment, &fetches.value(), fetched);
}

namespace {

/// Whether every member is elementwise or broadcast with scalar semantics.
bool scalarOps(const Graph& g, const std::vector<NodeRef>& group, const OpCatalog& catalog) {
  return std::all_of(group.begin(), group.end(), [&](NodeRef n) {
    const NodeData& d = g.node(n);
    const OpDef* op = d.domain.empty() ? catalog.find(d.op.str()) : nullptr;
    return op && op->semantics && (op->kind == OpKind::Elementwise || op->kind == OpKind::Broadcast);
  });
}

}  // namespace

/// Elementwise members, after an optional data-movement prologue (Concat,
/// Transpose, Slice, ... composed into the members' loads).
FUSEC_KERNEL_FAMILY(pointwise) {
  return {"pointwise",
          "elementwise and broadcast ops: any op the catalog gives scalar semantics, a pack's own "
          "included; every result read outside the group is written; data movement before them (Concat, Transpose, "
          "Slice, ...) is read through its index map, not stored",
          "it has an op that is neither elementwise nor broadcast with scalar semantics, nor data movement before them",
          {"#dcf0dc", "#3b8a3b"},
          [](const Graph& g, const std::vector<NodeRef>& group, const OpCatalog& catalog) {
            std::vector<NodeRef> scalar;
            for (NodeRef n : group)
              if (!isIndexMapOp(g, n)) scalar.push_back(n);
            return !scalar.empty() && scalarOps(g, scalar, catalog);
          },
          [](const EmitRequest& r) {
            return emitPointwise(r.graph, r.group, r.catalog, r.name, r.comment, r.options.stridedRowCopies);
          }};
}

}  // namespace fusec::codegen
