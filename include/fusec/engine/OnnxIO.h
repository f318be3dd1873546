/// ONNX in and out: binary `.onnx` files and ONNX text syntax.
///
/// Import runs libonnx's checker and shape inference, then maps the model to
/// the IR. `Constant` nodes become constant values. Ops fusec does not know
/// are kept as they are (opaque nodes); attributes fusec does not interpret
/// (subgraphs, sparse tensors) travel as serialized protos.
#pragma once

#include <string>
#include <string_view>

#include "fusec/engine/Error.h"
#include "fusec/engine/Graph.h"

namespace fusec {

struct ImportOptions {
  bool runChecker = true;
  bool inferShapes = true;
  /// Where tensors with external data find their files: the model's folder
  /// (importOnnxFile sets it); empty refuses external data.
  std::string externalDataDir;
};

/// Loads a model file; binary protobuf or ONNX text, told apart by content.
/// Errors name the file and, where there is one, the node.
Expected<Graph> importOnnxFile(const std::string& path, const ImportOptions& options = {});
/// Loads a model from memory; `sourceName` is used in messages.
Expected<Graph> importOnnxBuffer(std::string_view bytes, std::string_view sourceName,
                                 const ImportOptions& options = {});

/// Serialized ModelProto.
std::string exportOnnxBinary(const Graph& graph);
/// ONNX text syntax that libonnx's parser reads back. Node names are not part
/// of the syntax; value names that are not identifiers are rewritten; scalars
/// print as `float x`. Limits of libonnx 1.12's syntax: an omitted first
/// operand or result, and some subgraph attributes, do not parse back.
std::string exportOnnxText(const Graph& graph);
/// Writes binary or text, chosen by the extension (`.onnx` is binary; `.txt`,
/// `.onnxtxt` are text).
Status exportOnnxFile(const Graph& graph, const std::string& path);

/// Whether `name` is an op of ONNX's standard domains (ai.onnx, ai.onnx.ml)
/// in libonnx's schema registry: its meaning is ONNX's, not a pack's.
bool isStandardOnnxOp(std::string_view name);

/// Reads a serialized TensorProto (the `input_0.pb` files of ONNX tests).
Expected<Tensor> loadTensorProtoFile(const std::string& path);
/// Serialized TensorProto with the given name.
std::string serializeTensorProto(const Tensor& tensor, const std::string& name);

}  // namespace fusec
