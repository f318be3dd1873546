/// `fusec explain`: for each place a rule could start, the pattern step or
/// guard that failed (with the rule's source location), or, where it
/// matched, what the planner did with it and why; then the nearest misses.
/// Rewrite rules are explained on the imported graph; fusion rules on the
/// graph after the rewrite stage, where the planner sees them.
#pragma once

#include <string>

#include "fusec/driver/Pipeline.h"

namespace fusec::driver {

/// The explanation as text, or an error (no such rule, no such node, a
/// failed compile). `nodeName` empty: every node the rule can start at.
Expected<std::string> explainRule(Graph model, const RuleSet& rules, const Target& target, const std::string& ruleName,
                                  const std::string& nodeName);

}  // namespace fusec::driver
