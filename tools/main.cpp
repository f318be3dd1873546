/// fusec: the command-line driver. Each subcommand lives in its own file;
/// this table wires them to the argument parser.
#include <exception>
#include <filesystem>
#include <iostream>
#include <new>
#include <utility>
#include <vector>

#include "Commands.h"
#include "fusec/codegen/OpenCL.h"
#include "fusec/engine/Error.h"
#include "fusec/engine/Tensor.h"

int main(int argc, char** argv) {
  using namespace fusec::tools;
  CLI::App app{"fusec: a declarative operator-fusion compiler"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "fusec 0.1.0");

  struct Entry {
    const char* name;
    const char* help;
    CommandRunner (*add)(CLI::App&);
  };
  const Entry commands[] = {
      {"run", "run a model and print output shapes, checksums and time", addRunCommand},
      {"onnx-test", "run ONNX backend test case folders", addOnnxTestCommand},
      {"convert", "import a model and export it as .onnx or ONNX text", addConvertCommand},
      {"compile", "rewrite and plan fusion of a model; write the fused graph, plan and report", addCompileCommand},
      {"explain", "why a rule did or did not fire, and what the planner did", addExplainCommand},
      {"check", "parse and check rule packs", addCheckCommand},
      {"verify", "prove or test every rule of rule packs sound; print counterexamples", addVerifyCommand},
      {"fmt", "print .fuse files in canonical form", addFmtCommand},
      {"calibrate", "measure how close each kernel family comes to the target's roofs; write the calibration",
       addCalibrateCommand},
      {"cache", "where the kernel cache is and how large (info), or empty it (clear)", addCacheCommand},
  };
  std::vector<std::pair<CLI::App*, CommandRunner>> runners;
  for (const Entry& c : commands) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    runners.emplace_back(sub, c.add(*sub));
  }
  // Kernel builds spread over the cores: this program, run again as a
  // helper (hidden from --help), compiles its share into the kernel cache.
  CLI::App* helper = app.add_subcommand("build-kernels", "")->group("");
  runners.emplace_back(helper, addBuildKernelsCommand(*helper));
  std::error_code ec;
  if (const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec); !ec)
    fusec::codegen::Device::setBuildHelper({self.string(), "build-kernels"});
  if (fusec::Status st = fusec::checkLimitsInEnv(); !st) {
    std::cerr << "error: " << st.error().message << "\n";
    return 1;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 1;  // --help and --version exit 0; a bad flag is an error like any other
  }
  // One handler for what escapes a command: an error and exit 1, never an
  // abort. Input problems are Error values long before this; an exception
  // here is a limit (memory) or a bug, and says so.
  try {
    for (auto& [sub, run] : runners)
      if (sub->parsed()) return run();
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of memory (the input asks for more than this machine has)\n";
  } catch (const fusec::UserError& e) {
    std::cerr << "error: " << e.message << "\n";
  } catch (const std::exception& e) {
    std::cerr << "error: internal error: " << e.what() << "\n"
              << "  this is a bug in fusec; please report it with the input that caused it\n";
  } catch (...) {
    std::cerr << "error: internal error (an unknown exception)\n"
              << "  this is a bug in fusec; please report it with the input that caused it\n";
  }
  return 1;
}
