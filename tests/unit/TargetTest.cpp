/// Target profiles: the shipped ones load; bad ones give located errors.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "TestUtil.h"
#include "fusec/engine/CostModel.h"
#include "fusec/engine/RuleSet.h"
#include "fusec/engine/Target.h"

using namespace fusec;
namespace fs = std::filesystem;

namespace {
std::string writeTemp(const std::string& name, const std::string& text) {
  fs::path p = fs::temp_directory_path() / name;
  std::ofstream(p) << text;
  return p.string();
}
}  // namespace

TEST_CASE("shipped target profiles load, and the measured one is this machine's") {
  int loaded = 0;
  for (const auto& e : fs::recursive_directory_iterator(fs::path(FUSEC_SOURCE_DIR) / "rules")) {
    if (e.path().extension() != ".toml") continue;
    if (e.path().stem().extension() == ".calibration") continue;  // read with its profile
    INFO(e.path().string());
    Expected<Target> t = loadTarget(e.path().string());
    REQUIRE_MESSAGE(t.ok(), test::why(t));
    CHECK(t->peakFlopsFp32 > 0);
    CHECK(t->energyPerByte > 0);
    CHECK_FALSE(t->defaultPacks.empty());
    // Every property a guard may name has a value.
    for (const std::string& p : targetProperties()) CHECK(t->property(p).has_value());
    ++loaded;
  }
  CHECK(loaded >= 3);
  // The shipped CPU profile comes calibrated (`fusec calibrate`, on this machine).
  Expected<Target> calibrated = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  REQUIRE(calibrated.ok());
  CHECK(calibrated->calibrationPath == grammar::defaultRulesDir() + "/targets/pocl-cpu.calibration.toml");
  CHECK(calibrated->roofFraction("conv_epilogue", "compute") < 1);
  CHECK(calibrated->startup("pointwise") > 0);
  // Units as docs/targets.md states them, on numbers chosen so that a
  // wrong scale shows: GB/s -> bytes/s, GFLOP/s -> FLOP/s, us -> s.
  Expected<Target> t = parseTarget("[target]\nname = \"units\"\ncompute_units = 3\npeak_gflops_fp32 = 120\n"
                                   "dram_bandwidth_gbs = 40\nlaunch_overhead_us = 2.5\nlocal_mem_bytes = 65536\n"
                                   "max_work_group_size = 256\npreferred_vector_width = 4\nmem_base_align_bytes = 256\n"
                                   "energy_pj_per_byte = 20\n[target.cache_bandwidth_gbs]\nl2 = 300\n",
                                   "units.toml");
  REQUIRE_MESSAGE(t.ok(), test::why(t));
  CHECK(t->peakFlopsFp32 == 120e9);
  CHECK(t->dramBandwidth == 40e9);
  CHECK(t->launchOverhead == doctest::Approx(2.5e-6).scale(0));
  CHECK(t->ridgePoint() == 3.0);  // 120e9 FLOP/s over 40e9 bytes/s
  CHECK(t->vectorWidth == 4);     // preferred_vector_width, no codegen_vector_width
  CHECK(t->memBaseAlignBytes == 256);
  CHECK(t->energyPerByte == doctest::Approx(20e-12).scale(0));
  CHECK(t->cacheBandwidth.at("l2") == 300e9);
  CHECK(*t->property("local_mem_bytes") == 65536);
  CHECK(*t->property("compute_units") == 3);
  Expected<Target> cpu = loadTarget(std::string(FUSEC_SOURCE_DIR) + "/rules/targets/pocl-cpu.toml");
  REQUIRE(cpu.ok());
  // The shared, measured profile reads as is.
  const fs::path shared = fs::path(FUSEC_SOURCE_DIR) / "../shared/targets/pocl-cpu.toml";
  if (fs::exists(shared)) {
    Expected<Target> raw = loadTarget(shared.string());
    REQUIRE_MESSAGE(raw.ok(), test::why(raw));
    CHECK(raw->peakFlopsFp32 == cpu->peakFlopsFp32);
  }
}

