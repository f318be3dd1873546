/// The gemm_epilogue family; see Gemm.h.
#include "fusec/codegen/Gemm.h"

#include <functional>
#include <sstream>

#include "ElementwiseEmitter.h"

namespace fusec::codegen {
namespace {

int64_t intAttr(const NodeData& d, const char* name, int64_t def) {
  const Attribute* a = d.attr(name);
  return a && std::holds_alternative<int64_t>(*a) ? std::get<int64_t>(*a) : def;
}

float floatAttr(const NodeData& d, const char* name, float def) {
  const Attribute* a = d.attr(name);
  return a && std::holds_alternative<float>(*a) ? std::get<float>(*a) : def;
}

Shape stridesOf(const Shape& s) {
  Shape st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

/// The product's geometry: A(m, k) = a[m * am + k * ak], B(k, n) = b[k * bk + n * bn]
/// within one matrix of each operand; batch dims broadcast to the result's.
struct Geometry {
  int64_t M = 1, N = 1, K = 1;
  int64_t am = 0, ak = 1, bk = 0, bn = 1;
  Shape batch;                  // the result's batch dims
  Shape aBatch, bBatch;         // each operand's batch dims (numpy broadcasting)
  float alpha = 1, beta = 1;
  ValueId c = kNoValue;         // Gemm's addend
};

Expected<Geometry> geometry(const Graph& g, const NodeData& d) {
  Geometry geo;
  const Shape as = g.value(d.inputs[0]).type.staticShape(), bs = g.value(d.inputs[1]).type.staticShape();
  if (d.op == "Gemm") {
    if (as.size() != 2 || bs.size() != 2) return Error{"Gemm operands must be matrices", true};
    const bool ta = intAttr(d, "transA", 0) != 0, tb = intAttr(d, "transB", 0) != 0;
    geo.M = ta ? as[1] : as[0];
    geo.K = ta ? as[0] : as[1];
    geo.N = tb ? bs[0] : bs[1];
    geo.am = ta ? 1 : as[1];
    geo.ak = ta ? as[1] : 1;
    geo.bk = tb ? 1 : bs[1];
    geo.bn = tb ? bs[1] : 1;
    geo.alpha = floatAttr(d, "alpha", 1.0f);
    geo.beta = floatAttr(d, "beta", 1.0f);
    if (d.inputs.size() > 2 && d.inputs[2] != kNoValue) geo.c = d.inputs[2];
    return geo;
  }
  // MatMul: a vector operand is a matrix with one row (A) or one column (B).
  const bool aVec = as.size() == 1, bVec = bs.size() == 1;
  geo.M = aVec ? 1 : as[as.size() - 2];
  geo.K = as.back();
  geo.N = bVec ? 1 : bs.back();
  geo.am = geo.K;
  geo.bk = geo.N;
  if (!aVec) geo.aBatch.assign(as.begin(), as.end() - 2);
  if (!bVec) geo.bBatch.assign(bs.begin(), bs.end() - 2);
  const Shape ps = g.value(d.outputs[0]).type.staticShape();
  geo.batch.assign(ps.begin(), ps.end() - (aVec ? 0 : 1) - (bVec ? 0 : 1));
  return geo;
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

bool isGemmGroup(const Graph& g, const std::vector<NodeRef>& members) {
  if (members.empty()) return false;
  const NodeData& d = g.node(members.front());
  return d.domain.empty() && (d.op == "MatMul" || d.op == "Gemm");
}

Expected<KernelSource> emitGemm(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                const std::string& name, const std::string& comment, const GemmTiling& tiling) {
  if (!isGemmGroup(g, members)) return Error{"group `" + name + "` does not start with a MatMul or Gemm", true};
  const NodeData& mm = g.node(members.front());
  const ValueId a = mm.inputs[0], b = mm.inputs[1], p = mm.outputs[0];
  for (ValueId v : {a, b, p}) {
    const TensorType& t = g.value(v).type;
    if (!t.isStatic() || t.dtype != DType::Float32)
      return Error{mm.op.str() + " on `" + g.value(v).name + "` (not float with a static shape) has no kernel path", true};
  }
  Expected<Geometry> geo = geometry(g, mm);
  if (!geo) return geo.error();
  const int64_t M = geo->M, N = geo->N, K = geo->K;
  const Shape ps = g.value(p).type.staticShape();
  const int TM = tiling.rows, W = tiling.width;
  if (TM < 1 || TM > 16 || (W != 4 && W != 8 && W != 16)) return Error{"gemm tiling out of range", true};

  detail::Emitter e(g, catalog);
  const std::vector<NodeRef> epilogue(members.begin() + 1, members.end());
  GroupBoundary boundary = groupBoundary(g, epilogue);
  std::vector<ValueId> epiInputs = std::move(boundary.inputs);
  const std::vector<ValueId>& escaping = boundary.outputs;
  std::erase(epiInputs, p);  // computed by the kernel, not loaded
  // The product itself may be needed outside the group too.
  bool storeProduct = g.isGraphOutput(p) || epilogue.empty();
  for (const Use& u : g.uses(p))
    storeProduct |= std::find(members.begin(), members.end(), u.node) == members.end();
  KernelSource k;
  k.name = name;
  k.inputs = {a, b};
  if (geo->c != kNoValue) k.inputs.push_back(geo->c);
  const size_t firstEpi = k.inputs.size();
  k.inputs.insert(k.inputs.end(), epiInputs.begin(), epiInputs.end());
  if (storeProduct) k.outputs.push_back(p);
  for (ValueId v : escaping)
    if (v != p) k.outputs.push_back(v);
  for (ValueId v : k.outputs)
    if (!g.value(v).type.isStatic() || g.value(v).type.staticShape() != ps)
      return Error{"a gemm epilogue result with another shape than the product has no kernel path", true};

  e.bind(p, "acc");
  std::string epiParams, epiBody;
  // The epilogue reads the product at linear index i; the kernel declares
  // the coordinates c0, c1, ... of i in the product's shape.
  if (Status st = e.emitBody(epilogue, epiInputs, ps, "i", epiParams, epiBody, firstEpi, false); !st) return st.error();

  const int64_t MT = (M + TM - 1) / TM, NT = (N + W - 1) / W, batches = shapeNumel(geo->batch);
  // With local memory, a work-group of L work-items takes L row tiles of
  // one column panel and stages the panel's rows of B, KB at a time, in
  // local memory: contiguous, so strided B rows (a power-of-two N) no
  // longer alias in the cache, and on GPUs each B element is read from
  // global memory once per work-group.
  // Row blocks of at most localRows tiles, balanced so the last is not mostly idle.
  const int64_t RB = tiling.localRows > 0 ? (MT + tiling.localRows - 1) / tiling.localRows : MT;
  const int64_t L = (MT + RB - 1) / RB, KB = std::max<int64_t>(1, std::min<int64_t>(tiling.depth, K));
  const bool staged = tiling.localRows > 0;
  k.globalSize = static_cast<size_t>((staged ? RB * L : MT) * NT * batches);
  if (staged) k.localSize = static_cast<size_t>(L);
  const std::string vec = "float" + std::to_string(W);
  // B's columns are contiguous for a plain B and strided for a transposed one.
  const bool contiguousB = geo->bn == 1;

  std::ostringstream src;
  src << "// " << comment << "\n";
  src << "// C[" << M << "x" << N << "] = A[" << M << "x" << K << "] * B[" << K << "x" << N << "]";
  if (batches > 1) src << ", " << batches << " batches";
  src << "; each work-item computes a " << TM << "x" << W << " tile with " << vec << " accumulators";
  if (staged) src << ",\n// " << L << " work-items share a column panel of B staged in local memory " << KB << " rows at a time";
  src << ".\n" << detail::Emitter::prelude();
  src << "#define M " << M << "\n#define N " << N << "\n#define K " << K << "  // within this program only\n";
  src << "__kernel ";
  if (staged) src << "__attribute__((reqd_work_group_size(" << L << ", 1, 1))) ";
  src << "void " << name << "(\n    __global const float* restrict in0,\n    __global const float* restrict in1";
  if (geo->c != kNoValue) src << ",\n    __global const float* restrict in2";
  if (!epiParams.empty()) src << ",\n    " << epiParams;
  for (size_t o = 0; o < k.outputs.size(); ++o) src << ",\n    __global float* restrict out" << o;
  src << ") {\n";
  if (staged) {
    src << "  const int lid = get_local_id(0), grp = get_group_id(0);\n";
    src << "  const int m0 = ((grp % " << RB << ") * " << L << " + lid) * " << TM << ", n0 = ((grp / " << RB << ") % " << NT
        << ") * " << W << ", bt = grp / " << NT * RB << ";\n";
  } else {
    // Row tiles vary fastest: neighbouring work-items share B's column panel.
    src << "  const int gid = get_global_id(0);\n";
    src << "  const int m0 = (gid % " << MT << ") * " << TM << ", n0 = ((gid / " << MT << ") % " << NT << ") * " << W
        << ", bt = gid / " << NT * MT << ";\n";
  }
  const Shape bst = stridesOf(geo->batch);
  for (size_t d = 0; d < geo->batch.size(); ++d)
    src << "  const int b" << d << " = (bt / " << bst[d] << ") % " << geo->batch[d] << ";\n";
  src << "  const __global float* a = in0 + " << batchOffset(geo->aBatch, geo->batch, M * K) << ";\n";
  src << "  const __global float* b = in1 + " << batchOffset(geo->bBatch, geo->batch, K * N) << ";\n";
  // Rows past M and columns past N are clamped: they compute duplicates
  // that are never stored, so the hot loop has no branches.
  for (int r = 0; r < TM; ++r)
    src << "  const __global float* a" << r << " = a + min(m0 + " << r << ", M - 1) * " << geo->am << ";\n";
  for (int r = 0; r < TM; ++r) src << "  " << vec << " acc" << r << " = (" << vec << ")(0.0f);\n";
  // B's row `k` of the panel as a vector.
  auto bRow = [&](const std::string& k, bool vectorLoad) {
    if (vectorLoad) return "vload" + std::to_string(W) + "(0, b + " + k + " * " + std::to_string(geo->bk) + " + n0)";
    std::string v = "(" + vec + ")(";
    for (int j = 0; j < W; ++j)
      v += (j ? ", " : "") + std::string("b[") + k + " * " + std::to_string(geo->bk) + " + min(n0 + " + std::to_string(j) +
           ", N - 1) * " + std::to_string(geo->bn) + "]";
    return v + ")";
  };
  auto fmas = [&](const std::string& indent, const std::string& k) {
    for (int r = 0; r < TM; ++r)
      src << indent << "acc" << r << " = fma((" << vec << ")(a" << r << "[" << k << " * " << geo->ak << "]), bv, acc" << r
          << ");\n";
  };
  // Full panels load B by vectors where its columns are contiguous; the
  // last, partial panel gathers.
  auto panelCases = [&](const std::function<void(bool)>& body) {
    if (contiguousB && N % W == 0) {
      body(true);
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
  if (staged) {
    src << "  __local " << vec << " panel[" << KB << "];\n";
    src << "  for (int k0 = 0; k0 < K; k0 += " << KB << ") {\n";
    src << "    barrier(CLK_LOCAL_MEM_FENCE);\n";
    panelCases([&](bool vectorLoad) {
      src << "    for (int kk = lid; kk < " << KB << "; kk += " << L << ") panel[kk] = "
          << bRow("min(k0 + kk, K - 1)", vectorLoad) << ";\n";
    });
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
  // The epilogue, element by element, on the finished tile.
  src << "  float tile[" << TM * W << "];\n";
  for (int r = 0; r < TM; ++r) src << "  vstore" << W << "(acc" << r << ", " << r << ", tile);\n";
  src << "  for (int r = 0; r < " << TM << "; ++r) {\n";
  src << "    const int m = m0 + r;\n    if (m >= M) break;\n";
  src << "    for (int j = 0; j < " << W << "; ++j) {\n";
  src << "      const int n = n0 + j;\n      if (n >= N) break;\n";
  src << "      const int i = bt * " << M * N << " + m * N + n;\n";
  for (size_t d = 0; d < ps.size(); ++d)
    src << "      const int c" << d << " = (i / " << stridesOf(ps)[d] << ") % " << ps[d] << ";\n";
  src << "      float acc = tile[r * " << W << " + j];\n";
  if (geo->alpha != 1.0f) src << "      acc *= " << detail::floatLiteral(geo->alpha) << ";\n";
  if (geo->c != kNoValue) {
    const Shape cs = g.value(geo->c).type.staticShape();
    // Unidirectional broadcast of C to [M, N].
    std::string off = "0";
    if (cs.size() >= 1 && cs.back() != 1) off = "n";
    if (cs.size() == 2 && cs[0] != 1) off = off == "n" ? "m * N + n" : "m";
    src << "      acc = fma(" << detail::floatLiteral(geo->beta) << ", in2[" << off << "], acc);\n";
  }
  std::istringstream body(epiBody);
  for (std::string line; std::getline(body, line);) src << "    " << line << "\n";
  for (size_t o = 0; o < k.outputs.size(); ++o)
    src << "      out" << o << "[i] = " << (k.outputs[o] == p ? std::string("acc") : e.vars().at(k.outputs[o])) << ";\n";
  src << "    }\n  }\n}\n";
  k.source = src.str();
  return k;
}

}  // namespace fusec::codegen
