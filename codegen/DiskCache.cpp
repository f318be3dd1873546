/// The per-user kernel cache; see DiskCache.h for what is checked and why.
#include "fusec/codegen/DiskCache.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <atomic>
#include <filesystem>
#include <iostream>
#include <vector>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fusec/engine/Files.h"
#include "fusec/engine/Tensor.h"

namespace fusec::codegen {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kMagic = "fusec cache 2\n";
constexpr size_t kKeyBytes = 32;
constexpr int64_t kMaxEntryBytes = int64_t{1} << 30;

std::string hex(const unsigned char* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[bytes[i] >> 4];
    s[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return s;
}

/// HMAC-SHA256 of `name`, a NUL and `payload` under `key`, in hex; empty
/// when OpenSSL fails (then nothing is trusted).
std::string entryMac(const std::string& key, const std::string& name, std::string_view payload) {
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (!mac) return {};
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(mac);
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0), OSSL_PARAM_construct_end()};
  unsigned char out[EVP_MAX_MD_SIZE];
  size_t outLen = 0;
  const bool ok = ctx && EVP_MAC_init(ctx, reinterpret_cast<const unsigned char*>(key.data()), key.size(), params) == 1 &&
                  EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(name.data()), name.size() + 1) == 1 &&
                  EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(payload.data()), payload.size()) == 1 &&
                  EVP_MAC_final(ctx, out, &outLen, sizeof out) == 1;
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(mac);
  return ok ? hex(out, outLen) : std::string();
}

/// Whether the folder or link at `path` may stand above (or be) a cache
/// folder: this user's or root's, and writable by others only when sticky.
std::optional<std::string> unsafeAncestor(const fs::path& path, bool follow) {
  struct stat st {};
  if ((follow ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st)) != 0)
    return path.string() + ": " + std::strerror(errno);
  if (st.st_uid != 0 && st.st_uid != ::geteuid())
    return path.string() + " belongs to another user (uid " + std::to_string(st.st_uid) + ")";
  if (S_ISDIR(st.st_mode) && (st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
    return path.string() + " is writable by other users";
  return std::nullopt;
}

/// Why `folder` cannot hold this user's cache, or nothing when it can:
/// every folder on the way to it, as named and as resolved, passes
/// `unsafeAncestor`, and the folder itself is this user's alone to write.
std::optional<std::string> unsafeFolder(const fs::path& folder) {
  std::error_code ec;
  const fs::path real = fs::canonical(folder, ec);
  if (ec) return folder.string() + ": " + ec.message();
  for (const auto& [path, follow] : {std::pair{fs::absolute(folder, ec), false}, std::pair{real, true}}) {
    fs::path prefix;
    for (const fs::path& part : path) {
      prefix /= part;
      if (std::optional<std::string> why = unsafeAncestor(prefix, follow)) return why;
    }
  }
  struct stat st {};
  if (::stat(real.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return folder.string() + " is not a folder";
  if (st.st_uid != ::geteuid()) return folder.string() + " belongs to another user";
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return folder.string() + " is writable by other users";
  return std::nullopt;
}

/// Creates the folders of `path` below `base` (which must exist), mode 0700.
std::optional<std::string> makeFoldersBelow(const fs::path& base, const fs::path& path) {
  struct stat st {};
  if (::stat(base.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return base.string() + " does not exist";
  fs::path prefix = base;
  for (const fs::path& part : path.lexically_relative(base)) {
    if (part == "." || part.empty()) continue;
    if (part == "..") return path.string() + " leaves " + base.string();
    prefix /= part;
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) return prefix.string() + ": " + std::strerror(errno);
  }
  return std::nullopt;
}

/// The cache folder this process should use, with the existing folder
/// below which it may create it; an error when there is none.
Expected<std::pair<fs::path, fs::path>> chooseFolder() {
  if (const char* d = std::getenv("FUSEC_CACHE_DIR"); d && *d) {  // empty: unset, never the current folder
    std::error_code ec;
    const fs::path dir = fs::absolute(d, ec).lexically_normal();
    if (ec) return Error{std::string(d) + ": " + ec.message()};
    fs::path base = dir;
    while (!fs::exists(base, ec) && base.has_relative_path()) base = base.parent_path();
    return std::pair{base, dir};
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg == '/' && fs::is_directory(xdg))
    return std::pair{fs::path(xdg), fs::path(xdg) / "fusec" / "kernels"};
  std::string home;
  if (const char* h = std::getenv("HOME"); h && *h) {
    home = h;
  } else if (const passwd* pw = ::getpwuid(::geteuid()); pw && pw->pw_dir) {
    home = pw->pw_dir;
  }
  if (home.empty() || home[0] != '/') return Error{"no home folder (set HOME or FUSEC_CACHE_DIR)"};
  if (!fs::is_directory(home)) return Error{"the home folder " + home + " does not exist (set FUSEC_CACHE_DIR)"};
  return std::pair{fs::path(home), fs::path(home) / ".cache" / "fusec" / "kernels"};
}

/// The key in `folder`/key, made on first use; an error when the file there
/// is not this user's private 32 bytes.
Expected<std::string> loadKey(const fs::path& folder) {
  const fs::path path = folder / "key";
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd >= 0) {
      struct stat st {};
      std::string key(kKeyBytes, '\0');
      const bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
                      (st.st_mode & 077) == 0 && st.st_size == static_cast<off_t>(kKeyBytes) &&
                      ::read(fd, key.data(), kKeyBytes) == static_cast<ssize_t>(kKeyBytes);
      ::close(fd);
      if (!ok) return Error{path.string() + " is not a private key file of this user's (mode 0600, 32 bytes)"};
      return key;
    }
    if (errno != ENOENT) return Error{path.string() + ": " + std::strerror(errno)};
    // A new key: written whole under a temporary name, then linked in place,
    // so a concurrent reader sees all of it or none.
    unsigned char bytes[kKeyBytes];
    if (RAND_bytes(bytes, kKeyBytes) != 1) return Error{"no random bytes for a cache key"};
    std::string temp = (folder / ".key.XXXXXX").string();
    const int out = ::mkstemp(temp.data());  // mode 0600
    if (out < 0) return Error{folder.string() + ": " + std::strerror(errno)};
    const bool written = ::write(out, bytes, kKeyBytes) == static_cast<ssize_t>(kKeyBytes);
    ::close(out);
    const bool linked = written && ::link(temp.c_str(), path.c_str()) == 0;
    const int e = errno;
    ::unlink(temp.c_str());
    if (!linked && e != EEXIST) return Error{path.string() + ": " + std::strerror(e)};
  }
  return Error{path.string() + ": cannot be created"};
}

}  // namespace

std::string sha256Hex(std::string_view text) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(text.data(), text.size(), out, &n, EVP_sha256(), nullptr);
  return hex(out, n);
}

