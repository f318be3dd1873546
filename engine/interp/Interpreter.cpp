/// The interpreter's driver: a registry of kernels by op name, node
/// evaluation with error context, and whole-graph execution in topological
/// order, freeing each intermediate after its last use.
#include "fusec/engine/Interpreter.h"

#include <unordered_map>

#include "KernelUtil.h"

namespace fusec {
namespace {

const interp::KernelRegistry& registry() {
  static const interp::KernelRegistry r = [] {
    interp::KernelRegistry reg;
    interp::registerElementwiseKernels(reg);
    interp::registerConvKernels(reg);
    interp::registerPoolKernels(reg);
    interp::registerNormKernels(reg);
    interp::registerReduceKernels(reg);
    interp::registerMatMulKernels(reg);
    interp::registerMovementKernels(reg);
    interp::registerGeneratorKernels(reg);
    return reg;
  }();
  return r;
}

}  // namespace

bool interpreterSupports(std::string_view op) { return registry().count(std::string(op)) != 0; }

std::vector<std::string> interpreterOps() {
  std::vector<std::string> ops;
  for (const auto& [name, fn] : registry()) ops.push_back(name);
  return ops;
}

Expected<std::vector<Tensor>> evaluateNode(const Graph& graph, NodeRef n, const std::vector<const Tensor*>& operands,
                                           const OpCatalog* catalog) {
  const NodeData& d = graph.node(n);
  const std::string where = "node " + graph.describe(n);
  if (!d.domain.empty() && d.domain != "ai.onnx")
    return Error{where + ": op domain `" + d.domain + "` is not supported by the interpreter", true};
  const int64_t opset = graph.info.defaultOpset();
  const OpDef* def = catalog && d.domain.empty() ? catalog->find(d.op.str()) : nullptr;
  const bool fromCatalog = def && interp::catalogRuns(*def, d, opset, operands);
  auto it = registry().find(d.op.str());
  if (!fromCatalog && it == registry().end()) {
    if (def && def->semantics && !catalog)
      return Error{where + ": op `" + d.op.str() + "` runs from its catalog semantics; no catalog was given", true};
    return Error{where + ": op `" + d.op.str() + "` is not supported by the interpreter", true};
  }
  interp::KernelContext ctx(d, opset, operands);
  try {
    if (fromCatalog) interp::runFromCatalog(ctx, *def);
    else it->second(ctx);
  } catch (const UserError& e) {
    return Error{where + ": " + e.message, e.unsupported};
  } catch (const std::bad_alloc&) {
    return Error{where + ": out of memory (a result is too large)"};
  }
  for (size_t i = 0; i < d.outputs.size(); ++i) {
    if (d.outputs[i] != kNoValue && ctx.outputs()[i].empty())
      return Error{where + ": result " + std::to_string(i) + " is not produced by this kernel"};
  }
  return std::move(ctx.outputs());
}

Expected<std::vector<Tensor>> runGraph(const Graph& graph, const std::vector<Tensor>& inputs, const OpCatalog* catalog) {
  return runGraph(graph, inputs, catalog, nullptr);
}

Expected<std::vector<Tensor>> runGraph(const Graph& graph, const std::vector<Tensor>& inputs, const OpCatalog* catalog,
                                       const AfterNode& afterNode) {
  if (inputs.size() != graph.inputs().size())
    return Error{"model takes " + std::to_string(graph.inputs().size()) + " inputs, got " +
                 std::to_string(inputs.size())};
  std::unordered_map<ValueId, Tensor> live;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Value& v = graph.value(graph.inputs()[i]);
    const Tensor& t = inputs[i];
    if (v.type.dtype != DType::Undefined && v.type.dtype != t.dtype()) {
      // 16-bit floats have no arithmetic here; a mismatch there is a limit of
      // ours (their test files store them as uint16), not a user error.
      const bool halfFloat = v.type.dtype == DType::Float16 || v.type.dtype == DType::BFloat16;
      return Error{"input `" + v.name + "` must be `" + std::string(dtypeName(v.type.dtype)) +
                       "`, got `" + std::string(dtypeName(t.dtype())) + "`",
                   halfFloat};
    }
    if (v.type.dims) {
      const auto& dims = *v.type.dims;
      bool ok = dims.size() == t.shape().size();
      for (size_t k = 0; ok && k < dims.size(); ++k)
        ok = !dims[k].isStatic() || dims[k].size == t.shape()[k];
      if (!ok)
        return Error{"input `" + v.name + "` must have shape " + v.type.str() + ", got " +
                     shapeToString(t.shape())};
    }
    live[graph.inputs()[i]] = t;
  }

  Expected<std::vector<NodeRef>> order = graph.topologicalOrder();
  if (!order) return order.error();

  // Remaining reads of each value, so intermediates are freed after their last use.
  std::unordered_map<ValueId, size_t> pending;
  for (NodeRef n : order.value())
    for (ValueId v : graph.node(n).inputs)
      if (v != kNoValue) ++pending[v];
  for (ValueId v : graph.outputs()) ++pending[v];

  auto lookup = [&](ValueId v) -> const Tensor* {
    if (auto it = live.find(v); it != live.end()) return &it->second;
    const Value& val = graph.value(v);
    return val.constant ? val.constant.get() : nullptr;
  };

  for (NodeRef n : order.value()) {
    const NodeData& d = graph.node(n);
    std::vector<const Tensor*> operands;
    for (ValueId v : d.inputs) {
      if (v == kNoValue) {
        operands.push_back(nullptr);
        continue;
      }
      const Tensor* t = lookup(v);
      if (!t)
        return Error{"node " + graph.describe(n) + ": operand `" + graph.value(v).name +
                     "` has no value (it is not an input, constant or earlier result)"};
      operands.push_back(t);
    }
    Expected<std::vector<Tensor>> results = evaluateNode(graph, n, operands, catalog);
    if (!results) return results.error();
    if (afterNode) afterNode(n, operands, results.value());
    for (ValueId v : d.inputs) {
      if (v == kNoValue) continue;
      if (--pending[v] == 0) live.erase(v);
    }
    for (size_t i = 0; i < d.outputs.size(); ++i) {
      if (d.outputs[i] == kNoValue || pending[d.outputs[i]] == 0) continue;
      live[d.outputs[i]] = std::move(results.value()[i]);
    }
  }

  std::vector<Tensor> outs;
  for (ValueId v : graph.outputs()) {
    const Tensor* t = lookup(v);
    if (!t) return Error{"graph output `" + graph.value(v).name + "` was not computed"};
    outs.push_back(*t);
  }
  return outs;
}

}  // namespace fusec
