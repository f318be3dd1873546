/// libFuzzer target for target profiles (TOML): any text either becomes a
/// Target whose numbers are finite and positive where the cost model
/// divides by them, or an error; never a crash, a hang or deep recursion.
/// Build and run: scripts/fuzz.sh target [SECONDS]
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fusec/engine/Target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  fusec::Expected<fusec::Target> t = fusec::parseTarget(text, "fuzz.toml");
  if (!t) return 0;
  const bool usable = std::isfinite(t->peakFlopsFp32) && t->peakFlopsFp32 > 0 && std::isfinite(t->dramBandwidth) &&
                      t->dramBandwidth > 0 && std::isfinite(t->launchOverhead) && t->launchOverhead >= 0;
  if (!usable) {
    std::fprintf(stderr, "accepted a profile the cost model cannot use (peak %g, bandwidth %g, launch %g)\n",
                 t->peakFlopsFp32, t->dramBandwidth, t->launchOverhead);
    std::abort();
  }
  return 0;
}
