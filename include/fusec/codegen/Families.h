/// The kernel families the OpenCL code generator implements (KernelFamily.h
/// declares the interface). Each family's canEmit is its emitter run dry
/// plus the checks every family shares: the kernel writes every value of
/// the group that is read outside it, and fits the target's local memory
/// and work-group size. So a group is planned only when its kernel exists.
///
/// A new family is one file, which defines its Spec (name, what it builds,
/// colour, which groups it claims, the emitter) with FUSEC_KERNEL_FAMILY
/// (codegen/FamilyRegistry.h), and one line in codegen/CMakeLists.txt's
/// FUSEC_KERNEL_FAMILIES, which registers it in order of preference.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "fusec/codegen/Gemm.h"
#include "fusec/codegen/Pointwise.h"
#include "fusec/engine/KernelFamily.h"

namespace fusec::codegen {

struct DeviceInfo;

/// How an attention kernel is laid out; the defaults suit a GPU.
struct AttentionForm {
  /// Where local memory is emulated (a CPU): keys stored as rows (the heads
  /// of a projection, read through views) are transposed once per
  /// work-item into its local memory, and the work-item computes a chunk
  /// of its batch's query rows from them.
  bool ownedKeys = false;
  /// Above 0 (a CPU): a work-item computes up to this many query rows and
  /// keeps their whole rows of scores in private memory (a softmax in two
  /// passes over them, not online) where they fit in 16 KiB.
  int scoreRows = 0;
};

/// Parameters of the kernel families (tile sizes); the defaults suit the
/// build machine's PoCL. tuneKernels (Tuner.h) fills in per-kernel choices.
struct KernelOptions {
  GemmTiling gemm;                             ///< for gemm_epilogue kernels without their own
  std::map<NodeId, GemmTiling> gemmTilings;    ///< by the id of the kernel's MatMul, Gemm or Conv
  bool rowReducePerWorkItem = false;           ///< lone row reductions: a work-item per row (emitRowReduce)
  /// A row per work-item step, in a loop (CPUs: on a GPU neighbouring
  /// work-items would read a row apart): views copied (emitIndexMap),
  /// Concat and Split copies, pointwise kernels with broadcast operands
  /// (emitPointwise, RowPieces).
  bool stridedRowCopies = false;
  bool vectorColumns = false;                  ///< column reductions a vector of outputs per work-item (emitReduce; CPUs)
  AttentionForm attention{};                   ///< keys owned, rows of scores per work-item (emitAttention; CPUs)
  /// Where sub-buffers may start, in bytes (the target's
  /// `mem_base_align_bytes`): a Concat whose inputs lie at multiples of it
  /// in its result has them written there by their producers and launches
  /// nothing (scheduleGraph). 0: every Concat is a kernel.
  size_t subBufferAlignment = 0;
  /// The work-groups a kernel that leaves its work-group size to the
  /// runtime (KernelSource::localSize 0) is split into; 0 leaves it to the
  /// runtime. PoCL fills work-groups up to 4096 work-items, so a kernel of
  /// fewer work-items ran as one work-group on one core: MobileNetV3-small's
  /// classifier GEMV (500 work-items, 4 MB of weights) 0.26 ms alone with
  /// caches flushed, 0.16-0.19 in 20 work-groups. See spreadLocalSize.
  int64_t spreadGroups = 0;
  /// The local memory a CPU's direct depthwise work-item fills with its
  /// input rows (GemmTiling::depthwiseOwnedBytes): half a 32 KiB L1.
  static constexpr int64_t kDepthwiseOwnedBytes = 16384;

  const GemmTiling& gemmFor(const NodeData& head) const {
    auto it = gemmTilings.find(head.id);
    return it == gemmTilings.end() ? gemm : it->second;
  }

