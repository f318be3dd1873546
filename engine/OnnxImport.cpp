/// ONNX import: bytes -> ModelProto (binary or text) -> checker -> shape
/// inference -> Graph.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <onnx/checker.h>
#include <onnx/defs/parser.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include "OnnxProto.h"
#include "fusec/engine/Files.h"
#include "fusec/engine/Isolated.h"
#include "fusec/engine/OnnxIO.h"
#include "fusec/engine/Printable.h"
#include "fusec/engine/TypeInference.h"

namespace fusec {

// ---- proto conversions ------------------------------------------------------

namespace {

/// The bytes of a tensor stored outside the model (how models over 2 GB keep
/// their weights): `location` is a regular file inside `dir`, the model's own
/// folder (a relative path without `..`, and no link leading out), and
/// offset and length lie in it and match the tensor's declared size.
std::string externalData(const onnx::TensorProto& proto, const std::string& label, const std::string& dir,
                         int64_t expectedBytes) {
  namespace fs = std::filesystem;
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : proto.external_data()) {
    auto number = [&]() {
      char* end = nullptr;
      const long long v = std::strtoll(kv.value().c_str(), &end, 10);
      if (kv.value().empty() || *end != '\0' || v < 0)
        throw UserError{label + ": external data `" + kv.key() + "` is not a count: `" + kv.value() + "`"};
      return static_cast<int64_t>(v);
    };
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset") offset = number();
    else if (kv.key() == "length") length = number();
  }
  const fs::path rel(location);
  bool escapes = location.empty() || rel.is_absolute() || rel.has_root_name();
  for (const fs::path& part : rel) escapes |= part == "..";
  if (escapes)
    throw UserError{label + ": external data location `" + location +
                    "` must be a relative path inside the model's folder, without `..`"};
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(dir.empty() ? fs::path(".") : fs::path(dir), ec);
  const fs::path file = fs::weakly_canonical(fs::path(dir) / rel, ec);
  const std::string r = root.string(), f = file.string();
  if (ec || f.compare(0, r.size(), r) != 0 || f.size() <= r.size() || f[r.size()] != '/')
    throw UserError{label + ": external data `" + location + "` leads outside the model's folder"};
  if (length < 0) length = expectedBytes;
  if (length != expectedBytes)
    throw UserError{label + ": external data holds " + std::to_string(length) + " bytes, its shape needs " +
                    std::to_string(expectedBytes)};
  if (length > maxTensorBytes())
    throw UserError{label + ": external data of " + std::to_string(length) + " bytes, above the limit of " +
                    std::to_string(maxTensorBytes()) + " (FUSEC_MAX_TENSOR_BYTES)"};
  // Only the tensor's bytes are read: a few bytes of a large file cost a few bytes.
  Expected<std::string> bytes = readInputFileRange(file.string(), offset, length);
  if (!bytes) throw UserError{label + ": external data: " + bytes.error().message};
  return std::move(bytes.value());
}

}  // namespace

