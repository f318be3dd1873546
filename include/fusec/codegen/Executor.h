/// Runs a graph on an OpenCL device, one generated kernel per group.
#pragma once

#include <string>
#include <vector>

#include "fusec/codegen/OpenCL.h"
#include "fusec/engine/Graph.h"
#include "fusec/engine/OpCatalog.h"

namespace fusec::codegen {

struct DeviceRun {
  std::vector<Tensor> outputs;
  /// (kernel name, seconds) per launch, from profiling events.
  std::vector<std::pair<std::string, double>> kernelTimes;
};

/// Runs `groups` (each a list of nodes in topological order, the list in
/// dependency order) on `device`. Groups that the kernel families cannot run
/// are `unsupported` errors naming the op.
Expected<DeviceRun> runOnDevice(Device& device, const Graph& g, const std::vector<std::vector<NodeRef>>& groups,
                                const OpCatalog& catalog, const std::vector<Tensor>& inputs);

/// Every node a group of its own, in topological order (the unfused run).
std::vector<std::vector<NodeRef>> singleNodeGroups(const Graph& g);

}  // namespace fusec::codegen
