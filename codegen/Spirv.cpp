/// SPIR-V production and validation; see Spirv.h.
#include "fusec/codegen/Spirv.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <spirv-tools/libspirv.hpp>
#include <spirv-tools/optimizer.hpp>

namespace fusec::codegen {
namespace fs = std::filesystem;
namespace {

std::string readText(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Runs a command with its output captured to a file; returns the exit status.
int run(const std::string& cmd, const fs::path& log) { return std::system((cmd + " > '" + log.string() + "' 2>&1").c_str()); }

}  // namespace

Expected<SpirvModule> compileToSpirv(const std::string& source, const std::string& kernelName) {
  static int counter = 0;
  const fs::path dir = fs::temp_directory_path() / ("fusec-spirv-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::error_code ec;
  fs::create_directories(dir, ec);
  const fs::path cl = dir / "kernel.cl", bc = dir / "kernel.bc", spv = dir / "kernel.spv", log = dir / "log.txt";
  std::ofstream(cl) << source;
  const std::string clang = "clang-14 -cc1 -triple spir64 -cl-std=CL1.2 -finclude-default-header -O0 -emit-llvm-bc -o '" +
                            bc.string() + "' '" + cl.string() + "'";
  if (run(clang, log) != 0) {
    std::string msg = readText(log);
    fs::remove_all(dir, ec);
    return Error{"kernel `" + kernelName + "`: clang-14 cannot compile it to SPIR bitcode:\n" + msg};
  }
  if (run("llvm-spirv-14 --spirv-max-version=1.0 '" + bc.string() + "' -o '" + spv.string() + "'", log) != 0) {
    std::string msg = readText(log);
    fs::remove_all(dir, ec);
    return Error{"kernel `" + kernelName + "`: llvm-spirv-14 failed:\n" + msg};
  }
  const std::string bytes = readText(spv);
  fs::remove_all(dir, ec);
  SpirvModule m;
  m.words.resize(bytes.size() / 4);
  std::memcpy(m.words.data(), bytes.data(), m.words.size() * 4);
  spvtools::SpirvTools tools(SPV_ENV_OPENCL_1_2);
  std::string messages;
  tools.SetMessageConsumer([&](spv_message_level_t, const char*, const spv_position_t& pos, const char* msg) {
    messages += "word " + std::to_string(pos.index) + ": " + msg + "\n";
  });
  if (!tools.Validate(m.words)) return Error{"kernel `" + kernelName + "`: SPIR-V validation failed:\n" + messages};
  // Most of spirv-opt's passes are written for Shader modules and skip or
  // mis-handle Kernel ones (its CFG cleanup crashes on our reduction
  // kernels); stripping debug information and compacting ids are safe for
  // any module. The result is validated again.
  spvtools::Optimizer opt(SPV_ENV_OPENCL_1_2);
  opt.RegisterPass(spvtools::CreateStripDebugInfoPass()).RegisterPass(spvtools::CreateCompactIdsPass());
  std::vector<uint32_t> optimized;
  if (opt.Run(m.words.data(), m.words.size(), &optimized)) {
    if (!tools.Validate(optimized))
      return Error{"kernel `" + kernelName + "`: SPIR-V no longer validates after optimisation:\n" + messages};
    m.optimizedWords = optimized.size();
  }
  return m;
}

}  // namespace fusec::codegen
