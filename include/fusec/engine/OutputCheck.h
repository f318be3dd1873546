/// Checking a computed output against an expected one, by the rule of
/// Tolerance.h, with the message every command prints.
#pragma once

#include <string>

#include "fusec/engine/Tensor.h"
#include "fusec/engine/Tolerance.h"

namespace fusec {

struct OutputCheck {
  bool ok = false;
  /// One line: on success the figures (max abs error, the bound, the
  /// per-element relative figure); on failure what differs and where.
  std::string summary;
  Comparison figures;
};

/// Element type and shape must agree; floating-point outputs compare within
/// `tol`, all others exactly.
OutputCheck checkOutput(const Tensor& got, const Tensor& want, const Tolerance& tol = {});

}  // namespace fusec
