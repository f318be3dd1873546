/// Type inference: the element type and shape of every value, from the
/// graph inputs' types and the data of constants.
///
/// Each node is inferred on its own with ONNX's per-op inference functions
/// (data propagation on), fed its operands' types and the data of its small
/// constant operands, so Reshape, Slice, Expand, ... see the shapes that
/// constant folding computed. Nodes are visited in topological order, so one
/// sweep reaches every value whose shape follows from the inputs. Dims that
/// ONNX makes up (`unk__0`) are dropped to unknown: they would alias across
/// nodes. What is already known is kept.
#pragma once

#include "fusec/engine/Error.h"
#include "fusec/engine/Graph.h"

namespace fusec {

/// Infers the types of `n`'s results that are not fully known. Never fails:
/// an op ONNX cannot infer (unknown domain, operands of unknown type) keeps
/// what its results had. Returns whether a result's type changed.
bool inferNodeTypes(Graph& g, NodeRef n);

/// Whether ONNX's inference may be run on `d`: its attributes pass
/// attributeProblem, and the constant operands it does arithmetic with
/// (Resize's scales, Tile's repeats, Pad's pads) give sizes that fit. The
/// importer drops types ONNX inferred for nodes that fail this.
bool inferenceSafe(const Graph& g, const NodeData& d);

/// Whether the operands' element types are ones ONNX's schema of the op
/// allows (`Or` takes bool; Add's two operands share one type), where they
/// are known: "" when they are, else what is wrong. Ops ONNX does not know
/// are not checked.
std::string operandTypeProblem(const Graph& g, const NodeData& d);

/// The element types ONNX's schema of `op` (default domain, at `opset`)
/// allows for operand `operand`, among float32, float64, int64, int32 and
/// bool (the ones instances are drawn in), in that order; empty when ONNX
/// does not know the op.
std::vector<DType> schemaOperandTypes(const std::string& op, size_t operand, int opset = 17);

/// inferNodeTypes over every node, in topological order. Fails only when
/// the graph has a cycle.
Status inferTypes(Graph& g);

/// Largest constant operand (in bytes) whose data inference reads: enough
/// for every shape, index and axes operand.
inline constexpr size_t kInferenceDataBytes = 64 * 1024;

/// The first value (in topological order) whose shape is not static
/// although a kernel would need it, as an error naming its node and what
/// decides the shape: a graph input's unbound dims, or the run-time data of
/// an operand. `hint` ends the message (what to do instead).
Status requireStaticShapes(const Graph& g, const std::string& hint);

}  // namespace fusec
