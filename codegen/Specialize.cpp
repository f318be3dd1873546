#include "fusec/codegen/Specialize.h"

#include <map>
#include <set>

#include "fusec/engine/Rewriter.h"

namespace fusec::codegen {

const std::vector<uint32_t>& generationTimeOperands(const std::string& op) {
  static const std::vector<uint32_t> kNone;
  static const std::map<std::string, std::vector<uint32_t>> kOperands = {
      {"Reshape", {1}},       {"Expand", {1}},        {"Tile", {1}},           {"Slice", {1, 2, 3, 4}},
      {"Pad", {1, 3}},        {"Squeeze", {1}},       {"Unsqueeze", {1}},      {"Split", {1}},
      {"ConstantOfShape", {0}}, {"Range", {0, 1, 2}}, {"OneHot", {1}},         {"TopK", {1}},
      {"Resize", {1, 2, 3}},  {"Upsample", {1}},      {"CenterCropPad", {1, 2}}, {"Col2Im", {1, 2, 3}},
      {"ReduceSum", {1}},     {"ReduceMean", {1}},    {"ReduceMax", {1}},      {"ReduceMin", {1}},
      {"ReduceProd", {1}},    {"ReduceL1", {1}},      {"ReduceL2", {1}},       {"ReduceLogSum", {1}},
      {"ReduceLogSumExp", {1}}, {"ReduceSumSquare", {1}}, {"HannWindow", {0}}, {"HammingWindow", {0}},
      {"BlackmanWindow", {0}}, {"DFT", {1, 2}},       {"STFT", {1, 3}},        {"MelWeightMatrix", {0, 1, 2, 3, 4}},
      {"AffineGrid", {1}}};
  auto it = kOperands.find(op);
  return it == kOperands.end() ? kNone : it->second;
}

std::vector<size_t> inputsDecidingShapes(const Graph& g) {
  // Walk back from every non-constant generation-time operand to the graph
  // inputs it is computed from.
  std::vector<ValueId> work;
  for (NodeRef n : g.nodes()) {
    const NodeData& d = g.node(n);
    if (!d.domain.empty()) continue;
    for (uint32_t i : generationTimeOperands(d.op.str()))
      if (i < d.inputs.size() && d.inputs[i] != kNoValue && !g.isConstant(d.inputs[i])) work.push_back(d.inputs[i]);
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
  for (size_t i : inputsDecidingShapes(g)) {
    const ValueId in = g.inputs()[i];
    const Tensor& t = inputs[i];
    Value& v = g.value(in);
    if (t.numel() > maxElements || t.dtype() != v.type.dtype) continue;
    if (v.type.dims && v.type.isStatic() && v.type.staticShape() != t.shape()) continue;
    auto value = std::make_shared<const Tensor>(t);
    v.fixedValue = value;
    const ValueId copy = g.addConstant(v.name + "_fixed", value);
    g.replaceAllUsesWith(in, copy);
    fixed.push_back(v.name);
  }
  if (fixed.empty()) return fixed;
  // Shapes now follow from values they could not before: fold and infer.
  if (Expected<size_t> folded = foldConstants(g, catalog); !folded)
    return Error{"with inputs fixed to their values: " + folded.error().message, true};
  return fixed;
}

}  // namespace fusec::codegen
