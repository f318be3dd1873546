/// Runs a graph on an OpenCL device, one generated kernel per group.
#pragma once

#include <string>
#include <vector>

#include "fusec/codegen/Gemm.h"
#include "fusec/codegen/OpenCL.h"
#include "fusec/codegen/Pointwise.h"
#include "fusec/engine/Graph.h"
#include "fusec/engine/OpCatalog.h"

namespace fusec::codegen {

struct DeviceRun {
  std::vector<Tensor> outputs;
  /// (kernel name, seconds) per launch, from profiling events.
  std::vector<std::pair<std::string, double>> kernelTimes;
};

/// Parameters of the kernel families (tile sizes); the defaults suit the
/// build machine's PoCL. The hook for auto-tuning.
struct KernelOptions {
  GemmTiling gemm;
};

/// The kernel for one group, from the family that covers it: gemm_epilogue
/// for a MatMul with its epilogue, row_reduce for a group ending in an
/// innermost-axis reduction, index_map for one data-movement op, pointwise
/// otherwise. `unsupported` errors name what no family generates yet.
Expected<KernelSource> emitKernel(const Graph& g, const std::vector<NodeRef>& group, const OpCatalog& catalog,
                                  const std::string& name, const std::string& comment,
                                  const KernelOptions& options = {});

/// Runs `groups` (each a list of nodes in topological order, the list in
/// dependency order) on `device`. Groups that the kernel families cannot run
/// are `unsupported` errors naming the op.
Expected<DeviceRun> runOnDevice(Device& device, const Graph& g, const std::vector<std::vector<NodeRef>>& groups,
                                const OpCatalog& catalog, const std::vector<Tensor>& inputs,
                                const KernelOptions& options = {});

/// Every node a group of its own, in topological order (the unfused run).
std::vector<std::vector<NodeRef>> singleNodeGroups(const Graph& g);

}  // namespace fusec::codegen
