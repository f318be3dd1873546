/// Golden tests of the rule language, FileCheck style:
///  - tests/golden/format/*.fuse: good packs; `fusec fmt` output checked
///    against their CHECK lines, and formatting is idempotent;
///  - tests/golden/errors/*.fuse: one file per kind of diagnostic; the
///    checker's output matches the CHECK lines, and every `error:` printed is
///    one a CHECK line expects.
/// Files starting with `_` are helpers (imported by others), not cases.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "FileCheck.h"
#include "FrontEndRoundTrip.h"
#include "TestUtil.h"
#include "fusec/codegen/Families.h"
#include "fusec/engine/OnnxIO.h"
#include "fusec/engine/Planner.h"
#include "fusec/engine/Rewriter.h"
#include "fusec/grammar/PackLoader.h"
#include "fusec/grammar/Parser.h"

namespace fs = std::filesystem;
using namespace fusec;

namespace {

std::vector<fs::path> caseFiles(const std::string& dir, const std::string& ext = ".fuse") {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(fs::path(FUSEC_SOURCE_DIR) / "tests/golden" / dir))
    if (e.path().extension() == ext && e.path().filename().string()[0] != '_') files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string format(const std::string& text, const std::string& name, std::string& errors) {
  grammar::SourceManager sources;
  grammar::DiagnosticEngine diags(sources);
  grammar::ast::AstContext context;
  uint32_t id = sources.addFile(name, text);
  std::string out = grammar::printFile(*grammar::parseFile(context, sources, id, diags));
  std::ostringstream err;
  diags.print(err);
  errors = err.str();
  return out;
}

/// Runs the checker on one case (written beside the original so that
/// relative imports resolve); returns the diagnostics and summary.
std::string check(const fs::path& original, const std::string& input, size_t caseIndex, size_t& errorCount) {
  const fs::path tmp = fs::temp_directory_path() / ("fusec-golden-" + std::to_string(caseIndex) + "-" + original.filename().string());
  {
    std::ofstream out(tmp, std::ios::binary);
    out << input;
  }
  grammar::SourceManager sources;
  grammar::DiagnosticEngine diags(sources);
  grammar::ast::AstContext context;
  grammar::PackLoadOptions options;
  options.searchPaths = {original.parent_path().string(), grammar::defaultRulesDir()};
  options.families = &codegen::kernelFamilies();
  grammar::loadPacks({tmp.string()}, sources, context, diags, options);
  std::ostringstream out;
  diags.print(out);
  errorCount = diags.errorCount();
  fs::remove(tmp);
  return out.str();
}

}  // namespace

TEST_CASE("golden: good packs print canonically and round trip") {
  for (const fs::path& file : caseFiles("format")) {
    for (const test::CheckCase& c : test::splitCases(readFile(file))) {
      INFO(file.string() << " case at line " << c.firstLine);
      std::string errors;
      std::string once = format(c.input, file.string(), errors);
      CHECK_MESSAGE(errors.empty(), errors);
      std::string mismatch = test::fileCheck(once, c.checks);
      CHECK_MESSAGE(mismatch.empty(), mismatch);
      std::string twice = format(once, file.string() + " (formatted)", errors);
      CHECK_MESSAGE(errors.empty(), errors);
      CHECK(twice == once);
    }
  }
}

TEST_CASE("golden: every shipped pack checks clean and prints back") {
  std::vector<fs::path> packs;
  for (const char* dir : {"rules", "examples/packs"})
    for (const auto& e : fs::recursive_directory_iterator(fs::path(FUSEC_SOURCE_DIR) / dir))
      if (e.path().extension() == ".fuse") packs.push_back(e.path());
  CHECK(packs.size() >= 3);
  for (const fs::path& p : packs) {
    INFO(p.string());
    size_t errors = 0;
    std::string out = check(p, readFile(p), 0, errors);
    CHECK_MESSAGE(out.empty(), out);
    std::string fmtErrors;
    std::string once = format(readFile(p), p.string(), fmtErrors);
    CHECK(format(once, p.string(), fmtErrors) == once);
  }
}

TEST_CASE("golden: diagnostics") {
  for (const fs::path& file : caseFiles("errors")) {
    size_t index = 0;
    for (const test::CheckCase& c : test::splitCases(readFile(file))) {
      INFO(file.string() << " case at line " << c.firstLine);
      size_t errorCount = 0;
      std::string out = check(file, c.input, index++, errorCount);
      REQUIRE_MESSAGE(!c.checks.empty(), "a diagnostics case needs CHECK lines");
      std::string mismatch = test::fileCheck(out, c.checks);
      CHECK_MESSAGE(mismatch.empty(), mismatch);
      size_t expectedErrors = 0;
      for (const test::CheckLine& l : c.checks)
        if (l.kind != test::CheckLine::Kind::Not && l.text.find("error:") != std::string::npos) ++expectedErrors;
      CHECK_MESSAGE(errorCount == expectedErrors, "errors reported: " << errorCount << ", expected by CHECK lines: "
                                                                         << expectedErrors << "\n" << out);
    }
  }
}

