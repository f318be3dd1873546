/// Target profile loading with toml11. Every key of [target] is known:
/// a misspelled one is an error, not a silently ignored number.
#include "fusec/engine/Target.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <filesystem>
#include <sstream>

#include <toml.hpp>

#include "fusec/engine/Files.h"

namespace fusec {
/// Keys read into Target, and keys of measured profiles kept for people
/// (informational; not used by the cost model yet).
const std::set<std::string>& targetProfileKeys() {
  static const std::set<std::string> k = {
      // used
      "name", "runtime", "device_match", "compute_units", "peak_gflops_fp32", "peak_gflops_fp16",
      "dram_bandwidth_gbs", "launch_overhead_us", "local_mem_bytes", "registers_per_cu",
      "max_work_group_size", "mem_base_align_bytes", "codegen_vector_width", "preferred_vector_width", "features",
      "energy_pj_per_byte", "energy_pj_per_flop", "default_packs", "cache_bandwidth_gbs", "transcendental_flops",
      "groups",
      // informational
      "platform", "device", "ridge_flop_per_byte", "sync_overhead_us", "l1d_bytes", "l2_bytes", "l3_bytes",
      "cacheline_bytes", "default_local_size", "one_cu", "best_case", "codegen", "kernel_cost_us", "jit_ms",
      "sources",
  };
  return k;
}

namespace {

class Reader {
 public:
  Reader(const std::string& path, const toml::value& table) : path_(path), table_(table) {}

  std::string located(const toml::value& v, const std::string& msg) const {
    const toml::source_location loc = v.location();
    return path_ + ":" + std::to_string(loc.line()) + ":" + std::to_string(loc.column()) + ": error: " + msg;
  }

  void error(const toml::value& v, const std::string& msg) { errors_.push_back(located(v, msg)); }
  void missing(const std::string& key) {
    errors_.push_back(path_ + ": error: [target] needs `" + key + "`");
  }

  const toml::value* find(const std::string& key) const {
    if (!table_.contains(key)) return nullptr;
    return &table_.at(key);
  }

  /// A positive (or non-negative) number; ints are accepted for floats.
  std::optional<double> number(const std::string& key, bool required, bool allowZero = false) {
    const toml::value* v = find(key);
    if (!v) {
      if (required) missing(key);
      return std::nullopt;
    }
    double d;
    if (v->is_floating()) d = v->as_floating();
    else if (v->is_integer()) d = static_cast<double>(v->as_integer());
    else {
      error(*v, "`" + key + "` must be a number");
      return std::nullopt;
    }
    if (!std::isfinite(d) || d >= 1e15) {  // units are giga-, micro-: nothing real comes near
      error(*v, "`" + key + "` must be a finite number below 1e15");
      return std::nullopt;
    }
    if (d < 0 || (!allowZero && d == 0)) {
      error(*v, "`" + key + "` must be " + (allowZero ? "zero or more" : "positive"));
      return std::nullopt;
    }
    return d;
  }

  std::optional<int64_t> integer(const std::string& key, bool required) {
    const toml::value* v = find(key);
    if (!v) {
      if (required) missing(key);
      return std::nullopt;
    }
    if (!v->is_integer() || v->as_integer() <= 0) {
      error(*v, "`" + key + "` must be a positive integer");
      return std::nullopt;
    }
    return v->as_integer();
  }

  std::optional<std::string> string(const std::string& key, bool required) {
    const toml::value* v = find(key);
    if (!v) {
      if (required) missing(key);
      return std::nullopt;
    }
    if (!v->is_string()) {
      error(*v, "`" + key + "` must be a string");
      return std::nullopt;
    }
    return v->as_string().str;
  }

