/// ONNX export: Graph -> ModelProto (binary) and the proto conversions it needs.
#include <algorithm>
#include <fstream>

#include "OnnxProto.h"
#include "fusec/engine/Files.h"
#include "fusec/engine/OnnxIO.h"

namespace fusec {

void tensorToProto(const Tensor& tensor, onnx::TensorProto& proto) {
  proto.set_data_type(static_cast<int32_t>(tensor.dtype()));
  for (int64_t d : tensor.shape()) proto.add_dims(d);
  proto.set_raw_data(reinterpret_cast<const char*>(tensor.raw()), tensor.byteSize());
}

void typeToProto(const TensorType& type, onnx::TypeProto& proto) {
  auto* tt = proto.mutable_tensor_type();
  tt->set_elem_type(static_cast<int32_t>(type.dtype));
  if (!type.dims) return;
  auto* shape = tt->mutable_shape();
  for (const Dim& d : *type.dims) {
    auto* dim = shape->add_dim();
    if (d.isStatic()) dim->set_dim_value(d.size);
    else if (!d.symbol.empty()) dim->set_dim_param(d.symbol);
  }
}

void attributeToProto(const std::string& name, const Attribute& attr, onnx::AttributeProto& proto) {
  using A = onnx::AttributeProto;
  if (const auto* opaque = std::get_if<OpaqueAttr>(&attr)) {
    proto.ParseFromString(opaque->serializedProto);
    proto.set_name(name);
    return;
  }
  proto.set_name(name);
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          proto.set_type(A::INT);
          proto.set_i(v);
        } else if constexpr (std::is_same_v<T, float>) {
          proto.set_type(A::FLOAT);
          proto.set_f(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          proto.set_type(A::STRING);
          proto.set_s(v);
        } else if constexpr (std::is_same_v<T, Tensor>) {
          proto.set_type(A::TENSOR);
          tensorToProto(v, *proto.mutable_t());
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          proto.set_type(A::INTS);
          for (int64_t x : v) proto.add_ints(x);
        } else if constexpr (std::is_same_v<T, std::vector<float>>) {
          proto.set_type(A::FLOATS);
          for (float x : v) proto.add_floats(x);
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          proto.set_type(A::STRINGS);
          for (const std::string& x : v) proto.add_strings(x);
        }
      },
      attr);
}

void nodeToProto(const Graph& g, NodeRef n, onnx::NodeProto& proto) {
  const NodeData& d = g.node(n);
  proto.set_op_type(d.op.str());
  proto.set_domain(d.domain);
  proto.set_name(d.name);
  for (ValueId v : d.inputs) proto.add_input(v == kNoValue ? "" : g.value(v).name);
  for (ValueId v : d.outputs) proto.add_output(v == kNoValue ? "" : g.value(v).name);
  for (const auto& [key, attr] : d.attrs) attributeToProto(key, attr, *proto.add_attribute());
}

namespace {

void valueInfo(const Value& v, onnx::ValueInfoProto& proto) {
  proto.set_name(v.name);
  if (v.type.dtype != DType::Undefined) typeToProto(v.type, *proto.mutable_type());
}

onnx::ModelProto toModelProto(const Graph& g) {
  onnx::ModelProto m;
  // Before IR version 4 every initializer had to be a graph input as well;
  // constants are written as initializers alone, which version 4 allows.
  m.set_ir_version(std::max<int64_t>(g.info.irVersion, 4));
  m.set_producer_name(g.info.producerName);
  m.set_producer_version(g.info.producerVersion);
  for (const auto& [domain, version] : g.info.opsetImports) {
    auto* op = m.add_opset_import();
    op->set_domain(domain);
    op->set_version(version);
  }
  onnx::GraphProto* gp = m.mutable_graph();
  gp->set_name(g.info.graphName);
  for (ValueId v : g.inputs()) valueInfo(g.value(v), *gp->add_input());
  for (ValueId v : g.constants()) {
    onnx::TensorProto* t = gp->add_initializer();
    tensorToProto(*g.value(v).constant, *t);
    t->set_name(g.value(v).name);
  }
  Expected<std::vector<NodeRef>> order = g.topologicalOrder();
  std::vector<NodeRef> nodes = order ? order.value() : g.nodes();
  for (NodeRef n : nodes) {
    const NodeData& d = g.node(n);
    nodeToProto(g, n, *gp->add_node());
    for (ValueId v : d.outputs) {
      if (v == kNoValue || g.isGraphOutput(v) || g.value(v).type.dtype == DType::Undefined) continue;
      valueInfo(g.value(v), *gp->add_value_info());
    }
  }
  for (ValueId v : g.outputs()) valueInfo(g.value(v), *gp->add_output());
  return m;
}

}  // namespace

std::string exportOnnxBinary(const Graph& graph) { return toModelProto(graph).SerializeAsString(); }

Status exportOnnxFile(const Graph& graph, const std::string& path) {
  bool text = path.ends_with(".txt") || path.ends_with(".onnxtxt");
  return writeOutputFile(path, text ? exportOnnxText(graph) : exportOnnxBinary(graph));
}

std::string serializeTensorProto(const Tensor& tensor, const std::string& name) {
  onnx::TensorProto proto;
  tensorToProto(tensor, proto);
  proto.set_name(name);
  return proto.SerializeAsString();
}

}  // namespace fusec
