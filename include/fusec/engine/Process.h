/// Running the external tools fusec uses (clang-14, llvm-spirv-14, Graphviz's
/// dot) safely: from an argument vector, never through a shell, in a private
/// temporary folder, with a time limit.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace fusec {

/// A private folder for an external tool's files (mkdtemp: mode 0700, a name
/// nobody can predict or plant links in), removed with everything in it.
/// `path()` is empty when it could not be made.
class PrivateDir {
 public:
  explicit PrivateDir(const std::string& prefix = "fusec");
  ~PrivateDir();
  PrivateDir(const PrivateDir&) = delete;
  PrivateDir& operator=(const PrivateDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

/// Runs `argv` (the program found on PATH and given its arguments as they
/// are) with stdout and stderr going to `log`, a new file. Returns the exit
/// status; -1 when it could not start, was killed, or ran past
/// `timeoutSeconds` (then it is killed; 0: no limit).
int runProgram(const std::vector<std::string>& argv, const std::filesystem::path& log, double timeoutSeconds = 0);

/// The whole file as bytes (empty when unreadable).
std::string readWholeFile(const std::filesystem::path& path);

}  // namespace fusec
