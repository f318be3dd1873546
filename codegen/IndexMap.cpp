/// The index_map family; see Emitters.h.
#include "Emitters.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <limits>
#include <set>
#include <sstream>

#include "ElementwiseEmitter.h"
#include "StridedView.h"
#include "FamilyRegistry.h"

namespace fusec::codegen {
namespace {

/// The unsigned type of an element's bits.
std::string bitsType(DType t) {
  switch (dtypeSize(t)) {
    case 1: return "uchar";
    case 2: return "ushort";
    case 4: return "uint";
    case 8: return "ulong";
    default: return "";
  }
}

std::vector<int64_t> constInts(const Graph& g, const NodeData& d, size_t i) {
  if (i >= d.inputs.size() || d.inputs[i] == kNoValue) return {};
  if (!g.isConstant(d.inputs[i])) throw UserError{"operand " + std::to_string(i) + " must be a constant", true};
  return g.value(d.inputs[i]).constant->toInt64s();
}

std::vector<int64_t> intsAttr(const NodeData& d, const char* name) {
  const Attribute* a = d.attr(name);
  return a && std::holds_alternative<std::vector<int64_t>>(*a) ? std::get<std::vector<int64_t>>(*a) : std::vector<int64_t>{};
}

/// Whether `n` keeps its operand's bytes in their order (a reshape).
bool keepsBytes(const Graph& g, NodeRef n) {
  const std::string op = g.node(n).op.str();
  return op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze" || op == "Identity";
}

/// Declarations of the coordinates c0, c1, ... (long) of linear index
/// `index` in `space`. Where the space has fewer than 2^31 elements they
/// are divided out in 32 bits: a 64-bit division takes several times as
/// long, and a 5-D Transpose is five of them per element.
std::string coordinates(const Shape& space, const std::string& index) {
  if (shapeNumel(space) > std::numeric_limits<int32_t>::max()) return detail::Emitter::coordinates(space, index, "  ", "long");
  const Shape strides = stridesOf(space);
  std::string out = "  const int " + index + "32 = (int)" + index + ";\n";
  for (size_t d = 0; d < space.size(); ++d)
    out += "  const long c" + std::to_string(d) + " = (" + index + "32 / " + std::to_string(std::max<int64_t>(strides[d], 1)) +
           ") % " + std::to_string(std::max<int64_t>(space[d], 1)) + ";\n";
  return out;
}

/// Source offset expressions per op, in terms of output coordinates c0..cN.
class Builder {
 public:
  Builder(const Graph& g, const NodeData& d) : g_(g), d_(d) {}

  /// Fills `body` with statements that compute the element of the op's
  /// result `result` at linear index `i` and hand it to `store` (a prefix:
  /// `out0[i] = `, or `return `), reading operand j's element at an offset
  /// through `read(j, offset)`.
  void build(std::ostringstream& body) {
    const std::string op = d_.op.str();
    const std::string& out0 = store;  // the element's destination
    auto element = [&](size_t j, const std::string& offset) { return read(j, offset); };
    if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze" || op == "Identity") {
      body << "  " << out0 << element(0, "i") << ";  // same elements, new shape\n";
      return;
    }
    if (result >= d_.outputs.size() || d_.outputs[result] == kNoValue) throw UserError{op + " has no such result", true};
    const Shape out = shapeOf(d_.outputs[result]);
    checkRanks(op, out);
    body << coordinates(out, "i");
    const Shape in = shapeOf(d_.inputs[0]);
    const Shape is = stridesOf(in);
    if (op == "Transpose") {
      std::vector<int64_t> perm = intsAttr(d_, "perm");
      if (perm.empty())
        for (int64_t k = static_cast<int64_t>(in.size()) - 1; k >= 0; --k) perm.push_back(k);
      std::string off = "0";
      for (size_t k = 0; k < perm.size(); ++k) off += " + c" + std::to_string(k) + " * " + std::to_string(is[perm[k]]) + "L";
      body << "  " << out0 << element(0, off) << ";\n";
      return;
    }
    if (op == "Expand" || op == "Tile") {
      const size_t lead = out.size() - in.size();
      std::string off = "0";
      for (size_t k = 0; k < in.size(); ++k) {
        const std::string c = "c" + std::to_string(k + lead);
        const std::string coord = in[k] == 1 ? "0" : op == "Tile" ? "(" + c + " % " + std::to_string(in[k]) + "L)" : c;
        off += " + " + coord + " * " + std::to_string(is[k]) + "L";
      }
      body << "  " << out0 << element(0, off) << ";\n";
      return;
    }
    if (op == "Slice") {
      std::vector<int64_t> starts = constInts(g_, d_, 1), axes = constInts(g_, d_, 3), steps = constInts(g_, d_, 4);
      if (axes.empty())
        for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
      if (steps.empty()) steps.assign(starts.size(), 1);
      const std::vector<int64_t> ends = constInts(g_, d_, 2);
      std::vector<int64_t> begin(in.size(), 0), step(in.size(), 1);
      for (size_t k = 0; k < starts.size(); ++k) {
        const int64_t a = axes[k] < 0 ? axes[k] + static_cast<int64_t>(in.size()) : axes[k];
        const int64_t dim = in[static_cast<size_t>(a)], s = steps[k];
        int64_t b = starts[k] < 0 ? starts[k] + dim : starts[k];
        b = s > 0 ? std::clamp<int64_t>(b, 0, dim) : std::clamp<int64_t>(b, 0, dim - 1);
        begin[static_cast<size_t>(a)] = b;
        step[static_cast<size_t>(a)] = s;
        (void)ends;  // the output shape already encodes where the slice ends
      }
      std::string off = "0";
      for (size_t k = 0; k < in.size(); ++k)
        off += " + (" + std::to_string(begin[k]) + "L + c" + std::to_string(k) + " * " + std::to_string(step[k]) + "L) * " +
               std::to_string(is[k]) + "L";
      body << "  " << out0 << element(0, off) << ";\n";
      return;
    }
    if (op == "Concat") {
      int64_t axis = d_.attrInt("axis", 0);
      if (axis < 0) axis += static_cast<int64_t>(out.size());
      if (axis < 0 || axis >= static_cast<int64_t>(out.size())) throw UserError{"Concat axis out of range", true};
      int64_t start = 0;
      for (size_t j = 0; j < d_.inputs.size(); ++j) {
        const Shape s = shapeOf(d_.inputs[j]);
        if (s.size() != out.size()) throw UserError{"Concat operands of another rank than the result", true};
        const Shape st = stridesOf(s);
        const int64_t len = s[static_cast<size_t>(axis)];
        std::string off = "0";
        for (size_t k = 0; k < s.size(); ++k) {
          const std::string c = "c" + std::to_string(k);
          off += " + " + (static_cast<int64_t>(k) == axis ? "(" + c + " - " + std::to_string(start) + "L)" : c) + " * " +
                 std::to_string(st[k]) + "L";
        }
        body << "  " << (j ? "else " : "") << "if (c" << axis << " < " << start + len << "L) " << out0 << element(j, off) << ";\n";
        start += len;
      }
      return;
    }
    if (op == "Gather") {
      int64_t axis = d_.attrInt("axis", 0);
      if (axis < 0) axis += static_cast<int64_t>(in.size());
      const Shape ishape = shapeOf(d_.inputs[1]);
      const Shape ist = stridesOf(ishape);
      std::string idx = "0";
      for (size_t k = 0; k < ishape.size(); ++k)
        idx += " + c" + std::to_string(static_cast<size_t>(axis) + k) + " * " + std::to_string(ist[k]) + "L";
      body << "  long g = (long)" << element(1, idx) << ";\n";
      body << "  if (g < 0) g += " << in[static_cast<size_t>(axis)] << "L;\n";
      std::string off = "0";
      for (size_t k = 0; k < in.size(); ++k) {
        std::string coord;
        if (static_cast<int64_t>(k) < axis) coord = "c" + std::to_string(k);
        else if (static_cast<int64_t>(k) == axis) coord = "g";
        else coord = "c" + std::to_string(k + ishape.size() - 1);
        off += " + " + coord + " * " + std::to_string(is[k]) + "L";
      }
      body << "  " << out0 << element(0, off) << ";\n";
      return;
    }
    if (op == "GatherElements") {
      // The output has the indices' shape; along `axis` the index says where.
      int64_t axis = d_.attrInt("axis", 0);
      if (axis < 0) axis += static_cast<int64_t>(in.size());
      body << "  long g = (long)" << element(1, "i") << ";\n";
      body << "  if (g < 0) g += " << in[static_cast<size_t>(axis)] << "L;\n";
      std::string off = "0";
      for (size_t k = 0; k < in.size(); ++k)
        off += " + " + (static_cast<int64_t>(k) == axis ? std::string("g") : "c" + std::to_string(k)) + " * " +
               std::to_string(is[k]) + "L";
      body << "  " << out0 << element(0, off) << ";\n";
      return;
    }
    if (op == "Trilu") {
      // Keeps the upper (or lower) triangle of the last two axes from
      // diagonal k; zeros elsewhere.
      if (in.size() < 2) throw UserError{"Trilu needs a matrix", true};
      std::string diagonal = "0L";
      if (runtimeDiagonal_) diagonal = element(1, "0");  // computed: read on the device
      else if (const std::vector<int64_t> k = constInts(g_, d_, 1); !k.empty()) diagonal = std::to_string(k[0]) + "L";
      const std::string row = "c" + std::to_string(in.size() - 2), col = "c" + std::to_string(in.size() - 1);
      const bool upper = d_.attrInt("upper", 1) != 0;
      body << "  " << out0 << col << " - " << row << (upper ? " >= " : " <= ") << diagonal << " ? " << element(0, "i") << " : 0;\n";
      return;
    }
    if (op == "DepthToSpace" || op == "SpaceToDepth") {
      const int64_t b = d_.attrInt("blocksize", 1);
      const int64_t C = in[1], H = in[2], W = in[3];
      if (op == "DepthToSpace") {
        const bool crd = d_.attrString("mode", "DCR") == "CRD";
        // out [N, C/b^2, H*b, W*b]: h = c2 / b, bh = c2 % b, w = c3 / b, bw = c3 % b.
        body << "  const long h = c2 / " << b << "L, bh = c2 % " << b << "L, w = c3 / " << b << "L, bw = c3 % " << b << "L;\n";
        const std::string ch = crd ? "(c1 * " + std::to_string(b * b) + "L + bh * " + std::to_string(b) + "L + bw)"
                                   : "((bh * " + std::to_string(b) + "L + bw) * " + std::to_string(C / (b * b)) + "L + c1)";
        body << "  " << out0
             << element(0, "((c0 * " + std::to_string(C) + "L + " + ch + ") * " + std::to_string(H) + "L + h) * " + std::to_string(W) + "L + w")
             << ";\n";
      } else {
        // out [N, C*b^2, H/b, W/b]: channel = (bh * b + bw) * C + c.
        body << "  const long c = c1 % " << C << "L, blk = c1 / " << C << "L, bh = blk / " << b << "L, bw = blk % " << b << "L;\n";
        body << "  " << out0
             << element(0, "((c0 * " + std::to_string(C) + "L + c) * " + std::to_string(H) + "L + c2 * " + std::to_string(b) +
                          "L + bh) * " + std::to_string(W) + "L + c3 * " + std::to_string(b) + "L + bw")
             << ";\n";
      }
      return;
    }
    if (op == "Pad") {
      const std::string mode = d_.attrString("mode", "constant");
      if (mode != "constant" && mode != "edge" && mode != "reflect" && mode != "wrap")
        throw UserError{"Pad mode `" + mode + "` has no kernel path", true};
      // Before opset 11 the pads and the fill value are attributes.
      const bool legacy = g_.info.defaultOpset() < 11;
      std::vector<int64_t> pads = legacy ? intsAttr(d_, "pads") : constInts(g_, d_, 1);
      if (pads.size() != 2 * in.size()) throw UserError{"Pad needs two pads per axis", true};
      if (d_.inputs.size() > 3 && d_.inputs[3] != kNoValue) throw UserError{"Pad with axes has no kernel path", true};
      std::string fill = hasFill_ ? element(2, "0") : "0";
      if (legacy) {
        float value = 0;
        if (const Attribute* a = d_.attr("value"); a && std::holds_alternative<float>(*a)) value = std::get<float>(*a);
        if (g_.value(d_.outputs[0]).type.dtype != DType::Float32 && value != 0)
          throw UserError{"a legacy Pad fill value on other than float has no kernel path", true};
        fill = "as_uint(" + detail::floatLiteral(value) + ")";  // the fill's bits, like the copied elements
      }
      std::string inside = "1", off = "0";
      for (size_t k = 0; k < in.size(); ++k) {
        const std::string p = "p" + std::to_string(k), dim = std::to_string(in[k]) + "L";
        body << "  long " << p << " = c" << k << " - " << pads[k] << "L;\n";
        // Outside the input: the fill value, or the position it mirrors.
        if (mode == "edge") body << "  " << p << " = clamp(" << p << ", 0L, " << dim << " - 1);\n";
        if (mode == "reflect" && in[k] > 1)
          body << "  " << p << " = " << p << " < 0 ? -" << p << " : " << p << " >= " << dim << " ? 2 * (" << dim
               << " - 1) - " << p << " : " << p << ";\n";
        if (mode == "wrap") body << "  " << p << " = ((" << p << " % " << dim << ") + " << dim << ") % " << dim << ";\n";
        if (mode == "constant") inside += " && " + p + " >= 0 && " + p + " < " + dim;
        off += " + " + p + " * " + std::to_string(is[k]) + "L";
      }
      if (mode == "reflect")
        for (size_t k = 0; k < in.size(); ++k)
          if (pads[k] >= in[k] || pads[k + in.size()] >= in[k])
            throw UserError{"reflect Pad wider than the input has no kernel path", true};
      body << "  " << out0 << "(" << inside << ") ? " << element(0, off) << " : " << fill << ";\n";
      return;
    }
    if (op == "Split") {  // result r: its slice along the axis
      int64_t axis = d_.attrInt("axis", 0);
      if (axis < 0) axis += static_cast<int64_t>(in.size());
      if (axis < 0 || axis >= static_cast<int64_t>(in.size()) || out.size() != in.size())
        throw UserError{"Split axis out of range", true};
      int64_t start = 0;
      for (size_t r = 0; r < result; ++r)
        if (d_.outputs[r] != kNoValue) start += shapeOf(d_.outputs[r])[static_cast<size_t>(axis)];
      std::string off = "0";
      for (size_t k = 0; k < in.size(); ++k)
        off += " + " + (static_cast<int64_t>(k) == axis ? "(c" + std::to_string(k) + " + " + std::to_string(start) + "L)"
                                                        : "c" + std::to_string(k)) +
               " * " + std::to_string(is[k]) + "L";
      body << "  " << out0 << element(0, off) << ";\n";
      return;
    }
    throw UserError{"op `" + op + "` has no index_map kernel path", true};
  }

