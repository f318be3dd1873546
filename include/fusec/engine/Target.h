/// Target profiles: the roofline numbers of a device, read from TOML.
///
/// A profile describes one device for the cost model (peak FLOP/s, memory
/// bandwidths, launch overhead), for legality (local memory, work-group
/// limits, features) and for reports (energy per byte and per FLOP). See
/// rules/targets/*.toml; each number there says where it comes from.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fusec/engine/Error.h"

namespace fusec {

/// Limits on what one fused group may be (`[target.groups]`): what the
/// device's fused blocks can hold, as data rather than guards on each rule.
struct GroupLimits {
  int64_t maxOps = 0;            ///< members per fused group; 0: no limit
  int64_t maxLocalMemBytes = 0;  ///< local (on-chip) memory per group's kernel; 0: the device's
  std::vector<std::string> forbid;  ///< ops or op classes no fused group may contain
};

struct Target {
  std::string name;
  std::string path;        ///< the file it was read from
  std::string runtime;     ///< "opencl"
  std::string deviceMatch; ///< substring of the OpenCL device name this profile describes
  int64_t computeUnits = 1;
  double peakFlopsFp32 = 0;  ///< FLOP/s
  double peakFlopsFp16 = 0;  ///< FLOP/s; 0 when the device has no fp16 arithmetic
  double dramBandwidth = 0;  ///< bytes/s
  /// Effective bandwidth (bytes/s) of cache levels, by name (`l2`, `l3`, ...).
  std::map<std::string, double> cacheBandwidth;
  double launchOverhead = 0;  ///< seconds per kernel launched back to back
  /// What one exp, log, erf, tanh, trigonometric or hyperbolic function or
  /// pow costs, in FLOPs of peak (`transcendental_flops`; 1 when not given).
  double transcendentalFlops = 1;
  int64_t localMemBytes = 0;
  int64_t registersPerComputeUnit = 0;  ///< 0 when unknown
  int64_t maxWorkGroupSize = 1;
  int64_t memBaseAlignBytes = 0;  ///< where sub-buffers may start (CL_DEVICE_MEM_BASE_ADDR_ALIGN / 8); 0: unknown
  int64_t vectorWidth = 1;  ///< floats per vector the code generator should use
  std::vector<std::string> features;
  double energyPerByte = 0;  ///< joules per DRAM byte
  double energyPerFlop = 0;  ///< joules per FLOP
  std::vector<std::string> defaultPacks;
  GroupLimits groups;
  /// The calibration (`fusec calibrate`): the fraction of its roofline
  /// bound a kernel family reaches on this device, by shape class, keyed
  /// `family.class`, `family`, `*.class` and `*` (docs/targets.md). Empty:
  /// every kernel reaches its roof.
  std::map<std::string, double> roofFractions;
  /// What a kernel of a family takes beyond its share of the roof however
  /// small its work (work-group start-up, seen by profiling events; the
  /// launch overhead comes on top), seconds, keyed `family` and `*`.
  std::map<std::string, double> startupSeconds;
  std::string calibrationPath;  ///< the file they were read from; empty when none

  /// The fraction of the roof a kernel of `family` (empty: unknown) in
  /// shape class `shapeClass` reaches: the most specific calibrated one, or 1.
  double roofFraction(const std::string& family, const std::string& shapeClass) const;
  /// The start-up time of a kernel of `family`: calibrated, or 0.
  double startup(const std::string& family) const;

  bool has(const std::string& feature) const;
  /// Named properties for rule guards (`target.local_mem_bytes`); see
  /// targetProperties() in RuleSet.h. nullopt for an unknown name.
  std::optional<double> property(const std::string& name) const;
  /// Peak FLOP/s divided by DRAM bandwidth: FLOP per byte where kernels stop
  /// being memory bound.
  double ridgePoint() const { return peakFlopsFp32 / dramBandwidth; }
};

/// Every key `[target]` may hold (docs/targets.md documents each).
const std::set<std::string>& targetProfileKeys();

/// Reads and validates a profile, with its calibration when a file
/// `<profile stem>.calibration.toml` lies beside it. Errors are located:
/// `file:line:col: error: ...`, one per problem found.
Expected<Target> loadTarget(const std::string& path);
/// Where the calibration of the profile at `profilePath` lives.
std::string calibrationPathFor(const std::string& profilePath);
/// Reads a calibration (`[calibration.roof_fraction]`: key = fraction in
/// (0, 4]; `[calibration.startup_us]`: family = microseconds in [0, 10^5])
/// into `target`.
Status loadCalibration(Target& target, const std::string& text, const std::string& path);
/// The same for a profile's text; `path` names it in messages.
Expected<Target> parseTarget(const std::string& text, const std::string& path);

}  // namespace fusec
