/// Loading a model, packs and a target for the compiling commands.
#include "Session.h"

#include <fmt/format.h>
#include <iostream>

#include "fusec/codegen/Families.h"
#include "fusec/engine/OnnxIO.h"
#include "fusec/engine/Planner.h"
#include "fusec/engine/Rewriter.h"
#include "fusec/grammar/PackLoader.h"

namespace fusec::tools {

std::optional<Target> loadTargetOrDefault(const std::string& path) {
  Expected<Target> target = loadTarget(path.empty() ? grammar::defaultRulesDir() + "/targets/pocl-cpu.toml" : path);
  if (!target) {
    std::cerr << target.error().message << "\n";
    return std::nullopt;
  }
  return std::move(target.value());
}

std::unique_ptr<RuleSet> loadRules(const std::vector<std::string>& packs, const Target& target,
                                   std::vector<std::string>* loaded) {
  std::vector<std::string> files = packs;
  if (files.empty()) {
    Expected<std::vector<std::string>> defaults = grammar::defaultPackPaths(target);
    if (!defaults) {
      std::cerr << defaults.error().message << "\n";
      return nullptr;
    }
    files = std::move(defaults.value());
  }
  if (loaded) *loaded = files;
  grammar::SourceManager sources;
  grammar::DiagnosticEngine diags(sources);
  grammar::ast::AstContext context;
  grammar::PackLoadOptions options;
  options.families = &codegen::kernelFamilies();
  std::unique_ptr<RuleSet> rules = grammar::loadPacks(files, sources, context, diags, options).rules;
  diags.print(std::cerr);
  if (!rules) return rules;
  if (Status st = checkGroupLimits(target, rules->catalog); !st) {
    std::cerr << st.error().message << "\n";
    return nullptr;
  }
  return rules;
}

std::unique_ptr<Session> openSession(const std::string& model, const std::vector<std::string>& packs,
                                     const std::string& targetPath) {
  auto s = std::make_unique<Session>();
  std::optional<Target> target = loadTargetOrDefault(targetPath);
  if (!target) return nullptr;
  s->target = std::move(*target);
  s->rules = loadRules(packs, s->target, &s->packs);
  if (!s->rules) return nullptr;
  Expected<Graph> g = importOnnxFile(model);
  if (!g) {
    std::cerr << "error: " << g.error().message << "\n";
    return nullptr;
  }
  s->graph = std::move(g.value());
  return s;
}


}  // namespace fusec::tools
