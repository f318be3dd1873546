/// Geometry of a sliding window over spatial dims (Conv, pooling), from a
/// node's `strides`, `dilations`, `pads` and `auto_pad` attributes as ONNX
/// defines them. Shared by the interpreter and the kernel generators so both
/// compute the same windows.
#pragma once

#include "fusec/engine/Graph.h"

namespace fusec {

struct WindowGeometry {
  Shape in, kernel, out, strides, dilations, padBegin, padEnd;
  int64_t inSize() const { return shapeNumel(in); }
  int64_t outSize() const { return shapeNumel(out); }
  int64_t kernelSize() const { return shapeNumel(kernel); }
};

/// The window of `node` over spatial dims `inSpatial` with `kernel`;
/// `ceilMode` rounds the output size up (pooling's ceil_mode). Errors name
/// the attribute at fault.
Expected<WindowGeometry> windowGeometry(const NodeData& node, const Shape& inSpatial, const Shape& kernel,
                                        bool ceilMode);

/// The window of a ConvTranspose over input spatial dims `inSpatial`: `out`
/// is the output's spatial size and output position o takes input position
/// i through kernel tap t where o + padBegin = i * stride + t * dilation.
/// From `strides`, `dilations`, `pads`, `output_padding`, `output_shape`
/// and `auto_pad` (halves of odd totals round down, as ONNX's reference).
Expected<WindowGeometry> transposedWindowGeometry(const NodeData& node, const Shape& inSpatial, const Shape& kernel);

}  // namespace fusec
