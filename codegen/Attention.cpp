/// The attention family; see Emitters.h.
#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "ElementwiseEmitter.h"
#include "StridedView.h"
#include "Emitters.h"
#include "FamilyRegistry.h"

namespace fusec::codegen {
namespace {

/// The pieces of an attention group, in the order its members compute them.
struct AttentionParts {
  ValueId q = kNoValue, kt = kNoValue, v = kNoValue, mask = kNoValue, out = kNoValue;
  ValueId scale = kNoValue;  // a constant scalar
  bool divide = false;       // Div by the scale, not Mul
  /// Where(cond, scores, fill) (or Where(cond, fill, scores): keepIf false)
  /// instead of an additive mask: a causal mask as GPT-2 exports it.
  ValueId cond = kNoValue, fill = kNoValue;
  bool keepIf = true;
};

bool isOp(const NodeData& d, std::string_view op) { return d.domain.empty() && d.op == op; }

/// `d`'s operand other than `x`, when `d` reads `x` as one of two operands.
ValueId otherOperand(const NodeData& d, ValueId x, bool firstOnly) {
  if (d.inputs.size() != 2) return kNoValue;
  if (d.inputs[0] == x) return d.inputs[1];
  if (!firstOnly && d.inputs[1] == x) return d.inputs[0];
  return kNoValue;
}

/// The group's structure: MatMul(q, kt) → [(Mul | Div) by a constant
/// scalar] → [Add(mask) or Where(cond, ·, a constant scalar)] → Softmax
/// over the last axis → MatMul(·, v), each result read only by the next;
/// an error naming what differs.
Expected<AttentionParts> attentionParts(const Graph& g, const std::vector<NodeRef>& members) {
  const Error shape{"it is not MatMul, a constant scale, an optional mask, Softmax over the last axis and MatMul", true};
  if (members.size() < 3) return shape;
  AttentionParts parts;
  const NodeData& first = g.node(members.front());
  if (!isOp(first, "MatMul") || first.inputs.size() != 2) return shape;
  parts.q = first.inputs[0];
  parts.kt = first.inputs[1];
  ValueId current = first.outputs[0];
  size_t at = 1;
  auto next = [&]() -> const NodeData* { return at < members.size() ? &g.node(members[at]) : nullptr; };
  if (const NodeData* d = next(); d && (isOp(*d, "Mul") || isOp(*d, "Div"))) {
    const ValueId s = otherOperand(*d, current, isOp(*d, "Div"));
    if (s == kNoValue || !g.isConstant(s) || g.value(s).constant->numel() != 1) return shape;
    parts.scale = s;
    parts.divide = isOp(*d, "Div");
    current = d->outputs[0];
    ++at;
  }
  if (const NodeData* d = next(); d && isOp(*d, "Add")) {
    parts.mask = otherOperand(*d, current, false);
    if (parts.mask == kNoValue) return shape;
    current = d->outputs[0];
    ++at;
  } else if (d && isOp(*d, "Where") && d->inputs.size() == 3 && d->inputs[0] != current &&
             (d->inputs[1] == current) != (d->inputs[2] == current)) {
    parts.cond = d->inputs[0];
    parts.keepIf = d->inputs[1] == current;
    parts.fill = d->inputs[parts.keepIf ? 2 : 1];
    if (!g.isConstant(parts.fill) || g.value(parts.fill).constant->numel() != 1 ||
        g.value(parts.fill).type.dtype != DType::Float32)
      return Error{"its Where does not fill with a constant float scalar", true};
    current = d->outputs[0];
    ++at;
  }
  const NodeData* softmax = next();
  if (!softmax || !isOp(*softmax, "Softmax") || softmax->inputs[0] != current) return shape;
  const TensorType& st = g.value(current).type;
  if (!st.dims) return shape;
  const int64_t rank = static_cast<int64_t>(st.dims->size());
  // Before opset 13 Softmax flattens from `axis` (default 1): the last axis alone only when it is the last.
  int64_t axis = softmax->attrInt("axis", g.info.defaultOpset() < 13 ? 1 : -1);
  if (axis < 0) axis += rank;
  if (axis != rank - 1) return Error{"its Softmax is not over the last axis (the keys)", true};
  current = softmax->outputs[0];
  ++at;
  const NodeData* context = next();
  if (!context || !isOp(*context, "MatMul") || context->inputs.size() != 2 || context->inputs[0] != current) return shape;
  parts.v = context->inputs[1];
  parts.out = context->outputs[0];
  if (at + 1 != members.size()) return shape;
  // The scores and probabilities stay in registers: nothing else may read them.
  for (size_t m = 0; m + 1 < members.size(); ++m)
    for (ValueId r : g.node(members[m]).outputs)
      if (r != kNoValue && (g.uses(r).size() != 1 || g.isGraphOutput(r)))
        return Error{"`" + g.value(r).name + "` is read outside the group; the attention kernel keeps it in registers", true};
  return parts;
}

/// The largest of 16, 8 and 4 that divides n; 0 when none does.
int vectorWidth(int64_t n) {
  for (int w : {16, 8, 4})
    if (n % w == 0) return w;
  return 0;
}

/// `op` (fmax or +) over the lanes of the float`width` expression `x`.
std::string horizontal(const std::string& op, const std::string& x, int width) {
  std::string v = x;
  for (int w = width; w > 1; w /= 2) {
    const std::string lo = "(" + v + ")" + (w == 2 ? ".x" : ".lo"), hi = "(" + v + ")" + (w == 2 ? ".y" : ".hi");
    v = op == "+" ? "(" + lo + " + " + hi + ")" : op + "(" + lo + ", " + hi + ")";
  }
  return v;
}

/// The members that compute (the rest are views on Q, K, V or the result).
std::vector<NodeRef> computing(const Graph& g, const std::vector<NodeRef>& members) {
  std::vector<NodeRef> core;
  for (NodeRef n : members)
    if (!detail::isViewOp(g.node(n))) core.push_back(n);
  return core;
}

/// The offset of batch `bt`'s matrix in a view with the batch dims `batch`.
std::string batchOffset(const detail::StridedView& view, const Shape& batch) {
  std::string s = std::to_string(view.offset);
  int64_t inner = 1;
  for (size_t k = batch.size(); k-- > 0;) {
    if (batch[k] != 1 && view.strides[k] != 0)
      s += " + ((bt / " + std::to_string(inner) + ") % " + std::to_string(batch[k]) + ") * " + std::to_string(view.strides[k]);
    inner *= batch[k];
  }
  return s;
}

/// `base[i * stride]`, without the multiplication by 1.
std::string at(const std::string& base, const std::string& i, int64_t stride) {
  return base + "[" + (stride == 1 ? i : "(" + i + ") * " + std::to_string(stride)) + "]";
}

}  // namespace

bool isAttentionGroup(const Graph& g, const std::vector<NodeRef>& members) {
  const std::vector<NodeRef> core = computing(g, members);
  return core.size() >= 3 && isOp(g.node(core.front()), "MatMul") && isOp(g.node(core.back()), "MatMul") &&
         std::any_of(core.begin(), core.end(), [&](NodeRef n) { return isOp(g.node(n), "Softmax"); });
}

Expected<KernelSource> emitAttention(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog&,
                                     const std::string& name, const std::string& comment, const AttentionForm& form) {
  const bool ownedKeys = form.ownedKeys;
  const std::vector<NodeRef> core = computing(g, members);
  Expected<AttentionParts> parts = attentionParts(g, core);
  if (!parts) return parts.error();
  for (ValueId v : {parts->q, parts->kt, parts->v, parts->out, parts->mask}) {
    if (v == kNoValue) continue;
    const TensorType& t = g.value(v).type;
    if (!t.isStatic() || t.dtype != DType::Float32 || t.dims->size() < 2)
      return Error{"attention on `" + g.value(v).name + "` (not float32 with a static shape of rank >= 2) has no kernel path",
                   true};
  }
  if (parts->cond != kNoValue) {
    const TensorType& t = g.value(parts->cond).type;
    if (!t.isStatic() || t.dtype != DType::Bool)
      return Error{"attention's Where condition `" + g.value(parts->cond).name + "` is not bool with a static shape", true};
  }
  const Shape qs = g.value(parts->q).type.staticShape(), ks = g.value(parts->kt).type.staticShape(),
              vs = g.value(parts->v).type.staticShape(), os = g.value(parts->out).type.staticShape();
  const size_t rank = qs.size();
  if (ks.size() != rank || vs.size() != rank || os.size() != rank ||
      !std::equal(qs.begin(), qs.end() - 2, ks.begin()) || !std::equal(qs.begin(), qs.end() - 2, vs.begin()))
    return Error{"attention needs Q, Kt and V with the same batch dims (no broadcasting)", true};
  const int64_t Sq = qs[rank - 2], D = qs[rank - 1], Sk = ks[rank - 1], Dv = vs[rank - 1];
  if (ks[rank - 2] != D || vs[rank - 2] != Sk) return Error{"attention operands of mismatched sizes", true};
  if (Sk == 0 || Sq == 0) return Error{"attention over no keys or no queries has no kernel path", true};
  const Shape batch(qs.begin(), qs.end() - 2);
  const int64_t batches = shapeNumel(batch);
  // Q, K and V read through the view chains before them (the heads of a
  // packed projection: Slice, Reshape, Transpose), the result written
  // through the chain after it (the heads merged): no copies.
  const std::set<NodeRef> views(members.begin(), members.end());
  std::vector<NodeRef> chained;
  Expected<detail::StridedView> qView = detail::readView(g, parts->q, views, chained);
  if (!qView) return qView.error();
  Expected<detail::StridedView> kView = detail::readView(g, parts->kt, views, chained);
  if (!kView) return kView.error();
  Expected<detail::StridedView> vView = detail::readView(g, parts->v, views, chained);
  if (!vView) return vView.error();
  Expected<detail::StridedView> oView = detail::writeView(g, parts->out, views, chained);
  if (!oView) return oView.error();
  if (chained.size() + core.size() != members.size())
    return Error{"a view op of the group is on none of the chains into Q, K and V or out of the result", true};
  for (const detail::StridedView* view : {&qView.value(), &kView.value(), &vView.value(), &oView.value()}) {
    if (g.value(view->buffer).type.dtype != DType::Float32 || !g.value(view->buffer).type.isStatic())
      return Error{"attention reads and writes float32 buffers with static shapes", true};
    const int64_t size = shapeNumel(g.value(view->buffer).type.staticShape());
    if (size > std::numeric_limits<int32_t>::max())
      return Error{"attention on a buffer of 2^31 elements or more has no kernel path", true};
    // Every element the kernel touches lies inside its buffer.
    int64_t last = view->offset;
    for (size_t k = 0; k < view->shape.size(); ++k) {
      if (view->strides[k] < 0) return Error{"attention through a view that steps backwards has no kernel path", true};
      last += (view->shape[k] - 1) * view->strides[k];
    }
    if (view->offset < 0 || last >= size)
      return Error{"a view of `" + g.value(view->buffer).name + "` reaches outside it", false};
  }
  const int64_t qS = qView->strides[rank - 2], qD = qView->strides[rank - 1];
  int64_t kD = kView->strides[rank - 2], kS = kView->strides[rank - 1];
  const int64_t vS = vView->strides[rank - 2], vD = vView->strides[rank - 1];
  const int64_t oS = oView->strides[rank - 2], oD = oView->strides[rank - 1];
  // Keys a block at a time (the last block of a count that no width
  // divides, ViT's 197, is partial), and V's rows as vectors.
  const int VW = vectorWidth(Dv);
  const int KB = vectorWidth(Sk) ? vectorWidth(Sk) : Sk >= 16 ? 16 : Sk >= 8 ? 8 : 4;
  if (VW == 0 || Dv / VW > 16)
    return Error{"attention needs a head size that is a multiple of 4 and at most 16 vectors (it is " + std::to_string(Dv) + ")",
                 true};
  // The mask (or Where's condition), broadcast to the scores [batch...,
  // Sq, Sk]: its offset for a row, and whether it varies along the keys.
  std::string maskRow = "0";
  bool maskAlongKeys = false;
  const ValueId mask = parts->mask != kNoValue ? parts->mask : parts->cond;
  if (mask != kNoValue) {
    Shape scores(qs.begin(), qs.end() - 1);
    scores.push_back(Sk);
    const Shape ms = g.value(mask).type.staticShape();
    if (ms.size() > rank) return Error{"the attention mask has a higher rank than the scores", true};
    const Shape mst = stridesOf(ms), sst = stridesOf(scores);
    const size_t lead = rank - ms.size();
    for (size_t d = 0; d < ms.size(); ++d) {
      const size_t sd = d + lead;
      if (ms[d] != 1 && ms[d] != scores[sd]) return Error{"the attention mask does not broadcast to the scores", true};
      if (ms[d] == 1 || sd == rank - 1) continue;
      // The row's coordinate along this dim, from its index r = batch * Sq + i.
      maskRow += " + ((r / " + std::to_string(sst[sd] / Sk) + ") % " + std::to_string(scores[sd]) + ") * " +
                 std::to_string(mst[d]);
    }
    maskAlongKeys = !ms.empty() && ms.back() != 1;  // a scalar mask is one value for every score
  }
  const float fill = parts->fill != kNoValue ? g.value(parts->fill).constant->toFloats().at(0) : 0.0f;
  double scale = 1;
  if (parts->scale != kNoValue) {
    const std::vector<float> sv = g.value(parts->scale).constant->toFloats();
    scale = sv.at(0);
  }

  // Keys as rows (K not transposed in memory: the heads of a projection
  // [tokens, heads x D]): each score is a dot product along the head, Q's
  // rows held as vectors, each summed across its lanes.
  const int QW = vectorWidth(D);
  bool keyRows = kS != 1 && kD == 1 && qD == 1 && QW > 0 && D / QW <= 16;
  // Where local memory is emulated (ownedKeys: a CPU), such keys are
  // transposed instead, once per work-item, into its local memory, and
  // each work-item computes a chunk of its batch's row groups from them,
  // a block of keys per vector load with no sums across lanes (the
  // transposition costs D x Sk moves per work-item). On an AVX2 PoCL
  // device, three alternating runs: BERT-base's attention (its heads views
  // of the projections) 1.95-2.29 -> 1.21-1.34 ms; ViT-B/16's twelve
  // (197 keys) 88 -> 37 ms, the model 395 -> 342 ms.
  const int64_t SkPad = (Sk + KB - 1) / KB * KB;
  const bool own = ownedKeys && kS != 1 && D * SkPad * 4 <= 256 * 1024;
  if (own) keyRows = false;

  // Rows of queries per work-item: each key block and V row loaded is used
  // for all of them (one row: two loads per FMA, 45 GFLOP/s on BERT-base).
  // A count the rows do not divide (ViT's 197) still takes as many per
  // work-item: the last work-item of each batch repeats the batch's last
  // row past its end and does not store it.
  //
  // With form.scoreRows (a CPU), a work-item holds its rows' whole rows of
  // scores in private memory (up to kScoreBytes; keys read as vectors,
  // given transposed or owned): it computes its query rows' scores against
  // every key, then each row's maximum, exponentials and sum once, then
  // the products with V a vector of V's columns at a time, each
  // probability a broadcast load. No running maximum to correct the sums
  // and results by, no lanes moved out of registers. BERT-base's attention
  // (keys owned) on the build machine's PoCL (AVX-512): 0.34 ms online, 4
  // rows -> 0.25 ms as rows of scores, 4 rows; 0.23 with 8, 0.21 with 16.
  constexpr int64_t kScoreBytes = 16384;  // half a 32 KiB L1
  const int64_t rowsFit = kScoreBytes / (SkPad * static_cast<int64_t>(sizeof(float)));
  const int scoreRows = form.scoreRows > 0 && rowsFit >= 4 && (kS == 1 || own)
                            ? static_cast<int>(std::min<int64_t>({form.scoreRows, rowsFit, Sq}))
                            : 0;
  const int QR = scoreRows > 0 ? scoreRows : Sq >= 4 ? 4 : Sq >= 2 ? 2 : 1;
  const int64_t W = (Sq + QR - 1) / QR;  // groups of QR rows per batch
  int64_t chunks = 1, perChunk = W;      // chunks of row groups per batch, row groups per chunk
  if (own) {
    constexpr int64_t kWantedItems = 16;
    chunks = std::clamp<int64_t>((kWantedItems + batches - 1) / batches, 1, W);
    perChunk = (W + chunks - 1) / chunks;
    chunks = (W + perChunk - 1) / perChunk;
  }
  KernelSource k;
  k.name = name;
  // One parameter per buffer: a packed projection is Q, K and V at once.
  std::map<ValueId, size_t> param;
  for (ValueId b : {qView->buffer, kView->buffer, vView->buffer})
    if (param.emplace(b, k.inputs.size()).second) k.inputs.push_back(b);
  const size_t maskParam = k.inputs.size();
  if (mask != kNoValue) k.inputs.push_back(mask);
  k.outputs = {oView->buffer};
  auto in = [&](ValueId b) { return "in" + std::to_string(param.at(b)); };
  k.globalSize = static_cast<size_t>(batches * (own ? chunks : W));
  if (own) {
    k.localSize = 1;
    k.localMemBytes = static_cast<size_t>(D * SkPad) * sizeof(float);
  }
  const std::string kv = "float" + std::to_string(KB), vv = "float" + std::to_string(VW);
  const int64_t VC = Dv / VW;  // V's row in vectors
  static const char* kLanes = "0123456789abcdef";
  std::ostringstream src;
  src << "// " << comment << "\n";
  src << "// Attention: " << batches << " x " << Sq << " queries of " << D << " against " << Sk << " keys, values of " << Dv
      << ";\n// each work-item computes " << QR << " query row(s), " << KB
      << (scoreRows > 0 ? " keys at a time, their rows of scores kept in private memory.\n"
                        : " keys at a time, with a running maximum and sum per row (online softmax).\n");
  src << detail::Emitter::prelude() << detail::Emitter::vectorExp(KB);
  src << "__kernel " << (own ? "__attribute__((reqd_work_group_size(1, 1, 1))) " : "") << "void " << name << "(\n";
  for (size_t i = 0; i < maskParam; ++i) src << "    __global const float* restrict in" << i << ",\n";
  if (mask != kNoValue)
    src << "    __global const " << (parts->cond != kNoValue ? "uchar" : "float") << "* restrict in" << maskParam << ",\n";
  src << "    __global float* restrict out0) {\n";
  if (own) {
    // Kt's D rows of SkPad keys (zero past the last), from K's rows.
    src << "  const int gid = get_global_id(0), bt = gid / " << chunks << ", chunk = gid % " << chunks << ";\n";
    src << "  __local float kl[" << D * SkPad << "];\n";
    src << "  {\n    const __global float* kg = " << in(kView->buffer) << " + " << batchOffset(*kView, batch) << ";\n";
    src << "    for (int j = 0; j < " << SkPad << "; ++j)\n";
    src << "      for (int d = 0; d < " << D << "; ++d) kl[d * " << SkPad << " + j] = j < " << Sk << " ? kg[j * " << kS
        << " + d * " << kD << "] : 0.0f;\n  }\n";
    src << "  for (int i0 = chunk * " << perChunk * QR << "; i0 < min(" << W * QR << ", (chunk + 1) * " << perChunk * QR
        << "); i0 += " << QR << ") {\n";
    kD = SkPad;
    kS = 1;
  } else {
    src << "  const int gid = get_global_id(0), bt = gid / " << W << ", i0 = (gid % " << W << ") * " << QR << ";\n";
  }
  for (int t = 0; t < QR; ++t) {
    // Row t: its index over batch and queries, the last row past the end.
    const std::string n = std::to_string(t);
    src << "  const int row" << n << " = " << (Sq % QR == 0 ? "i0 + " + n : "min(i0 + " + n + ", " + std::to_string(Sq - 1) + ")")
        << (detail::Emitter::names(maskRow, "r") ? ", r" + n + " = bt * " + std::to_string(Sq) + " + row" + n : std::string())
        << ";\n";
    src << "  const __global float* q" << n << " = " << in(qView->buffer) << " + " << batchOffset(*qView, batch) << " + row" << n
        << " * " << qS << ";\n";
  }
  if (own) src << "  const __local float* kt = kl;\n";
  else src << "  const __global float* kt = " << in(kView->buffer) << " + " << batchOffset(*kView, batch) << ";\n";
  src << "  const __global float* v = " << in(vView->buffer) << " + " << batchOffset(*vView, batch) << ";\n";
  src << "  __global float* o = out0 + " << batchOffset(*oView, batch) << ";\n";
  if (keyRows)
    for (int t = 0; t < QR; ++t)
      for (int64_t c = 0; c < D / QW; ++c)
        src << "  const float" << QW << " qv" << t << "_" << c << " = vload" << QW << "(" << c << ", q" << t << ");\n";
  for (int t = 0; t < QR; ++t) {
    const std::string n = std::to_string(t);
    if (mask != kNoValue) {
      std::string row = maskRow;
      for (size_t pos = row.find("(r /"); pos != std::string::npos; pos = row.find("(r /", pos + 1))
        row.replace(pos, 4, "(r" + n + " /");
      src << "  const __global " << (parts->cond != kNoValue ? "uchar" : "float") << "* mask" << n << " = in" << maskParam << " + "
          << row << ";\n";
    }
    if (scoreRows > 0) continue;
    src << "  float m" << n << " = -INFINITY, l" << n << " = 0.0f;\n";
    for (int64_t c = 0; c < VC; ++c) src << "  " << vv << " acc" << n << "_" << c << " = (" << vv << ")(0.0f);\n";
  }
  if (scoreRows > 0) {
    src << "  float sc[" << QR * SkPad << "];  // the rows' scores, then their exponentials\n";
    for (int t = 0; t < QR; ++t) src << "  " << kv << " mx" << t << " = (" << kv << ")(-INFINITY);\n";
  }
  // V's row at `base` + `offset` (its first element), vector c of it.
  auto vRow = [&](const std::string& base, const std::string& offset, int64_t c) {
    if (vD == 1) return "vload" + std::to_string(VW) + "(" + std::to_string(c) + ", " + base + " + " + offset + ")";
    std::string row = "(" + vv + ")(";
    for (int e = 0; e < VW; ++e)
      row += (e ? ", " : "") + base + "[" + offset + " + " + std::to_string((c * VW + e) * vD) + "]";
    return row + ")";
  };
  // Stores vector c of row t's result, `value`; a row past the batch's
  // last (when QR does not divide Sq) is not stored.
  auto store = [&](int t, int64_t c, const std::string& value, const std::string& indent) {
    const bool past = Sq % QR != 0 && t > 0;
    const std::string row = "o + row" + std::to_string(t) + " * " + std::to_string(oS);
    src << indent << (past ? "if (i0 + " + std::to_string(t) + " < " + std::to_string(Sq) + ") " : std::string());
    if (oD == 1) {
      src << "vstore" << VW << "(" << value << ", " << c << ", " << row << ");\n";
    } else {
      src << "{ const " << vv << " res = " << value << ";";
      for (int e = 0; e < VW; ++e) src << " (" << row << ")[" << (c * VW + e) * oD << "] = res.s" << kLanes[e] << ";";
      src << " }\n";
    }
  };
  // One block of keys from j0, of which the first T are keys (T < KB only
  // in the tail past the last whole block: its lanes beyond are read as
  // nothing, score -inf, and add nothing).
  auto block = [&](int T, const std::string& indent) {
    auto lanes = [&](const std::string& type, const std::function<std::string(int)>& at, const char* none) {
      std::string v = "(" + type + ")(";
      for (int l = 0; l < KB; ++l) v += (l ? ", " : "") + (l < T ? at(l) : std::string(none));
      return v + ")";
    };
    // The block's scores: Kt's row d holds every key's d-th element.
    if (keyRows) {
      // Key l's row: D contiguous elements; its score with each query row.
      const std::string qw = "float" + std::to_string(QW);
      for (int l = 0; l < T; ++l) {
        src << indent << "const __global float* k" << l << " = kt + (j0 + " << l << ") * " << kS << ";\n";
        for (int t = 0; t < QR; ++t) {
          std::string dot = "qv" + std::to_string(t) + "_0 * vload" + std::to_string(QW) + "(0, k" + std::to_string(l) + ")";
          for (int64_t c = 1; c < D / QW; ++c)
            dot = "fma(qv" + std::to_string(t) + "_" + std::to_string(c) + ", vload" + std::to_string(QW) + "(" +
                  std::to_string(c) + ", k" + std::to_string(l) + "), " + dot + ")";
          src << indent << "const " << qw << " dk" << t << "_" << l << " = " << dot << ";\n";
        }
      }
      for (int t = 0; t < QR; ++t)
        src << indent << kv << " s" << t << " = "
            << lanes(kv, [&](int l) { return horizontal("+", "dk" + std::to_string(t) + "_" + std::to_string(l), QW); }, "0.0f")
            << ";\n";
    } else {
      for (int t = 0; t < QR; ++t) src << indent << kv << " s" << t << " = (" << kv << ")(0.0f);\n";
      src << indent << "for (int d = 0; d < " << D << "; ++d) {\n";
      const std::string kd =
          T == KB && kS == 1 ? "vload" + std::to_string(KB) + "(0, kt + d * " + std::to_string(kD) + " + j0)"
                             : lanes(kv, [&](int l) { return at("kt", "d * " + std::to_string(kD) + " + (j0 + " + std::to_string(l) + ") * " +
                                                                   std::to_string(kS), 1); }, "0.0f");
      src << indent << "  const " << kv << " kd = " << kd << ";\n";
      for (int t = 0; t < QR; ++t)
        src << indent << "  s" << t << " = fma((" << kv << ")(" << at("q" + std::to_string(t), "d", qD) << "), kd, s" << t << ");\n";
      src << indent << "}\n";
    }
    for (int t = 0; t < QR; ++t) {
      const std::string n = std::to_string(t), sN = "s" + n;
      auto maskLanes = [&](const std::string& type) {
        return lanes(type, [&](int l) { return "mask" + n + "[j0 + " + std::to_string(l) + "]"; }, "0");
      };
      if (parts->scale != kNoValue)
        src << indent << sN << " = " << sN << (parts->divide ? " / " : " * ") << detail::floatLiteral(scale) << ";\n";
      if (parts->mask != kNoValue)
        src << indent << sN << " = " << sN << " + "
            << (!maskAlongKeys ? "mask" + n + "[0]"
                : T == KB      ? "vload" + std::to_string(KB) + "(0, mask" + n + " + j0)"
                               : maskLanes(kv)) << ";\n";
      if (parts->cond != kNoValue) {
        // Where: the score where the condition holds (keepIf), else the fill.
        const std::string iv = "int" + std::to_string(KB);
        const std::string c = !maskAlongKeys ? "(" + iv + ")(mask" + n + "[0])"
                              : T == KB      ? "convert_" + iv + "(vload" + std::to_string(KB) + "(0, mask" + n + " + j0))"
                                             : maskLanes(iv);
        src << indent << sN << " = select(" << sN << ", (" << kv << ")(" << detail::floatLiteral(fill) << "), " << c
            << (parts->keepIf ? " == 0" : " != 0") << ");\n";
      }
      if (T < KB) src << indent << sN << " = " << lanes(kv, [&](int l) { return sN + ".s" + kLanes[l]; }, "-INFINITY") << ";\n";
      if (scoreRows > 0) {
        src << indent << "mx" << n << " = fmax(mx" << n << ", " << sN << ");\n";
        src << indent << "vstore" << KB << "(" << sN << ", 0, sc + " << t * SkPad << " + j0);\n";
        continue;
      }
      // Online softmax: rescale what was summed so far to the new maximum.
      // While every score so far is -inf (keys masked out with -inf, as
      // left padding is), the sums stay 0 rather than exp(-inf - -inf).
      src << indent << "const float mn" << n << " = fmax(m" << n << ", " << horizontal("fmax", sN, KB) << ");\n";
      src << indent << "const float base" << n << " = mn" << n << " == -INFINITY ? 0.0f : mn" << n << ";\n";
      src << indent << "const float corr" << n << " = fusec_exp(m" << n << " - base" << n << ");\n";
      src << indent << "const " << kv << " p" << n << " = fusec_exp" << KB << "(" << sN << " - base" << n << ");\n";
      src << indent << "l" << n << " = fma(l" << n << ", corr" << n << ", " << horizontal("+", "p" + n, KB) << ");\n";
      src << indent << "m" << n << " = mn" << n << ";\n";
      for (int64_t c = 0; c < VC; ++c) src << indent << "acc" << n << "_" << c << " *= corr" << n << ";\n";
    }
    if (scoreRows > 0) return;
    src << indent << "const __global float* vb = v + j0 * " << vS << ";\n";
    for (int jj = 0; jj < T; ++jj)
      for (int64_t c = 0; c < VC; ++c) {
        src << indent << "{\n" << indent << "  const " << vv << " vr = " << vRow("vb", std::to_string(jj * vS), c) << ";\n";
        for (int t = 0; t < QR; ++t)
          src << indent << "  acc" << t << "_" << c << " = fma((" << vv << ")(p" << t << ".s" << kLanes[jj] << "), vr, acc" << t
              << "_" << c << ");\n";
        src << indent << "}\n";
      }
  };
  const int64_t whole = Sk / KB * KB;
  src << "  for (int j0 = 0; j0 < " << whole << "; j0 += " << KB << ") {\n";
  block(KB, "    ");
  src << "  }\n";
  if (whole < Sk) {
    src << "  {\n    const int j0 = " << whole << ";  // the last " << Sk - whole << " keys\n";
    block(static_cast<int>(Sk - whole), "    ");
    src << "  }\n";
  }
  if (scoreRows > 0) {
    // Each row's maximum, its exponentials (in place of its scores) and
    // their sum, then the products with V a vector of V's columns at a time.
    for (int t = 0; t < QR; ++t) {
      const std::string n = std::to_string(t);
      src << "  const float mn" << n << " = " << horizontal("fmax", "mx" + n, KB) << ";\n";
      src << "  const float base" << n << " = mn" << n << " == -INFINITY ? 0.0f : mn" << n << ";\n";
      src << "  " << kv << " sum" << n << " = (" << kv << ")(0.0f);\n";
    }
    src << "  for (int j0 = 0; j0 < " << SkPad << "; j0 += " << KB << ") {\n";
    for (int t = 0; t < QR; ++t) {
      const std::string n = std::to_string(t), at = "sc + " + std::to_string(t * SkPad) + " + j0";
      src << "    const " << kv << " p" << n << " = fusec_exp" << KB << "(vload" << KB << "(0, " << at << ") - base" << n << ");\n";
      src << "    sum" << n << " += p" << n << ";\n";
      src << "    vstore" << KB << "(p" << n << ", 0, " << at << ");\n";
    }
    src << "  }\n";
    for (int t = 0; t < QR; ++t)
      src << "  const float l" << t << " = " << horizontal("+", "sum" + std::to_string(t), KB) << ";\n";
    for (int64_t c = 0; c < VC; ++c) {
      src << "  {\n";
      for (int t = 0; t < QR; ++t) src << "    " << vv << " a" << t << " = (" << vv << ")(0.0f);\n";
      src << "    for (int j = 0; j < " << Sk << "; ++j) {\n";
      src << "      const " << vv << " vr = " << vRow("v", "j * " + std::to_string(vS), c) << ";\n";
      for (int t = 0; t < QR; ++t)
        src << "      a" << t << " = fma((" << vv << ")(sc[" << t * SkPad << " + j]), vr, a" << t << ");\n";
      src << "    }\n";
      for (int t = 0; t < QR; ++t) store(t, c, "a" + std::to_string(t) + " / l" + std::to_string(t), "    ");
      src << "  }\n";
    }
  } else {
    for (int t = 0; t < QR; ++t)
      for (int64_t c = 0; c < VC; ++c)
        store(t, c, "acc" + std::to_string(t) + "_" + std::to_string(c) + " / l" + std::to_string(t), "  ");
  }
  if (own) src << "  }\n";
  src << "}\n";
  k.source = src.str();
  return k;
}

FUSEC_KERNEL_FAMILY(attention) {
  return {"attention",
          "MatMul(Q, Kt), a constant scale (Mul or Div), an optional mask (added, or a Where filling with a "
          "constant), Softmax over the keys "
          "and MatMul with V (float32, static shapes, one batch shape), as one kernel: an online softmax over blocks "
          "of keys, the scores kept in registers (on a CPU, whole rows of scores in a work-item's private memory, a "
          "softmax in two passes); Q, Kt and V may be read through chains of view ops (Slice, Reshape, "
          "Transpose, ...) and the result written through Transposes and reshapes, as strided views",
          "it is not MatMul, a constant scale, an optional mask, Softmax and MatMul",
          {"#f7d9e3", "#b23a62"},
          [](const Graph& g, const std::vector<NodeRef>& group, const OpCatalog&) { return isAttentionGroup(g, group); },
          [](const EmitRequest& r) {
            return emitAttention(r.graph, r.group, r.catalog, r.name, r.comment, r.options.attention);
          }};
}

}  // namespace fusec::codegen
