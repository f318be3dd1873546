/// The kernel family registry and the checks every family shares; see
/// Families.h.
#include "fusec/codegen/Families.h"

#include <algorithm>
#include <memory>

namespace fusec::codegen {

// Each family lives with its emitter.
std::unique_ptr<CodegenFamily> makeGemmEpilogueFamily();
std::unique_ptr<CodegenFamily> makeConvEpilogueFamily();
std::unique_ptr<CodegenFamily> makePoolEpilogueFamily();
std::unique_ptr<CodegenFamily> makeRowReduceFamily();
std::unique_ptr<CodegenFamily> makeReduceFamily();
std::unique_ptr<CodegenFamily> makeIndexMapFamily();
std::unique_ptr<CodegenFamily> makeContractionFamily();
std::unique_ptr<CodegenFamily> makePointwiseFamily();

const KernelFamilies& kernelFamilies() {
  static const KernelFamilies families = [] {
    KernelFamilies f;
    f.add(makeGemmEpilogueFamily());
    f.add(makeConvEpilogueFamily());
    f.add(makePoolEpilogueFamily());
    f.add(makeRowReduceFamily());
    f.add(makeReduceFamily());
    f.add(makeIndexMapFamily());
    f.add(makeContractionFamily());
    f.add(makePointwiseFamily());
    return f;
  }();
  return families;
}

const CodegenFamily* findFamily(std::string_view name) {
  return dynamic_cast<const CodegenFamily*>(kernelFamilies().find(name));
}

namespace {

std::string valueList(const Graph& g, const std::vector<ValueId>& values) {
  std::string out;
  for (ValueId v : values) out += (out.empty() ? "`" : ", `") + g.value(v).name + "`";
  return out.empty() ? "nothing" : out;
}

/// Whether every value the group's members read or write has a static shape.
bool allShapesStatic(const Graph& g, const std::vector<NodeRef>& group) {
  for (NodeRef n : group) {
    const NodeData& d = g.node(n);
    for (const std::vector<ValueId>* values : {&d.inputs, &d.outputs})
      for (ValueId v : *values)
        if (v != kNoValue && !g.isConstant(v) && !g.value(v).type.isStatic()) return false;
  }
  return true;
}

}  // namespace

Expected<KernelSource> CodegenFamily::build(const Graph& g, const std::vector<NodeRef>& group, const OpCatalog& catalog,
                                            const std::string& name, const std::string& comment,
                                            const KernelOptions& options, const Target* target) const {
  Expected<KernelSource> k = emit(g, group, catalog, name, comment, options);
  if (!k) return k;
  std::vector<ValueId> unwritten;
  for (ValueId v : groupBoundary(g, group).outputs)
    if (std::find(k->outputs.begin(), k->outputs.end(), v) == k->outputs.end()) unwritten.push_back(v);
  if (!unwritten.empty())
    return Error{valueList(g, unwritten) + (unwritten.size() == 1 ? " is" : " are") +
                     " read outside the group, and a " + std::string(this->name()) + " kernel writes only " +
                     valueList(g, k->outputs),
                 true};
  if (target) {
    if (target->localMemBytes > 0 && static_cast<int64_t>(k->localMemBytes) > target->localMemBytes)
      return Error{"the kernel needs " + std::to_string(k->localMemBytes) + " bytes of local memory; the target has " +
                       std::to_string(target->localMemBytes),
                   true};
    if (target->maxWorkGroupSize > 0 && static_cast<int64_t>(k->localSize) > target->maxWorkGroupSize)
      return Error{"the kernel's work-group of " + std::to_string(k->localSize) + " exceeds the target's " +
                       std::to_string(target->maxWorkGroupSize),
                   true};
  }
  return k;
}

Status CodegenFamily::canEmit(const Graph& g, const std::vector<NodeRef>& group, const OpCatalog& catalog,
                              const Target& target) const {
  if (!claims(g, group, catalog) || allShapesStatic(g, group)) {
    Expected<KernelSource> k = build(g, group, catalog, "probe", "", KernelOptions{}, &target);
    if (!k) return k.error();
  }
  return Status::success();
}

}  // namespace fusec::codegen
