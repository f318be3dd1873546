/// OpenCL C for the contraction family: an Einsum, one work-item per output
/// element summing the product of its operands over the contracted letters
/// in nested loops (diagonals and broadcast ellipsis dims by their strides,
/// as EinsumGeometry gives them). A general fallback: plain matrix products
/// are MatMuls for the gemm family.
#pragma once

#include "fusec/codegen/Pointwise.h"

namespace fusec::codegen {

bool isEinsum(const Graph& g, NodeRef n);

Expected<KernelSource> emitEinsum(const Graph& g, const std::vector<NodeRef>& members, const std::string& name,
                                  const std::string& comment);

}  // namespace fusec::codegen
