/// Per-node type inference with ONNX's op schemas (see TypeInference.h).
#include "fusec/engine/TypeInference.h"

#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#include <fmt/format.h>
#include <set>

#include <onnx/defs/data_type_utils.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include "OnnxProto.h"
#include "fusec/engine/Einsum.h"

namespace fusec {

std::vector<DType> schemaOperandTypes(const std::string& op, size_t operand, int opset) {
  // Asked for every operand of every op drawn (verify draws thousands of
  // instances per rule): answers are kept.
  static std::mutex mutex;
  static std::map<std::tuple<std::string, size_t, int>, std::vector<DType>> known;
  const auto key = std::make_tuple(op, operand, opset);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = known.find(key); it != known.end()) return it->second;
  }
  std::vector<DType> out;
  const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(op, opset, onnx::ONNX_DOMAIN);
  if (schema && !schema->inputs().empty()) {
    const auto& formals = schema->inputs();
    if (operand < formals.size() || formals.back().GetOption() == onnx::OpSchema::Variadic) {
      const auto& allowed = formals[std::min(operand, formals.size() - 1)].GetTypes();
      for (DType dt : {DType::Float32, DType::Float64, DType::Int64, DType::Int32, DType::Bool}) {
        const onnx::DataType t = onnx::Utils::DataTypeUtils::ToType(
            "tensor(" + onnx::Utils::DataTypeUtils::ToDataTypeString(static_cast<int32_t>(dt)) + ")");
        if (allowed.count(t)) out.push_back(dt);
      }
    }
  }
  std::lock_guard<std::mutex> lock(mutex);
  known.emplace(key, out);
  return out;
}

namespace {

bool fullyKnown(const TensorType& t) { return t.dtype != DType::Undefined && t.isStatic(); }

/// The symbols of the operands' dims: the only symbols a result may share.
std::set<std::string> operandSymbols(const Graph& g, const NodeData& d) {
  std::set<std::string> symbols;
  for (ValueId v : d.inputs)
    if (v != kNoValue && g.value(v).type.dims)
      for (const Dim& dim : *g.value(v).type.dims)
        if (!dim.symbol.empty()) symbols.insert(dim.symbol);
  return symbols;
}

}  // namespace

bool inferenceSafe(const Graph& g, const NodeData& d) {
  for (const auto& [name, value] : d.attrs)
    if (!attributeProblem(name, value).empty()) return false;  // ONNX's inference would trust it
  // Operands ONNX's inference does arithmetic with unchecked: Resize's
  // scales multiply dims, Tile's repeats too, Pad's pads add to them. Where
  // the result would not be a size, nothing is inferred (the kernels then
  // report the node).
  if (d.op == "Resize" && d.inputs.size() > 2 && d.inputs[2] != kNoValue && g.isConstant(d.inputs[2]))
    for (float s : g.value(d.inputs[2]).constant->toFloats())
      if (!(s > 0) || !std::isfinite(s)) return false;
  if ((d.op == "Tile" || d.op == "Pad") && d.inputs.size() > 1 && d.inputs[1] != kNoValue && g.isConstant(d.inputs[1]) &&
      d.inputs[0] != kNoValue && g.value(d.inputs[0]).type.isStatic()) {
    const Shape x = g.value(d.inputs[0]).type.staticShape();
    const Tensor& c = *g.value(d.inputs[1]).constant;
    if (c.dtype() != DType::Int64) return false;
    const size_t n = static_cast<size_t>(c.numel());
    for (size_t a = 0; a < x.size(); ++a) {
      int64_t dim = 0;
      const bool broken = d.op == "Tile"
                              ? a >= n || c.data<int64_t>()[a] < 0 || __builtin_mul_overflow(x[a], c.data<int64_t>()[a], &dim)
                              : n != 2 * x.size() || __builtin_add_overflow(x[a], c.data<int64_t>()[a], &dim) ||
                                    __builtin_add_overflow(dim, c.data<int64_t>()[a + x.size()], &dim) || dim < 0;
      if (broken) return false;
    }
  }
  // Convolutions and pools: ONNX's inference indexes the weights' dims and
  // the window attributes by the input's rank without checking them.
  static const std::set<std::string> windowed = {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "ConvInteger",
                                                 "QLinearConv"};
  if (windowed.count(d.op.str()) && !d.inputs.empty() && d.inputs[0] != kNoValue) {
    const TensorType& x = g.value(d.inputs[0]).type;
    if (!x.dims || x.dims->size() < 3) return false;
    const size_t spatial = x.dims->size() - 2;
    if ((d.op == "Conv" || d.op == "ConvTranspose") && d.inputs.size() > 1 && d.inputs[1] != kNoValue) {
      const TensorType& w = g.value(d.inputs[1]).type;
      if (!w.dims || w.dims->size() != x.dims->size()) return false;
    }
    for (const char* name : {"kernel_shape", "strides", "dilations", "output_padding", "pads"}) {
      const Attribute* a = d.attr(name);
      const auto* list = a ? std::get_if<std::vector<int64_t>>(a) : nullptr;
      if (a && (!list || list->size() != (std::string_view(name) == "pads" ? 2 * spatial : spatial))) return false;
    }
  }
  return true;
}

