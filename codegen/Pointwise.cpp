/// The pointwise kernel family; see Pointwise.h. The work is done by the
/// shared elementwise emitter (ElementwiseEmitter.h).
#include "fusec/codegen/Pointwise.h"
#include "fusec/codegen/Families.h"

#include <algorithm>

#include "ElementwiseEmitter.h"

namespace fusec::codegen {

Expected<KernelSource> emitPointwise(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                     const std::string& name, const std::string& comment) {
  return detail::Emitter(g, catalog).emit(members, name, comment);
}


std::unique_ptr<CodegenFamily> makePointwiseFamily() {
  FunctionFamily::Spec spec;
  spec.name = "pointwise";
  spec.accepts = "elementwise and broadcast ops: any op the catalog gives scalar semantics, a pack's own included; "
                 "every result read outside the group is written";
  spec.mismatch = "it has an op that is neither elementwise nor broadcast with scalar semantics";
  spec.claims = [](const Graph& g, const std::vector<NodeRef>& group, const OpCatalog& catalog) {
    return std::all_of(group.begin(), group.end(), [&](NodeRef n) {
      const NodeData& d = g.node(n);
      const OpDef* op = d.domain.empty() ? catalog.find(d.op.str()) : nullptr;
      return op && op->semantics && (op->kind == OpKind::Elementwise || op->kind == OpKind::Broadcast);
    });
  };
  spec.emit = [](const Graph& g, const std::vector<NodeRef>& group, const OpCatalog& catalog, const std::string& name,
                 const std::string& comment, const KernelOptions&) {
    return emitPointwise(g, group, catalog, name, comment);
  };
  return std::make_unique<FunctionFamily>(std::move(spec));
}

}  // namespace fusec::codegen
