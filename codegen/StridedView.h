/// Data movement that moves nothing: a chain of Slice, Reshape, Transpose,
/// Squeeze, Unsqueeze, Flatten and Identity, each step an affine map of
/// indices, seen as one strided view of the buffer the chain starts from
/// (or, for a chain after a kernel's result, of the buffer it ends in). A
/// kernel that reads or writes through the view needs no copy of the
/// moved tensor: attention reads the heads of a packed Q/K/V projection and
/// writes its result with the heads merged, in place.
#pragma once

#include <set>
#include <vector>

#include "fusec/engine/Graph.h"

namespace fusec::codegen::detail {

/// Element (i0, i1, ...) of the view is element `offset + sum(i_k *
/// strides[k])` of `buffer`'s storage.
struct StridedView {
  ValueId buffer = kNoValue;
  Shape shape, strides;
  int64_t offset = 0;
};

/// The ops a view passes through.
bool isViewOp(const NodeData& d);

/// `v` as a view of the buffer its chain starts from: walking back through
/// the producers of `v` that are in `members` (view ops, each result read
/// only by the next), to a value that none of them computes. The chain's
/// nodes are added to `chain`. An error when a step is not affine (a
/// Reshape that would need a copy, a Slice with a step that is not
/// positive) or a result is read elsewhere.
Expected<StridedView> readView(const Graph& g, ValueId v, const std::set<NodeRef>& members, std::vector<NodeRef>& chain);

/// Where `v` lies in the buffer of the value a chain of `members` computes
/// from it (Transpose, Reshape, ... each reading only the previous result,
/// the last result read outside): walking forward from `v`, each step
/// inverted. Without such readers, `v` itself, contiguous.
Expected<StridedView> writeView(const Graph& g, ValueId v, const std::set<NodeRef>& members, std::vector<NodeRef>& chain);

}  // namespace fusec::codegen::detail
