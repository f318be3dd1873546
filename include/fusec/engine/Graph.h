/// The dataflow graph IR.
///
/// Nodes (operations) are the vertices of a Boost.Graph `adjacency_list`
/// (bidirectional, `listS` storage, so a `NodeRef` stays valid across edits of
/// other nodes). Values (tensors) live in a side table indexed by `ValueId`;
/// each value knows its producer and its uses. For every operand whose value
/// has a producer there is one edge producer -> consumer labelled with the
/// value and operand index, so Boost's algorithms (topological sort,
/// reachability) see the data dependencies. All mutation goes through the
/// member functions below, which keep the use lists and the edges in step;
/// `verify()` checks that they are.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <boost/graph/adjacency_list.hpp>

#include "fusec/engine/Error.h"
#include "fusec/engine/Tensor.h"

namespace fusec {

/// An interned string: equal symbols share one pointer, so comparison is a
/// pointer compare. Used for op names.
class Symbol {
 public:
  Symbol() : str_(&empty()) {}
  explicit Symbol(std::string_view s);
  const std::string& str() const { return *str_; }
  bool operator==(const Symbol& o) const { return str_ == o.str_; }
  bool operator!=(const Symbol& o) const { return str_ != o.str_; }
  bool operator==(std::string_view s) const { return *str_ == s; }

 private:
  static const std::string& empty();
  const std::string* str_;
};

/// One dimension: a static size, or a named symbolic size (`N`), or unknown.
struct Dim {
  int64_t size = -1;   ///< >= 0 when static
  std::string symbol;  ///< non-empty when symbolic

  static Dim of(int64_t n) { return Dim{n, {}}; }
  static Dim named(std::string s) { return Dim{-1, std::move(s)}; }
  bool isStatic() const { return size >= 0; }
  bool operator==(const Dim& o) const { return size == o.size && symbol == o.symbol; }
};

/// The type of a value: element type and shape. `dims` is empty-optional when
/// even the rank is unknown.
struct TensorType {
  DType dtype = DType::Undefined;
  std::optional<std::vector<Dim>> dims;

  static TensorType of(DType dtype, const Shape& shape);
  bool hasRank() const { return dims.has_value(); }
  bool isStatic() const;
  /// The static shape; only when isStatic().
  Shape staticShape() const;
  std::string str() const;  ///< `float[N,3,224,224]`
  bool operator==(const TensorType& o) const { return dtype == o.dtype && dims == o.dims; }
};

/// An attribute kind ONNX has but fusec does not interpret (graphs, sparse
/// tensors, type protos): kept as the serialized AttributeProto so that export
/// reproduces it byte for byte.
struct OpaqueAttr {
  std::string serializedProto;
  bool operator==(const OpaqueAttr& o) const { return serializedProto == o.serializedProto; }
};

using Attribute = std::variant<int64_t, float, std::string, Tensor, std::vector<int64_t>,
                               std::vector<float>, std::vector<std::string>, OpaqueAttr>;
/// Attributes by name; ordered so that printing and export are deterministic.
using AttrMap = std::map<std::string, Attribute>;

using ValueId = uint32_t;
inline constexpr ValueId kNoValue = UINT32_MAX;  ///< an omitted optional operand
using NodeId = uint64_t;  ///< stable, never reused: for deterministic order and names

struct NodeData;
struct EdgeData {
  ValueId value = kNoValue;
  uint32_t operand = 0;
};
using BoostGraph = boost::adjacency_list<boost::vecS, boost::listS, boost::bidirectionalS,
                                         NodeData, EdgeData>;
using NodeRef = BoostGraph::vertex_descriptor;

/// The bundled vertex property: one operation.
struct NodeData {
  NodeId id = 0;
  Symbol op;
  std::string domain;  ///< "" is the default ONNX domain
  std::string name;
  std::vector<ValueId> inputs;   ///< kNoValue for omitted optional operands
  std::vector<ValueId> outputs;  ///< kNoValue for omitted optional results
  AttrMap attrs;

