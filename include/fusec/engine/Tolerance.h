/// How fusec decides that two outputs are the same: one rule, used by
/// `fusec run --check`, `fusec onnx-test` and the deployment bundle's host
/// program (which ships this header, so it depends on nothing but <cmath>).
///
/// Like numpy.allclose against the output's scale: an output matches when
/// every element satisfies
///
///     |got - want| <= atol + rtol * max|want|
///
/// where max|want| is taken over the finite elements of the whole output.
/// A per-element relative test fails deep networks whose outputs span
/// several decades: float32 accumulation error scales with the largest
/// values, not with each element. Infinities of the same sign are equal, NaN
/// equals NaN; anything else against a NaN or an infinity differs. Integer
/// and boolean outputs compare exactly (Tolerance::exact()).
#pragma once

#include <cmath>
#include <cstdint>

namespace fusec {

struct Tolerance {
  double atol = 1e-5;  ///< absolute floor, for outputs that are all near zero
  double rtol = 1e-3;  ///< relative to the output's largest magnitude
  static Tolerance exact() { return Tolerance{0, 0}; }
  /// What `fusec verify` allows a rule beyond rounding noise, unless the
  /// rule's `tolerance { }` or the caller says otherwise: a rewrite
  /// computes on the interpreter, a fusion in OpenCL C (whose built-ins are
  /// allowed a few ulp).
  static Tolerance verifyRewrite() { return Tolerance{1e-6, 1e-5}; }
  static Tolerance verifyFusion() { return Tolerance{1e-5, 1e-4}; }
};

/// The verdict on one output, with the figures a message needs.
struct Comparison {
  bool ok = true;
  int64_t count = 0;
  double scale = 0;        ///< max |want| over finite elements
  double bound = 0;        ///< atol + rtol * scale
  double maxAbsError = 0;  ///< over elements where both are finite
  int64_t worst = -1;      ///< the element with the largest error, or the first non-finite mismatch
  double worstGot = 0, worstWant = 0;
  /// Largest |got - want| / |want| over elements with |want| > bound: the
  /// per-element figure, for information (it does not decide).
  double maxRelativeError = 0;
};

/// Compares `count` elements; `got(i)` and `want(i)` return them as double.
template <class Got, class Want>
Comparison compareElements(int64_t count, Got got, Want want, Tolerance tol) {
  Comparison c;
  c.count = count;
  for (int64_t i = 0; i < count; ++i) {
    const double w = want(i);
    if (std::isfinite(w)) c.scale = std::fmax(c.scale, std::fabs(w));
  }
  c.bound = tol.atol + tol.rtol * c.scale;
  bool nonFiniteMismatch = false;
  for (int64_t i = 0; i < count; ++i) {
    const double g = got(i), w = want(i);
    if (!std::isfinite(g) || !std::isfinite(w)) {
      const bool same = (std::isnan(g) && std::isnan(w)) || (std::isinf(g) && std::isinf(w) && (g > 0) == (w > 0));
      if (!same && !nonFiniteMismatch) {
        nonFiniteMismatch = true;
        c.worst = i, c.worstGot = g, c.worstWant = w;
      }
      continue;
    }
    const double err = std::fabs(g - w);
    if (!nonFiniteMismatch && (c.worst < 0 || err > c.maxAbsError)) c.worst = i, c.worstGot = g, c.worstWant = w;
    c.maxAbsError = std::fmax(c.maxAbsError, err);
    if (std::fabs(w) > c.bound) c.maxRelativeError = std::fmax(c.maxRelativeError, err / std::fabs(w));
  }
  c.ok = !nonFiniteMismatch && c.maxAbsError <= c.bound;
  return c;
}

}  // namespace fusec
