/// The `fusec` subcommands. Each `add...` registers its options on the given
/// subcommand and returns the function that runs it (returning the exit
/// status: 0 success, 1 user error or failed check).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

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
CommandRunner addVerifyCommand(CLI::App& sub);
CommandRunner addCalibrateCommand(CLI::App& sub);
CommandRunner addCacheCommand(CLI::App& sub);
CommandRunner addBuildKernelsCommand(CLI::App& sub);

/// What `fusec verify` takes; `fusec check --verify` takes the same.
struct VerifyFlags {
  uint64_t seed = 1;
  int instances = 40;
  int fusionInstances = 6;
  std::vector<std::string> rules;
  std::string target;
  std::string device;
  bool noDevice = false;
  bool noProve = false;
  std::string save;
  Tolerance tolerance{1e-6, 1e-5};
};
void addVerifyOptions(CLI::App& sub, VerifyFlags& flags);
/// Whether `--atol` or `--rtol` was given on `sub`.
bool toleranceGiven(const CLI::App& sub);
/// Loads the packs and verifies their rules; returns the exit status.
int runVerify(const std::vector<std::string>& packs, const std::vector<std::string>& searchPaths,
              const VerifyFlags& flags, bool toleranceGiven);

/// `--atol` and `--rtol`, shared by the commands that check outputs.
inline void addToleranceOptions(CLI::App& sub, Tolerance& tol) {
  sub.add_option("--atol", tol.atol, "absolute tolerance of output checks")->capture_default_str();
  sub.add_option("--rtol", tol.rtol, "tolerance relative to each output's largest magnitude: an output matches when "
                                     "|got - want| <= atol + rtol * max|want|")->capture_default_str();
}

}  // namespace fusec::tools