  std::string store = "out0[i] = ";
  std::function<std::string(size_t, const std::string&)> read = [](size_t j, const std::string& offset) {
    return "in" + std::to_string(j) + "[" + offset + "]";
  };
  size_t result = 0;
  bool hasFill_ = false;
  bool runtimeDiagonal_ = false;  // Trilu's k is a buffer

 private:
  Shape shapeOf(ValueId v) const {
    const TensorType& t = g_.value(v).type;
    if (!t.isStatic()) throw UserError{"value `" + g_.value(v).name + "` has no static shape", true};
    return t.staticShape();
  }
  /// The ranks and axes the code below indexes with, checked against the
  /// types (a model may declare anything): a refusal, never a read past a
  /// shape.
  void checkRanks(const std::string& op, const Shape& out) const {
    static const std::set<std::string> kSameRank = {"Transpose", "Tile", "Slice", "Pad", "DepthToSpace",
                                                    "SpaceToDepth", "Trilu", "GatherElements"};
    if (d_.inputs.empty() || d_.inputs[0] == kNoValue) throw UserError{op + " without its data operand", true};
    const Shape in = shapeOf(d_.inputs[0]);
    if (kSameRank.count(op) && in.size() != out.size())
      throw UserError{op + " whose result has another rank than its operand", true};
    if (op == "Transpose") {
      std::vector<int64_t> perm;
      if (const Attribute* a = d_.attr("perm"); a && std::holds_alternative<std::vector<int64_t>>(*a))
        perm = std::get<std::vector<int64_t>>(*a);
      std::vector<bool> seen(in.size(), false);
      if (!perm.empty() && perm.size() != in.size()) throw UserError{"Transpose perm of another length than the rank", true};
      for (int64_t p : perm) {
        if (p < 0 || p >= static_cast<int64_t>(in.size()) || seen[static_cast<size_t>(p)])
          throw UserError{"Transpose perm is not a permutation", true};
        seen[static_cast<size_t>(p)] = true;
      }
    }
    if (op == "Gather" || op == "GatherElements") {
      int64_t axis = d_.attrInt("axis", 0);
      if (axis < 0) axis += static_cast<int64_t>(in.size());
      if (axis < 0 || axis >= static_cast<int64_t>(in.size())) throw UserError{op + " axis out of range", true};
    }
  }

  const Graph& g_;
  const NodeData& d_;
};

const std::set<std::string>& ops() {
  static const std::set<std::string> k = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Expand",
                                          "Tile", "Slice", "Concat", "Gather", "GatherElements", "DepthToSpace",
                                          "SpaceToDepth", "Pad", "Trilu", "Split", "CumSum", "Resize"};
  return k;
}

/// A Split whose results' runs (their extent along the axis times the dims
/// after it) hold detail::kMinRowLength elements or more: each work-item
/// copies a run of one result (a piece of up to 2048 elements of it), in a
/// loop the compiler vectorizes. The element-per-work-item form picks the
/// result lane by lane: GPT-2's Split of Q, K and V took 0.44 ms each.
/// Nothing where a result is missing or a run is shorter.
std::optional<KernelSource> splitRows(const Graph& g, const NodeData& d, int64_t axis, const std::string& name,
                                      const std::string& comment) {
  const Shape xs = g.value(d.inputs[0]).type.staticShape();
  int64_t inner = 1;
  for (size_t q = static_cast<size_t>(axis) + 1; q < xs.size(); ++q) inner *= xs[q];
  const int64_t total = xs[static_cast<size_t>(axis)] * inner, outer = total ? shapeNumel(xs) / total : 0;
  const std::string type = bitsType(g.value(d.inputs[0]).type.dtype);
  std::ostringstream head, params;
  KernelSource k;
  k.name = name;
  k.inputs = {d.inputs[0]};
  int64_t first = 0, start = 0;  // work-items and run offset before this result's
  for (ValueId v : d.outputs) {
    if (v == kNoValue || !g.value(v).type.isStatic()) return std::nullopt;
    const Shape os = g.value(v).type.staticShape();
    if (os.size() != xs.size()) return std::nullopt;
    const int64_t run = os[static_cast<size_t>(axis)] * inner;
    if (run < detail::kMinRowLength) return std::nullopt;
    const detail::RowPieces rows = detail::RowPieces::of(run);
    const int64_t items = outer * rows.pieces;
    const std::string o = std::to_string(k.outputs.size()), t = first ? "(item - " + std::to_string(first) + ")" : "item";
    const std::string R = std::to_string(run);
    head << "  " << (first ? "else " : "") << "if (item < " << first + items << ") {\n";
    if (rows.pieces == 1)
      head << "    const long r = " << t << ";\n";
    else
      head << "    const long r = " << t << " / " << rows.pieces << ";\n    const int piece = " << t << " % " << rows.pieces << ";\n";
    head << "    " << rows.loop() << " out" << o << "[r * " << R << "L + j] = in0[r * " << total << "L + " << start << "L + j];\n  }\n";
    params << ",\n    __global " << type << "* restrict out" << o;
    k.outputs.push_back(v);
    first += items;
    start += run;
  }
  if (start != total || k.outputs.empty()) return std::nullopt;
  k.globalSize = static_cast<size_t>(first);
  k.source = "// " + comment + "\n// Each work-item copies a run of one result (" + std::to_string(outer) +
             " per result, the dims from the axis on).\n__kernel void " + name + "(\n    __global const " + type +
             "* restrict in0" + params.str() + ") {\n  const int item = get_global_id(0);\n" + head.str() + "}\n";
  return k;
}

