/// OpenCL C for the window family: MaxPool (without its Indices result) and
/// AveragePool over 1 to 3 spatial dims, float32, with strides, pads,
/// dilations, ceil_mode and count_include_pad as ONNX defines them; one
/// work-item per output element looping over its window, followed by a
/// fused elementwise epilogue. Conv and ConvTranspose (grouped, strided,
/// dilated, padded, any number of spatial dims; output_padding,
/// output_shape, auto_pad; with bias) are the same shape of kernel: each
/// output element gathers the input positions its window reaches. (Convs
/// the gemm family can tile go there instead.) BatchNormalization in inference mode (a per-channel
/// affine map) uses the same frame. Global pools are row reductions
/// (RowReduce.h).
#pragma once

#include "fusec/codegen/Pointwise.h"

namespace fusec::codegen {

/// Whether `members` start with a pooling op this family generates.
bool isPoolGroup(const Graph& g, const std::vector<NodeRef>& members);

Expected<KernelSource> emitPool(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                const std::string& name, const std::string& comment);

}  // namespace fusec::codegen
