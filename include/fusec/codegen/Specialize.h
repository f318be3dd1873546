/// Value specialization: kernels are generated for static shapes, and some
/// operands decide shapes or index maps (Reshape's shape, Slice's starts,
/// Reduce*'s axes, Range's bounds, ...). Where such an operand comes from a
/// graph input, the graph can still be compiled for the value that input has
/// in one run: the input is fixed to that value, like a JIT compiler's
/// specialization with a guard. Its uses read a constant copy, constants
/// fold, types are inferred again, and DeviceProgram::run refuses any other
/// value for it.
#pragma once

#include <string>
#include <vector>

#include "fusec/engine/Graph.h"
#include "fusec/engine/OpCatalog.h"

namespace fusec::codegen {

/// The graph inputs that the catalog's `static` operands (values kernels
/// need when generated) depend on, through any nodes that do not fold away,
/// as indices into g.inputs().
std::vector<size_t> inputsDecidingShapes(const Graph& g, const OpCatalog& catalog);

/// Fixes each input of inputsDecidingShapes to its value in `inputs` (one
/// per graph input), folds constants and infers types again. Inputs of more
/// than `maxElements` elements are left alone (a shape is never that big).
/// Returns the names of the fixed inputs.
Expected<std::vector<std::string>> specializeInputs(Graph& g, const std::vector<Tensor>& inputs, const OpCatalog& catalog,
                                                    int64_t maxElements = 4096);

}  // namespace fusec::codegen
