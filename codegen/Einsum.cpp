/// The contraction family; see Emitters.h.
#include "Emitters.h"

#include <sstream>

#include "ElementwiseEmitter.h"
#include "fusec/engine/Einsum.h"
#include "FamilyRegistry.h"

namespace fusec::codegen {

bool isEinsum(const Graph& g, NodeRef n) {
  const NodeData& d = g.node(n);
  return d.domain.empty() && d.op == "Einsum";
}

Expected<KernelSource> emitEinsum(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog&,
                                  const std::string& name, const std::string& comment) {
  if (members.size() != 1 || !isEinsum(g, members[0])) return Error{"the contraction family takes one Einsum", true};
  const NodeData& d = g.node(members[0]);
  if (d.outputs.empty() || d.outputs[0] == kNoValue) return Error{"Einsum without a result", true};
  const ValueId out = d.outputs[0];
  const DType t = g.value(out).type.dtype;
  const std::string type = detail::cType(t);
  if (type.empty() || t == DType::Bool)
    return Error{"Einsum of `" + std::string(dtypeName(t)) + "` has no kernel path", true};
  std::vector<Shape> shapes;
  for (ValueId v : d.inputs) {
    if (v == kNoValue || !g.value(v).type.isStatic())
      return Error{"Einsum operand without a static shape has no kernel path", true};
    if (g.value(v).type.dtype != t) return Error{"Einsum operands of different element types", true};
    shapes.push_back(g.value(v).type.staticShape());
  }
  Expected<EinsumGeometry> geo = einsumGeometry(d.attrString("equation", ""), shapes);
  if (!geo) return geo.error();
  if (!g.value(out).type.isStatic() || g.value(out).type.staticShape() != geo->outputShape())
    return Error{"Einsum result `" + g.value(out).name + "` has no static shape matching its equation", true};

  KernelSource k;
  k.name = name;
  k.inputs = d.inputs;
  k.outputs = {out};
  k.globalSize = static_cast<size_t>(std::max<int64_t>(shapeNumel(geo->outputShape()), 0));
  std::ostringstream src;
  src << "// " << comment << "\n";
  src << "// equation \"" << detail::Emitter::sanitize(d.attrString("equation", "")) << "\": letters " << geo->letters
      << ", the first " << geo->outputRank << " index the result\n";
  if (t == DType::Float64) src << "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
  src << "__kernel void " << name << "(";
  for (size_t i = 0; i < k.inputs.size(); ++i) src << "\n    __global const " << type << "* restrict in" << i << ",";
  src << "\n    __global " << type << "* restrict out0) {\n";
  src << "  const int o = get_global_id(0);\n";
  // Coordinates c0.. of the output letters, loops over the contracted ones.
  src << detail::Emitter::coordinates(geo->outputShape(), "o", "  ");
  src << "  " << type << " acc = 0;\n";
  std::string indent = "  ";
  for (size_t l = geo->outputRank; l < geo->letters.size(); ++l) {
    const std::string c = "c" + std::to_string(l);
    src << indent << "for (int " << c << " = 0; " << c << " < " << geo->sizes[l] << "; ++" << c << ")\n";
    indent += "  ";
  }
  src << indent << "acc += ";
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    std::string offset;
    for (size_t l = 0; l < geo->letters.size(); ++l) {
      const int64_t stride = geo->strides[i][l];
      if (stride == 0) continue;
      offset += (offset.empty() ? "" : " + ") + ("c" + std::to_string(l)) + (stride == 1 ? "" : " * " + std::to_string(stride));
    }
    src << (i ? " * " : "") << "in" << i << "[" << (offset.empty() ? "0" : offset) << "]";
  }
  src << ";\n";
  src << "  out0[o] = acc;\n}\n";
  k.source = src.str();
  return k;
}

FUSEC_KERNEL_FAMILY(contraction) {
  return {"contraction", "one Einsum", "it is not one Einsum",
          {"#d6f0ef", "#2c8a86"},
          [](const Graph& g, const std::vector<NodeRef>& group, const OpCatalog&) {
            return group.size() == 1 && isEinsum(g, group[0]);
          },
          [](const EmitRequest& r) { return emitEinsum(r.graph, r.group, r.catalog, r.name, r.comment); }};
}

}  // namespace fusec::codegen