DiskCache DiskCache::open(const std::string& folder) {
  DiskCache cache;
  cache.folder_ = folder;
  if (std::optional<std::string> why = unsafeFolder(folder)) {
    cache.why_ = *why;
    return cache;
  }
  Expected<std::string> key = loadKey(folder);
  if (!key) {
    cache.why_ = key.error().message;
    return cache;
  }
  cache.key_ = std::move(key.value());
  return cache;
}

const DiskCache& DiskCache::user() {
  static const DiskCache cache = [] {
    DiskCache c;
    Expected<std::pair<fs::path, fs::path>> where = chooseFolder();
    if (!where) {
      c.why_ = where.error().message;
    } else if (std::optional<std::string> why = makeFoldersBelow(where->first, where->second)) {
      c.folder_ = where->second.string();
      c.why_ = *why;
    } else {
      c = open(where->second.string());
    }
    if (!c.enabled()) std::cerr << "fusec: warning: no kernel cache: " << c.why_ << "\n";
    return c;
  }();
  return cache;
}

namespace {

/// The runtime's own cache folder inside ours (OpenCL.cpp puts PoCL's here).
constexpr std::string_view kRuntimeFolder = "pocl";

/// Calls `f(path, status)` for every regular file under `folder`, never
/// following links; `runtime` tells whether it lies in the runtime's folder.
template <class F>
void forEachFile(const fs::path& folder, F&& f) {
  std::error_code ec;
  fs::recursive_directory_iterator it(folder, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const fs::file_status st = it->symlink_status(ec);
    if (ec || !fs::is_regular_file(st)) continue;
    const fs::path relative = it->path().lexically_relative(folder);
    f(it->path(), relative, *relative.begin() == kRuntimeFolder);
  }
}

/// Whether `relative` names one of fusec's entries (a binary at the top,
/// anything in its tuning and split-back folders): what usage(), trim()
/// and clear() touch. The key is never one; nor is a file someone else put
/// in a folder FUSEC_CACHE_DIR was pointed at.
bool isEntry(const fs::path& relative) {
  const std::string first = relative.begin()->string();
  if (first == "tuning" || first == "split-back") return true;
  return std::next(relative.begin()) == relative.end() && relative.extension() == ".bin";
}

}  // namespace

uint64_t DiskCache::capBytes() {
  static const uint64_t cap = static_cast<uint64_t>(limitFromEnv("FUSEC_CACHE_MAX_BYTES", int64_t{2} << 30));
  return cap;
}

