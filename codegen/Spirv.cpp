/// SPIR-V production and validation; see Spirv.h.
#include "fusec/codegen/Spirv.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <spawn.h>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

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

/// A private folder for the external tools' files (mkdtemp: mode 0700, a
/// name nobody can predict or plant links in), removed with everything in it.
class PrivateDir {
 public:
  PrivateDir() {
    std::string pattern = (fs::temp_directory_path() / "fusec-spirv-XXXXXX").string();
    if (::mkdtemp(pattern.data())) path_ = pattern;
  }
  ~PrivateDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  PrivateDir(const PrivateDir&) = delete;
  PrivateDir& operator=(const PrivateDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

/// Runs `argv` (no shell: the program is found on PATH and given its
/// arguments as they are) with stdout and stderr going to `log`, a new file.
/// Returns the exit status, or -1 when it could not start or was killed.
int run(const std::vector<std::string>& argv, const fs::path& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int started = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (started != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

Expected<SpirvModule> compileToSpirv(const std::string& source, const std::string& kernelName) {
  const PrivateDir dir;
  if (dir.path().empty()) return Error{"cannot create a private temporary folder: " + std::string(std::strerror(errno))};
  const fs::path cl = dir.path() / "kernel.cl", bc = dir.path() / "kernel.bc", spv = dir.path() / "kernel.spv",
                 log = dir.path() / "log.txt";
  {
    std::ofstream out(cl, std::ios::binary);
    out << source;
    if (!out) return Error{"cannot write " + cl.string()};
  }
  if (run({"clang-14", "-cc1", "-triple", "spir64", "-cl-std=CL1.2", "-finclude-default-header", "-O0",
           "-emit-llvm-bc", "-o", bc.string(), cl.string()},
          log) != 0)
    return Error{"kernel `" + kernelName + "`: clang-14 cannot compile it to SPIR bitcode:\n" + readText(log)};
  if (run({"llvm-spirv-14", "--spirv-max-version=1.0", bc.string(), "-o", spv.string()}, log) != 0)
    return Error{"kernel `" + kernelName + "`: llvm-spirv-14 failed:\n" + readText(log)};
  const std::string bytes = readText(spv);
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
