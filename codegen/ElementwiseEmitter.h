/// The elementwise expression emitter shared by the kernel families: it
/// turns a group of elementwise/broadcast members into OpenCL C statements
/// (loads through broadcasting index maps, each member's scalar semantics).
/// Private to codegen/.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "fusec/codegen/Pointwise.h"

namespace fusec::codegen::detail {


inline std::string floatLiteral(double v) {
  if (std::isnan(v)) return "NAN";
  if (std::isinf(v)) return v > 0 ? "INFINITY" : "(-INFINITY)";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  std::string s(buf);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return "(" + s + "f)";
}

inline std::string cType(DType t) { return t == DType::Bool ? "uchar" : "float"; }


class Emitter {
 public:
  Emitter(const Graph& g, const OpCatalog& catalog) : g_(g), catalog_(catalog) {}

  Expected<KernelSource> emit(const std::vector<NodeRef>& members, const std::string& name, const std::string& comment) {
    KernelSource k;
    k.name = name;
    GroupBoundary b = groupBoundary(g_, members);
    k.inputs = std::move(b.inputs);
    k.outputs = std::move(b.outputs);
    if (k.outputs.empty()) return Error{"group `" + name + "` computes nothing that is used", true};
    Shape space;
    if (Status st = staticShape(k.outputs[0], space); !st) return st.error();
    for (ValueId v : k.outputs) {
      Shape s;
      if (Status st = staticShape(v, s); !st) return st.error();
      if (s != space) return Error{"group `" + name + "` has results of different shapes", true};
    }
    k.globalSize = static_cast<size_t>(shapeNumel(space));
    std::string params, body;
    if (Status st = emitBody(members, k.inputs, space, "i", params, body); !st) return st.error();
    std::ostringstream out;
    for (size_t o = 0; o < k.outputs.size(); ++o) {
      const ValueId v = k.outputs[o];
      params += ",\n    __global " + cType(g_.value(v).type.dtype) + "* restrict out" + std::to_string(o);
      out << "  out" << o << "[i] = " << vars_.at(v) << ";  // " << sanitize(g_.value(v).name) << "\n";
    }
    std::ostringstream src;
    src << "// " << comment << "\n" << prelude();
    src << "__kernel void " << name << "(\n    " << params << ") {\n";
    src << "  const int i = get_global_id(0);\n";
    src << body << out.str() << "}\n";
    k.source = src.str();
    return k;
  }

  static std::string prelude() {
    return "#define FUSEC_MIN(a, b) ((isnan(a) || (a) < (b)) ? (a) : (b))\n"
           "#define FUSEC_MAX(a, b) ((isnan(a) || (a) > (b)) ? (a) : (b))\n"
           // Straight-line erf (Abramowitz & Stegun 7.1.26, |error| < 1.5e-7):
           // PoCL's erf is a library call that stops vectorization across
           // work-items; this one vectorizes (GELU 13x faster on PoCL).
           "inline float fusec_erf(const float x) {\n"
           "  const float a = fabs(x), t = 1.0f / fma(0.3275911f, a, 1.0f);\n"
           "  const float p = t * fma(t, fma(t, fma(t, fma(t, 1.061405429f, -1.453152027f), 1.421413741f), -0.284496736f), 0.254829592f);\n"
           "  return copysign(1.0f - p * exp(-a * a), x);\n"
           "}\n";
  }

