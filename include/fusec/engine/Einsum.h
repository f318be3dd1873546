/// An Einsum equation resolved against its operands' shapes: one index space
/// over every letter, output letters first, and each operand's stride along
/// every letter. Shared by the interpreter and the kernel generator so both
/// read equations the same way (explicit or implicit output, ellipsis with
/// broadcasting, repeated letters as diagonals).
#pragma once

#include <string>
#include <vector>

#include "fusec/engine/Graph.h"

namespace fusec {

struct EinsumGeometry {
  std::string letters;   ///< output letters, then the contracted ones ('0'.. stand for ellipsis dims)
  Shape sizes;           ///< the size of each letter
  size_t outputRank = 0; ///< the first outputRank letters index the result
  std::vector<Shape> strides;  ///< per operand, its element stride along each letter (0 where absent or broadcast)

  Shape outputShape() const { return Shape(sizes.begin(), sizes.begin() + static_cast<int64_t>(outputRank)); }
  /// The number of terms summed into each output element.
  int64_t contractedSize() const { return shapeNumel(Shape(sizes.begin() + static_cast<int64_t>(outputRank), sizes.end())); }
};

/// Resolves `equation` (spaces ignored) for operands of `shapes`. Errors
/// name what does not fit: operand count, ranks, a letter's sizes, an output
/// letter no operand has.
Expected<EinsumGeometry> einsumGeometry(const std::string& equation, const std::vector<Shape>& shapes);

}  // namespace fusec
