/// Chains of view ops as strided views; see StridedView.h.
#include "StridedView.h"

#include <algorithm>
#include <optional>

#include "fusec/engine/OpCatalog.h"
#include "fusec/engine/Tensor.h"

namespace fusec::codegen::detail {
namespace {

Error notAView(const std::string& why) { return Error{why, true}; }

StridedView contiguous(const Graph& g, ValueId v) {
  StridedView view;
  view.buffer = v;
  view.shape = g.value(v).type.staticShape();
  view.strides = stridesOf(view.shape);
  return view;
}

/// The view with its dims permuted: result dim i is dim perm[i].
StridedView permuted(const StridedView& in, const std::vector<int64_t>& perm) {
  StridedView out = in;
  for (size_t i = 0; i < perm.size(); ++i) {
    out.shape[i] = in.shape[static_cast<size_t>(perm[i])];
    out.strides[i] = in.strides[static_cast<size_t>(perm[i])];
  }
  return out;
}

/// A Transpose's permutation (default: the dims reversed), checked.
Expected<std::vector<int64_t>> permutation(const NodeData& d, size_t rank) {
  std::optional<std::vector<int64_t>> perm = transposePermutation(d, rank);
  if (!perm) return notAView("Transpose `" + d.name + "` has no valid permutation");
  return std::move(perm.value());
}

/// The same elements in the same order under another shape, without a
/// copy: each run of dims that merges or splits must be contiguous within
/// itself (as numpy decides whether a reshape can be a view). Dims of
/// size 1 take any stride.
std::optional<StridedView> reshaped(const StridedView& in, const Shape& shape) {
  if (shapeNumel(in.shape) != shapeNumel(shape) || shapeNumel(shape) == 0) return std::nullopt;
  StridedView out = in;
  out.shape = shape;
  out.strides.assign(shape.size(), 0);
  std::vector<size_t> from, to;  // the dims other than 1
  for (size_t k = 0; k < in.shape.size(); ++k)
    if (in.shape[k] != 1) from.push_back(k);
  for (size_t k = 0; k < shape.size(); ++k)
    if (shape[k] != 1) to.push_back(k);
  size_t i = 0, j = 0;
  while (i < from.size() && j < to.size()) {
    const size_t i0 = i, j0 = j;
    int64_t a = in.shape[from[i]], b = shape[to[j]];
    while (a != b) {
      if (a < b) a *= in.shape[from[++i]];
      else b *= shape[to[++j]];
    }
    for (size_t k = i0; k < i; ++k)
      if (in.strides[from[k]] != in.strides[from[k + 1]] * in.shape[from[k + 1]]) return std::nullopt;
    int64_t stride = in.strides[from[i]];
    for (size_t k = j + 1; k-- > j0;) {
      out.strides[to[k]] = stride;
      stride *= shape[to[k]];
    }
    ++i;
    ++j;
  }
  return out;
}

/// The view after `d` (a view op reading `in`), whose result has `shape`.
Expected<StridedView> after(const Graph& g, const NodeData& d, const StridedView& in, const Shape& shape) {
  const std::string op = d.op.str();
  if (op == "Identity") return in;
  if (op == "Transpose") {
    Expected<std::vector<int64_t>> perm = permutation(d, in.shape.size());
    if (!perm) return perm.error();
    return permuted(in, perm.value());
  }
  if (op == "Slice") {
    auto ints = [&](size_t i) -> std::optional<std::vector<int64_t>> {
      if (i >= d.inputs.size() || d.inputs[i] == kNoValue) return std::vector<int64_t>{};
      if (!g.isConstant(d.inputs[i])) return std::nullopt;
      return g.value(d.inputs[i]).constant->toInt64s();
    };
    auto starts = ints(1), axes = ints(3), steps = ints(4);
    if (!starts || !axes || !steps || d.inputs.size() < 3)
      return notAView("Slice `" + d.name + "` has bounds known only when it runs");
    if (axes->empty())
      for (size_t k = 0; k < starts->size(); ++k) axes->push_back(static_cast<int64_t>(k));
    if (steps->empty()) steps->assign(starts->size(), 1);
    if (axes->size() != starts->size() || steps->size() != starts->size())
      return notAView("Slice `" + d.name + "` has bounds of different lengths");
    StridedView out = in;
    const auto rank = static_cast<int64_t>(in.shape.size());
    for (size_t k = 0; k < starts->size(); ++k) {
      const int64_t a = (*axes)[k] < 0 ? (*axes)[k] + rank : (*axes)[k];
      if (a < 0 || a >= rank || (*steps)[k] <= 0) return notAView("Slice `" + d.name + "` steps backwards or off its axes");
      const auto axis = static_cast<size_t>(a);
      const int64_t dim = in.shape[axis];
      const int64_t begin = std::clamp<int64_t>((*starts)[k] < 0 ? (*starts)[k] + dim : (*starts)[k], 0, dim);
      out.offset += begin * in.strides[axis];
      out.strides[axis] = in.strides[axis] * (*steps)[k];
    }
    if (shape.size() != in.shape.size()) return notAView("Slice `" + d.name + "` changes the rank");
    out.shape = shape;  // where the slice ends, as the result's type says
    return out;
  }
  std::optional<StridedView> out = reshaped(in, shape);
  if (!out) return notAView(op + " `" + d.name + "` regroups dims that are not contiguous in memory: it needs a copy");
  return out.value();
}

}  // namespace

bool isViewOp(const NodeData& d) {
  static const std::set<std::string> kOps = {"Slice", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity"};
  return d.domain.empty() && kOps.count(d.op.str());
}

Expected<StridedView> readView(const Graph& g, ValueId v, const std::set<NodeRef>& members, std::vector<NodeRef>& chain) {
  std::vector<NodeRef> steps;  // from v back
  ValueId cur = v;
  for (std::optional<NodeRef> p = g.producer(cur); p && members.count(*p); p = g.producer(cur)) {
    const NodeData& d = g.node(*p);
    if (!isViewOp(d)) return notAView("`" + d.op.str() + "` `" + d.name + "` is not a view (Slice, Reshape, Transpose, ...)");
    if (cur != v && (g.uses(cur).size() != 1 || g.isGraphOutput(cur)))
      return notAView("`" + g.value(cur).name + "` is read outside the view chain; nothing stores it");
    steps.push_back(*p);
    cur = d.inputs[0];
  }
  for (ValueId x : {cur, v})
    if (!g.value(x).type.isStatic()) return notAView("`" + g.value(x).name + "` has no static shape");
  StridedView view = contiguous(g, cur);
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const NodeData& d = g.node(*it);
    if (d.outputs.empty() || !g.value(d.outputs[0]).type.isStatic())
      return notAView("`" + d.name + "` has a result without a static shape");
    Expected<StridedView> next = after(g, d, view, g.value(d.outputs[0]).type.staticShape());
    if (!next) return next.error();
    view = std::move(next.value());
    chain.push_back(*it);
  }
  return view;
}

Expected<StridedView> writeView(const Graph& g, ValueId v, const std::set<NodeRef>& members, std::vector<NodeRef>& chain) {
  std::vector<NodeRef> steps;  // from v forward
  ValueId cur = v;
  while (g.uses(cur).size() == 1 && !g.isGraphOutput(cur) && members.count(g.uses(cur)[0].node)) {
    const NodeData& d = g.node(g.uses(cur)[0].node);
    if (!isViewOp(d) || d.op == "Slice")
      return notAView("`" + d.op.str() + "` `" + d.name + "` after the result is not a Transpose or a reshape");
    if (!g.value(d.outputs[0]).type.isStatic()) return notAView("`" + d.name + "` has a result without a static shape");
    steps.push_back(g.uses(cur)[0].node);
    cur = d.outputs[0];
  }
  if (!g.value(cur).type.isStatic()) return notAView("`" + g.value(cur).name + "` has no static shape");
  StridedView view = contiguous(g, cur);
  // Undo each step: a Transpose's input dim perm[i] is its result's dim i.
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const NodeData& d = g.node(*it);
    const Shape in = g.value(d.inputs[0]).type.staticShape();
    if (d.op == "Transpose") {
      Expected<std::vector<int64_t>> perm = permutation(d, in.size());
      if (!perm) return perm.error();
      StridedView before = view;
      for (size_t i = 0; i < perm->size(); ++i) {
        before.shape[static_cast<size_t>((*perm)[i])] = view.shape[i];
        before.strides[static_cast<size_t>((*perm)[i])] = view.strides[i];
      }
      view = before;
    } else if (d.op != "Identity") {
      std::optional<StridedView> before = reshaped(view, in);
      if (!before) return notAView(d.op.str() + " `" + d.name + "` regroups dims that are not contiguous in memory");
      view = before.value();
    }
    chain.push_back(*it);
  }
  return view;
}

}  // namespace fusec::codegen::detail
