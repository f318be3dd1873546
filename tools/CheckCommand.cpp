/// `fusec check PACK...`: load packs with their imports, print every
/// diagnostic, and a summary line (`3 packs, 41 rules, 0 errors, 1 warning`).
/// Exit status 1 on any error.
#include <fmt/format.h>
#include <iostream>

#include "Commands.h"
#include "fusec/codegen/Families.h"
#include "fusec/grammar/PackLoader.h"

namespace fusec::tools {

CommandRunner addCheckCommand(CLI::App& sub) {
  auto files = std::make_shared<std::vector<std::string>>();
  auto searchPaths = std::make_shared<std::vector<std::string>>();
  sub.add_option("packs", *files, ".fuse pack files")->required();
  sub.add_option("-I,--search-path", *searchPaths, "folders searched for imports (after the shipped rules)");
  return [files, searchPaths] {
    grammar::SourceManager sources;
    grammar::DiagnosticEngine diags(sources);
    grammar::ast::AstContext context;
    grammar::PackLoadOptions options;
    options.searchPaths = *searchPaths;
    options.families = &codegen::kernelFamilies();
    grammar::PackLoadResult result = grammar::loadPacks(*files, sources, context, diags, options);
    diags.print(std::cerr);
    auto count = [](size_t n, const char* word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); };
    fmt::print("{}, {}, {}, {}\n", count(result.packCount, "pack"), count(result.ruleCount, "rule"),
               count(diags.errorCount(), "error"), count(diags.warningCount(), "warning"));
    return diags.errorCount() ? 1 : 0;
  };
}

}  // namespace fusec::tools
