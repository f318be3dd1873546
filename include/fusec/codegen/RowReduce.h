/// OpenCL C for the row_reduce family: an optional elementwise prologue
/// feeding one reduction over the innermost axis (Softmax, LogSoftmax,
/// LayerNormalization, ReduceSum/Mean/Max/Min/L2/SumSquare). One work-group
/// per row reduces through a local-memory tree; mean and variance take two
/// passes over the row, recomputing the prologue instead of storing it.
#pragma once

#include "fusec/codegen/Pointwise.h"

namespace fusec::codegen {

/// Whether `n` is a reduction this family generates.
bool isRowReduction(const Graph& g, NodeRef n);

/// Generates the kernel for `members` (topological order; the reduction
/// last). Errors are `unsupported` for groups outside the family.
Expected<KernelSource> emitRowReduce(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                     const std::string& name, const std::string& comment);

}  // namespace fusec::codegen
