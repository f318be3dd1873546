/// exportOnnxText: prints a Graph in ONNX text syntax, as libonnx's
/// OnnxParser reads it. Constants are written as initializers in the input
/// list (`float[2] w = {1, 2}`), which the importer turns back into constants.
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <unordered_map>

#include <onnx/defs/printer.h>

#include "OnnxProto.h"
#include "fusec/engine/OnnxIO.h"

namespace fusec {
namespace {

std::string formatFloat(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  std::string s(buf);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

bool isIdentifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

class TextPrinter {
 public:
  explicit TextPrinter(const Graph& g) : g_(g) {}

  std::string print() {
    std::ostringstream os;
    os << "<ir_version: " << g_.info.irVersion << ", opset_import: [";
    bool first = true;
    for (const auto& [domain, version] : g_.info.opsetImports) {
      os << (first ? "" : ", ") << quote(domain) << " : " << version;
      first = false;
    }
    os << "]";
    if (!g_.info.producerName.empty()) os << ", producer_name: " << quote(g_.info.producerName);
    os << ">\n";
    os << (isIdentifier(g_.info.graphName) ? g_.info.graphName : "main") << " (";
    first = true;
    for (ValueId v : g_.inputs()) {
      os << (first ? "" : ", ") << typeText(g_.value(v).type) << " " << name(v);
      first = false;
    }
    for (ValueId v : g_.constants()) {
      const Tensor& t = *g_.value(v).constant;
      os << (first ? "" : ", ") << typeText(TensorType::of(t.dtype(), t.shape())) << " " << name(v)
         << " = " << tensorValues(t);
      first = false;
    }
    os << ") => (";
    first = true;
    for (ValueId v : g_.outputs()) {
      os << (first ? "" : ", ") << typeText(g_.value(v).type) << " " << name(v);
      first = false;
    }
    os << ") {\n";
    Expected<std::vector<NodeRef>> order = g_.topologicalOrder();
    for (NodeRef n : order ? order.value() : g_.nodes()) os << "  " << nodeText(n) << "\n";
    os << "}\n";
    return os.str();
  }

 private:
  /// The printed name of a value: itself if an identifier, else a sanitized,
  /// unique spelling.
  std::string name(ValueId v) {
    auto it = names_.find(v);
    if (it != names_.end()) return it->second;
    std::string s = g_.value(v).name;
    if (!isIdentifier(s)) {
      for (char& c : s)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) c = '_';
      if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) s = "v_" + s;
    }
    std::string base = s;
    for (int k = 1; used_.count(s); ++k) s = base + "_" + std::to_string(k);
    used_.insert(s);
    return names_[v] = s;
  }

  static std::string typeText(const TensorType& t) {
    std::string s(dtypeName(t.dtype == DType::Undefined ? DType::Float32 : t.dtype));
    if (!t.dims || t.dims->empty()) return s;  // scalars: see the importer
    s += "[";
    for (size_t i = 0; i < t.dims->size(); ++i) {
      const Dim& d = (*t.dims)[i];
      if (i) s += ",";
      s += d.isStatic() ? std::to_string(d.size) : (d.symbol.empty() ? "?" : d.symbol);
    }
    return s + "]";
  }

  static std::string tensorValues(const Tensor& t) {
    std::string s = "{";
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (i) s += ", ";
      double v = t.scalarAt(i);
      s += isFloatingPoint(t.dtype()) ? formatFloat(v) : std::to_string(static_cast<int64_t>(v));
    }
    return s + "}";
  }

  std::string attrText(const std::string& key, const Attribute& a) {
    std::string s = key + " = ";
    if (const auto* i = std::get_if<int64_t>(&a)) return s + std::to_string(*i);
    if (const auto* f = std::get_if<float>(&a)) return s + formatFloat(*f);
    if (const auto* str = std::get_if<std::string>(&a)) return s + quote(*str);
    if (const auto* t = std::get_if<Tensor>(&a))
      return s + typeText(TensorType::of(t->dtype(), t->shape())) + " " + tensorValues(*t);
    auto list = [&](const auto& v, auto fmt) {
      std::string l = "[";
      for (size_t i = 0; i < v.size(); ++i) l += (i ? ", " : "") + fmt(v[i]);
      return s + l + "]";
    };
    if (const auto* v = std::get_if<std::vector<int64_t>>(&a))
      return list(*v, [](int64_t x) { return std::to_string(x); });
    if (const auto* v = std::get_if<std::vector<float>>(&a))
      return list(*v, [](float x) { return formatFloat(x); });
    if (const auto* v = std::get_if<std::vector<std::string>>(&a))
      return list(*v, [](const std::string& x) { return quote(x); });
    // Subgraphs and other kinds: libonnx's printer knows their syntax.
    onnx::AttributeProto proto;
    attributeToProto(key, a, proto);
    std::ostringstream os;
    os << proto;
    return os.str();
  }

  std::string nodeText(NodeRef n) {
    const NodeData& d = g_.node(n);
    std::string s;
    for (size_t i = 0; i < d.outputs.size(); ++i)
      s += (i ? ", " : "") + (d.outputs[i] == kNoValue ? std::string() : name(d.outputs[i]));
    s += " = ";
    if (!d.domain.empty()) s += d.domain + ".";
    s += d.op.str();
    if (!d.attrs.empty()) {
      s += " <";
      bool first = true;
      for (const auto& [key, a] : d.attrs) {
        s += (first ? "" : ", ") + attrText(key, a);
        first = false;
      }
      s += ">";
    }
    s += " (";
    for (size_t i = 0; i < d.inputs.size(); ++i)
      s += (i ? ", " : "") + (d.inputs[i] == kNoValue ? std::string() : name(d.inputs[i]));
    return s + ")";
  }

  const Graph& g_;
  std::unordered_map<ValueId, std::string> names_;
  std::set<std::string> used_;
};

}  // namespace

std::string exportOnnxText(const Graph& graph) { return TextPrinter(graph).print(); }

}  // namespace fusec
