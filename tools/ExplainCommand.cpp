/// `fusec explain MODEL --rule NAME [--node NAME]`: for each place the rule
/// could start, the pattern step or guard that failed (with the rule's source
/// location), or, where it matched, what the planner did with it and why.
/// Rewrite rules are explained on the imported graph; fusion rules on the
/// graph after the rewrite stage, where the planner sees them.
#include <iostream>

#include "Commands.h"
#include "Session.h"
#include "fusec/driver/Explain.h"

namespace fusec::tools {
namespace {

struct ExplainOptions {
  std::string model, target, rule, node;
  PackChoice packs;
};

int explain(const ExplainOptions& o) {
  std::unique_ptr<Session> s = openSession(o.model, o.packs, o.target);
  if (!s) return 1;
  Expected<std::string> text = driver::explainRule(std::move(s->graph), *s->rules, s->target, o.rule, o.node);
  if (!text) {
    std::cerr << "error: " << text.error().message << "\n";
    return 1;
  }
  std::cout << text.value();
  return 0;
}

}  // namespace

CommandRunner addExplainCommand(CLI::App& sub) {
  auto o = std::make_shared<ExplainOptions>();
  sub.add_option("model", o->model, "model file (.onnx or ONNX text)")->required();
  sub.add_option("--rule", o->rule, "the rule to explain")->required();
  sub.add_option("--node", o->node, "only this node (by name)");
  addPackOptions(sub, o->packs);
  sub.add_option("--target", o->target, "target profile (.toml)");
  return [o] { return explain(*o); };
}

}  // namespace fusec::tools