Tensor tensorFromProto(const onnx::TensorProto& proto, const std::string* externalDir) {
  const std::string label = proto.name().empty() ? "tensor" : "tensor `" + proto.name() + "`";
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    if (!externalDir)
      throw UserError{label + " keeps its data in a file beside the model; only a model read from a file can use it"};
    const auto dtype = static_cast<DType>(proto.data_type());
    const std::optional<int64_t> bytes = checkedBytes(Shape(proto.dims().begin(), proto.dims().end()), dtype);
    if (!bytes || dtypeSize(dtype) == 0 || dtype == DType::String)
      throw UserError{label + " has external data of an unsupported type or an impossible shape"};
    onnx::TensorProto inline_ = proto;
    inline_.clear_external_data();
    inline_.set_data_location(onnx::TensorProto::DEFAULT);
    inline_.set_raw_data(externalData(proto, label, *externalDir, *bytes));
    return tensorFromProto(inline_, nullptr);
  }
  auto dtype = static_cast<DType>(proto.data_type());
  if (dtype == DType::String) throw UserError{label + " holds strings, which are not supported", true};
  if (dtypeSize(dtype) == 0 || dtype == DType::Complex64 || dtype == DType::Complex128)
    throw UserError{label + " has unsupported element type " + std::to_string(proto.data_type()), true};
  Shape shape(proto.dims().begin(), proto.dims().end());
  // Count elements with an overflow guard before allocating anything: a
  // corrupt proto can claim absurd dims.
  size_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw UserError{label + " has a negative dimension"};
    if (d != 0 && n > (size_t{1} << 40) / static_cast<size_t>(d))
      throw UserError{label + " has an impossibly large shape " + shapeToString(shape)};
    n *= static_cast<size_t>(d);
  }
  const size_t esize = dtypeSize(dtype);
  auto mismatch = [&](size_t got) {
    return UserError{label + " has " + std::to_string(got) + " values but its shape " +
                     shapeToString(shape) + " needs " + std::to_string(n)};
  };
  auto fieldSize = [&]() -> size_t {
    switch (dtype) {
      case DType::Float32: return static_cast<size_t>(proto.float_data_size());
      case DType::Float64: return static_cast<size_t>(proto.double_data_size());
      case DType::Int64: return static_cast<size_t>(proto.int64_data_size());
      case DType::UInt32: case DType::UInt64: return static_cast<size_t>(proto.uint64_data_size());
      default: return static_cast<size_t>(proto.int32_data_size());
    }
  };
  if (proto.has_raw_data() ? proto.raw_data().size() != n * esize : fieldSize() != n)
    throw mismatch(proto.has_raw_data() ? proto.raw_data().size() / esize : fieldSize());
  Tensor t = Tensor::uninitialized(dtype, shape);  // every element is stored below
  if (proto.has_raw_data()) {
    if (n) std::memcpy(t.raw(), proto.raw_data().data(), proto.raw_data().size());
    // A bool is one byte; any byte but 0 is true, stored as 1 (the kernels
    // and the interpreter would read other bytes differently).
    if (dtype == DType::Bool)
      for (size_t i = 0; i < n; ++i) t.raw()[i] = std::byte{t.raw()[i] != std::byte{0}};
    return t;
  }
  auto fill = [&](const auto& field, auto convert) {
    for (size_t i = 0; i < n; ++i) convert(i, field.Get(static_cast<int>(i)));
  };
  std::byte* out = t.raw();
  auto store = [&](size_t i, auto v) { std::memcpy(out + i * esize, &v, esize); };
  switch (dtype) {
    case DType::Float32: fill(proto.float_data(), [&](size_t i, float v) { store(i, v); }); break;
    case DType::Float64: fill(proto.double_data(), [&](size_t i, double v) { store(i, v); }); break;
    case DType::Int64: fill(proto.int64_data(), [&](size_t i, int64_t v) { store(i, v); }); break;
    case DType::UInt32:
      fill(proto.uint64_data(), [&](size_t i, uint64_t v) { store(i, static_cast<uint32_t>(v)); });
      break;
    case DType::UInt64: fill(proto.uint64_data(), [&](size_t i, uint64_t v) { store(i, v); }); break;
    case DType::Int32: fill(proto.int32_data(), [&](size_t i, int32_t v) { store(i, v); }); break;
    case DType::Int16:
      fill(proto.int32_data(), [&](size_t i, int32_t v) { store(i, static_cast<int16_t>(v)); });
      break;
    case DType::Int8:
      fill(proto.int32_data(), [&](size_t i, int32_t v) { store(i, static_cast<int8_t>(v)); });
      break;
    case DType::UInt8:
      fill(proto.int32_data(), [&](size_t i, int32_t v) { store(i, static_cast<uint8_t>(v)); });
      break;
    case DType::UInt16: case DType::Float16: case DType::BFloat16:
      fill(proto.int32_data(), [&](size_t i, int32_t v) { store(i, static_cast<uint16_t>(v)); });
      break;
    case DType::Bool:
      fill(proto.int32_data(), [&](size_t i, int32_t v) { store(i, static_cast<bool>(v != 0)); });
      break;
    default:
      throw UserError{label + " has an unsupported element type"};
  }
  return t;
}

