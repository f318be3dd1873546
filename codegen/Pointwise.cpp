/// The pointwise kernel family; see Pointwise.h. The work is done by the
/// shared elementwise emitter (ElementwiseEmitter.h).
#include "fusec/codegen/Pointwise.h"

#include "ElementwiseEmitter.h"

namespace fusec::codegen {

Expected<KernelSource> emitPointwise(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                     const std::string& name, const std::string& comment) {
  return detail::Emitter(g, catalog).emit(members, name, comment);
}

}  // namespace fusec::codegen
