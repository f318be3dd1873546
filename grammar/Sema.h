/// Semantic checks of loaded `.fuse` files and their translation into the
/// engine's compiled rule set. Private to grammar/.
#pragma once

#include <string>
#include <vector>

#include "fusec/engine/KernelFamily.h"
#include "fusec/engine/RuleSet.h"
#include "fusec/grammar/Ast.h"
#include "fusec/grammar/Diagnostics.h"

namespace fusec::grammar {

/// Checks `files` (dependencies first), reporting every problem to `diags`,
/// and fills `out`. A fusion rule must name one of `families` (when
/// given). Returns the number of rules declared.
size_t checkPacks(const std::vector<ast::File*>& files, const SourceManager& sources,
                  DiagnosticEngine& diags, const KernelFamilies* families, RuleSet& out);

/// Whether `path` is the shipped op catalog, core/ops.fuse under
/// defaultRulesDir(): the one file that may declare standard ONNX ops
/// (PackLoader.cpp).
bool isShippedCatalogFile(const std::string& path);

}  // namespace fusec::grammar