/// Split as one kernel over its input: each element goes to the result
/// whose slice along `axis` holds it (the results' static shapes say where
/// each slice ends, whichever of `split`, the split operand or
/// num_outputs gave them).
/// With `rows`, splitRows' form where it applies.
Expected<KernelSource> emitSplit(const Graph& g, const NodeData& d, const std::string& name, const std::string& comment,
                                 bool rows) {
  const ValueId x = d.inputs[0];
  const TensorType& xt = g.value(x).type;
  const std::string type = bitsType(xt.dtype);
  if (type.empty()) return Error{"element type `" + std::string(dtypeName(xt.dtype)) + "` has no kernel path", true};
  if (!xt.isStatic()) return Error{"value `" + g.value(x).name + "` has no static shape", true};
  const Shape xs = xt.staticShape();
  int64_t axis = d.attrInt("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(xs.size());
  if (axis < 0 || axis >= static_cast<int64_t>(xs.size())) return Error{"Split axis out of range", true};
  if (rows)
    if (std::optional<KernelSource> copies = splitRows(g, d, axis, name, comment)) return std::move(copies.value());
  KernelSource k;
  k.name = name;
  k.inputs = {x};
  k.globalSize = static_cast<size_t>(shapeNumel(xs));
  std::ostringstream body, params;
  body << coordinates(xs, "i");
  int64_t start = 0;
  for (ValueId v : d.outputs) {
    if (v == kNoValue) continue;
    if (!g.value(v).type.isStatic()) return Error{"value `" + g.value(v).name + "` has no static shape", true};
    const Shape os = g.value(v).type.staticShape();
    if (os.size() != xs.size()) return Error{"Split results must have the input's rank", true};
    const int64_t len = os[static_cast<size_t>(axis)];
    const Shape ost = stridesOf(os);
    std::string off = "0";
    for (size_t q = 0; q < os.size(); ++q) {
      const std::string c = "c" + std::to_string(q);
      off += " + " + (static_cast<int64_t>(q) == axis ? "(" + c + " - " + std::to_string(start) + "L)" : c) + " * " +
             std::to_string(ost[q]) + "L";
    }
    const size_t o = k.outputs.size();
    body << "  " << (o ? "else " : "") << "if (c" << axis << " < " << start + len << "L) out" << o << "[" << off
         << "] = in0[i];\n";
    params << ",\n    __global " << type << "* restrict out" << o;
    k.outputs.push_back(v);
    start += len;
  }
  if (start != xs[static_cast<size_t>(axis)]) return Error{"Split results do not cover the input", true};
  std::ostringstream src;
  src << "// " << comment << "\n";
  src << "__kernel void " << name << "(\n    __global const " << type << "* restrict in0" << params.str() << ") {\n";
  src << "  const long i = get_global_id(0);\n" << body.str() << "}\n";
  k.source = src.str();
  return k;
}

/// CumSum: each element sums the elements before it (or after it, with
/// `reverse`) along the axis, itself included unless `exclusive`. The axis
/// is a constant or read on the device (an int32/int64 scalar operand).
Expected<KernelSource> emitCumSum(const Graph& g, const NodeData& d, const std::string& name, const std::string& comment) {
  const ValueId x = d.inputs[0], y = d.outputs[0];
  const TensorType& xt = g.value(x).type;
  const std::string type = detail::cType(xt.dtype);
  if (type.empty() || xt.dtype == DType::Bool)
    return Error{"CumSum on `" + std::string(dtypeName(xt.dtype)) + "` has no kernel path", true};
  if (!xt.isStatic() || xt.dims->empty()) return Error{"CumSum needs a static shape of rank >= 1", true};
  if (d.inputs.size() < 2 || d.inputs[1] == kNoValue) return Error{"CumSum needs an axis", true};
  const Shape xs = xt.staticShape(), st = stridesOf(xs);
  const int64_t rank = static_cast<int64_t>(xs.size());
  KernelSource k;
  k.name = name;
  k.inputs = {x};
  k.outputs = {y};
  k.globalSize = static_cast<size_t>(shapeNumel(xs));
  std::ostringstream src;
  src << "// " << comment << "\n";
  if (xt.dtype == DType::Float64) src << "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
  src << "__kernel void " << name << "(\n    __global const " << type << "* restrict in0";
  std::string axis;
  const ValueId a = d.inputs[1];
  if (g.isConstant(a)) {
    std::vector<int64_t> v = g.value(a).constant->toInt64s();
    if (v.size() != 1 || v[0] < -rank || v[0] >= rank) return Error{"CumSum axis out of range", true};
    axis = std::to_string(v[0] < 0 ? v[0] + rank : v[0]);
  } else {
    const DType at = g.value(a).type.dtype;
    if (at != DType::Int64 && at != DType::Int32) return Error{"CumSum axis must be int32 or int64", true};
    src << ",\n    __global const " << (at == DType::Int64 ? "long" : "int") << "* restrict in1";
    k.inputs.push_back(a);
    axis = "(int)(in1[0] < 0 ? in1[0] + " + std::to_string(rank) + " : in1[0])";
  }
  src << ",\n    __global " << type << "* restrict out0) {\n";
  src << "  const long i = get_global_id(0);\n";
  src << "  const long dims[" << rank << "] = {";
  for (int64_t q = 0; q < rank; ++q) src << (q ? ", " : "") << xs[static_cast<size_t>(q)];
  src << "}, strides[" << rank << "] = {";
  for (int64_t q = 0; q < rank; ++q) src << (q ? ", " : "") << st[static_cast<size_t>(q)];
  src << "};\n";
  src << "  const int axis = " << axis << ";\n";
  src << "  const long n = dims[axis], stride = strides[axis], c = (i / stride) % n, first = i - c * stride;\n";
  const bool reverse = d.attrInt("reverse", 0) != 0, exclusive = d.attrInt("exclusive", 0) != 0;
  const std::string from = reverse ? "c" + std::string(exclusive ? " + 1" : "") : "0";
  const std::string to = reverse ? "n" : "c" + std::string(exclusive ? "" : " + 1");
  src << "  " << type << " acc = 0;\n";
  src << "  for (long j = " << from << "; j < " << to << "; ++j) acc += in0[first + j * stride];\n";
  src << "  out0[i] = acc;\n}\n";
  k.source = src.str();
  return k;
}

/// Resize with constant scales, a work-item per kRowLanes neighbouring
/// outputs along the last axis: the other axes' source rows and weights
/// once per work-item, the last axis's per lane from tables (indices and
/// float weights computed here in double, as the interpreter computes
/// them; padded to whole vectors), each corner a gather of the lanes. A
/// corner of weight 0 adds nothing (its element may be inf: 0 * inf is
/// NaN), as in the interpreter.
constexpr int64_t kRowLanes = 8;

Expected<KernelSource> emitResizeRows(const Shape& xs, const Shape& ys, const std::vector<bool>& identity,
                                      const std::vector<double>& known, const std::string& ctm, const std::string& mode,
                                      const std::string& nearestMode, const std::string& name, const std::string& comment,
                                      KernelSource k) {
  const size_t r = xs.size(), last = r - 1;
  const bool nearest = mode == "nearest";
  const int64_t tiles = (ys[last] + kRowLanes - 1) / kRowLanes, rows = shapeNumel(ys) / std::max<int64_t>(ys[last], 1);
  const Shape is = stridesOf(xs);
  const bool wide = shapeNumel(xs) > std::numeric_limits<int32_t>::max() || rows * tiles > std::numeric_limits<int32_t>::max();
  const std::string index = wide ? "long" : "int", iv = "int" + std::to_string(kRowLanes),
                    vec = "float" + std::to_string(kRowLanes);
  std::ostringstream tablesSrc, src;
  // Source index (and weight) of output o along axis a.
  auto taps = [&](size_t a, int64_t o, int64_t& lo, int64_t& hi, float& w) {
    const double in = static_cast<double>(xs[a]), out = static_cast<double>(ys[a]), sc = known[a], xo = static_cast<double>(o);
    double at = ctm == "half_pixel"           ? (xo + 0.5) / sc - 0.5
                : ctm == "pytorch_half_pixel" ? (out > 1 ? (xo + 0.5) / sc - 0.5 : 0.0)
                : ctm == "align_corners"      ? (out == 1 ? 0.0 : xo * (in - 1) / (sc * in - 1.0))
                : ctm == "asymmetric"         ? xo / sc
                                              : (xo + 0.5) / sc;  // tf_half_pixel_for_nn
    if (nearest) {
      const double f = std::floor(at);
      const double n = nearestMode == "floor"  ? f
                       : nearestMode == "ceil" ? std::ceil(at)
                       : at - f == 0.5         ? (nearestMode == "round_prefer_ceil" ? f + 1 : f)
                                               : std::round(at);
      lo = hi = std::clamp<int64_t>(static_cast<int64_t>(n), 0, xs[a] - 1);
      w = 0;
      return;
    }
    at = std::clamp(at, 0.0, in - 1);
    lo = static_cast<int64_t>(std::floor(at));
    hi = std::min<int64_t>(lo + 1, xs[a] - 1);
    w = static_cast<float>(at - static_cast<double>(lo));
  };
  auto table = [&](size_t a, int64_t length) {
    std::vector<std::string> lo, hi, w;
    for (int64_t o = 0; o < length; ++o) {
      int64_t l = 0, h = 0;
      float f = 0;
      taps(a, std::min(o, ys[a] - 1), l, h, f);  // past the end: the last output's, never stored
      lo.push_back(std::to_string(l));
      hi.push_back(std::to_string(h));
      w.push_back(detail::floatLiteral(f));
    }
    auto emit = [&](const std::string& type, const std::string& part, const std::vector<std::string>& v) {
      tablesSrc << "__constant " << type << " " << name << "_" << a << part << "[" << v.size() << "] = {";
      for (size_t j = 0; j < v.size(); ++j) tablesSrc << (j ? ", " : "") << v[j];
      tablesSrc << "};\n";
    };
    emit("int", "_lo", lo);
    if (!nearest) {
      emit("int", "_hi", hi);
      emit("float", "_w", w);
    }
  };
  src << "__kernel void " << name << "(\n    __global const float* restrict in0,\n    __global float* restrict out0) {\n";
  src << "  const " << index << " t = get_global_id(0), row = t / " << tiles << ", ox0 = t % " << tiles << " * " << kRowLanes
      << ";\n";
  // The other axes: coordinates of the row, source indices and weights.
  std::vector<size_t> outer;  // resized axes before the last
  const Shape rowStrides = stridesOf(Shape(ys.begin(), ys.end() - 1));
  for (size_t a = 0; a < last; ++a) {
    const std::string c = "c" + std::to_string(a), sa = std::to_string(a);
    src << "  const " << index << " " << c << " = (row / " << std::max<int64_t>(rowStrides[a], 1) << ") % "
        << std::max<int64_t>(ys[a], 1) << ";\n";
    if (identity[a]) {
      src << "  const " << index << " lo" << sa << " = " << c << ";\n";
      continue;
    }
    table(a, ys[a]);
    outer.push_back(a);
    src << "  const " << index << " lo" << sa << " = " << name << "_" << sa << "_lo[" << c << "]";
    if (!nearest)
      src << ", hi" << sa << " = " << name << "_" << sa << "_hi[" << c << "];\n  const float w" << sa << " = " << name << "_"
          << sa << "_w[" << c << "]";
    src << ";\n";
  }
  // The last axis, per lane.
  const std::string sl = std::to_string(last);
  const bool lastResized = !identity[last];
  if (lastResized) {
    table(last, tiles * kRowLanes);
    src << "  const " << iv << " lo" << sl << " = vload" << kRowLanes << "(0, " << name << "_" << sl << "_lo + ox0)";
    if (!nearest)
      src << ", hi" << sl << " = vload" << kRowLanes << "(0, " << name << "_" << sl << "_hi + ox0);\n  const " << vec << " w"
          << sl << " = vload" << kRowLanes << "(0, " << name << "_" << sl << "_w + ox0)";
    src << ";\n";
  } else {
    src << "  const " << iv << " lo" << sl << " = min((" << iv << ")(ox0) + (" << iv << ")(";
    for (int64_t j = 0; j < kRowLanes; ++j) src << (j ? ", " : "") << j;
    src << "), (" << iv << ")(" << xs[last] - 1 << "));\n";
  }
  // The lanes' elements of one corner: the other axes' offset, then a gather along the last.
  static const char* kHex = "0123456789abcdef";
  auto gather = [&](const std::string& base, const std::string& at) {
    std::string v = "(" + vec + ")(";
    for (int64_t j = 0; j < kRowLanes; ++j) v += (j ? ", " : "") + std::string("in0[") + base + " + " + at + ".s" + kHex[j] + "]";
    return v + ")";
  };
  auto baseOffset = [&](size_t corner) {
    std::string off = "0";
    for (size_t a = 0, j = 0; a < last; ++a) {
      const bool high = !identity[a] && !nearest && ((corner >> j++) & 1);
      off += std::string(" + ") + (high ? "hi" : "lo") + std::to_string(a) + " * " + std::to_string(is[a]);
    }
    return off;
  };
  if (nearest) {
    src << "  const " << vec << " acc = " << gather(baseOffset(0), "lo" + sl) << ";\n";
  } else {
    src << "  " << vec << " acc = (" << vec << ")(0.0f);\n";
    for (size_t corner = 0; corner < (size_t{1} << outer.size()); ++corner) {
      std::string wo = "1.0f";
      for (size_t j = 0; j < outer.size(); ++j)
        wo += (corner >> j) & 1 ? " * w" + std::to_string(outer[j]) : " * (1.0f - w" + std::to_string(outer[j]) + ")";
      src << "  {\n    const " << index << " base = " << baseOffset(corner) << ";\n";
      for (int high = 0; high < (lastResized ? 2 : 1); ++high) {
        const std::string w = lastResized ? "(" + wo + ") * " + (high ? "w" + sl : "(1.0f - w" + sl + ")") : "(" + vec + ")(" + wo + ")";
        src << "    { const " << vec << " w = " << w << "; acc += select((" << vec << ")(0.0f), w * "
            << gather("base", (high ? "hi" : "lo") + sl) << ", w != 0.0f); }\n";
      }
      src << "  }\n";
    }
  }
  src << "  __global float* out = out0 + row * " << ys[last] << " + ox0;\n";
  src << "  const int valid = min((" << index << ")" << kRowLanes << ", " << ys[last] << " - ox0);\n";
  src << "  if (valid == " << kRowLanes << ") vstore" << kRowLanes << "(acc, 0, out);\n";
  src << "  else {\n" << detail::validLaneStores("acc", "out", "0", "valid", kRowLanes, "    ") << "  }\n}\n";
  k.globalSize = static_cast<size_t>(rows * tiles);
  k.source = "// " + comment + "\n// Resize, a work-item per " + std::to_string(kRowLanes) +
             " outputs along the last axis; source indices and weights from tables.\n" + tablesSrc.str() + src.str();
  return k;
}

/// Resize, nearest or linear, as the interpreter defines it: per output
/// coordinate a source coordinate (coordinate_transformation_mode, in
/// double, as ONNX's reference computes it), then the nearest element
/// (nearest_mode) or the 2^rank corners around it with linear weights.
/// Scales come from `sizes` (out / in) or the scales operand, constant or
/// read on the device.
Expected<KernelSource> emitResize(const Graph& g, const NodeData& d, const std::string& name, const std::string& comment) {
  const ValueId x = d.inputs[0], y = d.outputs[0];
  const TensorType &xt = g.value(x).type, &yt = g.value(y).type;
  if (xt.dtype != DType::Float32 || !xt.isStatic() || !yt.isStatic())
    return Error{"Resize on other than float with static shapes has no kernel path", true};
  const int64_t opset = g.info.defaultOpset();
  const std::string mode = d.attrString("mode", "nearest");
  const std::string ctm = d.attrString("coordinate_transformation_mode", opset < 11 ? "asymmetric" : "half_pixel");
  const std::string nearestMode = d.attrString("nearest_mode", opset < 11 ? "floor" : "round_prefer_floor");
  if (mode != "nearest" && mode != "linear") return Error{"Resize mode `" + mode + "` has no kernel path", true};
  static const std::set<std::string> kModes = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                               "tf_half_pixel_for_nn", "tf_crop_and_resize"};
  if (!kModes.count(ctm)) return Error{"Resize coordinate_transformation_mode `" + ctm + "` has no kernel path", true};
  if (d.attr("axes") || d.attrInt("antialias", 0) != 0)
    return Error{"Resize with axes or antialias has no kernel path", true};
  const Shape xs = xt.staticShape(), ys = yt.staticShape();
  const size_t r = xs.size();
  if (ys.size() != r) return Error{"Resize changes the rank", true};
  // tf_crop_and_resize samples the box roi = [begins..., ends...] (a
  // constant, in fractions of each axis); outside the input it writes
  // extrapolation_value.
  std::vector<float> roi;
  if (ctm == "tf_crop_and_resize") {
    if (d.inputs.size() < 2 || d.inputs[1] == kNoValue || !g.isConstant(d.inputs[1]))
      return Error{"Resize tf_crop_and_resize needs a constant roi for a kernel", true};
    roi = g.value(d.inputs[1]).constant->toFloats();
    if (roi.size() != 2 * r) return Error{"Resize tf_crop_and_resize needs an roi with " + std::to_string(2 * r) + " values", true};
  }
  KernelSource k;
  k.name = name;
  k.inputs = {x};
  k.outputs = {y};
  k.globalSize = static_cast<size_t>(shapeNumel(ys));
  // The scale of each axis: a constant, or an element of a scales buffer.
  std::vector<std::string> scale(r);
  std::vector<double> known(r, 0.0);  // the constant scales (0: read on the device)
  const size_t scalesIdx = opset < 11 ? 1 : 2;
  const bool hasSizes = opset >= 11 && d.inputs.size() > 3 && d.inputs[3] != kNoValue;
  const ValueId scalesV = d.inputs.size() > scalesIdx ? d.inputs[scalesIdx] : kNoValue;
  std::string params;
  if (hasSizes || scalesV == kNoValue || (g.value(scalesV).type.isStatic() && shapeNumel(g.value(scalesV).type.staticShape()) == 0)) {
    for (size_t a = 0; a < r; ++a) {
      known[a] = static_cast<float>(ys[a]) / static_cast<float>(xs[a]);
      scale[a] = detail::doubleLiteral(known[a]);
    }
  } else if (g.isConstant(scalesV)) {
    const std::vector<float> v = g.value(scalesV).constant->toFloats();
    if (v.size() != r) return Error{"Resize scales must have one value per axis", true};
    for (size_t a = 0; a < r; ++a) {
      known[a] = v[a];
      scale[a] = detail::doubleLiteral(v[a]);
    }
  } else {
    if (g.value(scalesV).type.dtype != DType::Float32) return Error{"Resize scales must be float", true};
    params = ",\n    __global const float* restrict in1";
    k.inputs.push_back(scalesV);
    for (size_t a = 0; a < r; ++a) scale[a] = "(double)in1[" + std::to_string(a) + "]";
  }
  // Axes the resize leaves alone (the batch and channels of an image): a
  // scale of exactly 1 that the coordinate transformation maps onto itself.
  // Each output element reads the input's element there, no corners along
  // it (an NCHW bilinear resize reads 4 corners, not 16).
  std::vector<bool> identity(r, false);
  const bool sameAxes = ctm == "half_pixel" || ctm == "pytorch_half_pixel" || ctm == "align_corners" || ctm == "asymmetric";
  for (size_t a = 0; a < r; ++a) identity[a] = sameAxes && xs[a] == ys[a] && known[a] == 1.0;
  // With constant scales each resized axis takes its source indices and
  // weights from tables computed here, in double as the interpreter
  // computes them: per element two lookups and float arithmetic, which
  // PoCL vectorizes, where the coordinates computed per element in double
  // and 64-bit indices ran one lane at a time (lraspp's 28x28 -> 224x224
  // bilinear head: 7.5 -> 2.6 ms). The tables fit a GPU's constant memory
  // (16 KB); past that, and with scales read on the device or a crop box,
  // the coordinates are computed per element.
  constexpr int64_t kMaxTableBytes = 16 << 10;
  int64_t tableBytes = 0;
  for (size_t a = 0; a < r; ++a)
    if (!identity[a]) tableBytes += ys[a] * (mode == "nearest" ? 4 : 12);
  const bool tables = ctm != "tf_crop_and_resize" && tableBytes <= kMaxTableBytes &&
                      std::all_of(known.begin(), known.end(), [](double s) { return s > 0; });
  // Element offsets: 32-bit where the input allows.
  const bool wide = shapeNumel(xs) > std::numeric_limits<int32_t>::max();
  const std::string index = wide ? "long" : "int", suffix = wide ? "L" : "";
  const Shape is = stridesOf(xs);
  if (tables) return emitResizeRows(xs, ys, identity, known, ctm, mode, nearestMode, name, comment, k);
  std::ostringstream src;
  src << "// " << comment << "\n#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
  src << "__kernel void " << name << "(\n    __global const float* restrict in0" << params
      << ",\n    __global float* restrict out0) {\n";
  src << "  const long i = get_global_id(0);\n";
  src << coordinates(ys, "i");
  for (size_t a = 0; a < r; ++a) {
    const std::string c = "c" + std::to_string(a), v = "v" + std::to_string(a), n = std::to_string(xs[a]);
    if (identity[a]) {
      src << "  const " << index << " lo" << a << " = " << c << ";  // an axis the resize leaves alone\n";
      continue;
    }
    const double in = static_cast<double>(xs[a]), out = static_cast<double>(ys[a]);
    const std::string xo = "(double)" + c, s = scale[a];
    std::string e;
    if (ctm == "half_pixel") e = "(" + xo + " + 0.5) / " + s + " - 0.5";
    else if (ctm == "pytorch_half_pixel") e = out > 1 ? "(" + xo + " + 0.5) / " + s + " - 0.5" : "0.0";
    else if (ctm == "align_corners") e = out == 1 ? "0.0" : xo + " * " + detail::doubleLiteral(in - 1) + " / (" + s + " * " + detail::doubleLiteral(in) + " - 1.0)";
    else if (ctm == "asymmetric") e = xo + " / " + s;
    else if (ctm == "tf_crop_and_resize") {
      const double b = roi[a], end = roi[a + r];
      e = out > 1 ? detail::doubleLiteral(b * (in - 1)) + " + " + xo + " * " + detail::doubleLiteral(end - b) + " * " +
                        detail::doubleLiteral(in - 1) + " / " + detail::doubleLiteral(out - 1)
                  : detail::doubleLiteral(0.5 * (b + end) * (in - 1));
    } else e = "(" + xo + " + 0.5) / " + s;
    src << "  double " << v << " = " << e << ";\n";
    if (!roi.empty())
      src << "  if (" << v << " < 0.0 || " << v << " > " << detail::doubleLiteral(in - 1) << ") {\n    out0[i] = "
          << detail::floatLiteral(d.attrFloat("extrapolation_value", 0.0f)) << ";\n    return;\n  }\n";
    if (mode == "nearest") {
      std::string pick;
      if (nearestMode == "floor") pick = "floor(" + v + ")";
      else if (nearestMode == "ceil") pick = "ceil(" + v + ")";
      else if (nearestMode == "round_prefer_ceil") pick = "(" + v + " - floor(" + v + ") == 0.5 ? floor(" + v + ") + 1.0 : round(" + v + "))";
      else pick = "(" + v + " - floor(" + v + ") == 0.5 ? floor(" + v + ") : round(" + v + "))";
      src << "  const " << index << " lo" << a << " = clamp((" << index << ")" << pick << ", (" << index << ")0, (" << index
          << ")" << n << " - 1);\n";
    } else {
      src << "  " << v << " = clamp(" << v << ", 0.0, " << detail::doubleLiteral(in - 1) << ");\n";
      src << "  const " << index << " lo" << a << " = (" << index << ")floor(" << v << "), hi" << a << " = min(lo" << a
          << " + 1, (" << index << ")" << n << " - 1);\n  const double w" << a << " = " << v << " - (double)lo" << a << ";\n";
    }
  }
  auto offset = [&](const std::function<bool(size_t)>& high) {
    std::string off = "0";
    for (size_t a = 0; a < r; ++a)
      off += std::string(" + ") + (high(a) ? "hi" : "lo") + std::to_string(a) + " * " + std::to_string(is[a]) + suffix;
    return off;
  };
  if (mode == "nearest") {
    src << "  out0[i] = in0[" << offset([](size_t) { return false; }) << "];\n}\n";
  } else {
    // The corners along the resized axes. A corner of weight 0 adds
    // nothing, as in the interpreter (its element may be inf: 0 * inf is NaN).
    std::vector<size_t> resized;
    for (size_t a = 0; a < r; ++a)
      if (!identity[a]) resized.push_back(a);
    src << "  double acc = 0.0;\n";
    for (size_t corner = 0; corner < (size_t{1} << resized.size()); ++corner) {
      auto high = [&](size_t a) {
        const auto at = std::find(resized.begin(), resized.end(), a);
        return at != resized.end() && ((corner >> (at - resized.begin())) & 1);
      };
      std::string w = "1.0";
      for (size_t a : resized) w += high(a) ? " * w" + std::to_string(a) : " * (1.0 - w" + std::to_string(a) + ")";
      src << "  { const double w = " << w << "; acc += w != 0.0 ? w * (double)in0[" << offset(high) << "] : 0.0; }\n";
    }
    src << "  out0[i] = (float)acc;\n}\n";
  }
  k.source = src.str();
  return k;
}