  /// The kernel parameters for `inputs` (`in<firstParam>`, ...) and
  /// statements that load them and compute every member's result at linear
  /// index `index` of the iteration space `space`; results are named in
  /// vars(). With `declareCoords` false the caller has already declared the
  /// coordinates c0, c1, ... of `index` in `space`.
  Status emitBody(const std::vector<NodeRef>& members, const std::vector<ValueId>& inputs, const Shape& space,
                  const std::string& index, std::string& params, std::string& bodyText, size_t firstParam = 0,
                  bool declareCoords = true) {
    space_ = space;
    std::ostringstream body;
    bool needCoords = false;
    for (ValueId v : inputs) {
      Shape s;
      if (Status st = staticShape(v, s); !st) return st;
      needCoords |= s != space && shapeNumel(s) != 1;  // scalars read element 0
    }
    if (needCoords && declareCoords) body << coordinates(space, index, "  ");
    std::ostringstream ps;
    for (size_t a = 0; a < inputs.size(); ++a) {
      const ValueId v = inputs[a];
      DType t = g_.value(v).type.dtype;
      if (t != DType::Float32 && t != DType::Bool)
        return Error{"value `" + g_.value(v).name + "` has element type `" + std::string(dtypeName(t)) +
                         "`; the generated kernels take float and bool",
                     true};
      const std::string param = "in" + std::to_string(a + firstParam);
      ps << (a ? ",\n    " : "") << "__global const " << cType(t) << "* restrict " << param;
      Shape s;
      (void)staticShape(v, s);
      const std::string var = "v" + std::to_string(v);
      body << "  const " << cType(t) << " " << var << " = " << param << "[" << offset(s, index) << "];  // "
           << sanitize(g_.value(v).name) << "\n";
      vars_[v] = var;
    }
    for (NodeRef n : members)
      if (Status st = emitNode(n, body); !st) return st;
    params = ps.str();
    bodyText = body.str();
    return Status::success();
  }

  /// Declarations of the coordinates c0, c1, ... of linear index `index` in `space`.
  static std::string coordinates(const Shape& space, const std::string& index, const std::string& indent) {
    const Shape strides = stridesOf(space);
    std::string out;
    for (size_t d = 0; d < space.size(); ++d)
      out += indent + "const int c" + std::to_string(d) + " = (" + index + " / " + std::to_string(strides[d]) + ") % " +
             std::to_string(std::max<int64_t>(space[d], 1)) + ";\n";
    return out;
  }

  /// A kernel whose first member computes `head` and whose other members are
  /// an elementwise epilogue applied to it: the epilogue's inputs from
  /// outside (not `head`), and the values to store (`head` first where the
  /// group's outside reads it). All results must have `head`'s shape.
  struct Epilogue {
    std::vector<NodeRef> members;
    std::vector<ValueId> inputs, outputs;
  };
  Expected<Epilogue> epilogue(const std::vector<NodeRef>& members, ValueId head, const std::string& family) const {
    Epilogue ep;
    ep.members.assign(members.begin() + 1, members.end());
    GroupBoundary boundary = groupBoundary(g_, ep.members);
    ep.inputs = std::move(boundary.inputs);
    std::erase(ep.inputs, head);  // computed by the kernel, not loaded
    bool storeHead = g_.isGraphOutput(head) || ep.members.empty();
    for (const Use& u : g_.uses(head))
      storeHead |= std::find(members.begin(), members.end(), u.node) == members.end();
    if (storeHead) ep.outputs.push_back(head);
    for (ValueId v : boundary.outputs)
      if (v != head) ep.outputs.push_back(v);
    const TensorType& ht = g_.value(head).type;
    for (ValueId v : ep.outputs)
      if (!g_.value(v).type.isStatic() || g_.value(v).type.staticShape() != ht.staticShape())
        return Error{"a " + family + " epilogue result with another shape has no kernel path", true};
    return ep;
  }

  const std::map<ValueId, std::string>& vars() const { return vars_; }
  /// Makes `v` available under `var` (computed by the surrounding kernel).
  void bind(ValueId v, const std::string& var) { vars_[v] = var; }

 public:
  static std::string sanitize(const std::string& s) {
    std::string out;
    for (char c : s) out += (c == '\n' || c == '*' || c == '/') ? '_' : c;
    return out;
  }

  Status staticShape(ValueId v, Shape& out) const {
    const TensorType& t = g_.value(v).type;
    if (!t.isStatic()) return Error{"value `" + g_.value(v).name + "` has no static shape", true};
    out = t.staticShape();
    return Status::success();
  }

  /// The element offset of a value of shape `s` at the current coordinates.
  std::string offset(const Shape& s, const std::string& index) const {
    if (s == space_) return index;
    if (shapeNumel(s) == 1) return "0";
    const size_t off = space_.size() - s.size();
    int64_t stride = 1;
    std::string expr;
    for (size_t d = s.size(); d-- > 0;) {
      if (s[d] != 1) {
        const std::string term = "c" + std::to_string(off + d) + (stride == 1 ? "" : " * " + std::to_string(stride));
        expr = expr.empty() ? term : term + " + " + expr;
      }
      stride *= s[d];
    }
    return expr.empty() ? "0" : expr;
  }

