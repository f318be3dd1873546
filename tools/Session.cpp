/// Loading a model, packs and a target for compile and explain.
#include "Session.h"

#include <iostream>

#include "fusec/engine/OnnxIO.h"
#include "fusec/grammar/PackLoader.h"

namespace fusec::tools {

std::unique_ptr<Session> openSession(const std::string& model, const std::vector<std::string>& packs,
                                     const std::string& targetPath) {
  auto s = std::make_unique<Session>();
  const std::string rulesDir = grammar::defaultRulesDir();
  Expected<Target> target = loadTarget(targetPath.empty() ? rulesDir + "/targets/pocl-cpu.toml" : targetPath);
  if (!target) {
    std::cerr << target.error().message << "\n";
    return nullptr;
  }
  s->target = std::move(target.value());
  s->packs = packs;
  if (s->packs.empty())
    for (const std::string& p : s->target.defaultPacks) s->packs.push_back(rulesDir + "/" + p + ".fuse");
  grammar::SourceManager sources;
  grammar::DiagnosticEngine diags(sources);
  grammar::ast::AstContext context;
  s->rules = grammar::loadPacks(s->packs, sources, context, diags).rules;
  diags.print(std::cerr);
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
