/// OpenCL C for the pointwise kernel family: any connected group of
/// elementwise and broadcast ops, one work-item per element of the output,
/// composing each member's scalar semantics from the op catalog. Inputs are
/// read through broadcasting index maps; every value the group's outside
/// reads is written. Element types: float32, float64 (cl_khr_fp64), bool
/// (stored as uchar) and the 8- to 64-bit integers, which compute in their
/// own type with C's integer arithmetic (division never traps: a quotient
/// by zero is 0).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fusec/engine/Graph.h"
#include "fusec/engine/OpCatalog.h"

namespace fusec::codegen {

struct KernelSource {
  std::string name;             ///< the OpenCL kernel's name
  std::string source;           ///< complete OpenCL C 1.2 text
  std::vector<ValueId> inputs;  ///< buffer arguments, in order
  std::vector<ValueId> outputs; ///< buffer arguments after the inputs
  /// Constants the code generator derives from the graph's (a conv's
  /// weights in another basis): buffer arguments after the outputs,
  /// uploaded with the graph's constants.
  std::vector<std::shared_ptr<const Tensor>> derived;
  size_t globalSize = 0;        ///< work-items: elements of the output
  size_t localSize = 0;         ///< work-group size; 0 leaves it to the runtime
  size_t localMemBytes = 0;     ///< local memory a work-group declares
};

/// Generates the kernel for `members` (in topological order). Errors are
/// `unsupported` when the group has an op or type this family cannot run.
/// With `rowLoops` (for CPUs), a group with a broadcast operand, or with a
/// Concat before it, computes rows of the trailing dims in a loop per
/// work-item (the rows form, RowPieces in ElementwiseEmitter.h).
Expected<KernelSource> emitPointwise(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                     const std::string& name, const std::string& comment, bool rowLoops = false);

}  // namespace fusec::codegen