DiskCache::Usage DiskCache::usage() const {
  Usage u;
  if (folder_.empty()) return u;
  forEachFile(folder_, [&](const fs::path& path, const fs::path& relative, bool runtime) {
    if (!runtime && !isEntry(relative)) return;
    std::error_code ec;
    const uint64_t bytes = fs::file_size(path, ec);
    if (ec) return;
    if (runtime) {
      u.runtimeBytes += bytes;
    } else {
      ++u.entries;
      u.bytes += bytes;
    }
  });
  return u;
}

Expected<uint64_t> DiskCache::clear() const {
  if (!enabled()) return Error{"no kernel cache: " + why_};
  const Usage before = usage();
  std::error_code ec;
  std::vector<fs::path> entries;
  forEachFile(folder_, [&](const fs::path& path, const fs::path& relative, bool runtime) {
    if (!runtime && isEntry(relative)) entries.push_back(path);
  });
  for (const fs::path& path : entries)
    if (!fs::remove(path, ec) && ec) return Error{path.string() + ": " + ec.message()};
  for (std::string_view sub : {"tuning", "split-back"}) fs::remove(fs::path(folder_) / sub, ec);  // when empty
  // The runtime's folder is fusec's to manage: OpenCL.cpp created it.
  fs::remove_all(fs::path(folder_) / kRuntimeFolder, ec);  // a link is removed, not followed
  if (ec) return Error{(fs::path(folder_) / kRuntimeFolder).string() + ": " + ec.message()};
  const Usage after = usage();
  return before.bytes + before.runtimeBytes - after.bytes - after.runtimeBytes;
}

uint64_t DiskCache::trim(uint64_t maxBytes) const {
  if (!enabled()) return 0;
  struct Entry {
    fs::file_time_type used;
    uint64_t bytes;
    fs::path path;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  forEachFile(folder_, [&](const fs::path& path, const fs::path& relative, bool runtime) {
    if (runtime || !isEntry(relative)) return;
    std::error_code ec;
    const uint64_t bytes = fs::file_size(path, ec);
    const fs::file_time_type used = fs::last_write_time(path, ec);
    if (ec) return;
    entries.push_back({used, bytes, path});
    total += bytes;
  });
  if (total <= maxBytes) return 0;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.used < b.used; });
  uint64_t freed = 0;
  for (const Entry& e : entries) {
    if (total - freed <= maxBytes) break;
    std::error_code ec;
    if (fs::remove(e.path, ec)) freed += e.bytes;  // gone already: another process trimmed it
  }
  return freed;
}

std::optional<std::string> DiskCache::get(const std::string& name) const {
  if (!enabled()) return std::nullopt;
  Expected<std::string> file = readInputFile((fs::path(folder_) / name).string(), kMaxEntryBytes);
  if (!file) return std::nullopt;
  std::string_view rest = file.value();
  if (rest.substr(0, kMagic.size()) != kMagic) return std::nullopt;
  rest.remove_prefix(kMagic.size());
  const size_t lineEnd = rest.find('\n');
  if (lineEnd == std::string_view::npos) return std::nullopt;
  const std::string_view mac = rest.substr(0, lineEnd);
  rest.remove_prefix(lineEnd + 1);
  const std::string want = entryMac(key_, name, rest);
  if (want.empty() || mac.size() != want.size() || CRYPTO_memcmp(mac.data(), want.data(), want.size()) != 0)
    return std::nullopt;
  // Used now: the last to go when the cache is trimmed.
  const fs::path path = fs::path(folder_) / name;
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
  return std::string(rest);
}

void DiskCache::put(const std::string& name, std::string_view payload) const {
  if (!enabled()) return;
  const fs::path path = fs::path(folder_) / name;
  if (makeFoldersBelow(folder_, path.parent_path())) return;
  const std::string mac = entryMac(key_, name, payload);
  if (mac.empty()) return;
  std::string entry;
  entry.reserve(kMagic.size() + mac.size() + 1 + payload.size());
  entry.append(kMagic).append(mac).append("\n").append(payload);
  if (!writeOutputFile(path.string(), entry)) return;
  // Trimmed on a process's first write and after each eighth of the cap
  // written since: a scan of the folder now and then, not on every write.
  static std::atomic<bool> trimmedOnce{false};
  static std::atomic<uint64_t> sinceTrim{0};
  const uint64_t written = sinceTrim.fetch_add(entry.size()) + entry.size();
  if (!trimmedOnce.exchange(true) || written >= capBytes() / 8) {
    sinceTrim = 0;
    trim(capBytes());
  }
}

}  // namespace fusec::codegen
