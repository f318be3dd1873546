/// checkOutput: type and shape first, then Tolerance.h's rule.
#include "fusec/engine/OutputCheck.h"

#include <fmt/format.h>

namespace fusec {

OutputCheck checkOutput(const Tensor& got, const Tensor& want, const Tolerance& tol) {
  OutputCheck r;
  if (got.dtype() != want.dtype()) {
    r.summary = fmt::format("element type `{}`, expected `{}`", dtypeName(got.dtype()), dtypeName(want.dtype()));
    return r;
  }
  if (got.shape() != want.shape()) {
    r.summary = fmt::format("shape {}, expected {}", shapeToString(got.shape()), shapeToString(want.shape()));
    return r;
  }
  const bool floating = isFloatingPoint(want.dtype());
  r.figures = compareElements(
      want.numel(), [&](int64_t i) { return got.scalarAt(i); }, [&](int64_t i) { return want.scalarAt(i); },
      floating ? tol : Tolerance::exact());
  const Comparison& c = r.figures;
  r.ok = c.ok;
  if (!floating) {
    r.summary = c.ok ? "equal" : fmt::format("element {}: {}, expected {}", c.worst, c.worstGot, c.worstWant);
    return r;
  }
  const std::string figures =
      fmt::format("max abs error {:.2g}, bound {:.2g} = {:g} + {:g} * max|expected| {:.4g}; largest relative error {:.2g}",
                  c.maxAbsError, c.bound, tol.atol, tol.rtol, c.scale, c.maxRelativeError);
  r.summary = c.ok ? figures
                   : fmt::format("element {}: {:.7g}, expected {:.7g} ({})", c.worst, c.worstGot, c.worstWant, figures);
  return r;
}

}  // namespace fusec
