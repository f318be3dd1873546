/// OpenCL C for the gemm_epilogue family: MatMul (numpy semantics: batched,
/// broadcast batch dims, float32) followed by an elementwise epilogue (bias,
/// activation, residual add) applied to each result before it is stored.
/// One work-item per output element, accumulating in float over K.
#pragma once

#include "fusec/codegen/Pointwise.h"

namespace fusec::codegen {

/// Whether `members` start with a MatMul this family generates.
bool isGemmGroup(const Graph& g, const std::vector<NodeRef>& members);

Expected<KernelSource> emitGemm(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                const std::string& name, const std::string& comment);

}  // namespace fusec::codegen