TEST_CASE("bad target profiles are located errors, all of them") {
  std::string path = writeTemp("fusec-bad-target.toml",
                               "[target]\n"
                               "name = \"x\"\n"
                               "compute_units = 0\n"
                               "peak_gflop_fp32 = 3\n"
                               "dram_bandwidth_gbs = \"fast\"\n"
                               "launch_overhead_us = 1\n"
                               "local_mem_bytes = 1024\n"
                               "max_work_group_size = 64\n"
                               "mem_base_align_bytes = 96\n");
  Expected<Target> t = loadTarget(path);
  REQUIRE_FALSE(t.ok());
  const std::string& m = t.error().message;
  CHECK(m.find(path + ":4:19: error: unknown key `peak_gflop_fp32` in [target]") != std::string::npos);
  CHECK(m.find(path + ":3:17: error: `compute_units` must be a positive integer") != std::string::npos);
  CHECK(m.find(path + ": error: [target] needs `peak_gflops_fp32`") != std::string::npos);
  CHECK(m.find(path + ":5:22: error: `dram_bandwidth_gbs` must be a number") != std::string::npos);
  CHECK(m.find(path + ":9:24: error: `mem_base_align_bytes` must be a power of two") != std::string::npos);

  std::string broken = writeTemp("fusec-broken-target.toml", "[target\nname=");
  Expected<Target> b = loadTarget(broken);
  REQUIRE_FALSE(b.ok());
  CHECK(b.error().message.find("not a valid TOML file") != std::string::npos);
  CHECK(b.error().message.find("fusec-broken-target.toml") != std::string::npos);

  Expected<Target> none = loadTarget(writeTemp("fusec-empty-target.toml", "x = 1\n"));
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().message.find("needs a [target] table") != std::string::npos);
}

TEST_CASE("docs/targets.md documents every profile key, and only those") {
  std::ifstream in(fs::path(FUSEC_SOURCE_DIR) / "docs/targets.md");
  std::set<std::string> documented;
  bool inTable = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("<!-- keys", 0) == 0) inTable = true;
    if (line.rfind("<!-- /keys", 0) == 0) inTable = false;
    if (inTable && line.rfind("| `", 0) == 0) documented.insert(line.substr(3, line.find('`', 3) - 3));
  }
  CHECK(documented == targetProfileKeys());
}

TEST_CASE("a calibration beside a profile is read, and the cost model divides each bound by its fraction") {
  const fs::path dir = fs::temp_directory_path() / "fusec-calibration-test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml", dir / "cpu.toml");
  Expected<Target> plain = loadTarget((dir / "cpu.toml").string());
  REQUIRE(plain.ok());
  CHECK(plain->roofFractions.empty());
  CHECK(plain->roofFraction("pointwise", "memory") == 1);
  CHECK(calibrationPathFor((dir / "cpu.toml").string()) == (dir / "cpu.calibration.toml").string());
  std::ofstream(dir / "cpu.calibration.toml") << "[calibration]\n[calibration.roof_fraction]\n"
                                                  "\"pointwise.memory\" = 0.5\n\"pointwise\" = 0.8\n"
                                                  "\"*.compute\" = 0.25\n\"*\" = 0.1\n"
                                                  "[calibration.startup_us]\npointwise = 3\n\"*\" = 5\n";
  Expected<Target> t = loadTarget((dir / "cpu.toml").string());
  REQUIRE(t.ok());
  CHECK(t->calibrationPath == (dir / "cpu.calibration.toml").string());
  // The most specific key that is there: family.class, family, *.class, *.
  CHECK(t->roofFraction("pointwise", "memory") == 0.5);
  CHECK(t->roofFraction("pointwise", "small") == 0.8);
  CHECK(t->roofFraction("conv_epilogue", "compute") == 0.25);
  CHECK(t->roofFraction("conv_epilogue", "memory") == 0.1);
  CHECK(t->roofFraction("", "memory") == 0.1);
  CHECK(t->startup("pointwise") == doctest::Approx(3e-6));
  CHECK(t->startup("reduce") == doctest::Approx(5e-6));
  CHECK(plain->startup("pointwise") == 0);
  // 64 MB moved at 30 GB/s: memory bound, well above `small`.
  const double bytes = 64e6;
  const Estimate before = rooflineEstimate(0, bytes, plain.value(), -1, "pointwise");
  const Estimate after = rooflineEstimate(0, bytes, t.value(), -1, "pointwise");
  CHECK(before.memorySeconds == doctest::Approx(after.memorySeconds));
  CHECK(after.seconds - t->launchOverhead - 3e-6 == doctest::Approx(2 * (before.seconds - plain->launchOverhead)));
  CHECK(shapeClass(1e-3, 1e-4) == "dense");
  CHECK(shapeClass(1e-3, 5e-4) == "compute");
  CHECK(shapeClass(1e-4, 1e-3) == "memory");

  // Bad calibrations are located errors, and so is the profile they sit beside.
  for (const char* bad : {"[calibration]\n[calibration.roof_fraction]\n\"*\" = 0\n",
                          "[calibration]\n[calibration.roof_fraction]\n\"*\" = 9\n",
                          "[calibration]\n[calibration.roof_fraction]\n\"*\" = \"fast\"\n", "[calibration]\n",
                          "[calibration]\n[calibration.roof_fraction]\n[calibration.startup_us]\n\"*\" = -1\n",
                          "x = 1\n", "[calibration\n"}) {
    INFO(bad);
    std::ofstream(dir / "cpu.calibration.toml") << bad;
    Expected<Target> refused = loadTarget((dir / "cpu.toml").string());
    REQUIRE(!refused.ok());
    CHECK(refused.error().message.find("cpu.calibration.toml") != std::string::npos);
  }
  fs::remove_all(dir);
}
