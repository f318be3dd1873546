/// Graph IR mutation and queries. Every edit keeps three things in step: the
/// node's operand list, the operand value's use list, and the Boost edge from
/// the value's producer.
#include "fusec/engine/Graph.h"

#include <algorithm>
#include <mutex>
#include <queue>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include <boost/graph/depth_first_search.hpp>
#include <boost/property_map/property_map.hpp>

namespace fusec {

// ---- Symbol -----------------------------------------------------------------

const std::string& Symbol::empty() {
  static const std::string kEmpty;
  return kEmpty;
}

Symbol::Symbol(std::string_view s) {
  static std::mutex mutex;
  static std::unordered_set<std::string>* table = new std::unordered_set<std::string>();
  std::lock_guard<std::mutex> lock(mutex);
  str_ = &*table->emplace(s).first;  // node-based set: element addresses are stable
}

// ---- TensorType -------------------------------------------------------------

TensorType TensorType::of(DType dtype, const Shape& shape) {
  TensorType t;
  t.dtype = dtype;
  t.dims.emplace();
  for (int64_t d : shape) t.dims->push_back(Dim::of(d));
  return t;
}

bool TensorType::isStatic() const {
  if (!dims) return false;
  return std::all_of(dims->begin(), dims->end(), [](const Dim& d) { return d.isStatic(); });
}

Shape TensorType::staticShape() const {
  assert(isStatic() && "staticShape() of a type with unknown dims");
  Shape s;
  for (const Dim& d : *dims) s.push_back(d.size);
  return s;
}

std::string TensorType::str() const {
  std::string s(dtypeName(dtype));
  if (!dims) return s;
  s += '[';
  for (size_t i = 0; i < dims->size(); ++i) {
    if (i) s += ',';
    const Dim& d = (*dims)[i];
    s += d.isStatic() ? std::to_string(d.size) : (d.symbol.empty() ? "?" : d.symbol);
  }
  s += ']';
  return s;
}

// ---- values -----------------------------------------------------------------

ValueId Graph::addValue(std::string name, TensorType type) {
  Value v;
  v.name = std::move(name);
  v.type = std::move(type);
  values_.push_back(std::move(v));
  return static_cast<ValueId>(values_.size() - 1);
}

ValueId Graph::addInput(std::string name, TensorType type) {
  ValueId v = addValue(std::move(name), std::move(type));
  values_[v].isGraphInput = true;
  inputs_.push_back(v);
  return v;
}

ValueId Graph::addConstant(std::string name, Tensor data) {
  return addConstant(std::move(name), std::make_shared<const Tensor>(std::move(data)));
}

ValueId Graph::addConstant(std::string name, std::shared_ptr<const Tensor> data) {
  ValueId v = addValue(std::move(name), TensorType::of(data->dtype(), data->shape()));
  values_[v].constant = std::move(data);
  return v;
}

void Graph::addOutput(ValueId v) { outputs_.push_back(v); }

Value& Graph::value(ValueId v) {
  assert(v < values_.size() && "value id out of range");
  return values_[v];
}

const Value& Graph::value(ValueId v) const {
  assert(v < values_.size() && "value id out of range");
  return values_[v];
}

std::optional<ValueId> Graph::findValue(std::string_view name) const {
  for (ValueId v = 0; v < values_.size(); ++v)
    if (values_[v].alive && values_[v].name == name) return v;
  return std::nullopt;
}

std::vector<ValueId> Graph::constants() const {
  std::vector<ValueId> out;
  for (ValueId v = 0; v < values_.size(); ++v)
    if (values_[v].alive && values_[v].constant) out.push_back(v);
  return out;
}

bool Graph::isGraphOutput(ValueId v) const {
  return std::find(outputs_.begin(), outputs_.end(), v) != outputs_.end();
}

// ---- nodes ------------------------------------------------------------------

NodeRef Graph::addNode(std::string_view op, std::vector<ValueId> inputs,
                       std::vector<ValueId> outputs, AttrMap attrs, std::string name,
                       std::string domain) {
  structureChanged();
  NodeRef n = boost::add_vertex(*g_);
  NodeData& d = (*g_)[n];
  d.id = nextNodeId_++;
  d.op = Symbol(op);
  d.domain = std::move(domain);
  d.name = name.empty() ? std::string(op) + "_" + std::to_string(d.id) : std::move(name);
  d.attrs = std::move(attrs);
  d.inputs = std::move(inputs);
  d.outputs = std::move(outputs);
  for (uint32_t i = 0; i < d.outputs.size(); ++i) {
    ValueId out = d.outputs[i];
    if (out == kNoValue) continue;
    Value& v = value(out);
    assert(!v.producer && !v.constant && !v.isGraphInput && "node output is already defined");
    v.producer = n;
    v.producerOutput = i;
    // Uses recorded before the producer existed (nodes added out of order)
    // get their edges now.
    for (const Use& u : v.uses) boost::add_edge(n, u.node, EdgeData{out, u.operand}, *g_);
  }
  for (uint32_t i = 0; i < (*g_)[n].inputs.size(); ++i) {
    ValueId in = (*g_)[n].inputs[i];
    if (in == kNoValue) continue;
    addUse(in, n, i);
    addEdgeFor(n, i, in);
  }
  return n;
}

NodeRef Graph::addNodeWithNewOutputs(std::string_view op, std::vector<ValueId> inputs, size_t numOutputs,
                       AttrMap attrs, std::string name) {
  std::string base = name.empty() ? std::string(op) + "_" + std::to_string(nextNodeId_) : name;
  std::vector<ValueId> outs;
  for (size_t i = 0; i < numOutputs; ++i)
    outs.push_back(addValue(numOutputs == 1 ? base + "_out" : base + "_out" + std::to_string(i)));
  return addNode(op, std::move(inputs), std::move(outs), std::move(attrs), std::move(base));
}

void Graph::removeNode(NodeRef n) {
  NodeData& d = (*g_)[n];
  for (uint32_t i = 0; i < d.inputs.size(); ++i)
    if (d.inputs[i] != kNoValue) dropUse(d.inputs[i], n, i);
  for (ValueId out : d.outputs) {
    if (out == kNoValue) continue;
    Value& v = value(out);
    assert(v.uses.empty() && "removing a node whose result is still used");
    assert(!isGraphOutput(out) && "removing the producer of a graph output");
    v.producer.reset();
    v.alive = false;
  }
  structureChanged();
  boost::clear_vertex(n, *g_);
  boost::remove_vertex(n, *g_);
}

void Graph::setInput(NodeRef n, uint32_t operand, ValueId v) {
  NodeData& d = (*g_)[n];
  if (operand >= d.inputs.size()) d.inputs.resize(operand + 1, kNoValue);
  ValueId old = d.inputs[operand];
  if (old == v) return;
  if (old != kNoValue) {
    dropUse(old, n, operand);
    removeEdgeFor(n, operand, old);
  }
  d.inputs[operand] = v;
  if (v != kNoValue) {
    addUse(v, n, operand);
    addEdgeFor(n, operand, v);
  }
}

void Graph::replaceAllUsesWith(ValueId from, ValueId to) {
  assert(from != to && "replacing a value with itself");
  std::vector<Use> uses = value(from).uses;  // copy: setInput edits the list
  for (const Use& u : uses) setInput(u.node, u.operand, to);
  std::replace(outputs_.begin(), outputs_.end(), from, to);
}

ValueId Graph::replaceKeepingInterface(ValueId from, ValueId to) {
  assert(from != to && "replacing a value with itself");
  if (!isGraphOutput(from) || value(from).isGraphInput) {
    std::vector<Use> uses = value(from).uses;  // copy: setInput edits the list
    for (const Use& u : uses) setInput(u.node, u.operand, to);
    return isGraphOutput(from) ? from : to;
  }
  ValueId standIn = to;
  if (isInterface(to)) {
    standIn = addValue(value(from).name, value(to).type);
    value(from).name += "_replaced";
    addNode("Identity", {to}, {standIn}, {}, value(standIn).name);
  } else {
    std::swap(value(from).name, value(to).name);
    value(from).name += "_replaced";
  }
  replaceAllUsesWith(from, standIn);
  return standIn;
}

std::vector<NodeRef> Graph::nodes() const {
  auto [begin, end] = boost::vertices(*g_);
  return std::vector<NodeRef>(begin, end);
}

namespace {
struct CycleFound {
  NodeRef node;
};
/// Throws CycleFound at the first back edge; its target lies on a cycle.
struct BackEdgeFinder : boost::default_dfs_visitor {
  void back_edge(BoostGraph::edge_descriptor e, const BoostGraph& g) const {
    throw CycleFound{boost::target(e, g)};
  }
};
}  // namespace

Expected<std::vector<NodeRef>> Graph::topologicalOrder() const {
  if (std::shared_ptr<const std::vector<NodeRef>> cached = order_.order.load()) return *cached;
  Expected<std::vector<NodeRef>> order = computeTopologicalOrder();
  if (order) order_.order.store(std::make_shared<const std::vector<NodeRef>>(order.value()));
  return order;
}

Expected<std::vector<NodeRef>> Graph::computeTopologicalOrder() const {
  // Kahn's algorithm, always taking the ready node with the smallest NodeId:
  // an order that is already topological is kept as it is, so printing,
  // export and golden tests are stable. (Boost's DFS-based topological_sort
  // returns a valid order that reshuffles independent nodes.)
  //
  // Pending input counts are kept in a vector indexed by node id while ids
  // are dense (the usual case: rewriting leaves at most a few removed ids per
  // live node); a hash map on pointers costs a cache miss per edge once the
  // graph outgrows the cache, which made this sort the pass whose time per
  // node grew most with graph size.
  const bool denseIds = nextNodeId_ <= 4 * numNodes() + 1024;
  std::vector<uint32_t> pendingById(denseIds ? nextNodeId_ : 0);
  std::unordered_map<NodeRef, uint32_t> pendingByRef;
  if (!denseIds) pendingByRef.reserve(numNodes());
  auto pending = [&](NodeRef n) -> uint32_t& {
    return denseIds ? pendingById[(*g_)[n].id] : pendingByRef[n];
  };
  // A min-heap on node id: the ready node added first goes first.
  using Entry = std::pair<NodeId, NodeRef>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> ready;
  for (auto [v, end] = boost::vertices(*g_); v != end; ++v) {
    const auto deg = static_cast<uint32_t>(boost::in_degree(*v, *g_));
    pending(*v) = deg;
    if (deg == 0) ready.emplace((*g_)[*v].id, *v);
  }
  std::vector<NodeRef> order;
  order.reserve(numNodes());
  while (!ready.empty()) {
    const NodeRef n = ready.top().second;
    ready.pop();
    order.push_back(n);
    for (auto [e, end] = boost::out_edges(n, *g_); e != end; ++e) {
      const NodeRef m = boost::target(*e, *g_);
      if (--pending(m) == 0) ready.emplace((*g_)[m].id, m);
    }
  }
  if (order.size() == numNodes()) return order;

  // A cycle: let Boost's depth-first search find a back edge to name a node on it.
  std::unordered_map<NodeRef, boost::default_color_type> colors;
  try {
    boost::depth_first_search(*g_, boost::visitor(BackEdgeFinder{})
                                       .color_map(boost::make_assoc_property_map(colors)));
  } catch (const CycleFound& c) {
    return Error{"graph has a cycle through node " + describe(c.node)};
  }
  assert(false && "Kahn's algorithm stalled but depth-first search found no back edge");
  return Error{"graph has a cycle"};
}

std::vector<NodeRef> Graph::consumers(NodeRef n) const {
  std::vector<NodeRef> out;
  for (ValueId v : (*g_)[n].outputs) {
    if (v == kNoValue) continue;
    for (const Use& u : value(v).uses)
      if (std::find(out.begin(), out.end(), u.node) == out.end()) out.push_back(u.node);
  }
  return out;
}

std::string Graph::describe(NodeRef n) const {
  const NodeData& d = (*g_)[n];
  return "'" + d.name + "' (" + d.op.str() + ")";
}

GroupBoundary groupBoundary(const Graph& g, const std::vector<NodeRef>& members) {
  std::set<NodeRef> inside(members.begin(), members.end());
  GroupBoundary b;
  for (NodeRef n : members) {
    const NodeData& d = g.node(n);
    for (ValueId v : d.inputs) {
      if (v == kNoValue) continue;
      auto p = g.producer(v);
      if ((!p || !inside.count(*p)) && std::find(b.inputs.begin(), b.inputs.end(), v) == b.inputs.end())
        b.inputs.push_back(v);
    }
    for (ValueId v : d.outputs) {
      if (v == kNoValue) continue;
      bool escapes = g.isGraphOutput(v);
      for (const Use& u : g.uses(v)) escapes |= !inside.count(u.node);
      if (escapes) b.outputs.push_back(v);
    }
  }
  return b;
}

// ---- private helpers --------------------------------------------------------

void Graph::addEdgeFor(NodeRef consumer, uint32_t operand, ValueId v) {
  const Value& val = value(v);
  if (!val.producer) return;
  structureChanged();
  boost::add_edge(*val.producer, consumer, EdgeData{v, operand}, *g_);
}

void Graph::removeEdgeFor(NodeRef consumer, uint32_t operand, ValueId v) {
  const Value& val = value(v);
  if (!val.producer) return;
  structureChanged();
  boost::remove_out_edge_if(
      *val.producer,
      [&](const BoostGraph::edge_descriptor& e) {
        return boost::target(e, *g_) == consumer && (*g_)[e].operand == operand && (*g_)[e].value == v;
      },
      *g_);
}

void Graph::addUse(ValueId v, NodeRef n, uint32_t operand) {
  value(v).uses.push_back(Use{n, operand});
}

void Graph::dropUse(ValueId v, NodeRef n, uint32_t operand) {
  auto& uses = value(v).uses;
  auto it = std::find(uses.begin(), uses.end(), Use{n, operand});
  assert(it != uses.end() && "use list out of step with operands");
  uses.erase(it);
}

// ---- clone ------------------------------------------------------------------

Graph Graph::clone() const {
  Graph copy;
  copy.info = info;
  copy.values_ = values_;
  for (Value& v : copy.values_) {
    v.producer.reset();
    v.uses.clear();
  }
  copy.inputs_ = inputs_;
  copy.outputs_ = outputs_;
  std::vector<std::pair<NodeRef, NodeRef>> made;  // (original, copy)
  for (NodeRef n : nodes()) {
    const NodeData& d = (*g_)[n];
    NodeRef m = copy.addNode(d.op.str(), {}, d.outputs, d.attrs, d.name, d.domain);
    (*copy.g_)[m].id = d.id;
    made.emplace_back(n, m);
  }
  for (auto [n, m] : made) {
    const std::vector<ValueId>& ins = (*g_)[n].inputs;
    (*copy.g_)[m].inputs.assign(ins.size(), kNoValue);
    for (uint32_t i = 0; i < ins.size(); ++i) copy.setInput(m, i, ins[i]);
  }
  copy.nextNodeId_ = nextNodeId_;
  copy.structureChanged();  // the ids were rewritten after the nodes were added
  return copy;
}

}  // namespace fusec