  const Attribute* attr(const std::string& key) const {
    auto it = attrs.find(key);
    return it == attrs.end() ? nullptr : &it->second;
  }
  /// An int (float) attribute, or `def` when absent or of another kind.
  int64_t attrInt(const std::string& key, int64_t def) const {
    const Attribute* a = attr(key);
    return a && std::holds_alternative<int64_t>(*a) ? std::get<int64_t>(*a) : def;
  }
  float attrFloat(const std::string& key, float def) const {
    const Attribute* a = attr(key);
    return a && std::holds_alternative<float>(*a) ? std::get<float>(*a) : def;
  }
  std::string attrString(const std::string& key, const std::string& def) const {
    const Attribute* a = attr(key);
    return a && std::holds_alternative<std::string>(*a) ? std::get<std::string>(*a) : def;
  }
};

/// One use of a value: operand `operand` of `node`.
struct Use {
  NodeRef node;
  uint32_t operand;
  bool operator==(const Use& o) const { return node == o.node && operand == o.operand; }
};

/// A tensor in the graph.
struct Value {
  std::string name;
  TensorType type;
  /// Compile-time data: initializers and folded constants. Shared, immutable.
  std::shared_ptr<const Tensor> constant;
  std::optional<NodeRef> producer;  ///< none for graph inputs and constants
  uint32_t producerOutput = 0;
  std::vector<Use> uses;
  bool isGraphInput = false;
  /// For a graph input: the value it was fixed to when the graph was
  /// specialized (codegen::specializeInputs). Its uses read a constant copy
  /// instead; a run must pass this value.
  std::shared_ptr<const Tensor> fixedValue;
  bool alive = true;
};

/// Model-level facts that travel with the graph through import and export.
struct ModelInfo {
  int64_t irVersion = 8;
  std::map<std::string, int64_t> opsetImports{{"", 17}};  ///< domain -> version
  std::string producerName = "fusec";
  std::string producerVersion;
  std::string graphName = "main";
  int64_t defaultOpset() const {
    auto it = opsetImports.find("");
    return it == opsetImports.end() ? 0 : it->second;
  }
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;

  /// A deep copy with the same value ids, node ids and node order.
  Graph clone() const;

  ModelInfo info;

  // ---- values -------------------------------------------------------------
  /// A new value with no producer; it becomes defined by being made a graph
  /// input, a constant, or a node output.
  ValueId addValue(std::string name, TensorType type = {});
  ValueId addInput(std::string name, TensorType type);
  ValueId addConstant(std::string name, Tensor data);
  ValueId addConstant(std::string name, std::shared_ptr<const Tensor> data);
  void addOutput(ValueId v);

  Value& value(ValueId v);
  const Value& value(ValueId v) const;
  size_t valueCapacity() const { return values_.size(); }
  /// Looks a value up by name (linear; for tests and tools).
  std::optional<ValueId> findValue(std::string_view name) const;
  const std::vector<ValueId>& inputs() const { return inputs_; }
  const std::vector<ValueId>& outputs() const { return outputs_; }
  /// Alive values that carry constant data, in id order.
  std::vector<ValueId> constants() const;
  bool isConstant(ValueId v) const { return value(v).constant != nullptr; }
  const std::vector<Use>& uses(ValueId v) const { return value(v).uses; }
  std::optional<NodeRef> producer(ValueId v) const { return value(v).producer; }
  bool isGraphOutput(ValueId v) const;

