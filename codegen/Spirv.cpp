/// SPIR-V production and validation; see Spirv.h.
#include "fusec/codegen/Spirv.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include <spirv-tools/libspirv.hpp>
#include <spirv-tools/optimizer.hpp>

#include "fusec/engine/Process.h"

namespace fusec::codegen {
namespace fs = std::filesystem;

Expected<SpirvModule> compileToSpirv(const std::string& source, const std::string& kernelName) {
  const PrivateDir dir("fusec-spirv");
  if (dir.path().empty()) return Error{"cannot create a private temporary folder: " + std::string(std::strerror(errno))};
  const fs::path cl = dir.path() / "kernel.cl", bc = dir.path() / "kernel.bc", spv = dir.path() / "kernel.spv",
                 log = dir.path() / "log.txt";
  {
    std::ofstream out(cl, std::ios::binary);
    out << source;
    if (!out) return Error{"cannot write " + cl.string()};
  }
  if (runProgram({"clang-14", "-cc1", "-triple", "spir64", "-cl-std=CL1.2", "-finclude-default-header", "-O0",
           "-emit-llvm-bc", "-o", bc.string(), cl.string()},
          log) != 0)
    return Error{"kernel `" + kernelName + "`: clang-14 cannot compile it to SPIR bitcode:\n" + readWholeFile(log)};
  if (runProgram({"llvm-spirv-14", "--spirv-max-version=1.0", bc.string(), "-o", spv.string()}, log) != 0)
    return Error{"kernel `" + kernelName + "`: llvm-spirv-14 failed:\n" + readWholeFile(log)};
  const std::string bytes = readWholeFile(spv);
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