TensorType typeFromProto(const onnx::TypeProto& proto) {
  TensorType t;
  if (proto.value_case() == onnx::TypeProto::VALUE_NOT_SET) return t;
  if (!proto.has_tensor_type())
    throw UserError{"has a non-tensor type (sequence, optional, map or sparse tensor), which is not supported",
                    true};
  const auto& tt = proto.tensor_type();
  t.dtype = static_cast<DType>(tt.elem_type());
  if (!tt.has_shape()) return t;
  t.dims.emplace();
  for (const auto& d : tt.shape().dim()) {
    if (d.has_dim_value()) t.dims->push_back(Dim::of(d.dim_value()));
    else if (d.has_dim_param()) t.dims->push_back(Dim::named(d.dim_param()));
    else t.dims->push_back(Dim{});
  }
  return t;
}

Attribute attributeFromProto(const onnx::AttributeProto& proto) {
  using A = onnx::AttributeProto;
  switch (proto.type()) {
    case A::INT: return proto.i();
    case A::FLOAT: return proto.f();
    case A::STRING: return proto.s();
    case A::TENSOR: return tensorFromProto(proto.t());
    case A::INTS: return std::vector<int64_t>(proto.ints().begin(), proto.ints().end());
    case A::FLOATS: return std::vector<float>(proto.floats().begin(), proto.floats().end());
    case A::STRINGS: return std::vector<std::string>(proto.strings().begin(), proto.strings().end());
    default: return OpaqueAttr{proto.SerializeAsString()};
  }
}

std::string attributeProblem(std::string_view name, const Attribute& value) {
  const std::string quoted = "attribute `" + std::string(name) + "`";
  if (name == "strides" || name == "dilations" || name == "kernel_shape") {
    if (const auto* ints = std::get_if<std::vector<int64_t>>(&value))
      for (int64_t v : *ints)
        if (v <= 0) return quoted + " must be positive, got " + shapeToString(*ints);
  } else if (name == "axis" || name == "axes" || name == "perm") {
    // ONNX's inference indexes dims with these, some after narrowing to
    // int; no tensor has more than 64 dims.
    constexpr int64_t kMaxRank = 64;
    auto bad = [&](int64_t v) { return v < -kMaxRank || v >= kMaxRank; };
    if (const auto* i = std::get_if<int64_t>(&value); i && bad(*i))
      return quoted + " is " + std::to_string(*i) + ", beyond any tensor's rank";
    if (const auto* ints = std::get_if<std::vector<int64_t>>(&value))
      for (int64_t v : *ints)
        if (bad(v)) return quoted + " holds " + std::to_string(v) + ", beyond any tensor's rank";
  } else if (name == "blocksize") {  // ONNX's inference divides by its square
    if (const auto* i = std::get_if<int64_t>(&value); i && (*i < 1 || *i > (1 << 16)))
      return quoted + " must be from 1 to 65536, got " + std::to_string(*i);
  } else if (name == "group") {
    if (const auto* i = std::get_if<int64_t>(&value); i && *i < 1)
      return quoted + " must be at least 1, got " + std::to_string(*i);
  } else if (name == "scales") {
    if (const auto* floats = std::get_if<std::vector<float>>(&value))
      for (float v : *floats)
        if (!(v > 0) || !std::isfinite(v)) return quoted + " must hold positive finite numbers";
  }
  return {};
}

// ---- model loading ----------------------------------------------------------

