/// The properties the front-end fuzzer checks on every input, shared with
/// the unit test that replays saved crashers (tests/fuzz-regressions/):
/// parsing never crashes; a file that parses prints to text that parses
/// again and prints identically; the checker runs to completion.
#pragma once

#include <sstream>
#include <string>

#include "Sema.h"
#include "fusec/grammar/Parser.h"

namespace fusec::grammar {

/// Returns an empty string when the properties hold, else what broke.
/// `catalog` is the parsed op catalog, registered as file 1 of its own
/// SourceManager with text `catalogText`.
inline std::string checkFrontEndRoundTrip(const std::string& text, const std::string& catalogText,
                                          ast::File* catalog) {
  SourceManager sources;
  DiagnosticEngine diags(sources);
  ast::AstContext context;
  sources.addFile("ops.fuse", catalogText);  // id 1, as in the catalog's ranges
  const uint32_t id = sources.addFile("input.fuse", text);
  ast::File* file = parseFile(context, sources, id, diags);
  std::ostringstream sink;
  diags.print(sink);  // exercises caret printing on every location
  if (diags.errorCount() != 0) return {};

  const std::string once = printFile(*file);
  DiagnosticEngine again(sources);
  ast::File* reparsed = parseFile(context, sources, sources.addFile("printed.fuse", once), again);
  if (again.errorCount() != 0) {
    std::ostringstream err;
    again.print(err);
    return "printed text does not parse:\n" + once + "\n" + err.str();
  }
  if (printFile(*reparsed) != once) return "printing is not stable:\n" + once + "\n---\n" + printFile(*reparsed);

  RuleSet rules;
  checkPacks({catalog, file}, sources, diags, nullptr, rules);
  diags.print(sink);
  return {};
}

}  // namespace fusec::grammar
