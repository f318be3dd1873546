/// The `fusec` subcommands. Each `add...` registers its options on the given
/// subcommand and returns the function that runs it (returning the exit
/// status: 0 success, 1 user error or failed check).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace fusec::tools {

using CommandRunner = std::function<int()>;

CommandRunner addRunCommand(CLI::App& sub);
CommandRunner addOnnxTestCommand(CLI::App& sub);
CommandRunner addConvertCommand(CLI::App& sub);
CommandRunner addFmtCommand(CLI::App& sub);
CommandRunner addCheckCommand(CLI::App& sub);
CommandRunner addCompileCommand(CLI::App& sub);
CommandRunner addExplainCommand(CLI::App& sub);

}  // namespace fusec::tools
