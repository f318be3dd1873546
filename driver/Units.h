/// Numbers as the reports print them (private to the driver library).
#pragma once

#include <cmath>
#include <fmt/format.h>
#include <string>

namespace fusec::driver {

/// `3.85 MB`, `231 MFLOP`: three significant digits and a decimal prefix.
inline std::string human(double v, const char* unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T"};
  int i = 0;
  while (std::abs(v) >= 1000 && i < 4) {
    v /= 1000;
    ++i;
  }
  return fmt::format("{:.3g} {}{}", v, prefixes[i], unit);
}

/// `1.04 ms`, `18 us`, `2.5 s`.
inline std::string seconds(double s) {
  if (s >= 1) return fmt::format("{:.3g} s", s);
  if (s >= 1e-3) return fmt::format("{:.3g} ms", s * 1e3);
  return fmt::format("{:.3g} us", s * 1e6);
}

}  // namespace fusec::driver