TEST_CASE("front end: saved fuzzer inputs and the shipped packs keep the round-trip properties") {
  const std::string catalogText = readFile(fs::path(grammar::defaultRulesDir()) / "core/ops.fuse");
  grammar::SourceManager sources;
  grammar::DiagnosticEngine diags(sources);
  grammar::ast::AstContext context;
  grammar::ast::File* catalog = grammar::parseFile(context, sources, sources.addFile("ops.fuse", catalogText), diags);
  REQUIRE(diags.errorCount() == 0);
  std::vector<fs::path> inputs;
  for (const char* dir : {"tests/fuzz-regressions", "tests/golden", "examples/packs"})
    for (const auto& e : fs::recursive_directory_iterator(fs::path(FUSEC_SOURCE_DIR) / dir))
      if (e.is_regular_file()) inputs.push_back(e.path());
  for (const fs::path& p : inputs) {
    INFO(p.string());
    CHECK(grammar::checkFrontEndRoundTrip(readFile(p), catalogText, catalog) == "");
  }
}

/// Planner golden cases (tests/golden/plans/*.txt): a model in ONNX text,
/// optional `// RULE:` lines forming the pack (default: the core pack), and
/// CHECK lines against the fused graph, the rewrites that fired and the
/// candidates with their fate.
TEST_CASE("golden: rewrite and fusion plans") {
  Expected<Target> target = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  REQUIRE(target.ok());
  for (const fs::path& file : caseFiles("plans", ".txt")) {
    for (const test::CheckCase& c : test::splitCases(readFile(file))) {
      INFO(file.string() << " case at line " << c.firstLine);
      std::string model, rules;
      std::istringstream in(c.input);
      for (std::string line; std::getline(in, line);) {
        if (line.rfind("// RULE: ", 0) == 0) rules += line.substr(9) + "\n";
        model += (line.rfind("//", 0) == 0 ? std::string() : line) + "\n";
      }
      grammar::SourceManager sources;
      grammar::DiagnosticEngine diags(sources);
      grammar::ast::AstContext context;
      grammar::PackLoadResult loaded =
          rules.empty() ? grammar::loadPacks({grammar::defaultRulesDir() + "/core.fuse"}, sources, context, diags)
                        : grammar::loadPackText(file.string(), "import \"core/ops\"\n" + rules, sources, context, diags);
      std::ostringstream err;
      diags.print(err);
      REQUIRE_MESSAGE(loaded.rules, err.str());
      Expected<Graph> g = importOnnxBuffer(model, file.string());
      REQUIRE_MESSAGE(g.ok(), test::why(g));
      Expected<RewriteStats> rw = runRewritePipeline(g.value(), *loaded.rules, &target.value());
      REQUIRE_MESSAGE(rw.ok(), test::why(rw));
      REQUIRE(inferTypes(g.value()).ok());
      Plan plan = planFusion(g.value(), *loaded.rules, target.value(), codegen::kernelFamilies());
      std::string out = exportOnnxText(buildFusedGraph(g.value(), plan));
      for (const auto& [rule, n] : rw->fired) out += "rewrite " + rule + " " + std::to_string(n) + "\n";
      for (const Candidate& cand : plan.candidates)
        out += "candidate " + std::to_string(cand.id) + " " + cand.rule->name + " " +
               std::string(candidateStatusName(cand.status)) + (cand.why.empty() ? "" : ": " + cand.why) + "\n";
      std::string mismatch = test::fileCheck(out, c.checks);
      CHECK_MESSAGE(mismatch.empty(), mismatch);
      // The fused plan still computes what the model did: every group's
      // members are nodes of the rewritten graph, each in one group.
      size_t covered = 0;
      for (const Group& grp : plan.groups) covered += grp.nodes.size();
      CHECK(covered == g->numNodes());
    }
  }
}

TEST_CASE("docs/language.md lists the code generator's kernel families as the registry states them") {
  std::string table;
  for (const auto& f : codegen::kernelFamilies().all())
    table += "| `" + std::string(f->name()) + "` | " + std::string(f->accepts()) + " |\n";
  const std::string doc = readFile(fs::path(FUSEC_SOURCE_DIR) / "docs/language.md");
  const std::string begin = "| family | builds |\n|---|---|\n", end = "<!-- /families -->";
  const size_t a = doc.find(begin), b = doc.find(end);
  REQUIRE(a != std::string::npos);
  REQUIRE(b != std::string::npos);
  CHECK_MESSAGE(doc.substr(a + begin.size(), b - a - begin.size()) == table, "expected table:\n" << table);
}