  // ---- nodes --------------------------------------------------------------
  /// Adds a node reading `inputs` and defining `outputs` (fresh values made
  /// with addValue, not yet defined).
  NodeRef addNode(std::string_view op, std::vector<ValueId> inputs, std::vector<ValueId> outputs,
                  AttrMap attrs = {}, std::string name = {}, std::string domain = {});
  /// Adds a node with `numOutputs` fresh output values named after the node.
  NodeRef addNodeWithNewOutputs(std::string_view op, std::vector<ValueId> inputs, size_t numOutputs,
                  AttrMap attrs = {}, std::string name = {});
  /// Removes a node. Its outputs must have no uses left and not be graph
  /// outputs; they die with it.
  void removeNode(NodeRef n);
  /// Points operand `operand` of `n` at `v` (kNoValue to omit it).
  void setInput(NodeRef n, uint32_t operand, ValueId v);
  /// Redirects every use of `from` (graph outputs included) to `to`.
  void replaceAllUsesWith(ValueId from, ValueId to);
  /// Redirects every use of `from` to `to`, keeping the model's interface:
  /// the names of graph inputs and outputs never change. Where `from` is a
  /// graph output, `to` takes its name, or, where `to` is a graph input or
  /// output whose name must stay, a new `Identity(to)` carries it. A graph
  /// input stays where it is an output too. Returns what now stands in
  /// `from`'s place among the outputs (`to`, the copy, or `from`).
  ValueId replaceKeepingInterface(ValueId from, ValueId to);
  /// Whether a value's name is part of the interface: an input or output.
  bool isInterface(ValueId v) const { return value(v).isGraphInput || isGraphOutput(v); }

  NodeData& node(NodeRef n) { return (*g_)[n]; }
  const NodeData& node(NodeRef n) const { return (*g_)[n]; }
  size_t numNodes() const { return boost::num_vertices(*g_); }
  /// All nodes in insertion order.
  std::vector<NodeRef> nodes() const;
  /// Nodes in a dependency-respecting order, stable (ties go to the node
  /// added first), or an error naming a node on a cycle. The order is kept
  /// until the graph's structure changes (nodes or edges added or removed):
  /// passes that leave a graph as it is do not pay for it again.
  Expected<std::vector<NodeRef>> topologicalOrder() const;
  /// Nodes that read a result of `n`, each once, in use order.
  std::vector<NodeRef> consumers(NodeRef n) const;

  /// Checks the invariants: acyclic, every operand defined, use lists and
  /// edges consistent, constant data matching declared types. Returns one
  /// message per problem, empty when the graph is well formed.
  std::vector<std::string> verify() const;

  /// `'conv1' (Conv)`: how messages name a node.
  std::string describe(NodeRef n) const;

  const BoostGraph& boostGraph() const { return *g_; }

 private:
  void addEdgeFor(NodeRef consumer, uint32_t operand, ValueId v);
  void removeEdgeFor(NodeRef consumer, uint32_t operand, ValueId v);
  void addUse(ValueId v, NodeRef n, uint32_t operand);
  void dropUse(ValueId v, NodeRef n, uint32_t operand);
  Expected<std::vector<NodeRef>> computeTopologicalOrder() const;
  void structureChanged() { order_.clear(); }

  /// The last topological order, dropped on every structural edit. Const
  /// callers may share a graph across threads, so it is an atomic pointer;
  /// moving a graph drops it.
  struct OrderCache {
    std::atomic<std::shared_ptr<const std::vector<NodeRef>>> order;
    OrderCache() = default;
    OrderCache(OrderCache&&) noexcept {}
    OrderCache& operator=(OrderCache&&) noexcept {
      clear();
      return *this;
    }
    void clear() { order.store(nullptr); }
  };

  // Behind a pointer so that moving a Graph keeps vertex descriptors (which
  // point into the vertex list) valid: Boost's adjacency_list copies on move.
  std::unique_ptr<BoostGraph> g_ = std::make_unique<BoostGraph>();
  std::deque<Value> values_;  // deque: references stay valid as values are added
  std::vector<ValueId> inputs_;
  std::vector<ValueId> outputs_;
  NodeId nextNodeId_ = 0;
  mutable OrderCache order_;
};

/// What crosses the boundary of a group of nodes: values its members read
/// from outside (`inputs`, in first-use order, each once) and values they
/// produce that are read outside or are graph outputs (`outputs`, in member
/// order). Fused kernels read and write exactly these.
struct GroupBoundary {
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
};
GroupBoundary groupBoundary(const Graph& g, const std::vector<NodeRef>& members);

}  // namespace fusec
