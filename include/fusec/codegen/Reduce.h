/// OpenCL C for the reduce family: a reduction over any set of axes
/// (ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare, keepdims,
/// noop_with_empty_axes) or the arg of one axis (ArgMax, ArgMin,
/// select_last_index), or Softmax/LogSoftmax/Hardmax over a non-innermost
/// axis (opset 13: one work-item per line of the axis writes the line),
/// with an optional elementwise prologue recomputed in the loop. One work-item per output element walks the reduced axes in
/// nested loops, so neighbouring work-items read neighbouring elements when
/// the innermost axis is kept (column reductions). Reductions over the
/// innermost axis alone go to the row_reduce family, which splits a row
/// across a work-group.
#pragma once

#include <optional>
#include <vector>

#include "fusec/codegen/Pointwise.h"

namespace fusec::codegen {

/// The axes `d` reduces over an input of rank `rank`, normalized and
/// sorted: Reduce*'s `axes` (attribute or constant operand; empty means
/// all unless noop_with_empty_axes), ArgMax/ArgMin's and, from opset 13,
/// Softmax/LogSoftmax/Hardmax's `axis`. nullopt when they are not known at
/// generation time (a computed operand), out of range, or (softmax before
/// opset 13) not one axis.
std::optional<std::vector<int64_t>> reducedAxes(const Graph& g, const NodeData& d, int64_t rank);

/// Whether `n` is a reduction or arg-reduction this family generates.
bool isAxisReduction(const Graph& g, NodeRef n);

/// Generates the kernel for `members` (topological order; the reduction
/// last). Errors are `unsupported` for groups outside the family.
Expected<KernelSource> emitReduce(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                  const std::string& name, const std::string& comment);

}  // namespace fusec::codegen
