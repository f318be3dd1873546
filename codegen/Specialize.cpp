#include "fusec/codegen/Specialize.h"

#include <set>

#include "fusec/engine/Rewriter.h"

namespace fusec::codegen {

std::vector<size_t> inputsDecidingShapes(const Graph& g, const OpCatalog& catalog) {
  // Walk back from every non-constant generation-time operand to the graph
  // inputs it is computed from.
  std::vector<ValueId> work;
  for (NodeRef n : g.nodes()) {
    const NodeData& d = g.node(n);
    const OpDef* op = d.domain.empty() ? catalog.find(d.op.str()) : nullptr;
    if (!op) continue;
    for (size_t i = 0; i < d.inputs.size() && i < op->params.size(); ++i)
      if (op->params[i].staticValue && d.inputs[i] != kNoValue && !g.isConstant(d.inputs[i])) work.push_back(d.inputs[i]);
  }
  std::set<ValueId> seen, reached;
  while (!work.empty()) {
    const ValueId v = work.back();
    work.pop_back();
    if (!seen.insert(v).second || g.isConstant(v)) continue;
    if (g.value(v).isGraphInput) reached.insert(v);
    if (std::optional<NodeRef> p = g.producer(v))
      for (ValueId in : g.node(*p).inputs)
        if (in != kNoValue) work.push_back(in);
  }
  std::vector<size_t> out;
  for (size_t i = 0; i < g.inputs().size(); ++i)
    if (reached.count(g.inputs()[i])) out.push_back(i);
  return out;
}

Expected<std::vector<std::string>> specializeInputs(Graph& g, const std::vector<Tensor>& inputs, const OpCatalog& catalog,
                                                    int64_t maxElements) {
  if (inputs.size() != g.inputs().size())
    return Error{"model takes " + std::to_string(g.inputs().size()) + " inputs, got " + std::to_string(inputs.size())};
  std::vector<std::string> fixed;
  for (size_t i : inputsDecidingShapes(g, catalog)) {
    const ValueId in = g.inputs()[i];
    const Tensor& t = inputs[i];
    Value& v = g.value(in);
    if (t.numel() > maxElements || t.dtype() != v.type.dtype) continue;
    if (v.type.dims && v.type.isStatic() && v.type.staticShape() != t.shape()) continue;
    auto value = std::make_shared<const Tensor>(t);
    v.fixedValue = value;
    const ValueId copy = g.addConstant(v.name + "_fixed", value);
    g.replaceKeepingInterface(in, copy);
    fixed.push_back(v.name);
  }
  if (fixed.empty()) return fixed;
  // Shapes now follow from values they could not before: fold and infer.
  if (Expected<size_t> folded = foldConstants(g, catalog); !folded)
    return Error{"with inputs fixed to their values: " + folded.error().message, true};
  return fixed;
}

}  // namespace fusec::codegen
