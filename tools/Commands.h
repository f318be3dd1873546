/// The `fusec` subcommands. Each `add...` registers its options on the given
/// subcommand and returns the function that runs it (returning the exit
/// status: 0 success, 1 user error or failed check).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "fusec/engine/Tolerance.h"

namespace fusec::tools {

using CommandRunner = std::function<int()>;

CommandRunner addRunCommand(CLI::App& sub);
CommandRunner addOnnxTestCommand(CLI::App& sub);
CommandRunner addConvertCommand(CLI::App& sub);
CommandRunner addFmtCommand(CLI::App& sub);
CommandRunner addCheckCommand(CLI::App& sub);
CommandRunner addCompileCommand(CLI::App& sub);
CommandRunner addExplainCommand(CLI::App& sub);

/// `--atol` and `--rtol`, shared by the commands that check outputs.
inline void addToleranceOptions(CLI::App& sub, Tolerance& tol) {
  sub.add_option("--atol", tol.atol, "absolute tolerance of output checks")->capture_default_str();
  sub.add_option("--rtol", tol.rtol, "tolerance relative to each output's largest magnitude: an output matches when "
                                     "|got - want| <= atol + rtol * max|want|")->capture_default_str();
}

}  // namespace fusec::tools
