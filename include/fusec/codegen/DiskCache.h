/// The per-user on-disk cache of device binaries and tuning results, built
/// so that no other local user can plant an entry in it.
///
/// Where: $FUSEC_CACHE_DIR, else $XDG_CACHE_HOME/fusec/kernels, else
/// ~/.cache/fusec/kernels; never a shared, predictable path, and no folder
/// is made outside a home that exists. Before first use the folder is
/// created 0700 where missing and checked: it and its subfolders belong to
/// this user and nobody else can write them, and every folder above it is
/// this user's or root's and writable by others only when sticky (/tmp).
/// A folder that fails is not used: the process runs without a cache and
/// says why once on stderr.
///
/// How much: at most FUSEC_CACHE_MAX_BYTES of entries (default 2 GiB);
/// past it the least recently used entries go (a read marks an entry used),
/// checked on the first write of a process and after every eighth of the
/// cap written. Processes share the folder safely: entries are written
/// whole under a temporary name and renamed into place, and a reader keeps
/// what it opened if another process evicts it.
///
/// What: every entry carries an HMAC-SHA256 of its name and payload under
/// a random 32-byte key kept in the folder (mode 0600, this user's): an
/// entry that someone else wrote, copied from another key, truncated or
/// altered reads as absent and is rebuilt.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fusec/engine/Error.h"

namespace fusec::codegen {

class DiskCache {
 public:
  /// This process's cache, opened and checked on first use.
  static const DiskCache& user();

  /// Opens the cache in `folder` (tests); a disabled cache with the reason
  /// when the folder fails the checks.
  static DiskCache open(const std::string& folder);

  bool enabled() const { return !key_.empty(); }
  /// Why the cache is off (empty when it is on).
  const std::string& disabledBecause() const { return why_; }
  const std::string& folder() const { return folder_; }

  /// The payload of entry `name` (a relative path such as `ab12.bin` or
  /// `tuning/cd34.txt`) when it is whole and was written with this cache's
  /// key for `name`.
  std::optional<std::string> get(const std::string& name) const;
  /// Stores `payload` as entry `name`; a cache that cannot be written is
  /// no cache, so failures are silent.
  void put(const std::string& name, std::string_view payload) const;

  struct Usage {
    uint64_t entries = 0, bytes = 0;  ///< fusec's entries (binaries, tuning, split-back verdicts)
    uint64_t runtimeBytes = 0;        ///< the OpenCL runtime's own cache kept here (pocl/)
  };
  Usage usage() const;
  /// Removes every entry and the runtime's files; the key stays. Returns
  /// the bytes freed.
  Expected<uint64_t> clear() const;
  /// Removes least recently used entries until they take at most
  /// `maxBytes`; returns the bytes freed.
  uint64_t trim(uint64_t maxBytes) const;
  /// FUSEC_CACHE_MAX_BYTES, or 2 GiB.
  static uint64_t capBytes();

 private:
  std::string folder_;
  std::string key_;  ///< 32 random bytes; empty: disabled
  std::string why_;
};

/// SHA-256 of `text` in hex: the name of a cache entry.
std::string sha256Hex(std::string_view text);

}  // namespace fusec::codegen
