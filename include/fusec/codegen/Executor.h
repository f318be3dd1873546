/// Runs a graph on an OpenCL device, one generated kernel per group.
///
/// A DeviceProgram is built once: every group's kernel generated and built
/// (or taken from the caches), constants uploaded, and device buffers for
/// intermediate values planned by liveness, so a buffer is reused once the
/// last kernel reading its value has been enqueued (the queue is in order).
/// Each run uploads the inputs, enqueues the kernels back to back, and
/// reads the outputs; kernels are timed by profiling events. Reshape-likes
/// launch nothing: their result is a view of their operand's buffer.
#pragma once

#include <string>
#include <vector>

#include "fusec/codegen/Gemm.h"
#include "fusec/codegen/OpenCL.h"
#include "fusec/codegen/Pointwise.h"
#include "fusec/engine/Graph.h"
#include "fusec/engine/OpCatalog.h"
#include "fusec/engine/Planner.h"

namespace fusec::codegen {

/// Parameters of the kernel families (tile sizes); the defaults suit the
/// build machine's PoCL. The hook for auto-tuning.
struct KernelOptions {
  GemmTiling gemm;
};

/// The nodes of one kernel (topological order) and the kernel's name; an
/// empty name becomes `k<index>_<last op>`.
struct KernelGroup {
  std::vector<NodeRef> nodes;
  std::string name;
  KernelGroup(std::vector<NodeRef> n, std::string nm = {}) : nodes(std::move(n)), name(std::move(nm)) {}
};

/// Device memory, in bytes.
struct MemoryPlan {
  size_t constants = 0;      ///< weights and other constants, uploaded once
  size_t inputs = 0;         ///< graph inputs
  size_t peak = 0;           ///< intermediate and output buffers as planned (with reuse)
  size_t withoutReuse = 0;   ///< the same values, one buffer each
  size_t buffers = 0;        ///< intermediate and output buffers allocated
};

struct DeviceRun {
  std::vector<Tensor> outputs;
  /// (kernel name, seconds) per launch, from profiling events.
  std::vector<std::pair<std::string, double>> kernelTimes;
  double totalSeconds() const {
    double t = 0;
    for (const auto& [name, s] : kernelTimes) t += s;
    return t;
  }
};

/// The kernel for one group, from the family that covers it: gemm_epilogue
/// for a MatMul, Gemm or Conv with its epilogue, window for pooling,
/// row_reduce for a group ending in a row reduction, index_map for one
/// data-movement op, pointwise otherwise. `unsupported` errors name what no
/// family generates.
Expected<KernelSource> emitKernel(const Graph& g, const std::vector<NodeRef>& group, const OpCatalog& catalog,
                                  const std::string& name, const std::string& comment,
                                  const KernelOptions& options = {});

class DeviceProgram {
 public:
  /// Generates and builds every group's kernel (groups in dependency order),
  /// uploads the constants and plans the buffers. `g` must outlive the program.
  static Expected<DeviceProgram> build(Device& device, const Graph& g, const std::vector<KernelGroup>& groups,
                                       const OpCatalog& catalog, const KernelOptions& options = {});
  /// One run on `inputs` (one per graph input).
  Expected<DeviceRun> run(const std::vector<Tensor>& inputs);

  const std::vector<KernelSource>& kernels() const { return kernels_; }
  const MemoryPlan& memory() const { return memory_; }

 private:
  DeviceProgram(Device& device, const Graph& g) : device_(&device), g_(&g) {}
  Buffer* bufferOf(ValueId v);
  ValueId resolve(ValueId v) const;  // the value whose buffer `v` views

  Device* device_;
  const Graph* g_;
  std::vector<KernelSource> kernels_;
  std::vector<void*> handles_;           // the built kernel of each of kernels_
  std::map<ValueId, Buffer> constants_;  // and inputs, refreshed per run
  std::vector<Buffer> slots_;            // planned intermediate buffers
  std::map<ValueId, size_t> slotOf_;
  std::map<ValueId, ValueId> views_;     // reshape results -> the value they view
  MemoryPlan memory_;
};

/// Builds a program and runs it once.
Expected<DeviceRun> runOnDevice(Device& device, const Graph& g, const std::vector<KernelGroup>& groups,
                                const OpCatalog& catalog, const std::vector<Tensor>& inputs,
                                const KernelOptions& options = {});

/// The plan's groups, named as the plan names them (`g3_conv_epilogue`).
std::vector<KernelGroup> planGroups(const Plan& plan);

/// Every node a group of its own, in topological order (the unfused run),
/// named after the node.
std::vector<KernelGroup> singleNodeGroups(const Graph& g);

}  // namespace fusec::codegen