namespace {

/// libonnx's messages embed proto dumps over several lines; fold them.
std::string oneLine(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n' || c == '\t') c = ' ';
    if (c == ' ' && (out.empty() || out.back() == ' ')) continue;
    out += c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return printable(out);
}

/// Whether `head`, the first bytes of a model, already decides that it is
/// ONNX text (true) or a binary protobuf (false); nullopt when only the
/// rest can tell.
std::optional<bool> textFromHead(std::string_view head) {
  size_t i = head.find_first_not_of(" \t\r\n");
  if (i == std::string_view::npos) return std::nullopt;
  if (head[i] == '<') return true;
  // Text models are printable; binary protobufs almost never are.
  for (char c : head.substr(0, 256))
    if (static_cast<unsigned char>(c) < 0x09) return false;
  return std::nullopt;
}

bool looksLikeText(std::string_view bytes) {
  return textFromHead(bytes).value_or(bytes.find("=>") != std::string_view::npos);
}

TensorType valueType(const onnx::ValueInfoProto& vi) {
  try {
    return typeFromProto(vi.type());
  } catch (const UserError& e) {
    throw UserError{"value `" + vi.name() + "` " + e.message, e.unsupported};
  }
}

/// Maps a checked ModelProto to the IR. Throws UserError.
Graph buildGraph(const onnx::ModelProto& model, const std::string* externalDir) {
  Graph g;
  g.info.irVersion = model.ir_version();
  g.info.opsetImports.clear();
  for (const auto& op : model.opset_import()) g.info.opsetImports[op.domain()] = op.version();
  if (g.info.opsetImports.empty()) g.info.opsetImports[""] = 1;  // IR < 3 had no opset_import
  g.info.producerName = model.producer_name();
  g.info.producerVersion = model.producer_version();
  const onnx::GraphProto& gp = model.graph();
  g.info.graphName = gp.name();

  std::unordered_map<std::string, ValueId> byName;
  auto define = [&](const std::string& name, ValueId v) {
    if (!byName.emplace(name, v).second)
      throw UserError{"value `" + name + "` is defined more than once"};
  };
  for (const auto& init : gp.initializer()) {
    Tensor t = tensorFromProto(init, externalDir);
    define(init.name(), g.addConstant(init.name(), std::move(t)));
  }
  for (const auto& in : gp.input()) {
    if (byName.count(in.name())) continue;  // an initializer listed as input: a constant
    if (in.type().has_tensor_type())
      for (const auto& d : in.type().tensor_type().shape().dim())
        if (d.has_dim_value() && d.dim_value() < 0)
          throw UserError{"input `" + in.name() + "` declares a dim of " + std::to_string(d.dim_value()) +
                          "; a dim is a size (0 or more) or a name"};
    define(in.name(), g.addInput(in.name(), valueType(in)));
  }
  std::unordered_map<std::string, TensorType> declared;
  for (const auto& vi : gp.value_info()) declared[vi.name()] = valueType(vi);
  for (const auto& vi : gp.output()) declared[vi.name()] = valueType(vi);

  // Define every node result first, so operand lookup does not depend on
  // node order (a cycle is reported by the verifier, not as a missing name).
  std::vector<std::vector<ValueId>> results(static_cast<size_t>(gp.node_size()));
  for (int i = 0; i < gp.node_size(); ++i) {
    for (const std::string& name : gp.node(i).output()) {
      if (name.empty()) {
        results[i].push_back(kNoValue);
        continue;
      }
      auto it = declared.find(name);
      ValueId v = g.addValue(name, it == declared.end() ? TensorType{} : it->second);
      define(name, v);
      results[i].push_back(v);
    }
  }
  for (int i = 0; i < gp.node_size(); ++i) {
    const onnx::NodeProto& np = gp.node(i);
    const std::string label = "node " + (np.name().empty() ? "#" + std::to_string(i) : "'" + np.name() + "'") +
                              " (" + np.op_type() + ")";
    AttrMap attrs;
    try {
      for (const auto& a : np.attribute()) attrs.emplace(a.name(), attributeFromProto(a));
    } catch (const UserError& e) {
      throw UserError{label + ": " + e.message, e.unsupported};
    }
    if (np.op_type() == "Constant" && np.domain().empty() && np.output_size() == 1 &&
        attrs.size() == 1 && !results[i].empty() && results[i][0] != kNoValue) {
      if (auto folded = [&]() -> std::optional<Tensor> {
            const auto& [key, a] = *attrs.begin();
            if (key == "value" && std::holds_alternative<Tensor>(a)) return std::get<Tensor>(a);
            if (key == "value_float") return Tensor::scalar(std::get<float>(a));
            if (key == "value_int") return Tensor::scalar(std::get<int64_t>(a));
            if (key == "value_floats") {
              const auto& v = std::get<std::vector<float>>(a);
              return Tensor::fromVector<float>({static_cast<int64_t>(v.size())}, v);
            }
            if (key == "value_ints") {
              const auto& v = std::get<std::vector<int64_t>>(a);
              return Tensor::fromVector<int64_t>({static_cast<int64_t>(v.size())}, v);
            }
            return std::nullopt;
          }()) {
        Value& out = g.value(results[i][0]);
        out.type = TensorType::of(folded->dtype(), folded->shape());
        out.constant = std::make_shared<const Tensor>(std::move(*folded));
        continue;
      }
    }
    std::vector<ValueId> operands;
    for (const std::string& name : np.input()) {
      if (name.empty()) {
        operands.push_back(kNoValue);
        continue;
      }
      auto it = byName.find(name);
      if (it == byName.end())
        throw UserError{label + ": operand `" + name + "` is not defined by any node, input or initializer"};
      operands.push_back(it->second);
    }
    g.addNode(np.op_type(), std::move(operands), results[i], std::move(attrs), np.name(), np.domain());
  }
  for (const auto& out : gp.output()) {
    auto it = byName.find(out.name());
    if (it == byName.end()) throw UserError{"graph output `" + out.name() + "` is not defined"};
    g.addOutput(it->second);
  }
  std::vector<std::string> problems = g.verify();
  if (!problems.empty()) {
    std::string msg = problems.front();
    for (size_t i = 1; i < problems.size() && i < 5; ++i) msg += "\n  " + problems[i];
    throw UserError{msg};
  }
  return g;
}

}  // namespace

