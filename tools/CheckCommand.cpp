/// `fusec check PACK...`: load packs with their imports, print every
/// diagnostic, and a summary line (`3 packs, 41 rules, 0 errors, 1 warning`).
/// Exit status 1 on any error. With `--verify`, then `fusec verify`.
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
  auto verify = std::make_shared<bool>(false);
  auto flags = std::make_shared<VerifyFlags>();
  sub.add_flag("--verify", *verify, "then verify every rule, as `fusec verify` does (its options apply)");
  addVerifyOptions(sub, *flags);
  return [files, searchPaths, verify, flags, &sub] {
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
    if (diags.errorCount()) return 1;
    return *verify ? runVerify(*files, *searchPaths, *flags, toleranceGiven(sub)) : 0;
  };
}

}  // namespace fusec::tools
