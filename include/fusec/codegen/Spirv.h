/// SPIR-V for generated kernels: OpenCL C -> clang-14 (`-cc1 -triple spir64`)
/// -> LLVM bitcode -> llvm-spirv-14 -> SPIR-V, validated (and optimised) with
/// the SPIRV-Tools C++ API. Bitcode is produced at -O0: clang's -O2 emits
/// `freeze` instructions that llvm-spirv-14 cannot translate; SPIRV-Tools'
/// optimizer does the optimising.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fusec/engine/Error.h"

namespace fusec::codegen {

struct SpirvModule {
  std::vector<uint32_t> words;  ///< validated SPIR-V
  size_t optimizedWords = 0;    ///< size after stripping debug info and compacting ids (validated too)
};

/// Compiles one kernel's OpenCL C source. A compiler or validation failure is
/// an error naming the kernel and quoting the tool's message.
Expected<SpirvModule> compileToSpirv(const std::string& source, const std::string& kernelName);

}  // namespace fusec::codegen