std::string operandTypeProblem(const Graph& g, const NodeData& d) {
  auto opset = g.info.opsetImports.find(d.domain);
  const int version = static_cast<int>(opset == g.info.opsetImports.end() ? g.info.defaultOpset() : opset->second);
  const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(d.op.str(), version, d.domain);
  if (!schema || schema->inputs().empty()) return "";
  const auto& formals = schema->inputs();
  std::map<std::string, std::pair<DType, size_t>> bound;  // type parameter -> the first operand's type
  for (size_t i = 0; i < d.inputs.size(); ++i) {
    const bool variadic = formals.back().GetOption() == onnx::OpSchema::Variadic;
    if (i >= formals.size() && !variadic) break;
    const auto& formal = formals[std::min(i, formals.size() - 1)];
    if (d.inputs[i] == kNoValue) continue;
    const DType dt = g.value(d.inputs[i]).type.dtype;
    if (dt == DType::Undefined || dtypeSize(dt) == 0) continue;
    const onnx::DataType mine =
        onnx::Utils::DataTypeUtils::ToType("tensor(" + onnx::Utils::DataTypeUtils::ToDataTypeString(static_cast<int32_t>(dt)) + ")");
    if (!formal.GetTypes().count(mine))
      return fmt::format("operand {} (`{}`) is {}, which {} does not take", i, g.value(d.inputs[i]).name, dtypeName(dt),
                         d.op.str());
    // One type parameter, one type (Add's A and B; a homogeneous variadic's values).
    if (i >= formals.size() && !formal.GetIsHomogeneous()) continue;
    auto [it, fresh] = bound.emplace(formal.GetTypeStr(), std::pair{dt, i});
    if (!fresh && it->second.first != dt)
      return fmt::format("operands {} and {} must have one element type, got {} and {}", it->second.second, i,
                         dtypeName(it->second.first), dtypeName(dt));
  }
  return "";
}

namespace {

/// Einsum's result type from fusec's own reading of the equation (the one
/// the interpreter and the kernels use), where every operand's shape is
/// static: ONNX's inference gives only the rank for some equations
/// (`bhqd,qkd->bhqk`, a relative-position bias). False when it cannot tell.
bool inferEinsum(Graph& g, const NodeData& d) {
  if (d.outputs.size() != 1 || d.outputs[0] == kNoValue || d.inputs.empty()) return false;
  TensorType& have = g.value(d.outputs[0]).type;
  if (have.isStatic()) return false;  // a declared shape is checked where the node runs
  const Attribute* eq = d.attr("equation");
  if (!eq || !std::holds_alternative<std::string>(*eq)) return false;
  std::vector<Shape> shapes;
  DType dtype = DType::Undefined;
  for (ValueId v : d.inputs) {
    if (v == kNoValue || !g.value(v).type.isStatic()) return false;
    shapes.push_back(g.value(v).type.staticShape());
    dtype = g.value(v).type.dtype;
  }
  Expected<EinsumGeometry> geo = einsumGeometry(std::get<std::string>(*eq), shapes);
  if (!geo) return false;
  have = TensorType::of(have.dtype == DType::Undefined ? dtype : have.dtype, geo->outputShape());
  return true;
}

}  // namespace

