/// `fusec calibrate MODEL...`: measure how close each kernel family comes to
/// the target's roofline on this device, and write the fractions beside the
/// profile, where the cost model reads them (Target::roofFractions).
///
/// Each model is compiled for the target fused and one kernel per op, both
/// programs are run on OpenCL (a warm-up, then `--repeat` runs taking
/// turns), and every kernel's best time is set against its uncalibrated
/// roofline bound. A kernel takes about `start-up + bound / fraction`: the
/// start-up of a family is the median time of its kernels whose bound is
/// under 2 us (all start-up), the fraction the median of `bound / (time -
/// start-up)` over its kernels whose bound is 20 us or more, per family and
/// shape class (CostModel.h: shapeClass), per family, per class and over all
/// kernels; the cost model takes the most specific one present.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <fmt/format.h>
#include <iostream>
#include <map>
#include <random>

#include "Commands.h"
#include "Progress.h"
#include "Random.h"
#include "Session.h"
#include "fusec/codegen/Executor.h"
#include "fusec/driver/Pipeline.h"
#include "fusec/engine/CostModel.h"
#include "fusec/engine/Files.h"
#include "fusec/engine/OnnxIO.h"

namespace fusec::tools {
namespace {

struct CalibrateOptions {
  std::vector<std::string> models;
  std::string target, device, output, samplesFile;
  PackChoice rules;
  int repeat = 3;
  int64_t symbolicDim = 1;
  uint64_t seed = 0;
};

/// A key needs this many kernels behind it to be written: fewer say more
/// about one kernel than about its family.
constexpr size_t kMinKernels = 3;

/// One kernel as measured: its family, shape class, roofline bound and
/// best time.
struct Sample {
  std::string kernel, family, shape;
  double roof = 0, seconds = 0, flops = 0, bytes = 0;
};

/// Bounds under this are all start-up; from `kRoofFrom` on, the roof shows.
constexpr double kStartupBelow = 2e-6, kRoofFrom = 20e-6;

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double at = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(at)), hi = static_cast<size_t>(std::ceil(at));
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

/// Compiles `model` (fused or not), runs it `repeat` times after a warm-up
/// and adds a sample per kernel that launched. False after printing an error.
bool measureModel(const CalibrateOptions& o, codegen::Device& device, size_t index, const RuleSet& rules,
                  const Target& target, std::vector<Sample>& samples, size_t& kernels) {
  const std::string& path = o.models[index];
  Expected<Graph> loaded = importOnnxFile(path);
  if (!loaded) {
    std::cerr << "error: " << loaded.error().message << "\n";
    return false;
  }
  std::vector<Tensor> inputs;
  std::mt19937_64 rng(o.seed);
  for (ValueId v : loaded->inputs()) {
    Expected<Tensor> t = randomInput(loaded.value(), v, rng, o.symbolicDim);
    if (!t) {
      std::cerr << "error: " << path << ": " << t.error().message << "\n";
      return false;
    }
    inputs.push_back(std::move(t.value()));
  }
  for (bool fuse : {true, false}) {
    driver::PipelineOptions options;
    options.inputs = &inputs;
    options.fuse = fuse;
    options.generate = true;
    Expected<std::unique_ptr<driver::Compiled>> c = driver::compile(loaded->clone(), rules, target, options);
    if (!c) {
      std::cerr << "error: " << path << ": " << c.error().message << "\n";
      return false;
    }
    const Graph& g = c.value()->graph;
    const std::vector<codegen::KernelGroup>& groups = c.value()->groups;
    Expected<codegen::DeviceProgram> program = codegen::DeviceProgram::build(
        device, g, groups, rules.catalog, codegen::KernelOptions::forDevice(target, device.info()));
    if (!program) {
      std::cerr << "error: " << path << ": " << program.error().message << "\n";
      return false;
    }
    std::map<std::string, double> best;
    for (int r = 0; r <= o.repeat; ++r) {
      Expected<codegen::DeviceRun> run = program->run(inputs);
      if (!run) {
        std::cerr << "error: " << path << ": " << run.error().message << "\n";
        return false;
      }
      if (r == 0) continue;  // the warm-up
      for (const auto& [name, sec] : run->kernelTimes) {
        auto [it, fresh] = best.emplace(name, sec);
        if (!fresh) it->second = std::min(it->second, sec);
      }
    }
    for (const codegen::KernelGroup& grp : groups) {
      auto measured = best.find(grp.name);
      if (measured == best.end() || measured->second <= 0) continue;  // a view or an in-place concat
      const std::string family =
          grp.family.empty() ? codegen::kernelFamilies().selectName(g, grp.nodes, rules.catalog, target) : grp.family;
      const Estimate e = groupEstimate(g, grp.nodes, rules.catalog, target, family);
      const double roof = std::max(e.computeSeconds, e.memorySeconds);
      if (family.empty() || roof <= 0) continue;
      samples.push_back({std::to_string(index) + ":" + grp.name, family, shapeClass(e.computeSeconds, e.memorySeconds),
                         roof, measured->second, e.flops, e.bytes});
      ++kernels;
    }
  }
  return true;
}

/// Adds `x` under each key.
void addUnder(std::map<std::string, std::vector<double>>& to, std::initializer_list<std::string> keys, double x) {
  for (const std::string& k : keys) to[k].push_back(x);
}

/// One `key = median  # kernels, spread` line per key with enough kernels.
std::string medianTable(const std::map<std::string, std::vector<double>>& byKey, double scale) {
  std::string out;
  for (const auto& [key, v] : byKey) {
    if (v.size() < kMinKernels) continue;
    out += fmt::format("{:<34} = {:<8.4g} # {} kernels, 10-90 %: {:.3g}-{:.3g}\n", "\"" + key + "\"",
                       scale * quantile(v, 0.5), v.size(), scale * quantile(v, 0.1), scale * quantile(v, 0.9));
  }
  return out;
}

/// The calibration file: per key the median start-up and fraction, with
/// how many kernels and their spread in comments.
std::string calibrationText(const std::vector<Sample>& samples, const Target& target, const std::string& device,
                            const std::vector<std::string>& models) {
  std::map<std::string, std::vector<double>> startups, fractions;
  for (const Sample& s : samples)
    if (s.roof < kStartupBelow) addUnder(startups, {s.family, "*"}, s.seconds);
  auto startup = [&](const std::string& family) {
    for (const std::string& key : {family, std::string("*")})
      if (auto it = startups.find(key); it != startups.end() && it->second.size() >= kMinKernels)
        return quantile(it->second, 0.5);
    return 0.0;
  };
  for (const Sample& s : samples) {
    if (s.roof < kRoofFrom) continue;
    // A kernel faster than 4x its roof had its bytes in cache: capped, as the loader does.
    const double fraction = std::min(4.0, s.roof / std::max(s.seconds - startup(s.family), 1e-12));
    addUnder(fractions, {s.family + "." + s.shape, s.family, "*." + s.shape, "*"}, fraction);
  }
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  std::string out = fmt::format(
      "# Calibration of the target profile `{}` on {}, written by `fusec calibrate` ({}).\n"
      "# A kernel takes about startup + bound / fraction (+ the launch overhead), where bound is its\n"
      "# roofline time, the larger of its compute and DRAM times (its class: `memory`, `compute`, or\n"
      "# `dense` where the compute time is 8x the DRAM time or more).\n"
      "# startup_us: the median time of a family's kernels whose bound is under 2 us.\n"
      "# roof_fraction: the median of bound / (time - startup) over kernels whose bound is 20 us or more.\n"
      "# The cost model takes the most specific key of `family.class`, `family`, `*.class`, `*`.\n"
      "# Keys with fewer than {} kernels are left out. Models measured ({}), fused and unfused:\n",
      target.name, device, date, kMinKernels, models.size());
  for (const std::string& m : models) out += "#   " + m + "\n";
  out += "\n[calibration]\ndevice = \"" + device + "\"\n\n[calibration.startup_us]\n" + medianTable(startups, 1e6) +
         "\n[calibration.roof_fraction]\n" + medianTable(fractions, 1);
  return out;
}

int runCalibrate(const CalibrateOptions& o) {
  std::optional<Target> target = loadTargetOrDefault(o.target);
  if (!target) return 1;
  // The roofs themselves, not a calibration of them, are what is measured against.
  target->roofFractions.clear();
  target->startupSeconds.clear();
  std::unique_ptr<RuleSet> rules = loadRules(o.rules, *target);
  if (!rules) return 1;
  Expected<std::unique_ptr<codegen::Device>> device = codegen::Device::open(o.device);
  if (!device) {
    std::cerr << "error: " << device.error().message << "\n";
    return 1;
  }
  std::vector<Sample> samples;
  Progress progress;
  for (size_t i = 0; i < o.models.size(); ++i) {
    progress.show("calibrate: " + o.models[i], i, o.models.size());
    size_t kernels = 0;
    const bool ok = measureModel(o, **device, i, *rules, *target, samples, kernels);
    progress.clear();
    if (!ok) return 1;
    fmt::print("{}: {} kernels measured\n", o.models[i], kernels);
  }
  if (samples.empty()) {
    std::cerr << "error: no kernel was measured\n";
    return 1;
  }
  const std::string path = o.output.empty() ? calibrationPathFor(target->path) : o.output;
  const std::string text = calibrationText(samples, *target, (*device)->info().name, o.models);
  if (Status st = writeOutputFile(path, text); !st) {
    std::cerr << "error: " << st.error().message << "\n";
    return 1;
  }
  if (!o.samplesFile.empty()) {
    std::string csv = "model_kernel,family,class,roof_seconds,seconds,flops,bytes\n";
    for (const Sample& s : samples)
      csv += fmt::format("{},{},{},{:.6g},{:.6g},{:.6g},{:.6g}\n", s.kernel, s.family, s.shape, s.roof, s.seconds,
                         s.flops, s.bytes);
    if (Status st = writeOutputFile(o.samplesFile, csv); !st) {
      std::cerr << "error: " << st.error().message << "\n";
      return 1;
    }
  }
  fmt::print("{}", text.substr(text.find("[calibration.startup_us]")));
  fmt::print("wrote {} ({} kernels)\n", path, samples.size());
  return 0;
}

}  // namespace

CommandRunner addCalibrateCommand(CLI::App& sub) {
  auto o = std::make_shared<CalibrateOptions>();
  sub.add_option("models", o->models, "models to measure (.onnx or ONNX text)")->required();
  sub.add_option("--target", o->target, "target profile (.toml); default: the shipped pocl-cpu profile");
  sub.add_option("-o,--output", o->output,
                 "where to write the calibration (default: <profile stem>.calibration.toml beside the profile, "
                 "where it is read)");
  addPackOptions(sub, o->rules);
  sub.add_option("--device", o->device, "the first OpenCL device whose name contains this");
  sub.add_option("--repeat", o->repeat, "timed runs of each program, after a warm-up; the best counts")
      ->check(CLI::Range(1, 100));
  sub.add_option("--dim", o->symbolicDim, "size used for symbolic dims of random inputs")->check(CLI::Range(1, 1 << 20));
  sub.add_option("--seed", o->seed, "seed for random inputs");
  sub.add_option("--samples", o->samplesFile, "also write every kernel measured as CSV (model index:kernel, family, "
                                              "class, roof seconds, seconds, FLOPs, DRAM bytes)");
  return [o] { return runCalibrate(*o); };
}

}  // namespace fusec::tools
