/// Sliding-window geometry; see Window.h.
#include "fusec/engine/Window.h"

#include <algorithm>

namespace fusec {
namespace {

Expected<std::vector<int64_t>> intsAttr(const NodeData& node, const char* name, size_t n, int64_t def) {
  const Attribute* a = node.attr(name);
  if (!a) return std::vector<int64_t>(n, def);
  const auto* v = std::get_if<std::vector<int64_t>>(a);
  if (!v || v->size() != n)
    return Error{"attribute `" + std::string(name) + "` must have " + std::to_string(n) + " values"};
  // Bounded so that window arithmetic (extents, spans) cannot overflow.
  constexpr int64_t kLimit = int64_t{1} << 31;
  for (int64_t x : *v)
    if (x > kLimit || x < -kLimit)
      return Error{"attribute `" + std::string(name) + "` has a value past 2^31: " + std::to_string(x)};
  return *v;
}

/// What both windows read: the shapes, strides, dilations, pads, auto_pad.
struct WindowAttrs {
  WindowGeometry geometry;  // in, kernel, strides, dilations set
  std::vector<int64_t> pads;
  std::string autoPad = "NOTSET";
};

Expected<WindowAttrs> windowAttrs(const NodeData& node, const Shape& inSpatial, const Shape& kernel) {
  const size_t k = inSpatial.size();
  if (kernel.size() != k)
    return Error{"the kernel has " + std::to_string(kernel.size()) + " dims but the input has " + std::to_string(k) +
                 " spatial dims"};
  WindowAttrs w;
  w.geometry.in = inSpatial;
  w.geometry.kernel = kernel;
  Expected<std::vector<int64_t>> strides = intsAttr(node, "strides", k, 1);
  Expected<std::vector<int64_t>> dilations = intsAttr(node, "dilations", k, 1);
  Expected<std::vector<int64_t>> pads = intsAttr(node, "pads", 2 * k, 0);
  for (auto* e : {&strides, &dilations, &pads})
    if (!*e) return e->error();
  w.geometry.strides = strides.value();
  w.geometry.dilations = dilations.value();
  w.pads = pads.value();
  w.autoPad = node.attrString("auto_pad", w.autoPad);
  return w;
}

}  // namespace

Expected<WindowGeometry> windowGeometry(const NodeData& node, const Shape& inSpatial, const Shape& kernel,
                                        bool ceilMode) {
  Expected<WindowAttrs> attrs = windowAttrs(node, inSpatial, kernel);
  if (!attrs) return attrs.error();
  const size_t k = inSpatial.size();
  WindowGeometry g = attrs->geometry;
  const std::vector<int64_t>& pads = attrs->pads;
  const std::string& autoPad = attrs->autoPad;
  g.out.resize(k);
  g.padBegin.resize(k);
  g.padEnd.resize(k);
  for (size_t i = 0; i < k; ++i) {
    if (g.strides[i] <= 0 || g.dilations[i] <= 0) return Error{"strides and dilations must be positive"};
    if (kernel[i] <= 0) return Error{"kernel sizes must be positive"};
    const int64_t extent = (kernel[i] - 1) * g.dilations[i] + 1;
    if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      g.out[i] = (inSpatial[i] + g.strides[i] - 1) / g.strides[i];
      int64_t total = std::max<int64_t>(0, (g.out[i] - 1) * g.strides[i] + extent - inSpatial[i]);
      g.padBegin[i] = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
      g.padEnd[i] = total - g.padBegin[i];
    } else if (autoPad == "VALID" || autoPad == "NOTSET") {
      g.padBegin[i] = autoPad == "VALID" ? 0 : pads[i];
      g.padEnd[i] = autoPad == "VALID" ? 0 : pads[i + k];
      const int64_t span = inSpatial[i] + g.padBegin[i] + g.padEnd[i] - extent;
      if (span < 0)
        return Error{"kernel extent " + std::to_string(extent) + " does not fit spatial size " +
                     std::to_string(inSpatial[i]) + " (with padding)"};
      g.out[i] = (ceilMode ? (span + g.strides[i] - 1) / g.strides[i] : span / g.strides[i]) + 1;
      // A window may not start in the end padding.
      if (ceilMode && (g.out[i] - 1) * g.strides[i] >= inSpatial[i] + g.padBegin[i]) --g.out[i];
    } else {
      return Error{"unknown auto_pad `" + autoPad + "`"};
    }
    if (g.out[i] <= 0) return Error{"output would be empty"};
  }
  return g;
}

Expected<WindowGeometry> transposedWindowGeometry(const NodeData& node, const Shape& inSpatial, const Shape& kernel) {
  Expected<WindowAttrs> attrs = windowAttrs(node, inSpatial, kernel);
  if (!attrs) return attrs.error();
  const size_t k = inSpatial.size();
  WindowGeometry g = attrs->geometry;
  const std::vector<int64_t>& pads = attrs->pads;
  const std::string& autoPad = attrs->autoPad;
  Expected<std::vector<int64_t>> outPad = intsAttr(node, "output_padding", k, 0);
  if (!outPad) return outPad.error();
  std::vector<int64_t> outputShape;
  if (const Attribute* a = node.attr("output_shape"); a && std::holds_alternative<std::vector<int64_t>>(*a))
    outputShape = std::get<std::vector<int64_t>>(*a);
  if (outputShape.size() == k + 2) outputShape.erase(outputShape.begin(), outputShape.begin() + 2);
  if (!outputShape.empty() && outputShape.size() != k)
    return Error{"attribute `output_shape` must have " + std::to_string(k) + " values"};
  g.out.resize(k);
  g.padBegin.resize(k);
  g.padEnd.resize(k);
  for (size_t i = 0; i < k; ++i) {
    if (g.strides[i] <= 0 || g.dilations[i] <= 0) return Error{"strides and dilations must be positive"};
    const int64_t extent = (kernel[i] - 1) * g.dilations[i] + 1;
    const int64_t full = g.strides[i] * (inSpatial[i] - 1) + outPad.value()[i] + extent;
    g.padBegin[i] = pads[i];
    g.padEnd[i] = pads[i + k];
    if (!outputShape.empty() || autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      const int64_t target = !outputShape.empty() ? outputShape[i] : inSpatial[i] * g.strides[i];
      // May be negative (output_shape beyond the full extent).
      const int64_t total = full - target;
      const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      g.padBegin[i] = autoPad == "SAME_UPPER" ? half : total - half;
      g.padEnd[i] = total - g.padBegin[i];
    } else if (autoPad == "VALID") {
      g.padBegin[i] = g.padEnd[i] = 0;
    }
    g.out[i] = full - g.padBegin[i] - g.padEnd[i];
    if (g.out[i] <= 0) return Error{"output size would be empty"};
  }
  return g;
}

}  // namespace fusec
