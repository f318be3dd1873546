/// Auto-tuning of gemm_epilogue tilings; see Tuner.h.
#include "fusec/codegen/Tuner.h"

#include <optional>
#include <random>
#include <sstream>

#include "fusec/codegen/Canonical.h"
#include "fusec/codegen/DiskCache.h"
#include "fusec/codegen/Gemm.h"
#include "fusec/codegen/SplitBack.h"

namespace fusec::codegen {
namespace {

std::string describe(const GemmTiling& t) {
  return std::to_string(t.rows) + " " + std::to_string(t.width) + " " + std::to_string(t.localRows) + " " +
         std::to_string(t.depth) + " " + std::to_string(t.shallowDepth) + " " + std::to_string(t.shallowLocalRows);
}

}  // namespace

const std::vector<GemmTiling>& gemmCandidates() {
  // Tile rows x vector width / work-items sharing a staged B panel (0: no
  // panel) / panel depth. On PoCL (AVX-512) 8 rows often beat 12 for convs,
  // shallow panels help the 7x7 stem, and short products (1x1 convs) want
  // pairs of work-items or none; the default comes first.
  static const std::vector<GemmTiling> kCandidates = {
      GemmTiling{},           GemmTiling{8, 16, 16, 256}, GemmTiling{8, 16, 8, 128},  GemmTiling{12, 16, 8, 128},
      GemmTiling{6, 16, 16, 256}, GemmTiling{4, 16, 16, 256}, GemmTiling{12, 16, 2, 256}, GemmTiling{8, 16, 2, 256},
      GemmTiling{12, 16, 0, 256}};
  return kCandidates;
}

/// `shape`'s tile (rows, width, work-items per panel, panel depth) with
/// `base`'s other choices, which come from the target (panels owned by one
/// work-item, the GEMV and depthwise forms): a candidate tried on a CPU is
/// still a CPU kernel, and a tiling read back from the cache builds the
/// same groups the plan was checked with.
static GemmTiling withTile(GemmTiling base, const GemmTiling& shape) {
  base.rows = shape.rows;
  base.width = shape.width;
  base.localRows = shape.localRows;
  base.depth = shape.depth;
  return base;
}

size_t chooseTiling(const std::vector<double>& best, double margin) {
  // Another tiling must win clearly: the default stays within the noise.
  size_t chosen = 0;
  for (size_t c = 1; c < best.size(); ++c)
    if (best[c] < best[chosen] && best[c] < margin * best[0]) chosen = c;
  return chosen;
}

Expected<std::vector<TunedKernel>> tuneKernels(Device& device, const Graph& g, const std::vector<KernelGroup>& groups,
                                               const OpCatalog& catalog, KernelOptions& options,
                                               const TuningOptions& tuning) {
  std::vector<TunedKernel> out;
  std::mt19937 rng(7);
  std::string candidates = "round robin, margin " + std::to_string(tuning.margin) + ";";
  for (const GemmTiling& t : gemmCandidates()) candidates += describe(t) + ";";
  const DiskCache& cache = DiskCache::user();
  size_t total = 0, visited = 0;
  for (const KernelGroup& group : groups) total += isGemmGroup(g, group.nodes);
  for (const KernelGroup& group : groups) {
    if (!isGemmGroup(g, group.nodes)) continue;
    if (tuning.progress) tuning.progress(visited++, total);
    const NodeData& head = g.node(gemmHead(g, group.nodes));
    const std::string name = "fusec_tune";  // one name: a candidate's source depends on its tiling alone
    Expected<KernelSource> base = emitGemm(g, group.nodes, catalog, name, "tuning", options.gemm);
    if (!base) continue;  // the direct-gather fallback (3-D convs) has no tiling
    if (!base->derived.empty()) continue;  // nor has a Winograd conv (emitWinograd)
    TunedKernel result;
    result.group = group.name.empty() ? head.op.str() : group.name;
    result.tiling = options.gemm;
    const std::string cached =
        "tuning/" + sha256Hex(canonicalProgram(base->source, name).text + "\n" + candidates + "\n" + device.info().name + "\n" + device.info().version) + ".txt";
    std::optional<std::string> entry = tuning.useCache ? cache.get(cached) : std::nullopt;
    if (entry) {
      std::istringstream in(*entry);
      GemmTiling t = options.gemm;
      if (in >> t.rows >> t.width >> t.localRows >> t.depth >> t.shallowDepth >> t.shallowLocalRows >> result.defaultSeconds >>
          result.tunedSeconds) {
        result.tiling = t;
        result.cached = true;
        options.gemmTilings[head.id] = t;
        out.push_back(result);
        continue;
      }
    }
    // One set of buffers for every candidate: same operands, same results.
    Expected<std::vector<Buffer>> buffers = sampleBuffers(device, g, base.value(), rng);
    if (!buffers) return buffers.error();
    std::vector<KernelArg> args;
    for (const Buffer& b : buffers.value()) args.push_back(KernelArg::of(b));
    // The default first, so it is measured even where it is no candidate.
    std::vector<GemmTiling> tried = {options.gemm};
    for (const GemmTiling& c : gemmCandidates())
      if (const GemmTiling t = withTile(options.gemm, c); describe(t) != describe(options.gemm)) tried.push_back(t);
    std::vector<GemmTiling> tilings;  // those that generate; the default does (base)
    std::vector<void*> handles;
    std::vector<KernelSource> kernels;
    for (const GemmTiling& t : tried) {
      Expected<KernelSource> k = emitGemm(g, group.nodes, catalog, name, "tuning", t);
      if (!k) continue;
      Expected<void*> h = device.kernel(k->source, k->name);
      if (!h) return h.error();
      tilings.push_back(t);
      handles.push_back(h.value());
      kernels.push_back(std::move(k.value()));
    }
    // Round robin, best of `launches` each: a shared machine's load drifts,
    // and this spreads it over all candidates alike.
    std::vector<double> best(kernels.size(), 1e30);
    for (int r = 0; r < tuning.launches; ++r)
      for (size_t c = 0; c < kernels.size(); ++c) {
        if (Status st = device.launch(handles[c], args, kernels[c].globalSize, name, kernels[c].localSize); !st)
          return st.error();
        Expected<std::vector<std::pair<std::string, double>>> times = device.finish();
        if (!times) return times.error();
        if (!times->empty()) best[c] = std::min(best[c], times->front().second);
      }
    const size_t chosen = chooseTiling(best, tuning.margin);
    result.defaultSeconds = best[0];
    result.tiling = tilings[chosen];
    const double bestTime = best[chosen];
    result.tunedSeconds = bestTime;
    options.gemmTilings[head.id] = result.tiling;
    if (tuning.useCache) {
      std::ostringstream text;
      text << describe(result.tiling) << " " << result.defaultSeconds << " " << result.tunedSeconds << "\n";
      cache.put(cached, text.str());
    }
    out.push_back(result);
  }
  if (tuning.progress) tuning.progress(total, total);
  return out;
}

}  // namespace fusec::codegen
