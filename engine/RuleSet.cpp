/// Tables of the compiled rule form.
#include "fusec/engine/RuleSet.h"

namespace fusec {

const std::vector<std::string>& kernelFamilies() {
  static const std::vector<std::string> kFamilies = {
      "pointwise",      // a connected elementwise/broadcast region
      "row_reduce",     // reductions along the innermost axes, with prologue/epilogue
      "column_reduce",  // reductions along outer axes
      "conv_epilogue",  // conv2d with fused bias/BN/activation/residual
      "gemm_epilogue",  // matmul/gemm with fused epilogue
      "gemm_horizontal",// sibling matmuls sharing an input, one launch
      "attention",      // scaled dot-product attention in local memory
      "pool_epilogue",  // pooling with a fused epilogue
      "index_map",      // data movement folded into one index map
  };
  return kFamilies;
}

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
