/// Never a loss, by measurement: each fused kernel of a plan is timed on the
/// device against its members run as kernels of their own, and a fusion that
/// measures slower than its members unfused is reported for splitting back.
///
/// Every kernel is timed alone on buffers of its operands' and results'
/// shapes (random floats, constants as they are), round robin over the
/// fused kernel and its members, best of a few launches each; a loss must
/// show in a second batch too. A member that
/// is a view (Reshape and the like) launches nothing and costs nothing. A
/// fusion whose members cannot all be built alone is kept: there is nothing
/// to split it back into. Decisions are cached on disk next to the program
/// binaries and the tuned tilings, keyed by the kernels' sources and the
/// device, so a model is measured once per machine.
#pragma once

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "fusec/codegen/Executor.h"

namespace fusec::codegen {

struct FusionTiming {
  std::string group;            ///< the fused group's name
  std::vector<NodeId> nodes;    ///< its members' ids, sorted (SplitBacks' key)
  double fusedSeconds = 0;      ///< the fused kernel, best launch, plus one launch's overhead
  double unfusedSeconds = 0;    ///< its members' kernels, best launch each plus its overhead, summed
  size_t memberKernels = 0;     ///< members that launch a kernel alone (views do not)
  bool cached = false;          ///< read from the cache, not measured now
  bool splitBack = false;       ///< measured slower than unfused, beyond the margin, twice
};

struct SplitBackOptions {
  int launches = 7;        ///< per kernel and batch, round robin; the best counts
  /// Fewer launches (two at least) where `launches` rounds of the fused
  /// kernel and its members would take longer than this, per batch.
  double budgetSeconds = 0.5;
  /// A fusion is split back when its kernel takes more than this times its
  /// members' summed time, in two batches of launches: a loss within the
  /// noise is no loss.
  double margin = 1.15;
  /// What one more launch costs beyond its kernel's own time (the target's
  /// launch overhead): a split adds launches, which profiling events do
  /// not see. Counted on both sides, per kernel.
  double launchSeconds = 0;
  bool useCache = true;    ///< read and write the on-disk cache
  /// Told after each fused group is measured (or found in the cache).
  std::function<void(size_t done, size_t total)> progress;
};

/// Times every fused group (more than one node) of `groups` against its
/// members alone; groups kernels are built for as `options` says (tuned
/// tilings included).
Expected<std::vector<FusionTiming>> measureFusions(Device& device, const Graph& g, const std::vector<KernelGroup>& groups,
                                                   const OpCatalog& catalog, const KernelOptions& options,
                                                   const SplitBackOptions& split = {});

/// Device buffers for one launch of `kernel`: its inputs (constants as they
/// are, other values random floats, other element types zero), outputs
/// (allocated) and derived constants, in argument order.
Expected<std::vector<Buffer>> sampleBuffers(Device& device, const Graph& g, const KernelSource& kernel, std::mt19937& rng);

}  // namespace fusec::codegen
