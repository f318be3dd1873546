/// The gemm_epilogue family; see Gemm.h.
#include "fusec/codegen/Gemm.h"

#include <sstream>

#include "ElementwiseEmitter.h"

namespace fusec::codegen {

bool isGemmGroup(const Graph& g, const std::vector<NodeRef>& members) {
  if (members.empty()) return false;
  const NodeData& d = g.node(members.front());
  return d.domain.empty() && d.op == "MatMul";
}

Expected<KernelSource> emitGemm(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                const std::string& name, const std::string& comment) {
  if (!isGemmGroup(g, members)) return Error{"group `" + name + "` does not start with a MatMul", true};
  const NodeData& mm = g.node(members.front());
  const ValueId a = mm.inputs[0], b = mm.inputs[1], p = mm.outputs[0];
  for (ValueId v : {a, b, p}) {
    const TensorType& t = g.value(v).type;
    if (!t.isStatic() || t.dtype != DType::Float32)
      return Error{"MatMul on `" + g.value(v).name + "` (not float with a static shape) has no kernel path", true};
  }
  Shape as = g.value(a).type.staticShape(), bs = g.value(b).type.staticShape();
  const Shape ps = g.value(p).type.staticShape();
  if (as.size() < 2 || bs.size() < 2) return Error{"MatMul with a vector operand has no kernel path yet", true};
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  // Batch offsets: broadcast each operand's batch dims to the result's.
  const size_t batchRank = ps.size() - 2;
  auto batchOffset = [&](const Shape& s, int64_t matrix) {
    const size_t rank = s.size() - 2, lead = batchRank - rank;
    std::string off = "0";
    int64_t stride = matrix;
    for (size_t k = rank; k-- > 0;) {
      if (s[k] != 1) off += " + c" + std::to_string(lead + k) + " * " + std::to_string(stride) + "L";
      stride *= s[k];
    }
    return off;
  };

  detail::Emitter e(g, catalog);
  const std::vector<NodeRef> epilogue(members.begin() + 1, members.end());
  GroupBoundary boundary = groupBoundary(g, epilogue);
  std::vector<ValueId> epiInputs = std::move(boundary.inputs);
  const std::vector<ValueId>& escaping = boundary.outputs;
  std::erase(epiInputs, p);  // computed by the kernel, not loaded
  // The MatMul result itself may be needed outside the group too.
  bool storeProduct = g.isGraphOutput(p);
  for (const Use& u : g.uses(p))
    storeProduct |= std::find(members.begin(), members.end(), u.node) == members.end();
  KernelSource k;
  k.name = name;
  k.inputs = {a, b};
  k.inputs.insert(k.inputs.end(), epiInputs.begin(), epiInputs.end());
  if (storeProduct) k.outputs.push_back(p);
  for (ValueId v : escaping)
    if (v != p) k.outputs.push_back(v);
  for (ValueId v : k.outputs)
    if (!g.value(v).type.isStatic() || g.value(v).type.staticShape() != ps)
      return Error{"a gemm epilogue result with another shape than the product has no kernel path", true};
  k.globalSize = static_cast<size_t>(shapeNumel(ps));

  e.bind(p, "acc");
  std::string epiParams, epiBody;
  // The epilogue's inputs follow A and B (in0, in1); the kernel declares
  // the coordinates of the product itself.
  if (Status st = e.emitBody(epilogue, epiInputs, ps, "i", epiParams, epiBody, 2, false); !st) return st.error();
  const Shape st = [&] {
    Shape s(ps.size(), 1);
    for (size_t d = ps.size(); d-- > 1;) s[d - 1] = s[d] * ps[d];
    return s;
  }();
  std::ostringstream src;
  src << "// " << comment << "\n" << detail::Emitter::prelude();
  src << "__kernel void " << name << "(\n    __global const float* restrict in0,\n    __global const float* restrict in1";
  if (!epiParams.empty()) src << ",\n    " << epiParams;
  for (size_t o = 0; o < k.outputs.size(); ++o) src << ",\n    __global float* restrict out" << o;
  src << ") {\n  const int i = get_global_id(0);\n";
  for (size_t d = 0; d < ps.size(); ++d)
    src << "  const int c" << d << " = (i / " << st[d] << ") % " << ps[d] << ";\n";
  const std::string m = "c" + std::to_string(ps.size() - 2), n = "c" + std::to_string(ps.size() - 1);
  src << "  const __global float* a = in0 + " << batchOffset(as, M * K) << " + " << m << " * " << K << ";\n";
  src << "  const __global float* b = in1 + " << batchOffset(bs, K * N) << " + " << n << ";\n";
  src << "  float acc = 0.0f;\n";
  src << "  for (int k = 0; k < " << K << "; ++k) acc = fma(a[k], b[k * " << N << "], acc);\n";
  src << epiBody;
  for (size_t o = 0; o < k.outputs.size(); ++o)
    src << "  out" << o << "[i] = " << (k.outputs[o] == p ? std::string("acc") : e.vars().at(k.outputs[o])) << ";\n";
  src << "}\n";
  k.source = src.str();
  return k;
}

}  // namespace fusec::codegen
