/// Escaping of untrusted text for printing; see Printable.h.
#include "fusec/engine/Printable.h"

#include <cstdint>
#include <cstdio>

namespace fusec {
namespace {

/// The length of the valid UTF-8 sequence at `s[i]` (1 to 4) and its code
/// point, or 0 when the bytes there are not one (overlong, surrogate, past
/// U+10FFFF, truncated).
int utf8Sequence(std::string_view s, size_t i, uint32_t& cp) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  int n = 0;
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07;
  else return 0;
  if (i + static_cast<size_t>(n) > s.size()) return 0;
  for (int k = 1; k < n; ++k) {
    if ((b(static_cast<size_t>(k)) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(static_cast<size_t>(k)) & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

bool isControl(uint32_t cp, std::string_view keep) {
  if (cp < 0x20 && keep.find(static_cast<char>(cp)) != std::string_view::npos) return false;
  return cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) ||
         (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string printable(std::string_view text, std::string_view keep) {
  std::string out;
  out.reserve(text.size());
  char buf[12];
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const int n = utf8Sequence(text, i, cp);
    if (n == 0) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(text[i]));
      out += buf;
      ++i;
      continue;
    }
    if (isControl(cp, keep)) {
      std::snprintf(buf, sizeof buf, cp < 0x80 ? "\\x%02x" : "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      out.append(text.substr(i, static_cast<size_t>(n)));
    }
    i += static_cast<size_t>(n);
  }
  return out;
}

bool isPrintable(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const int n = utf8Sequence(text, i, cp);
    if (n == 0 || isControl(cp, {})) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace fusec