/// The first shape operand whose declared length would ask ONNX's
/// inference for an absurd rank (it builds a result with one dim per
/// element: a 1-D int64[2^62] feeding ConstantOfShape runs it out of memory).
std::string absurdShapeOperand(const onnx::GraphProto& graph) {
  // The operand of each op whose length is the result's rank.
  static const std::map<std::string, int> kShapeOperand = {{"ConstantOfShape", 0}, {"Expand", 1}, {"Reshape", 1}};
  std::map<std::string, int64_t> length;  // declared 1-D values: their length
  for (const auto* infos : {&graph.input(), &graph.value_info()})
    for (const onnx::ValueInfoProto& vi : *infos)
      if (vi.type().has_tensor_type() && vi.type().tensor_type().shape().dim_size() == 1 &&
          vi.type().tensor_type().shape().dim(0).has_dim_value())
        length[vi.name()] = vi.type().tensor_type().shape().dim(0).dim_value();
  for (const onnx::TensorProto& t : graph.initializer())
    if (t.dims_size() == 1) length[t.name()] = t.dims(0);
  constexpr int64_t kMaxRank = 64;
  // An `axis` outside its operand's rank, where the model declares that rank
  // (ONNX's inference of LayerNormalization indexes dims with it unchecked).
  std::map<std::string, int64_t> rank;
  for (const auto* infos : {&graph.input(), &graph.value_info()})
    for (const onnx::ValueInfoProto& vi : *infos)
      if (vi.type().has_tensor_type() && vi.type().tensor_type().has_shape())
        rank[vi.name()] = vi.type().tensor_type().shape().dim_size();
  for (const onnx::TensorProto& t : graph.initializer()) rank[t.name()] = t.dims_size();
  for (const onnx::NodeProto& node : graph.node())
    if (node.op_type() == "Gemm")  // its inference indexes two dims of each operand
      for (int i = 0; i < 2 && i < node.input_size(); ++i)
        if (auto r = rank.find(node.input(i)); r != rank.end() && r->second != 2)
          return "node '" + node.name() + "' (Gemm): operand `" + r->first + "` has rank " +
                 std::to_string(r->second) + "; Gemm takes matrices";
  for (const onnx::NodeProto& node : graph.node())
    for (const onnx::AttributeProto& a : node.attribute()) {
      if (a.name() != "axis" || a.type() != onnx::AttributeProto::INT || node.input_size() == 0) continue;
      auto r = rank.find(node.input(0));
      if (r != rank.end() && (a.i() < -r->second || a.i() > r->second))
        return "node '" + node.name() + "' (" + node.op_type() + "): attribute `axis` is " + std::to_string(a.i()) +
               ", outside the rank " + std::to_string(r->second) + " of `" + r->first + "`";
    }
  for (const onnx::NodeProto& node : graph.node()) {
    auto op = kShapeOperand.find(node.op_type());
    if (op == kShapeOperand.end() || node.input_size() <= op->second) continue;
    auto it = length.find(node.input(op->second));
    if (it != length.end() && (it->second < 0 || it->second > kMaxRank))
      return "node '" + node.name() + "' (" + node.op_type() + "): its shape operand `" + it->first + "` has " +
             std::to_string(it->second) + " elements, a rank beyond any tensor's";
  }
  return {};
}

