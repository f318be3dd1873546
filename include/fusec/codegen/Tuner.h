/// Auto-tuning of kernel parameters: each gemm_epilogue kernel (MatMul, Gemm,
/// Conv with its epilogue) is generated under a handful of tilings, timed on
/// the device with profiling events (best of a few launches, random inputs),
/// and the fastest is kept for that kernel. Results are cached on disk next
/// to the program binaries, keyed by the kernel, the candidates and the
/// device, so a model is tuned once per machine.
#pragma once

#include <functional>

#include <string>
#include <vector>

#include "fusec/codegen/Executor.h"

namespace fusec::codegen {

/// The tilings tried, the default first.
const std::vector<GemmTiling>& gemmCandidates();

struct TunedKernel {
  std::string group;          ///< the group's name (or its head op's)
  GemmTiling tiling;          ///< the fastest
  double defaultSeconds = 0;  ///< with options.gemm
  double tunedSeconds = 0;    ///< with `tiling`
  bool cached = false;        ///< read from the tuning cache, not measured now
};

struct TuningOptions {
  int launches = 5;       ///< per candidate, round robin; the best counts
  double margin = 0.9;    ///< another tiling replaces the default only below this fraction of its time
  bool useCache = true;   ///< read and write the on-disk tuning cache
  /// Told after each group is tuned (or found in the cache): (done, in all).
  std::function<void(size_t, size_t)> progress;
};

/// Which candidate a tuning keeps, from each one's best time (`best[0]`
/// the default's): the fastest, when it takes under `margin` of the
/// default's time; else the default, whose lead is within the noise.
size_t chooseTiling(const std::vector<double>& best, double margin);

/// Tunes every gemm_epilogue group of `groups` and records the choices in
/// `options.gemmTilings`. Groups no candidate can generate keep the default.
Expected<std::vector<TunedKernel>> tuneKernels(Device& device, const Graph& g, const std::vector<KernelGroup>& groups,
                                               const OpCatalog& catalog, KernelOptions& options,
                                               const TuningOptions& tuning = {});

}  // namespace fusec::codegen
