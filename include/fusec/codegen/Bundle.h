/// A standalone deployment bundle: a schedule written out with a small host
/// program that runs it through the plain OpenCL API, with no fusec
/// dependency. The layout (program.txt, kernels/, constants.bin, inputs/,
/// expected/, host.cpp, CMakeLists.txt, README.md) is described in the
/// README it writes and in host.cpp.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "fusec/codegen/Executor.h"

namespace fusec::codegen {

struct BundleSample {
  std::vector<Tensor> inputs;    ///< one per graph input
  std::vector<Tensor> expected;  ///< the reference outputs for them
};

/// Writes `schedule` (of `g`) into `dir` with `sample` as the inputs the
/// host program runs by default and checks against. `title` heads the
/// README (the model and packs it was compiled with).
Status writeBundle(const std::filesystem::path& dir, const Graph& g, const Schedule& schedule, const BundleSample& sample,
                   const std::string& title);

/// The host program's source, as shipped in every bundle.
const std::string& bundleHostSource();
/// Tolerance.h, which the host program includes to check outputs.
const std::string& bundleToleranceSource();
/// CpuThreads.h, which the host program includes to run PoCL's CPU workers
/// as the runtime does.
const std::string& bundleCpuThreadsSource();

}  // namespace fusec::codegen