bool inferNodeTypes(Graph& g, NodeRef n) {
  const NodeData& d = g.node(n);
  bool unknown = false;
  for (ValueId v : d.outputs) unknown |= v != kNoValue && !fullyKnown(g.value(v).type);
  if (!unknown) return false;
  if (d.op == "Einsum" && d.domain.empty() && inferEinsum(g, d)) return true;
  auto opset = g.info.opsetImports.find(d.domain);
  const int version = static_cast<int>(opset == g.info.opsetImports.end() ? g.info.defaultOpset() : opset->second);
  const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(d.op.str(), version, d.domain);
  if (!schema || !schema->has_type_and_shape_inference_function()) return false;
  if (!inferenceSafe(g, d)) return false;

  // A one-node graph: operands as typed inputs, small constants with data.
  onnx::GraphProto graph;
  std::set<ValueId> declared;
  for (ValueId v : d.inputs) {
    if (v == kNoValue || !declared.insert(v).second) continue;
    const Value& val = g.value(v);
    if (val.type.dtype == DType::Undefined) return false;
    if (val.constant && val.constant->byteSize() <= kInferenceDataBytes) {
      onnx::TensorProto* t = graph.add_initializer();
      tensorToProto(*val.constant, *t);
      t->set_name(val.name);
      continue;
    }
    onnx::ValueInfoProto* in = graph.add_input();
    in->set_name(val.name);
    typeToProto(val.type, *in->mutable_type());
  }
  nodeToProto(g, n, *graph.add_node());
  std::unordered_map<std::string, int> opsets;
  for (const auto& [domain, version] : g.info.opsetImports) opsets[domain] = static_cast<int>(version);
  try {
    onnx::ShapeInferenceOptions options(/*check_type=*/false, /*error_mode=*/0, /*data_prop=*/true);
    onnx::shape_inference::InferShapes(&graph, opsets, onnx::OpSchemaRegistry::Instance(), options);
  } catch (const std::exception&) {
    return false;  // the operands contradict the op; run time reports it with the node
  }
  const std::set<std::string> symbols = operandSymbols(g, d);
  bool changed = false;
  for (const auto& info : graph.value_info()) {
    for (ValueId v : g.node(n).outputs) {
      if (v == kNoValue || g.value(v).name != info.name() || !info.type().has_tensor_type()) continue;
      TensorType t = typeFromProto(info.type());
      if (t.dims)
        for (Dim& dim : *t.dims)
          if (!dim.isStatic() && !symbols.count(dim.symbol)) dim = Dim{};
      TensorType& have = g.value(v).type;
      const TensorType before = have;
      if (have.dtype == DType::Undefined) have.dtype = t.dtype;
      if (t.dims && (!have.dims || (t.isStatic() && !have.isStatic()))) have.dims = t.dims;
      changed |= !(have == before);
    }
  }
  return changed;
}

Status inferTypes(Graph& g) {
  Expected<std::vector<NodeRef>> order = g.topologicalOrder();
  if (!order) return order.error();
  for (NodeRef n : order.value()) inferNodeTypes(g, n);
  return Status::success();
}

Status requireStaticShapes(const Graph& g, const std::string& hint) {
  Expected<std::vector<NodeRef>> order = g.topologicalOrder();
  for (NodeRef n : order ? order.value() : g.nodes()) {
    const NodeData& d = g.node(n);
    for (ValueId v : d.outputs) {
      if (v == kNoValue || g.value(v).type.isStatic() || (g.uses(v).empty() && !g.isGraphOutput(v))) continue;
      // The first such value in topological order: its operands are static,
      // or one is a graph input with unbound dims, or run-time data decides.
      std::string cause;
      for (ValueId in : d.inputs) {
        if (in == kNoValue) continue;
        const Value& operand = g.value(in);
        if (!operand.type.isStatic()) {
          cause = fmt::format("`{}` has the shape {}", operand.name, operand.type.str());
          break;
        }
        if (!operand.constant && (operand.type.dtype == DType::Int64 || operand.type.dtype == DType::Int32) && cause.empty())
          cause = fmt::format("it depends on the run-time values of `{}`", operand.name);
      }
      if (cause.empty()) cause = "it depends on the run-time values of its operands";
      return Error{fmt::format("node '{}' ({}): the shape of `{}` does not follow from the inputs' shapes: {} "
                               "(the generated kernels need static shapes; {})",
                               d.name, d.op.str(), g.value(v).name, cause, hint)};
    }
  }
  return Status::success();
}

}  // namespace fusec
