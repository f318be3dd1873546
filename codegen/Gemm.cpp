/// The gemm_epilogue family; see Gemm.h.
#include "fusec/codegen/Gemm.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include "ElementwiseEmitter.h"
#include "fusec/engine/Window.h"
#include "FamilyRegistry.h"

namespace fusec::codegen {
namespace {

/// The product's geometry: A(m, k) = a[m * am + k * ak], B(k, n) = b[k * bk + n * bn]
/// within one matrix of each operand; batch dims broadcast to the result's.
///
/// A Conv is the same product (implicit GEMM): A is the weights, one row per
/// output channel of a group; B is the input seen through the window
/// (im2col, gathered as the tiles are loaded, zero in the padding): row
/// k = (ci, ky, kx), column n = (oy, ox). Batches are (image, group).
/// A 3-D conv adds its depth: k = (ci, kz, ky, kx), n = (oz, oy, ox).
struct Geometry {
  int64_t M = 1, N = 1, K = 1;
  int64_t am = 0, ak = 1, bk = 0, bn = 1;
  Shape batch;                  // the result's batch dims
  Shape aBatch, bBatch;         // each operand's batch dims (numpy broadcasting)
  float alpha = 1, beta = 1;
  ValueId c = kNoValue;         // Gemm's addend, Conv's bias
  bool conv = false, im2col = false;  // im2col: B needs the window gather (not a 1x1 stride-1 unpadded conv)
  int64_t groups = 1, H = 1, Wd = 1, KH = 1, KW = 1, SH = 1, SW = 1, DH = 1, DW = 1, PH = 0, PW = 0, OW = 1;
  int64_t aMatrix = 0, bImage = 0, bGroup = 0;  // conv operand strides per image and group
  // A 3-D conv's depth: the input's, the taps, stride, dilation and leading
  // pad along it, the output's depth and rows per depth slice. 1 and 0 for
  // 1-D and 2-D convs, whose kernels never name them.
  int64_t D = 1, KD = 1, SD = 1, DD = 1, PD = 0, OD = 1, OH = 1;
  bool threeD = false;
  /// Whether the conv has a depth, which the 2-D forms (depthwise, Winograd,
  /// prologues, shortcuts) do not take: only the implicit GEMM does. Any
  /// 3-D conv, a depth of 1 too: those forms read the result's dims as
  /// (N, C, H, W).
  bool volume() const { return threeD; }
  /// The window's taps: the rows of K per input channel.
  int64_t taps() const { return KD * KH * KW; }
};

Expected<Geometry> convGeometry(const Graph& g, const NodeData& d) {
  Geometry geo;
  geo.conv = true;
  const Shape xs = g.value(d.inputs[0]).type.staticShape(), ws = g.value(d.inputs[1]).type.staticShape();
  if (xs.size() < 3 || xs.size() > 5) return Error{"Conv over more than 3 spatial dims is not tiled", true};
  if (ws.size() != xs.size()) return Error{"Conv weights must have the input's rank", true};
  const Shape spatial(xs.begin() + 2, xs.end()), kernel(ws.begin() + 2, ws.end());
  Expected<WindowGeometry> w = windowGeometry(d, spatial, kernel, false);
  if (!w) return Error{"Conv `" + d.name + "`: " + w.error().message, true};
  geo.groups = d.attrInt("group", 1);
  const int64_t cin = xs[1], cout = ws[0];
  if (geo.groups <= 0 || cin % geo.groups || cout % geo.groups || ws[1] != cin / geo.groups)
    return Error{"Conv `" + d.name + "`: channels do not divide into its groups", true};
  // The window's dims from the innermost: width, then height, then depth.
  const size_t dims = spatial.size(), x = dims - 1;
  geo.Wd = spatial[x];
  geo.KW = kernel[x];
  geo.SW = w->strides[x];
  geo.DW = w->dilations[x];
  geo.PW = w->padBegin[x];
  geo.OW = w->out[x];
  if (dims >= 2) {
    geo.H = spatial[x - 1];
    geo.KH = kernel[x - 1];
    geo.SH = w->strides[x - 1];
    geo.DH = w->dilations[x - 1];
    geo.PH = w->padBegin[x - 1];
    geo.OH = w->out[x - 1];
  }
  if (dims == 3) {
    geo.threeD = true;
    geo.D = spatial[0];
    geo.KD = kernel[0];
    geo.SD = w->strides[0];
    geo.DD = w->dilations[0];
    geo.PD = w->padBegin[0];
    geo.OD = w->out[0];
  }
  const int64_t plane = geo.D * geo.H * geo.Wd;  // one input channel
  geo.M = cout / geo.groups;
  geo.K = (cin / geo.groups) * geo.taps();
  geo.N = w->outSize();
  geo.am = geo.K;
  geo.batch = {xs[0], geo.groups};
  geo.aMatrix = geo.M * geo.K;
  geo.bImage = cin * plane;
  geo.bGroup = (cin / geo.groups) * plane;
  const bool pointwise = geo.taps() == 1 && geo.SD == 1 && geo.SH == 1 && geo.SW == 1 && geo.PD == 0 && geo.PH == 0 &&
                         geo.PW == 0 && w->padEnd == Shape(w->padEnd.size(), 0);
  geo.im2col = !pointwise;
  geo.bk = plane;  // a 1x1 conv reads channel planes as B's rows
  if (d.inputs.size() > 2 && d.inputs[2] != kNoValue) geo.c = d.inputs[2];
  return geo;
}

Expected<Geometry> geometry(const Graph& g, const NodeData& d) {
  if (d.op == "Conv") return convGeometry(g, d);
  Geometry geo;
  const Shape as = g.value(d.inputs[0]).type.staticShape(), bs = g.value(d.inputs[1]).type.staticShape();
  if (d.op == "Gemm") {
    if (as.size() != 2 || bs.size() != 2) return Error{"Gemm operands must be matrices", true};
    const bool ta = d.attrInt("transA", 0) != 0, tb = d.attrInt("transB", 0) != 0;
    geo.M = ta ? as[1] : as[0];
    geo.K = ta ? as[0] : as[1];
    geo.N = tb ? bs[0] : bs[1];
    geo.am = ta ? 1 : as[1];
    geo.ak = ta ? as[1] : 1;
    geo.bk = tb ? 1 : bs[1];
    geo.bn = tb ? bs[1] : 1;
    geo.alpha = d.attrFloat("alpha", 1.0f);
    geo.beta = d.attrFloat("beta", 1.0f);
    if (d.inputs.size() > 2 && d.inputs[2] != kNoValue) geo.c = d.inputs[2];
    return geo;
  }
  // MatMul: a vector operand is a matrix with one row (A) or one column (B).
  // The types are the model's word: checked before they are indexed.
  if (as.empty() || bs.empty()) return Error{"MatMul of a scalar", true};
  const bool aVec = as.size() == 1, bVec = bs.size() == 1;
  const Shape& outShape = g.value(d.outputs[0]).type.staticShape();
  if ((bVec ? bs[0] : bs[bs.size() - 2]) != as.back() || outShape.size() < size_t(!aVec) + size_t(!bVec))
    return Error{"MatMul operand and result shapes do not agree", true};
  geo.M = aVec ? 1 : as[as.size() - 2];
  geo.K = as.back();
  geo.N = bVec ? 1 : bs.back();
  geo.am = geo.K;
  geo.bk = geo.N;
  if (!aVec) geo.aBatch.assign(as.begin(), as.end() - 2);
  if (!bVec) geo.bBatch.assign(bs.begin(), bs.end() - 2);
  const Shape ps = g.value(d.outputs[0]).type.staticShape();
  geo.batch.assign(ps.begin(), ps.end() - (aVec ? 0 : 1) - (bVec ? 0 : 1));
  // One B for every batch (a 2-D weight, as Linear layers have): A's
  // batches are more rows of one product, [batches * M, K] x [K, N], with the
  // same bytes in and out. Sequence-first exports ([S, 1, K] x [K, N]) would
  // otherwise run S matrix-vector products, each streaming all of B.
  if (!aVec && !bVec && !geo.aBatch.empty() && shapeNumel(geo.bBatch) == 1) {
    geo.M *= shapeNumel(geo.aBatch);
    geo.aBatch.clear();
    geo.bBatch.clear();
    geo.batch.clear();
  }
  return geo;
}

/// The head's operands, the kernel's first inputs: in0, in1, and the bias
/// or addend as in2.
std::vector<ValueId> headOperands(const NodeData& head, const Geometry& geo) {
  std::vector<ValueId> operands = {head.inputs[0], head.inputs[1]};
  if (geo.c != kNoValue) operands.push_back(geo.c);
  return operands;
}

/// The element offset of one operand's matrix for batch coordinates b0, b1, ...
std::string batchOffset(const Shape& operandBatch, const Shape& batch, int64_t matrix) {
  const size_t lead = batch.size() - operandBatch.size();
  std::string off = "0";
  int64_t stride = matrix;
  for (size_t k = operandBatch.size(); k-- > 0;) {
    if (operandBatch[k] != 1) off += " + b" + std::to_string(lead + k) + " * " + std::to_string(stride);
    stride *= operandBatch[k];
  }
  return off;
}

}  // namespace

/// A Mul whose result only the group's second member, a Conv, reads as its
/// image: a per-channel scale of the conv's input (ChannelScale below).
static bool scalesConvInput(const Graph& g, const std::vector<NodeRef>& members) {
  if (members.size() < 2) return false;
  const NodeData& m = g.node(members[0]);
  const NodeData& c = g.node(members[1]);
  return m.domain.empty() && m.op == "Mul" && c.domain.empty() && c.op == "Conv" && !c.inputs.empty() &&
         c.inputs[0] == m.outputs[0];
}

NodeRef gemmHead(const Graph& g, const std::vector<NodeRef>& members) {
  return scalesConvInput(g, members) ? members[1] : members.front();
}

bool isGemmGroup(const Graph& g, const std::vector<NodeRef>& members) {
  if (members.empty()) return false;
  const NodeData& d = g.node(gemmHead(g, members));
  return d.domain.empty() && (d.op == "MatMul" || d.op == "Gemm" || d.op == "Conv");
}

namespace {

/// What the family's kernels share: the operands (in0, in1, the bias or
/// addend as in2, then the epilogue's), the results, and the fused epilogue
/// reading the product as `acc` at linear index `i` of the product's shape.
struct EpilogueKernel {
  KernelSource k;
  ValueId product = kNoValue;
  Shape shape;            ///< the product's
  std::string params;     ///< the epilogue's kernel parameters
  std::string body;       ///< its statements
  /// The epilogue on `lanes` neighbouring results at once (see
  /// Emitter::vectorize), the first at `i`, reading the vector `acc`; empty
  /// when some member or operand has no vector form.
  int lanes = 0;
  std::string vectorBody, vectorHelpers;
  std::string edgeBody;  ///< the same for the first VALID_ lanes only
  std::vector<std::string> vectorResults;  ///< the values stored, by output

  size_t operands = 0;    ///< the head's inputs, in0 .. in<operands - 1>, before the epilogue's

  /// The kernel's parameter list, `(in0, in1[, in2], ..., out0, ...)`.
  std::string signature() const { return "(" + inputParameters() + "," + outputParameters() + ")"; }
  /// Its parameters before the results', and the results'.
  std::string inputParameters() const {
    std::string s;
    for (size_t i = 0; i < operands; ++i)
      s += std::string(i ? "," : "") + "\n    __global const float* restrict in" + std::to_string(i);
    return params.empty() ? s : s + ",\n    " + params;
  }
  std::string outputParameters() const {
    std::string s;
    for (size_t o = 0; o < k.outputs.size(); ++o)
      s += std::string(o ? "," : "") + "\n    __global float* restrict out" + std::to_string(o);
    return s;
  }

  /// The statements after the epilogue: every result stored at `i`.
  std::string stores(const detail::Emitter& e, const std::string& indent) const {
    std::string s;
    for (size_t o = 0; o < k.outputs.size(); ++o)
      s += indent + "out" + std::to_string(o) + "[i] = " +
           (k.outputs[o] == product ? std::string("acc") : e.vars().at(k.outputs[o])) + ";\n";
    return s;
  }