  /// The options for `target`: where local memory is emulated (PoCL on a
  /// CPU), matrix-vector products are not split across work-groups, the
  /// barriers cost more than they save (kernel_roofline --bandwidth: 6-10
  /// GB/s against the tiled GEMM's 8-13 on the build machine); each
  /// work-item reads whole rows instead, as it does for lone row reductions
  /// and for softmax and LayerNorm rows (BERT-base's residual add +
  /// LayerNorm 0.33-0.42 -> 0.08 ms, scale + mask + softmax 0.59 -> 0.26;
  /// GPT-2's seven such kernels 4.2 -> 2.2 ms).
  /// There too, GEMM tiles keep their size, and products with K <= 256
  /// share B's panel between two work-items only (GemmTiling::shallowDepth:
  /// the GEMM kernels of MobileNetV2 and EfficientNet-B0 took 8.8 and 8.9 ms
  /// with groups of 16, 3.8 and 4.4 ms so, in one `fusec run --tune` pass),
  /// and since then, on a CPU (the `cpu` feature), are owned by one
  /// work-item (shallowLocalRows 1), which loads the panel once for all its
  /// row tiles without a barrier: device time on an AVX2 PoCL device, two
  /// alternating runs each, MobileNetV2 14.7 / 12.9 -> 9.4 / 8.5 ms,
  /// EfficientNet-B0 32.3 / 31.3 -> 19.4 / 16.4, MobileNetV3-small 7.4 /
  /// 5.8 -> 2.3 / 3.8, ShuffleNetV2 12.2 -> 8.2. Owned panels then paid at
  /// any depth that fits half the local memory (shallowDepth 8192 on PoCL),
  /// gathered windows included, against groups of 16 staging 128 rows at a
  /// time: ResNet-18 49.5 / 49.4 -> 39.6 / 42.2 ms, ResNet-50 114.8 /
  /// 101.3 -> 100.6 / 92.1, BERT layer 23.4 / 23.2 -> 20.7 / 22.5,
  /// DenseNet-121 113 -> 90, SqueezeNet 11.5 -> 9.1, EfficientNet-B0 22.7
  /// -> 20.2; ResNet-50's stride-2 projection (K = 256, gathered) 8.5 ->
  /// 1.8 ms), and a direct depthwise work-item owns a block of output rows,
  /// their input rows copied once, zero-padded, into its local memory
  /// (depthwiseOwnedBytes): kernel_roofline's depthwise rows 2-5x faster on
  /// maps of 28 and more (MobileNetV2's 144x56x56 3x3: 0.51-1.22 -> 0.22-0.31
  /// ms, EfficientNet-B0's 240x28x28 5x5: 0.62-1.0 -> 0.14-0.25), even to
  /// 1.6x on 7x7 and 14x14; EfficientNet-B0's 16 depthwise kernels 7.2 -> 4.0
  /// ms, the model 19.7 -> 15.4 ms (least time per kernel over three
  /// alternating runs);
  /// on other devices they shrink until a product has 64 work-items per
  /// compute unit. Panels are staged 128 rows deep, not 256: PoCL runs a
  /// work-group's work-items one after another between barriers, so one
  /// work-item's 12 rows of A and the whole panel must stay in L1 at once,
  /// and where A's rows are 2 KiB apart (K = 512) 256 rows of both overflow
  /// the sets they alias to. SqueezeNet's 1x1 classifier conv (K = 512):
  /// 4.2 -> 0.47 ms; whole models in one pass: SqueezeNet 8.5 -> 5.3 ms,
  /// ResNet-50 57 -> 35, MobileNetV2 6.4 -> 4.7, BERT layer 7.2 -> 6.8, none
  /// slower; 64 rows lost on BERT (8.4 ms).
  static KernelOptions forTarget(const Target& target) {
    KernelOptions o;
    const bool realLocalMemory = !target.has("local_mem_emulated");
    o.gemm.gemvSplitK = realLocalMemory;
    o.rowReducePerWorkItem = !realLocalMemory;
    if (!realLocalMemory) o.gemm.shallowDepth = 256;
    if (!realLocalMemory) o.gemm.depth = 128;
    if (target.has("cpu")) {
      o.gemm.shallowLocalRows = 1;
      o.gemm.depthwiseOwnedBytes = kDepthwiseOwnedBytes;
      o.gemm.winogradLocalBytes = target.localMemBytes / 2;
      // A depthwise prologue on maps wider than 16 in blocks of whole
      // rows: MobileNetV2's blocks on 112- and 56-wide maps 0.74-0.92 of
      // the two kernels apart (the 16-column panels 1.08-1.31); on 14-wide
      // maps the panels 0.75-1.06, the row blocks 0.97-1.30 (kernels
      // alternated in one process, AVX2 PoCL).
      o.gemm.depthwiseRowBlocks = 17;
      // 1x1 convs and MatMuls up to 64 deep stream their output (an
      // expansion's C is 6x its input): MobileNetV2's 16 -> 96 expansion
      // 0.44-0.60 -> 0.29-0.32 ms in the model on an AVX-512 device;
      // MobileNetV3-small, SqueezeNet, EfficientNet-B0, ShuffleNetV2 within
      // noise. forDevice turns it off on narrower vector units.
      o.gemm.streamDepth = 64;
      // A depthwise prologue's rows prefetch the next work-group's:
      // MobileNetV2's 96-channel block on 112x112 0.55 / 0.56 -> 0.46 /
      // 0.44 ms in the model (device 5.93 / 5.64 -> 5.37 / 5.05 ms),
      // MobileNetV3-small's two such blocks 0.08 / 0.05 -> 0.06 / 0.04.
      o.gemm.prefetchRows = true;
      o.gemm.cores = target.computeUnits;
      // Transposes and slices a row per step: kernel_roofline, BERT's head
      // split 0.40 -> 0.031 ms; ConvNeXt-T's 44 data-movement kernels
      // 9.1 -> 3.5 ms (AVX2 PoCL device, least of two runs each). Concat +
      // BatchNorm + ReLU in rows: DenseNet-121's 62 such kernels 38 -> 3.8 ms.
      o.stridedRowCopies = true;
      o.vectorColumns = true;
      o.attention.ownedKeys = true;
      o.attention.scoreRows = 16;
      // Owned panels up to half the local memory at 16 lanes (8192 rows
      // in PoCL's 1 MiB).
      if (target.localMemBytes > 0)
        o.gemm.shallowDepth = std::max<int64_t>(256, target.localMemBytes / (2 * 16 * static_cast<int64_t>(sizeof(float))));
    }
    o.gemm.stagedPrologue = realLocalMemory;
    if (realLocalMemory) o.gemm.minWorkItems = 64 * target.computeUnits;
    o.subBufferAlignment = static_cast<size_t>(target.memBaseAlignBytes);
    // Enough work-groups that a core's share stays even when the other
    // core is late (the machine's second vCPU is shared).
    if (target.has("cpu")) o.spreadGroups = 8 * std::max<int64_t>(target.computeUnits, 1);
    return o;
  }

