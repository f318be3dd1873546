/// Bounded reads of user-named files; see Files.h.
#include "fusec/engine/Files.h"

#include <algorithm>
#include <cerrno>
#include <limits>
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

}  // namespace

Expected<InputFile> InputFile::open(const std::string& path, int64_t maxBytes) {
  Expected<std::pair<int, int64_t>> opened = openRegular(path);
  if (!opened) return opened.error();
  InputFile file(opened->first, opened->second, path);
  if (file.size_ > maxBytes)
    return Error{path + ": " + std::to_string(file.size_) + " bytes, more than the " + std::to_string(maxBytes) +
                 " this kind of file may have"};
  return file;
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

int64_t InputFile::readSome(void* buffer, int64_t length, int64_t offset) const {
  if (offset < 0 || length < 0) return -1;
  if (offset >= size_) return 0;
  const auto want = static_cast<size_t>(std::min(length, size_ - offset));
  ssize_t n = 0;
  do n = ::pread(fd_, buffer, want, static_cast<off_t>(offset));
  while (n < 0 && errno == EINTR);
  return n;
}

Expected<std::string> InputFile::read(int64_t offset, int64_t length) const {
  int64_t end = 0;
  if (offset < 0 || length < 0 || __builtin_add_overflow(offset, length, &end) || end > size_)
    return Error{path_ + ": " + std::to_string(length) + " bytes at offset " + std::to_string(offset) +
                 " run past the end of the file (" + std::to_string(size_) + " bytes)"};
  std::string bytes(static_cast<size_t>(length), '\0');
  for (int64_t done = 0; done < length;) {
    const int64_t n = readSome(bytes.data() + done, length - done, offset + done);
    if (n <= 0) return Error{path_ + ": cannot read the whole file"};
    done += n;
  }
  return bytes;
}

Expected<std::string> readInputFile(const std::string& path, int64_t maxBytes) {
  Expected<InputFile> file = InputFile::open(path, maxBytes);
  if (!file) return file.error();
  return file->read(0, file->size());
}

Expected<std::string> readInputFileRange(const std::string& path, int64_t offset, int64_t length) {
  Expected<InputFile> file = InputFile::open(path, std::numeric_limits<int64_t>::max());
  if (!file) return file.error();
  return file->read(offset, length);
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
