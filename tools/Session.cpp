/// Loading a model, packs and a target for the compiling commands.
#include "Session.h"

#include <fmt/format.h>
#include <iostream>

#include "fusec/driver/Session.h"
#include "fusec/engine/OnnxIO.h"
#include "fusec/engine/Planner.h"

namespace fusec::tools {

std::optional<Target> loadTargetOrDefault(const std::string& path) {
  Expected<Target> target = driver::loadTargetOrDefault(path);
  if (!target) {
    std::cerr << target.error().message << "\n";
    return std::nullopt;
  }
  return std::move(target.value());
}

void addPackOptions(CLI::App& sub, PackChoice& packs) {
  sub.add_option("--rules", packs.rules,
                 "rule packs, replacing the target's default packs: files, pack folders, or shipped packs by name "
                 "(`core/ops`, `cnn`)");
  sub.add_option("--add-rules", packs.added, "rule packs loaded after the default packs (or after --rules)");
}

std::unique_ptr<RuleSet> loadRules(const PackChoice& packs, const Target& target, std::vector<std::string>* loaded) {
  driver::LoadedPacks p = driver::loadPacks(packs.rules, target, packs.added);
  std::cerr << p.printed;
  if (!p.error.empty()) std::cerr << p.error << "\n";
  if (loaded) *loaded = p.files;
  if (!p.rules) return nullptr;
  if (Status st = checkGroupLimits(target, p.rules->catalog); !st) {
    std::cerr << st.error().message << "\n";
    return nullptr;
  }
  return std::move(p.rules);
}

std::unique_ptr<Session> openSession(const std::string& model, const PackChoice& packs, const std::string& targetPath) {
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