/// The first node (in `graph` or a subgraph of it) with an attribute that
/// would reach shape inference or a kernel broken (attributeProblem).
std::string firstAttributeProblem(const onnx::GraphProto& graph) {
  for (int i = 0; i < graph.node_size(); ++i) {
    const onnx::NodeProto& node = graph.node(i);
    for (const onnx::AttributeProto& a : node.attribute()) {
      if (a.has_g())
        if (std::string p = firstAttributeProblem(a.g()); !p.empty()) return p;
      for (const onnx::GraphProto& sub : a.graphs())
        if (std::string p = firstAttributeProblem(sub); !p.empty()) return p;
      if (a.type() == onnx::AttributeProto::TENSOR || a.type() == onnx::AttributeProto::GRAPH ||
          a.type() == onnx::AttributeProto::GRAPHS)
        continue;  // large or nested: not what attributeProblem checks
      if (std::string p = attributeProblem(a.name(), attributeFromProto(a)); !p.empty())
        return (node.name().empty() ? "node " + std::to_string(i) : "node '" + node.name() + "'") + " (" +
               node.op_type() + "): " + p;
    }
  }
  return {};
}

namespace {

/// Every name in `graph` (and its subgraphs) made printable (Printable.h),
/// so that no stage, report or binding ever holds a name a terminal obeys
/// or that is not UTF-8. Value names are checked to stay distinct.
Status makeNamesPrintable(onnx::GraphProto& graph) {
  std::map<std::string, std::string> escapedFrom;  // escaped value name -> the original
  Status clash = Status::success();
  auto value = [&](std::string* name) {
    if (isPrintable(*name)) {
      escapedFrom.emplace(*name, *name);
      return;
    }
    std::string escaped = printable(*name);
    auto [it, fresh] = escapedFrom.emplace(escaped, *name);
    if (!fresh && it->second != *name && clash)
      clash = Error{"two value names are both `" + escaped + "` once their control characters are escaped"};
    *name = std::move(escaped);
  };
  auto label = [](std::string* name) {
    if (!isPrintable(*name)) *name = printable(*name);
  };
  label(graph.mutable_name());
  for (auto& vi : *graph.mutable_input()) value(vi.mutable_name());
  for (auto& vi : *graph.mutable_output()) value(vi.mutable_name());
  for (auto& vi : *graph.mutable_value_info()) value(vi.mutable_name());
  for (auto& t : *graph.mutable_initializer()) value(t.mutable_name());
  for (auto& t : *graph.mutable_sparse_initializer()) value(t.mutable_values()->mutable_name());
  for (auto& node : *graph.mutable_node()) {
    label(node.mutable_name());
    label(node.mutable_op_type());
    label(node.mutable_domain());
    for (std::string& in : *node.mutable_input()) value(&in);
    for (std::string& out : *node.mutable_output()) value(&out);
    for (auto& a : *node.mutable_attribute()) {
      label(a.mutable_name());
      if (a.has_g())
        if (Status st = makeNamesPrintable(*a.mutable_g()); !st) return st;
      for (auto& sub : *a.mutable_graphs())
        if (Status st = makeNamesPrintable(sub); !st) return st;
    }
  }
  return clash;
}

/// ONNX's shape inference over the whole model, run in a child process:
/// libonnx's inference functions trust their operands, and a malformed node
/// can crash them (a division by a zero stride, an index past a shape), so
/// a crash there must refuse the model, not end fusec. The child sends back
/// only what inference adds (value types), never the weights.
Status inferShapesIsolated(onnx::ModelProto& model) {
  // Seconds ONNX's inference may take: a second or two for the largest real
  // models; its convolution inference counts to a SAME-padded dim one stride
  // at a time, so a declared dim of 2^62 would take centuries.
  IsolationLimits limits;
  limits.timeoutSeconds = static_cast<int>(std::min<int64_t>(limitFromEnv("FUSEC_INFERENCE_SECONDS", 60), 3600));
  Expected<std::string> inferred = runIsolated("ONNX's shape inference", [&model]() {
    onnx::shape_inference::InferShapes(model);
    onnx::GraphProto types;
    *types.mutable_value_info() = model.graph().value_info();
    *types.mutable_output() = model.graph().output();
    return types.SerializeAsString();
  }, limits);
  if (!inferred) return Error{oneLine(inferred.error().message) + "; the model is malformed"};
  onnx::GraphProto types;
  if (!types.ParseFromString(inferred.value()) || types.output_size() != model.graph().output_size())
    return Error{"ONNX's shape inference answered something unreadable"};
  *model.mutable_graph()->mutable_value_info() = std::move(*types.mutable_value_info());
  *model.mutable_graph()->mutable_output() = std::move(*types.mutable_output());
  return Status::success();
}

/// Import after parsing: names made printable, external data read in, the
/// checker, shape inference, the graph.
Expected<Graph> importParsed(onnx::ModelProto& model, const std::string& where, const ImportOptions& options);

/// A file's bytes for protobuf's parser, read in blocks, never past the
/// size the file had when opened.
class FileBytes : public google::protobuf::io::CopyingInputStream {
 public:
  explicit FileBytes(const InputFile& file) : file_(file) {}
  int Read(void* buffer, int size) override {
    const int64_t n = file_.readSome(buffer, size, offset_);
    if (n > 0) offset_ += n;
    return static_cast<int>(n);
  }

