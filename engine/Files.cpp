/// Bounded reads of user-named files; see Files.h.
#include "fusec/engine/Files.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>
#include <filesystem>
#include <cstdio>
#include <cstdlib>

namespace fusec {

Expected<std::string> readInputFile(const std::string& path, int64_t maxBytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return Error{path + ": cannot open file" + (errno == ENOENT ? std::string() : ": " + std::string(std::strerror(errno)))};
  if (S_ISDIR(st.st_mode)) return Error{path + ": is a folder, not a file"};
  if (!S_ISREG(st.st_mode)) return Error{path + ": not a regular file (a device, pipe or socket is not read)"};
  if (st.st_size > maxBytes)
    return Error{path + ": " + std::to_string(st.st_size) + " bytes, more than the " + std::to_string(maxBytes) +
                 " this kind of file may have"};
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{path + ": cannot open file"};
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (in.gcount() != static_cast<std::streamsize>(bytes.size())) return Error{path + ": cannot read the whole file"};
  return bytes;
}

namespace {

/// What the thing at `mode` is, in words, for a refusal.
const char* fileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a pipe";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

Status writeAll(int fd, std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Error{std::strerror(n < 0 ? errno : EIO)};
    done += static_cast<size_t>(n);
  }
  return Status::success();
}

}  // namespace

Status writeOutputFile(const std::string& path, std::string_view bytes) {
  if (path == "-") {
    std::fflush(stdout);
    if (Status st = writeAll(STDOUT_FILENO, bytes); !st) return Error{"standard output: " + st.error().message};
    return Status::success();
  }
  // Only a regular file, a link (replaced itself) or nothing is replaced:
  // renaming over a device, a pipe or a socket would swap it for a file
  // for every other user of that path.
  if (struct stat st {}; ::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
    return Error{path + ": " + fileKind(st.st_mode) + ", not a regular file: fusec writes only regular files (`-` is standard output)"};
  const std::filesystem::path target(path);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  std::string temp = (dir / ("." + target.filename().string() + ".XXXXXX")).string();
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) return Error{path + ": cannot write file: " + std::string(std::strerror(errno))};
  const Status written = writeAll(fd, bytes);
  if (::close(fd) != 0 || !written) {
    const std::string why = written ? std::strerror(errno) : written.error().message;
    ::unlink(temp.c_str());
    return Error{path + ": cannot write file: " + why};
  }
  ::chmod(temp.c_str(), 0644);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(temp.c_str());
    return Error{path + ": cannot write file: " + std::string(std::strerror(e))};
  }
  return Status::success();
}

}  // namespace fusec