/// The operands of `d` its kernel reads from buffers, each with the type
/// it is read as (`t` for the moved elements, int32/int64 for indices):
/// shape operands are constants folded into the index arithmetic, except
/// Gather's indices, Trilu's computed diagonal and Pad's fill value.
Status dataOperands(const Graph& g, const NodeData& d, Builder& b, const std::function<void(size_t, DType)>& add) {
  const std::string op = d.op.str();
  const DType t = g.value(d.outputs[0]).type.dtype;
  if (op == "Concat") {
    for (size_t j = 0; j < d.inputs.size(); ++j) add(j, t);
    return Status::success();
  }
  add(0, t);
  if (op == "Gather" || op == "GatherElements") {
    DType it = g.value(d.inputs[1]).type.dtype;
    if (it != DType::Int64 && it != DType::Int32) return Error{op + " indices must be int32 or int64", true};
    add(1, it);
  }
  if (op == "Trilu" && d.inputs.size() > 1 && d.inputs[1] != kNoValue && !g.isConstant(d.inputs[1])) {
    add(1, DType::Int64);
    b.runtimeDiagonal_ = true;
  }
  if (op == "Pad" && d.inputs.size() > 2 && d.inputs[2] != kNoValue) {
    add(2, t);  // the fill value
    b.hasFill_ = true;
  }
  return Status::success();
}

}  // namespace

