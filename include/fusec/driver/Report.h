/// What a compilation produced, said for people and for scripts: the report
/// `fusec compile` prints, the plan and report as JSON (`plan.json`,
/// `compile --json`, the Python module's `report` and `groups`), and the
/// generated OpenCL C of every kernel.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fusec/driver/Pipeline.h"

namespace fusec::driver {

/// Names what was compiled, for the report's title.
struct ReportContext {
  std::string model;               ///< the model's file or name
  std::string target;              ///< the target profile's name
  std::vector<std::string> packs;  ///< the pack files loaded
  std::string calibration;         ///< the target's calibration file; empty when uncalibrated
};

/// Each fusion rule with candidates: (groups chosen, candidates), by rule name.
std::map<std::string, std::pair<size_t, size_t>> fusionCounts(const Plan& plan);

/// The report `fusec compile` prints: rewrites fired, fusions chosen of their
/// candidates, refusals with their reasons, the fused groups, and kernels,
/// DRAM traffic, FLOPs, time and energy as imported, rewritten and fused.
std::string reportText(const Compiled& c, const ReportContext& context);

/// The same, as data: {model, target, packs, inputs, folded_at_import,
/// rules_fired, constants_folded, nodes_removed, rewrite_cap_hit, fusions
/// {rule: {chosen, candidates}}, estimates {imported, rewritten, fused}
/// (each kernels, flops, bytes, seconds, joules), stage_seconds}.
nlohmann::json reportJson(const Compiled& c, const ReportContext& context);

/// The plan: groups (name, kernel family, rule, member nodes, estimate),
/// every candidate with its fate and reason, and the estimates before and
/// after (`plan.json`).
nlohmann::json planJson(const Graph& g, const Plan& plan);

/// The generated OpenCL C of a compiled model, group by group.
struct KernelSources {
  std::vector<std::pair<std::string, std::string>> kernels;  ///< (group name, OpenCL C), launch order
  std::map<std::string, size_t> unbuilt;                    ///< op -> nodes no family builds
  size_t views = 0;            ///< reshapes that are views of their input: no kernel
  size_t inPlaceConcats = 0;   ///< concats written in place by their inputs' producers: no kernel
  size_t sliceViews = 0;       ///< slices of one contiguous run of their input, read in place: no kernel
};

/// The kernels `fusec run` builds for `target`, tile for tile. Needs static
/// shapes (an error otherwise).
Expected<KernelSources> kernelSources(const Compiled& c, const OpCatalog& catalog, const Target& target);

}  // namespace fusec::driver

namespace fusec::driver {

struct HtmlOptions {
  /// Measured seconds per kernel (group name), from a run: drawn on the
  /// roofline beside the estimates and listed in the top kernels.
  std::map<std::string, double> measuredSeconds;
  /// Graphs with more nodes than this are not drawn (dot's layout time grows fast).
  /// Graphviz lays out a graph in time that grows faster than its size
  /// (1,000 nodes: seconds; 3,000: past two minutes): larger graphs get a
  /// note instead of a drawing, and a layout past the time limit is given up.
  size_t maxGraphNodes = 1000;
  double dotTimeoutSeconds = 30;
};

/// One self-contained HTML page (inline CSS and SVG, nothing fetched): the
/// graph drawn by Graphviz with each fused group boxed and coloured by kernel
/// family, linking to the rule that formed it; the groups on the target's
/// roofline (estimated, and measured when given); the rules that fired with
/// their locations; the top kernels. Without Graphviz's `dot`, or for a graph
/// too large, the page says so in place of the drawing.
std::string htmlReport(const Compiled& c, const ReportContext& context, const RuleSet& rules, const Target& target,
                       const HtmlOptions& options = {});

}  // namespace fusec::driver