  Status emitNode(NodeRef n, std::ostringstream& body) {
    const NodeData& d = g_.node(n);
    const OpDef* op = d.domain.empty() ? catalog_.find(d.op.str()) : nullptr;
    if (!op || !op->semantics || (op->kind != OpKind::Elementwise && op->kind != OpKind::Broadcast))
      return Error{"op `" + (d.domain.empty() ? "" : d.domain + ".") + d.op.str() + "` has no pointwise kernel path", true};
    if (d.op == "Cast" || d.op == "CastLike") {
      DType to = DType::Undefined;
      if (d.op == "Cast") {
        const Attribute* a = d.attr("to");
        if (a && std::holds_alternative<int64_t>(*a)) to = static_cast<DType>(std::get<int64_t>(*a));
      } else if (d.inputs.size() > 1 && d.inputs[1] != kNoValue) {
        to = g_.value(d.inputs[1]).type.dtype;
      }
      if (to != DType::Float32 && to != DType::Bool)
        return Error{"Cast to `" + std::string(dtypeName(to)) + "` has no pointwise kernel path", true};
    }
    // The catalog states opset-17 semantics. Where older opsets differ,
    // refuse rather than compute something else: Clip's bounds were
    // attributes before 11, PRelu's slope was per channel before 7, and
    // before 7 binary ops broadcast by `broadcast`/`axis` attributes.
    const int64_t opset = g_.info.defaultOpset();
    if ((d.op == "Clip" && opset < 11) || (d.op == "PRelu" && opset < 7) || d.attr("broadcast") || d.attr("axis"))
      return Error{"`" + d.op.str() + "` at opset " + std::to_string(opset) +
                       " has semantics the catalog does not describe; no kernel path",
                   true};
    if (d.op == "Dropout" && d.inputs.size() > 2 && d.inputs[2] != kNoValue) {
      const Value& mode = g_.value(d.inputs[2]);
      if (!mode.constant || mode.constant->dtype() != DType::Bool || mode.constant->data<bool>()[0])
        return Error{"Dropout in training mode has no kernel path", true};
    }
    node_ = &d;
    op_ = op;
    for (size_t r = 0; r < d.outputs.size(); ++r) {
      const ValueId v = d.outputs[r];
      if (v == kNoValue) continue;
      if (r > 0) return Error{"op `" + d.op.str() + "` with a second result has no pointwise kernel path", true};
      DType t = g_.value(v).type.dtype;
      if (t != DType::Float32 && t != DType::Bool)
        return Error{"value `" + g_.value(v).name + "` has element type `" + std::string(dtypeName(t)) +
                         "`; the pointwise kernels take float and bool",
                     true};
      std::string e;
      if (Status st = expr(*op->semantics, e); !st) return st;
      const std::string var = "v" + std::to_string(v);
      if (t == DType::Bool) e = "(uchar)((" + e + ") ? 1 : 0)";
      else e = "(float)(" + e + ")";
      body << "  const " << cType(t) << " " << var << " = " << e << ";  // " << d.op.str() << " " << sanitize(d.name) << "\n";
      vars_[v] = var;
    }
    return Status::success();
  }

  /// Values of operand `index` (all of a variadic operand); empty if absent.
  std::vector<std::string> operand(uint32_t index) const {
    std::vector<std::string> out;
    const OpParam& p = op_->params[index];
    const size_t end = p.variadic ? node_->inputs.size() : std::min<size_t>(index + 1, node_->inputs.size());
    for (size_t i = index; i < end; ++i)
      if (node_->inputs[i] != kNoValue) out.push_back(vars_.at(node_->inputs[i]));
    return out;
  }