 private:
  const InputFile& file_;
  int64_t offset_ = 0;
};

}  // namespace

Expected<Graph> importOnnxBuffer(std::string_view bytes, std::string_view sourceName,
                                 const ImportOptions& options) {
  const std::string where(sourceName);
  onnx::ModelProto model;
  if (looksLikeText(bytes)) {
    std::string text(bytes);
    onnx::Common::Status st;
    try {
      st = onnx::OnnxParser::Parse(model, text.c_str());
    } catch (const std::exception&) {  // libonnx's number parsing throws on literals out of range
      return Error{where + ": cannot parse ONNX text: a number is out of range"};
    }
    if (!st.IsOK()) return Error{where + ": cannot parse ONNX text: " + oneLine(st.ErrorMessage())};
    // The text syntax has no spelling for rank 0 (`float x` leaves the shape
    // out). Graph inputs and outputs must have a shape, so there it means a scalar.
    auto scalarIfShapeless = [](onnx::ValueInfoProto& vi) {
      auto* type = vi.mutable_type();
      if (type->has_tensor_type() && !type->tensor_type().has_shape())
        type->mutable_tensor_type()->mutable_shape();
    };
    for (auto& vi : *model.mutable_graph()->mutable_input()) scalarIfShapeless(vi);
    for (auto& vi : *model.mutable_graph()->mutable_output()) scalarIfShapeless(vi);
  } else if (bytes.empty()) {
    return Error{where + ": file is empty"};
  } else if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return Error{where + ": not a valid ONNX model (the protobuf is truncated or corrupt)"};
  }
  return importParsed(model, where, options);
}

