/// Bounded reads of user-named files; see Files.h.
#include "fusec/engine/Files.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>
#include <filesystem>
#include <cstdio>
#include <cstdlib>

namespace fusec {

namespace {

/// `path` opened for reading if it is a regular file (checked on the open
/// file, so nothing can be swapped in between; a FIFO does not block the
/// open), with its size; an error naming the path otherwise.
Expected<std::pair<int, int64_t>> openRegular(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return Error{path + ": cannot open file" + (errno == ENOENT ? std::string() : ": " + std::string(std::strerror(errno)))};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool dir = S_ISDIR(st.st_mode);
    ::close(fd);
    if (dir) return Error{path + ": is a folder, not a file"};
    return Error{path + ": not a regular file (a device, pipe or socket is not read)"};
  }
  return std::pair{fd, static_cast<int64_t>(st.st_size)};
}

/// `length` bytes at `offset` of the open file `fd`, or an error.
Expected<std::string> readAt(int fd, const std::string& path, int64_t offset, int64_t length) {
  std::string bytes(static_cast<size_t>(length), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + static_cast<int64_t>(done)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Error{path + ": cannot read the whole file"};
    done += static_cast<size_t>(n);
  }
  return bytes;
}

}  // namespace

Expected<std::string> readInputFile(const std::string& path, int64_t maxBytes) {
  Expected<std::pair<int, int64_t>> opened = openRegular(path);
  if (!opened) return opened.error();
  const auto [fd, size] = opened.value();
  if (size > maxBytes) {
    ::close(fd);
    return Error{path + ": " + std::to_string(size) + " bytes, more than the " + std::to_string(maxBytes) +
                 " this kind of file may have"};
  }
  Expected<std::string> bytes = readAt(fd, path, 0, size);
  ::close(fd);
  return bytes;
}

Expected<std::string> readInputFileRange(const std::string& path, int64_t offset, int64_t length) {
  Expected<std::pair<int, int64_t>> opened = openRegular(path);
  if (!opened) return opened.error();
  const auto [fd, size] = opened.value();
  int64_t end = 0;
  if (offset < 0 || length < 0 || __builtin_add_overflow(offset, length, &end) || end > size) {
    ::close(fd);
    return Error{path + ": " + std::to_string(length) + " bytes at offset " + std::to_string(offset) +
                 " run past the end of the file (" + std::to_string(size) + " bytes)"};
  }
  Expected<std::string> bytes = readAt(fd, path, offset, length);
  ::close(fd);
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
