/// Seeded random tensors for models run without given inputs.
#pragma once

#include <cstdint>
#include <random>

#include "fusec/engine/Graph.h"

namespace fusec::tools {

/// A tensor for graph input `v`: symbolic or unknown dims become
/// `symbolicDim`; floats uniform in [-1, 1), ints in [0, 10), bools fair.
/// Fails for element types it cannot make.
Expected<Tensor> randomInput(const Graph& g, ValueId v, std::mt19937_64& rng, int64_t symbolicDim = 1);

/// Sum of all elements as double, for printing a checksum.
double checksum(const Tensor& t);

}  // namespace fusec::tools
