/// OpenCL C for the index_map family: data movement, where each output
/// element is one input element (or a padding constant) at an index computed
/// from the output's coordinates. Elements are copied by their bits, so
/// every element type moves. One op per kernel so far: Reshape, Flatten,
/// Squeeze, Unsqueeze, Transpose, Expand, Tile, Slice, Concat, Gather,
/// DepthToSpace, SpaceToDepth and constant Pad; shape operands must be
/// constants and shapes static.
#pragma once

#include "fusec/codegen/Pointwise.h"

namespace fusec::codegen {

bool isIndexMapOp(const Graph& g, NodeRef n);

Expected<KernelSource> emitIndexMap(const Graph& g, const std::vector<NodeRef>& members, const std::string& name,
                                    const std::string& comment);

}  // namespace fusec::codegen
