/// Helpers shared by the unit tests: build graphs from ONNX text, run them,
/// and make small tensors.
#pragma once

#include <cmath>

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <memory>
#include <sstream>

#include "fusec/codegen/Families.h"
#include "fusec/engine/Interpreter.h"
#include "fusec/engine/OnnxIO.h"
#include "fusec/grammar/PackLoader.h"

namespace fusec::test {

/// Imports ONNX text; fails the test with the importer's message on error.
inline Graph parse(const std::string& text, const ImportOptions& options = {}) {
  Expected<Graph> g = importOnnxBuffer(text, "<test>", options);
  if (!g) FAIL(g.error().message);
  return std::move(g.value());
}

/// A one-graph model around a node list; `signature` declares inputs and outputs.
/// `extraImports` adds opset imports, e.g. `, "vendor" : 1`.
/// The error message of a failed Expected/Status, empty on success: for
/// REQUIRE_MESSAGE(x.ok(), why(x)), whose message doctest also formats
/// for passing assertions (with -s).
template <class E>
std::string why(const E& e) {
  return e.ok() ? std::string() : e.error().message;
}

inline std::string model(const std::string& signature, const std::string& body, int opset = 17,
                         const std::string& extraImports = "") {
  return "<ir_version: 8, opset_import: [\"\" : " + std::to_string(opset) + extraImports + "]>\n" +
         signature + " {\n" + body + "\n}\n";
}

inline Tensor floats(Shape shape, std::vector<float> v) { return Tensor::fromVector<float>(std::move(shape), v); }
inline Tensor ints(Shape shape, std::vector<int64_t> v) { return Tensor::fromVector<int64_t>(std::move(shape), v); }

/// Loads pack files or folders (with the code generator's families);
/// fails the test with the diagnostics on an error.
inline std::unique_ptr<RuleSet> loadPackFiles(const std::vector<std::string>& paths) {
  grammar::SourceManager sources;
  grammar::DiagnosticEngine diags(sources);
  grammar::ast::AstContext context;
  grammar::PackLoadOptions options;
  options.families = &codegen::kernelFamilies();
  auto result = grammar::loadPacks(paths, sources, context, diags, options);
  std::ostringstream err;
  diags.print(err);
  REQUIRE_MESSAGE(result.rules, err.str());
  return std::move(result.rules);
}

/// Loads a shipped pack by its path under rules/ (`core/ops.fuse`, `cnn`).
inline std::unique_ptr<RuleSet> loadShippedPack(const std::string& relative) {
  return loadPackFiles({grammar::defaultRulesDir() + "/" + relative});
}

/// `t` with its calibration dropped: the bare roofline, whose numbers the
/// cost-model tests and plan goldens are written against (a calibration
/// is one machine's measurement, and changes when it is measured again).
inline Target uncalibrated(Target t) {
  t.roofFractions.clear();
  t.startupSeconds.clear();
  t.calibrationPath.clear();
  return t;
}

/// The packs a shipped profile (a path under rules/) loads by default: what
/// `fusec compile --target` uses without --rules.
inline std::unique_ptr<RuleSet> loadDefaultPacks(const std::string& profile = "targets/pocl-cpu.toml") {
  Expected<Target> target = loadTarget(grammar::defaultRulesDir() + "/" + profile);
  REQUIRE(target.ok());
  Expected<std::vector<std::string>> paths = grammar::defaultPackPaths(target.value());
  REQUIRE_MESSAGE(paths.ok(), test::why(paths));
  return loadPackFiles(paths.value());
}

/// The shipped op catalog (rules/core/ops.fuse), loaded once: the
/// interpreter runs elementwise ops from its semantics.
inline const OpCatalog& coreCatalog() {
  static const std::unique_ptr<RuleSet> ops = loadShippedPack("core/ops.fuse");
  return ops->catalog;
}

/// Runs a graph; fails the test on error.
inline std::vector<Tensor> run(const Graph& g, const std::vector<Tensor>& inputs) {
  Expected<std::vector<Tensor>> out = runGraph(g, inputs, &coreCatalog());
  if (!out) FAIL(out.error().message);
  return std::move(out.value());
}

/// Runs a graph expecting an error, returning its message.
inline std::string runError(const Graph& g, const std::vector<Tensor>& inputs) {
  Expected<std::vector<Tensor>> out = runGraph(g, inputs, &coreCatalog());
  REQUIRE_FALSE(out.ok());
  return out.error().message;
}

inline void checkClose(const Tensor& got, const Tensor& want, float tol = 1e-5f) {
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(shapeToString(got.shape()) == shapeToString(want.shape()));
  for (int64_t i = 0; i < want.numel(); ++i) {
    INFO("element " << i);
    const double g = got.scalarAt(i), w = want.scalarAt(i);
    if (std::isnan(w) || std::isinf(w))  // NaN where NaN is due, the same infinity
      CHECK((std::isnan(w) ? std::isnan(g) : g == w));
    else
      CHECK(g == doctest::Approx(w).epsilon(tol));
  }
}

/// Compiles rules written against the core op catalog (`import "core/ops"`
/// is added); fails the test with the diagnostics on error.
inline std::unique_ptr<RuleSet> compileRules(const std::string& text) {
  grammar::SourceManager sources;
  grammar::DiagnosticEngine diags(sources);
  grammar::ast::AstContext context;
  auto result = grammar::loadPackText("test.fuse", "import \"core/ops\"\n" + text, sources, context, diags);
  std::ostringstream err;
  diags.print(err);
  REQUIRE_MESSAGE(result.rules, err.str());
  return std::move(result.rules);
}

}  // namespace fusec::test
