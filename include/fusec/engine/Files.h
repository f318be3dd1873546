/// Reading the files a user names (models, packs, tensors, target profiles),
/// which may come from anyone: only regular files, never more than a stated
/// size, read whole or not at all.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "fusec/engine/Error.h"

namespace fusec {

/// Size limits for what fusec reads.
inline constexpr int64_t kMaxModelFileBytes = int64_t{2} << 30;   ///< protobuf's own limit
inline constexpr int64_t kMaxPackFileBytes = int64_t{16} << 20;   ///< a .fuse pack
inline constexpr int64_t kMaxProfileFileBytes = int64_t{1} << 20; ///< a target profile

/// A regular file (or a link to one) open for reading, for readers that
/// take it in pieces (a model's protobuf parsed as it is read, with no copy
/// of the whole file first). Closed when destroyed.
class InputFile {
 public:
  /// `path` if it is a regular file of at most `maxBytes` bytes; otherwise
  /// an error naming the path and the reason.
  static Expected<InputFile> open(const std::string& path, int64_t maxBytes);
  InputFile(InputFile&& other) noexcept : fd_(other.fd_), size_(other.size_), path_(std::move(other.path_)) { other.fd_ = -1; }
  InputFile& operator=(InputFile&&) = delete;
  ~InputFile();

  /// Its size when opened: readers never read past it, even if it grows.
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  /// Up to `length` bytes at `offset` into `buffer` (fewer at the end of
  /// the file, 0 past it); -1 on a read error.
  int64_t readSome(void* buffer, int64_t length, int64_t offset) const;
  /// `length` bytes at `offset`, or an error when the file has fewer.
  Expected<std::string> read(int64_t offset, int64_t length) const;

 private:
  InputFile(int fd, int64_t size, std::string path) : fd_(fd), size_(size), path_(std::move(path)) {}
  int fd_ = -1;
  int64_t size_ = 0;
  std::string path_;
};

/// The contents of `path`, a regular file (or a link to one) of at most
/// `maxBytes` bytes; otherwise an error naming the path and the reason.
Expected<std::string> readInputFile(const std::string& path, int64_t maxBytes);

/// `length` bytes at `offset` of `path`, a regular file, read without
/// reading the rest (external weights: a few bytes of a large file cost a
/// few bytes); an error when the range runs past the file's end.
Expected<std::string> readInputFileRange(const std::string& path, int64_t offset, int64_t length);

/// Writes `bytes` to `path` whole or not at all: into a new temporary file
/// in the same folder, then renamed over `path`. A link at `path` is
/// replaced, never followed; a reader never sees half a file. Only a
/// regular file, a link or a missing path is replaced: a device, pipe,
/// socket or folder at `path` is refused with an error. `-` is standard
/// output.
Status writeOutputFile(const std::string& path, std::string_view bytes);

}  // namespace fusec