  /// A macro `FUSEC_EPILOGUE(SUMS_, FIRST_, VALID_)`: the epilogue on the
  /// `lanes` results in vector SUMS_, the first at linear index FIRST_,
  /// of which the first VALID_ are results (the rest are past the edge).
  /// `prologue(vector)` gives the statements that finish `acc` before the
  /// epilogue (a bias, a scale), where `j` is the lane (0 for a vector).
  /// With a vector form, the lanes run as one vector, and at an edge only
  /// the valid ones are stored; without, lane by lane, written out (a loop
  /// over a private copy kept every sum in memory: twice the time of a
  /// depthwise conv with a Clip epilogue on PoCL).
  std::string laneMacro(const detail::Emitter& e, int width, const std::function<std::string(bool)>& prologue) const {
    static const char* kLanes = "0123456789abcdef";
    const std::string w = std::to_string(width);
    // The lane j, its linear index i and coordinates c0, c1, ..., where
    // the statements after them read them.
    auto declare = [&](const std::string& first, const std::string& lane, const std::string& rest) {
      using detail::Emitter;
      return (Emitter::names(rest, "j") ? "  const int j = " + lane + ";\n" : std::string()) + "  const int i = " + first +
             ";\n" + Emitter::coordinatesUsedBy(rest, shape, "i", "  ") + rest;
    };
    auto scalar = [&](const std::string& lane, const std::string& sum) {
      return declare("(FIRST_) + " + lane, lane, "  float acc = " + sum + ";\n" + prologue(false) + body + stores(e, "  "));
    };
    std::string m = "{\n";
    if (lanes == width) {
      auto vector = [&](const std::string& epilogue, bool edge) {
        std::string v = "  float" + w + " acc = SUMS_;\n" + prologue(true) + epilogue;
        for (size_t o = 0; o < k.outputs.size(); ++o) {
          const std::string out = "out" + std::to_string(o), result = vectorResults[o];
          if (!edge) v += "  vstore" + w + "(" + result + ", 0, " + out + " + i);\n";
          // At an edge, the valid lanes as aligned pieces of 8, 4, 2 and 1
          // lanes (faster than lane-by-lane stores on every depthwise edge
          // measured).
          if (edge) v += detail::validLaneStores(result, out, "i", "(VALID_)", width, "  ");
        }
        return declare("FIRST_", "0", v);
      };
      m += "if ((VALID_) >= " + w + ") {\n" + vector(vectorBody, false) + "} else if ((VALID_) > 0) {\n" +
           vector(edgeBody, true) + "}\n";
    } else {
      for (int j = 0; j < width; ++j)
        m += "if ((VALID_) > " + std::to_string(j) + ") {\n" + scalar(std::to_string(j), "(SUMS_).s" + std::string(1, kLanes[j])) +
             "}\n";
    }
    return detail::macro("FUSEC_EPILOGUE(SUMS_, FIRST_, VALID_)", m + "}\n");
  }
};

/// The kernel's operands and its epilogue, one element at a time (through
/// `e`) and, with `lanes` > 0, also `lanes` neighbouring results at once,
/// where lanes may differ only in the product's last `varyingDims` dims.
/// `members` starts with the node whose result is the product (the head);
/// the rest are its epilogue. `operands` are what the product is computed
/// from, the kernel's first inputs.
Expected<EpilogueKernel> epilogueKernel(detail::Emitter& e, const Graph& g, const OpCatalog& catalog,
                                        const std::vector<NodeRef>& members, const std::string& name,
                                        const std::vector<ValueId>& operands, int lanes = 0, size_t varyingDims = 0,
                                        const std::vector<ValueId>& prologueInputs = {},
                                        const std::string& prologueParams = "") {
  EpilogueKernel out;
  out.product = g.node(members.front()).outputs[0];
  out.shape = g.value(out.product).type.staticShape();
  Expected<detail::Emitter::Epilogue> epi = e.epilogue(members, out.product, "gemm");
  if (!epi) return epi.error();
  out.k.name = name;
  out.k.inputs = operands;
  out.operands = operands.size();
  out.k.inputs.insert(out.k.inputs.end(), prologueInputs.begin(), prologueInputs.end());
  const size_t firstEpi = out.k.inputs.size();
  out.k.inputs.insert(out.k.inputs.end(), epi->inputs.begin(), epi->inputs.end());
  out.k.outputs = epi->outputs;
  e.bind(out.product, "acc");
  // The epilogue reads the product at linear index i; the kernel declares
  // the coordinates c0, c1, ... of i in the product's shape.
  if (Status st = e.emitBody(epi->members, epi->inputs, out.shape, "i", out.params, out.body, firstEpi, false); !st)
    return st.error();
  if (!prologueParams.empty()) out.params = prologueParams + (out.params.empty() ? "" : ",\n    " + out.params);
  if (lanes > 0) {
    detail::Emitter ve(g, catalog), edge(g, catalog);
    ve.vectorize(lanes, varyingDims);
    edge.vectorize(lanes, varyingDims, "VALID_");
    ve.bind(out.product, "acc");
    edge.bind(out.product, "acc");
    std::string params, body, edgeBody;
    if (ve.emitBody(epi->members, epi->inputs, out.shape, "i", params, body, firstEpi, false) &&
        edge.emitBody(epi->members, epi->inputs, out.shape, "i", params, edgeBody, firstEpi, false)) {
      out.lanes = lanes;
      out.vectorBody = std::move(body);
      out.edgeBody = std::move(edgeBody);
      out.vectorHelpers = ve.vectorHelpers();
      for (ValueId v : out.k.outputs) out.vectorResults.push_back(v == out.product ? "acc" : ve.vars().at(v));
    }
  }
  return out;
}

/// Whether every tap's W lanes fall inside the input row for the output
/// columns from ox0 (the first lane's window column being ix0): a C
/// condition on `ix0`.
/// The last column a tap's vector load touches, counted from the first
/// lane's window column (stride 2 reads 2W columns and keeps the even ones).
int64_t depthwiseReach(const Geometry& geo, int W) {
  const int64_t span = (W - 1) * geo.SW + (geo.KW - 1) * geo.DW + 1;
  return geo.SW == 2 ? (geo.KW - 1) * geo.DW + 2 * W - 1 : span - 1;
}

/// FUSEC_PREFETCH(P): a prefetch of the cache line at P for reading where
/// the compiler has one (clang's builtin, which PoCL lowers to the CPU's
/// prefetch instruction); nothing elsewhere, SPIR-V included.
constexpr const char* kPrefetchMacro =
    "#ifndef FUSEC_PREFETCH\n#if defined(__clang__) && !defined(__SPIR__)\n#define FUSEC_PREFETCH(P) "
    "__builtin_prefetch((P), 0, 3)\n#else\n#define FUSEC_PREFETCH(P)\n#endif\n#endif\n";

/// Rows per tile for M rows in tiles of at most `rows`: as many tiles as
/// that takes, each as short as they allow (fewer rows computed past M).
int balancedRows(int64_t M, int64_t rows) {
  const int64_t rowsM = std::max<int64_t>(M, 1), tiles = (rowsM + rows - 1) / rows;
  return static_cast<int>((rowsM + tiles - 1) / tiles);
}

std::string depthwiseInner(const Geometry& geo, int W) {
  return "ix0 >= 0 && ix0 + " + std::to_string(depthwiseReach(geo, W)) + " < " + std::to_string(geo.Wd);
}

/// The float<W> of W outputs' inputs at one tap, from `first` (a pointer
/// expression to the first lane's): contiguous at stride 1, every other
/// column of 16 at stride 2, gathered at other strides.
std::string depthwiseLoad(const Geometry& geo, int W, const std::string& first) {
  if (geo.SW == 1) return "vload" + std::to_string(W) + "(0, " + first + ")";
  if (geo.SW == 2 && W == 8) return "vload16(0, " + first + ").even";
  if (geo.SW == 2 && W == 16) return "(float16)(vload16(0, " + first + ").even, vload16(0, " + first + " + 16).even)";
  std::string v = "(float" + std::to_string(W) + ")(";
  for (int j = 0; j < W; ++j) v += (j ? ", " : "") + std::string("(") + first + ")[" + std::to_string(j * geo.SW) + "]";
  return v + ")";
}

/// The statements adding a depthwise window's taps into the float<W>
/// `sums` of W neighbouring outputs of output row `oy`, from the input
/// channel's `plane`; `ix0` is the first lane's window column, `inner`
/// whether every tap's lanes lie inside the row (depthwiseInner) and `lane`
/// the int<W> 0, 1, ...; tap t's weight is `weight(t)`. No line comments
/// (the code may go into a macro).
///
/// Where every tap's lanes fall inside the row (the interior of a wide
/// row), each tap is one vector load: contiguous at stride 1, every other
/// column of 16 at stride 2. Elsewhere the row's columns that the taps
/// read (ix0 .. ix0 + span - 1) are gathered once, zero in the padding,
/// into float16 segments, and each tap takes its lanes from them: a gather
/// per tap read the row KW times, on a 14-wide row at every tap.
///
/// prefetchAhead > 0: each row also prefetches its segment that many
/// columns on (FUSEC_PREFETCH, kPrefetchMacro), the next work-group's.
std::string depthwiseTaps(const Geometry& geo, int W, bool rowGather, const std::function<std::string(int64_t)>& weight,
                          const std::string& sums, int64_t prefetchAhead = 0) {
  const std::string vec = "float" + std::to_string(W);
  static const char* kLanes = "0123456789abcdef";
  const int64_t span = (W - 1) * geo.SW + (geo.KW - 1) * geo.DW + 1;
  const int64_t segs = rowGather && span <= 32 ? (span + 15) / 16 : 0, edgeSegs = (span + 15) / 16;
  const int64_t reach = depthwiseReach(geo, W);
  std::ostringstream src;
  for (int64_t ky = 0; ky < geo.KH; ++ky) {
    src << "  {\n    const int iy = oy * " << geo.SH << " - " << geo.PH << " + " << ky * geo.DH << ";\n";
    src << "    if (iy >= 0 && iy < " << geo.H << ") {\n";
    src << "      const __global float* row = plane + iy * " << geo.Wd << ";\n";
    for (int64_t c = 0; prefetchAhead > 0 && c < span + 15; c += 16)
      src << "      FUSEC_PREFETCH(row + ix0 + " << prefetchAhead + c << ");\n";
    src << "      if (inner) {\n";
    for (int64_t kx = 0; kx < geo.KW; ++kx) {
      const std::string v = depthwiseLoad(geo, W, "row + ix0 + " + std::to_string(kx * geo.DW));
      src << "        " << sums << " = fma((" << vec << ")(" << weight(ky * geo.KW + kx) << "), " << v << ", " << sums << ");\n";
    }
    src << "      } else {\n";
    // Lane j of tap kx reads column kx * DW + j * SW of the segments: a
    // swizzle of one segment, or lanes of several.
    auto segmentTaps = [&] {
      auto column = [&](int64_t c) { return "seg" + std::to_string(c / 16) + ".s" + std::string(1, kLanes[c % 16]); };
      for (int64_t kx = 0; kx < geo.KW; ++kx) {
        std::string taps = "(" + vec + ")(";
        for (int j = 0; j < W; ++j) taps += (j ? ", " : "") + column(kx * geo.DW + j * geo.SW);
        taps += ")";
        if ((kx * geo.DW + (W - 1) * geo.SW) / 16 == (kx * geo.DW) / 16) {
          taps = "seg" + std::to_string(kx * geo.DW / 16) + ".s";
          for (int j = 0; j < W; ++j) taps += kLanes[(kx * geo.DW + j * geo.SW) % 16];
        }
        src << "        " << sums << " = fma((" << vec << ")(" << weight(ky * geo.KW + kx) << "), " << taps << ", " << sums
            << ");\n";
      }
    };
    // The row's first and last segments (where the padding is) start at
    // columns known here: theirs are loads at constant offsets (which the
    // compiler merges into vector loads) and zeros, not a gather through
    // computed indices.
    std::vector<int64_t> edges;
    for (int64_t first : {-geo.PW, ((geo.OW + W - 1) / W - 1) * W * geo.SW - geo.PW}) {
      const bool inside = first >= 0 && first + reach < geo.Wd;
      if (rowGather && !inside && edgeSegs <= 4 && std::find(edges.begin(), edges.end(), first) == edges.end())
        edges.push_back(first);
    }
    for (int64_t first : edges) {
      src << "        if (ix0 == " << first << ") {\n";
      for (int64_t q = 0; q < edgeSegs; ++q) {
        src << "        const float16 seg" << q << " = (float16)(";
        for (int64_t c = 16 * q; c < 16 * (q + 1); ++c)
          src << (c > 16 * q ? ", " : "")
              << (c < span && first + c >= 0 && first + c < geo.Wd ? "row[" + std::to_string(first + c) + "]" : "0.0f");
        src << ");\n";
      }
      segmentTaps();
      src << "        } else {\n";
    }
    if (segs > 0) {
      for (int64_t q = 0; q < segs; ++q) {
        src << "        const int16 col" << q << " = (int16)(ix0 + " << 16 * q
            << ") + (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);\n";
        src << "        const int16 ok" << q << " = (col" << q << " >= 0) & (col" << q << " < " << geo.Wd << ");\n";
        src << "        const int16 at" << q << " = select((int16)(0), col" << q << ", ok" << q << ");\n";
        src << "        const float16 seg" << q << " = select((float16)(0.0f), (float16)(";
        for (int64_t c = 16 * q; c < 16 * (q + 1); ++c)
          src << (c > 16 * q ? ", " : "")
              << (c < span ? "row[at" + std::to_string(q) + ".s" + std::string(1, kLanes[c % 16]) + "]" : "0.0f");
        src << "), ok" << q << ");\n";
      }
      segmentTaps();
    } else {
      for (int64_t kx = 0; kx < geo.KW; ++kx) {
        src << "        {\n          const int" << W << " ix = (int" << W << ")(ix0 + " << kx * geo.DW << ") + lane * " << geo.SW
            << ";\n";
        src << "          const int" << W << " inside = (ix >= 0) & (ix < " << geo.Wd << ");\n";
        src << "          const int" << W << " at = select((int" << W << ")(0), ix, inside);\n";
        src << "          " << sums << " = fma((" << vec << ")(" << weight(ky * geo.KW + kx) << "), select((" << vec
            << ")(0.0f), (" << vec << ")(";
        for (int j = 0; j < W; ++j) src << (j ? ", " : "") << "row[at.s" << kLanes[j] << "]";
        src << "), inside), " << sums << ");\n        }\n";
      }
    }
    for (size_t e = 0; e < edges.size(); ++e) src << "        }\n";
    src << "      }\n    }\n  }\n";
  }
  return src.str();
}

/// The rows a depthwise work-item owns (GemmTiling::depthwiseOwnedBytes):
/// `outRows` output rows computed from `inRows` input rows, each copied
/// once, zero-padded to `width` floats, into its local memory. As many
/// output rows as fit the budget (the whole plane on small maps), so each
/// input row is read from memory once, not once per output row its
/// window covers, and no tap needs an edge test. outRows 0: not owned.
/// depthwiseOwnedRows splits stride-2 rows unless `splitColumns` is false
/// (where something other than ownedRowsCopy writes them).
struct OwnedRows {
  int64_t outRows = 0, inRows = 0, width = 0;
  /// Stride 2: each row is stored as its even columns, then its odd ones
  /// from width / 2 (ownedRowsCopy), so every tap is a plain vector load,
  /// not 16 columns and a shuffle keeping every other one.
  bool split = false;
};

OwnedRows depthwiseOwnedRows(const Geometry& geo, int64_t OH, int64_t paddedOW, int64_t budgetBytes,
                             bool splitColumns = true) {
  OwnedRows own;
  if (budgetBytes <= 0) return own;
  // A tap's vector load reaches (lanes - 1) x stride + 1 columns past its
  // first (16 at stride 2 for 8 lanes: the odd ones are dropped).
  own.width = std::max(paddedOW * geo.SW + (geo.KW - 1) * geo.DW, geo.PW + geo.Wd);
  own.split = splitColumns && geo.SW == 2;
  if (own.split) own.width += own.width % 2;
  const int64_t window = (geo.KH - 1) * geo.DH + 1, rowBytes = own.width * static_cast<int64_t>(sizeof(float));
  if (window * rowBytes > budgetBytes) return own;
  own.outRows = std::min(OH, (budgetBytes / rowBytes - window) / geo.SH + 1);
  own.inRows = (own.outRows - 1) * geo.SH + window;
  return own;
}

/// A Conv and the elementwise ops after it (an activation) as the prologue
/// of the 1x1 Conv that reads them: the 1x1 conv's B rows (one per channel)
/// are the first conv's output rows, computed as the panel is staged in
/// local memory and never stored. A depthwise conv (MobileNetV2's inverted
/// residual block) computes each row from one input channel; a dense conv
/// (`dense`, one group: ResNet-50's bottleneck 3x3 -> 1x1) is a GEMM of its
/// own whose result is the panel, built only where each work-item owns its
/// panel (GemmTiling::stagedPrologue false), so it is computed once.
struct ConvPrologue {
  NodeRef conv = 0;                ///< the prologue's Conv
  std::vector<NodeRef> members;    ///< it, then the elementwise ops up to the 1x1 conv's input
  ValueId x = kNoValue, w = kNoValue, bias = kNoValue;
  Geometry geo;                    ///< the prologue conv's
  bool dense = false;              ///< one group (else depthwise)
  /// A 1x1 conv computing the input of the group's depthwise conv (the
  /// main conv; emitDepthwise): each input row a work-item copies into its
  /// local memory is computed from the 1x1 conv's input instead.
  bool pointwise = false;
};

/// A conv prologue's part of a kernel: where its conv's weights (then its
/// bias) are among the kernel's inputs, what its elementwise ops read, and
/// those ops as vector code on `lanes` values bound to `bound`.
struct PrologueCode {
  size_t at = 0;                ///< the prologue conv's weights are in<at>, its bias in<at + 1>
  std::vector<ValueId> inputs;  ///< what the elementwise ops read, after the operands
  std::string params, body, result, helpers;
  Shape shape;                  ///< the prologue conv's result
};

/// Takes `pro` out of the kernel's members (`headed`: the rest) and into
/// its operands: the image is the prologue conv's input, its weights and
/// bias follow the main conv's operands; then emits its ops (`what` names
/// the prologue in errors).
Expected<PrologueCode> prologueCode(const Graph& g, const OpCatalog& catalog, const ConvPrologue& pro,
                                    const std::vector<NodeRef>& members, std::vector<NodeRef>& headed,
                                    std::vector<ValueId>& operands, int lanes, size_t varyingDims, const std::string& what,
                                    const std::string& bound) {
  PrologueCode c;
  headed.clear();
  for (NodeRef n : members)
    if (std::find(pro.members.begin(), pro.members.end(), n) == pro.members.end()) headed.push_back(n);
  operands[0] = pro.x;
  c.at = operands.size();
  operands.push_back(pro.w);
  if (pro.bias != kNoValue) operands.push_back(pro.bias);
  const ValueId out = g.node(pro.conv).outputs[0];
  c.shape = g.value(out).type.staticShape();
  detail::Emitter pe(g, catalog);
  pe.vectorize(lanes, varyingDims);
  Expected<detail::Emitter::Epilogue> pep = pe.epilogue(pro.members, out, what);
  if (!pep) return pep.error();
  if (pep->outputs.size() != 1) return Error{"a " + what + " computes one value for the conv after it", true};
  pe.bind(out, bound);
  if (Status st = pe.emitBody(pep->members, pep->inputs, c.shape, "i", c.params, c.body, operands.size(), false); !st)
    return Error{"the " + what + "'s ops have no vector form: " + st.error().message, true};
  c.inputs = pep->inputs;
  c.result = pep->outputs[0] == out ? bound : pe.vars().at(pep->outputs[0]);
  c.helpers = pe.vectorHelpers();
  return c;
}

/// The statements computing a pointwise prologue's result for `together`
/// channels from `ci` (the 1x1 conv's dot products over its K input
/// channels of `image`, weights `wp`, then its bias and elementwise ops)
/// into the zeroed local `rows`, channel q's row iy at `q * planeFloats +
/// (iy + PH) * width + PW`. Each plane is computed as one contiguous run of
/// H x Wd values, 8 at a time, in passes over K of up to 14 accumulators
/// (7 vectors for two channels, which share each load of the image; 3 for
/// four, whose loop loads the 3 vectors, then each channel's weight once
/// for 3 FMAs: 7 loads for 12 FMAs in 16 AVX2 registers), as few passes as
/// that allows and of equal size; the last vector ends at the plane's end
/// (overlapping the one before it), so every load is a full vector inside
/// the plane. A vector inside one row is stored as one, the others lane by
/// lane.
std::string pointwisePlane(const ConvPrologue& pro, const PrologueCode& code, const Geometry& geo, int64_t width,
                           int64_t planeFloats, int together) {
  const std::string& opsBody = code.body;
  const Shape& proShape = code.shape;
  static const char* kLanes = "01234567";
  const int64_t plane = geo.H * geo.Wd, K = pro.geo.K;
  std::vector<int64_t> starts;  // each vector's first value; it stores from the previous one's end
  for (int64_t p = 0; p < plane; p += 8) starts.push_back(std::min(p, plane - 8));
  const size_t maxPass = 14 / together;
  const size_t passes = (starts.size() + maxPass - 1) / maxPass, pass = (starts.size() + passes - 1) / passes;
  const std::string coords = detail::Emitter::coordinatesUsedBy(opsBody, proShape, "i", "      ");
  const bool index = !coords.empty() || detail::Emitter::names(opsBody, "i");
  auto acc = [](size_t j, int q) { return "s" + std::to_string(j) + "_" + std::to_string(q); };
  std::ostringstream b;
  for (size_t first = 0; first < starts.size(); first += pass) {
    const size_t last = std::min(starts.size(), first + pass);
    b << "  {\n";
    for (size_t j = first; j < last; ++j)
      for (int q = 0; q < together; ++q) b << "    float8 " << acc(j - first, q) << " = (float8)(0.0f);\n";
    b << "    const __global float* xr = image;\n";
    b << "    for (int k = 0; k < " << K << "; ++k, xr += " << plane << ") {\n";
    if (together <= 2) {
      for (int q = 0; q < together; ++q) b << "      const float8 w" << q << " = (float8)(wp[" << q * K << " + k]);\n";
      for (size_t j = first; j < last; ++j) {
        b << "      {\n        const float8 x = vload8(0, xr + " << starts[j] << ");\n";
        for (int q = 0; q < together; ++q)
          b << "        " << acc(j - first, q) << " = fma(w" << q << ", x, " << acc(j - first, q) << ");\n";
        b << "      }\n";
      }
    } else {
      for (size_t j = first; j < last; ++j)
        b << "      const float8 x" << j - first << " = vload8(0, xr + " << starts[j] << ");\n";
      for (int q = 0; q < together; ++q) {
        b << "      {\n        const float8 w = (float8)(wp[" << q * K << " + k]);\n";
        for (size_t j = first; j < last; ++j)
          b << "        " << acc(j - first, q) << " = fma(w, x" << j - first << ", " << acc(j - first, q) << ");\n";
        b << "      }\n";
      }
    }
    b << "    }\n";
    for (size_t j = first; j < last; ++j)
      for (int q = 0; q < together; ++q) {
        const int64_t start = starts[j], from = j ? starts[j - 1] + 8 : 0;  // lanes before `from` are stored already
        b << "    {\n      const float8 pv = " << acc(j - first, q);
        if (pro.bias != kNoValue) b << " + (float8)(in" << code.at + 1 << "[ci + " << q << "])";
        b << ";\n";
        if (index)
          b << "      const int i = (img * " << proShape[1] << " + ci + " << q << ") * " << plane << " + " << start << ";\n"
            << coords;
        std::istringstream ops(opsBody);
        for (std::string line; std::getline(ops, line);) b << "    " << line << "\n";
        auto at = [&](int64_t v) { return q * planeFloats + (v / geo.Wd + geo.PH) * width + geo.PW + v % geo.Wd; };
        if (from == start && start / geo.Wd == (start + 7) / geo.Wd) {
          b << "      vstore8(" << code.result << ", 0, rows + " << at(start) << ");\n";
        } else {
          for (int64_t v = std::max(start, from); v < start + 8; ++v)
            b << "      rows[" << at(v) << "] = (" << code.result << ").s" << kLanes[v - start] << ";\n";
        }
        b << "    }\n";
      }
    b << "  }\n";
  }
  return b.str();
}

/// Statements moving `n` floats (known when the kernel is generated) from
/// `from + offset` to `to + offset`, or zeros where `from` is empty: a
/// loop of 16-float vectors, then the rest as one vector each of 8, 4, 2
/// and 1 floats, never past the n-th.
std::string vectorMove(const std::string& indent, const std::string& to, const std::string& from, int64_t offset,
                       int64_t n) {
  std::ostringstream out;
  auto value = [&](int64_t w, const std::string& at) {
    if (from.empty()) return w == 1 ? std::string("0.0f") : "(float" + std::to_string(w) + ")(0.0f)";
    return w == 1 ? from + "[" + at + "]" : "vload" + std::to_string(w) + "(0, " + from + " + " + at + ")";
  };
  int64_t c = offset;
  if (n >= 32) {
    const int64_t end = offset + n / 16 * 16;
    out << indent << "for (int c = " << c << "; c < " << end << "; c += 16) vstore16(" << value(16, "c") << ", 0, " << to
        << " + c);\n";
    c = end;
  }
  for (int64_t w : {16, 8, 4, 2, 1})
    for (; c + w <= offset + n; c += w) {
      const std::string at = std::to_string(c);
      if (w == 1) out << indent << to << "[" << at << "] = " << value(1, at) << ";\n";
      else out << indent << "vstore" << w << "(" << value(w, at) << ", 0, " << to << " + " << at << ");\n";
    }
  return out.str();
}

/// The statements copying the input rows of output rows oy0.. of one
/// channel's `plane` into the local `rows` (OwnedRows): rows outside the
/// input and the columns left and right of it are zeros (the padding); each
/// piece is moved as vectors (vectorMove).
std::string ownedRowsCopy(const Geometry& geo, const OwnedRows& own) {
  std::ostringstream body;
  // Each row's pieces move as whole vectors, not element loops.
  const int64_t right = own.width - geo.PW - geo.Wd;
  body << "  for (int r = 0; r < " << own.inRows << "; ++r) {\n";
  body << "    __local float* dst = rows + r * " << own.width << ";\n";
  body << "    const int iy = oy0 * " << geo.SH << " - " << geo.PH << " + r;\n";
  body << "    if (iy < 0 || iy >= " << geo.H << ") {\n";
  body << vectorMove("      ", "dst", "", 0, own.width) << "      continue;\n    }\n";
  body << "    const __global float* row = plane + iy * " << geo.Wd << ";\n";
  if (own.split) {
    // Padded column p goes to (p % 2) * half + p / 2: each half's padding
    // as zeros, then the row 16 columns at a time (their even and odd
    // columns, 8 neighbours in each half), 8 more, the rest one by one.
    const int64_t half = own.width / 2, end = geo.PW + geo.Wd, whole = geo.Wd / 16 * 16;
    body << vectorMove("    ", "dst", "", 0, (geo.PW + 1) / 2) << vectorMove("    ", "dst", "", (end + 1) / 2, half - (end + 1) / 2)
         << vectorMove("    ", "dst", "", half, geo.PW / 2) << vectorMove("    ", "dst", "", half + end / 2, half - end / 2);
    auto halves = [&](const std::string& indent, const std::string& c, int lanes) {
      for (int parity = 0; parity < 2; ++parity)  // columns c + parity, c + parity + 2, ... at p = PW + c + parity + 2j
        body << indent << "vstore" << lanes / 2 << "(v." << (parity ? "odd" : "even") << ", 0, dst + "
             << (geo.PW + parity) % 2 * half << " + (" << geo.PW + parity << " + " << c << ") / 2);\n";
    };
    if (whole > 0) {
      body << "    for (int c = 0; c < " << whole << "; c += 16) {\n      const float16 v = vload16(0, row + c);\n";
      halves("      ", "c", 16);
      body << "    }\n";
    }
    int64_t c = whole;
    if (geo.Wd - c >= 8) {
      body << "    {\n      const float8 v = vload8(0, row + " << c << ");\n";
      halves("      ", std::to_string(c), 8);
      body << "    }\n";
      c += 8;
    }
    for (; c < geo.Wd; ++c) body << "    dst[" << (geo.PW + c) % 2 * half + (geo.PW + c) / 2 << "] = row[" << c << "];\n";
    body << "  }\n";
    return body.str();
  }
  body << vectorMove("    ", "dst", "", 0, geo.PW);
  body << "    dst += " << geo.PW << ";\n";
  body << vectorMove("    ", "dst", "row", 0, geo.Wd);
  body << vectorMove("    ", "dst", "", geo.Wd, right);
  body << "  }\n";
  return body.str();
}

/// The statements computing `count = min(own.outRows, OH - oy0)` output
/// rows of one channel from its owned rows (`rows`, copied by
/// ownedRowsCopy), W outputs at a time with the window's weights in
/// registers w0, w1, ... and its bias in `bias`; `finish(j)` ends output
/// row r + j's float<W> `sums<j>` of columns ox0.. (it may be past OW).
void depthwiseRowLoop(std::ostream& body, const Geometry& geo, int W, int64_t OH, int64_t OW, const OwnedRows& own,
                      const std::string& rows, const std::function<std::string(int)>& finish) {
  const std::string vec = "float" + std::to_string(W);
  const int64_t taps = geo.KH * geo.KW;
  // `count` output rows from r, W columns at a time: each input row's tap
  // vector is loaded once for every output row whose window covers it.
  // Each output row's sum is `parts` chains of FMAs (2: even and odd
  // window rows), added at the end, where one chain would wait on its own
  // latency: a 5x5 window's 25 FMAs, or a row that is one vector (so no
  // other column block of the row overlaps it); wider 3x3 rows keep one
  // chain, two rows at a time (two chains were slower there).
  const int parts = geo.KH > 1 && (taps > 9 || OW <= W) ? 2 : 1;
  // Output row j's accumulator for window row ky: sums<j>, or sums<j>p1 for odd ky.
  auto acc = [&](int j, int64_t ky) { return "sums" + std::to_string(j) + (ky % parts ? "p1" : ""); };
  auto rowsAt = [&](int count) {
    body << "    for (int ox0 = 0; ox0 < " << OW << "; ox0 += " << W << ") {\n";
    for (int j = 0; j < count; ++j) {
      body << "      " << vec << " sums" << j << " = (" << vec << ")(bias);\n";
      if (parts == 2) body << "      " << vec << " " << acc(j, 1) << " = (" << vec << ")(0.0f);\n";
    }
    for (int64_t d = 0; d <= (geo.KH - 1) * geo.DH + (count - 1) * geo.SH; ++d) {
      std::vector<std::pair<int, int64_t>> uses;  // (output row, ky) reading input row r * SH + d
      for (int j = 0; j < count; ++j)
        if (const int64_t off = d - j * geo.SH; off >= 0 && off % geo.DH == 0 && off / geo.DH < geo.KH)
          uses.emplace_back(j, off / geo.DH);
      if (uses.empty()) continue;
      // Split rows: tap kx's lane j, padded column 2 (ox0 + j) + kx * DW,
      // lies in the half of kx * DW's parity, at ox0 + j + kx * DW / 2.
      body << "      {\n        const __local float* at = " << rows << " + (r * " << geo.SH << " + " << d
           << ") * " << own.width << " + ox0" << (own.split ? "" : " * " + std::to_string(geo.SW)) << ";\n";
      for (int64_t kx = 0; kx < geo.KW; ++kx) {
        const int64_t tapAt = kx * geo.DW;
        const std::string load =
            own.split ? "vload" + std::to_string(W) + "(0, at + " + std::to_string(tapAt % 2 * (own.width / 2) + tapAt / 2) + ")"
                      : depthwiseLoad(geo, W, "at + " + std::to_string(tapAt));
        body << "        {\n          const " << vec << " v = " << load << ";\n";
        for (const auto& [j, ky] : uses)
          body << "          " << acc(j, ky) << " = fma((" << vec << ")(w" << ky * geo.KW + kx << "), v, " << acc(j, ky)
               << ");\n";
        body << "        }\n";
      }
      body << "      }\n";
    }
    for (int j = 0; j < count; ++j) {
      if (parts == 2) body << "      sums" << j << " += " << acc(j, 1) << ";\n";
      body << "      " << finish(j) << "\n";
    }
    body << "    }\n";
  };
  // Rows at a time, then the rest in halves (2, 1 at most once each): for
  // windows past 3x3, 32 / W (eight 8-lane accumulators: two chains of
  // 4 rows of 8, or of 2 rows of 16, which an AVX2 core's two FMA units
  // keep busy at a latency of four cycles; 4 rows of 16 spilled, 1.5-2x
  // slower); a 3x3 one-vector row alone, wider 3x3 rows two at a time.
  const int64_t most = taps > 9 ? 32 / W : OW <= W ? 1 : 2;
  int step = 1;
  while (step * 2 <= std::min(own.outRows, most)) step *= 2;
  body << "  const int count = min(" << own.outRows << ", " << OH << " - oy0);\n  int r = 0;\n";
  body << "  for (; r + " << step << " <= count; r += " << step << ") {\n";
  rowsAt(step);
  body << "  }\n";
  for (int rest = step / 2; rest >= 1; rest /= 2) {
    body << "  if (r + " << rest << " <= count) {\n";
    rowsAt(rest);
    body << "  r += " << rest << ";\n  }\n";
  }
}

/// Whether a depthwise conv's whole plane fits registers: input and output
/// rows of at most 8 (one float8 each), stride 1 and at most 8 output rows
/// (their accumulators live together), as MobileNetV2's and
/// EfficientNet-B0's 7x7 stages are. depthwiseRegisterRows computes it.
bool depthwiseInRegisters(const Geometry& geo, int64_t OH, int64_t OW) {
  return geo.SH == 1 && geo.SW == 1 && geo.Wd <= 8 && OW <= 8 && OH <= 8 && geo.H <= 16;
}

/// The statements computing one channel's plane (`plane`, H x Wd) when
/// depthwiseInRegisters holds: each input row is loaded once into a float8
/// (zeros past its end) and shifted in registers for each of the window's
/// columns (zeros where a tap falls in the padding), and feeds the FMAs of
/// every output row whose window holds it; rows of zero padding are no
/// work at all. `finish(oy)` ends output row oy's `sums<oy>`. Faster than
/// copying the padded rows into local memory and loading each tap from
/// there (depthwiseRowLoop) on small maps.
void depthwiseRegisterRows(std::ostream& body, const Geometry& geo, int64_t OH,
                           const std::function<std::string(int64_t)>& finish) {
  for (int64_t oy = 0; oy < OH; ++oy) body << "  float8 sums" << oy << " = (float8)(bias);\n";
  body << "  const float8 zero = (float8)(0.0f);\n";
  for (int64_t iy = 0; iy < geo.H; ++iy) {
    std::vector<std::pair<int64_t, int64_t>> uses;  // (output row, ky) reading input row iy
    for (int64_t oy = 0; oy < OH; ++oy)
      if (const int64_t off = iy + geo.PH - oy; off >= 0 && off % geo.DH == 0 && off / geo.DH < geo.KH)
        uses.emplace_back(oy, off / geo.DH);
    if (uses.empty()) continue;
    body << "  {\n    const __global float* row = plane + " << iy * geo.Wd << ";\n";
    // Lanes 0 .. Wd - 1 from the row, zeros after.
    std::vector<std::string> parts;
    int64_t c = 0;
    for (int n : {8, 4, 2})
      for (; geo.Wd - c >= n; c += n) parts.push_back("vload" + std::to_string(n) + "(0, row + " + std::to_string(c) + ")");
    for (; c < geo.Wd; ++c) parts.push_back("row[" + std::to_string(c) + "]");
    for (; c < 8; ++c) parts.push_back("0.0f");
    body << "    const float8 v = ";
    if (parts.size() == 1) {
      body << parts[0] << ";\n";
    } else {
      body << "(float8)(";
      for (size_t i = 0; i < parts.size(); ++i) body << (i ? ", " : "") << parts[i];
      body << ");\n";
    }
    for (int64_t kx = 0; kx < geo.KW; ++kx) {
      // Lane x of tap kx reads input column x + kx * DW - PW: lane 8 of
      // shuffle2's pair (zero's first) outside the row.
      std::string lanes;
      bool same = true;
      for (int64_t x = 0; x < 8; ++x) {
        const int64_t ix = x + kx * geo.DW - geo.PW;
        const int64_t from = ix >= 0 && ix < geo.Wd ? ix : 8;
        same &= from == x || (from == 8 && x >= geo.Wd);
        lanes += (x ? ", " : "") + std::to_string(from);
      }
      body << "    const float8 t" << kx << " = " << (same ? std::string("v") : "shuffle2(v, zero, (uint8)(" + lanes + "))")
           << ";\n";
    }
    for (const auto& [oy, ky] : uses)
      for (int64_t kx = 0; kx < geo.KW; ++kx)
        body << "    sums" << oy << " = fma((float8)(w" << ky * geo.KW + kx << "), t" << kx << ", sums" << oy << ");\n";
    body << "  }\n";
  }
  for (int64_t oy = 0; oy < OH; ++oy) body << "  " << finish(oy) << "\n";
}

/// A depthwise Conv (one input channel per group; any channel multiplier),
/// computed directly: an implicit GEMM of it has one row per group and K =
/// the window, so its tiles are mostly gather arithmetic. Here each
/// work-item computes W neighbouring outputs of one output row: the window's
/// weights are loaded once into registers, each input row of the window is
/// read once per tap as a vector where the taps fall inside the row (stride
/// 1) and gathered at the edges, and the epilogue runs on each result as it
/// is stored. Memory bound: every input element is read KH x KW times from
/// cache and once from DRAM.
Expected<KernelSource> emitDepthwise(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                     const std::string& name, const std::string& comment, const Geometry& geo,
                                     int width, bool rowGather, int64_t ownedBytes, const ConvPrologue* pro = nullptr) {
  // With a pointwise prologue the image is the 1x1 conv's input, its
  // weights and bias follow the depthwise conv's operands, then what its
  // elementwise ops read (each constant along a row: the prologue computes
  // a row 8 columns at a time, lanes past the row's end included).
  std::vector<NodeRef> headed = members;
  std::vector<ValueId> operands = headOperands(g.node(members.front()), geo);
  PrologueCode pc;
  if (pro) {
    const NodeRef dw = *std::find_if(members.begin(), members.end(), [&](NodeRef n) {
      return g.node(n).op == "Conv" && n != pro->conv;
    });
    operands = headOperands(g.node(dw), geo);
    Expected<PrologueCode> c = prologueCode(g, catalog, *pro, members, headed, operands, 8, 1, "pointwise prologue", "pv");
    if (!c) return c.error();
    pc = std::move(c.value());
    for (ValueId in : pc.inputs) {
      const TensorType& t = g.value(in).type;
      if (!t.isStatic() || (!t.staticShape().empty() && t.staticShape().back() != 1))
        return Error{"the pointwise prologue's ops read `" + g.value(in).name + "`, which varies along a row", true};
    }
  }
  detail::Emitter e(g, catalog);
  Expected<EpilogueKernel> ek = epilogueKernel(e, g, catalog, headed, name, operands, width, 1, pc.inputs, pc.params);
  if (!ek) return ek.error();
  KernelSource& k = ek->k;
  const Shape& ps = ek->shape;
  const int64_t images = ps[0], channels = ps[1], OH = ps.size() == 4 ? ps[2] : 1, OW = ps.back();
  const int64_t multiplier = geo.M, taps = geo.KH * geo.KW;
  const int W = width;

  const int64_t OWT = (OW + W - 1) / W;
  k.globalSize = static_cast<size_t>(images * channels * OH * OWT);
  const std::string vec = "float" + std::to_string(W);
  // Owned rows: the padded input rows of a block of output rows, copied
  // once into the work-item's local memory (see depthwiseOwnedRows).
  // A pointwise prologue writes the rows as they are (never split).
  OwnedRows own = depthwiseOwnedRows(geo, OH, OWT * W, ownedBytes, !pro);
  // The prologue writes every input row of the plane, also those below the
  // last window (a stride-2 conv on an even height leaves the last unread).
  if (pro) own.inRows = std::max(own.inRows, geo.PH + geo.H);
  if (pro && (own.outRows < OH || geo.H * geo.Wd < 8))
    return Error{"a pointwise prologue is computed into a work-item's local memory for the whole plane of at least "
                 "8 values; the depthwise conv's padded input plane does not fit it",
                 true};
  std::ostringstream src;
  src << "// " << comment << "\n";
  if (own.outRows > 0) {
    const int64_t blocks = (OH + own.outRows - 1) / own.outRows;
    // Small planes: a work-item takes several channels in turn, so each
    // computes at least 512 outputs while there are 64 work-items or more
    // (a work-group costs PoCL about as much as a 7x7 plane's taps).
    // A pointwise prologue computes four channels' planes at once (where
    // each is its own input channel's; else two, else one), sharing each
    // load of its image.
    const int together = !pro || multiplier != 1 ? 1 : channels % 4 == 0 ? 4 : channels % 2 == 0 ? 2 : 1;
    const int64_t planeFloats = own.inRows * own.width, unitChannels = channels / together;
    int64_t perItem = 1;
    if (blocks == 1)
      perItem = std::max<int64_t>(1, std::min((512 + OH * OW * together - 1) / (OH * OW * together),
                                              images * unitChannels / 64));
    const int64_t units = images * unitChannels * blocks;  // (image, channel(s), block of rows)
    // Planes of rows of 8 or fewer: held in registers (depthwiseRegisterRows).
    const bool registers = !pro && W == 8 && blocks == 1 && depthwiseInRegisters(geo, OH, OW);
    k.globalSize = static_cast<size_t>((units + perItem - 1) / perItem);
    k.localSize = 1;
    k.localMemBytes = registers ? 0 : static_cast<size_t>(together * planeFloats) * sizeof(float);
    src << "// Depthwise Conv, direct: " << channels << " output channels (" << multiplier << " per input channel), window "
        << geo.KH << "x" << geo.KW << ", stride " << geo.SH << "x" << geo.SW << ", dilation " << geo.DH << "x" << geo.DW;
    if (registers)
      src << ";\n// each work-item loads each input row of a plane once into a vector, shifts it in registers for\n"
          << "// the window's columns and adds it into every output row it reaches, " << perItem
          << " channel(s) in turn.\n";
    else
      src << ";\n// each work-item copies the " << own.inRows << " input rows of " << own.outRows
          << " output rows, zero-padded, into its local memory once,\n// then computes those rows " << W
          << " outputs at a time with the window's weights in registers.\n";
    if (pro)
      src << "// The input rows are the 1x1 conv's (" << pro->geo.K << " input channels) and the ops after it, "
          << "computed 8 columns at a time as they are copied.\n";
    src << detail::Emitter::prelude() << detail::Emitter::helpersOnce(pc.helpers, ek->vectorHelpers);
    src << ek->laneMacro(e, W, [](bool) { return std::string(); });
    src << "__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void " << name << ek->signature() << " {\n";
    if (!registers) src << "  __local float rows[" << together * planeFloats << "];\n";
    src << "  for (int gid = get_global_id(0) * " << perItem << "; gid < min(" << units << ", (int)(get_global_id(0) + 1) * "
        << perItem << "); ++gid) {\n";
    std::ostringstream body;
    const std::string weights = [&] {
      std::string w = "  const __global float* wt = in1 + co * " + std::to_string(taps) + ";\n";
      for (int64_t t = 0; t < taps; ++t) w += "  const float w" + std::to_string(t) + " = wt[" + std::to_string(t) + "];\n";
      return w;
    }();
    if (pro) {  // the planes of channels co0, ... from the 1x1 conv's image and weights, then each channel in turn
      body << "  const int oy0 = 0, co0 = (gid % " << unitChannels << ") * " << together << ", img = gid / " << unitChannels
           << ";\n";
      body << "  const int ci = co0 / " << multiplier << ";\n";
      body << "  const __global float* image = in0 + img * " << pro->geo.K * geo.H * geo.Wd << ";\n";
      body << "  const __global float* wp = in" << pc.at << " + ci * " << pro->geo.K << ";\n";
      body << "  for (int c = 0; c < " << together * planeFloats << "; ++c) rows[c] = 0.0f;\n";
      body << pointwisePlane(*pro, pc, geo, own.width, planeFloats, together);
      body << "  for (int q = 0; q < " << together << "; ++q) {\n";
      body << "  const int co = co0 + q;\n";
      body << "  const __local float* mine = rows + q * " << planeFloats << ";\n";
      body << weights;
    } else {
      body << "  const int oy0 = (gid % " << blocks << ") * " << own.outRows << ", co = (gid / " << blocks << ") % "
           << channels << ", img = gid / " << blocks * channels << ";\n";
      body << "  const __global float* plane = in0 + (img * " << channels / multiplier << " + co / " << multiplier << ") * "
           << geo.H * geo.Wd << ";\n";
      body << weights;
    }
    if (!pro && !registers) body << ownedRowsCopy(geo, own);
    body << "  const float bias = " << (geo.c != kNoValue ? "in2[co]" : "0.0f") << ";\n";
    if (registers)
      depthwiseRegisterRows(body, geo, OH, [&](int64_t oy) {
        return "FUSEC_EPILOGUE(sums" + std::to_string(oy) + ", ((img * " + std::to_string(channels) + " + co) * " +
               std::to_string(OH) + " + " + std::to_string(oy) + ") * " + std::to_string(OW) + ", " + std::to_string(OW) + ")";
      });
    else
      depthwiseRowLoop(body, geo, W, OH, OW, own, pro ? "mine" : "rows", [&](int j) {
        return "FUSEC_EPILOGUE(sums" + std::to_string(j) + ", ((img * " + std::to_string(channels) + " + co) * " +
               std::to_string(OH) + " + oy0 + r + " + std::to_string(j) + ") * " + std::to_string(OW) + " + ox0, " +
               std::to_string(OW) + " - ox0)";
      });
    if (pro) body << "  }\n";  // the loop over the unit's channels
    // The body, one (image, channel(s), block) unit, inside the loop over the work-item's units.
    src << detail::Emitter::indented(body.str()) << "  }\n}\n";
    k.source = src.str();
    return k;
  }
  src << "// Depthwise Conv, direct: " << channels << " output channels (" << multiplier << " per input channel), window "
      << geo.KH << "x" << geo.KW << ", stride " << geo.SH << "x" << geo.SW << ", dilation " << geo.DH << "x" << geo.DW
      << ";\n// each work-item computes " << W << " neighbouring outputs of one row with the window's weights in registers.\n";
  src << detail::Emitter::prelude() << ek->vectorHelpers;
  src << ek->laneMacro(e, W, [](bool) { return std::string(); });
  src << "__kernel void " << name << ek->signature() << " {\n";
  src << "  const int gid = get_global_id(0);\n";
  src << "  const int ox0 = (gid % " << OWT << ") * " << W << ", oy = (gid / " << OWT << ") % " << OH << ";\n";
  src << "  const int co = (gid / " << OWT * OH << ") % " << channels << ", img = gid / " << OWT * OH * channels << ";\n";
  src << "  const __global float* plane = in0 + (img * " << channels / multiplier << " + co / " << multiplier << ") * "
      << geo.H * geo.Wd << ";\n";
  src << "  const __global float* wt = in1 + co * " << taps << ";\n";
  for (int64_t t = 0; t < taps; ++t) src << "  const float w" << t << " = wt[" << t << "];\n";
  src << "  " << vec << " sums = (" << vec << ")(" << (geo.c != kNoValue ? "in2[co]" : "0.0f") << ");\n";
  // The input columns the lanes read at tap kx: ix0 + lane * SW + kx * DW.
  src << "  const int ix0 = ox0 * " << geo.SW << " - " << geo.PW << ";\n";
  src << "  const int" << W << " lane = (int" << W << ")(";
  for (int j = 0; j < W; ++j) src << (j ? ", " : "") << j;
  src << ");\n";
  src << "  const int inner = " << depthwiseInner(geo, W) << ";\n";
  src << depthwiseTaps(geo, W, rowGather, [](int64_t t) { return "w" + std::to_string(t); }, "sums");
  src << "  FUSEC_EPILOGUE(sums, ((img * " << channels << " + co) * " << OH << " + oy) * " << OW << " + ox0, " << OW
      << " - ox0)\n";
  src << "}\n";
  k.source = src.str();
  return k;
}

/// The outputs a depthwise work-item computes along a row: 16 at stride 1
/// where rows are wider than 8, else 8. Measured per kernel in MobileNetV2
/// and EfficientNet-B0 (`fusec run --json`, both widths): 16 took 0.2-0.4x
/// the time of 8 on 14-wide rows and 0.6-0.9x on rows of 28 to 112, but
/// 1.2-1.8x at stride 2 and up to 1.4x on 7-wide rows, where half its
/// lanes are past the row.
int depthwiseWidth(const Geometry& geo) { return geo.SW == 1 && geo.OW > 8 ? 16 : 8; }

/// A matrix-vector product whose matrix rows are contiguous along K: a
/// batch-1 Linear layer (Gemm with one row of A and B transposed, as
/// PyTorch exports nn.Linear) or a 1x1 Conv on one pixel (squeeze and
/// excitation). Bandwidth bound: every weight is read once, and the
/// epilogue runs on each output as it is stored.
///
/// Split-K (for devices with local memory): one work-group of 64
/// work-items per output; they stride through the row together
/// (neighbouring work-items read neighbouring weights), then sum their
/// partial dots in local memory. Otherwise (a CPU, where barriers are
/// emulated): each work-item takes two rows and reads each as float16
/// vectors, one FMA per 16 weights, then sums the lanes; the MobileNetV2
/// classifier (1280 x 1000) took 54 us so, against 356 us tiled as a GEMM
/// with B's columns gathered.
Expected<KernelSource> emitGemv(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                const std::string& name, const std::string& comment, const Geometry& geo, bool splitK) {
  constexpr int L = 64, R = 2, V = 16;
  // The matrix is in1 (weights / B); the vector in0 (the image / A's row).
  const int64_t rows = geo.conv ? geo.M : geo.N, K = geo.K;
  const int64_t rowStride = geo.conv ? geo.K : geo.bn, vecStride = geo.conv ? geo.bk : geo.ak;
  detail::Emitter e(g, catalog);
  Expected<EpilogueKernel> ek = epilogueKernel(e, g, catalog, members, name, headOperands(g.node(members.front()), geo));
  if (!ek) return ek.error();
  KernelSource& k = ek->k;
  const std::string x = "in0[k * " + std::to_string(vecStride) + "]";  // the vector's element k

  std::ostringstream src;
  src << "// " << comment << "\n";
  src << "// Matrix-vector product: " << rows << " outputs, each the dot of a contiguous row of " << K
      << " weights with the vector;\n";
  if (splitK)
    src << "// " << L << " work-items per output stride through the row, then sum in local memory.\n";
  else
    src << "// each work-item takes " << R << " rows, " << V << " weights per FMA.\n";
  src << detail::Emitter::prelude();
  // The epilogue on output `r` of dot product `dot`.
  auto epilogue = [&](const std::string& dot, const std::string& indent) {
    std::string out = indent + "float acc = " + dot + ";\n";
    if (geo.alpha != 1.0f) out += indent + "acc *= " + detail::floatLiteral(geo.alpha) + ";\n";
    if (geo.c != kNoValue && geo.conv) {
      out += indent + "acc += in2[r];  // bias of the output channel\n";
    } else if (geo.c != kNoValue) {
      // C broadcast to [1, N]: per output, or one value.
      const Shape cs = g.value(geo.c).type.staticShape();
      out += indent + "acc = fma(" + detail::floatLiteral(geo.beta) + ", in2[" +
             (!cs.empty() && cs.back() != 1 ? "r" : "0") + "], acc);\n";
    }
    std::istringstream body(ek->body);
    for (std::string line; std::getline(body, line);) out += indent + line + "\n";
    out += ek->stores(e, indent + "  ");
    return indent + "const int i = r;\n" + detail::Emitter::coordinatesUsedBy(out, ek->shape, "i", indent) + out;
  };
  if (splitK) {
    k.globalSize = static_cast<size_t>(rows * L);
    k.localSize = L;
    k.localMemBytes = L * sizeof(float);
    src << "__kernel __attribute__((reqd_work_group_size(" << L << ", 1, 1))) void " << name
        << ek->signature() << " {\n";
    src << "  const int r = get_group_id(0), lid = get_local_id(0);\n";
    src << "  const __global float* row = in1 + r * " << rowStride << ";\n";
    src << "  float s = 0.0f;\n";
    src << "  for (int k = lid; k < " << K << "; k += " << L << ") s = fma(row[k], " << x << ", s);\n";
    src << "  __local float part[" << L << "];\n  part[lid] = s;\n  barrier(CLK_LOCAL_MEM_FENCE);\n";
    src << "  for (int h = " << L / 2 << "; h > 0; h >>= 1) {\n    if (lid < h) part[lid] += part[lid + h];\n"
        << "    barrier(CLK_LOCAL_MEM_FENCE);\n  }\n";
    src << "  if (lid != 0) return;\n";
    src << epilogue("part[0]", "  ");
    src << "}\n";
  } else {
    k.globalSize = static_cast<size_t>((rows + R - 1) / R);
    const int64_t whole = K / V * V;
    const std::string vec = "float" + std::to_string(V);
    src << "__kernel void " << name << ek->signature() << " {\n";
    src << "  const int r0 = get_global_id(0) * " << R << ";\n";
    // Rows past the last are clamped: they compute a duplicate, never stored.
    for (int j = 0; j < R; ++j)
      src << "  const __global float* row" << j << " = in1 + min(r0 + " << j << ", " << rows - 1 << ") * " << rowStride
          << ";\n  " << vec << " s" << j << " = (" << vec << ")(0.0f);\n";
    src << "  for (int k = 0; k < " << whole << "; k += " << V << ") {\n";
    if (vecStride == 1) {
      src << "    const " << vec << " x = vload" << V << "(0, in0 + k);\n";
    } else {
      src << "    const " << vec << " x = (" << vec << ")(";
      for (int l = 0; l < V; ++l) src << (l ? ", " : "") << "in0[(k + " << l << ") * " << vecStride << "]";
      src << ");\n";
    }
    for (int j = 0; j < R; ++j) src << "    s" << j << " = fma(vload" << V << "(0, row" << j << " + k), x, s" << j << ");\n";
    src << "  }\n";
    for (int j = 0; j < R; ++j) {
      src << "  {\n    const int r = r0 + " << j << ";\n";
      src << "    const float8 h = s" << j << ".lo + s" << j << ".hi;\n    const float4 q = h.lo + h.hi;\n";
      src << "    float dot = (q.x + q.y) + (q.z + q.w);\n";
      if (whole < K) src << "    for (int k = " << whole << "; k < " << K << "; ++k) dot = fma(row" << j << "[k], " << x << ", dot);\n";
      src << "    if (r < " << rows << ") {\n" << epilogue("dot", "      ") << "    }\n  }\n";
    }
    src << "}\n";
  }
  k.source = src.str();
  return k;
}

/// Whether `geo` is a matrix-vector product emitGemv takes: one output
/// vector, weight rows contiguous along K, no batches.
bool isGemv(const Geometry& geo) {
  if (geo.conv)  // a 1x1 conv on one pixel of one image, one group
    return !geo.im2col && geo.N == 1 && geo.groups == 1 && geo.batch.size() == 2 && geo.batch[0] == 1 && geo.K >= 64;
  return geo.M == 1 && geo.bk == 1 && geo.batch.empty() && geo.K >= 64;
}

/// A projection shortcut summed into a Conv's product, as ResNet's
/// downsampling blocks end: Add(Conv(y, w, b), Conv(x, ws, bs)), the second
/// a 1x1 ungrouped unpadded Conv (any stride) with the same result shape.
/// Both are one implicit GEMM: the shortcut's K rows (x's channels, read at
/// the strided output positions) continue the conv's, into the same
/// accumulators, so the shortcut's result never goes to memory.
struct Shortcut {
  NodeRef main = 0, conv = 0, add = 0;    ///< the block's Conv, the shortcut's, the Add of both
  ValueId x = kNoValue, w = kNoValue, bias = kNoValue;
  int64_t K = 1, SH = 1, SW = 1, H = 1, Wd = 1;  ///< x's channels, the strides, x's plane
};

/// Whether the Conv `n` can be a shortcut: 2-D, one group, a 1x1 window
/// without padding, float32 with static shapes.
std::optional<Shortcut> asShortcut(const Graph& g, NodeRef n) {
  const NodeData& d = g.node(n);
  for (ValueId v : {d.inputs[0], d.inputs[1], d.outputs[0]})
    if (!g.value(v).type.isStatic() || g.value(v).type.dtype != DType::Float32) return std::nullopt;
  const Shape xs = g.value(d.inputs[0]).type.staticShape(), ws = g.value(d.inputs[1]).type.staticShape();
  if (xs.size() != 4 || ws.size() != 4 || ws[2] != 1 || ws[3] != 1 || d.attrInt("group", 1) != 1 || ws[1] != xs[1])
    return std::nullopt;
  Expected<WindowGeometry> w = windowGeometry(d, {xs[2], xs[3]}, {1, 1}, false);
  if (!w || w->padBegin != Shape{0, 0} || w->padEnd != Shape{0, 0}) return std::nullopt;
  Shortcut s;
  s.conv = n;
  s.x = d.inputs[0];
  s.w = d.inputs[1];
  if (d.inputs.size() > 2) s.bias = d.inputs[2];
  s.K = xs[1];
  s.SH = w->strides[0];
  s.SW = w->strides[1];
  s.H = xs[2];
  s.Wd = xs[3];
  return s;
}


/// The members of `g` before the depthwise conv `dw` that compute its input
/// from the 1x1 conv `pw` (all in `members`): a pointwise prologue, or
/// nothing where the values between them are read outside those nodes.
/// The 1x1 conv is ungrouped, unpadded and of stride 1.
std::optional<ConvPrologue> pointwisePrologue(const Graph& g, const std::vector<NodeRef>& members, NodeRef pw, NodeRef dw) {
  auto inGroup = [&](NodeRef n) { return std::find(members.begin(), members.end(), n) != members.end(); };
  const NodeData& pd = g.node(pw);
  const NodeData& dd = g.node(dw);
  Expected<Geometry> pg = convGeometry(g, pd), dg = convGeometry(g, dd);
  if (!pg || !dg || pg->groups != 1 || pg->KH != 1 || pg->KW != 1 || pg->SH != 1 || pg->SW != 1 || pg->PH || pg->PW ||
      pg->im2col || pg->H * pg->Wd == 0 || dg->groups <= 1)
    return std::nullopt;
  const Shape xs = g.value(pd.inputs[0]).type.staticShape();
  if (xs.size() != 4) return std::nullopt;
  // Walk back from the depthwise conv's input to the 1x1 conv.
  std::set<NodeRef> before;
  std::vector<ValueId> pending = {dd.inputs[0]};  // values whose producers are still to visit
  while (!pending.empty()) {
    const ValueId v = pending.back();
    pending.pop_back();
    const std::optional<NodeRef> p = g.producer(v);
    if (!p || !inGroup(*p) || *p == dw || !before.insert(*p).second) continue;
    if (*p == pw) continue;
    const NodeData& n = g.node(*p);
    if (n.op == "Conv" || n.outputs.size() != 1) return std::nullopt;
    for (ValueId in : n.inputs) pending.push_back(in);
  }
  if (!before.count(pw)) return std::nullopt;
  // What they compute is read by them and the depthwise conv alone, and
  // every value between has the 1x1 conv's result type (elementwise).
  for (NodeRef n : before)
    for (ValueId out : g.node(n).outputs) {
      if (g.isGraphOutput(out) || g.value(out).type != g.value(pd.outputs[0]).type) return std::nullopt;
      for (const auto& use : g.uses(out))
        if (use.node != dw && !before.count(use.node)) return std::nullopt;
    }
  ConvPrologue d;
  d.conv = pw;
  for (NodeRef n : members)
    if (before.count(n)) d.members.push_back(n);
  if (d.members.front() != pw) return std::nullopt;  // `before` holds pw: members is not empty
  d.x = pd.inputs[0];
  d.w = pd.inputs[1];
  d.bias = pg->c;
  d.geo = pg.value();
  d.pointwise = true;
  return d;
}

/// Squeeze-and-excitation's scale as the prologue of the conv that reads it
/// (EfficientNet's and MobileNetV3's 1x1 projections): Conv(x * s) with s
/// one factor per image and channel ([N, C, 1, 1], or [1, C, 1, 1]). Each
/// of B's rows (a channel's values at the panel's window positions, zero
/// in the padding) is multiplied by its channel's factor as it is loaded,
/// so the scaled tensor is never stored.
struct ChannelScale {
  NodeRef mul = 0;
  ValueId x = kNoValue, s = kNoValue;
  bool perImage = false;  ///< s has one row per image (else one for all)
};

/// The group's leading Mul as a channel scale of the 1x1 conv after it, or
/// the reason it is not one.
Expected<ChannelScale> channelScale(const Graph& g, const std::vector<NodeRef>& members) {
  const Error refused{"a Mul before a Conv in one group must scale the channels of the conv's 2-D input "
                      "(x * s, s of shape [N or 1, C, 1, 1], x of the conv's input shape)",
                      true};
  const NodeData& m = g.node(members[0]);
  if (m.inputs.size() != 2 || g.uses(m.outputs[0]).size() != 1 || g.isGraphOutput(m.outputs[0])) return refused;
  // Unpadded convs only: the factor multiplies B's rows as they are loaded,
  // padding included, and ONNX pads after the Mul: a padded zero times an
  // infinite or NaN factor would be NaN where the model has 0.
  const NodeData& conv = g.node(g.uses(m.outputs[0])[0].node);
  const Attribute* pads = conv.attr("pads");
  const auto* padList = pads ? std::get_if<std::vector<int64_t>>(pads) : nullptr;
  const std::string autoPad = conv.attrString("auto_pad", "NOTSET");
  if ((padList && std::any_of(padList->begin(), padList->end(), [](int64_t p) { return p != 0; })) ||
      (autoPad != "NOTSET" && autoPad != "VALID"))
    return Error{"a channel scale before a Conv fuses only into an unpadded conv (a padded zero times an infinite "
                 "factor would be NaN where the model pads after the Mul with zeros)",
                 true};
  const TensorType& out = g.value(m.outputs[0]).type;
  if (!out.isStatic() || out.dtype != DType::Float32 || out.staticShape().size() != 4) return refused;
  const Shape os = out.staticShape();
  for (size_t i = 0; i < 2; ++i) {
    const TensorType& xt = g.value(m.inputs[i]).type;
    const TensorType& st = g.value(m.inputs[1 - i]).type;
    if (xt != out || !st.isStatic() || st.dtype != DType::Float32 || st.staticShape().size() != 4) continue;
    const Shape ss = st.staticShape();
    if ((ss[0] != os[0] && ss[0] != 1) || ss[1] != os[1] || ss[2] != 1 || ss[3] != 1) continue;
    return ChannelScale{members[0], m.inputs[i], m.inputs[1 - i], ss[0] != 1};
  }
  return refused;
}

/// What a group with two Convs computes.
struct ConvPair {
  std::optional<Shortcut> shortcut;
  std::optional<ConvPrologue> prologue;
  NodeRef main = 0;  ///< the Conv whose product the kernel tiles
};

/// The group's two Convs: a conv and its projection shortcut (both read
/// only by one Add of the group), or a depthwise conv whose result, through
/// elementwise ops of the group, a 1x1 conv reads. Empty with one Conv.
Expected<ConvPair> convPair(const Graph& g, const std::vector<NodeRef>& members) {
  std::vector<NodeRef> convs;
  for (NodeRef n : members)
    if (g.node(n).op == "Conv" && g.node(n).domain.empty()) convs.push_back(n);
  ConvPair pair;
  if (convs.size() <= 1) return pair;
  const Error refused{"a group with two Convs builds only a conv plus a 1x1 projection shortcut (ungrouped, "
                      "unpadded, the same result shape), each read only by one Add of both, a depthwise or "
                      "ungrouped 2-D conv and elementwise ops on it read only by a 1x1 ungrouped conv, or a 1x1 "
                      "ungrouped conv (stride 1, unpadded) and elementwise ops on it read only by a depthwise conv",
                      true};
  if (convs.size() > 2) return refused;
  const ValueId r0 = g.node(convs[0]).outputs[0], r1 = g.node(convs[1]).outputs[0];
  auto inGroup = [&](NodeRef n) { return std::find(members.begin(), members.end(), n) != members.end(); };
  if (g.uses(r0).size() == 1 && g.uses(r1).size() == 1 && g.uses(r0)[0].node == g.uses(r1)[0].node) {
    const NodeRef add = g.uses(r0)[0].node;
    const NodeData& ad = g.node(add);
    if (ad.op != "Add" || !ad.domain.empty() || !inGroup(add) || g.isGraphOutput(r0) || g.isGraphOutput(r1) ||
        g.value(r0).type != g.value(r1).type)
      return refused;
    // The one with the smaller window is the shortcut (ResNet-50's 1x1
    // stride-1 projections beside a 1x1 conv: either would do).
    std::optional<Shortcut> s1 = asShortcut(g, convs[1]), s0 = asShortcut(g, convs[0]);
    std::optional<Shortcut> s = s1 ? s1 : s0;
    if (!s) return refused;
    s->main = s->conv == convs[1] ? convs[0] : convs[1];
    s->add = add;
    if (g.node(s->main).attrInt("group", 1) != 1) return refused;
    pair.main = s->main;
    pair.shortcut = std::move(s);
    return pair;
  }
  // A 1x1 conv computing a depthwise conv's input.
  for (size_t which = 0; which < 2; ++which)
    if (std::optional<ConvPrologue> d = pointwisePrologue(g, members, convs[which], convs[1 - which])) {
      pair.main = convs[1 - which];
      pair.prologue = std::move(d);
      return pair;
    }
  // The depthwise prologue: walk back from the 1x1 conv's input through
  // single-use members to the other conv.
  for (size_t which = 0; which < 2; ++which) {
    const NodeRef pw = convs[which], dw = convs[1 - which];
    std::vector<NodeRef> chain;
    ValueId v = g.node(pw).inputs[0];
    bool reached = false;
    while (!reached) {
      const std::optional<NodeRef> p = g.producer(v);
      if (!p || !inGroup(*p) || g.uses(v).size() != 1 || g.isGraphOutput(v)) break;
      chain.insert(chain.begin(), *p);
      if (*p == dw) reached = true;
      else v = g.node(*p).inputs.empty() ? kNoValue : g.node(*p).inputs[0];
      if (v == kNoValue) break;
    }
    if (!reached) continue;
    const NodeData& pd = g.node(pw);
    const NodeData& dd = g.node(dw);
    Expected<Geometry> pg = convGeometry(g, pd);
    Expected<Geometry> dg = convGeometry(g, dd);
    if (!pg || !dg || pg->im2col || pg->groups != 1) return refused;
    const Shape xs = g.value(dd.inputs[0]).type.staticShape();
    // Depthwise: one input channel and one output channel per group, 2-D;
    // or dense: one group, 2-D.
    const bool depthwise = dg->groups == xs[1] && dg->M == 1 && dg->K == dg->KH * dg->KW && dg->KH * dg->KW <= 49;
    if (xs.size() != 4 || (!depthwise && dg->groups != 1)) return refused;
    for (NodeRef n : chain)
      if (n != dw && g.value(g.node(n).outputs[0]).type != g.value(dd.outputs[0]).type) return refused;
    ConvPrologue d;
    d.conv = dw;
    d.members = chain;
    d.x = dd.inputs[0];
    d.w = dd.inputs[1];
    d.bias = dg->c;
    d.geo = dg.value();
    d.dense = !depthwise;
    pair.main = pw;
    pair.prologue = std::move(d);
    return pair;
  }
  return refused;
}

}  // namespace

namespace {

/// A depthwise conv (channel multiplier 1) and its elementwise ops as the
/// prologue of the 1x1 conv after it, where local memory is emulated (a
/// CPU): each work-item owns a block of R output rows of the image. For
/// each of the K channels it copies the block's input rows, zero-padded,
/// into its local memory (as the direct depthwise kernel does: every tap
/// one vector load, no edge tests), computes the R rows and the ops after
/// the conv into its panel of K x R*OW values, then the 1x1 conv's M
/// outputs of those R*OW pixels from the panel, TM x W tiles of
/// contiguous columns (rows of the block joined, so a 56-wide row wastes no
/// lanes). The panel form (16 columns of all K channels per work-item,
/// every tap from global memory, edges gathered) lost to the two kernels
/// apart on maps 28 wide and wider. nullopt where the form does not apply
/// (the ops read an element's index, the rows do not fit): the caller
/// builds the panel form.
std::optional<Expected<KernelSource>> emitDepthwiseRowBlocks(const Graph& g, const std::vector<NodeRef>& members,
                                                             const OpCatalog& catalog, const std::string& name,
                                                             const std::string& comment, const Geometry& geo,
                                                             const NodeData& pw, const ConvPrologue& pro,
                                                             const GemmTiling& tiling) {
  const Geometry& d = pro.geo;
  const int64_t M = geo.M, K = geo.K, N = geo.N, OW = d.OW, OH = OW > 0 ? N / OW : 0;
  const int64_t images = shapeNumel(geo.batch);
  if (d.groups != K || d.M != 1 || geo.groups != 1 || OH * OW != N || M == 0 || N == 0 || images == 0 ||
      OW < tiling.depthwiseRowBlocks)
    return std::nullopt;
  // 8 lanes: on 56-wide rows 16 lanes waste half of each row's last
  // vector (the block 0.90 of the two kernels apart, 0.81 with 8), on
  // 112-wide ones within noise.
  const int DW = 8, W = tiling.width;
  if (W != 8 && W != 16) return std::nullopt;
  // Rows per block: as many as keep 8 work-groups (one row at least), the
  // panel within 128 KiB (L2) and the copied rows within the owned bytes;
  // none fits: the panel form.
  const int64_t OWT = (OW + DW - 1) / DW;
  OwnedRows own;
  for (int64_t R : {4, 2, 1}) {
    own = depthwiseOwnedRows(d, R, OWT * DW, tiling.depthwiseOwnedBytes);
    const bool fits = own.outRows >= R && K * R * OW * static_cast<int64_t>(sizeof(float)) <= 128 * 1024;
    if (fits && (R == 1 || ((OH + R - 1) / R) * images >= 8)) {
      own.outRows = R;
      own.inRows = (R - 1) * d.SH + (d.KH - 1) * d.DH + 1;
      break;
    }
    own.outRows = 0;
  }
  if (own.outRows == 0) return std::nullopt;
  const int64_t R = own.outRows, PS = R * OW, blocks = (OH + R - 1) / R;

  std::vector<NodeRef> headed = members;
  std::vector<ValueId> operands = headOperands(pw, geo);
  Expected<PrologueCode> pc = prologueCode(g, catalog, pro, members, headed, operands, DW, 2, "depthwise prologue", "dwv");
  if (!pc) return Expected<KernelSource>(pc.error());
  if (!detail::Emitter::coordinatesUsedBy(pc->body, pc->shape, "i", "").empty() || detail::Emitter::names(pc->body, "i"))
    return std::nullopt;
  detail::Emitter e(g, catalog);
  Expected<EpilogueKernel> ek = epilogueKernel(e, g, catalog, headed, name, operands, W, 2, pc->inputs, pc->params);
  if (!ek) return Expected<KernelSource>(ek.error());
  KernelSource& k = ek->k;
  const int TM = balancedRows(M, tiling.rows);
  k.globalSize = static_cast<size_t>(blocks * images);
  k.localSize = 1;
  k.localMemBytes = static_cast<size_t>(own.inRows * own.width + K * PS + W) * sizeof(float);

  const std::string vec = "float" + std::to_string(W), dvec = "float" + std::to_string(DW);
  static const char* kLanes = "0123456789abcdef";
  std::ostringstream src;
  src << "// " << comment << "\n";
  src << "// A depthwise conv (" << d.KH << "x" << d.KW << ", stride " << d.SH << "x" << d.SW << ") and the ops after it as the "
      << "prologue of a 1x1 conv, C[" << M << "x" << N << "] = A[" << M << "x" << K << "] * B[" << K << "x" << N << "];\n"
      << "// each work-item owns " << R << " output rows: for each of the " << K << " channels it copies their input rows, "
      << "zero-padded, into its local memory\n// and computes them " << DW << " outputs at a time into its panel of " << K
      << " x " << PS << " values, then the 1x1 conv's " << TM << "x" << W << " tiles of those columns from it.\n";
  src << detail::Emitter::prelude() << detail::Emitter::helpersOnce(pc->helpers, ek->vectorHelpers);
  src << ek->laneMacro(e, W, [&](bool) {
    return geo.c != kNoValue ? std::string("  acc += in2[m];  // bias of the output channel\n") : std::string();
  });
  src << "__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void " << name << ek->signature() << " {\n";
  src << "  __local float rows[" << own.inRows * own.width << "];\n";
  src << "  __local float panel[" << K * PS + W << "];\n";
  src << "  const int grp = get_group_id(0), oy0 = (grp % " << blocks << ") * " << R << ", bt = grp / " << blocks << ";\n";
  src << "  const __global float* image = in0 + bt * " << d.bImage << ";\n";
  src << "  for (int ci = 0; ci < " << K << "; ++ci) {\n";
  std::ostringstream body;
  body << "  const __global float* plane = image + ci * " << d.H * d.Wd << ";\n";
  body << "  const __global float* wt = in" << pc->at << " + ci * " << d.KH * d.KW << ";\n";
  for (int64_t t = 0; t < d.KH * d.KW; ++t) body << "  const float w" << t << " = wt[" << t << "];\n";
  body << "  const float bias = " << (pro.bias != kNoValue ? "in" + std::to_string(pc->at + 1) + "[ci]" : "0.0f") << ";\n";
  body << ownedRowsCopy(d, own);
  body << "  __local float* dst = panel + ci * " << PS << ";\n";
  // Row j's vector through the ops into the panel; the row's last vector
  // (past OW) stores its first OW % DW lanes.
  const int64_t rest = OW % DW;
  depthwiseRowLoop(body, d, DW, OH, OW, own, "rows", [&](int j) {
    std::string s = "{\n        const " + dvec + " dwv = sums" + std::to_string(j) + ";\n";
    std::istringstream ops(pc->body);
    for (std::string line; std::getline(ops, line);) s += "      " + line + "\n";
    s += "        const " + dvec + " pv = " + pc->result + ";\n";
    s += "        __local float* at = dst + (r + " + std::to_string(j) + ") * " + std::to_string(OW) + " + ox0;\n";
    if (rest == 0) return s + "        vstore" + std::to_string(DW) + "(pv, 0, at);\n      }";
    s += "        if (ox0 + " + std::to_string(DW) + " <= " + std::to_string(OW) + ") vstore" + std::to_string(DW) +
         "(pv, 0, at);\n        else {\n";
    for (int64_t size = 8, from = 0; size >= 1; size /= 2) {
      if (!(rest & size)) continue;
      std::string lanes;
      for (int64_t l = from; l < from + size; ++l) lanes += kLanes[l];
      if (size == 1) s += "          at[" + std::to_string(from) + "] = pv.s" + lanes + ";\n";
      else s += "          vstore" + std::to_string(size) + "(pv.s" + lanes + ", 0, at + " + std::to_string(from) + ");\n";
      from += size;
    }
    return s + "        }\n      }";
  });
  src << detail::Emitter::indented(body.str()) << "  }\n";
  // The 1x1 conv over the block's columns, W at a time across its rows
  // (rows past M and lanes past the block computed, never stored).
  src << "  const int cols = min(" << R << ", " << OH << " - oy0) * " << OW << ";\n";
  src << "  for (int s0 = 0; s0 < cols; s0 += " << W << ") {\n";
  src << "    const int n0 = oy0 * " << OW << " + s0, valid = cols - s0;\n";
  src << "    for (int m0 = 0; m0 < " << M << "; m0 += " << TM << ") {\n";
  for (int r = 0; r < TM; ++r)
    src << "      const __global float* a" << r << " = in1 + min(m0 + " << r << ", " << M - 1 << ") * " << geo.am << ";\n"
        << "      " << vec << " acc" << r << " = (" << vec << ")(0.0f);\n";
  src << "      for (int k = 0; k < " << K << "; ++k) {\n";
  src << "        const " << vec << " bv = vload" << W << "(0, panel + k * " << PS << " + s0);\n";
  for (int r = 0; r < TM; ++r)
    src << "        acc" << r << " = fma((" << vec << ")(a" << r << "[k * " << geo.ak << "]), bv, acc" << r << ");\n";
  src << "      }\n";
  for (int r = 0; r < TM; ++r)
    src << "      { const int m = m0 + " << r << "; FUSEC_EPILOGUE(acc" << r << ", bt * " << M * N << " + m * " << N
        << " + n0, m < " << M << " ? valid : 0) }\n";
  src << "    }\n  }\n}\n";
  k.source = src.str();
  return Expected<KernelSource>(std::move(k));
}

/// The float<W> of `base[at.s0]`, `base[at.s1]`, ... where the int<W>
/// `inside` is set, zero elsewhere (`at` must index inside there too): a
/// gather of W lanes, e.g. a row segment with its padding.
std::string maskedGather(int W, const std::string& base, const std::string& at, const std::string& inside) {
  static const char* kLanes = "0123456789abcdef";
  const std::string vec = "float" + std::to_string(W);
  std::string s = "select((" + vec + ")(0.0f), (" + vec + ")(";
  for (int j = 0; j < W; ++j) s += (j ? ", " : "") + base + "[" + at + ".s" + kLanes[j] + "]";
  return s + "), " + inside + ")";
}

constexpr int64_t kVectorBytes = 16 * sizeof(float);

/// Whether `conv` (geometry `geo`) is a conv emitWinograd computes, short
/// of its epilogue's vector form.
bool winogradConv(const Graph& g, const Geometry& geo, const NodeData& conv, const GemmTiling& tiling) {
  const ValueId w = conv.inputs[1];
  const int64_t OH = geo.OW > 0 ? geo.N / geo.OW : 0;
  return tiling.winogradLocalBytes > 0 && geo.conv && geo.groups == 1 && g.value(conv.inputs[0]).type.staticShape().size() == 4 &&
         geo.KH == 3 && geo.KW == 3 && geo.SH == 1 && geo.SW == 1 && geo.DH == 1 && geo.DW == 1 && g.isConstant(w) &&
         g.value(w).constant->dtype() == DType::Float32 && OH > 0 && geo.OW > 0 && geo.M > 0 &&
         geo.K > 0 && 16 * (geo.K / 9) * kVectorBytes <= tiling.winogradLocalBytes;
}

/// Winograd's F(2x2, 3x3) for a 3x3 stride-1 conv (one group, constant
/// weights, no prologue), with its epilogue
/// (GemmTiling::winogradLocalBytes). Each output tile of 2x2 comes from a
/// 4x4 input patch d: V = B^T d B, then for each of the 16 points of the
/// transform a product over the input channels with U = G g G^T (the
/// weights transformed here, once: a derived constant laid out [16][M][C]),
/// then Y = A^T m A. 16 multiplies per tile and channel pair against 36.
///
/// A work-item owns 16 tiles, the lanes of a float16: on maps at least 23
/// wide, neighbouring tiles of one tile row (2 output rows x 32 columns,
/// their patches loaded as whole input rows); on narrower maps 16
/// consecutive tiles of the map in row-major order (ResNet-18's 14x14 map
/// has 49 tiles, its 7x7 map 16), their patches gathered and their outputs
/// moved into rows before the epilogue. It transforms their input patches
/// for every input channel once into its local memory (16 x C float16s),
/// then computes its share of the output channels (all of them unless the
/// map makes too few work-items), 8 at a time (16 accumulators spill): for
/// each transform point a row tile of 8 float16 accumulators, one broadcast
/// FMA per channel.
/// nullopt where the conv is not such a conv or its epilogue has no
/// vector form (the implicit GEMM then computes it).
std::optional<Expected<KernelSource>> emitWinograd(const Graph& g, const std::vector<NodeRef>& members,
                                                   const OpCatalog& catalog, const std::string& name,
                                                   const std::string& comment, const Geometry& geo, const NodeData& conv,
                                                   const GemmTiling& tiling) {
  if (!winogradConv(g, geo, conv, tiling)) return std::nullopt;
  const ValueId x = conv.inputs[0], w = conv.inputs[1];
  const Shape xs = g.value(x).type.staticShape();
  const int64_t images = xs[0], C = xs[1], H = geo.H, Wd = geo.Wd, M = geo.M, OW = geo.OW, OH = geo.N / OW;
  const int64_t TH = (OH + 1) / 2, TW = (OW + 1) / 2;
  const bool rows = OW >= 23;  // else consecutive tiles of the map
  const int64_t TBR = rows ? (TW + 15) / 16 : (TH * TW + 15) / 16;  // work-items per tile row, or per image
  std::vector<ValueId> operands = {x};
  if (geo.c != kNoValue) operands.push_back(geo.c);
  detail::Emitter e(g, catalog);
  Expected<EpilogueKernel> ek = epilogueKernel(e, g, catalog, members, name, operands, 16, 1);
  if (!ek) return ek.error();
  if (ek->lanes != 16) return std::nullopt;
  KernelSource& k = ek->k;

  // U[4i + j][m][c] = (G g[m][c] G^T)[i][j], computed when the kernel's
  // buffers are made (planning emits this kernel several times).
  k.derived.push_back(std::make_shared<DerivedConstant>(
      DType::Float32, Shape{16, M, C}, [weights = g.value(w).constant, M, C](Tensor& u) {
        static constexpr double G[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
        const float* wt = weights->data<float>();
        float* ut = u.data<float>();
        for (int64_t m = 0; m < M; ++m)
          for (int64_t c = 0; c < C; ++c) {
            const float* f = wt + (m * C + c) * 9;
            double gf[4][3];  // G g
            for (int i = 0; i < 4; ++i)
              for (int b = 0; b < 3; ++b) gf[i][b] = G[i][0] * f[b] + G[i][1] * f[3 + b] + G[i][2] * f[6 + b];
            for (int i = 0; i < 4; ++i)
              for (int j = 0; j < 4; ++j)
                ut[((i * 4 + j) * M + m) * C + c] =
                    static_cast<float>(gf[i][0] * G[j][0] + gf[i][1] * G[j][1] + gf[i][2] * G[j][2]);
          }
      }));

  // Output channels split over work-items only where the tiles make fewer
  // than 2 per core, and at least 16 each.
  const int64_t blocks = images * (rows ? TH : 1) * TBR, cores = std::max<int64_t>(tiling.cores, 2);
  int64_t split = 1;
  while (blocks * split < 2 * cores && M / (2 * split) >= 16) split *= 2;
  const int64_t share = (M + split - 1) / split, perItem = (share + 7) / 8 * 8;
  k.globalSize = static_cast<size_t>(blocks * split);
  k.localSize = 1;
  k.localMemBytes = static_cast<size_t>(16 * C * kVectorBytes);

  const std::string sMC = std::to_string(M * C);
  std::ostringstream src;
  src << "// " << comment << "\n";
  src << "// Conv 3x3 by Winograd's F(2x2, 3x3): " << C << " -> " << M << " channels on " << H << "x" << Wd
      << "; each work-item transforms 16 tiles' input ("
      << (rows ? "2 rows x 32 columns of output" : "16 consecutive tiles of 2x2 outputs") << ") for every input channel\n"
      << "// into local memory, then computes " << perItem << " output channels from them, 8 at a time: 16 products with "
      << "the transformed weights (cst0), then the output transform and the epilogue.\n";
  src << detail::Emitter::prelude() << ek->vectorHelpers;
  src << ek->laneMacro(e, 16, [&](bool) { return geo.c != kNoValue ? std::string("  acc += in1[m];\n") : std::string(); });
  src << "// 16 columns of an input row from ix, zero outside it.\n"
      << "inline float16 fusec_wrow(const __global float* row, const int ix) {\n"
      << "  const int16 c = (int16)(ix) + (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);\n"
      << "  const int16 inside = (c >= 0) & (c < " << Wd << ");\n"
      << "  const int16 at = select((int16)(0), c, inside);\n"
      << "  return " << maskedGather(16, "row", "at", "inside") << ";\n"
      << "}\n";
  const std::string signature = ek->signature();
  src << "__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void " << name
      << signature.substr(0, signature.size() - 1) << ",\n    __global const float* restrict cst0) {\n";
  src << "  const int grp = get_group_id(0);\n";
  src << "  const int split = grp % " << split << ", blk = grp / " << split << ";\n";
  if (rows) {
    src << "  const int tx0 = (blk % " << TBR << ") * 16, ty = (blk / " << TBR << ") % " << TH << ", img = blk / "
        << TBR * TH << ";\n";
    src << "  const int ix0 = 2 * tx0 - " << geo.PW << ";\n";
  } else {
    src << "  const int t0 = (blk % " << TBR << ") * 16, img = blk / " << TBR << ";\n";
    src << "  const int16 t = (int16)(t0) + (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);\n";
    src << "  const int16 inMap = t < " << TH * TW << ", ty = t / " << TW << ", tx = t % " << TW << ";\n";
  }
  src << "  const __global float* image = in0 + img * " << C * H * Wd << ";\n";
  src << "  __local float16 v[" << 16 * C << "];  // v[point * " << C << " + channel]\n";
  src << "  for (int c = 0; c < " << C << "; ++c) {\n";
  src << "    const __global float* plane = image + c * " << H * Wd << ";\n";
  if (rows) {
    for (int i = 0; i < 4; ++i) {
      const std::string r = std::to_string(i);
      src << "    float16 w" << r << "0, w" << r << "1, w" << r << "2, w" << r << "3;\n";
      src << "    {\n";
      src << "      const int iy = 2 * ty - " << geo.PH << " + " << i << ";\n";
      src << "      float16 lo = (float16)(0.0f), mid = (float16)(0.0f);\n";
      src << "      float2 hi = (float2)(0.0f);\n";
      src << "      if (iy >= 0 && iy < " << H << ") {\n";
      src << "        const __global float* row = plane + iy * " << Wd << ";\n";
      src << "        if (ix0 >= 0 && ix0 + 34 <= " << Wd << ") {\n";
      src << "          lo = vload16(0, row + ix0);\n";
      src << "          mid = vload16(0, row + ix0 + 16);\n";
      src << "          hi = vload2(0, row + ix0 + 32);\n";
      src << "        } else {\n";
      src << "          lo = fusec_wrow(row, ix0);\n";
      src << "          mid = fusec_wrow(row, ix0 + 16);\n";
      src << "          hi = (float2)(ix0 + 32 >= 0 && ix0 + 32 < " << Wd << " ? row[ix0 + 32] : 0.0f, ix0 + 33 >= 0 && ix0 + 33 < "
          << Wd << " ? row[ix0 + 33] : 0.0f);\n";
      src << "        }\n";
      src << "      }\n";
      // Lane t's patch columns ix0 + 2t .. ix0 + 2t + 3.
      src << "      const float16 d0 = shuffle2(lo, mid, (uint16)(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30));\n";
      src << "      const float16 d1 = shuffle2(lo, mid, (uint16)(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31));\n";
      src << "      const float16 d2 = shuffle2(d0, (float16)(hi.s0), (uint16)(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16));\n";
      src << "      const float16 d3 = shuffle2(d1, (float16)(hi.s1), (uint16)(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16));\n";
      src << "      w" << r << "0 = d0 - d2; w" << r << "1 = d1 + d2; w" << r << "2 = d2 - d1; w" << r << "3 = d1 - d3;\n";
      src << "    }\n";
    }
  } else {
    for (int i = 0; i < 4; ++i) {
      const std::string r = std::to_string(i);
      src << "    float16 w" << r << "0, w" << r << "1, w" << r << "2, w" << r << "3;\n";
      src << "    {\n";
      src << "      const int16 iy = 2 * ty - " << geo.PH << " + " << i << ";\n";
      src << "      const int16 inRow = inMap & (iy >= 0) & (iy < " << H << ");\n";
      for (int j = 0; j < 4; ++j) {
        const std::string c = std::to_string(j);
        src << "      const int16 ix" << c << " = 2 * tx - " << geo.PW << " + " << j << ";\n";
        src << "      const int16 in" << c << " = inRow & (ix" << c << " >= 0) & (ix" << c << " < " << Wd << ");\n";
        src << "      const int16 at" << c << " = select((int16)(0), iy * " << Wd << " + ix" << c << ", in" << c << ");\n";
        src << "      const float16 d" << c << " = " << maskedGather(16, "plane", "at" + c, "in" + c) << ";\n";
      }
      src << "      w" << r << "0 = d0 - d2; w" << r << "1 = d1 + d2; w" << r << "2 = d2 - d1; w" << r << "3 = d1 - d3;\n";
      src << "    }\n";
    }
  }
  for (int j = 0; j < 4; ++j) {
    const std::string c = std::to_string(j);
    src << "    v[" << j << " * " << C << " + c] = w0" << c << " - w2" << c << ";\n";
    src << "    v[" << 4 + j << " * " << C << " + c] = w1" << c << " + w2" << c << ";\n";
    src << "    v[" << 8 + j << " * " << C << " + c] = w2" << c << " - w1" << c << ";\n";
    src << "    v[" << 12 + j << " * " << C << " + c] = w1" << c << " - w3" << c << ";\n";
  }
  src << "  }\n";
  src << "  const int mEnd = min(" << M << ", (split + 1) * " << perItem << ");\n";
  src << "  for (int m0 = split * " << perItem << "; m0 < mEnd; m0 += 8) {\n";
  src << "    float16 s[16][8];\n";
  for (int r = 0; r < 8; ++r)
    src << "    const __global float* u" << r << " = cst0 + min(m0 + " << r << ", " << M - 1 << ") * " << C << ";\n";
  src << "    for (int p = 0; p < 16; ++p) {\n";
  src << "      const __local float16* vp = v + p * " << C << ";\n";
  src << "      const int up = p * " << sMC << ";\n";
  for (int r = 0; r < 8; ++r) src << "      float16 acc" << r << " = (float16)(0.0f);\n";
  src << "      for (int c = 0; c < " << C << "; ++c) {\n";
  src << "        const float16 bv = vp[c];\n";
  for (int r = 0; r < 8; ++r)
    src << "        acc" << r << " = fma((float16)(u" << r << "[up + c]), bv, acc" << r << ");\n";
  src << "      }\n";
  for (int r = 0; r < 8; ++r) src << "      s[p][" << r << "] = acc" << r << ";\n";
  src << "    }\n";
  static const char* kEven = "(uint16)(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23)";
  static const char* kOdd = "(uint16)(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31)";
  for (int r = 0; r < 8; ++r) {
    const std::string R = std::to_string(r);
    src << "    if (m0 + " << r << " < mEnd) {\n";
    src << "      const int m = m0 + " << r << ";\n";
    for (int i = 0; i < 4; ++i) {
      const std::string I = std::to_string(i), p = std::to_string(4 * i);
      src << "      const float16 t" << I << "0 = s[" << 4 * i << "][" << R << "] + s[" << 4 * i + 1 << "][" << R << "] + s["
          << 4 * i + 2 << "][" << R << "];\n";
      src << "      const float16 t" << I << "1 = s[" << 4 * i + 1 << "][" << R << "] - s[" << 4 * i + 2 << "][" << R
          << "] - s[" << 4 * i + 3 << "][" << R << "];\n";
    }
    if (rows) {
      src << "      const int base = ((img * " << M << " + m) * " << OH << " + 2 * ty) * " << OW << " + 2 * tx0;\n";
      src << "      {\n";
      src << "        const float16 y0 = t00 + t10 + t20, y1 = t01 + t11 + t21;\n";
      src << "        const float16 lo = shuffle2(y0, y1, " << kEven << "), hi = shuffle2(y0, y1, " << kOdd << ");\n";
      src << "        FUSEC_EPILOGUE(lo, base, " << OW << " - 2 * tx0)\n";
      src << "        FUSEC_EPILOGUE(hi, base + 16, " << OW << " - 2 * tx0 - 16)\n";
      src << "      }\n";
      src << "      if (2 * ty + 1 < " << OH << ") {\n";
      src << "        const float16 y0 = t10 - t20 - t30, y1 = t11 - t21 - t31;\n";
      src << "        const float16 lo = shuffle2(y0, y1, " << kEven << "), hi = shuffle2(y0, y1, " << kOdd << ");\n";
      src << "        FUSEC_EPILOGUE(lo, base + " << OW << ", " << OW << " - 2 * tx0)\n";
      src << "        FUSEC_EPILOGUE(hi, base + " << OW + 16 << ", " << OW << " - 2 * tx0 - 16)\n";
      src << "      }\n";
    } else {
      // Each tile row the work-item's tiles reach: its lanes la .. lb - 1
      // (tiles t0 + la ..), their outputs of one output row interleaved
      // into `row`, then the epilogue on 16 columns at a time.
      src << "      float yv[4][16];\n";
      src << "      vstore16(t00 + t10 + t20, 0, yv[0]);\n";
      src << "      vstore16(t01 + t11 + t21, 0, yv[1]);\n";
      src << "      vstore16(t10 - t20 - t30, 0, yv[2]);\n";
      src << "      vstore16(t11 - t21 - t31, 0, yv[3]);\n";
      src << "      for (int tr = t0 / " << TW << "; tr <= (min(t0 + 16, " << TH * TW << ") - 1) / " << TW << "; ++tr) {\n";
      src << "        const int la = max(0, tr * " << TW << " - t0), lb = min(min(16, (tr + 1) * " << TW << " - t0), "
          << TH * TW << " - t0);\n";
      src << "        const int ox0 = 2 * (t0 + la - tr * " << TW << "), n = min(2 * (lb - la), " << OW << " - ox0);\n";
      src << "        for (int a = 0; a < 2 && 2 * tr + a < " << OH << "; ++a) {\n";
      src << "          float row[32];\n";
      src << "          for (int q = 0; q < 32; ++q) row[q] = q < 2 * (lb - la) ? yv[2 * a + (q & 1)][la + (q >> 1)] : 0.0f;\n";
      src << "          const int base = ((img * " << M << " + m) * " << OH << " + 2 * tr + a) * " << OW << " + ox0;\n";
      src << "          const float16 lo = vload16(0, row), hi = vload16(0, row + 16);\n";
      src << "          FUSEC_EPILOGUE(lo, base, n)\n";
      src << "          FUSEC_EPILOGUE(hi, base + 16, n - 16)\n";
      src << "        }\n";
      src << "      }\n";
    }
    src << "    }\n";
  }
  src << "  }\n}\n";
  k.source = src.str();
  return k;
}

/// One product of a horizontal kernel (emitGemmHorizontal): the tiled
/// kernel emitGemm would build, as a function the launch's kernel calls for
/// its share of the work-groups. The prelude, the helpers and the local
/// memory are the kernel's, once for all its products.
struct GemmPart {
  std::string helpers;   ///< vector helpers the function calls
  std::string function;  ///< `void NAME(PARAMS, const int fusec_id[, __local VEC* panel])`, its macros undefined after it
  std::string inputs, outputs;  ///< the product's kernel parameters: in0, ...; out0, ...
  std::string panel;     ///< the panel's element type; empty when it stages none
  bool byGroup = false;  ///< fusec_id counts work-groups (a staged or owned panel), else work-items
};

Expected<KernelSource> emitGemmKernel(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                      const std::string& name, const std::string& comment, const GemmTiling& tiling,
                                      GemmPart* part);

}  // namespace

Expected<KernelSource> emitGemm(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                const std::string& name, const std::string& comment, const GemmTiling& tiling) {
  return emitGemmKernel(g, members, catalog, name, comment, tiling, nullptr);
}

namespace {

Expected<KernelSource> emitGemmKernel(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                      const std::string& name, const std::string& comment, const GemmTiling& tiling,
                                      GemmPart* part) {
  if (!isGemmGroup(g, members)) return Error{"group `" + name + "` does not start with a MatMul, Gemm or Conv", true};
  Expected<ConvPair> pair = convPair(g, members);
  if (!pair) return pair.error();
  const std::optional<Shortcut>& sc = pair->shortcut;
  const std::optional<ConvPrologue>& pro = pair->prologue;
  std::optional<ChannelScale> cs;
  if (scalesConvInput(g, members)) {
    Expected<ChannelScale> found = channelScale(g, members);
    if (!found) return found.error();
    if (sc || pro) return Error{"a channel scale joins a conv alone, not a pair of convs", true};
    cs = found.value();
  }
  if (part && (sc || pro || cs))
    return Error{"a product of a horizontal GEMM is a MatMul, Gemm or Conv and elementwise ops on its result", true};
  if (pro && pro->dense) {
    if (tiling.stagedPrologue)
      return Error{"a dense conv computing a 1x1 conv's input is built only where each work-item computes its own "
                   "panel (local memory emulated, as on a CPU); staged for a work-group, each of its rows would be "
                   "one work-item's dot product of the whole window",
                   true};
    for (ValueId v : {pro->x, pro->w})
      if (!g.value(v).type.isStatic() || g.value(v).type.dtype != DType::Float32)
        return Error{"the prologue conv's `" + g.value(v).name + "` (not float with a static shape) has no kernel path", true};
  }
  const NodeData& mm = g.node(sc || pro ? pair->main : gemmHead(g, members));
  const ValueId a = mm.inputs[0], b = mm.inputs[1], p = mm.outputs[0];
  for (ValueId v : {a, b, p}) {
    const TensorType& t = g.value(v).type;
    if (!t.isStatic() || t.dtype != DType::Float32)
      return Error{mm.op.str() + " on `" + g.value(v).name + "` (not float with a static shape) has no kernel path", true};
  }
  Expected<Geometry> geo = geometry(g, mm);
  if (!geo) return geo.error();
  // Depthwise: one input channel per group, and more than one group.
  const bool depthwise =
      geo->conv && !geo->volume() && geo->groups > 1 && geo->K == geo->KH * geo->KW && geo->KH * geo->KW <= 64;
  if (pro && pro->pointwise) {
    if (!tiling.directDepthwise || !depthwise || tiling.depthwiseOwnedBytes <= 0)
      return Error{"a 1x1 conv computing a depthwise conv's input is built only into the direct depthwise kernel "
                   "whose work-items own their input rows (local memory emulated, as on a CPU)",
                   true};
    return emitDepthwise(g, members, catalog, name, comment, geo.value(), depthwiseWidth(geo.value()),
                         tiling.depthwiseRowGather, tiling.depthwiseOwnedBytes, &*pro);
  }
  if (pro && !pro->dense && !part && !tiling.stagedPrologue && tiling.depthwiseRowBlocks > 0 && tiling.directDepthwise)
    if (std::optional<Expected<KernelSource>> k = emitDepthwiseRowBlocks(g, members, catalog, name, comment, geo.value(), mm, *pro, tiling))
      return std::move(*k);
  if (!sc && !pro && !cs && tiling.directDepthwise && depthwise) {
    if (part)
      return Error{"`" + mm.name + "` is a depthwise conv, computed directly in a kernel of its own; a horizontal GEMM "
                   "tiles products as GEMMs", true};
    return emitDepthwise(g, members, catalog, name, comment, geo.value(), depthwiseWidth(geo.value()),
                         tiling.depthwiseRowGather, tiling.depthwiseOwnedBytes);
  }
  // SqueezeNet 1.1's Fire modules (3x3 and 1x1 expand convs): one launch
  // each beats the 3x3 convs by Winograd in kernels of their own.
  if (part && winogradConv(g, geo.value(), mm, tiling))
    return Error{"`" + mm.name + "` is a 3x3 stride-1 conv, computed by Winograd's F(2x2, 3x3) in a kernel of its own; "
                 "a horizontal GEMM tiles products as GEMMs", true};
  if (!sc && !pro && !cs && !part && geo->conv)
    if (std::optional<Expected<KernelSource>> k = emitWinograd(g, members, catalog, name, comment, geo.value(), mm, tiling))
      return std::move(*k);
  if (!sc && !pro && !cs && tiling.gemv && isGemv(geo.value())) {
    if (part)
      return Error{"`" + mm.name + "` is a matrix-vector product (one row), which streams its weights in a kernel of "
                   "its own; a horizontal GEMM tiles products of several rows", true};
    return emitGemv(g, members, catalog, name, comment, geo.value(), tiling.gemvSplitK);
  }
  const int64_t M = geo->M, N = geo->N, K = geo->K;
  const Shape ps = g.value(p).type.staticShape();
  // Few rows per group (depthwise convs): one row per tile.
  int TM = static_cast<int>(std::min<int64_t>(tiling.rows, std::max<int64_t>(M, 1))), W = tiling.width;
  // A depthwise prologue's panels are row segments: 8 lanes on rows of 8
  // or fewer (MobileNetV2's 7-wide), else 16.
  if (pro && (W == 8 || W == 16)) W = pro->geo.OW <= 8 ? 8 : 16;
  // Narrower panels leave registers for more rows: as many accumulators
  // as the tiling's (on 7-wide maps 12x8 where the tiling is 6x16).
  // A windowed conv on rows of 8 or fewer at stride 1 takes 8-lane row
  // panels too, one per output row, where 16-lane panels would run along
  // the flattened output and gather each lane of B's rows on its own. Not
  // on rows of 5 or fewer, whose 8 lanes would run along the flattened
  // output too.
  // Whether the conv's output rows fill panels of `w` lanes, at most a
  // quarter of them past a row's end (what row panels need, below).
  auto rowsFill = [&](int64_t w) {
    const int64_t lanes = (geo->OW + w - 1) / w * w;
    return 4 * (lanes - geo->OW) <= lanes;
  };
  const bool narrowRows = !pro && geo->conv && geo->im2col && tiling.convRowPanels && W == 16 && geo->OW <= 8 &&
                          rowsFill(8) && geo->SW == 1;
  if (narrowRows) W = 8;
  if ((pro || narrowRows) && W < tiling.width)
    TM = static_cast<int>(std::min<int64_t>({16, int64_t{TM} * tiling.width / W, std::max<int64_t>(M, 1)}));
  if (TM < 1 || TM > 16 || (W != 4 && W != 8 && W != 16)) return Error{"gemm tiling out of range", true};
  // As many row tiles as TM needs, each as short as they allow: fewer
  // rows computed past M.
  TM = balancedRows(M, TM);
  // Smaller tiles until the product has the work-items the device needs to
  // be busy (a GPU's SMs; a CPU asks for none): a 1x1 conv to 576 channels
  // on a 7x7 map is 192 work-items in 12x16 tiles, 12 of an H200's 132 SMs.
  auto workItems = [&] { return ((M + TM - 1) / TM) * ((N + W - 1) / W) * shapeNumel(geo->batch); };
  while (workItems() < tiling.minWorkItems && (TM > 1 || W > 4)) {
    if (TM > 2) TM = (TM + 1) / 2;
    else if (W > 4) W /= 2;
    else TM = 1;
  }

  // A row of a tile is W neighbouring results within one row of the
  // product: they differ only in the product's trailing dims that make up N.
  size_t varying = 0;
  for (int64_t span = 1; span < N && varying < ps.size(); ++varying) span *= ps[ps.size() - 1 - varying];
  // With a shortcut the product is the Add's result, and the shortcut's
  // operands follow the conv's.
  std::vector<NodeRef> headed = members;
  std::vector<ValueId> operands = headOperands(mm, geo.value());
  size_t shortcutAt = 0, scaleAt = 0;
  if (cs) {  // the image is the Mul's operand, its scale follows the conv's operands
    headed.erase(std::find(headed.begin(), headed.end(), cs->mul));
    operands[0] = cs->x;
    scaleAt = operands.size();
    operands.push_back(cs->s);
  }
  if (sc) {
    headed = {sc->add};
    for (NodeRef n : members)
      if (n != sc->main && n != sc->conv && n != sc->add) headed.push_back(n);
    shortcutAt = operands.size();
    operands.insert(operands.end(), {sc->x, sc->w});
    if (sc->bias != kNoValue) operands.push_back(sc->bias);
  }
  // With a depthwise prologue the image is the depthwise conv's input, its
  // weights and bias follow the 1x1 conv's operands, then what its
  // elementwise ops read; the prologue computes B's rows, W lanes at once,
  // as the product's epilogue would compute W results.
  PrologueCode pc;
  if (pro) {
    // lanes vary along the output's rows and columns
    Expected<PrologueCode> c = prologueCode(g, catalog, *pro, members, headed, operands, W, 2, "depthwise prologue", "dwv");
    if (!c) return c.error();
    pc = std::move(c.value());
  }
  const size_t proAt = pc.at;
  const std::string &prologueBody = pc.body, &prologueResult = pc.result, &prologueHelpers = pc.helpers;
  const Shape& proShape = pc.shape;
  detail::Emitter e(g, catalog);
  Expected<EpilogueKernel> ek = epilogueKernel(e, g, catalog, headed, name, operands, W, varying, pc.inputs, pc.params);
  if (!ek) return ek.error();
  KernelSource& k = ek->k;
  if (M == 0 || N == 0 || shapeNumel(geo->batch) == 0) {
    if (part) return Error{"`" + mm.name + "` is an empty product", true};
    k.globalSize = 0;  // never launched
    k.source = "// " + comment + "\n// An empty product: nothing to compute.\n__kernel void " + name + ek->signature() + " {}\n";
    return k;
  }

  // A conv's column panels lie within one output row where at most a
  // quarter of the lanes fall past the row's end, at stride 1, or on rows
  // of 3 panels or more at stride 2: B's row k of the panel is then one
  // input row's contiguous segment, a vector load (masked at the edges:
  // fillWindowRows), instead of a gather of W window positions. Not 1x1
  // stride-2 convs, which it made slower.
  const int64_t OWT = (geo->OW + W - 1) / W, OH = geo->conv ? N / geo->OW : 1;
  // The windowed input whose rows the panels read: the conv's, or the
  // depthwise prologue's (its panels are row segments at any width that
  // wastes at most a quarter of the lanes).
  const Geometry& rg = pro ? pro->geo : geo.value();
  const bool rowPanels = (pro || (geo->im2col && (OWT >= 3 || geo->SW == 1))) && tiling.convRowPanels && (rg.SW == 1 || rg.SW == 2) &&
                         rowsFill(W);
  int64_t MT = (M + TM - 1) / TM;
  const int64_t NT = rowPanels ? OH * OWT : (N + W - 1) / W, batches = shapeNumel(geo->batch);
  // With local memory, a work-group of L work-items takes L row tiles of
  // one column panel and stages the panel's rows of B, KB at a time, in
  // local memory: contiguous, so strided B rows (a power-of-two N) no
  // longer alias in the cache, and on GPUs each B element is read from
  // global memory once per work-group.
  // Row blocks of at most localRows tiles, balanced so the last is not mostly idle.
  // A depthwise prologue's panel is staged for all the row tiles at once:
  // each B row is computed once per work-group.
  //
  // Where local memory is emulated (tiling.stagedPrologue false), a
  // depthwise prologue's panel is owned by one work-item instead: it
  // computes its column panel's rows for all K channels into a work-group
  // of its own (no barriers: PoCL runs a wide work-group's items one after
  // another, each saving its registers at every barrier), then every row
  // tile of its share of M from them, the panel staying in L1/L2. Where a
  // product has few column panels (7x7 maps) M is split among work-items,
  // each recomputing the panel: the depthwise conv costs KH x KW FMAs per
  // panel element against M / splits for the 1x1 conv.
  //
  // A short panel (tiling.shallowDepth) is shared by two work-items only,
  // unless its rows are a gathered window at least 64 deep, costly enough
  // to stage for the whole group. With shallowLocalRows 1 a work-item owns
  // such a panel, gathered or not, as it owns a prologue's: it loads it
  // once, then every row tile of its share of M, without barriers. A
  // projection shortcut's rows are staged apart (tiling.localRows).
  const bool shallow = K <= tiling.shallowDepth && (tiling.shallowLocalRows == 1 || !(geo->im2col && K >= 64));
  const bool ownPanel = pro ? !tiling.stagedPrologue : shallow && tiling.shallowLocalRows == 1 && !sc;
  // An owned panel's work-item may own two neighbouring column panels
  // (tiling.panels): each of A's broadcasts then feeds two FMAs, a tile of
  // TM rows by 2W columns, where the loop of one panel issues a load per
  // FMA and is bound by the load ports, not the FMA units (AVX-512, 11x16
  // tiles: 12 loads for 11 FMAs). A depthwise prologue computes both
  // panels (a dense one's panel is a GEMM of its own: one); not where an
  // odd count of panels would leave the last pair's second panel idle for
  // more than a sixteenth of the work.
  int P = ownPanel && !(pro && pro->dense) && !part && tiling.panels == 2 && NT >= 2 && (NT % 2 == 0 || NT >= 16) ? 2 : 1;
  // How many splits of M (below) an owned panel's `np` work-items' column
  // panels take: each split rebuilds its panel, and a gathered window row
  // costs about as much as 40 of the split's FMAs on it. At least 128 rows
  // per split and 8 work-groups wanted.
  constexpr int64_t kWantedGroups = 8, kMinSplitRows = 128;
  auto splitsFor = [&](int64_t np) {
    return std::clamp<int64_t>((kWantedGroups + np * batches - 1) / (np * batches), 1,
                               std::max<int64_t>(1, M / kMinSplitRows));
  };
  // Gathered panels go in pairs only where the pairs take no more splits
  // than the panels alone: pairing halves the work-items, and splitting
  // them again rebuilds every gathered panel once more.
  if (P == 2 && !pro && geo->im2col && splitsFor((NT + 1) / 2) > splitsFor(NT)) P = 1;  // P == 2: an owned panel
  // Two panels hold the tiling's rows at most (a depthwise prologue's
  // narrower panels took more rows for one).
  if (P == 2 && TM > tiling.rows) {
    TM = balancedRows(M, tiling.rows);
    MT = (M + TM - 1) / TM;
  }
  const int64_t NP = (NT + P - 1) / P;  // work-items' column panels (pairs of panels where P = 2)
  int64_t splits = 1, splitTiles = MT;
  // A dense prologue's panel costs its conv's whole window per element:
  // never recomputed, so never split (7x7 maps have 7 panels per image).
  if (ownPanel && !pro && !geo->im2col && K <= tiling.streamDepth) {
    // A shallow product with a plain panel streams C, one row tile a
    // work-group (GemmTiling::streamDepth).
    splitTiles = 1;
    splits = MT;
  } else if (ownPanel && !(pro && pro->dense)) {
    splits = splitsFor(NP);  // see splitsFor
    // A large product's work-groups, few and a count the cores do not
    // divide, leave a core idle for the last of them: M is split further
    // until the cores divide the count. Not lane-gathered panels, costly
    // to rebuild.
    const int64_t groups = NP * batches * splits, more = tiling.cores / std::gcd(groups, std::max<int64_t>(tiling.cores, 1));
    if ((!geo->im2col || rowPanels) && M * K >= (1 << 17) && more > 1 && groups < 8 * tiling.cores && MT >= more * splits)
      splits *= more;
    splitTiles = (MT + splits - 1) / splits;
    splits = (MT + splitTiles - 1) / splitTiles;
  }
  const int localRows = ownPanel ? 0
                        : pro     ? static_cast<int>(std::min<int64_t>(MT, 64))
                        : shallow && tiling.shallowLocalRows > 1 ? tiling.shallowLocalRows
                                  : tiling.localRows;
  const int64_t RB = localRows > 0 ? (MT + localRows - 1) / localRows : MT;
  const int64_t L = (MT + RB - 1) / RB, KB = std::max<int64_t>(1, std::min<int64_t>(tiling.depth, K));
  // A dense prologue's window rows are gathered this many at a time.
  const int64_t KB1 = pro && pro->dense ? std::max<int64_t>(1, std::min<int64_t>(tiling.depth, pro->geo.K)) : 0;
  const bool staged = localRows > 0;
  k.globalSize = static_cast<size_t>((ownPanel ? splits : staged ? RB * L : MT) * NP * batches);
  if (staged) {
    k.localSize = static_cast<size_t>(L);
    k.localMemBytes = static_cast<size_t>(KB) * static_cast<size_t>(W) * sizeof(float);
  } else if (ownPanel) {
    k.localSize = 1;
    k.localMemBytes = static_cast<size_t>(P * K + KB1) * static_cast<size_t>(W) * sizeof(float);
  }
  const std::string vec = "float" + std::to_string(W);
  // B's columns are contiguous for a plain B and strided for a transposed one.
  const bool contiguousB = geo->bn == 1;
  // A panel with at most W/2 results (a 7x7 map's last: 1 of 16 columns;
  // a row panel's at the end of each row) is computed by its owner at half
  // width from the panel's first half (GemmTiling::narrowTail).
  const int64_t lastValid = (rowPanels ? geo->OW : N) % W;
  const bool narrowTail = tiling.narrowTail && ownPanel && P == 1 && W >= 4 && (W & (W - 1)) == 0 && lastValid > 0 &&
                          lastValid <= W / 2;  // float<W/2> exists
  const std::string half = "float" + std::to_string(W / 2);

  std::ostringstream src;
  // The kernel, or a part's function with the macros it defined undefined after it.
  auto finish = [&](const std::ostringstream& text) -> Expected<KernelSource> {
    if (part) part->function = text.str() + "#undef M\n#undef N\n#undef K\n";
    else k.source = text.str();
    return k;
  };
  src << "// " << comment << "\n";
  if (geo->conv)
    src << "// Conv as an implicit GEMM: A = weights, B = the input through the window" << (geo->im2col ? " (gathered)" : "")
        << ", batches = images x groups.\n";
  src << "// C[" << M << "x" << N << "] = A[" << M << "x" << K << "] * B[" << K << "x" << N << "]";
  if (batches > 1) src << ", " << batches << " batches";
  src << "; each work-item computes a " << TM << "x" << W << " tile with " << vec << " accumulators";
  if (staged) src << ",\n// " << L << " work-items share a column panel of B staged in local memory " << KB << " rows at a time";
  if (ownPanel && P == 2)
    src << ",\n// one work-item per work-group computes two neighbouring column panels of B, all " << K
        << " rows, in local memory, then " << splitTiles << " row tiles of " << TM << "x" << 2 * W << " from them";
  else if (ownPanel)
    src << ",\n// one work-item per work-group computes its column panel of B, all " << K << " rows, in local memory, then "
        << splitTiles << " row tiles from it";
  if (pro)
    src << ",\n// B's rows are the " << (pro->dense ? "" : "depthwise ") << "conv's output channels (" << pro->geo.KH << "x"
        << pro->geo.KW << ", stride " << pro->geo.SH << "x" << pro->geo.SW << ") and the ops after it, computed as the panel is staged";
  src << ".\n";
  if (part) {  // the horizontal kernel prints the prelude and the helpers once for all its products
    part->helpers = ek->vectorHelpers;
  } else {
    src << detail::Emitter::prelude() << detail::Emitter::helpersOnce(prologueHelpers, ek->vectorHelpers);
  }
  src << "#define M " << M << "\n#define N " << N << "\n#define K " << K << "  // within this program only\n";
  // A depthwise prologue's row segments prefetch the next work-group's
  // (GemmTiling::prefetchRows), P x W columns on.
  const int64_t prefetchAhead = tiling.prefetchRows && pro && !pro->dense && rowPanels ? P * W * pro->geo.SW : 0;
  if (prefetchAhead > 0) src << kPrefetchMacro;
  static const char* kLanes = "0123456789abcdef";
  // W outputs' window positions along one input row from `at`: W floats,
  // or at stride 2 the even ones of 2W.
  auto rowSegment = [&](const std::string& at) {
    if (rg.SW == 1) return "vload" + std::to_string(W) + "(0, " + at + ")";
    return W == 16 ? "(float16)(vload16(0, " + at + ").even, vload16(0, " + at + " + 16).even)"
                   : "vload" + std::to_string(2 * W) + "(0, " + at + ").even";
  };
  // The window gathers, named per product in a horizontal kernel (each
  // product's has its own geometry).
  const std::string im2row = part ? name + "_im2row" : "fusec_im2row", im2col = part ? name + "_im2col" : "fusec_im2col";
  // The windowed input's rows: the conv's own, or a dense prologue's.
  const bool windowRows = pro ? pro->dense : geo->im2col;
  if (rowPanels && windowRows) {
    const std::string iv = "int" + std::to_string(W);
    const int64_t reach = rg.SW * (W - 1) + (rg.SW == 2 ? 1 : 0);  // the last column a load touches
    src << "// Row k = (channel, " << (rg.volume() ? "kz, " : "") << "ky, kx) of the window matrix for the panel's W outputs ox0.. of output row oy:\n";
    src << "// a segment of one input row, loaded whole inside the image; zero in the padding.\n";
    src << "inline " << vec << " " << im2row << "(const __global float* b, const int k, const int oy, const int ox0) {\n";
    if (rg.volume()) {  // oy counts rows over the output's depth slices
      src << "  const int ci = k / " << rg.taps() << ", kz = (k / " << rg.KH * rg.KW << ") % " << rg.KD << ", ky = (k / "
          << rg.KW << ") % " << rg.KH << ", kx = k % " << rg.KW << ";\n";
      src << "  const int iz = (oy / " << rg.OH << ") * " << rg.SD << " - " << rg.PD << " + kz * " << rg.DD
          << ", iy = (oy % " << rg.OH << ") * " << rg.SH << " - " << rg.PH << " + ky * " << rg.DH << ";\n";
      src << "  if (iz < 0 || iz >= " << rg.D << " || iy < 0 || iy >= " << rg.H << ") return (" << vec << ")(0.0f);\n";
    } else {
      src << "  const int ci = k / " << rg.KH * rg.KW << ", ky = (k / " << rg.KW << ") % " << rg.KH << ", kx = k % "
          << rg.KW << ";\n";
      src << "  const int iy = oy * " << rg.SH << " - " << rg.PH << " + ky * " << rg.DH << ";\n";
      src << "  if (iy < 0 || iy >= " << rg.H << ") return (" << vec << ")(0.0f);\n";
    }
    src << "  const int ix = ox0 * " << rg.SW << " - " << rg.PW << " + kx * " << rg.DW << ";\n";
    src << "  const __global float* row = b + ci * " << rg.D * rg.H * rg.Wd << (rg.volume() ? " + iz * " + std::to_string(rg.H * rg.Wd) : "")
        << " + iy * " << rg.Wd << ";\n";
    src << "  if (ix >= 0 && ix + " << reach << " < " << rg.Wd << ") return " << rowSegment("row + ix") << ";\n";
    src << "  const " << iv << " c = (" << iv << ")(ix) + (" << iv << ")(";
    for (int j = 0; j < W; ++j) src << (j ? ", " : "") << j * rg.SW;
    src << ");\n  const " << iv << " inside = (c >= 0) & (c < " << rg.Wd << ");\n";
    src << "  const " << iv << " at = select((" << iv << ")(0), c, inside);\n";
    src << "  return " << maskedGather(W, "row", "at", "inside") << ";\n}\n";
  } else if (windowRows) {
    const std::string iv = "int" + std::to_string(W);
    src << "// Row k = (channel, " << (rg.volume() ? "kz, " : "") << "ky, kx) of the window matrix at the lanes' window origins; zero in the padding.\n";
    src << "inline " << vec << " " << im2col << "(const __global float* b, const int k, "
        << (rg.volume() ? "const " + iv + " iz0, " : "") << "const " << iv << " iy0, const " << iv << " ix0) {\n";
    if (rg.volume()) {
      src << "  const int ci = k / " << rg.taps() << ", kz = (k / " << rg.KH * rg.KW << ") % " << rg.KD << ", ky = (k / "
          << rg.KW << ") % " << rg.KH << ", kx = k % " << rg.KW << ";\n";
      src << "  const " << iv << " iz = iz0 + kz * " << rg.DD << ", iy = iy0 + ky * " << rg.DH << ", ix = ix0 + kx * " << rg.DW
          << ";\n";
      src << "  const " << iv << " inside = (iz >= 0) & (iz < " << rg.D << ") & (iy >= 0) & (iy < " << rg.H
          << ") & (ix >= 0) & (ix < " << rg.Wd << ");\n";
      src << "  const " << iv << " off = select((" << iv << ")(0), ci * " << rg.D * rg.H * rg.Wd << " + iz * " << rg.H * rg.Wd
          << " + iy * " << rg.Wd << " + ix, inside);\n";
    } else {
      src << "  const int ci = k / " << rg.KH * rg.KW << ", ky = (k / " << rg.KW << ") % " << rg.KH << ", kx = k % "
          << rg.KW << ";\n";
      src << "  const " << iv << " iy = iy0 + ky * " << rg.DH << ", ix = ix0 + kx * " << rg.DW << ";\n";
      src << "  const " << iv << " inside = (iy >= 0) & (iy < " << rg.H << ") & (ix >= 0) & (ix < " << rg.Wd << ");\n";
      src << "  const " << iv << " off = select((" << iv << ")(0), ci * " << rg.H * rg.Wd << " + iy * " << rg.Wd
          << " + ix, inside);\n";
    }
    src << "  const " << vec << " v = (" << vec << ")(";
    for (int j = 0; j < W; ++j) src << (j ? ", " : "") << "b[off.s" << kLanes[j] << "]";
    src << ");\n  return select((" << vec << ")(0.0f), v, inside);\n}\n";
  }
  // A part's work-group or work-item, counted from its first.
  const std::string id = part ? "fusec_id" : staged || ownPanel ? "get_group_id(0)" : "get_global_id(0)";
  if (part) {
    part->inputs = ek->inputParameters();
    part->outputs = ek->outputParameters();
    part->byGroup = staged || ownPanel;
    part->panel = staged || ownPanel ? vec : "";
    src << "inline void " << name << ek->signature().substr(0, ek->signature().size() - 1) << ",\n    const int fusec_id"
        << (part->panel.empty() ? "" : ", __local " + vec + "* restrict panel") << ") {\n";
  } else {
    src << "__kernel ";
    if (staged) src << "__attribute__((reqd_work_group_size(" << L << ", 1, 1))) ";
    if (ownPanel) src << "__attribute__((reqd_work_group_size(1, 1, 1))) ";
    src << "void " << name << ek->signature() << " {\n";
  }
  if (ownPanel && P == 2) {
    src << "  const int grp = " << id << ";\n";
    src << "  const int pair = grp % " << NP << ", split = (grp / " << NP << ") % " << splits << ", bt = grp / " << NP * splits
        << ";\n";
  } else if (ownPanel) {
    src << "  const int grp = " << id << ";\n";
    src << "  const int colPanel = grp % " << NT << ", split = (grp / " << NT << ") % " << splits << ", bt = grp / " << NT * splits
        << ";\n";
  } else if (staged) {
    // Column panels vary fastest: consecutive work-groups share a block of
    // A's rows, which stays in cache between them (A is re-read once per
    // panel otherwise: a conv's weights, megabytes at 512 channels).
    // About 13 % less time summed over kernel_roofline's gemm and conv shapes
    // (two alternating runs); whole ResNet-18 and BERT runs: unchanged within noise.
    src << "  const int lid = get_local_id(0), grp = " << id << ";\n";
    src << "  const int m0 = (((grp / " << NT << ") % " << RB << ") * " << L << " + lid) * " << TM << ", colPanel = grp % " << NT
        << ", bt = grp / " << NT * RB << ";\n";
  } else {
    // Row tiles vary fastest: neighbouring work-items share B's column panel.
    src << "  const int gid = " << id << ";\n";
    src << "  const int m0 = (gid % " << MT << ") * " << TM << ", colPanel = (gid / " << MT << ") % " << NT
        << ", bt = gid / " << NT * MT << ";\n";
  }
  // The panel's first column, and how many of its W are results (with
  // suffix `p`, the pair's panel p: past the last panel it repeats the
  // last one's columns and stores none).
  auto panelPosition = [&](const std::string& p) {
    if (!p.empty())
      src << "  const int colPanel" << p << " = min(pair * 2 + " << p.substr(1) << ", " << NT - 1 << "), none" << p
          << " = pair * 2 + " << p.substr(1) << " >= " << NT << ";\n";
    if (rowPanels)
      src << "  const int oy" << p << " = colPanel" << p << " / " << OWT << ", ox0" << p << " = (colPanel" << p << " % " << OWT
          << ") * " << W << ", n0" << p << " = oy" << p << " * " << geo->OW << " + ox0" << p << ", valid" << p << " = "
          << (p.empty() ? "" : "none" + p + " ? 0 : ") << geo->OW << " - ox0" << p << ";\n";
    else
      src << "  const int n0" << p << " = colPanel" << p << " * " << W << ", valid" << p << " = "
          << (p.empty() ? "" : "none" + p + " ? 0 : ") << "N - n0" << p << ";\n";
  };
  if (P == 2) {
    panelPosition("_0");
    panelPosition("_1");
  } else {
    panelPosition("");
  }
  const Shape bst = stridesOf(geo->batch);
  for (size_t d = 0; d < geo->batch.size(); ++d)
    src << "  const int b" << d << " = (bt / " << bst[d] << ") % " << geo->batch[d] << ";\n";
  // Each lane's window origin in the input plane of `wg`'s conv (columns
  // past N clamped), where B's rows are gathered.
  auto windowOrigins = [&](const Geometry& wg) {
    src << "  const int" << W << " lane = (int" << W << ")(";
    for (int j = 0; j < W; ++j) src << (j ? ", " : "") << j;
    src << ");\n  const int" << W << " col = min((int" << W << ")(n0) + lane, N - 1);\n";
    if (wg.volume())
      src << "  const int" << W << " iz0 = (col / " << wg.OH * wg.OW << ") * " << wg.SD << " - " << wg.PD << ", iy0 = ((col / "
          << wg.OW << ") % " << wg.OH << ") * " << wg.SH << " - " << wg.PH << ", ix0 = (col % " << wg.OW << ") * " << wg.SW
          << " - " << wg.PW << ";\n";
    else
      src << "  const int" << W << " iy0 = (col / " << wg.OW << ") * " << wg.SH << " - " << wg.PH << ", ix0 = (col % "
          << wg.OW << ") * " << wg.SW << " - " << wg.PW << ";\n";
  };
  // FUSEC_BROW(K_, OUT_): B's row K_ of the panel computed by the
  // prologue, after `head` (its conv's sums for channel ci into dwv): the
  // element's index and coordinates where the prologue's ops read them,
  // the ops, the row into OUT_.
  auto prologueMacro = [&](std::string m) {
    const std::string coords = detail::Emitter::coordinatesUsedBy(prologueBody, proShape, "i", "");
    if (!coords.empty() || detail::Emitter::names(prologueBody, "i"))
      m += "const int i = (b0 * " + std::to_string(K) + " + ci) * " + std::to_string(N) + " + n0;\n" + coords;
    m += prologueBody + "OUT_ = " + prologueResult + ";\n";
    return detail::macro("FUSEC_BROW(K_, OUT_)", "{\n" + m + "}");
  };
  // Where the depthwise prologue's panel starting at column n0 (output
  // row oy from ox0 with row panels) reads its window: the names
  // FUSEC_BROW reads, declared once, or in each panel's scope where a
  // work-item owns two.
  auto depthwisePanelOrigin = [&] {
    const Geometry& d = pro->geo;
    if (!rowPanels) {  // each lane's window origin, gathered
      src << "  const int" << W << " dcol = min((int" << W << ")(n0) + (int" << W << ")(";
      for (int j = 0; j < W; ++j) src << (j ? ", " : "") << j;
      src << "), N - 1);\n";
      src << "  const int" << W << " dy0 = (dcol / " << d.OW << ") * " << d.SH << " - " << d.PH << ", dx0 = (dcol % " << d.OW
          << ") * " << d.SW << " - " << d.PW << ";\n";
    } else {  // the panel's window columns, as the direct depthwise kernel takes them
      src << "  const int ix0 = ox0 * " << d.SW << " - " << d.PW << ";\n";
      src << "  const int" << W << " lane = (int" << W << ")(";
      for (int j = 0; j < W; ++j) src << (j ? ", " : "") << j;
      src << ");\n";
      src << "  const int inner = " << depthwiseInner(d, W) << ";\n";
    }
  };
  if (pro && pro->dense) {
    // in0 is the prologue conv's image, in1 the 1x1 conv's weights; the
    // panel holds the prologue conv's sums (the ownPanel code below
    // computes them), finished here by its bias and the ops after it.
    const Geometry& d = pro->geo;
    src << "  const __global float* a = in1;\n";
    src << "  const __global float* b = in0 + b0 * " << d.bImage << ";\n";
    if (!rowPanels) windowOrigins(d);
    std::string m = "const int ci = (K_);\n";
    m += vec + " dwv = panel[ci]" + (pro->bias != kNoValue ? " + (" + vec + ")(in" + std::to_string(proAt + 1) + "[ci])" : "") + ";\n";
    src << prologueMacro(m);
  } else if (pro) {
    // in0 is the depthwise conv's image, in1 the 1x1 conv's weights.
    const Geometry& d = pro->geo;
    src << "  const __global float* a = in1;\n";
    src << "  const __global float* b = in0 + b0 * " << d.bImage << ";\n";
    if (P == 1) depthwisePanelOrigin();
    const std::string iv = "int" + std::to_string(W);
    std::string m = "const int ci = (K_);\n";
    m += "const __global float* plane = b + ci * " + std::to_string(d.H * d.Wd) + ";\n";
    m += "const __global float* wt = in" + std::to_string(proAt) + " + ci * " + std::to_string(d.KH * d.KW) + ";\n";
    m += vec + " dwv = (" + vec + ")(" + (pro->bias != kNoValue ? "in" + std::to_string(proAt + 1) + "[ci]" : "0.0f") + ");\n";
    // Row segments: vector loads inside the row, the row's span gathered
    // once at its edges (a gather per tap made MobileNetV2's fused blocks
    // on 14-wide maps 3x their two kernels).
    if (rowPanels)
      m += depthwiseTaps(d, W, tiling.depthwiseRowGather, [](int64_t t) { return "wt[" + std::to_string(t) + "]"; }, "dwv",
                         prefetchAhead);
    for (int64_t ky = 0; ky < d.KH && !rowPanels; ++ky)
      for (int64_t kx = 0; kx < d.KW; ++kx) {
        m += "{\n  const " + iv + " iy = dy0 + " + std::to_string(ky * d.DH) + ", ix = dx0 + " + std::to_string(kx * d.DW) + ";\n";
        m += "  const " + iv + " inside = (iy >= 0) & (iy < " + std::to_string(d.H) + ") & (ix >= 0) & (ix < " +
             std::to_string(d.Wd) + ");\n";
        m += "  const " + iv + " off = select((" + iv + ")(0), iy * " + std::to_string(d.Wd) + " + ix, inside);\n";
        m += "  const " + vec + " v = (" + vec + ")(";
        for (int j = 0; j < W; ++j) m += (j ? ", " : "") + std::string("plane[off.s") + kLanes[j] + "]";
        m += ");\n  dwv = fma((" + vec + ")(wt[" + std::to_string(ky * d.KW + kx) + "]), select((" + vec +
             ")(0.0f), v, inside), dwv);\n}\n";
      }
    src << prologueMacro(m);
  } else if (geo->conv) {
    // in0 is the image, in1 the weights.
    src << "  const __global float* a = in1 + b1 * " << geo->aMatrix << ";\n";
    src << "  const __global float* b = in0 + b0 * " << geo->bImage << " + b1 * " << geo->bGroup << ";\n";
  } else {
    src << "  const __global float* a = in0 + " << batchOffset(geo->aBatch, geo->batch, M * K) << ";\n";
    src << "  const __global float* b = in1 + " << batchOffset(geo->bBatch, geo->batch, K * N) << ";\n";
  }
  // The epilogue on each row of the tile, a vector of W results.
  auto prologue = [&](bool vector) {
    std::string out;
    if (sc && sc->bias != kNoValue)
      out += "  acc += in" + std::to_string(shortcutAt + 2) + "[m];  // bias of the shortcut's output channel\n";
    if (geo->alpha != 1.0f) out += "  acc *= " + detail::floatLiteral(geo->alpha) + ";\n";
    if (geo->c != kNoValue && geo->conv) {
      out += "  acc += in2[b1 * " + std::to_string(M) + " + m];  // bias of the output channel\n";
    } else if (geo->c != kNoValue) {
      const Shape cs = g.value(geo->c).type.staticShape();
      // Unidirectional broadcast of C to [M, N]: along n it is read as a vector.
      const bool alongN = cs.size() >= 1 && cs.back() != 1, alongM = cs.size() == 2 && cs[0] != 1;
      // C's row stride is N where it varies along n too, else 1 (C [M, 1]).
      const std::string at = std::string(alongM ? (alongN ? "m * N" : "m") : "0") + (alongN ? " + n0 + j" : "");
      const std::string c = vector && alongN ? "vload" + std::to_string(W) + "(0, in2 + " + at + ")" : "in2[" + at + "]";
      out += "  acc = fma(" + detail::floatLiteral(geo->beta) + ", " + c + ", acc);\n";
    }
    return out;
  };
  // A tile of TM rows from m0: A's row pointers and the accumulators (rows
  // past M and columns past N are clamped: they compute duplicates that
  // are never stored, so the hot loop has no branches), the FMAs of B's
  // row `k` held in `bv` (two panels: `bv0`, `bv1`, one broadcast of A
  // for both), and the epilogue storing each row (two panels: each from
  // its own first column).
  // With `tileVec` the half-width type (a narrow tail), the accumulators
  // and FMAs are half as wide and the epilogue gets them widened with zeros
  // (lanes it never stores).
  std::string tileVec = vec;
  auto acc = [&](int r, int p) { return "acc" + std::to_string(r) + (P == 2 ? "_" + std::to_string(p) : std::string()); };
  auto tileStart = [&](const std::string& indent) {
    for (int r = 0; r < TM; ++r)
      src << indent << "const __global float* a" << r << " = a + min(m0 + " << r << ", M - 1) * " << geo->am << ";\n";
    for (int r = 0; r < TM; ++r) {
      src << indent << tileVec << " " << acc(r, 0) << " = (" << tileVec << ")(0.0f)";
      if (P == 2) src << ", " << acc(r, 1) << " = " << acc(r, 0);
      src << ";\n";
    }
  };
  auto fmas = [&](const std::string& indent, const std::string& k) {
    for (int r = 0; r < TM; ++r) {
      const std::string a = "a" + std::to_string(r) + "[" + k + " * " + std::to_string(geo->ak) + "]";
      if (P == 1)
        src << indent << acc(r, 0) << " = fma((" << tileVec << ")(" << a << "), bv, " << acc(r, 0) << ");\n";
      else
        src << indent << "{ const " << vec << " ar = (" << vec << ")(" << a << "); " << acc(r, 0) << " = fma(ar, bv0, "
            << acc(r, 0) << "); " << acc(r, 1) << " = fma(ar, bv1, " << acc(r, 1) << "); }\n";
    }
  };
  auto tileStores = [&](const std::string& indent) {
    for (int p = 0; p < P; ++p) {
      const std::string q = "_" + std::to_string(p);
      if (P == 2) src << indent << "{\n" << indent << "const int n0 = n0" << q << ", valid = valid" << q << ";\n";
      for (int r = 0; r < TM; ++r) {
        const std::string sums =
            tileVec == vec ? acc(r, p) : "(" + vec + ")(" + acc(r, p) + ", (" + tileVec + ")(0.0f))";
        src << indent << "{ const int m = m0 + " << r << "; FUSEC_EPILOGUE(" << sums << ", bt * " << M * N
            << " + m * N + n0, m < M ? valid : 0) }\n";
      }
      if (P == 2) src << indent << "}\n";
    }
  };
  if (geo->im2col && !rowPanels && P == 1) windowOrigins(geo.value());
  // B's row `k` of the panel as a vector.
  auto bRowPlain = [&](const std::string& k, bool vectorLoad) -> std::string {
    if (rowPanels) return im2row + "(b, " + k + ", oy, ox0)";
    if (geo->im2col) return im2col + "(b, " + k + (geo->volume() ? ", iz0" : "") + ", iy0, ix0)";
    if (vectorLoad) return "vload" + std::to_string(W) + "(0, b + " + k + " * " + std::to_string(geo->bk) + " + n0)";
    std::string v = "(" + vec + ")(";
    for (int j = 0; j < W; ++j)
      v += (j ? ", " : "") + std::string("b[") + k + " * " + std::to_string(geo->bk) + " + min(n0 + " + std::to_string(j) +
           ", N - 1) * " + std::to_string(geo->bn) + "]";
    return v + ")";
  };
  auto bRow = [&](const std::string& k, bool vectorLoad) {
    if (cs) {  // row k is channel k / taps of the group's channels
      const int64_t taps = geo->taps(), perGroup = geo->conv ? K / taps : K;
      std::string channel = taps == 1 ? "(" + k + ")" : "(" + k + ") / " + std::to_string(taps);
      if (geo->groups > 1) channel = "b1 * " + std::to_string(perGroup) + " + " + channel;
      if (cs->perImage) channel = "b0 * " + std::to_string(perGroup * geo->groups) + " + " + channel;
      return "(" + bRowPlain(k, vectorLoad) + ") * in" + std::to_string(scaleAt) + "[" + channel + "]";
    }
    return bRowPlain(k, vectorLoad);
  };
  // An owned row panel's window rows, filled one input row at a time: rows
  // (ci, ky, 0 .. KW-1) are KW vector loads of one input row at the taps'
  // offsets, each masked to zero where its lanes fall in the padding, with
  // one row test per KW rows, instead of fusec_im2row's division of every
  // k into (ci, ky, kx) and its lane-by-lane gather at the row's edges.
  // Loads past a row's ends read its neighbours (masked); only where they
  // would leave the input does a row fall back to fusec_im2row.
  const bool tapLoads = rowPanels && !pro && !cs && rg.KW <= 16;  // rowPanels without a prologue: a windowed conv
  auto fillWindowRows = [&](const std::function<std::string(const std::string&)>& slot) {
    const std::string iv = "int" + std::to_string(W), zero = "(" + vec + ")(0.0f)";
    const int64_t span = rg.SW == 2 ? 2 * W : W, plane = rg.D * rg.H * rg.Wd;
    src << "  {\n    const " << iv << " c = (" << iv << ")(ox0 * " << rg.SW << " - " << rg.PW << ") + (" << iv << ")(";
    for (int j = 0; j < W; ++j) src << (j ? ", " : "") << j * rg.SW;
    src << ");\n";
    for (int64_t kx = 0; kx < rg.KW; ++kx)
      src << "    const " << iv << " tap" << kx << " = (c >= " << -kx * rg.DW << ") & (c < " << rg.Wd - kx * rg.DW << ");\n";
    src << "    const int base = b0 * " << rg.bImage << " + b1 * " << rg.bGroup << ";\n";
    if (rg.volume()) {  // rows (ci, kz, ky, 0 .. KW-1); oy counts rows over the output's depth slices
      src << "    for (int ci = 0, k = 0; ci < " << K / rg.taps() << "; ++ci)\n";
      src << "     for (int kz = 0; kz < " << rg.KD << "; ++kz)\n";
      src << "      for (int ky = 0; ky < " << rg.KH << "; ++ky, k += " << rg.KW << ") {\n";
      src << "        const int iz = (oy / " << rg.OH << ") * " << rg.SD << " - " << rg.PD << " + kz * " << rg.DD
          << ", iy = (oy % " << rg.OH << ") * " << rg.SH << " - " << rg.PH << " + ky * " << rg.DH << ";\n";
      src << "        const int off = ci * " << plane << " + iz * " << rg.H * rg.Wd << " + iy * " << rg.Wd << " + ox0 * "
          << rg.SW << " - " << rg.PW << ";\n";
      src << "        if (iz < 0 || iz >= " << rg.D << " || iy < 0 || iy >= " << rg.H << ") {\n";
    } else {
      src << "    for (int ci = 0, k = 0; ci < " << K / (rg.KH * rg.KW) << "; ++ci)\n";
      src << "      for (int ky = 0; ky < " << rg.KH << "; ++ky, k += " << rg.KW << ") {\n";
      src << "        const int iy = oy * " << rg.SH << " - " << rg.PH << " + ky * " << rg.DH << ";\n";
      src << "        const int off = ci * " << plane << " + iy * " << rg.Wd << " + ox0 * " << rg.SW << " - " << rg.PW << ";\n";
      src << "        if (iy < 0 || iy >= " << rg.H << ") {\n";
    }
    for (int64_t kx = 0; kx < rg.KW; ++kx) src << "          " << slot("k + " + std::to_string(kx)) << " = " << zero << ";\n";
    src << "        } else if (base + off >= 0 && base + off + " << (rg.KW - 1) * rg.DW + span << " <= "
        << geo->batch[0] * rg.bImage << ") {\n";
    for (int64_t kx = 0; kx < rg.KW; ++kx)
      src << "          " << slot("k + " + std::to_string(kx)) << " = select(" << zero << ", "
          << rowSegment("b + off + " + std::to_string(kx * rg.DW)) << ", tap" << kx << ");\n";
    src << "        } else {\n";
    for (int64_t kx = 0; kx < rg.KW; ++kx)
      src << "          " << slot("k + " + std::to_string(kx)) << " = " << im2row << "(b, k + " << kx << ", oy, ox0);\n";
    src << "        }\n      }\n  }\n";
  };
  // Full panels load B by vectors where its columns are contiguous; the
  // last, partial panel gathers.
  auto panelCases = [&](const std::function<void(bool)>& body) {
    if (geo->im2col || (contiguousB && N % W == 0)) {
      body(!geo->im2col);
    } else if (contiguousB) {
      src << "  if (n0 + " << W << " <= N) {\n";
      body(true);
      src << "  } else {\n";
      body(false);
      src << "  }\n";
    } else {
      body(false);
    }
  };
  if (ownPanel) {
    src << ek->laneMacro(e, W, prologue);
    if (!part) src << "  __local " << vec << " panel[" << (P == 2 ? "2 * K" : "K") << "];\n";
    if (pro && pro->dense) {
      // The prologue conv as a GEMM of its own: its K output channels by
      // the panel's W columns, its window rows gathered KB1 at a time into
      // local memory, the sums accumulating in the panel.
      const Geometry& d = pro->geo;
      const int TP = static_cast<int>(std::min<int64_t>(TM, K));
      const std::string w = "in" + std::to_string(proAt);
      src << "  // The prologue conv: " << K << " output channels x " << W << " columns, " << d.K << " window rows, "
          << TP << " channels at a time.\n";
      src << "  __local " << vec << " wrows[" << KB1 << "];\n";
      src << "  for (int k0 = 0; k0 < " << d.K << "; k0 += " << KB1 << ") {\n";
      src << "    const int kn = min(" << KB1 << ", " << d.K << " - k0);\n";
      src << "    for (int kk = 0; kk < kn; ++kk) wrows[kk] = "
          << (rowPanels ? im2row + "(b, k0 + kk, oy, ox0)" : im2col + "(b, k0 + kk, iy0, ix0)") << ";\n";
      src << "    for (int c0 = 0; c0 < K; c0 += " << TP << ") {\n";
      for (int r = 0; r < TP; ++r)
        src << "      const __global float* w" << r << " = " << w << " + min(c0 + " << r << ", K - 1) * " << d.K
            << " + k0;\n      " << vec << " s" << r << " = k0 == 0 ? (" << vec << ")(0.0f) : panel[min(c0 + " << r
            << ", K - 1)];\n";
      src << "      for (int kk = 0; kk < kn; ++kk) {\n        const " << vec << " bv = wrows[kk];\n";
      for (int r = 0; r < TP; ++r) src << "        s" << r << " = fma((" << vec << ")(w" << r << "[kk]), bv, s" << r << ");\n";
      src << "      }\n";
      for (int r = 0; r < TP; ++r) src << "      if (c0 + " << r << " < K) panel[c0 + " << r << "] = s" << r << ";\n";
      src << "    }\n  }\n";
    }
    if (P == 2) {
      // Two panels interleaved, row k of panel p at panel[2k + p]: each
      // filled in a scope of its own, with the names the row loads read.
      for (int p = 0; p < 2; ++p) {
        const std::string q = "_" + std::to_string(p);
        src << "  {\n  const int n0 = n0" << q << (rowPanels ? ", oy = oy" + q + ", ox0 = ox0" + q : std::string()) << ";\n";
        if (pro) {
          depthwisePanelOrigin();
          src << "  for (int k = 0; k < K; ++k) FUSEC_BROW(k, panel[2 * k + " << p << "])\n";
        } else {
          if (geo->im2col && !rowPanels) windowOrigins(geo.value());
          if (tapLoads)
            fillWindowRows([&](const std::string& k) { return "panel[2 * (" + k + ") + " + std::to_string(p) + "]"; });
          else
            panelCases([&](bool vectorLoad) {
              src << "  for (int k = 0; k < K; ++k) panel[2 * k + " << p << "] = " << bRow("k", vectorLoad) << ";\n";
            });
        }
        src << "  }\n";
      }
    } else if (pro) {
      src << "  for (int k = 0; k < K; ++k) FUSEC_BROW(k, panel[k])\n";
    } else if (tapLoads) {
      fillWindowRows([](const std::string& k) { return "panel[" + k + "]"; });
    } else {
      panelCases([&](bool vectorLoad) { src << "  for (int k = 0; k < K; ++k) panel[k] = " << bRow("k", vectorLoad) << ";\n"; });
    }
    src << "  const int mEnd = min(M, (split + 1) * " << splitTiles * TM << ");\n";
    auto rowTiles = [&] {
      src << "  for (int m0 = split * " << splitTiles * TM << "; m0 < mEnd; m0 += " << TM << ") {\n";
      tileStart("    ");
      src << "    for (int k = 0; k < K; ++k) {\n      const " << tileVec
          << (P == 2 ? " bv0 = panel[2 * k], bv1 = panel[2 * k + 1];\n"
                     : tileVec == vec ? " bv = panel[k];\n" : " bv = panel[k].lo;\n");
      fmas("      ", "k");
      src << "    }\n";
      tileStores("    ");
      src << "  }\n";
    };
    if (narrowTail) {
      src << "  if (valid <= " << W / 2 << ") {  // at most half the panel's columns are results\n";
      tileVec = half;
      rowTiles();
      tileVec = vec;
      src << "  } else {\n";
      rowTiles();
      src << "  }\n";
    } else {
      rowTiles();
    }
    src << "#undef FUSEC_EPILOGUE\n}\n";
    return finish(src);
  }
  tileStart("  ");
  if (staged) {
    if (!part) src << "  __local " << vec << " panel[" << KB << "];\n";
    src << "  for (int k0 = 0; k0 < K; k0 += " << KB << ") {\n";
    src << "    barrier(CLK_LOCAL_MEM_FENCE);\n";
    if (pro) {
      src << "    for (int kk = lid; kk < " << KB << "; kk += " << L << ") FUSEC_BROW(min(k0 + kk, K - 1), panel[kk])\n";
    } else {
      panelCases([&](bool vectorLoad) {
        src << "    for (int kk = lid; kk < " << KB << "; kk += " << L << ") panel[kk] = "
            << bRow("min(k0 + kk, K - 1)", vectorLoad) << ";\n";
      });
    }
    src << "    barrier(CLK_LOCAL_MEM_FENCE);\n";
    src << "    const int kn = min(" << KB << ", K - k0);\n";
    src << "    for (int kk = 0; kk < kn; ++kk) {\n";
    src << "      const " << vec << " bv = panel[kk];\n";
    fmas("      ", "(k0 + kk)");
    src << "    }\n  }\n";
  } else {
    panelCases([&](bool vectorLoad) {
      src << "  for (int k = 0; k < K; ++k) {\n";
      src << "    const " << vec << " bv = " << bRow("k", vectorLoad) << ";\n";
      fmas("    ", "k");
      src << "  }\n";
    });
  }
  if (sc) {
    const std::string x = "in" + std::to_string(shortcutAt), w = "in" + std::to_string(shortcutAt + 1), iv = "int" + std::to_string(W);
    src << "  // The projection shortcut, a 1x1 conv of " << x << " (" << sc->K << " channels) at stride " << sc->SH << "x" << sc->SW
        << ":\n  // its rows continue K, the lanes' inputs gathered at the strided output positions.\n  {\n";
    src << "    const __global float* sx = " << x << " + b0 * " << sc->K * sc->H * sc->Wd << ";\n";
    src << "    const " << iv << " scol = min((" << iv << ")(n0) + (" << iv << ")(";
    for (int j = 0; j < W; ++j) src << (j ? ", " : "") << j;
    src << "), N - 1);\n";
    src << "    const " << iv << " at = (scol / " << geo->OW << ") * " << sc->SH * sc->Wd << " + (scol % " << geo->OW << ") * " << sc->SW
        << ";\n";
    for (int r = 0; r < TM; ++r)
      src << "    const __global float* sa" << r << " = " << w << " + min(m0 + " << r << ", M - 1) * " << sc->K << ";\n";
    // The shortcut's row k of the panel: W gathers from channel k's plane.
    auto row = [&](const std::string& k) {
      std::string v = "(" + vec + ")(";
      for (int j = 0; j < W; ++j)
        v += (j ? ", " : "") + std::string("sx[") + k + " * " + std::to_string(sc->H * sc->Wd) + " + at.s" + kLanes[j] + "]";
      return v + ")";
    };
    auto fma = [&](const std::string& indent, const std::string& k) {
      for (int r = 0; r < TM; ++r)
        src << indent << "acc" << r << " = fma((" << vec << ")(sa" << r << "[" << k << "]), bv, acc" << r << ");\n";
    };
    if (staged) {
      // Staged like the conv's own panel: the work-group gathers each row
      // once for all its row tiles (ResNet-50's last projection, 1024
      // channels to 2048, took 6.4x its two kernels gathered per row tile).
      src << "    for (int k0 = 0; k0 < " << sc->K << "; k0 += " << KB << ") {\n";
      src << "      barrier(CLK_LOCAL_MEM_FENCE);\n";
      src << "      for (int kk = lid; kk < " << KB << "; kk += " << L << ") panel[kk] = " << row("min(k0 + kk, " + std::to_string(sc->K - 1) + ")")
          << ";\n";
      src << "      barrier(CLK_LOCAL_MEM_FENCE);\n";
      src << "      const int kn = min(" << KB << ", " << sc->K << " - k0);\n";
      src << "      for (int kk = 0; kk < kn; ++kk) {\n";
      src << "        const " << vec << " bv = panel[kk];\n";
      fma("        ", "k0 + kk");
      src << "      }\n    }\n  }\n";
    } else {
      src << "    for (int k = 0; k < " << sc->K << "; ++k) {\n";
      src << "      const " << vec << " bv = " << row("k") << ";\n";
      fma("      ", "k");
      src << "    }\n  }\n";
    }
  }
  src << ek->laneMacro(e, W, prologue);
  tileStores("  ");
  src << "#undef FUSEC_EPILOGUE\n}\n";
  return finish(src);
}

}  // namespace

namespace {

/// The products of a horizontal group, each its MatMul or Gemm (reading
/// the first member's A) and the members computed from its result alone;
/// an error says which member breaks that shape.
Expected<std::vector<std::vector<NodeRef>>> horizontalProducts(const Graph& g, const std::vector<NodeRef>& members) {
  if (members.empty()) return Error{"the group is empty", true};
  const ValueId a = g.node(members.front()).inputs.empty() ? kNoValue : g.node(members.front()).inputs[0];
  std::vector<std::vector<NodeRef>> products;
  std::map<ValueId, size_t> owner;  // the product each value of the group belongs to
  for (NodeRef n : members) {
    const NodeData& d = g.node(n);
    std::set<size_t> reads;
    for (ValueId v : d.inputs)
      if (auto it = owner.find(v); it != owner.end()) reads.insert(it->second);
    const bool head = d.domain.empty() && (d.op == "MatMul" || d.op == "Gemm" || d.op == "Conv") && !d.inputs.empty() &&
                      d.inputs[0] == a;
    size_t product = products.size();
    if (head && reads.empty()) {
      products.emplace_back();
    } else if (reads.size() == 1) {
      product = *reads.begin();
    } else {
      return Error{"`" + d.name + "` " +
                       (reads.empty() ? "is neither a MatMul, Gemm or Conv of the products' shared input nor computed from one"
                                      : "reads the results of two products"),
                   true};
    }
    products[product].push_back(n);
    for (ValueId v : d.outputs) owner[v] = product;
  }
  if (products.size() < 2) return Error{"it has one product; a horizontal GEMM has two or more sharing their input", true};
  return products;
}

/// `p<part>_in3` for `in3`: the kernel's name for a part's parameter.
std::string partParameters(const std::string& params, size_t part) {
  static const std::regex name(R"(\b(in|out)(\d+)\b)");
  return std::regex_replace(params, name, "p" + std::to_string(part) + "_$1$2");
}

}  // namespace

bool isHorizontalGemmGroup(const Graph& g, const std::vector<NodeRef>& members) {
  return static_cast<bool>(horizontalProducts(g, members));
}

Expected<KernelSource> emitGemmHorizontal(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                          const std::string& name, const std::string& comment,
                                          const std::function<GemmTiling(const NodeData&)>& tilingFor) {
  Expected<std::vector<std::vector<NodeRef>>> products = horizontalProducts(g, members);
  if (!products) return products.error();
  // The lighter products' work-groups first. PoCL's CPU threads take
  // work-groups in chunks (PoCL 3.1: up to 512 while more than 1024 are
  // left, then up to 64), so heavy groups first would land in one
  // thread's chunk.
  auto flops = [&](const std::vector<NodeRef>& product) {
    Expected<Geometry> geo = geometry(g, g.node(product.front()));
    return geo ? geo->M * geo->N * geo->K * shapeNumel(geo->batch) : 0;
  };
  std::stable_sort(products->begin(), products->end(),
                   [&](const std::vector<NodeRef>& a, const std::vector<NodeRef>& b) { return flops(a) < flops(b); });
  KernelSource k;
  k.name = name;
  std::ostringstream functions, calls;
  std::vector<std::string> helpers;  // each helper function once
  std::string inputs, outputs;  // the kernel's parameters: every product's inputs, then every product's results
  size_t first = 0, localSize = 0;
  bool byGroup = false;
  for (size_t p = 0; p < products->size(); ++p) {
    const std::vector<NodeRef>& product = (*products)[p];
    const NodeData& head = g.node(product.front());
    GemmPart part;
    const std::string fn = name + "_p" + std::to_string(p);
    Expected<KernelSource> pk = emitGemmKernel(g, product, catalog, fn, "product " + std::to_string(p) + ": `" +
                                               detail::Emitter::sanitize(head.name) + "`", tilingFor(head), &part);
    if (!pk) return Error{"product `" + head.name + "`: " + pk.error().message, pk.error().unsupported};
    // Work-groups staging a panel meet at barriers, which would sit under
    // the branch picking the product: legal OpenCL (the branch is uniform
    // in a work-group), but PoCL corrupted memory so when the staging loop
    // took K in more than one pass (5x8 tiles, depth 16, K = 40).
    if (pk->localSize > 1)
      return Error{"product `" + head.name + "` is tiled by work-groups of " + std::to_string(pk->localSize) +
                       " staging its panel between barriers; a horizontal GEMM takes products tiled without barriers "
                       "(a panel owned by each work-item, as on CPUs, or a tile per work-item)",
                   true};
    if (p == 0) {
      localSize = pk->localSize;
      byGroup = part.byGroup;
    } else if (pk->localSize != localSize || part.byGroup != byGroup) {
      return Error{"its products are tiled in different work-groups (`" + g.node((*products)[0].front()).name + "` " +
                       std::to_string(localSize) + ", `" + head.name + "` " + std::to_string(pk->localSize) +
                       "); one launch has one work-group size",
                   true};
    }
    // Helpers are whole `inline` functions; each printed once.
    for (size_t at = part.helpers.find("inline "); at != std::string::npos;) {
      const size_t next = part.helpers.find("\ninline ", at);
      const std::string h = part.helpers.substr(at, next == std::string::npos ? std::string::npos : next + 1 - at);
      if (std::find(helpers.begin(), helpers.end(), h) == helpers.end()) helpers.push_back(h);
      at = next == std::string::npos ? next : next + 1;
    }
    functions << part.function;
    const std::string in = partParameters(part.inputs, p), out = partParameters(part.outputs, p);
    inputs += (inputs.empty() ? "" : ",") + in;
    outputs += "," + out;
    std::string args;  // the parameters' names, in order
    static const std::regex declared(R"(\bp\d+_(in|out)\d+\b)");
    for (const std::string* params : {&in, &out})
      for (auto it = std::sregex_iterator(params->begin(), params->end(), declared); it != std::sregex_iterator(); ++it)
        args += it->str() + ", ";
    const size_t count = byGroup ? pk->globalSize / std::max<size_t>(localSize, 1) : pk->globalSize;
    calls << "  " << (p == 0 ? "" : "else ") << (p + 1 < products->size() ? "if (id < " + std::to_string(first + count) + ") " : "")
          << fn << "(" << args << "id - " << first << (part.panel.empty() ? "" : ", (__local " + part.panel + "*)fusec_local")
          << ");\n";
    first += count;
    k.inputs.insert(k.inputs.end(), pk->inputs.begin(), pk->inputs.end());
    k.outputs.insert(k.outputs.end(), pk->outputs.begin(), pk->outputs.end());
    k.localMemBytes = std::max(k.localMemBytes, pk->localMemBytes);
  }
  k.globalSize = byGroup ? first * std::max<size_t>(localSize, 1) : first;
  k.localSize = localSize;
  k.localMemBytes = (k.localMemBytes + 63) / 64 * 64;
  std::ostringstream src;
  src << "// " << comment << "\n// " << products->size() << " products of one input as one launch (a horizontal GEMM): "
      << (byGroup ? "work-groups" : "work-items") << " [0, " << first << ") split among them in order.\n";
  src << detail::Emitter::prelude();
  for (const std::string& h : helpers) src << h;
  src << functions.str();
  src << "__kernel ";
  if (byGroup) src << "__attribute__((reqd_work_group_size(" << localSize << ", 1, 1))) ";
  src << "void " << name << "(" << inputs << outputs << ") {\n";
  if (k.localMemBytes > 0) src << "  __local float16 fusec_local[" << k.localMemBytes / 64 << "];\n";
  src << "  const int id = " << (byGroup ? "get_group_id(0)" : "get_global_id(0)") << ";\n" << calls.str() << "}\n";
  k.source = src.str();
  return k;
}

namespace {

/// MatMul and Gemm heads (`conv` false) or Conv heads, tiled as a GEMM; the
/// Convs it cannot tile (3-D and beyond) are gathered directly. The direct
/// gather computes one Conv: a group of two (a conv and its projection
/// shortcut) keeps the GEMM's reason.
Expected<KernelSource> emitTiled(const EmitRequest& r, bool conv) {
  const Graph& g = r.graph;
  const NodeRef head = gemmHead(g, r.group);
  Expected<KernelSource> k = emitGemm(g, r.group, r.catalog, r.name, r.comment, r.options.gemmFor(g.node(head)));
  const auto convs = std::count_if(r.group.begin(), r.group.end(), [&](NodeRef n) { return g.node(n).op == "Conv"; });
  if (conv && !k && k.error().unsupported && convs == 1 && head == r.group.front())
    return emitPool(g, r.group, r.catalog, r.name, r.comment);
  return k;
}

}  // namespace

FUSEC_KERNEL_FAMILY(gemm_epilogue) {
  return {"gemm_epilogue", "a MatMul or Gemm (float32, static shapes) followed by elementwise ops on its result",
          "it does not start with a MatMul or Gemm",
          {"#e4dcf3", "#6a4aa5"},
          [](const Graph& g, const std::vector<NodeRef>& group, const OpCatalog&) {
            return isGemmGroup(g, group) && g.node(gemmHead(g, group)).op != "Conv";
          },
          [](const EmitRequest& r) { return emitTiled(r, false); }};
}

FUSEC_KERNEL_FAMILY(gemm_horizontal) {
  return {"gemm_horizontal",
          "two or more MatMuls, Gemms or Convs of one input (float32, static shapes: attention's Q, K "
          "and V projections, SqueezeNet's 1x1 and 3x3 expand convs), each followed by elementwise ops on its own result, "
          "as one launch: each product tiled as gemm_epilogue or conv_epilogue tiles it alone (without work-group "
          "barriers: a panel owned by each work-item, as on CPUs, or a tile per work-item; not a depthwise conv or a "
          "matrix-vector product), the launch's work-groups divided among them",
          "it is not two or more MatMuls, Gemms or Convs of one input, each with elementwise ops on its own result",
          {"#f2f2f2", "#999999"},
          [](const Graph& g, const std::vector<NodeRef>& group, const OpCatalog&) { return isHorizontalGemmGroup(g, group); },
          [](const EmitRequest& r) {
            return emitGemmHorizontal(r.graph, r.group, r.catalog, r.name, r.comment,
                                      [&](const NodeData& head) { return r.options.gemmFor(head); });
          }};
}

FUSEC_KERNEL_FAMILY(conv_epilogue) {
  return {"conv_epilogue",
          "a Conv (any groups, strides, dilations and pads; 1-D, 2-D and 3-D tiled as an implicit "
          "GEMM, gathered directly when it cannot be tiled; 2-D depthwise convs computed directly, weights in registers; 3x3 stride-1 "
          "convs with constant weights, on a CPU target, by Winograd's F(2x2, 3x3)) followed by "
          "elementwise ops on its result; before it, a per-channel scale of its input (Mul by [N, C, 1, 1]), or a "
          "depthwise conv (on a CPU also a dense one) and elementwise ops computing a 1x1 conv's input; beside it, a "
          "1x1 projection shortcut added to its result",
          "it does not start with a Conv",
          {"#dbe9f6", "#2f6ea8"},
          [](const Graph& g, const std::vector<NodeRef>& group, const OpCatalog&) {
            return isGemmGroup(g, group) && g.node(gemmHead(g, group)).op == "Conv";
          },
          [](const EmitRequest& r) { return emitTiled(r, true); }};
}

}  // namespace fusec::codegen
