/// `fusec verify PACK...`: every rule of the packs (imports included)
/// proved or checked on generated instances; one line per rule, the
/// counterexamples in full, and a summary. Exit status 1 when a rule has a
/// counterexample or no instance could be generated for it (it is then not
/// shown sound). `fusec check --verify` runs the same after the check.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>

#include "Commands.h"
#include "Progress.h"
#include "Session.h"
#include "fusec/codegen/Families.h"
#include "fusec/driver/Verify.h"
#include "fusec/grammar/PackLoader.h"

namespace fusec::tools {

namespace {

/// A one-line bar on stderr, redrawn in place; only on a terminal.

std::string verdictLine(const driver::RuleVerdict& v) {
  using K = driver::RuleVerdict::Kind;
  const std::string where = v.rule->loc.str();
  std::string what;
  switch (v.kind) {
    case K::Proved:
      what = fmt::format("proved {}; {} instances checked too", v.detail, v.instances);
      break;
    case K::Verified:
      what = fmt::format("verified {} instances", v.instances);
      if (v.refused)
        what += fmt::format(" ({} more refused by the family at planning, most for: {})", v.refused, v.refusal);
      if (!v.detail.empty()) what += " (" + v.detail + ")";
      break;
    case K::Counterexample: what = "counterexample: " + v.counterexample->error; break;
    case K::NoInstance: what = "no instance could be generated: " + v.detail; break;
    case K::NotChecked: what = "not checked: " + v.detail; break;
  }
  return fmt::format("{:<15} {:<36} {}  {}", driver::verdictName(v.kind), v.rule->name, where, what);
}

/// The choices instances covered (`category: value`), a category each:
/// `element types: float, int64; node 0 ops: 14 (Abs, Asin, ...)`.
std::string coverageLine(const std::vector<std::string>& covered) {
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;
  for (const std::string& c : covered) {
    const size_t colon = c.find(": ");
    const std::string category = colon == std::string::npos ? c : c.substr(0, colon);
    const std::string value = colon == std::string::npos ? "" : c.substr(colon + 2);
    if (groups.empty() || groups.back().first != category) groups.push_back({category, {}});
    if (!value.empty()) groups.back().second.push_back(value);
  }
  std::vector<std::string> parts;
  for (const auto& [category, values] : groups) {
    constexpr size_t kShown = 6;
    std::string list = fmt::format("{}", fmt::join(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(std::min(values.size(), kShown)), ", "));
    if (values.size() > kShown) list = fmt::format("{} of them ({}, ...)", values.size(), list);
    parts.push_back(values.empty() ? category : category + ": " + list);
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace

void addVerifyOptions(CLI::App& sub, VerifyFlags& f) {
  sub.add_option("--seed", f.seed, "seed of the instance generator")->capture_default_str();
  sub.add_option("--instances", f.instances, "instances checked per rewrite rule")->capture_default_str()
      ->check(CLI::Range(1, 100000));
  sub.add_option("--fusion-instances", f.fusionInstances, "instances compiled and run on OpenCL per fusion rule")
      ->capture_default_str()->check(CLI::Range(1, 1000));
  sub.add_option("--rule", f.rules, "verify only these rules");
  sub.add_option("--target", f.target, "target profile (.toml) for guards and planning; default: the shipped pocl-cpu");
  sub.add_option("--device", f.device, "the first OpenCL device whose name contains this");
  sub.add_flag("--no-device", f.noDevice, "do not open an OpenCL device: fusion rules are not checked");
  sub.add_flag("--no-prove", f.noProve, "check instances only, without trying a symbolic proof");
  sub.add_option("--save", f.save, "write each counterexample as an onnx-test case folder DIR/<rule>");
  sub.add_option("--atol", f.tolerance.atol, "absolute tolerance (default: 1e-6, fusion rules 1e-5)");
  sub.add_option("--rtol", f.tolerance.rtol,
                 "tolerance relative to the output's largest magnitude (default: 1e-5, fusion rules 1e-4)");
}

bool toleranceGiven(const CLI::App& sub) { return sub.count("--atol") + sub.count("--rtol") > 0; }

int runVerify(const std::vector<std::string>& packs, const std::vector<std::string>& searchPaths, const VerifyFlags& f,
              bool toleranceGiven) {
  grammar::SourceManager sources;
  grammar::DiagnosticEngine diags(sources);
  grammar::ast::AstContext context;
  grammar::PackLoadOptions loadOptions;
  loadOptions.searchPaths = searchPaths;
  loadOptions.families = &codegen::kernelFamilies();
  grammar::PackLoadResult loaded = grammar::loadPacks(packs, sources, context, diags, loadOptions);
  diags.print(std::cerr);
  if (!loaded.rules) return 1;
  for (const std::string& name : f.rules)
    if (!loaded.rules->find(name)) {
      std::cerr << "error: no rule `" << name << "` in the packs\n";
      return 1;
    }
  std::optional<Target> target = loadTargetOrDefault(f.target);
  if (!target) return 1;

  std::unique_ptr<codegen::Device> device;
  std::string deviceName = "none";
  if (!f.noDevice) {
    Expected<std::unique_ptr<codegen::Device>> opened = codegen::Device::open(f.device);
    if (opened) {
      device = std::move(opened.value());
      deviceName = device->info().name;
    } else {
      std::cerr << "warning: no OpenCL device (" << opened.error().message << "): fusion rules are not checked\n";
    }
  }

  driver::VerifyOptions options;
  options.seed = f.seed;
  options.instances = f.instances;
  options.fusionInstances = f.fusionInstances;
  options.target = &*target;
  options.device = device.get();
  options.prove = !f.noProve;
  if (toleranceGiven) options.tolerance = f.tolerance;
  Progress bar;
  options.progress = [&](const Rule& r, int done, int wanted) {
    bar.show(r.name, static_cast<size_t>(std::max(done, 0)), static_cast<size_t>(std::max(wanted, 0)));
  };

  const size_t selected = f.rules.empty() ? loaded.rules->rules.size()
                                           : static_cast<size_t>(std::count_if(loaded.rules->rules.begin(), loaded.rules->rules.end(),
                                                                               [&](const Rule& r) {
                                                                                 return std::find(f.rules.begin(), f.rules.end(), r.name) != f.rules.end();
                                                                               }));
  if (selected > driver::kMaxVerifyRules) {
    std::cerr << "error: " << selected << " rules to verify, more than the " << driver::kMaxVerifyRules
              << " one run checks; choose some with --rule\n";
    return 1;
  }
  fmt::print("verify: {} rules, seed {}, {} instances per rewrite rule, {} per fusion rule on OpenCL ({})\n",
             loaded.rules->rules.size(), f.seed, f.instances, f.fusionInstances, deviceName);
  const auto start = std::chrono::steady_clock::now();
  std::vector<driver::RuleVerdict> verdicts;
  for (const Rule& rule : loaded.rules->rules) {
    if (!f.rules.empty() && std::find(f.rules.begin(), f.rules.end(), rule.name) == f.rules.end()) continue;
    std::vector<driver::RuleVerdict> one = driver::verifyRules(*loaded.rules, options, {rule.name});
    bar.clear();
    for (driver::RuleVerdict& v : one) {
      fmt::print("{}\n", verdictLine(v));
      if (!v.covered.empty() && !v.counterexample) fmt::print("  covered: {}\n", coverageLine(v.covered));
      if (v.counterexample) {
        fmt::print("{}", driver::describeCounterexample(v));
        // Each kind of defect in its own folder: DIR/<rule>, DIR/<rule>-2, ...
        for (size_t k = 0; !f.save.empty() && k <= v.others.size(); ++k) {
          const std::string dir =
              (std::filesystem::path(f.save) / (v.rule->name + (k ? "-" + std::to_string(k + 1) : ""))).string();
          const driver::Counterexample& c = k ? v.others[k - 1] : *v.counterexample;
          if (Status s = driver::saveCounterexample(v, c, dir); !s) std::cerr << "error: " << s.error().message << "\n";
          else fmt::print("  saved as {}: fusec onnx-test {} {} --rules {}\n", dir, dir,
                          v.rule->kind == Rule::Kind::Fusion ? "--opencl --fuse" : "--rewrite", v.rule->loc.file);
        }
      }
      std::fflush(stdout);
      verdicts.push_back(std::move(v));
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  using K = driver::RuleVerdict::Kind;
  std::map<K, int> count;
  int instances = 0;
  for (const auto& v : verdicts) ++count[v.kind], instances += v.instances;
  fmt::print("{} rules: {} proved, {} verified, {} with a counterexample, {} without instances, {} not checked; "
             "{} instances in {:.1f} s ({:.0f} instances/s)\n",
             verdicts.size(), count[K::Proved], count[K::Verified], count[K::Counterexample], count[K::NoInstance],
             count[K::NotChecked], instances, seconds, seconds > 0 ? instances / seconds : 0.0);
  return count[K::Counterexample] || count[K::NoInstance] ? 1 : 0;
}

CommandRunner addVerifyCommand(CLI::App& sub) {
  auto files = std::make_shared<std::vector<std::string>>();
  auto searchPaths = std::make_shared<std::vector<std::string>>();
  auto flags = std::make_shared<VerifyFlags>();
  sub.add_option("packs", *files, ".fuse pack files")->required();
  sub.add_option("-I,--search-path", *searchPaths, "folders searched for imports (after the shipped rules)");
  addVerifyOptions(sub, *flags);
  return [files, searchPaths, flags, &sub] { return runVerify(*files, *searchPaths, *flags, toleranceGiven(sub)); };
}

}  // namespace fusec::tools