Expected<IndexMapFetches> indexMapFetches(const Graph& g, const std::vector<NodeRef>& members, size_t firstParam) {
  std::map<ValueId, NodeRef> producer;  // member results
  for (NodeRef n : members) {
    const NodeData& d = g.node(n);
    const std::string op = d.op.str();
    if (op == "CumSum" || op == "Resize")
      return Error{"`" + op + "` is not an index map that composes with others; it takes a kernel of its own", true};
    for (ValueId v : d.outputs)
      if (v != kNoValue) producer[v] = n;
  }
  IndexMapFetches f;
  f.type = g.value(g.node(members.front()).outputs[0]).type.dtype;
  const std::string type = bitsType(f.type);
  if (type.empty()) return Error{"element type `" + std::string(dtypeName(f.type)) + "` has no kernel path", true};
  f.bitsType = type;
  std::map<ValueId, size_t> paramOf;
  std::ostringstream params;
  for (NodeRef n : members) {
    const NodeData& d = g.node(n);
    Builder b(g, d);
    Status operands = dataOperands(g, d, b, [&](size_t j, DType ty) {
      const ValueId v = d.inputs[j];
      if (producer.count(v) || paramOf.count(v)) return;
      const size_t param = firstParam + f.inputs.size();
      paramOf[v] = param;
      params << (f.inputs.empty() ? "" : ",\n    ") << "__global const "
             << (ty == DType::Int32 ? "int" : ty == DType::Int64 ? "long" : type) << "* restrict in" << param;
      f.args += ", in" + std::to_string(param);
      f.inputs.push_back(v);
    });
    if (!operands) return operands.error();
    for (size_t j = 0; j < d.inputs.size(); ++j) {
      const ValueId v = d.inputs[j];
      if (v == kNoValue || !producer.count(v)) continue;
      const bool data = d.op == "Concat" || j == 0;
      if (!data) return Error{"`" + d.op.str() + "` reads an index or fill value computed in its group", true};
      if (g.value(v).type.dtype != f.type) return Error{"a data-movement group moves elements of one type", true};
    }
  }
  f.params = params.str();
  std::ostringstream functions;
  for (NodeRef n : members) {
    const NodeData& d = g.node(n);
    for (size_t r = 0; r < d.outputs.size(); ++r) {
      const ValueId v = d.outputs[r];
      if (v == kNoValue) continue;
      if (g.value(v).type.dtype != f.type) return Error{"a data-movement group moves elements of one type", true};
      Builder b(g, d);
      (void)dataOperands(g, d, b, [](size_t, DType) {});
      b.result = r;
      b.store = "return ";
      b.read = [&](size_t j, const std::string& offset) {
        const ValueId in = d.inputs.at(j);
        if (producer.count(in)) return "fetch" + std::to_string(in) + "(" + offset + f.args + ")";
        return "in" + std::to_string(paramOf.at(in)) + "[" + offset + "]";
      };
      std::ostringstream body;
      try {
        b.build(body);
      } catch (const UserError& e) {
        return Error{e.message, e.unsupported};
      }
      functions << "// " << d.op.str() << " " << detail::Emitter::sanitize(d.name) << ", result " << r << "\n";
      functions << "inline " << type << " fetch" << v << "(const long i" << (f.params.empty() ? "" : ",\n    ")
                << f.params << ") {\n"
                << body.str() << "  return 0;\n}\n";
    }
  }
  f.functions = functions.str();
  return f;
}

