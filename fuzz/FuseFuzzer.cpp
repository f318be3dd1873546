/// libFuzzer target for the whole `.fuse` front end: parse, print, re-parse,
/// and check against the op catalog. Besides crashes, hangs and stack
/// exhaustion, it asserts two properties on every input:
///  - printing is canonical: a file that parses prints to text that parses
///    without errors and prints the same again;
///  - the checker never throws.
/// Build and run: scripts/fuzz.sh [SECONDS]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "FrontEndRoundTrip.h"
#include "fusec/grammar/PackLoader.h"
#include "fusec/grammar/Parser.h"

using namespace fusec::grammar;

namespace {

std::string readCatalog() {
  std::ifstream in(defaultRulesDir() + "/core/ops.fuse");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The catalog is parsed once; every run registers its text first, so its
/// file id (1) matches the ranges in the shared AST.
struct Catalog {
  std::string text = readCatalog();
  SourceManager sources;
  ast::AstContext context;
  ast::File* file = nullptr;
  Catalog() {
    DiagnosticEngine diags(sources);
    file = parseFile(context, sources, sources.addFile("ops.fuse", text), diags);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Catalog catalog;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string problem = checkFrontEndRoundTrip(text, catalog.text, catalog.file);
  if (!problem.empty()) {
    std::fprintf(stderr, "%s\n", problem.c_str());
    std::abort();
  }
  return 0;
}
