/// The gemm_gated family: two products of one input by two weight matrices
/// and elementwise ops combining them (SwiGLU's silu(x Wg) * (x Wu), GeGLU),
/// as one kernel.
#include <algorithm>
#include <sstream>

#include "ElementwiseEmitter.h"
#include "FamilyRegistry.h"

namespace fusec::codegen {
namespace {

/// A gated group taken apart: the two MatMuls (in the group's order),
/// their shared input, and the other members, which combine them.
struct GatedGroup {
  NodeRef a, b;
  ValueId x = kNoValue;
  std::vector<NodeRef> epilogue;
};

std::optional<GatedGroup> splitGated(const Graph& g, const std::vector<NodeRef>& members) {
  std::vector<NodeRef> products;
  GatedGroup gg;
  for (NodeRef n : members) (g.node(n).op == "MatMul" && g.node(n).domain.empty() ? products : gg.epilogue).push_back(n);
  if (products.size() != 2 || gg.epilogue.empty()) return std::nullopt;
  const NodeData &a = g.node(products[0]), &b = g.node(products[1]);
  if (a.inputs.size() != 2 || b.inputs.size() != 2 || a.inputs[0] != b.inputs[0]) return std::nullopt;
  gg.a = products[0];
  gg.b = products[1];
  gg.x = a.inputs[0];
  return gg;
}

/// Rows of a tile: 6 rows x 8 columns of both products are 12 float8
/// accumulators, with the two weight vectors and the broadcast input 15 of
/// AVX2's 16 vector registers (on PoCL, LLaMA's [64, 256] x [256, 688]
/// pair: 4 rows 0.62 ms, 6 rows 0.43 ms, 8 rows 0.64 ms, 2 rows of 16
/// columns 0.43 ms; [128, 1024] x [1024, 2816]: 14.9, 17.2, 25.6, 15.6 ms).
constexpr int64_t kTileRows = 6;
/// Both weight panels (K x lanes each) are copied to local memory, where
/// they are contiguous, up to this size; longer ones are read in place
/// (a row of the panel per cache line: 3x slower at K = 1024 on PoCL). A
/// target whose local memory is smaller refuses the kernel at planning.
constexpr int64_t kPanelBytes = 256 * 1024;

Expected<KernelSource> emitGatedGemm(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                     const std::string& name, const std::string& comment) {
  const std::optional<GatedGroup> split = splitGated(g, members);
  if (!split) return Error{"group `" + name + "` is not two MatMuls of one input and elementwise ops after them", true};
  const GatedGroup& gg = *split;
  const NodeData &a = g.node(gg.a), &b = g.node(gg.b);
  const ValueId wa = a.inputs[1], wb = b.inputs[1];
  auto staticFloat = [&](ValueId v) {
    const TensorType& t = g.value(v).type;
    return t.isStatic() && t.dtype == DType::Float32;
  };
  if (!staticFloat(gg.x) || !staticFloat(wa) || !staticFloat(wb) || !staticFloat(a.outputs[0]) || !staticFloat(b.outputs[0]))
    return Error{"gemm_gated takes float32 products of static shapes", true};
  const Shape xs = g.value(gg.x).type.staticShape(), was = g.value(wa).type.staticShape();
  if (xs.size() < 2 || was.size() != 2 || g.value(wb).type.staticShape() != was || was[0] != xs.back())
    return Error{"gemm_gated takes an input [..., M, K] and two weight matrices [K, N] of one shape", true};
  const int64_t K = xs.back(), N = was[1], rows = shapeNumel(xs) / K;
  Shape ys = xs;
  ys.back() = N;
  for (NodeRef m : gg.epilogue) {
    const NodeData& d = g.node(m);
    const OpDef* def = d.domain.empty() ? catalog.find(d.op.str()) : nullptr;
    if (!def || (def->kind != OpKind::Elementwise && def->kind != OpKind::Broadcast))
      return Error{"`" + d.op.str() + "` after the products has no kernel path: only elementwise ops may follow them", true};
  }
  // One result, of the products' shape; the products themselves stay in registers.
  const ValueId y = g.node(gg.epilogue.back()).outputs[0];
  for (ValueId v : groupBoundary(g, members).outputs)
    if (v != y)
      return Error{"`" + printable(g.value(v).name) + "` is read outside the group: a gemm_gated group writes only its "
                   "last result",
                   true};
  if (!staticFloat(y) || g.value(y).type.staticShape() != ys)
    return Error{"the group's result is not float32 of the products' shape " + shapeToString(ys), true};

  // The epilogue at vectors of `lanes` columns (1: one element), the
  // products bound to the accumulators.
  std::vector<ValueId> operands;
  for (ValueId v : groupBoundary(g, gg.epilogue).inputs)
    if (v != a.outputs[0] && v != b.outputs[0]) operands.push_back(v);
  const int lanes = N % 8 == 0 ? 8 : N % 4 == 0 ? 4 : 1;
  detail::Emitter e(g, catalog);
  if (lanes > 1) e.vectorize(lanes, 1);
  e.bind(a.outputs[0], "pa");
  e.bind(b.outputs[0], "pb");
  std::string params, body;
  if (Status st = e.emitBody(gg.epilogue, operands, ys, "i", params, body, 3); !st) return st.error();
  const std::string L = std::to_string(lanes), vec = lanes > 1 ? "float" + L : "float";
  const int64_t columns = N / lanes, tile = std::min(kTileRows, rows);
  const bool panel = 2 * K * lanes * static_cast<int64_t>(sizeof(float)) <= kPanelBytes;
  std::string args;
  for (size_t p = 0; p < operands.size(); ++p) args += ", in" + std::to_string(3 + p);

  std::ostringstream src;
  src << "// " << comment << "\n// Y[" << rows << "x" << N << "] = f(X W_a, X W_b), K = " << K
      << ": one work-item per panel of " << lanes << " columns of both weight matrices"
      << (panel ? " (copied to local memory)" : "") << ", computing " << tile
      << " rows of both products at a time in registers; only the combined result is written.\n"
      << detail::Emitter::prelude() << e.vectorHelpers();
  src << "// The group's result at linear indices i.. from the products pa and pb there.\n";
  src << "inline " << vec << " fusec_y(const int i, const " << vec << " pa, const " << vec << " pb"
      << (params.empty() ? "" : ",\n    " + params) << ") {\n"
      << body << "  return " << e.vars().at(y) << ";\n}\n";
  // A work-item per work-group: on CPUs the work-item is the unit of
  // vectorization here (explicit vectors), as in gemm_epilogue's panels.
  src << "__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void " << name
      << "(\n    __global const float* restrict in0,\n"
      << "    __global const float* restrict in1,\n    __global const float* restrict in2"
      << (params.empty() ? "" : ",\n    " + params) << ",\n    __global float* restrict out0) {\n";
  src << "  const int col = get_group_id(0) * " << lanes << ";\n";
  auto load = [&](const std::string& buffer, const std::string& at) {
    return lanes > 1 ? "vload" + L + "(0, " + buffer + " + " + at + ")" : buffer + "[" + at + "]";
  };
  const std::string NS = std::to_string(N), KS = std::to_string(K);
  if (panel) {
    src << "  __local " << vec << " panelA[" << K << "], panelB[" << K << "];\n";
    src << "  for (int k = 0; k < " << K << "; ++k) {\n    panelA[k] = " << load("in1", "k * " + NS + " + col")
        << ";\n    panelB[k] = " << load("in2", "k * " + NS + " + col") << ";\n  }\n";
  }
  src << "  for (int row0 = 0; row0 < " << rows << "; row0 += " << tile << ") {\n";
  for (int64_t t = 0; t < tile; ++t)
    src << "    const __global float* x" << t << " = in0 + min(row0 + " << t << ", " << rows - 1 << ") * " << K << ";\n";
  for (int64_t t = 0; t < tile; ++t) src << "    " << vec << " a" << t << " = 0.0f, b" << t << " = 0.0f;\n";
  src << "    for (int k = 0; k < " << K << "; ++k) {\n";
  src << "      const " << vec << " wa = " << (panel ? "panelA[k]" : load("in1", "k * " + NS + " + col")) << ";\n";
  src << "      const " << vec << " wb = " << (panel ? "panelB[k]" : load("in2", "k * " + NS + " + col")) << ";\n";
  for (int64_t t = 0; t < tile; ++t) {
    const std::string T = std::to_string(t);
    src << "      { const " << vec << " xk = (" << vec << ")(x" << T << "[k]); a" << T << " = fma(xk, wa, a" << T << "); b"
        << T << " = fma(xk, wb, b" << T << "); }\n";
  }
  src << "    }\n";
  for (int64_t t = 0; t < tile; ++t) {
    const std::string T = std::to_string(t), at = "(row0 + " + T + ") * " + NS + " + col";
    const std::string value = "fusec_y(" + at + ", a" + T + ", b" + T + args + ")";
    src << "    if (row0 + " << T << " < " << rows << ") "
        << (lanes > 1 ? "vstore" + L + "(" + value + ", 0, out0 + " + at + ");" : "out0[" + at + "] = " + value + ";")
        << "\n";
  }
  src << "  }\n}\n";

  KernelSource k;
  k.name = name;
  k.inputs = {gg.x, wa, wb};
  k.inputs.insert(k.inputs.end(), operands.begin(), operands.end());
  k.outputs = {y};
  k.source = src.str();
  k.globalSize = static_cast<size_t>(columns);
  k.localSize = 1;
  k.localMemBytes = panel ? static_cast<size_t>(2 * K * lanes) * sizeof(float) : 0;
  return k;
}

}  // namespace

FUSEC_KERNEL_FAMILY(gemm_gated) {
  return {"gemm_gated",
          "two MatMuls of one input [..., M, K] by weight matrices [K, N] of one shape (float32, static shapes) and "
          "elementwise ops combining their results (SwiGLU's silu(x Wg) * (x Wu), GeGLU), as one kernel: a "
          "work-item per panel of columns computes tiles of rows of both products and writes only the combined result",
          "it is not two MatMuls of one input followed by elementwise ops",
          {"#e8def8", "#6a4c9c"},
          [](const Graph& g, const std::vector<NodeRef>& group, const OpCatalog&) {
            return splitGated(g, group).has_value();
          },
          [](const EmitRequest& r) { return emitGatedGemm(r.graph, r.group, r.catalog, r.name, r.comment); }};
}

}  // namespace fusec::codegen
