/// runIsolated: fork, let the child compute and write its answer into a
/// pipe, read it back with a deadline, then reap the child.
#include "fusec/engine/Isolated.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <chrono>
#include <cstring>

namespace fusec {

namespace {

/// The first byte of the child's answer: how to read the rest.
constexpr char kAnswer = 'A';  ///< the rest is the result
constexpr char kThrew = 'E';   ///< the rest is an error message

bool writeAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

[[noreturn]] void childMain(int fd, const std::function<std::string()>& work) {
  // A crash here is the answer, not something to report: the caller's
  // handlers (a sanitizer's, a fuzzer's) do not run in the child.
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP}) ::signal(sig, SIG_DFL);
  std::string answer;
  try {
    answer = kAnswer + work();
  } catch (const UserError& e) {
    answer = kThrew + e.message;
  } catch (const std::exception& e) {
    answer = kThrew + std::string(e.what());
  } catch (...) {
    answer = std::string(1, kThrew) + "an unknown exception";
  }
  const bool ok = writeAll(fd, answer.data(), answer.size());
  ::close(fd);
  ::_exit(ok ? 0 : 3);  // no atexit handlers, no flushing the parent's buffers
}

std::string describeStatus(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = ::strsignal(sig);
    return "crashed (signal " + std::to_string(sig) + (name ? std::string(", ") + name : std::string()) + ")";
  }
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  return "stopped";
}

/// The resident memory of process `pid` in bytes (0 when it cannot be read).
int64_t residentBytes(pid_t pid) {
  std::ifstream statm("/proc/" + std::to_string(pid) + "/statm");
  int64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace

Expected<std::string> runIsolated(const std::string& what, const std::function<std::string()>& work,
                                  const IsolationLimits& limits) {
  int fds[2];
  if (::pipe(fds) != 0) return Error{what + ": cannot create a pipe: " + std::strerror(errno)};
  // The child starts with the caller's pages (a model being imported): its
  // limit is on what it adds.
  const int64_t memoryLimit = residentBytes(::getpid()) + limits.maxMemoryBytes;
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return Error{what + ": cannot start a child process: " + std::strerror(err)};
  }
  if (pid == 0) {
    ::close(fds[0]);
    childMain(fds[1], work);
  }
  ::close(fds[1]);

  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(limits.timeoutSeconds);
  std::string answer;
  std::string problem;
  char buffer[1 << 16];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      problem = "ran longer than " + std::to_string(limits.timeoutSeconds) + " s";
      break;
    }
    if (residentBytes(pid) > memoryLimit) {
      problem = "used more than " + std::to_string(limits.maxMemoryBytes >> 20) + " MiB of memory";
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 50)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) {
      problem = std::string("cannot wait for its answer: ") + std::strerror(errno);
      break;
    }
    if (ready == 0) continue;
    const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the child closed its end: done or dead
    if (static_cast<int64_t>(answer.size()) + n > limits.maxResultBytes + 1) {
      problem = "answered more than " + std::to_string(limits.maxResultBytes) + " bytes";
      break;
    }
    answer.append(buffer, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  if (!problem.empty()) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!problem.empty()) return Error{what + " " + problem};
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || answer.empty())
    return Error{what + " " + describeStatus(status)};
  if (answer[0] == kThrew) return Error{what + ": " + answer.substr(1)};
  answer.erase(0, 1);
  return answer;
}

}  // namespace fusec
