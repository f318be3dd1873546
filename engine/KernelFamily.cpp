/// The kernel family registry; see KernelFamily.h.
#include "fusec/engine/KernelFamily.h"

namespace fusec {

std::string noFamilyMessage(const Graph& g, const std::vector<NodeRef>& group, const std::string& reasons) {
  std::string ops;
  for (NodeRef n : group) {
    const NodeData& d = g.node(n);
    ops += (ops.empty() ? "" : ", ") + (d.domain.empty() ? "" : d.domain + ".") + d.op.str();
  }
  return (group.size() == 1 ? "op `" + ops + "` has no kernel path: " : "group {" + ops + "} has no kernel path: ") +
         (reasons.empty() ? std::string("no kernel family takes it") : reasons);
}

const KernelFamily* KernelFamilies::find(std::string_view name) const {
  for (const auto& f : families_)
    if (f->name() == name) return f.get();
  return nullptr;
}

std::vector<std::string> KernelFamilies::names() const {
  std::vector<std::string> out;
  for (const auto& f : families_) out.emplace_back(f->name());
  return out;
}

Expected<const KernelFamily*> KernelFamilies::select(const Graph& g, const std::vector<NodeRef>& group,
                                                     const OpCatalog& catalog, const Target& target) const {
  std::string reasons;
  for (const auto& f : families_) {
    if (!f->claims(g, group, catalog)) continue;
    Status st = f->canEmit(g, group, catalog, target);
    if (st) return f.get();
    reasons += std::string(reasons.empty() ? "" : "; ") + std::string(f->name()) + ": " + st.error().message;
  }
  return Error{noFamilyMessage(g, group, reasons), true};
}

}  // namespace fusec