  std::vector<std::string> strings(const std::string& key) {
    std::vector<std::string> out;
    const toml::value* v = find(key);
    if (!v) return out;
    if (!v->is_array()) {
      error(*v, "`" + key + "` must be a list of strings");
      return out;
    }
    for (const toml::value& item : v->as_array()) {
      if (!item.is_string()) error(item, "`" + key + "` must be a list of strings");
      else out.push_back(item.as_string().str);
    }
    return out;
  }

  std::vector<std::string>& errors() { return errors_; }
  /// Every error found, one per line; success when none.
  Status status() const {
    if (errors_.empty()) return Status::success();
    std::string msg = errors_.front();
    for (size_t i = 1; i < errors_.size(); ++i) msg += "\n" + errors_[i];
    return Error{msg};
  }

 private:
  std::string path_;
  const toml::value& table_;
  std::vector<std::string> errors_;
};

}  // namespace

bool Target::has(const std::string& feature) const {
  return std::find(features.begin(), features.end(), feature) != features.end();
}

std::optional<double> Target::property(const std::string& n) const {
  if (n == "local_mem_bytes") return static_cast<double>(localMemBytes);
  if (n == "registers") return static_cast<double>(registersPerComputeUnit);
  if (n == "max_work_group_size") return static_cast<double>(maxWorkGroupSize);
  if (n == "vector_width") return static_cast<double>(vectorWidth);
  if (n == "compute_units") return static_cast<double>(computeUnits);
  if (n == "peak_flops") return peakFlopsFp32;
  if (n == "dram_bandwidth") return dramBandwidth;
  if (n == "launch_overhead") return launchOverhead;
  return std::nullopt;
}

namespace {

/// What toml11 must not see: arrays and inline tables nested deeper than
/// `maxDepth` (it parses them by recursion), a string not closed on its
/// line, or a NUL byte (its parser reads past the end of such text). Empty
/// when the text is fit to parse.
std::string lexicalProblem(const std::string& text, int maxDepth) {
  // TOML is UTF-8; toml11 reads past its buffer on other bytes in strings.
  for (size_t i = 0, line = 1; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') ++line;
    if (c < 0x80) continue;
    const size_t extra = (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : 0;
    bool ok = extra > 0 && c >= 0xC2 && c <= 0xF4 && i + extra < text.size();
    for (size_t k = 1; ok && k <= extra; ++k) ok = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    if (!ok) return "line " + std::to_string(line) + ": bytes that are not UTF-8";
    i += extra;
  }
  int depth = 0, line = 1;
  std::string multiline;  // the closing delimiter of a multi-line string we are in
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\0') return "line " + std::to_string(line) + ": a NUL byte";
    if (c == '\n') ++line;
    if (!multiline.empty()) {
      if (multiline == "\"\"\"" && c == '\\') ++i;
      else if (text.compare(i, 3, multiline) == 0) {
        i += 2;
        multiline.clear();
      }
      continue;
    }
    if (c == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
      --i;
    } else if (c == '"' || c == '\'') {
      if (text.compare(i, 3, std::string(3, c)) == 0) {
        multiline = std::string(3, c);
        i += 2;
        continue;
      }
      size_t j = i + 1;
      for (; j < text.size() && text[j] != c && text[j] != '\n'; ++j)
        if (c == '"' && text[j] == '\\') ++j;
      if (j >= text.size() || text[j] != c) return "line " + std::to_string(line) + ": a string is not closed";
      i = j;
    } else if (c == '[' || c == '{') {
      if (++depth > maxDepth) return "arrays or tables nested more than " + std::to_string(maxDepth) + " deep";
    } else if (c == ']' || c == '}') {
      depth = std::max(0, depth - 1);
    }
  }
  if (!multiline.empty()) return "a multi-line string is not closed";
  return {};
}

/// `text` as TOML, or a located error: lexical problems first (what
/// lexicalProblem refuses never reaches toml11), then toml11's, which carry
/// the file, line and a source excerpt.
Expected<toml::value> parseToml(const std::string& text, const std::string& path) {
  if (std::string problem = lexicalProblem(text, 32); !problem.empty())
    return Error{path + ": error: not a valid TOML file: " + problem};
  try {
    std::istringstream in(text);
    return toml::parse(in, path);
  } catch (const std::exception& e) {
    return Error{path + ": error: not a valid TOML file\n" + std::string(e.what())};
  }
}

}  // namespace

Expected<Target> loadTarget(const std::string& path) {
  Expected<std::string> text = readInputFile(path, kMaxProfileFileBytes);
  if (!text) return text.error();
  Expected<Target> t = parseTarget(text.value(), path);
  if (!t) return t;
  const std::string calibration = calibrationPathFor(path);
  std::error_code ec;
  if (!std::filesystem::exists(calibration, ec)) return t;
  Expected<std::string> ctext = readInputFile(calibration, kMaxProfileFileBytes);
  if (!ctext) return ctext.error();
  if (Status st = loadCalibration(t.value(), ctext.value(), calibration); !st) return st.error();
  return t;
}

std::string calibrationPathFor(const std::string& profilePath) {
  std::filesystem::path p(profilePath);
  return (p.parent_path() / (p.stem().string() + ".calibration.toml")).string();
}

Status loadCalibration(Target& target, const std::string& text, const std::string& path) {
  Expected<toml::value> root = parseToml(text, path);
  if (!root) return root.error();
  if (!root->is_table() || !root->contains("calibration") || !root->at("calibration").is_table())
    return Error{path + ": error: a calibration needs a [calibration] table"};
  const toml::value& table = root->at("calibration");
  Reader r(path, table);
  std::map<std::string, double> fractions;
  if (const toml::value* f = r.find("roof_fraction"); !f || !f->is_table()) {
    return Error{path + ": error: [calibration] needs a table `roof_fraction` (family.class = fraction)"};
  } else {
    for (const auto& [key, v] : f->as_table()) {
      if (!v.is_floating() && !v.is_integer()) {
        r.error(v, "roof fraction `" + key + "` must be a number");
        continue;
      }
      const double x = v.is_floating() ? v.as_floating() : static_cast<double>(v.as_integer());
      // Above 1: a kernel beating its roof (the bytes stayed in cache);
      // more than 4 would say the profile's roofs are wrong, not the kernels.
      if (!(x > 0 && x <= 4)) r.error(v, "roof fraction `" + key + "` must be in (0, 4]");
      else fractions[key] = x;
    }
  }
  std::map<std::string, double> startup;
  if (const toml::value* f = r.find("startup_us")) {
    if (!f->is_table()) {
      r.error(*f, "`startup_us` must be a table of family = microseconds");
    } else {
      for (const auto& [key, v] : f->as_table()) {
        const double us = v.is_floating() ? v.as_floating() : v.is_integer() ? static_cast<double>(v.as_integer()) : -1;
        if (!(us >= 0 && us <= 1e5)) r.error(v, "start-up `" + key + "` must be a number of microseconds in [0, 100000]");
        else startup[key] = us * 1e-6;
      }
    }
  }
  if (Status st = r.status(); !st) return st.error();
  target.roofFractions = std::move(fractions);
  target.startupSeconds = std::move(startup);
  target.calibrationPath = path;
  return Status::success();
}

double Target::startup(const std::string& family) const {
  if (auto it = startupSeconds.find(family); it != startupSeconds.end()) return it->second;
  if (auto it = startupSeconds.find("*"); it != startupSeconds.end()) return it->second;
  return 0;
}

double Target::roofFraction(const std::string& family, const std::string& shapeClass) const {
  if (roofFractions.empty()) return 1;
  for (const std::string& key : {family + "." + shapeClass, family, "*." + shapeClass, std::string("*")})
    if (auto it = roofFractions.find(key); it != roofFractions.end()) return it->second;
  return 1;
}

Expected<Target> parseTarget(const std::string& text, const std::string& path) {
  Expected<toml::value> root = parseToml(text, path);
  if (!root) return root.error();
  if (!root->is_table() || !root->contains("target") || !root->at("target").is_table())
    return Error{path + ": error: a target profile needs a [target] table"};
  const toml::value& table = root->at("target");
  Reader r(path, table);
  for (const auto& [key, value] : table.as_table())
    if (!targetProfileKeys().count(key)) r.error(value, "unknown key `" + key + "` in [target]");

  Target t;
  t.path = path;
  t.name = r.string("name", true).value_or("");
  t.runtime = r.string("runtime", false).value_or("opencl");
  t.deviceMatch = r.string("device_match", false).value_or("");
  t.computeUnits = r.integer("compute_units", true).value_or(1);
  t.peakFlopsFp32 = r.number("peak_gflops_fp32", true).value_or(1) * 1e9;
  t.peakFlopsFp16 = r.number("peak_gflops_fp16", false, true).value_or(0) * 1e9;
  t.dramBandwidth = r.number("dram_bandwidth_gbs", true).value_or(1) * 1e9;
  t.launchOverhead = r.number("launch_overhead_us", true, true).value_or(0) * 1e-6;
  t.transcendentalFlops = r.number("transcendental_flops", false).value_or(1);
  t.localMemBytes = r.integer("local_mem_bytes", true).value_or(0);
  t.registersPerComputeUnit = r.integer("registers_per_cu", false).value_or(0);
  t.maxWorkGroupSize = r.integer("max_work_group_size", true).value_or(1);
  t.memBaseAlignBytes = r.integer("mem_base_align_bytes", false).value_or(0);
  if (t.memBaseAlignBytes & (t.memBaseAlignBytes - 1)) {
    r.error(*r.find("mem_base_align_bytes"), "`mem_base_align_bytes` must be a power of two");
    t.memBaseAlignBytes = 0;
  }
  t.vectorWidth = r.integer("codegen_vector_width", false).value_or(r.integer("preferred_vector_width", false).value_or(1));
  t.features = r.strings("features");
  t.energyPerByte = r.number("energy_pj_per_byte", false).value_or(0) * 1e-12;
  t.energyPerFlop = r.number("energy_pj_per_flop", false).value_or(0) * 1e-12;
  t.defaultPacks = r.strings("default_packs");
  if (const toml::value* caches = r.find("cache_bandwidth_gbs")) {
    if (!caches->is_table()) {
      r.error(*caches, "`cache_bandwidth_gbs` must be a table of level = GB/s");
    } else {
      for (const auto& [level, v] : caches->as_table()) {
        if (v.is_floating() || v.is_integer()) {
          double gbs = v.is_floating() ? v.as_floating() : static_cast<double>(v.as_integer());
          if (gbs <= 0) r.error(v, "bandwidth `" + level + "` must be positive");
          else t.cacheBandwidth[level] = gbs * 1e9;
        } else {
          r.error(v, "bandwidth `" + level + "` must be a number (GB/s)");
        }
      }
    }
  }
  if (const toml::value* groups = r.find("groups")) {
    if (!groups->is_table()) {
      r.error(*groups, "`groups` must be a table of limits on fused groups");
    } else {
      Reader gr(path, *groups);
      for (const auto& [key, value] : groups->as_table())
        if (key != "max_ops" && key != "max_local_mem_bytes" && key != "forbid")
          gr.error(value, "unknown key `" + key + "` in [target.groups] (max_ops, max_local_mem_bytes, forbid)");
      t.groups.maxOps = gr.integer("max_ops", false).value_or(0);
      t.groups.maxLocalMemBytes = gr.integer("max_local_mem_bytes", false).value_or(0);
      t.groups.forbid = gr.strings("forbid");
      for (std::string& e : gr.errors()) r.errors().push_back(std::move(e));
    }
  }
  if (Status st = r.status(); !st) return st.error();
  return t;
}

}  // namespace fusec
