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
  /// runtime, which on PoCL runs fewer than 4096 work-items as one
  /// work-group on one core. See spreadLocalSize.
  int64_t spreadGroups = 0;
  /// The local memory a CPU's direct depthwise work-item fills with its
  /// input rows (GemmTiling::depthwiseOwnedBytes): half a 32 KiB L1.
  static constexpr int64_t kDepthwiseOwnedBytes = 16384;

  const GemmTiling& gemmFor(const NodeData& head) const {
    auto it = gemmTilings.find(head.id);
    return it == gemmTilings.end() ? gemm : it->second;
  }

  /// The options for `target`. Where local memory is emulated (PoCL on a
  /// CPU) barriers cost more than they save: matrix-vector products are not
  /// split across work-groups, and a work-item reads whole rows (lone row
  /// reductions, softmax and LayerNorm rows). On a CPU, shallow products'
  /// panels are owned by one work-item, a direct depthwise work-item owns a
  /// block of output rows, and panels are staged 128 rows deep so that a
  /// work-item's rows and the panel stay in L1 together; elsewhere tiles
  /// shrink until a product has 64 work-items per compute unit. The
  /// measurements behind each choice: bench/HISTORY.md, "Kernel options".
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
      // A depthwise prologue on maps wider than 16 in blocks of whole rows.
      o.gemm.depthwiseRowBlocks = 17;
      // 1x1 convs and MatMuls up to 64 deep stream their output (an
      // expansion's C is 6x its input); forDevice turns it off on narrower
      // vector units.
      o.gemm.streamDepth = 64;
      // A depthwise prologue's rows prefetch the next work-group's.
      o.gemm.prefetchRows = true;
      o.gemm.cores = target.computeUnits;
      // Transposes, slices and Concats a row per step.
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
  /// float16 is two registers (bench/HISTORY.md, "Kernel options").
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
