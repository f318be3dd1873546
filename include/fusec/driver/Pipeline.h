/// The compiler as a library: one entry point that takes a model through
/// the named stages, used by every command (compile, run, explain,
/// onnx-test) and by scripts. The commands parse flags and print; the work
/// is here.
///
///   import   the caller's graph, its symbolic input dims bound (when inputs
///            are given) and every node of shape arithmetic and constants
///            folded (static shapes wherever the inputs' shapes are known)
///   rewrite  the packs' rewrite rules to a fixpoint, CSE, dead code
///   plan     fusion planned for the target with the code generator's
///            kernel families deciding legality (or one kernel per node)
///   codegen  every group's OpenCL C kernel and the buffer schedule
#pragma once

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fusec/codegen/Executor.h"
#include "fusec/codegen/SplitBack.h"
#include "fusec/engine/CostModel.h"
#include "fusec/engine/Planner.h"
#include "fusec/engine/Rewriter.h"
#include "fusec/engine/Target.h"

namespace fusec::driver {

/// The stages, in order (`fusec compile --dump-after STAGE`).
inline constexpr std::array<std::string_view, 4> kStages = {"import", "rewrite", "plan", "codegen"};

struct PipelineOptions {
  /// Sizes for the graph inputs' symbolic dims, by name (`{"batch": 1}`);
  /// a name no input dim has is an error.
  std::map<std::string, int64_t> dims;
  /// One tensor per graph input: symbolic input dims take their sizes.
  const std::vector<Tensor>* inputs = nullptr;
  /// With `inputs`: the inputs that decide shapes or index maps (a Reshape's
  /// shape computed from an input) are fixed to their values (Specialize.h).
  bool specialize = false;
  bool rewrite = true;    ///< run the packs' rewrite rules (folding always runs)
  bool fuse = true;       ///< plan fusion; otherwise one kernel per node
  bool generate = false;  ///< the codegen stage (needs static shapes)
  /// Fusions measured to lose on the device: planned as if unprofitable.
  SplitBacks splitBack;
  /// What to tell the user when `generate` meets a shape that is not static.
  std::string staticShapesHint = "bind the symbolic input dims";
  /// Called after each stage with the graph it leaves (after `plan`: the
  /// fused graph, each group one `fusec.Fused` node).
  std::function<void(std::string_view stage, const Graph&)> afterStage;
};

struct Compiled {
  Graph graph;                  ///< as planned: bound, folded, rewritten
  size_t foldedAtImport = 0;    ///< nodes folded at import
  Estimate imported;            ///< every node its own kernel, as imported
  RewriteStats rewrites;        ///< empty without the rewrite stage
  Plan plan;                    ///< groups, candidates and their fates
  std::vector<codegen::KernelGroup> groups;   ///< the kernels, in launch order
  std::optional<codegen::Schedule> schedule;  ///< with `generate`
  std::vector<std::pair<std::string, double>> stageSeconds;  ///< wall time per stage run
};

/// Compiles `model` with the packs `rules` for `target`. `rules` must outlive
/// the result (the plan names its rules). Errors name the stage's problem.
Expected<std::unique_ptr<Compiled>> compile(Graph model, const RuleSet& rules, const Target& target,
                                            const PipelineOptions& options = {});

/// The plan and codegen stages again on `c`'s graph, with `options.splitBack`
/// (the import and rewrite stages are not run again).
Status replan(Compiled& c, const RuleSet& rules, const Target& target, const PipelineOptions& options);

/// Never a loss, by measurement: each fused kernel of `c` is timed on
/// `device` against its members unfused (codegen::measureFusions, the
/// target's launch overhead counted per kernel); those slower are split
/// back and `c` planned again without them (their candidates `split-back`,
/// with what was measured), until no new fusion loses: splitting one group
/// back can let an overlapping candidate in, measured in turn (a few rounds
/// at most). Returns every fusion measured, those split back included.
Expected<std::vector<codegen::FusionTiming>> splitBackLosses(Compiled& c, codegen::Device& device, const RuleSet& rules,
                                                             const Target& target, PipelineOptions options,
                                                             codegen::SplitBackOptions split = {});

}  // namespace fusec::driver
