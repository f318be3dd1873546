/// Loading targets and packs; see Session.h.
#include "fusec/driver/Session.h"

#include <sstream>

#include "fusec/codegen/Families.h"
#include "fusec/engine/Files.h"
#include "fusec/grammar/PackLoader.h"

namespace fusec::driver {
namespace {

void flatten(const grammar::DiagnosticEngine& diags, const grammar::Diagnostic& d, std::vector<PackDiagnostic>& out) {
  PackDiagnostic p;
  p.severity = grammar::severityName(d.severity);
  p.file = diags.path(d);
  p.line = d.range.line;
  p.column = d.range.col;
  p.message = d.message;
  p.sourceLine = std::string(diags.sourceLine(d));
  p.caret = diags.caret(d);
  out.push_back(std::move(p));
  for (const grammar::Diagnostic& n : d.notes) flatten(diags, n, out);
}

/// Runs `load` with fresh sources and diagnostics and keeps what it said.
template <class Load>
LoadedPacks collect(Load load) {
  grammar::SourceManager sources;
  grammar::DiagnosticEngine diags(sources);
  grammar::ast::AstContext context;
  grammar::PackLoadOptions options;
  options.families = &codegen::kernelFamilies();
  LoadedPacks out;
  out.rules = load(sources, context, diags, options).rules;
  for (const grammar::Diagnostic& d : diags.diagnostics()) flatten(diags, d, out.diagnostics);
  std::ostringstream printed;
  diags.print(printed);
  out.printed = printed.str();
  return out;
}

}  // namespace

Expected<Target> loadTargetOrDefault(const std::string& path) {
  return loadTarget(path.empty() ? grammar::defaultRulesDir() + "/targets/pocl-cpu.toml" : path);
}

LoadedPacks loadPacks(const std::vector<std::string>& files, const Target& target, const std::vector<std::string>& added) {
  std::vector<std::string> paths = files;
  if (paths.empty()) {
    Expected<std::vector<std::string>> defaults = grammar::defaultPackPaths(target);
    if (!defaults) {
      LoadedPacks out;
      out.error = defaults.error().message;
      return out;
    }
    paths = std::move(defaults.value());
  }
  paths.insert(paths.end(), added.begin(), added.end());
  LoadedPacks out = collect([&](auto& sources, auto& context, auto& diags, const auto& options) {
    return grammar::loadPacks(paths, sources, context, diags, options);
  });
  out.files = std::move(paths);
  return out;
}

LoadedPacks loadPackText(const std::string& name, const std::string& text) {
  // The same cap as a pack file's (Files.h): a string is no way around it.
  if (text.size() > static_cast<size_t>(kMaxPackFileBytes)) {
    LoadedPacks out;
    out.error = name + ": " + std::to_string(text.size()) + " bytes, more than the " +
                std::to_string(kMaxPackFileBytes) + " a pack may have";
    out.files = {name};
    return out;
  }
  LoadedPacks out = collect([&](auto& sources, auto& context, auto& diags, const auto& options) {
    return grammar::loadPackText(name, text, sources, context, diags, options);
  });
  out.files = {name};
  return out;
}

}  // namespace fusec::driver
