/// Conversions between ONNX protos and IR pieces, shared by import and export.
/// Private to engine/.
#pragma once

#include <onnx/onnx_pb.h>

#include "fusec/engine/Graph.h"

namespace fusec {

/// TensorProto -> Tensor; throws UserError for unsupported encodings
/// (string tensors) or sizes that do not match the dims. External data is
/// read from `externalDir` (the model's folder; see OnnxImport.cpp), and
/// refused without one.
Tensor tensorFromProto(const onnx::TensorProto& proto, const std::string* externalDir = nullptr);
void tensorToProto(const Tensor& tensor, onnx::TensorProto& proto);

TensorType typeFromProto(const onnx::TypeProto& proto);
void typeToProto(const TensorType& type, onnx::TypeProto& proto);

/// The node as a NodeProto (op, domain, name, operand and result names, attributes).
void nodeToProto(const Graph& g, NodeRef n, onnx::NodeProto& proto);

/// What is wrong with attribute `name` = `value` of a node before any shape
/// inference or kernel sees it (ONNX's own inference divides by strides and
/// trusts kernel sizes and axes), or empty: window sizes, strides and
/// dilations must be positive, `group` at least 1, scales positive and
/// finite, axes and permutations within 64 dims.
std::string attributeProblem(std::string_view name, const Attribute& value);

Attribute attributeFromProto(const onnx::AttributeProto& proto);
void attributeToProto(const std::string& name, const Attribute& attr, onnx::AttributeProto& proto);

}  // namespace fusec
