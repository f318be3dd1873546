/// libFuzzer target for the deployment bundle's host program: the input is
/// a program.txt, run against the files of a real bundle (kernels,
/// constants, sample inputs); it either runs and checks, or ends in the
/// host's own error, never a crash, a hang or an out-of-bounds access.
/// Build and run: scripts/fuzz.sh bundle [SECONDS] (it makes the bundle and
/// names it in FUSEC_FUZZ_BUNDLE).
#define FUSEC_BUNDLE_HOST_NO_MAIN
#include "../codegen/bundle/host.cpp"

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

std::string work;  // a copy of the bundle; its program.txt is each input

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  namespace fs = std::filesystem;
  const char* bundle = std::getenv("FUSEC_FUZZ_BUNDLE");
  if (!bundle) {
    std::fprintf(stderr, "set FUSEC_FUZZ_BUNDLE to a bundle folder (fusec compile M -o DIR --emit bundle)\n");
    std::exit(1);
  }
  work = (fs::temp_directory_path() / ("fusec-bundle-fuzz-" + std::to_string(::getpid()))).string();
  fs::remove_all(work);
  fs::copy(bundle, work, fs::copy_options::recursive);
  if (!std::freopen("/dev/null", "w", stdout)) return 0;  // the host's report, not wanted here
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    std::ofstream out(work + "/program.txt", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  std::string dir = work;
  char name[] = "fusec-bundle-run", check[] = "--check";
  char* argv[] = {name, dir.data(), check, nullptr};
  try {
    run(3, argv);
  } catch (const Failure&) {
  }
  return 0;
}
