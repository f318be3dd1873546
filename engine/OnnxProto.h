/// Conversions between ONNX protos and IR pieces, shared by import and export.
/// Private to engine/.
#pragma once

#include <onnx/onnx_pb.h>

#include "fusec/engine/Graph.h"

namespace fusec {

/// TensorProto -> Tensor; throws UserError for unsupported encodings
/// (string tensors, external data) or sizes that do not match the dims.
Tensor tensorFromProto(const onnx::TensorProto& proto);
void tensorToProto(const Tensor& tensor, onnx::TensorProto& proto);

TensorType typeFromProto(const onnx::TypeProto& proto);
void typeToProto(const TensorType& type, onnx::TypeProto& proto);

/// The node as a NodeProto (op, domain, name, operand and result names, attributes).
void nodeToProto(const Graph& g, NodeRef n, onnx::NodeProto& proto);

Attribute attributeFromProto(const onnx::AttributeProto& proto);
void attributeToProto(const std::string& name, const Attribute& attr, onnx::AttributeProto& proto);

}  // namespace fusec
