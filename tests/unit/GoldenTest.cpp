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
#include <map>
#include <set>
#include <sstream>

#include "FileCheck.h"
#include "FrontEndRoundTrip.h"
#include "TestUtil.h"
#include "fusec/codegen/Families.h"
#include "fusec/engine/Interpreter.h"
#include "fusec/engine/OnnxIO.h"
#include "fusec/engine/OutputCheck.h"
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
  // A loop over no files passes whatever it checks.
  REQUIRE_MESSAGE(!files.empty(), "no " << ext << " files in tests/golden/" << dir);
  return files;
}

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The cases of one golden file; a file without a case fails the test.
std::vector<test::CheckCase> casesIn(const fs::path& file) {
  std::vector<test::CheckCase> cases = test::splitCases(readFile(file));
  REQUIRE_MESSAGE(!cases.empty(), file.string() << " holds no case");
  return cases;
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

/// Runs the checker on one case (the file itself when the case is all of
/// it: the shipped catalog may declare standard ops, a copy may not; else
/// written to a temporary file, with imports resolved beside the
/// original); returns the diagnostics and summary.
std::string check(const fs::path& original, const std::string& input, size_t caseIndex, size_t& errorCount) {
  const bool whole = readFile(original) == input;
  const fs::path tmp =
      whole ? original : fs::temp_directory_path() / ("fusec-golden-" + std::to_string(caseIndex) + "-" + original.filename().string());
  if (!whole) {
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
  if (!whole) fs::remove(tmp);
  return out.str();
}

}  // namespace

TEST_CASE("golden: good packs print canonically and round trip") {
  for (const fs::path& file : caseFiles("format")) {
    for (const test::CheckCase& c : casesIn(file)) {
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

namespace {

/// The file's tokens (the lexer's, comments and layout aside) but for
/// grouping and separators, sorted: the names, keywords, operators and
/// literals formatting keeps, whatever order it gives the clauses (it
/// writes the parentheses precedence needs, drops empty braces and `;`,
/// and ends attribute lists with a comma).
std::vector<std::string> sortedTokens(const std::string& text) {
  std::vector<std::string> t = grammar::lexTokens(text);
  std::erase_if(t, [](const std::string& s) { return s == "(" || s == ")" || s == "{" || s == "}" || s == "," || s == ";"; });
  std::sort(t.begin(), t.end());
  return t;
}

}  // namespace

TEST_CASE("golden: every shipped pack checks clean and prints back, keeping every token") {
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
    const std::string text = readFile(p);
    std::string once = format(text, p.string(), fmtErrors);
    CHECK(format(once, p.string(), fmtErrors) == once);
    CHECK(sortedTokens(once) == sortedTokens(text));
  }
  // Files laid out badly on purpose: formatted, they keep every token.
  for (const fs::path& file : caseFiles("format")) {
    INFO(file.string());
    std::string fmtErrors;
    const std::string text = readFile(file);
    CHECK(sortedTokens(format(text, file.string(), fmtErrors)) == sortedTokens(text));
  }
}

TEST_CASE("golden: diagnostics") {
  for (const fs::path& file : caseFiles("errors")) {
    size_t index = 0;
    for (const test::CheckCase& c : casesIn(file)) {
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
  // The round trip holds vacuously on text that does not parse: every pack
  // file must parse, except the saved fuzzer inputs (any bytes) and the
  // golden syntax errors (which must not).
  auto parses = [&](const std::string& text) {
    grammar::SourceManager sm;
    grammar::DiagnosticEngine d(sm);
    grammar::ast::AstContext ctx;
    grammar::parseFile(ctx, sm, sm.addFile("input.fuse", text), d);
    return d.errorCount() == 0;
  };
  size_t packFiles = 0;
  for (const char* dir : {"tests/fuzz-regressions", "tests/golden", "examples/packs", "rules"})
    for (const auto& e : fs::recursive_directory_iterator(fs::path(FUSEC_SOURCE_DIR) / dir)) {
      const fs::path& p = e.path();
      const bool fuzzed = std::string(dir) == "tests/fuzz-regressions";
      if (!e.is_regular_file() || (!fuzzed && p.extension() != ".fuse")) continue;
      INFO(p.string());
      const std::string text = readFile(p);
      if (!fuzzed) {
        CHECK(parses(text) == (p.filename() != "syntax.fuse"));
        ++packFiles;
      }
      CHECK(grammar::checkFrontEndRoundTrip(text, catalogText, catalog) == "");
    }
  CHECK(packFiles >= 20);
}

namespace {

/// Deterministic inputs for a graph of static float inputs, spread over
/// negative, small and large magnitudes; nullopt when an input is of another
/// kind (the case then checks structure only).
std::optional<std::vector<Tensor>> sampleInputs(const Graph& g) {
  std::vector<Tensor> inputs;
  uint32_t state = 12345;
  for (ValueId v : g.inputs()) {
    const TensorType& t = g.value(v).type;
    if (t.dtype != DType::Float32 || !t.isStatic()) return std::nullopt;
    const Shape shape = t.staticShape();
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> data(static_cast<size_t>(n));
    for (float& x : data) {
      state = state * 1664525u + 1013904223u;
      x = (static_cast<float>(state >> 8) / 16777216.0f - 0.5f) * 8.0f;  // [-4, 4)
    }
    inputs.push_back(Tensor::fromVector<float>(shape, data));
  }
  return inputs;
}

/// `// FIRES: rule` and `// NEAR-MISS: rule` lines of a plan case.
std::vector<std::string> annotated(const std::string& input, const std::string& tag) {
  std::vector<std::string> rules;
  std::istringstream in(input);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("// " + tag + ": ", 0) == 0) rules.push_back(line.substr(tag.size() + 5));
  return rules;
}

std::vector<test::CheckCase> planCases() {
  std::vector<test::CheckCase> cases;
  for (const fs::path& file : caseFiles("plans", ".txt"))
    for (test::CheckCase& c : casesIn(file)) cases.push_back(std::move(c));
  return cases;
}

}  // namespace

/// Planner golden cases (tests/golden/plans/*.txt): a model in ONNX text,
/// optional `// RULE:` lines forming the pack (default: the target's default
/// packs, with the files named by `// PACK:` lines), and CHECK lines against the fused graph, the rewrites that fired
/// and the candidates with their fate. `// FIRES: rule` requires the rule to
/// rewrite or to be chosen; `// NEAR-MISS: rule` requires it not to match at
/// all. The rewritten graph must compute what the model did: both run on the
/// interpreter on the same inputs.
TEST_CASE("golden: rewrite and fusion plans") {
  for (const fs::path& file : caseFiles("plans", ".txt")) {
    for (const test::CheckCase& c : casesIn(file)) {
      INFO(file.string() << " case at line " << c.firstLine);
      const std::vector<std::string> fires = annotated(c.input, "FIRES"), misses = annotated(c.input, "NEAR-MISS");
      std::string model, rules, targetPath = "targets/pocl-cpu.toml";
      std::vector<std::string> extraPacks;  // `// PACK: cnn/launch-bound/bottleneck.fuse`: loaded with the defaults
      std::istringstream in(c.input);
      for (std::string line; std::getline(in, line);) {
        if (line.rfind("// RULE: ", 0) == 0) rules += line.substr(9) + "\n";
        if (line.rfind("// TARGET: ", 0) == 0) targetPath = line.substr(11);
        if (line.rfind("// PACK: ", 0) == 0) extraPacks.push_back(grammar::defaultRulesDir() + "/" + line.substr(9));
        model += (line.rfind("//", 0) == 0 ? std::string() : line) + "\n";
      }
      // `// TARGET: vendor/npu/rk3588.toml`: plan for that profile, with its packs.
      Expected<Target> caseTarget = loadTarget(grammar::defaultRulesDir() + "/" + targetPath);
      REQUIRE_MESSAGE(caseTarget.ok(), test::why(caseTarget));
      caseTarget = test::uncalibrated(caseTarget.value());
      grammar::SourceManager sources;
      grammar::DiagnosticEngine diags(sources);
      grammar::ast::AstContext context;
      Expected<std::vector<std::string>> defaults = grammar::defaultPackPaths(caseTarget.value());
      REQUIRE(defaults.ok());
      defaults->insert(defaults->end(), extraPacks.begin(), extraPacks.end());
      grammar::PackLoadResult loaded =
          rules.empty() ? grammar::loadPacks(defaults.value(), sources, context, diags)
                        : grammar::loadPackText(file.string(), "import \"core/ops\"\n" + rules, sources, context, diags);
      std::ostringstream err;
      diags.print(err);
      REQUIRE_MESSAGE(loaded.rules, err.str());
      Expected<Graph> g = importOnnxBuffer(model, file.string());
      REQUIRE_MESSAGE(g.ok(), test::why(g));
      const Graph original = g->clone();
      Expected<RewriteStats> rw = runRewritePipeline(g.value(), *loaded.rules, &caseTarget.value());
      REQUIRE_MESSAGE(rw.ok(), test::why(rw));
      REQUIRE(inferTypes(g.value()).ok());
      Plan plan = planFusion(g.value(), *loaded.rules, caseTarget.value(), codegen::kernelFamilies());
      std::string out = exportOnnxText(buildFusedGraph(g.value(), plan));
      for (const auto& [rule, n] : rw->fired) out += "rewrite " + rule + " " + std::to_string(n) + "\n";
      for (const Candidate& cand : plan.candidates)
        out += "candidate " + std::to_string(cand.id) + " " + cand.rule->name + " " +
               std::string(candidateStatusName(cand.status)) + (cand.why.empty() ? "" : ": " + cand.why) + "\n";
      std::string mismatch = test::fileCheck(out, c.checks);
      CHECK_MESSAGE(mismatch.empty(), mismatch);
      auto chosen = [&](const std::string& rule) {
        for (const Candidate& cand : plan.candidates)
          if (cand.rule->name == rule && cand.status == Candidate::Status::Chosen) return true;
        return false;
      };
      auto matched = [&](const std::string& rule) {
        for (const Candidate& cand : plan.candidates)
          if (cand.rule->name == rule) return true;
        return rw->fired.count(rule) > 0;
      };
      for (const std::string& rule : fires) {
        CHECK_MESSAGE(loaded.rules->find(rule), "no rule `" << rule << "` in the pack");
        CHECK_MESSAGE((rw->fired.count(rule) || chosen(rule)), "`" << rule << "` did not fire:\n" << out);
      }
      for (const std::string& rule : misses) {
        CHECK_MESSAGE(loaded.rules->find(rule), "no rule `" << rule << "` in the pack");
        CHECK_MESSAGE(!matched(rule), "`" << rule << "` matched its near-miss:\n" << out);
      }
      // Every node is in exactly one group.
      std::map<NodeRef, int> groupsOf;
      for (const Group& grp : plan.groups)
        for (NodeRef n : grp.nodes) ++groupsOf[n];
      CHECK(groupsOf.size() == g->numNodes());
      for (const auto& [n, count] : groupsOf) CHECK(count == 1);
      // The rewritten graph computes what the model did, on the
      // interpreter (a folded constant, a new weight, a cancelled op).
      if (std::optional<std::vector<Tensor>> inputs = sampleInputs(original)) {
        Expected<std::vector<Tensor>> want = runGraph(original, *inputs, &loaded.rules->catalog);
        REQUIRE_MESSAGE(want.ok(), test::why(want));
        Expected<std::vector<Tensor>> got = runGraph(g.value(), *inputs, &loaded.rules->catalog);
        REQUIRE_MESSAGE(got.ok(), test::why(got));
        REQUIRE(got->size() == want->size());
        for (size_t i = 0; i < got->size(); ++i) {
          OutputCheck verdict = checkOutput((*got)[i], (*want)[i], Tolerance{1e-5, 1e-4});
          CHECK_MESSAGE(verdict.ok, "output " << i << ": " << verdict.summary);
        }
      }
    }
  }
}

TEST_CASE("golden: every rule of the shipped packs fires on a plan case and has a near-miss") {
  // The packs of every shipped profile: the default ones and each vendor's.
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(grammar::defaultRulesDir()))
    if (e.path().extension() == ".toml" && e.path().stem().extension() != ".calibration") {
      Expected<Target> t = loadTarget(e.path().string());
      REQUIRE_MESSAGE(t.ok(), test::why(t));
      Expected<std::vector<std::string>> paths = grammar::defaultPackPaths(t.value());
      REQUIRE_MESSAGE(paths.ok(), test::why(paths));
      files.insert(files.end(), paths->begin(), paths->end());
    }
  std::unique_ptr<RuleSet> packs = test::loadPackFiles(files);
  std::set<std::string> fired, missed;
  for (const test::CheckCase& c : planCases()) {
    for (const std::string& r : annotated(c.input, "FIRES")) fired.insert(r);
    for (const std::string& r : annotated(c.input, "NEAR-MISS")) missed.insert(r);
  }
  CHECK(packs->rules.size() >= 20);
  for (const Rule& r : packs->rules) {
    INFO("rule " << r.name << " of pack " << r.pack);
    CHECK_MESSAGE(fired.count(r.name), "no `// FIRES: " << r.name << "` case in tests/golden/plans");
    CHECK_MESSAGE(missed.count(r.name), "no `// NEAR-MISS: " << r.name << "` case in tests/golden/plans");
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
