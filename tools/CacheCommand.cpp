/// `fusec cache info|clear`: where this user's kernel cache is, how large,
/// its cap; or empty it (the key stays). See codegen/DiskCache.h. And the
/// hidden `fusec build-kernels --device NAME FILE...`, the build helper
/// Device::prepare starts to compile programs into the cache in parallel.
#include <fmt/format.h>
#include <iostream>

#include "Commands.h"
#include "fusec/codegen/DiskCache.h"
#include "fusec/codegen/OpenCL.h"
#include "fusec/engine/Files.h"

namespace fusec::tools {
namespace {

std::string mib(uint64_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20)); }

}  // namespace

CommandRunner addCacheCommand(CLI::App& sub) {
  auto action = std::make_shared<std::string>();
  sub.add_option("action", *action, "info: where the cache is and how large; clear: remove every entry")
      ->required()
      ->check(CLI::IsMember({"info", "clear"}));
  return [action] {
    const codegen::DiskCache& cache = codegen::DiskCache::user();
    if (*action == "clear") {
      Expected<uint64_t> freed = cache.clear();
      if (!freed) {
        std::cerr << "error: " << freed.error().message << "\n";
        return 1;
      }
      fmt::print("cleared {}: {} freed\n", cache.folder(), mib(freed.value()));
      return 0;
    }
    fmt::print("folder:  {}\n", cache.folder().empty() ? "(none)" : cache.folder());
    if (!cache.enabled()) {
      fmt::print("state:   off ({})\n", cache.disabledBecause());
      return 0;
    }
    const codegen::DiskCache::Usage u = cache.usage();
    fmt::print("state:   on (entries signed with this user's key)\n");
    fmt::print("entries: {} ({}; kernel binaries, tuning results, fusion timings)\n", u.entries, mib(u.bytes));
    fmt::print("runtime: {} (the OpenCL runtime's own cache, in {}/pocl)\n", mib(u.runtimeBytes), cache.folder());
    fmt::print("cap:     {} of entries (FUSEC_CACHE_MAX_BYTES); the least recently used go first\n",
               mib(codegen::DiskCache::capBytes()));
    return 0;
  };
}

CommandRunner addBuildKernelsCommand(CLI::App& sub) {
  auto device = std::make_shared<std::string>();
  auto files = std::make_shared<std::vector<std::string>>();
  sub.add_option("--device", *device, "the OpenCL device, by name")->required();
  sub.add_option("files", *files, "canonical kernel programs")->required();
  return [device, files] {
    if (Status st = codegen::Device::buildProgramFiles(*device, *files); !st) {
      std::cerr << "error: " << st.error().message << "\n";
      return 1;
    }
    return 0;
  };
}

}  // namespace fusec::tools