namespace {

/// Data-movement ops as one kernel: each result the group writes is
/// computed element by element by walking back through the members' index
/// maps to the group's inputs, one inline function per member result
/// (`fetch<value>(i, buffers)`: its element at linear index i), so no
/// intermediate is stored and every element moves once. A chain of
/// Concat, Reshape, Transpose and Split (ShuffleNet's channel shuffle)
/// reads its inputs and writes its results, and nothing in between.
Expected<KernelSource> emitIndexMapChain(const Graph& g, const std::vector<NodeRef>& members, const std::string& name,
                                         const std::string& comment) {
  const bool onlyViews = std::all_of(members.begin(), members.end(), [&](NodeRef n) { return keepsBytes(g, n); });
  if (onlyViews) return Error{"reshapes alone are views of their input, no kernel", true};
  Expected<IndexMapFetches> fetches = indexMapFetches(g, members, 0);
  if (!fetches) return fetches.error();
  const IndexMapFetches& f = fetches.value();
  const std::string& type = f.bitsType;
  KernelSource k;
  k.name = name;
  k.inputs = f.inputs;
  std::ostringstream params;
  params << f.params;
  const std::string& argList = f.args;
  // The kernel: each result over its own range of work-items.
  GroupBoundary boundary = groupBoundary(g, members);
  std::ostringstream kernel;
  int64_t first = 0;
  for (ValueId v : boundary.outputs) {
    if (!g.value(v).type.isStatic()) return Error{"value `" + g.value(v).name + "` has no static shape", true};
    const int64_t n = shapeNumel(g.value(v).type.staticShape());
    const std::string o = std::to_string(k.outputs.size());
    params << (k.inputs.empty() && k.outputs.empty() ? "" : ",\n    ") << "__global " << type << "* restrict out" << o;
    kernel << "  " << (first ? "else " : "") << "if (i < " << first + n << "L) out" << o << "[i - " << first << "L] = fetch"
           << v << "(i - " << first << "L" << argList << ");\n";
    k.outputs.push_back(v);
    first += n;
  }
  k.globalSize = static_cast<size_t>(first);
  std::ostringstream src;
  src << "// " << comment << "\n" << f.functions;
  src << "__kernel void " << name << "(\n    " << params.str() << ") {\n  const long i = get_global_id(0);\n" << kernel.str()
      << "}\n";
  k.source = src.str();
  return k;
}

/// The run length R of value `v` (a member result of a data-movement
/// group) such that each of its runs of R elements starting at a multiple
/// of R is a contiguous run, at a multiple of R, of one of the group's
/// inputs; 0 where that holds for the whole value (a group input, and
/// reshapes of one). Per op: a reshape keeps its operand's runs; a
/// Transpose keeps the trailing dims it leaves in place, a Concat or Split
/// the dims after its axis (times the largest extent along it dividing
/// every piece's extent and start), a Slice the dims after the last one it
/// names;
/// each composed with its operand's runs by their gcd. Any other op breaks
/// every run (1). Throws UserError where a Slice's operands are not
/// constants.
int64_t contiguousRun(const Graph& g, ValueId v, const std::map<ValueId, NodeRef>& producer, std::map<ValueId, int64_t>& memo) {
  if (auto it = memo.find(v); it != memo.end()) return it->second;
  auto at = producer.find(v);
  if (at == producer.end()) return 0;
  const NodeData& d = g.node(at->second);
  const std::string op = d.op.str();
  auto compose = [](int64_t kept, int64_t run) { return run == 0 ? kept : std::gcd(kept, run); };
  auto operandRun = [&](size_t j) {
    return j < d.inputs.size() && d.inputs[j] != kNoValue ? contiguousRun(g, d.inputs[j], producer, memo) : int64_t{1};
  };
  auto after = [](const Shape& s, int64_t axis) {  // elements of the dims after `axis`
    int64_t n = 1;
    for (size_t k = static_cast<size_t>(axis) + 1; k < s.size(); ++k) n *= s[k];
    return n;
  };
  int64_t run = 1;
  const TensorType& t = g.value(v).type;
  if (!t.isStatic() || shapeNumel(t.staticShape()) <= 0) return memo[v] = 1;
  const Shape out = t.staticShape();
  const int64_t rank = static_cast<int64_t>(out.size());
  auto axisOf = [&](int64_t axis) { return axis < 0 ? axis + rank : axis; };
  if (keepsBytes(g, at->second)) {
    run = operandRun(0);
  } else if (op == "Transpose") {
    std::vector<int64_t> perm = intsAttr(d, "perm");
    if (perm.empty())
      for (int64_t k = rank - 1; k >= 0; --k) perm.push_back(k);
    int64_t kept = 1;
    for (int64_t k = rank - 1; k >= 0 && static_cast<size_t>(k) < perm.size() && perm[static_cast<size_t>(k)] == k; --k)
      kept *= out[static_cast<size_t>(k)];
    run = compose(kept, operandRun(0));
  } else if (op == "Concat" || op == "Split") {
    // Whole pieces along the axis stay runs too, in units that divide
    // every piece's extent and start there: GPT-2's Q, K and V, a Split of
    // the packed projection's last axis, are rows of 768 in it.
    const int64_t axis = axisOf(d.attrInt("axis", 0));
    if (axis >= 0 && axis < rank) {
      const bool split = op == "Split";
      const std::vector<ValueId>& pieces = split ? d.outputs : d.inputs;
      int64_t unit = 0, start = 0;
      for (ValueId piece : pieces) {
        if (piece == kNoValue || !g.value(piece).type.isStatic() || g.value(piece).type.staticShape().size() != out.size()) {
          unit = 1;
          break;
        }
        const int64_t extent = g.value(piece).type.staticShape()[static_cast<size_t>(axis)];
        if (split && piece == v) unit = std::gcd(unit, std::gcd(extent, start));
        if (!split) unit = std::gcd(unit, extent);
        start += extent;
      }
      if (split) unit = std::gcd(unit, start);  // start: the operand's extent along the axis
      run = std::max<int64_t>(unit, 1) * after(out, axis);
      const size_t data = split ? 1 : d.inputs.size();
      for (size_t j = 0; j < data; ++j) run = compose(run, operandRun(j));
    }
  } else if (op == "Slice" && g.value(d.inputs[0]).type.isStatic()) {
    // The dims after the last one the Slice changes run on unchanged.
    const Shape in = g.value(d.inputs[0]).type.staticShape();
    int64_t last = -1;
    for (int64_t k = 0; k < rank && in.size() == out.size(); ++k)
      if (in[static_cast<size_t>(k)] != out[static_cast<size_t>(k)]) last = k;
    // A Slice that keeps every extent may still reverse or shift an axis:
    // only the dims after any axis it names are safe.
    for (int64_t a : constInts(g, d, 3)) last = std::max(last, axisOf(a));
    if (d.inputs.size() <= 3 || d.inputs[3] == kNoValue) last = std::max(last, static_cast<int64_t>(constInts(g, d, 1).size()) - 1);
    if (in.size() == out.size()) run = compose(after(out, last), operandRun(0));
  }
  return memo[v] = run;
}

/// A chain of data movement (ShuffleNet's Concat -> Reshape -> Transpose ->
/// Reshape -> Split) whose every result is made of runs that each lie
/// contiguous in one of the group's inputs (contiguousRun): a work-item
/// copies one run (a piece of up to 2048 elements of it), having found
/// where it starts once (`locate<v>`: the offset in the input it comes
/// from, the input's number through `which`), in a loop the compiler
/// vectorizes. For CPUs: the element-per-work-item form composes the index
/// maps per element, every coordinate divided out in vector lanes that have
/// no integer division (kernel_roofline, ShuffleNet's shuffle: 0.33 ms
/// fused against 0.021 ms for its three copies). Nothing where a result's
/// runs are shorter than kMinRowLength.
std::optional<KernelSource> emitChainRows(const Graph& g, const std::vector<NodeRef>& members, const std::string& name,
                                          const std::string& comment) {
  static const std::set<std::string> kRunOps = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity",
                                                "Transpose", "Slice",   "Concat",  "Split"};
  // Reshapes alone are views (emitIndexMapChain says so).
  if (std::all_of(members.begin(), members.end(), [&](NodeRef n) { return keepsBytes(g, n); })) return std::nullopt;
  std::map<ValueId, NodeRef> producer;
  for (NodeRef n : members) {
    if (!kRunOps.count(g.node(n).op.str())) return std::nullopt;
    for (ValueId v : g.node(n).outputs)
      if (v != kNoValue) producer[v] = n;
  }
  const GroupBoundary boundary = groupBoundary(g, members);
  std::map<ValueId, int64_t> memo;
  std::vector<std::pair<ValueId, detail::RowPieces>> results;
  for (ValueId v : boundary.outputs) {
    const TensorType& t = g.value(v).type;
    if (!t.isStatic()) return std::nullopt;
    int64_t run = 1;
    try {
      run = contiguousRun(g, v, producer, memo);
    } catch (const UserError&) {
      return std::nullopt;
    }
    const int64_t n = shapeNumel(t.staticShape());
    if (n <= 0 || n > std::numeric_limits<int32_t>::max()) return std::nullopt;
    const detail::RowPieces rows = detail::RowPieces::of(run == 0 ? n : run);
    if (rows.length < detail::kMinRowLength || n % rows.length != 0) return std::nullopt;
    results.emplace_back(v, rows);
  }
  std::map<ValueId, size_t> paramOf;  // group inputs: kernel parameters in0, ...
  std::vector<ValueId> inputs;
  for (NodeRef n : members) {
    const NodeData& d = g.node(n);
    const size_t data = d.op == "Concat" ? d.inputs.size() : 1;
    for (size_t j = 0; j < data; ++j)
      if (d.inputs[j] != kNoValue && !producer.count(d.inputs[j]) && !paramOf.count(d.inputs[j])) {
        paramOf[d.inputs[j]] = inputs.size();
        inputs.push_back(d.inputs[j]);
      }
  }
  if (results.empty()) return std::nullopt;
  const DType dtype = g.value(results.front().first).type.dtype;
  const std::string type = bitsType(dtype);
  if (type.empty()) return std::nullopt;
  for (ValueId v : inputs)
    if (g.value(v).type.dtype != dtype) return std::nullopt;
  // locate<v>(i, &which): where element i of v comes from, walking back
  // through the members' index maps as the element form's fetch<v> does.
  std::ostringstream functions;
  for (NodeRef n : members) {
    const NodeData& d = g.node(n);
    for (size_t r = 0; r < d.outputs.size(); ++r) {
      if (d.outputs[r] == kNoValue) continue;
      Builder b(g, d);
      b.result = r;
      b.store = "return ";
      b.read = [&](size_t j, const std::string& offset) {
        const ValueId in = d.inputs.at(j);
        if (producer.count(in)) return "locate" + std::to_string(in) + "(" + offset + ", which)";
        return "(*which = " + std::to_string(paramOf.at(in)) + ", (long)(" + offset + "))";
      };
      std::ostringstream body;
      try {
        b.build(body);
      } catch (const UserError&) {
        return std::nullopt;
      }
      functions << "// " << d.op.str() << " " << detail::Emitter::sanitize(d.name) << ", result " << r << "\n";
      functions << "inline long locate" << d.outputs[r] << "(const long i, int* which) {\n" << body.str() << "  return 0;\n}\n";
    }
  }
  KernelSource k;
  k.name = name;
  k.inputs = inputs;
  std::ostringstream params, head;
  for (size_t j = 0; j < inputs.size(); ++j) params << (j ? ",\n    " : "") << "__global const " << type << "* restrict in" << j;
  head << "  const int item = get_global_id(0);\n  int which = 0;\n";
  int64_t first = 0;
  for (const auto& [v, rows] : results) {
    const std::string o = std::to_string(k.outputs.size()), R = std::to_string(rows.length);
    const int64_t items = shapeNumel(g.value(v).type.staticShape()) / rows.length * rows.pieces;
    params << ",\n    __global " << type << "* restrict out" << o;
    const std::string t = first ? "(item - " + std::to_string(first) + ")" : "item";
    head << "  " << (first ? "else " : "") << "if (item < " << first + items << ") {\n";
    head << "    const int row = " << (rows.pieces > 1 ? t + " / " + std::to_string(rows.pieces) : t) << ";\n";
    if (rows.pieces > 1) head << "    const int piece = " << t << " % " << rows.pieces << ";\n";
    head << "    const long from = locate" << v << "((long)row * " << R << ", &which);\n";
    head << "    __global " << type << "* restrict to = out" << o << " + (long)row * " << R << ";\n";
    head << "    " << rows.loop() << " to[j] = src(which)[from + j];\n  }\n";
    k.outputs.push_back(v);
    first += items;
  }
  std::string pick = "in0";
  for (size_t j = 1; j < inputs.size(); ++j) pick = "(w) == " + std::to_string(j) + " ? in" + std::to_string(j) + " : " + pick;
  k.globalSize = static_cast<size_t>(first);
  std::ostringstream src;
  src << "// " << comment << "\n// Each work-item copies a run of one result that lies contiguous in one input, found once per run.\n"
      << functions.str();
  src << "__kernel void " << name << "(\n    " << params.str() << ") {\n#define src(w) (" << pick << ")\n"
      << head.str() << "#undef src\n}\n";
  k.source = src.str();
  return k;
}

