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
