/// OpenCL C for the row_reduce family: an optional elementwise prologue
/// feeding one reduction over a contiguous row: the innermost axis
/// (ReduceSum/Mean/Max/Min/L2/SumSquare, Softmax, LogSoftmax), the trailing
/// axes from `axis` (LayerNormalization, with its optional mean and
/// inverse-stddev results; Softmax/LogSoftmax before opset 13), or each
/// (image, channel) plane (global pools, InstanceNormalization). A row is
/// shared by up to 64 work-items that reduce through a local-memory tree;
/// short rows pack several to a work-group. Rows of up to 16 elements per
/// work-item are loaded once into registers (the prologue computed once);
/// mean and variance take two passes over them.
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
