/// Progress of long work (kernel builds, tuning, verify, conformance runs) on
/// a terminal: one line on stderr, redrawn in place, at most 20 times a
/// second. Silent when stderr is not a terminal, so logs and pipes stay clean.
#pragma once

#include <chrono>
#include <cstdio>
#include <fmt/format.h>
#include <string>
#include <unistd.h>

namespace fusec::tools {

class Progress {
 public:
  Progress() : enabled_(::isatty(STDERR_FILENO) == 1) {}
  ~Progress() { clear(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// `  [#####.......] what done/total`; the last step is always drawn.
  void show(const std::string& what, size_t done, size_t total) {
    if (!enabled_ || total == 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (done < total && shown_ && now - last_ < std::chrono::milliseconds(50)) return;
    last_ = now;
    shown_ = true;
    const size_t width = 24, filled = width * std::min(done, total) / total;
    fmt::print(stderr, "\r  [{}{}] {} {}/{}\x1b[K", std::string(filled, '#'), std::string(width - filled, '.'), what,
               done, total);
    std::fflush(stderr);
  }
  /// Erases the line (before printing results, and at the end).
  void clear() {
    if (!shown_) return;
    fmt::print(stderr, "\r\x1b[K");
    std::fflush(stderr);
    shown_ = false;
  }

 private:
  bool enabled_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace fusec::tools