  Status expr(const ScalarExpr& e, std::string& out) {
    using K = ScalarExpr::Kind;
    switch (e.kind) {
      case K::Constant: out = floatLiteral(e.value); return Status::success();
      case K::Operand: {
        auto v = operand(e.index);
        if (v.empty()) return Error{"a required operand is absent", true};
        out = v[0];
        return Status::success();
      }
      case K::Attr: {
        const AttrSpec& spec = op_->attrs[e.index];
        const Attribute* a = node_->attr(spec.name);
        std::optional<Attribute> value = a ? std::optional<Attribute>(*a) : spec.defaultValue;
        if (!value) return Error{"attribute `" + spec.name + "` of `" + node_->op.str() + "` is not set", true};
        double x = 0;
        if (auto* i = std::get_if<int64_t>(&*value)) x = static_cast<double>(*i);
        else if (auto* f = std::get_if<float>(&*value)) x = *f;
        out = floatLiteral(x);
        return Status::success();
      }
      case K::Default: {
        const ScalarExpr& first = e.args[0];
        const bool present = first.kind != K::Operand || !operand(first.index).empty();
        return expr(present ? e.args[0] : e.args[1], out);
      }
      case K::Unary: {
        std::string x;
        if (Status st = expr(e.args[0], x); !st) return st;
        out = (e.op == "not" ? "(!" : "(-") + x + ")";
        return Status::success();
      }
      case K::Binary: {
        std::string a, b;
        if (Status st = expr(e.args[0], a); !st) return st;
        if (Status st = expr(e.args[1], b); !st) return st;
        static const std::map<std::string, std::string> kOps = {{"and", "&&"}, {"or", "||"}};
        if (e.op == "%") out = "fmod(" + a + ", " + b + ")";
        else out = "(" + a + " " + (kOps.count(e.op) ? kOps.at(e.op) : e.op) + " " + b + ")";
        return Status::success();
      }
      case K::Call: break;
    }
    // Calls: reductions over a variadic operand or several arguments first.
    std::vector<std::string> args;
    for (const ScalarExpr& a : e.args) {
      if (a.kind == K::Operand && op_->params[a.index].variadic) {
        for (const std::string& v : operand(a.index)) args.push_back(v);
        continue;
      }
      std::string x;
      if (Status st = expr(a, x); !st) return st;
      args.push_back(x);
    }
    if (e.op == "min" || e.op == "max" || e.op == "sum" || e.op == "mean") {
      if (args.empty()) return Error{"`" + e.op + "` of nothing", true};
      std::string acc = args[0];
      for (size_t i = 1; i < args.size(); ++i) {
        if (e.op == "min") acc = "FUSEC_MIN(" + acc + ", " + args[i] + ")";
        else if (e.op == "max") acc = "FUSEC_MAX(" + acc + ", " + args[i] + ")";
        else acc = "(" + acc + " + " + args[i] + ")";
      }
      if (e.op == "mean") acc = "(" + acc + " / " + floatLiteral(static_cast<double>(args.size())) + ")";
      out = acc;
      return Status::success();
    }
    if (e.op == "select") {
      out = "((" + args[0] + ") ? (" + args[1] + ") : (" + args[2] + "))";
      return Status::success();
    }
    static const std::map<std::string, std::string> kFunctions = {
        {"exp", "exp"},     {"log", "log"},     {"sqrt", "sqrt"},   {"rsqrt", "rsqrt"}, {"erf", "fusec_erf"},
        {"tanh", "tanh"},   {"abs", "fabs"},    {"floor", "floor"}, {"ceil", "ceil"},   {"round", "rint"},
        {"trunc", "trunc"}, {"sign", "sign"},   {"sin", "sin"},     {"cos", "cos"},     {"tan", "tan"},
        {"asin", "asin"},   {"acos", "acos"},   {"atan", "atan"},   {"sinh", "sinh"},   {"cosh", "cosh"},
        {"asinh", "asinh"}, {"acosh", "acosh"}, {"atanh", "atanh"}, {"isnan", "isnan"}, {"isinf", "isinf"},
        {"pow", "pow"}};
    auto it = kFunctions.find(e.op);
    if (it == kFunctions.end()) return Error{"function `" + e.op + "` has no OpenCL form", true};
    out = it->second + "(";
    for (size_t i = 0; i < args.size(); ++i) out += (i ? ", " : "") + std::string("(float)(") + args[i] + ")";
    out += ")";
    return Status::success();
  }

  const Graph& g_;
  const OpCatalog& catalog_;
  Shape space_;
  std::map<ValueId, std::string> vars_;
  const NodeData* node_ = nullptr;
  const OpDef* op_ = nullptr;
};

}  // namespace fusec::codegen::detail
