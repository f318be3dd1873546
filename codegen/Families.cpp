/// The kernel family registry and the checks every family shares; see
/// Families.h.
#include "fusec/codegen/Families.h"

#include <algorithm>
#include <memory>

#include "fusec/codegen/Emitters.h"
#include "fusec/codegen/OpenCL.h"

namespace fusec::codegen {

namespace {

using Group = std::vector<NodeRef>;

/// An emitter that takes no kernel options.
FunctionFamily::EmitFn plain(Expected<KernelSource> (*emit)(const Graph&, const Group&, const OpCatalog&,
                                                            const std::string&, const std::string&)) {
  return [emit](const Graph& g, const Group& group, const OpCatalog& catalog, const std::string& name,
                const std::string& comment, const KernelOptions&) { return emit(g, group, catalog, name, comment); };
}

/// MatMul and Gemm heads (`conv` false) or Conv heads, tiled as a GEMM; the
/// Convs it cannot tile (3-D and beyond) are gathered directly. The direct
/// gather computes one Conv: a group of two (a conv and its projection
/// shortcut) keeps the GEMM's reason.
FunctionFamily::EmitFn gemm(bool conv) {
  return [conv](const Graph& g, const Group& group, const OpCatalog& catalog, const std::string& name,
                const std::string& comment, const KernelOptions& options) {
    const NodeRef head = gemmHead(g, group);
    Expected<KernelSource> k = emitGemm(g, group, catalog, name, comment, options.gemmFor(g.node(head)));
    const auto convs = std::count_if(group.begin(), group.end(), [&](NodeRef n) { return g.node(n).op == "Conv"; });
    if (conv && !k && k.error().unsupported && convs == 1 && head == group.front())
      return emitPool(g, group, catalog, name, comment);
    return k;
  };
}

bool headIs(const Graph& g, const Group& group, std::string_view op) { return g.node(group.front()).op == op; }

bool scalarOps(const Graph& g, const Group& group, const OpCatalog& catalog) {
  return std::all_of(group.begin(), group.end(), [&](NodeRef n) {
    const NodeData& d = g.node(n);
    const OpDef* op = d.domain.empty() ? catalog.find(d.op.str()) : nullptr;
    return op && op->semantics && (op->kind == OpKind::Elementwise || op->kind == OpKind::Broadcast);
  });
}

/// Elementwise members, after an optional data-movement prologue (Concat,
/// Transpose, Slice, ... composed into the members' loads).
bool pointwiseOps(const Graph& g, const Group& group, const OpCatalog& catalog) {
  Group scalar;
  for (NodeRef n : group)
    if (!isIndexMapOp(g, n)) scalar.push_back(n);
  return !scalar.empty() && scalarOps(g, scalar, catalog);
}

/// The families, in order of preference for a node no rule fused: name,
/// what it builds, what a group lacks when it does not claim it, claims,
/// emitter. A new family is a new emitter file and one entry here.
std::vector<FunctionFamily::Spec> specs() {
  return {
      {"attention", "MatMul(Q, Kt), a constant scale (Mul or Div), an optional mask (added, or a Where filling with a "
       "constant), Softmax over the keys "
       "and MatMul with V (float32, static shapes, one batch shape), as one kernel: an online softmax over blocks "
       "of keys, the scores kept in registers (on a CPU, whole rows of scores in a work-item's private memory, a "
       "softmax in two passes); Q, Kt and V may be read through chains of view ops (Slice, Reshape, "
       "Transpose, ...) and the result written through Transposes and reshapes, as strided views",
       "it is not MatMul, a constant scale, an optional mask, Softmax and MatMul",
       [](const Graph& g, const Group& grp, const OpCatalog&) { return isAttentionGroup(g, grp); },
       [](const Graph& g, const Group& group, const OpCatalog& catalog, const std::string& name, const std::string& comment,
          const KernelOptions& options) { return emitAttention(g, group, catalog, name, comment, options.attention); }},
      {"gemm_epilogue", "a MatMul or Gemm (float32, static shapes) followed by elementwise ops on its result",
       "it does not start with a MatMul or Gemm",
       [](const Graph& g, const Group& grp, const OpCatalog&) {
         return isGemmGroup(g, grp) && g.node(gemmHead(g, grp)).op != "Conv";
       },
       gemm(false)},
      {"gemm_horizontal", "two or more MatMuls, Gemms or Convs of one input (float32, static shapes: attention's Q, K "
       "and V projections, SqueezeNet's 1x1 and 3x3 expand convs), each followed by elementwise ops on its own result, "
       "as one launch: each product tiled as gemm_epilogue or conv_epilogue tiles it alone (without work-group "
       "barriers: a panel owned by each work-item, as on CPUs, or a tile per work-item; not a depthwise conv or a "
       "matrix-vector product), the launch's work-groups divided among them",
       "it is not two or more MatMuls, Gemms or Convs of one input, each with elementwise ops on its own result",
       [](const Graph& g, const Group& grp, const OpCatalog&) { return isHorizontalGemmGroup(g, grp); },
       [](const Graph& g, const Group& group, const OpCatalog& catalog, const std::string& name, const std::string& comment,
          const KernelOptions& options) {
         return emitGemmHorizontal(g, group, catalog, name, comment, [&](const NodeData& head) { return options.gemmFor(head); });
       }},
      {"squeeze_excite", "a squeeze-and-excitation gate: the channel means (GlobalAveragePool, or ReduceMean over "
       "the spatial axes), a 1x1 conv and elementwise ops on its result, a 1x1 conv and elementwise ops on that "
       "(float32, static shapes), as one kernel: a work-group per image, the means and the squeezed vector in local "
       "memory", "it is not a channel mean, a 1x1 conv, elementwise ops, a 1x1 conv and elementwise ops",
       [](const Graph& g, const Group& grp, const OpCatalog&) { return isSqueezeExciteGroup(g, grp); },
       [](const Graph& g, const Group& group, const OpCatalog& catalog, const std::string& name, const std::string& comment,
          const KernelOptions& options) {
         return emitSqueezeExcite(g, group, catalog, name, comment, options.vectorColumns);
       }},
      {"conv_epilogue", "a Conv (any groups, strides, dilations and pads; 1-D, 2-D and 3-D tiled as an implicit "
       "GEMM, gathered directly when it cannot be tiled; 2-D depthwise convs computed directly, weights in registers; 3x3 stride-1 "
       "convs with constant weights, on a CPU target, by Winograd's F(2x2, 3x3)) followed by "
       "elementwise ops on its result; before it, a per-channel scale of its input (Mul by [N, C, 1, 1]), or a "
       "depthwise conv (on a CPU also a dense one) and elementwise ops computing a 1x1 conv's input; beside it, a "
       "1x1 projection shortcut added to its result", "it does not start with a Conv",
       [](const Graph& g, const Group& grp, const OpCatalog&) {
         return isGemmGroup(g, grp) && g.node(gemmHead(g, grp)).op == "Conv";
       },
       gemm(true)},
      {"pool_epilogue", "MaxPool, AveragePool, ConvTranspose or BatchNormalization (inference, or training mode from opset 14; "
       "float32) followed by elementwise ops on its result", "it does not start with a pooling op, ConvTranspose or BatchNormalization",
       [](const Graph& g, const Group& grp, const OpCatalog&) { return isPoolGroup(g, grp) && !headIs(g, grp, "Conv"); },
       plain(emitPool)},
      {"row_reduce", "elementwise ops feeding one reduction over contiguous rows (Reduce* over the innermost axis, "
       "Softmax, LogSoftmax, LayerNormalization, global pools, InstanceNormalization), which ends the group; the "
       "reduction's input is written too when it is read outside", "it does not end in a reduction over the innermost axes",
       [](const Graph& g, const Group& grp, const OpCatalog&) { return isRowReduction(g, grp.back()); },
       [](const Graph& g, const Group& group, const OpCatalog& catalog, const std::string& name, const std::string& comment,
          const KernelOptions& options) {
         return emitRowReduce(g, group, catalog, name, comment, options.rowReducePerWorkItem);
       }},
      {"reduce", "elementwise ops feeding one reduction over any axes known when the kernel is generated (Reduce*, "
       "ArgMax, ArgMin, Softmax over an outer axis), which ends the group", "it does not end in a reduction with known axes",
       [](const Graph& g, const Group& grp, const OpCatalog&) { return isAxisReduction(g, grp.back()); },
       [](const Graph& g, const Group& group, const OpCatalog& catalog, const std::string& name, const std::string& comment,
          const KernelOptions& options) { return emitReduce(g, group, catalog, name, comment, options.vectorColumns); }},
      {"axis_layernorm", "LayerNormalization over one axis that is not the innermost, as exporters write it: a "
       "Transpose moving the axis last, LayerNormalization over the last axis, the inverse Transpose (float32, static "
       "shapes; ConvNeXt's LayerNorm2d), as one kernel that reads and writes the tensor in its own layout",
       "it is not a Transpose, LayerNormalization and Transpose",
       [](const Graph& g, const Group& grp, const OpCatalog&) { return isAxisLayerNormGroup(g, grp); },
       [](const Graph& g, const Group& group, const OpCatalog& catalog, const std::string& name, const std::string& comment,
          const KernelOptions& options) {
         return emitAxisLayerNorm(g, group, catalog, name, comment, options.vectorColumns);
       }},
      {"index_map", "data-movement ops (Reshape, Transpose, Expand, Tile, Slice, Concat, Gather, Pad, Split, "
       "Resize, ...) with static shapes: one op, or a group composed into one index map that moves each element once; "
       "on CPUs a group whose results are runs of its inputs (Concat, Split, Slice along outer axes, a Transpose keeping "
       "the trailing dims) copies a run per work-item",
       "it has an op that is not data movement",
       [](const Graph& g, const Group& grp, const OpCatalog&) {
         return !grp.empty() && std::all_of(grp.begin(), grp.end(), [&](NodeRef n) { return isIndexMapOp(g, n); });
       },
       [](const Graph& g, const Group& group, const OpCatalog& catalog, const std::string& name, const std::string& comment,
          const KernelOptions& options) { return emitIndexMap(g, group, catalog, name, comment, options.stridedRowCopies); }},
      {"contraction", "one Einsum", "it is not one Einsum",
       [](const Graph& g, const Group& grp, const OpCatalog&) { return grp.size() == 1 && isEinsum(g, grp[0]); },
       plain(emitEinsum)},
      {"pointwise", "elementwise and broadcast ops: any op the catalog gives scalar semantics, a pack's own "
       "included; every result read outside the group is written; data movement before them (Concat, Transpose, "
       "Slice, ...) is read through its index map, not stored",
       "it has an op that is neither elementwise nor broadcast with scalar semantics, nor data movement before them",
       pointwiseOps,
       [](const Graph& g, const Group& group, const OpCatalog& catalog, const std::string& name, const std::string& comment,
          const KernelOptions& options) { return emitPointwise(g, group, catalog, name, comment, options.stridedRowCopies); }},
  };
}

}  // namespace

const KernelFamilies& kernelFamilies() {
  static const KernelFamilies families = [] {
    KernelFamilies f;
    for (FunctionFamily::Spec& spec : specs()) f.add(std::make_unique<FunctionFamily>(std::move(spec)));
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
      // AVX2, each work-item building its panel once and computing all of
      // its rows (or a share of them) from it is faster on every such
      // product of the zoo. Per-kernel minima of three alternating
      // runs, AVX2 PoCL: MobileNetV2's 16 -> 96 expansion on 112x112
      // 0.556 -> 0.335 ms, its 24 -> 144 on 56x56 0.29 -> 0.16-0.18 ms, the
      // eight 64 -> 384 on 14x14 0.13-0.15 -> 0.07-0.08 ms (sum of the
      // model's minima 7.27 -> 6.29 ms); MobileNetV3-small 2.15 -> 1.85 ms,
      // ShuffleNetV2 4.16 -> 3.34 ms.
      if (native < 16) t.streamDepth = 0;
      // A 7x7 map's last panel (1 result of 16) at half width: per-kernel
      // minima of six alternating runs, AVX2 PoCL, MobileNetV2's 7x7 1x1
      // convs 3-15 % faster (960 -> 320 0.288 -> 0.246 ms), ResNet-18's
      // 7x7 3x3 convs 1.99-2.06 -> 1.83-1.88 ms.
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

Expected<KernelSource> CodegenFamily::build(const Graph& g, const std::vector<NodeRef>& group, const OpCatalog& catalog,
                                            const std::string& name, const std::string& comment,
                                            const KernelOptions& options, const Target* target) const {
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
  Expected<KernelSource> k = emit(g, group, catalog, name, comment, options);
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
    Expected<KernelSource> k = build(g, group, catalog, "probe", "", KernelOptions::forTarget(target), &target);
    if (!k) return k.error();
  }
  return Status::success();
}

}  // namespace fusec::codegen
