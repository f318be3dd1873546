/// Loading and checking rule packs: parse each `.fuse` file, follow its
/// imports, check everything (all errors in one run), and build the compiled
/// rule set the engine consumes.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fusec/engine/KernelFamily.h"
#include "fusec/engine/RuleSet.h"
#include "fusec/engine/Target.h"
#include "fusec/grammar/Ast.h"
#include "fusec/grammar/Diagnostics.h"

namespace fusec::grammar {

struct PackLoadOptions {
  /// Folders searched for `import "name"` after the importing file's own
  /// folder; `name` and `name.fuse` are tried in each. The shipped rules
  /// folder is always searched last.
  std::vector<std::string> searchPaths;
  /// The kernel families a fusion rule may name: the code generator's
  /// (codegen::kernelFamilies()). Null skips that check; the planner then
  /// refuses a group whose family does not exist.
  const KernelFamilies* families = nullptr;
};

struct PackLoadResult {
  /// The checked rules; null when there were errors.
  std::unique_ptr<RuleSet> rules;
  size_t packCount = 0;  ///< files loaded, imports included
  size_t ruleCount = 0;  ///< rules declared (before disables)
};

/// Loads `files` and everything they import. Diagnostics go to `diags`;
/// `sources` and `context` keep the texts and ASTs alive for printing them.
PackLoadResult loadPacks(const std::vector<std::string>& files, SourceManager& sources,
                         ast::AstContext& context, DiagnosticEngine& diags,
                         const PackLoadOptions& options = {});

/// Like loadPacks, for one pack given as text (tests, tools, the Python API
/// later). `name` is the path used in messages; imports resolve against its
/// folder and the search paths.
PackLoadResult loadPackText(const std::string& name, const std::string& text, SourceManager& sources,
                            ast::AstContext& context, DiagnosticEngine& diags,
                            const PackLoadOptions& options = {});

/// Resolves a pack named by a relative path without `..` (`core`,
/// `cnn/conv`, `mine.fuse`): `name.fuse` or `name` in the first of `dirs`
/// that holds it, or, with `allowFolder`, a pack folder `name`. Only a path
/// that stays inside that folder once links are followed; nullopt otherwise.
std::optional<std::string> resolvePackPath(const std::string& name, const std::vector<std::string>& dirs,
                                           bool allowFolder = true);

/// The paths of a target profile's `default_packs`, each resolved next to the
/// profile, then among the shipped packs (as resolvePackPath); an error
/// naming the first that is not found.
Expected<std::vector<std::string>> defaultPackPaths(const Target& target);

/// The `.fuse` files directly inside a pack folder, in name order: loading a
/// folder loads each.
std::vector<std::filesystem::path> packFolderFiles(const std::filesystem::path& folder);

/// The shipped rules folder: $FUSEC_RULES_DIR when set; else, installed,
/// `<prefix>/share/fusec/rules` (found from the loaded library or program);
/// else `rules/` of the source tree it was built from.
std::string defaultRulesDir();

}  // namespace fusec::grammar
