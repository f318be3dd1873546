/// Runs a graph on an OpenCL device, one generated kernel per group.
///
/// A DeviceProgram is built once: every group's kernel generated and built
/// (or taken from the caches), constants uploaded, and device buffers for
/// intermediate values planned by liveness, so a buffer is reused once the
/// last kernel reading its value has been enqueued (the queue is in order).
/// Each run uploads the inputs, enqueues the kernels back to back, and
/// reads the outputs; kernels are timed by profiling events. Reshape-likes
/// launch nothing: their result is a view of their operand's buffer; nor do
/// Concats whose inputs their producers write in place (BufferAliases).
#pragma once

#include <functional>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fusec/codegen/Families.h"
#include "fusec/codegen/Gemm.h"
#include "fusec/codegen/OpenCL.h"
#include "fusec/codegen/Pointwise.h"
#include "fusec/engine/Graph.h"
#include "fusec/engine/OpCatalog.h"
#include "fusec/engine/Planner.h"

namespace fusec::codegen {

/// The nodes of one kernel (topological order), the kernel's name and the
/// family that builds it; an empty name becomes `k<index>_<last op>`, an
/// empty family the first family that builds the group. `origin` (the
/// family and the rule that formed the group) goes into the kernel's header
/// comment.
struct KernelGroup {
  std::vector<NodeRef> nodes;
  std::string name;
  std::string origin;
  std::string family;
  KernelGroup(std::vector<NodeRef> n, std::string nm = {}, std::string from = {}, std::string fam = {})
      : nodes(std::move(n)), name(std::move(nm)), origin(std::move(from)), family(std::move(fam)) {}
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
  /// Host to host: from the call until the outputs are in host memory
  /// (the inputs' checks, uploads, launches, kernels, downloads), before
  /// the profiling events are read.
  double hostSeconds = 0;
  double totalSeconds() const {
    double t = 0;
    for (const auto& [name, s] : kernelTimes) t += s;
    return t;
  }
};

/// A lone op the catalog marks `view` (Reshape, Flatten, Squeeze,
/// Unsqueeze, Identity), or a Transpose that moves only dims of size 1: it
/// keeps the bytes and their order, so its result is a view of its
/// operand's buffer and no kernel runs.
bool isViewGroup(const Graph& g, const std::vector<NodeRef>& group, const OpCatalog& catalog);

/// The kernel for one group, from the family the plan chose (`family`), or
/// when that is empty from the first family that builds it (Families.h
/// gives the order). `unsupported` errors say why no family builds it.
Expected<KernelSource> emitKernel(const Graph& g, const std::vector<NodeRef>& group, const std::string& family,
                                  const OpCatalog& catalog, const std::string& name, const std::string& comment,
                                  const KernelOptions& options = {});

/// A device buffer of a schedule: a constant (uploaded once), a graph input
/// (written each run), an intermediate slot (shared by values whose
/// lifetimes do not overlap), a part of a slot (`bytes` from `offset` of
/// buffer `parent`): a Concat input its producer writes in place, or a view
/// of a buffer (`bytes` from `offset` of buffer `parent`, a constant, an
/// input or a slot): a Slice read in place, never written.
struct ScheduledBuffer {
  enum class Kind { Constant, Input, Intermediate, Part, View };
  Kind kind = Kind::Intermediate;
  size_t bytes = 0;
  ValueId value = kNoValue;  ///< the constant or input; for a slot, the first value placed in it
  size_t parent = 0, offset = 0;  ///< a part's or view's buffer and where in it it starts
  /// A derived constant (KernelSource::derived; `value` is kNoValue),
  /// computed when its values are first read; a graph constant's values
  /// are `value`'s.
  std::shared_ptr<const DerivedConstant> derived;

