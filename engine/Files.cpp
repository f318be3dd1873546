/// Bounded reads of user-named files; see Files.h.
#include "fusec/engine/Files.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sys/stat.h>

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

}  // namespace fusec
