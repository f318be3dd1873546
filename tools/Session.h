/// What the compiling commands share: loading a model, rule packs and a
/// target profile, with the defaults the command line promises (the target's
/// default packs; the shipped pocl-cpu profile until device detection).
#pragma once

#include <CLI/CLI.hpp>
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

/// The packs a command was given: `--rules` (replacing the target's
/// default packs) and `--add-rules` (loaded after them).
struct PackChoice {
  std::vector<std::string> rules;
  std::vector<std::string> added;
};

/// Registers `--rules` and `--add-rules` on a compiling command.
void addPackOptions(CLI::App& sub, PackChoice& packs);

/// Loads the chosen packs (without `--rules`: the target's default packs
/// from the shipped rules folder). Prints diagnostics; null on error.
/// `loaded` receives the files used.
std::unique_ptr<RuleSet> loadRules(const PackChoice& packs, const Target& target,
                                   std::vector<std::string>* loaded = nullptr);

/// Loads everything; prints diagnostics to stderr and returns null on error.
std::unique_ptr<Session> openSession(const std::string& model, const PackChoice& packs, const std::string& target);

}  // namespace fusec::tools
