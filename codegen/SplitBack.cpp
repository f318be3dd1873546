/// Fused kernels timed against their members unfused; see SplitBack.h.
#include "fusec/codegen/SplitBack.h"

#include <algorithm>
#include <sstream>

#include "fusec/codegen/Canonical.h"
#include "fusec/codegen/DiskCache.h"

namespace fusec::codegen {
namespace {

/// Random floats (other element types zero): timing must not depend on
/// denormals or NaNs left in fresh buffers, and zero indices stay in range.
Tensor sampleInput(const TensorType& type, std::mt19937& rng) {
  Tensor t(type.dtype, type.staticShape());
  if (type.dtype == DType::Float32) {
    std::uniform_real_distribution<float> d(-1, 1);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  }
  return t;
}

/// One kernel ready to launch on its own buffers.
struct Timed {
  KernelSource source;
  void* handle = nullptr;
  std::vector<Buffer> buffers;
  double best = 1e30;
};

Expected<Timed> prepare(Device& device, const Graph& g, KernelSource source, std::mt19937& rng) {
  Timed t;
  Expected<void*> h = device.kernel(source.source, source.name);
  if (!h) return h.error();
  t.handle = h.value();
  Expected<std::vector<Buffer>> buffers = sampleBuffers(device, g, source, rng);
  if (!buffers) return buffers.error();
  t.buffers = std::move(buffers.value());
  t.source = std::move(source);
  return t;
}

Status launchTimed(Device& device, Timed& t) {
  std::vector<KernelArg> args;
  for (const Buffer& b : t.buffers) args.push_back(KernelArg::of(b));
  if (Status st = device.launch(t.handle, args, t.source.globalSize, t.source.name, t.source.localSize); !st)
    return st;
  Expected<std::vector<std::pair<std::string, double>>> times = device.finish();
  if (!times) return times.error();
  if (!times->empty()) t.best = std::min(t.best, times->front().second);
  return Status::success();
}

}  // namespace

Expected<std::vector<Buffer>> sampleBuffers(Device& device, const Graph& g, const KernelSource& kernel, std::mt19937& rng) {
  std::vector<Buffer> buffers;
  for (ValueId v : kernel.inputs) {
    const Value& val = g.value(v);
    Expected<Buffer> b = val.constant ? device.upload(*val.constant) : device.upload(sampleInput(val.type, rng));
    if (!b) return b.error();
    buffers.push_back(std::move(b.value()));
  }
  for (ValueId v : kernel.outputs) {
    const TensorType& t = g.value(v).type;
    Expected<Buffer> b = device.allocate(std::max<size_t>(1, static_cast<size_t>(shapeNumel(t.staticShape())) * dtypeSize(t.dtype)));
    if (!b) return b.error();
    buffers.push_back(std::move(b.value()));
  }
  for (const std::shared_ptr<const DerivedConstant>& d : kernel.derived) {
    Expected<Buffer> b = device.upload(*d->tensor());
    if (!b) return b.error();
    buffers.push_back(std::move(b.value()));
  }
  return buffers;
}

Expected<std::vector<FusionTiming>> measureFusions(Device& device, const Graph& g, const std::vector<KernelGroup>& groups,
                                                   const OpCatalog& catalog, const KernelOptions& options,
                                                   const SplitBackOptions& split) {
  std::vector<FusionTiming> out;
  std::mt19937 rng(11);
  const DiskCache& cache = DiskCache::user();
  size_t total = 0, visited = 0;
  // First what each fusion launches, and the verdicts already cached;
  // then every program still to build, built at once (Device::prepare
  // spreads them over the cores); then the timings.
  struct Pending {
    FusionTiming timing;
    KernelSource fused;
    std::vector<KernelSource> members;
    std::string entry;  // of the verdict in the cache
  };
  std::vector<Pending> pending;
  Device::Sources sources;
  for (const KernelGroup& grp : groups) {
    if (grp.nodes.size() < 2) continue;
    const std::string name = "fusec_split";
    Expected<KernelSource> fused = emitKernel(g, grp.nodes, grp.family, catalog, name, "split-back check", options);
    if (!fused) return fused.error();  // the program built it a moment ago
    std::vector<KernelSource> members;
    bool alone = true;  // every member builds as a kernel of its own
    for (NodeRef n : grp.nodes) {
      if (isViewGroup(g, {n}, catalog)) continue;
      Expected<KernelSource> k = emitKernel(g, {n}, "", catalog, name, "split-back check", options);
      if (!k) {
        alone = false;
        break;
      }
      members.push_back(std::move(k.value()));
    }
    if (!alone) continue;
    FusionTiming timing;
    timing.group = grp.name;
    for (NodeRef n : grp.nodes) timing.nodes.push_back(g.node(n).id);
    std::sort(timing.nodes.begin(), timing.nodes.end());
    timing.memberKernels = members.size();
    // Keyed by what the kernels compute: the layers of an encoder share
    // one measurement.
    std::string key = canonicalProgram(fused->source, name).text;
    for (const KernelSource& k : members) key += "\n// member\n" + canonicalProgram(k.source, name).text;
    const std::string entry =
        "split-back/" + sha256Hex(key + "\n" + std::to_string(split.launches) + " " + std::to_string(split.margin) + " " +
                                  std::to_string(split.launchSeconds) + "\n" + device.info().name + "\n" +
                                  device.info().version) + ".txt";
    if (split.useCache)
      if (std::optional<std::string> hit = cache.get(entry)) {
        std::istringstream in(*hit);
        int lost = 0;
        if (in >> timing.fusedSeconds >> timing.unfusedSeconds >> lost) {
          timing.cached = true;
          timing.splitBack = lost != 0;
          out.push_back(timing);
          continue;
        }
      }
    sources.emplace_back(fused->source, fused->name);
    for (const KernelSource& k : members) sources.emplace_back(k.source, k.name);
    pending.push_back({std::move(timing), std::move(fused.value()), std::move(members), entry});
  }
  total = pending.size();
  if (Status st = device.prepare(sources, split.progress); !st) return st.error();
  for (Pending& p : pending) {
    if (split.progress) split.progress(visited++, total);
    FusionTiming& timing = p.timing;
    const std::string& entry = p.entry;
    std::vector<KernelSource>& members = p.members;
    std::vector<Timed> kernels;
    for (KernelSource& k : members) {
      Expected<Timed> t = prepare(device, g, std::move(k), rng);
      if (!t) return t.error();
      kernels.push_back(std::move(t.value()));
    }
    Expected<Timed> f = prepare(device, g, std::move(p.fused), rng);
    if (!f) return f.error();
    // Round robin, best of `launches` each: a shared machine's load falls
    // on both sides alike. A loss seen is measured again on fresh launches
    // and the fusion split back only when the second batch shows it too: a
    // 2-vCPU host gives 10 % swings between batches of the same kernel.
    auto batch = [&](double& fusedBest, double& unfusedBest) -> Status {
      f->best = 1e30;
      for (Timed& k : kernels) k.best = 1e30;
      int rounds = split.launches;
      for (int r = 0; r < rounds; ++r) {
        if (Status st = launchTimed(device, f.value()); !st) return st;
        for (Timed& k : kernels)
          if (Status st = launchTimed(device, k); !st) return st;
        // Kernels of tens of milliseconds vary less than a launch of a few
        // microseconds, and would take minutes: a round's worth of time
        // (split.budgetSeconds) is spent, two rounds at least.
        if (r == 0) {
          double round = f->best;
          for (const Timed& k : kernels) round += k.best;
          if (round * rounds > split.budgetSeconds)
            rounds = std::max(2, static_cast<int>(split.budgetSeconds / round));
        }
      }
      fusedBest = f->best + split.launchSeconds;
      unfusedBest = 0;
      for (const Timed& k : kernels) unfusedBest += k.best + split.launchSeconds;
      return Status::success();
    };
    if (Status st = batch(timing.fusedSeconds, timing.unfusedSeconds); !st) return st.error();
    if (timing.fusedSeconds > split.margin * timing.unfusedSeconds) {
      double fusedAgain = 0, unfusedAgain = 0;
      if (Status st = batch(fusedAgain, unfusedAgain); !st) return st.error();
      timing.splitBack = fusedAgain > split.margin * unfusedAgain;
      timing.fusedSeconds = std::min(timing.fusedSeconds, fusedAgain);
      timing.unfusedSeconds = std::min(timing.unfusedSeconds, unfusedAgain);
    }
    if (split.useCache) {
      std::ostringstream text;
      text.precision(9);
      text << timing.fusedSeconds << " " << timing.unfusedSeconds << " " << timing.splitBack << "\n";
      cache.put(entry, text.str());
    }
    out.push_back(timing);
  }
  if (split.progress) split.progress(total, total);
  return out;
}

}  // namespace fusec::codegen
