/// What the compiling commands share: loading a model, rule packs and a
/// target profile, with the defaults the command line promises (the target's
/// default packs; the shipped pocl-cpu profile until device detection).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fusec/engine/Graph.h"
#include "fusec/engine/RuleSet.h"
#include "fusec/engine/Target.h"

namespace fusec::tools {

struct Session {
  Graph graph;
  std::unique_ptr<RuleSet> rules;
  Target target;
  std::vector<std::string> packs;  ///< files loaded
};

/// The target profile at `path`, or the shipped pocl-cpu profile when empty.
/// Prints the error and returns nullopt on failure.
std::optional<Target> loadTargetOrDefault(const std::string& path);

/// Loads `packs` (when empty: the target's default packs from the shipped
/// rules folder). Prints diagnostics; null on error. `loaded` receives the
/// files used.
std::unique_ptr<RuleSet> loadRules(const std::vector<std::string>& packs, const Target& target,
                                   std::vector<std::string>* loaded = nullptr);

/// Loads everything; prints diagnostics to stderr and returns null on error.
std::unique_ptr<Session> openSession(const std::string& model, const std::vector<std::string>& packs,
                                     const std::string& target);

}  // namespace fusec::tools