  /// A constant buffer's values.
  const Tensor& constant(const Graph& g) const { return derived ? *derived->tensor() : *g.value(value).constant; }
};

/// The groups of a graph that launch nothing, because their result's bytes
/// are already where a kernel put them:
/// - a lone reshape-like (isViewGroup): its result is a view of its
///   operand's buffer;
/// - a lone Concat along an axis with only 1s before it, whose every input
///   is written by a kernel, read by this Concat once, no graph output and
///   no part of another Concat, and starts at a multiple of
///   `subBufferAlignment` bytes in the result: each input's producer writes
///   it straight into its place in the result (a sub-buffer), so the copy
///   never runs. SqueezeNet's Fire modules and Inception-style blocks
///   concatenate so.
struct BufferAliases {
  std::map<ValueId, ValueId> views;  ///< a view's value -> the value whose buffer it shares
  /// A Concat input (as resolved through views) -> the Concat's result and
  /// the input's byte offset in it.
  std::map<ValueId, std::pair<ValueId, size_t>> parts;
  /// A Slice's result that is one contiguous run of its operand (as
  /// resolved through views) -> the operand and the run's byte offset in
  /// it: a sub-buffer, no kernel (ShuffleNet's channel halves).
  std::map<ValueId, std::pair<ValueId, size_t>> slices;
  std::vector<bool> noKernel;  ///< per group
  size_t viewGroups = 0, inPlaceConcats = 0, sliceViews = 0;
  /// The value whose buffer holds `v`'s bytes (itself unless a view).
  ValueId resolve(ValueId v) const;
};

BufferAliases aliasBuffers(const Graph& g, const std::vector<KernelGroup>& groups, const OpCatalog& catalog,
                           size_t subBufferAlignment);

/// A graph laid out for a device before any device is touched: the kernels
/// in launch order, the buffers they use, and which buffer each kernel
/// argument and each graph input and output is. Reshape-likes are views:
/// their value shares its operand's buffer; Concats may be written in place
/// by their inputs' producers, and a Slice of one contiguous run read in
/// place (BufferAliases). DeviceProgram runs a schedule;
/// a deployment bundle writes one out.
struct Schedule {
  std::vector<KernelSource> kernels;
  std::vector<std::vector<size_t>> arguments;  ///< per kernel: the buffer of each argument (inputs, then outputs)
  std::vector<ScheduledBuffer> buffers;
  std::vector<std::optional<size_t>> inputBuffers;  ///< per graph input; none when unread and not static
  std::vector<size_t> outputBuffers;               ///< per graph output
  MemoryPlan memory;
};

/// Generates every group's kernel (groups in dependency order) and plans
/// the buffers by liveness: a slot is reused, best fit, once the last
/// kernel reading its value has been enqueued (the queue is in order). A
/// Concat written in place holds its slot from its first input's producer
/// to the last kernel reading it or any of its inputs.
Expected<Schedule> scheduleGraph(const Graph& g, const std::vector<KernelGroup>& groups, const OpCatalog& catalog,
                                 const KernelOptions& options = {});

class DeviceProgram {
 public:
  /// Schedules the graph, builds the kernels, uploads the constants and
  /// allocates the buffers. `g` must outlive the program. Concat inputs
  /// start where both `options.subBufferAlignment` and the device allow.
  /// `progress` (when set) is told as each distinct program is built or
  /// found in the cache: (programs done, distinct programs in all).
  static Expected<DeviceProgram> build(Device& device, const Graph& g, const std::vector<KernelGroup>& groups,
                                       const OpCatalog& catalog, const KernelOptions& options = {},
                                       const std::function<void(size_t, size_t)>& progress = {});
  /// The schedule build() makes on `device`: its kernels are the sources
  /// build() compiles (for Device::prepare ahead of several builds).
  static Expected<Schedule> scheduleFor(Device& device, const Graph& g, const std::vector<KernelGroup>& groups,
                                     const OpCatalog& catalog, const KernelOptions& options = {});
  /// Builds every kernel build() would (or reads it from the cache) without
  /// making a buffer or uploading a constant: kernels ready for a later
  /// run (`fusec compile`). Returns the kernels and the distinct programs
  /// behind them.
  struct Prepared {
    size_t kernels = 0, programs = 0;
  };
  static Expected<Prepared> prepareKernels(Device& device, const Graph& g, const std::vector<KernelGroup>& groups,
                                           const OpCatalog& catalog, const KernelOptions& options = {},
                                           const std::function<void(size_t, size_t)>& progress = {});
  /// One run on `inputs` (one per graph input).
  Expected<DeviceRun> run(const std::vector<Tensor>& inputs);

  const Schedule& schedule() const { return schedule_; }
  const std::vector<KernelSource>& kernels() const { return schedule_.kernels; }
  const MemoryPlan& memory() const { return schedule_.memory; }
  /// Distinct programs behind the kernels: groups that compute the same
  /// thing launch one program (Canonical.h).
  size_t programs() const;

 private:
  DeviceProgram(Device& device, const Graph& g) : device_(&device), g_(&g) {}
  /// The built kernel of each of the schedule's kernels, all programs
  /// built (or read from the cache) together first.
  static Expected<std::vector<void*>> kernelHandles(Device& device, const Schedule& schedule,
                                                    const std::function<void(size_t, size_t)>& progress);
  /// Programs behind kernel handles: groups that compute the same thing share one.
  static size_t distinctPrograms(const std::vector<void*>& handles);

  Device* device_;
  const Graph* g_;
  Schedule schedule_;
  std::vector<void*> handles_;   // the built kernel of each scheduled kernel
  std::vector<Buffer> buffers_;  // one per scheduled buffer
};

/// Builds a program and runs it once.
Expected<DeviceRun> runOnDevice(Device& device, const Graph& g, const std::vector<KernelGroup>& groups,
                                const OpCatalog& catalog, const std::vector<Tensor>& inputs,
                                const KernelOptions& options = {});

/// The header comment of a group's kernel: its name, origin and fused ops.
std::string kernelComment(const Graph& g, const KernelGroup& group, const std::string& name);

/// The plan's groups, named as the plan names them (`g3_conv_epilogue`).
std::vector<KernelGroup> planGroups(const Plan& plan);

/// Every node a group of its own, in topological order (the unfused run),
/// named after the node.
std::vector<KernelGroup> singleNodeGroups(const Graph& g);

}  // namespace fusec::codegen
