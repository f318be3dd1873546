/// Tables of the compiled rule form.
#include "fusec/engine/RuleSet.h"

namespace fusec {

const std::vector<std::string>& targetProperties() {
  static const std::vector<std::string> kProperties = {
      "local_mem_bytes", "registers",        "max_work_group_size", "vector_width",
      "compute_units",   "peak_flops",       "dram_bandwidth",      "launch_overhead",
  };
  return kProperties;
}

std::string_view exprTypeName(ExprType t) {
  switch (t) {
    case ExprType::Bool: return "bool";
    case ExprType::Int: return "int";
    case ExprType::Float: return "float";
    case ExprType::String: return "string";
    case ExprType::DType: return "element type";
    case ExprType::IntList: return "list";
    case ExprType::Tensor: return "tensor";
    case ExprType::Unknown: return "unknown";
  }
  return "?";
}

int Pattern::findBinding(std::string_view name) const {
  for (size_t i = 0; i < bindings.size(); ++i)
    if (bindings[i].name == name) return static_cast<int>(i);
  return -1;
}

const Rule* RuleSet::find(std::string_view name) const {
  for (const Rule& r : rules)
    if (r.name == name) return &r;
  return nullptr;
}

}  // namespace fusec
