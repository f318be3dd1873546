/// The roofline cost model.
///
/// A kernel takes `max(flops / peak, dram bytes / bandwidth) + launch
/// overhead`. A node's FLOPs come from the op catalog (scalar semantics for
/// elementwise ops, formulas for anchors and reductions); its bytes are its
/// operands and results. A fused group's bytes are only what crosses its
/// boundary: values read from outside and values used outside (or graph
/// outputs), each once; intermediates stay on chip. Energy is estimated from
/// the same counts. Symbolic dimensions count as 1.
#pragma once

#include <string>
#include <vector>

#include "fusec/engine/Graph.h"
#include "fusec/engine/KernelFamily.h"
#include "fusec/engine/OpCatalog.h"
#include "fusec/engine/Target.h"

namespace fusec {

struct Estimate {
  double flops = 0;
  double bytes = 0;   ///< DRAM traffic
  double seconds = 0; ///< roofline time including launch overhead (calibrated when the target is)
  /// The roofline's two bounds, uncalibrated, launch not included: the
  /// compute time at peak (transcendental calls weighed) and the DRAM time.
  double computeSeconds = 0, memorySeconds = 0;
  double joules = 0;
  int64_t kernels = 0;
  Estimate& operator+=(const Estimate& o);
};

/// Bytes of a value with its static shape (symbolic dims as 1); 0 if the
/// element type or rank is unknown.
double valueBytes(const Graph& g, ValueId v);

/// FLOPs of one node. Ops the catalog does not know count 0.
double nodeFlops(const Graph& g, NodeRef n, const OpCatalog& catalog);

/// A kernel's shape class for the calibration: `memory` when its DRAM time
/// is the larger bound; `dense` when its compute time is 8 times its DRAM
/// time or more (dense convs and GEMMs, which tile well); else `compute`.
std::string shapeClass(double computeSeconds, double memorySeconds);

/// One kernel of `flops` and `bytes` on `target`; its compute time is that
/// of `work` FLOPs of peak when given (transcendental calls weighed). With a
/// calibrated target, the bound is divided by the fraction of it kernels of
/// `family` (empty: unknown) reach in the kernel's shape class, and the
/// family's start-up time added.
Estimate rooflineEstimate(double flops, double bytes, const Target& target, double work = -1,
                          const std::string& family = {});

/// Running `members` as one kernel of `family` (empty: unknown): FLOPs
/// summed, bytes only at the boundary. Elementwise members count at every
/// point of the group's largest result (a member on a broadcast operand is
/// computed again at each), and its time weighs transcendental calls at
/// Target::transcendentalFlops.
Estimate groupEstimate(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                       const Target& target, const std::string& family = {});

/// Whether the target carries a calibration (per-family roof fractions or
/// startup times), so that estimates depend on the family that builds a group.
bool hasCalibration(const Target& target);

/// The family that builds node `n` alone, for calibrated estimates (empty
/// without `families`, on an uncalibrated target, or when none builds it).
std::string soloFamily(const Graph& g, NodeRef n, const OpCatalog& catalog, const Target& target,
                       const KernelFamilies* families);

/// Every node its own kernel (the unfused baseline); with `families`, each
/// node's estimate calibrated for the family that would build it alone.
Estimate unfusedEstimate(const Graph& g, const OpCatalog& catalog, const Target& target,
                         const KernelFamilies* families = nullptr);

}  // namespace fusec
