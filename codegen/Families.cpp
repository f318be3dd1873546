/// The kernel family registry and the checks every family shares; see
/// Families.h.
#include "fusec/codegen/Families.h"

#include <algorithm>
#include <memory>

#include "FamilyRegistry.h"
#include "fusec/codegen/OpenCL.h"

namespace fusec::codegen {

// Each family's spec, defined in its file (FUSEC_KERNEL_FAMILY); the list
// is generated from codegen/CMakeLists.txt's FUSEC_KERNEL_FAMILIES.
#define FUSEC_FAMILY(NAME) FUSEC_KERNEL_FAMILY(NAME);
#include "KernelFamilies.inc"
#undef FUSEC_FAMILY

const KernelFamilies& kernelFamilies() {
  static const KernelFamilies families = [] {
    KernelFamilies f;
#define FUSEC_FAMILY(NAME) f.add(std::make_unique<FunctionFamily>(NAME##_family()));
#include "KernelFamilies.inc"
#undef FUSEC_FAMILY
    return f;
  }();
  return families;
}

const CodegenFamily* findFamily(std::string_view name) {
  return dynamic_cast<const CodegenFamily*>(kernelFamilies().find(name));
}

KernelOptions KernelOptions::forDevice(const Target& target, const DeviceInfo& device) {
  KernelOptions o = forTarget(target);
  if (device.cpu) {
    const int native = static_cast<int>(std::max<int64_t>(device.nativeFloatWidth, 1));
    const int registers = native >= 16 ? 32 : 16;
    auto fit = [&](GemmTiling& t) {
      const int perRow = (t.width + native - 1) / native;
      t.rows = std::clamp(registers * 3 / 4 / perRow, 1, t.rows);
      // Two panels where both rows of accumulators, the two B vectors and
      // A's broadcast still fit the registers (12 x 2 + 3 of AVX-512's 32).
      t.panels = t.shallowLocalRows == 1 && (2 * t.rows + 3) * perRow <= registers ? 2 : 1;
      // Streaming a shallow product's output one row tile per work-group
      // (GemmTiling::streamDepth) rebuilds its panel for every tile; with
      // AVX2, each work-item building its panel once is faster on every
      // such product of the zoo.
      if (native < 16) t.streamDepth = 0;
      // A 7x7 map's last panel (1 result of 16) at half width.
      t.narrowTail = 2 * native <= t.width;
      if (device.computeUnits > 0) t.cores = device.computeUnits;
    };
    fit(o.gemm);
    for (auto& [id, t] : o.gemmTilings) fit(t);
    // Attention's rows of scores: a float16 of scores per row in the
    // registers while they are computed (6 rows with AVX2).
    if (o.attention.scoreRows > 0)
      o.attention.scoreRows = std::clamp(registers * 3 / 4 / ((16 + native - 1) / native), 4, o.attention.scoreRows);
  }
  return o;
}

size_t spreadLocalSize(size_t global, int64_t groups) {
  if (groups <= 0 || global == 0) return 0;
  constexpr size_t kMaxLocal = 1024;
  const size_t cap = std::clamp<size_t>(global / static_cast<size_t>(groups), 1, kMaxLocal);
  size_t local = cap;
  while (global % local != 0) --local;
  return global / local > 64 * static_cast<size_t>(groups) ? 0 : local;
}

namespace {

std::string valueList(const Graph& g, const std::vector<ValueId>& values) {
  std::string out;
  for (ValueId v : values) out += (out.empty() ? "`" : ", `") + g.value(v).name + "`";
  return out.empty() ? "nothing" : out;
}

/// Whether every value the group's members read or write has a static shape.
bool allShapesStatic(const Graph& g, const std::vector<NodeRef>& group) {
  for (NodeRef n : group) {
    const NodeData& d = g.node(n);
    for (const std::vector<ValueId>* values : {&d.inputs, &d.outputs})
      for (ValueId v : *values)
        if (v != kNoValue && !g.isConstant(v) && !g.value(v).type.isStatic()) return false;
  }
  return true;
}

}  // namespace

Expected<KernelSource> CodegenFamily::build(const EmitRequest& request, const Target* target) const {
  const Graph& g = request.graph;
  const std::vector<NodeRef>& group = request.group;
  const KernelOptions& options = request.options;
  // Emitters index and multiply static shapes: a value no buffer could hold
  // is refused before they see it.
  for (NodeRef n : group)
    for (const std::vector<ValueId>* values : {&g.node(n).inputs, &g.node(n).outputs})
      for (ValueId v : *values) {
        if (v == kNoValue || !g.value(v).type.isStatic()) continue;
        const std::optional<int64_t> bytes = checkedBytes(g.value(v).type.staticShape(), g.value(v).type.dtype);
        if (!bytes || *bytes > maxTensorBytes())
          return Error{"value `" + g.value(v).name + "` (" + g.value(v).type.str() + ") is larger than the limit of " +
                           std::to_string(maxTensorBytes()) + " bytes (FUSEC_MAX_TENSOR_BYTES)",
                       true};
      }
  Expected<KernelSource> k = emit(request);
  if (!k) return k;
  if (k->localSize == 0) k->localSize = spreadLocalSize(k->globalSize, options.spreadGroups);
  std::vector<ValueId> unwritten;
  for (ValueId v : groupBoundary(g, group).outputs)
    if (std::find(k->outputs.begin(), k->outputs.end(), v) == k->outputs.end()) unwritten.push_back(v);
  if (!unwritten.empty())
    return Error{valueList(g, unwritten) + (unwritten.size() == 1 ? " is" : " are") +
                     " read outside the group, and a " + std::string(this->name()) + " kernel writes only " +
                     valueList(g, k->outputs),
                 true};
  // OpenCL passes every buffer as a kernel argument; devices take a few
  // hundred bytes of them.
  constexpr size_t kMaxBuffers = 64;
  if (k->inputs.size() + k->outputs.size() > kMaxBuffers)
    return Error{"the kernel would take " + std::to_string(k->inputs.size() + k->outputs.size()) +
                     " buffers, more than the " + std::to_string(kMaxBuffers) + " a kernel may have",
                 true};
  if (target) {
    if (target->localMemBytes > 0 && static_cast<int64_t>(k->localMemBytes) > target->localMemBytes)
      return Error{"the kernel needs " + std::to_string(k->localMemBytes) + " bytes of local memory; the target has " +
                       std::to_string(target->localMemBytes),
                   true};
    if (group.size() > 1 && target->groups.maxLocalMemBytes > 0 &&
        static_cast<int64_t>(k->localMemBytes) > target->groups.maxLocalMemBytes)
      return Error{"the kernel needs " + std::to_string(k->localMemBytes) + " bytes of local memory; a fused group " +
                       "may use " + std::to_string(target->groups.maxLocalMemBytes) + " ([target.groups] max_local_mem_bytes)",
                   true};
    if (target->maxWorkGroupSize > 0 && static_cast<int64_t>(k->localSize) > target->maxWorkGroupSize)
      return Error{"the kernel's work-group of " + std::to_string(k->localSize) + " exceeds the target's " +
                       std::to_string(target->maxWorkGroupSize),
                   true};
  }
  return k;
}

Status CodegenFamily::canEmit(const Graph& g, const std::vector<NodeRef>& group, const OpCatalog& catalog,
                              const Target& target) const {
  if (!claims(g, group, catalog) || allShapesStatic(g, group)) {
    const std::string name = "probe", comment;
    const KernelOptions options = KernelOptions::forTarget(target);
    Expected<KernelSource> k = build({g, group, catalog, name, comment, options}, &target);
    if (!k) return k.error();
  }
  return Status::success();
}

}  // namespace fusec::codegen