  /// forTarget's options fitted to the device the kernels run on. On a CPU
  /// a work-item's GEMM accumulators must stay in the vector registers (16
  /// with AVX2's 8 floats, 32 with AVX-512's 16): a tile takes at most 3/4
  /// of them, so the 12x16 tiles (12 AVX-512 registers) become 6x16 where a
  /// float16 is two registers. kernel_roofline on an AVX2 PoCL device
  /// (measured peak 101-103 GFLOP/s): BERT-base's GEMMs 41-63 % of peak in
  /// 12x16 tiles (spilled), 82-117 % in 6x16; ResNet-18's 3x3 convs 37-58 %
  /// -> 66-92 %; whole models (device time): ResNet-18 51 -> 40 ms with the
  /// stem's panel shared (GemmTiling::shallowDepth), MobileNetV2 20 -> 17.
  static KernelOptions forDevice(const Target& target, const DeviceInfo& device);
};

/// The work-group size that splits `global` work-items into about `groups`
/// work-groups: the largest divisor of `global` at most global / groups (a
/// 1-D launch needs one), and at most 1024. 0 (the runtime chooses) where
/// that divisor would make more than 64 x groups work-groups (a prime
/// `global`) or `groups` is 0.
size_t spreadLocalSize(size_t global, int64_t groups);

/// What an emitter is asked for: one group's kernel.
struct EmitRequest {
  const Graph& graph;
  const std::vector<NodeRef>& group;  ///< the members, in topological order
  const OpCatalog& catalog;
  const std::string& name;     ///< the kernel's name
  const std::string& comment;  ///< the comment heading its source
  const KernelOptions& options;
};

/// How reports draw a family's groups: fill and line colours (CSS).
struct FamilyColour {
  std::string_view fill = "#f2f2f2";
  std::string_view line = "#999999";
};

/// A family with an emitter.
class CodegenFamily : public KernelFamily {
 public:
  /// The kernel for `request.group`; `unsupported` errors say why the
  /// family cannot build it.
  virtual Expected<KernelSource> emit(const EmitRequest& request) const = 0;
  virtual FamilyColour colour() const = 0;
  /// emit() run dry, then the shared checks against `target`.
  Status canEmit(const Graph& g, const std::vector<NodeRef>& group, const OpCatalog& catalog,
                 const Target& target) const final;
  /// emit(), refused (as canEmit would refuse it) when the kernel leaves a
  /// value read outside the group unwritten; `target`, when given, also
  /// bounds local memory and the work-group size.
  Expected<KernelSource> build(const EmitRequest& request, const Target* target) const;
};

/// A family made of functions: `claims` tests the group's shape (`mismatch`
/// says what it lacks), `emit` builds the kernel. Each family's file
/// defines its Spec (FamilyRegistry.h).
class FunctionFamily final : public CodegenFamily {
 public:
  using ClaimsFn = std::function<bool(const Graph&, const std::vector<NodeRef>&, const OpCatalog&)>;
  using EmitFn = std::function<Expected<KernelSource>(const EmitRequest&)>;
  struct Spec {
    std::string name;      ///< the name rules use after `kernel`
    std::string accepts;   ///< what it builds (docs/language.md's table, `--help`)
    std::string mismatch;  ///< what a group it does not claim lacks
    FamilyColour colour;
    ClaimsFn claims;
    EmitFn emit;
  };
  explicit FunctionFamily(Spec spec) : spec_(std::move(spec)) {}
  std::string_view name() const override { return spec_.name; }
  std::string_view accepts() const override { return spec_.accepts; }
  FamilyColour colour() const override { return spec_.colour; }
  bool claims(const Graph& g, const std::vector<NodeRef>& group, const OpCatalog& catalog) const override {
    return !group.empty() && spec_.claims(g, group, catalog);
  }
  Expected<KernelSource> emit(const EmitRequest& request) const override {
    if (!claims(request.graph, request.group, request.catalog)) return Error{spec_.mismatch, true};
    return spec_.emit(request);
  }

 private:
  Spec spec_;
};

/// The code generator's families, in order of preference for a node no
/// rule fused.
const KernelFamilies& kernelFamilies();

/// The code generator's family named `name`, or null.
const CodegenFamily* findFamily(std::string_view name);

}  // namespace fusec::codegen
