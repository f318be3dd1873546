/// The reference interpreter: plain, obviously-correct C++ that executes a
/// Graph. It is the correctness oracle for every later stage (rewrites,
/// fusion, generated kernels) and the constant folder of the rewrite driver.
///
/// float32 is the working type; int64, int32 and bool are supported where ops
/// need them (shapes, indices, masks), and most ops also accept the other
/// numeric types. An op without a kernel is an error naming the op and node.
#pragma once

#include <functional>

#include <string_view>
#include <vector>

#include "fusec/engine/Error.h"
#include "fusec/engine/Graph.h"
#include "fusec/engine/OpCatalog.h"
#include "fusec/engine/Tensor.h"

namespace fusec {

/// Whether the interpreter has a kernel for an op of the default domain.
bool interpreterSupports(std::string_view op);
/// All ops with a kernel, sorted.
std::vector<std::string> interpreterOps();

/// Runs one node on the given operand tensors (nullptr for an omitted
/// optional operand). The graph's default-domain opset decides
/// attribute-versus-input forms (Slice, Split, Squeeze, Pad, ...).
/// Elementwise and broadcast ops run from their semantics in `catalog`
/// (an op a pack declares included); without a catalog, only the ops with
/// kernels of their own run. Returns one tensor per node result (empty
/// tensors for omitted results).
Expected<std::vector<Tensor>> evaluateNode(const Graph& graph, NodeRef node,
                                           const std::vector<const Tensor*>& operands,
                                           const OpCatalog* catalog);

/// Executes the whole graph. `inputs` are given in the order of
/// `graph.inputs()`; their dtypes and ranks are checked against the declared
/// types. Returns the graph outputs in order.
Expected<std::vector<Tensor>> runGraph(const Graph& graph, const std::vector<Tensor>& inputs,
                                       const OpCatalog* catalog);

/// Called with each node, its operands and its results before later nodes
/// read them; it may change the results (fusec verify perturbs them to
/// measure rounding sensitivity).
using AfterNode = std::function<void(NodeRef, const std::vector<const Tensor*>& operands, std::vector<Tensor>& results)>;
Expected<std::vector<Tensor>> runGraph(const Graph& graph, const std::vector<Tensor>& inputs,
                                       const OpCatalog* catalog, const AfterNode& afterNode);

}  // namespace fusec