/// A group whose one result is a strided view of one input (a chain of
/// Transpose, Slice and reshapes), copied a row at a time: each work-item
/// finds where its output rows start in the input (their coordinates
/// divided out once per row, not per element) and copies each row's W
/// elements in a loop, a plain copy where the innermost dim stays
/// innermost. For CPUs: on PoCL the element-per-work-item kernel divides
/// every coordinate out of its linear index in vector lanes that have no
/// integer division (kernel_roofline: BERT's head split 0.22-0.40 ms). Dims
/// that stay contiguous in the input are merged first, so rows are as long
/// as the view allows. Nothing when the group is not such a view.
std::optional<KernelSource> emitStridedRows(const Graph& g, const std::vector<NodeRef>& members, const std::string& name,
                                            const std::string& comment) {
  // Reshapes alone keep their bytes (views: chains of them are refused
  // below, a lone one copies element by element where a plan asks).
  const bool reshapesOnly = std::all_of(members.begin(), members.end(), [&](NodeRef n) { return keepsBytes(g, n); });
  const GroupBoundary boundary = groupBoundary(g, members);
  if (reshapesOnly || boundary.outputs.size() != 1) return std::nullopt;
  const ValueId out = boundary.outputs[0];
  std::vector<NodeRef> chain;
  Expected<detail::StridedView> read = detail::readView(g, out, std::set<NodeRef>(members.begin(), members.end()), chain);
  if (!read || chain.size() != members.size() || g.value(read->buffer).type.dtype != g.value(out).type.dtype) return std::nullopt;
  const std::string type = bitsType(g.value(out).type.dtype);
  const int64_t total = shapeNumel(read->shape);
  if (type.empty() || total <= 0 || total > std::numeric_limits<int32_t>::max()) return std::nullopt;
  // The view's dims without the ones of extent 1, neighbours merged where
  // the outer one steps over exactly the inner one's extent.
  Shape shape, strides;
  for (size_t k = 0; k < read->shape.size(); ++k) {
    if (read->shape[k] == 1) continue;
    if (!shape.empty() && strides.back() == read->strides[k] * read->shape[k]) {
      shape.back() *= read->shape[k];
      strides.back() = read->strides[k];
      continue;
    }
    shape.push_back(read->shape[k]);
    strides.push_back(read->strides[k]);
  }
  if (shape.empty()) shape = strides = {1};
  // A row so long that few work-items would share the copy (a Slice of
  // whole leading rows merges into one) is cut at a divisor.
  if (shape.back() > 1024)
    for (int64_t c = 1024; c >= 64; --c)
      if (shape.back() % c == 0) {
        const int64_t step = strides.back();
        shape.back() /= c;
        strides.back() = step * c;
        shape.push_back(c);
        strides.push_back(step);
        break;
      }
  const int64_t width = shape.back(), step = strides.back(), rows = total / width;
  // Rows per work-item: at least 64 elements each while 64 work-items remain.
  const int64_t perItem = std::clamp<int64_t>((64 + width - 1) / width, 1, std::max<int64_t>(1, rows / 64));
  const int64_t items = (rows + perItem - 1) / perItem;
  const Shape outer(shape.begin(), shape.end() - 1);
  const Shape outerStrides = stridesOf(outer);  // of the row index
  std::ostringstream src;
  src << "// " << comment << "\n// " << detail::Emitter::sanitize(g.value(out).name) << " as a strided view of "
      << detail::Emitter::sanitize(g.value(read->buffer).name)
      << ", copied " << width << " elements (one row) at a time, " << perItem << " row(s) per work-item.\n";
  src << "__kernel void " << name << "(\n    __global const " << type << "* restrict in0,\n    __global " << type
      << "* restrict out0) {\n";
  src << "  const int first = get_global_id(0) * " << perItem << ";\n";
  const std::string end = rows % perItem == 0 ? "first + " + std::to_string(perItem)
                                               : "min(first + " + std::to_string(perItem) + ", " + std::to_string(rows) + ")";
  src << "  for (int row = first; row < " << end << "; ++row) {\n";
  src << "    const long from = " << read->offset << "L";
  for (size_t k = 0; k < outer.size(); ++k)
    src << " + (long)((row / " << outerStrides[k] << ") % " << outer[k] << ") * " << strides[k] << "L";
  src << ";\n    __global " << type << "* restrict to = out0 + (long)row * " << width << ";\n";
  src << "    for (int j = 0; j < " << width << "; ++j) to[j] = in0[from + " << (step == 1 ? "j" : "(long)j * " + std::to_string(step) + "L")
      << "];\n  }\n}\n";
  KernelSource k;
  k.name = name;
  k.inputs = {read->buffer};
  k.outputs = {out};
  k.globalSize = static_cast<size_t>(items);
  k.source = src.str();
  return k;
}

}  // namespace

namespace {

/// concatSegments' rows form: work-item `item` takes a row (or a piece of
/// one) of one input, in order; `seg` has its row dims set.
std::optional<detail::SegmentedPrologue> concatRows(const Graph& g, const NodeData& d, int64_t axis,
                                                    const std::string& type, detail::SegmentedPrologue seg) {
  const Shape shape = g.value(d.outputs[0]).type.staticShape();
  int64_t inner = 1;
  for (size_t k = static_cast<size_t>(axis) + 1; k < shape.size(); ++k) inner *= shape[k];
  const int64_t R = seg.rows.length, pieces = seg.rows.pieces, total = shape[static_cast<size_t>(axis)] * inner / R;
  std::ostringstream head, params;
  head << "  const int item = get_global_id(0);\n  int row" << (pieces > 1 ? ", piece" : "") << ", q;\n"
       << "  __global const " << type << "* restrict seg;\n";
  int64_t first = 0, offset = 0;  // work-items and result rows (of the axis' run) before this input's
  for (ValueId in : d.inputs) {
    if (in == kNoValue || !g.value(in).type.isStatic() || g.value(in).type.dtype != g.value(d.outputs[0]).type.dtype)
      return std::nullopt;
    const Shape s = g.value(in).type.staticShape();
    const int64_t n = shapeNumel(s), run = s[static_cast<size_t>(axis)] * inner / R;  // its rows per outer index
    if (n == 0) continue;
    const std::string p = "in" + std::to_string(seg.inputs.size());
    params << (seg.inputs.empty() ? "" : ",\n    ") << "__global const " << type << "* restrict " << p;
    seg.inputs.push_back(in);
    const int64_t items = n / R * pieces;
    const std::string t = first ? "(item - " + std::to_string(first) + ")" : "item";
    head << "  " << (first ? "else " : "") << "if (item < " << first + items << ") {\n"
         << "    q = " << (pieces > 1 ? t + " / " + std::to_string(pieces) : t) << ";\n";
    if (pieces > 1) head << "    piece = " << t << " % " << pieces << ";\n";
    head << "    row = " << (run == total ? "q" : "(q / " + std::to_string(run) + ") * " + std::to_string(total) + " + " +
                                                 std::to_string(offset) + " + q % " + std::to_string(run))
         << ";\n    seg = " << p << ";\n  }\n";
    first += items;
    offset += run;
  }
  if (seg.inputs.empty()) return std::nullopt;
  head << "  else return;\n";
  seg.head = head.str();
  seg.params = params.str();
  seg.element = "  " + type + " " + seg.var + " = seg[q * " + std::to_string(R) + " + j];\n";
  seg.globalSize = static_cast<size_t>(first);
  seg.localSize = 0;
  return seg;
}

}  // namespace