namespace {

Expected<Graph> importParsed(onnx::ModelProto& model, const std::string& where, const ImportOptions& options) {
  if (!model.has_graph()) return Error{where + ": model has no graph"};
  if (Status st = makeNamesPrintable(*model.mutable_graph()); !st) return Error{where + ": " + st.error().message};
  for (auto& op : *model.mutable_opset_import())
    if (!isPrintable(op.domain())) op.set_domain(printable(op.domain()));
  // Weights kept beside the model are read in first (safely: externalData),
  // so ONNX's checker, which would look for them itself, sees them inline.
  try {
    for (onnx::TensorProto& init : *model.mutable_graph()->mutable_initializer())
      if (init.data_location() == onnx::TensorProto::EXTERNAL) {
        Tensor t = tensorFromProto(init, options.externalDataDir.empty() ? nullptr : &options.externalDataDir);
        const std::string name = init.name();
        init.Clear();
        tensorToProto(t, init);
        init.set_name(name);
      }
  } catch (const UserError& e) {
    return Error{where + ": " + e.message, e.unsupported};
  }
  try {
    if (options.runChecker) onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    return Error{where + ": ONNX checker: " + oneLine(e.what())};
  }
  if (std::string p = firstAttributeProblem(model.graph()); !p.empty()) return Error{where + ": " + p};
  if (std::string p = absurdShapeOperand(model.graph()); !p.empty()) return Error{where + ": " + p};
  if (options.inferShapes)
    if (Status inferred = inferShapesIsolated(model); !inferred) return Error{where + ": " + inferred.error().message};
  try {
    Graph g = buildGraph(model, options.externalDataDir.empty() ? nullptr : &options.externalDataDir);
    // What ONNX inferred for nodes whose operands overflow its arithmetic
    // (a Tile to 2^64 elements wraps to 0) is not kept.
    // Operand types ONNX's schema does not allow (an `Or` of floats): the
    // kernels would be built for types their ops do not have.
    for (NodeRef n : g.nodes())
      if (std::string p = operandTypeProblem(g, g.node(n)); !p.empty())
        return Error{where + ": node " + g.describe(n) + ": " + p};
    for (NodeRef n : g.nodes()) {
      if (inferenceSafe(g, g.node(n))) continue;
      for (ValueId v : g.node(n).outputs)
        if (v != kNoValue) g.value(v).type.dims.reset();
    }
    return g;
  } catch (const UserError& e) {
    return Error{where + ": " + e.message, e.unsupported};
  }
}

}  // namespace

Expected<Graph> importOnnxFile(const std::string& path, const ImportOptions& options) {
  Expected<InputFile> file = InputFile::open(path, kMaxModelFileBytes);
  if (!file) return file.error();
  ImportOptions withDir = options;
  if (withDir.externalDataDir.empty()) {
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    withDir.externalDataDir = parent.empty() ? "." : parent.string();
  }
  // A binary model is parsed as it is read: the weights are copied once,
  // into the protobuf, not first into a buffer the size of the file.
  Expected<std::string> head = file->read(0, std::min<int64_t>(file->size(), 4096));
  if (!head) return head.error();
  if (const std::optional<bool> text = textFromHead(head.value()); !text || *text) {  // text, or undecided
    Expected<std::string> bytes = file->read(0, file->size());
    if (!bytes) return bytes.error();
    return importOnnxBuffer(bytes.value(), path, withDir);
  }
  onnx::ModelProto model;
  FileBytes stream(file.value());
  google::protobuf::io::CopyingInputStreamAdaptor adaptor(&stream, 1 << 20);
  if (!model.ParseFromZeroCopyStream(&adaptor))
    return Error{path + ": not a valid ONNX model (the protobuf is truncated or corrupt)"};
  return importParsed(model, path, withDir);
}

bool isStandardOnnxOp(std::string_view name) {
  const std::string op(name);
  return onnx::OpSchemaRegistry::Schema(op, onnx::ONNX_DOMAIN) || onnx::OpSchemaRegistry::Schema(op, onnx::AI_ONNX_ML_DOMAIN);
}

Expected<Tensor> loadTensorProtoFile(const std::string& path) {
  Expected<std::string> bytes = readInputFile(path, kMaxModelFileBytes);
  if (!bytes) return bytes.error();
  onnx::TensorProto proto;
  if (!proto.ParseFromString(bytes.value()) || proto.data_type() == 0)
    return Error{path + ": not a valid TensorProto"};
  try {
    return tensorFromProto(proto);
  } catch (const UserError& e) {
    return Error{path + ": " + e.message, e.unsupported};
  }
}

}  // namespace fusec
