/// Loading what a compilation needs, for the commands and the Python module
/// alike: a target profile (the shipped pocl-cpu profile by default) and rule
/// packs (the target's default packs when none are named), with every
/// diagnostic kept as data, so a caller can print it or raise it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fusec/engine/Error.h"
#include "fusec/engine/RuleSet.h"
#include "fusec/engine/Target.h"

namespace fusec::driver {

/// One thing said about a pack file, located: `file:line:column: severity:
/// message`, then the source line and the caret line under it.
struct PackDiagnostic {
  std::string severity;  ///< error, warning or note
  std::string file;      ///< empty when the diagnostic has no location
  uint32_t line = 0, column = 0;
  std::string message;
  std::string sourceLine, caret;
};

struct LoadedPacks {
  std::unique_ptr<RuleSet> rules;  ///< the checked rules; null on any error
  std::vector<std::string> files;  ///< the files loaded (named, or the target's defaults)
  /// Errors and warnings in the order found, each followed by its notes.
  std::vector<PackDiagnostic> diagnostics;
  /// The diagnostics as `fusec check` prints them (empty when there are none).
  std::string printed;
  /// Why loading failed when no diagnostic says so (a default pack missing).
  std::string error;
};

/// The target profile at `path`, or the shipped pocl-cpu profile when empty.
Expected<Target> loadTargetOrDefault(const std::string& path);

/// Loads the pack files `files`, or `target`'s default packs when `files` is
/// empty, and then `added` (`--add-rules`: an author's pack together with
/// the defaults), checking every fusion rule's family against the code
/// generator's. A name that is not a file names a shipped pack as an import
/// would (`core/ops`, `cnn`); a file loaded twice (named and imported) is
/// loaded once.
LoadedPacks loadPacks(const std::vector<std::string>& files, const Target& target,
                      const std::vector<std::string>& added = {});

/// Loads one pack given as text; `name` is the path its diagnostics name and
/// its imports resolve against (the shipped packs are searched too).
LoadedPacks loadPackText(const std::string& name, const std::string& text);

}  // namespace fusec::driver
