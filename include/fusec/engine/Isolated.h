/// Running third-party code that a hostile input can crash (ONNX's shape
/// inference over a whole model) in a child process, so that a crash, a hang
/// or a runaway allocation there becomes an error here instead of taking
/// fusec down.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "fusec/engine/Error.h"

namespace fusec {

struct IsolationLimits {
  int timeoutSeconds = 120;                 ///< the child is killed after this
  int64_t maxResultBytes = int64_t{1} << 30; ///< a longer answer is refused
  /// The child is killed when its resident memory grows by more than this
  /// over the caller's (read every 50 ms: a runaway may pass it by what it
  /// allocates in that time).
  int64_t maxMemoryBytes = int64_t{4} << 30;
};

/// Runs `work` in a forked child and returns the bytes it returned. A
/// `UserError` or `std::exception` thrown by `work` comes back as an Error
/// with its message; a child killed by a signal, one that runs past the
/// limit, or one that answers more than the limit allows is an Error saying
/// so, prefixed with `what`. The child shares nothing with the caller after
/// the fork: whatever `work` changes stays there.
Expected<std::string> runIsolated(const std::string& what, const std::function<std::string()>& work,
                                  const IsolationLimits& limits = {});

}  // namespace fusec
