/// The window family; see Pool.h.
#include "fusec/codegen/Pool.h"

#include <sstream>

#include "ElementwiseEmitter.h"
#include "fusec/engine/Window.h"

namespace fusec::codegen {

bool isPoolGroup(const Graph& g, const std::vector<NodeRef>& members) {
  if (members.empty()) return false;
  const NodeData& d = g.node(members.front());
  return d.domain.empty() && (d.op == "MaxPool" || d.op == "AveragePool");
}

Expected<KernelSource> emitPool(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                const std::string& name, const std::string& comment) {
  if (!isPoolGroup(g, members)) return Error{"group `" + name + "` does not start with a pooling op", true};
  const NodeData& d = g.node(members.front());
  const bool isMax = d.op == "MaxPool";
  const ValueId x = d.inputs[0], y = d.outputs[0];
  for (ValueId v : {x, y})
    if (!g.value(v).type.isStatic() || g.value(v).type.dtype != DType::Float32)
      return Error{d.op.str() + " on `" + g.value(v).name + "` (not float with a static shape) has no kernel path", true};
  for (size_t o = 1; o < d.outputs.size(); ++o)
    if (d.outputs[o] != kNoValue && (!g.uses(d.outputs[o]).empty() || g.isGraphOutput(d.outputs[o])))
      return Error{"MaxPool with its Indices result used has no kernel path", true};
  const Shape xs = g.value(x).type.staticShape(), ys = g.value(y).type.staticShape();
  if (xs.size() < 3 || xs.size() > 5) return Error{d.op.str() + " over other than 1 to 3 spatial dims has no kernel path", true};
  const Attribute* ka = d.attr("kernel_shape");
  if (!ka || !std::holds_alternative<std::vector<int64_t>>(*ka))
    return Error{d.op.str() + " `" + d.name + "` has no kernel_shape", true};
  const Shape spatial(xs.begin() + 2, xs.end());
  Expected<WindowGeometry> w = windowGeometry(d, spatial, std::get<std::vector<int64_t>>(*ka), d.attrInt("ceil_mode", 0) != 0);
  if (!w) return Error{d.op.str() + " `" + d.name + "`: " + w.error().message, true};
  const bool includePad = d.attrInt("count_include_pad", 0) != 0;
  const size_t k = spatial.size();

  detail::Emitter e(g, catalog);
  Expected<detail::Emitter::Epilogue> epi = e.epilogue(members, y, "pooling");
  if (!epi) return epi.error();
  KernelSource ks;
  ks.name = name;
  ks.inputs = {x};
  ks.inputs.insert(ks.inputs.end(), epi->inputs.begin(), epi->inputs.end());
  ks.outputs = epi->outputs;
  ks.globalSize = static_cast<size_t>(shapeNumel(ys));
  e.bind(y, "acc");
  std::string epiParams, epiBody;
  if (Status st = e.emitBody(epi->members, epi->inputs, ys, "i", epiParams, epiBody, 1, false); !st) return st.error();

  std::ostringstream src;
  src << "// " << comment << "\n" << detail::Emitter::prelude();
  src << "__kernel void " << name << "(\n    __global const float* restrict in0";
  if (!epiParams.empty()) src << ",\n    " << epiParams;
  for (size_t o = 0; o < ks.outputs.size(); ++o) src << ",\n    __global float* restrict out" << o;
  src << ") {\n  const int i = get_global_id(0);\n";
  src << detail::Emitter::coordinates(ys, "i", "  ");
  src << "  const __global float* plane = in0 + (c0 * " << xs[1] << " + c1) * " << w->inSize() << ";\n";
  src << "  float acc = " << (isMax ? "-INFINITY" : "0.0f") << ";\n  int count = 0;\n";
  std::string offset = "0";
  int64_t stride = 1;
  for (size_t q = k; q-- > 0;) {
    offset = "p" + std::to_string(q) + " * " + std::to_string(stride) + " + " + offset;
    stride *= spatial[q];
  }
  std::string indent = "  ";
  for (size_t q = 0; q < k; ++q) {
    const std::string c = "c" + std::to_string(q + 2), p = "p" + std::to_string(q), kk = "k" + std::to_string(q);
    src << indent << "for (int " << kk << " = 0; " << kk << " < " << w->kernel[q] << "; ++" << kk << ") {\n";
    indent += "  ";
    src << indent << "const int " << p << " = " << c << " * " << w->strides[q] << " - " << w->padBegin[q] << " + " << kk
        << " * " << w->dilations[q] << ";\n";
    if (includePad) {
      // Positions in the padding count (not past it: ceil_mode windows can overhang).
      src << indent << "if (" << p << " >= " << spatial[q] + w->padEnd[q] << ") continue;\n";
    }
  }
  std::string inside;
  for (size_t q = 0; q < k; ++q) {
    const std::string p = "p" + std::to_string(q);
    inside += (q ? " && " : "") + p + " >= 0 && " + p + " < " + std::to_string(spatial[q]);
  }
  if (includePad) src << indent << "++count;\n";
  src << indent << "if (" << inside << ") {\n";
  src << indent << "  const float v = plane[" << offset << "];\n";
  if (isMax) src << indent << "  acc = fmax(acc, v);\n";
  else src << indent << "  acc += v;\n" << (includePad ? "" : indent + "  ++count;\n");
  src << indent << "}\n";
  for (size_t q = k; q-- > 0;) {
    indent.resize(indent.size() - 2);
    src << indent << "}\n";
  }
  if (!isMax) src << "  acc = count ? acc / count : 0.0f;\n";
  else src << "  (void)count;\n";
  src << epiBody;
  for (size_t o = 0; o < ks.outputs.size(); ++o)
    src << "  out" << o << "[i] = " << (ks.outputs[o] == y ? std::string("acc") : e.vars().at(ks.outputs[o])) << ";\n";
  src << "}\n";
  ks.source = src.str();
  return ks;
}

}  // namespace fusec::codegen
