/// Graph::verify: structural invariants of the IR, each violation reported as
/// one message naming the node and value involved.
#include <algorithm>
#include <set>

#include "fusec/engine/Graph.h"

namespace fusec {
namespace {

/// Ops whose (listed) operands must share one element type.
const std::set<std::string>& sameTypeOps() {
  static const std::set<std::string> kOps = {"Add", "Sub", "Mul", "Div", "Sum", "Min",
                                             "Max", "Mean", "Equal", "Less", "Greater",
                                             "And", "Or", "MatMul", "Concat"};
  return kOps;
}

}  // namespace

std::vector<std::string> Graph::verify() const {
  std::vector<std::string> problems;
  auto defined = [&](ValueId v) {
    const Value& val = value(v);
    return val.alive && (val.producer || val.constant || val.isGraphInput);
  };
  auto valueName = [&](ValueId v) { return "`" + value(v).name + "`"; };

  Expected<std::vector<NodeRef>> order = topologicalOrder();
  if (!order) problems.push_back(order.error().message);

  for (NodeRef n : nodes()) {
    const NodeData& d = node(n);
    for (uint32_t i = 0; i < d.inputs.size(); ++i) {
      ValueId v = d.inputs[i];
      if (v == kNoValue) continue;
      if (v >= values_.size()) {
        problems.push_back("node " + describe(n) + ": operand " + std::to_string(i) +
                           " refers to a value that does not exist");
        continue;
      }
      if (!defined(v)) {
        problems.push_back("node " + describe(n) + ": operand " + std::to_string(i) + " " +
                           valueName(v) + " is not defined by any node, input or constant");
        continue;
      }
      const auto& uses = value(v).uses;
      if (std::find(uses.begin(), uses.end(), Use{n, i}) == uses.end())
        problems.push_back("node " + describe(n) + ": operand " + std::to_string(i) +
                           " is missing from the use list of " + valueName(v));
      if (const auto& p = value(v).producer) {
        bool hasEdge = false;
        for (auto [e, end] = boost::in_edges(n, *g_); e != end; ++e)
          hasEdge |= boost::source(*e, *g_) == *p && (*g_)[*e].operand == i && (*g_)[*e].value == v;
        if (!hasEdge)
          problems.push_back("node " + describe(n) + ": no dependency edge for operand " +
                             std::to_string(i) + " " + valueName(v));
      }
    }
    for (ValueId out : d.outputs) {
      if (out == kNoValue) continue;
      if (value(out).producer != n)
        problems.push_back("node " + describe(n) + ": result " + valueName(out) +
                           " does not name this node as its producer");
    }
    if (sameTypeOps().count(d.op.str()) && d.domain.empty()) {
      DType first = DType::Undefined;
      for (ValueId v : d.inputs) {
        if (v == kNoValue || v >= values_.size()) continue;
        DType t = value(v).type.dtype;
        if (t == DType::Undefined) continue;
        if (first == DType::Undefined) {
          first = t;
        } else if (t != first) {
          problems.push_back("node " + describe(n) + ": operands have different element types (`" +
                             std::string(dtypeName(first)) + "` and `" +
                             std::string(dtypeName(t)) + "`)");
          break;
        }
      }
    }
  }

  for (ValueId v = 0; v < values_.size(); ++v) {
    const Value& val = value(v);
    if (!val.alive) continue;
    for (const Use& u : val.uses) {
      const NodeData& d = node(u.node);
      if (u.operand >= d.inputs.size() || d.inputs[u.operand] != v)
        problems.push_back("value " + valueName(v) + ": use list names " + describe(u.node) +
                           " operand " + std::to_string(u.operand) + ", which reads another value");
    }
    if (val.constant) {
      const Tensor& t = *val.constant;
      TensorType expect = TensorType::of(t.dtype(), t.shape());
      if (val.type.dtype != t.dtype() || (val.type.isStatic() && val.type != expect))
        problems.push_back("constant " + valueName(v) + " is declared " + val.type.str() +
                           " but holds " + expect.str());
    }
  }
  for (ValueId v : outputs_) {
    if (v >= values_.size() || !defined(v))
      problems.push_back("graph output " + (v < values_.size() ? valueName(v) : std::string("?")) +
                         " is not defined");
  }
  return problems;
}

}  // namespace fusec