std::optional<detail::SegmentedPrologue> detail::concatSegments(const Graph& g, NodeRef concat,
                                                                const std::vector<ValueId>& outputs,
                                                                const std::string& type, size_t rowDims) {
  constexpr int64_t kLocal = 64;
  const NodeData& d = g.node(concat);
  const ValueId out = d.outputs[0];
  const TensorType& t = g.value(out).type;
  if (!t.isStatic() || d.inputs.size() > 48) return std::nullopt;
  const Shape shape = t.staticShape();
  for (ValueId v : outputs)
    if (!g.value(v).type.isStatic() || g.value(v).type.staticShape() != shape) return std::nullopt;
  const Attribute* a = d.attr("axis");
  int64_t axis = a && std::holds_alternative<int64_t>(*a) ? std::get<int64_t>(*a) : 0;
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank || shapeNumel(shape) >= (int64_t{1} << 31)) return std::nullopt;
  int64_t inner = 1;
  for (int64_t k = axis + 1; k < rank; ++k) inner *= shape[static_cast<size_t>(k)];
  const int64_t total = shape[static_cast<size_t>(axis)];
  detail::SegmentedPrologue seg;
  seg.value = out;
  seg.var = "v" + std::to_string(out);
  // The rows form: rows within the inner dims, so each lies in one input.
  seg.rowDims = std::min<size_t>(rowDims, static_cast<size_t>(rank - 1 - axis));
  seg.rows = detail::RowPieces::of(shapeNumel(Shape(shape.end() - static_cast<std::ptrdiff_t>(seg.rowDims), shape.end())));
  if (seg.rows.length < detail::kMinRowLength) seg.rowDims = 0;
  if (seg.rowDims) return concatRows(g, d, axis, type, std::move(seg));
  std::ostringstream head, params;
  head << "  const int group = get_group_id(0), lane = get_local_id(0);\n  int i;\n  " << type << " " << seg.var << ";\n";
  int64_t firstGroup = 0, offset = 0;
  for (size_t k = 0; k < d.inputs.size(); ++k) {
    const ValueId in = d.inputs[k];
    if (!g.value(in).type.isStatic() || g.value(in).type.dtype != t.dtype) return std::nullopt;
    const Shape s = g.value(in).type.staticShape();
    const int64_t n = shapeNumel(s), extent = s[static_cast<size_t>(axis)];
    if (n == 0) continue;
    const int64_t groups = (n + kLocal - 1) / kLocal;
    const std::string p = "in" + std::to_string(seg.inputs.size());
    params << (seg.inputs.empty() ? "" : ",\n    ") << "__global const " << type << "* restrict " << p;
    seg.inputs.push_back(in);
    // Element j of input k sits at (j / (extent * inner)) * (total * inner) + offset * inner + j % (extent * inner).
    const std::string j = "(group - " + std::to_string(firstGroup) + ") * " + std::to_string(kLocal) + " + lane";
    const std::string block = std::to_string(extent * inner);
    const std::string where = extent == total ? "j" :
        "(j / " + block + ") * " + std::to_string(total * inner) + " + " + std::to_string(offset * inner) + " + j % " + block;
    head << "  " << (firstGroup ? "else " : "") << "if (group < " << firstGroup + groups << ") {\n"
         << "    const int j = " << j << ";\n    if (j >= " << n << ") return;\n"
         << "    i = " << where << ";\n    " << seg.var << " = " << p << "[j];\n  }\n";
    firstGroup += groups;
    offset += extent;
  }
  if (seg.inputs.empty()) return std::nullopt;
  head << "  else return;\n";
  seg.head = head.str();
  seg.params = params.str();
  seg.globalSize = static_cast<size_t>(firstGroup * kLocal);
  seg.localSize = static_cast<size_t>(kLocal);
  return seg;
}

bool isIndexMapOp(const Graph& g, NodeRef n) {
  const NodeData& d = g.node(n);
  return d.domain.empty() && ops().count(d.op.str());
}

Expected<KernelSource> emitIndexMap(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog&,
                                    const std::string& name, const std::string& comment, bool stridedRows) {
  if (members.empty() || !std::all_of(members.begin(), members.end(), [&](NodeRef n) { return isIndexMapOp(g, n); }))
    return Error{"group `" + name + "` has an op that is not data movement", true};
  if (stridedRows)
    if (std::optional<KernelSource> k = emitStridedRows(g, members, name, comment)) return std::move(k.value());
  if (stridedRows && members.size() > 1)
    if (std::optional<KernelSource> k = emitChainRows(g, members, name, comment)) return std::move(k.value());
  if (members.size() > 1) return emitIndexMapChain(g, members, name, comment);
  const NodeData& d = g.node(members[0]);
  if (d.op == "Split") return emitSplit(g, d, name, comment, stridedRows);
  if (d.op == "Concat" && d.outputs.size() == 1 && d.outputs[0] != kNoValue) {
    // Each work-group copies from one input (the per-element choice among
    // the inputs costs every vectorized work-item a masked load of each).
    // Rows of the dims after the axis are copied in a loop where they are
    // long enough (the rows form: DenseNet's and ShuffleNet's Concats).
    const std::string type = bitsType(g.value(d.outputs[0]).type.dtype);
    const size_t allAfterAxis = stridedRows ? std::numeric_limits<size_t>::max() : 0;
    if (!type.empty())
      if (std::optional<detail::SegmentedPrologue> seg =
              detail::concatSegments(g, members[0], {d.outputs[0]}, type, allAfterAxis)) {
        KernelSource k;
        k.name = name;
        k.inputs = seg->inputs;
        k.outputs = {d.outputs[0]};
        k.globalSize = seg->globalSize;
        k.localSize = seg->localSize;
        const std::string R = std::to_string(seg->rows.length);
        const std::string body =
            seg->rowDims ? seg->head + "  " + seg->rows.loop() + " out0[row * " + R + " + j] = seg[q * " + R + " + j];\n"
                         : seg->head + "  out0[i] = " + seg->var + ";\n";
        k.source = "// " + comment + "\n__kernel void " + name + "(\n    " + seg->params + ",\n    __global " + type +
                   "* restrict out0) {\n" + body + "}\n";
        return k;
      }
  }
  if (d.op == "CumSum") return emitCumSum(g, d, name, comment);
  if (d.op == "Resize") return emitResize(g, d, name, comment);
  if (d.outputs.size() != 1 || d.outputs[0] == kNoValue)
    return Error{"`" + d.op.str() + "` with several results has no kernel path", true};
  const ValueId out = d.outputs[0];
  const DType t = g.value(out).type.dtype;
  const std::string type = bitsType(t);
  if (type.empty()) return Error{"element type `" + std::string(dtypeName(t)) + "` has no kernel path", true};
  if (!g.value(out).type.isStatic()) return Error{"value `" + g.value(out).name + "` has no static shape", true};
  KernelSource k;
  k.name = name;
  k.outputs = {out};
  k.globalSize = static_cast<size_t>(shapeNumel(g.value(out).type.staticShape()));
  // Data operands are buffers; shape operands (constants folded into the
  // index arithmetic) are not, except Gather's indices and Pad's fill value.
  const std::string op = d.op.str();
  std::ostringstream params;
  std::map<size_t, size_t> paramOf;  // operand -> kernel parameter
  auto add = [&](size_t operand, const std::string& ty) {
    params << (k.inputs.empty() ? "" : ",\n    ") << "__global const " << ty << "* restrict in" << k.inputs.size();
    paramOf[operand] = k.inputs.size();
    k.inputs.push_back(d.inputs[operand]);
  };
  Builder b(g, d);
  b.read = [&](size_t operand, const std::string& offset) {
    return "in" + std::to_string(paramOf.at(operand)) + "[" + offset + "]";
  };
  if (Status st = dataOperands(g, d, b, [&](size_t j, DType t) { add(j, t == DType::Int32 ? "int" : t == DType::Int64 ? "long" : type); });
      !st)
    return st.error();
  std::ostringstream body;
  try {
    b.build(body);
  } catch (const UserError& e) {
    return Error{e.message, e.unsupported};
  }
  const std::string bodyText = body.str();
  std::ostringstream src;
  src << "// " << comment << "\n";
  src << "__kernel void " << name << "(\n    " << params.str() << ",\n    __global " << type << "* restrict out0) {\n";
  src << "  const long i = get_global_id(0);\n" << bodyText << "}\n";
  k.source = src.str();
  return k;
}

FUSEC_KERNEL_FAMILY(index_map) {
  return {"index_map",
          "data-movement ops (Reshape, Transpose, Expand, Tile, Slice, Concat, Gather, Pad, Split, "
          "Resize, ...) with static shapes: one op, or a group composed into one index map that moves each element once; "
          "on CPUs a group whose results are runs of its inputs (Concat, Split, Slice along outer axes, a Transpose keeping "
          "the trailing dims) copies a run per work-item",
          "it has an op that is not data movement",
          {"#e6e6e6", "#6b6b6b"},
          [](const Graph& g, const std::vector<NodeRef>& group, const OpCatalog&) {
            return std::all_of(group.begin(), group.end(), [&](NodeRef n) { return isIndexMapOp(g, n); });
          },
          [](const EmitRequest& r) {
            return emitIndexMap(r.graph, r.group, r.catalog, r.name, r.comment, r.options.stridedRowCopies);
          }};
}

}  // namespace fusec::codegen
