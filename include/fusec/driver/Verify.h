/// `fusec verify`: each rule shown sound before it changes a model.
///
/// Rewrite rules whose pattern and replacement are elementwise and
/// broadcast ops with catalog semantics are proved equivalent symbolically
/// (Prove.h). Every rule is also checked on instances (Instances.h): small
/// concrete graphs its pattern matches, run on the reference interpreter
/// before and after the rewrite, or for a fusion rule, compiled with the
/// rule's kernel family and run on OpenCL against the interpreter. A failing
/// instance is shrunk (fewer and smaller dims, shorter chains, simpler data)
/// and reported as a runnable ONNX text graph with both outputs.
///
/// Tolerance, unless the rule or the caller gives one: element i matches when
///     |got_i - want_i| <= atol + rtol * max|want| + 8 * noise_i
/// where noise_i is how far element i moves when the graph is computed in
/// double precision with every input, constant and node result given a
/// continuous relative error of one float32 epsilon (ops that accumulate:
/// at the scale of their terms), the largest move over three runs, before
/// the rule plus after it. It is the instance's own conditioning (a
/// variance near zero, a difference of large values), so a rule is blamed
/// only for what rounding cannot explain.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fusec/codegen/OpenCL.h"
#include "fusec/engine/Instances.h"
#include "fusec/engine/RuleSet.h"
#include "fusec/engine/Target.h"
#include "fusec/engine/Tolerance.h"

namespace fusec::driver {

/// The most rules one `fusec verify` run checks: each takes from a
/// fraction of a second to seconds, so a pack of thousands would run for
/// hours; a larger selection is refused with this number, and `--rule`
/// chooses.
inline constexpr size_t kMaxVerifyRules = 1000;

struct VerifyOptions {
  uint64_t seed = 1;
  int instances = 40;           ///< checked instances wanted per rewrite rule
  int fusionInstances = 6;      ///< ... per fusion rule (each builds OpenCL kernels)
  int drawsPerInstance = 400;   ///< a rule gives up after instances * this many draws
  /// ... a fusion rule after fusionInstances * this many: its few instances
  /// are costly to check, its draws cheap (a guard evaluated), and guards
  /// on shapes (a depthwise conv into a 1x1 conv on maps 8 wide or more)
  /// hold for few of them.
  int fusionDrawsPerInstance = 5000;
  const Target* target = nullptr;     ///< for guards and fusion planning; required
  codegen::Device* device = nullptr;  ///< fusion rules run here; without one they are not checked
  bool prove = true;                  ///< try a symbolic proof first
  std::optional<Tolerance> tolerance; ///< replaces the default atol/rtol (noise still counts)
  /// After each instance checked: the rule, instances done and wanted.
  std::function<void(const Rule&, int done, int wanted)> progress;
};

struct Counterexample {
  Instance instance;
  std::vector<Tensor> want, got;  ///< unrewritten (interpreter) and rewritten (or fused, on OpenCL)
  std::string error;              ///< what differs, or what failed
  /// Constants a saved case keeps (the guard reads them with const() or
  /// value(), or the op takes the operand only as a constant: a Reshape's
  /// shape); the others are saved as graph inputs, so that compiling the
  /// case does not fold them away before the rule can fire.
  std::set<ValueId> keptConstants;
};

struct RuleVerdict {
  enum class Kind { Proved, Verified, Counterexample, NoInstance, NotChecked };
  const Rule* rule = nullptr;
  Kind kind = Kind::NotChecked;
  int instances = 0;  ///< instances checked (also after a proof)
  int refused = 0;    ///< fusion rules: instances whose group the family refused at planning
  std::string refusal;  ///< the commonest reason for those refusals
  int draws = 0;
  double seconds = 0;
  /// Proved: over what; NoInstance: the commonest reason draws were
  /// discarded; NotChecked: why; Verified: why not proved.
  std::string detail;
  std::optional<Counterexample> counterexample;  ///< shrunk
  /// Counterexamples of other kinds (another element type, NaN where the
  /// first was a value off), shrunk: every defect found, not the first.
  std::vector<Counterexample> others;
  /// The choices the checked instances made (Instance::features), sorted.
  std::vector<std::string> covered;
};

std::string_view verdictName(RuleVerdict::Kind k);

/// Verifies every rule of `rules`, or those whose names are in `only`.
std::vector<RuleVerdict> verifyRules(const RuleSet& rules, const VerifyOptions& options,
                                     const std::vector<std::string>& only = {});

/// The counterexample as a reader needs it: the rule's location, the error,
/// the graph in ONNX text, the inputs and both outputs.
std::string describeCounterexample(const RuleVerdict& v);
/// One of them (v.counterexample or one of v.others).
std::string describeCounterexample(const RuleVerdict& v, const Counterexample& c);

/// Writes the counterexample as an `onnx-test` case folder (model.onnx and
/// test_data_set_0 with the inputs and the unrewritten outputs), so that
/// `fusec onnx-test DIR --rewrite` (or `--opencl --fuse`) reproduces it.
Status saveCounterexample(const RuleVerdict& v, const Counterexample& c, const std::string& dir);

}  // namespace fusec::driver
