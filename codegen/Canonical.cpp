/// Canonical kernel programs; see Canonical.h.
#include "fusec/codegen/Canonical.h"

#include <unordered_map>

namespace fusec::codegen {
namespace {

bool identStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool digit(char c) { return c >= '0' && c <= '9'; }
bool identChar(char c) { return identStart(c) || digit(c); }

/// `v` followed by one or more digits: a value's identifier.
bool valueIdentifier(std::string_view id) {
  if (id.size() < 2 || id[0] != 'v') return false;
  for (size_t i = 1; i < id.size(); ++i)
    if (!digit(id[i])) return false;
  return true;
}

/// Whether `text` holds the identifier `id` anywhere (comments included:
/// a conservative answer).
bool mentions(std::string_view text, std::string_view id) {
  for (size_t at = text.find(id); at != std::string_view::npos; at = text.find(id, at + 1)) {
    const bool before = at > 0 && identChar(text[at - 1]);
    const bool after = at + id.size() < text.size() && identChar(text[at + id.size()]);
    if (!before && !after) return true;
  }
  return false;
}

/// Removes spaces and tabs at the end of `out`.
void trimLineEnd(std::string& out) {
  while (!out.empty() && (out.back() == ' ' || out.back() == '\t')) out.pop_back();
}

}  // namespace

CanonicalProgram canonicalProgram(std::string_view source, std::string_view kernelName) {
  CanonicalProgram p;
  const bool renameEntry = kernelName != kCanonicalEntry && !mentions(source, kCanonicalEntry);
  p.entry = renameEntry ? std::string(kCanonicalEntry) : std::string(kernelName);
  const bool renumber = !valueIdentifier(kernelName);
  std::unordered_map<std::string_view, std::string> values;  // v<N> as written -> v<first appearance>
  std::string& out = p.text;
  out.reserve(source.size());
  const size_t n = source.size();
  size_t i = 0;
  while (i < n) {
    const char c = source[i];
    if (c == '/' && i + 1 < n && source[i + 1] == '/') {
      // A line comment runs to a newline that no backslash splices away.
      i += 2;
      while (i < n && source[i] != '\n') i += source[i] == '\\' && i + 1 < n && source[i + 1] == '\n' ? 2 : 1;
      continue;
    }
    if (c == '/' && i + 1 < n && source[i + 1] == '*') {
      const size_t end = source.find("*/", i + 2);
      i = end == std::string_view::npos ? n : end + 2;
      out += ' ';  // a comment is one space
      continue;
    }
    if (c == '"' || c == '\'') {
      const size_t start = i++;
      while (i < n && source[i] != c && source[i] != '\n') i += source[i] == '\\' && i + 1 < n ? 2 : 1;
      if (i < n && source[i] == c) ++i;
      out.append(source.substr(start, i - start));
      continue;
    }
    if (digit(c) || (c == '.' && i + 1 < n && digit(source[i + 1]))) {
      // A preprocessing number: digits, letters, '_', '.', and a sign after
      // an exponent letter (1.5e-3f, 0x1p+4).
      const size_t start = i++;
      while (i < n) {
        const char d = source[i];
        if ((d == '+' || d == '-') && (source[i - 1] == 'e' || source[i - 1] == 'E' || source[i - 1] == 'p' ||
                                       source[i - 1] == 'P')) {
          ++i;
        } else if (identChar(d) || d == '.') {
          ++i;
        } else {
          break;
        }
      }
      out.append(source.substr(start, i - start));
      continue;
    }
    if (identStart(c)) {
      const size_t start = i;
      while (i < n && identChar(source[i])) ++i;
      const std::string_view id = source.substr(start, i - start);
      if (renameEntry && id == kernelName) {
        out += kCanonicalEntry;
      } else if (renumber && valueIdentifier(id)) {
        auto [it, fresh] = values.try_emplace(id);
        if (fresh) it->second = "v" + std::to_string(values.size() - 1);
        out += it->second;
      } else {
        out.append(id);
      }
      continue;
    }
    if (c == '\n') trimLineEnd(out);
    out += c;
    ++i;
  }
  trimLineEnd(out);
  return p;
}

}  // namespace fusec::codegen
