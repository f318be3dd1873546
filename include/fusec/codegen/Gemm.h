/// OpenCL C for the gemm_epilogue family: MatMul (numpy semantics: batched,
/// broadcast batch dims, vector operands) or Gemm (transposes, alpha, beta,
/// a broadcast addend), float32, followed by an elementwise epilogue (bias,
/// activation, residual add) applied to each result before it is stored.
///
/// Register tiling: each work-item computes `rows` x `width` results held in
/// `float<width>` accumulators, one vector load of B and `rows` broadcasts of
/// A per step of K. PoCL vectorizes loop kernels only through explicit vector
/// types (a scalar loop reached 30 of 230 GFLOP/s on the build machine).
#pragma once

#include <functional>

#include "fusec/codegen/Pointwise.h"

namespace fusec::codegen {

/// The tile each work-item computes: `rows` of the result (1..16) by `width`
/// columns (4, 8 or 16: the vector width).
/// With `localRows` > 0, that many work-items form a work-group sharing
/// one column panel of B, staged in local memory `depth` rows at a time.
/// The defaults were the best of those tried by `build/bench/kernel_roofline`
/// on an AVX-512 build machine's PoCL (40-51 % of the measured FMA peak on
/// the BERT-base layer's shapes); KernelOptions::forDevice fits `rows` to
/// the vector registers of the CPU the kernels run on (6 with AVX2).
struct GemmTiling {
  int rows = 12;
  int width = 16;
  int localRows = 16;
  int depth = 256;
  /// Depthwise convs get their own direct kernel; false tiles them as an
  /// implicit GEMM like other convs (kernel_roofline compares the two).
  bool directDepthwise = true;
  /// Matrix-vector products with contiguous weight rows (a batch-1 Linear,
  /// a 1x1 conv on one pixel) get a kernel of their own: split-K across a
  /// work-group reducing in local memory, or (gemvSplitK false, for CPUs)
  /// a few rows per work-item read as vectors.
  bool gemv = true;
  /// Tiles shrink (rows first, then width) until the product has this many
  /// work-items: a GPU needs thousands to fill its compute units.
  int64_t minWorkItems = 0;
  /// The direct depthwise kernel gathers the row segment its taps read
  /// once where they cross the row's edges; false: each tap gathers its
  /// own lanes (kernel_roofline compares the two).
  bool depthwiseRowGather = true;
  /// Products with K <= shallowDepth share a panel among shallowLocalRows
  /// work-items instead (0: not staged). Where local memory is emulated
  /// (PoCL on a CPU), a wide work-group with barriers costs more than a
  /// short panel's reuse saves: MobileNetV2's 1x1 convs (K 16-192) ran 2-6x
  /// slower in groups of 8-16 than in pairs. KernelOptions::forTarget sets it.
  /// shallowLocalRows 1: one work-item owns the panel (loads it once into
  /// local memory, then computes every row tile of its share of M from it,
  /// without barriers), as it owns a prologue's panel (stagedPrologue).
  int64_t shallowDepth = 0;
  int shallowLocalRows = 2;
  bool gemvSplitK = true;
  /// A strided or padded conv's column panels lie within one output row
  /// (where at most a quarter of the lanes fall past the row), so B's rows
  /// are input-row segments loaded as vectors; false: W outputs in a row of
  /// the flattened output, gathered (kernel_roofline compares the two).
  bool convRowPanels = true;
  /// A depthwise prologue (a depthwise conv computing a 1x1 conv's input
  /// panel) is staged once per work-group of row tiles in local memory;
  /// false (where local memory is emulated): each work-item computes its
  /// column panel's rows for all channels itself, then every row tile of
  /// its share of M from them, without barriers.
  bool stagedPrologue = true;
  /// Above 0, with stagedPrologue false and depthwiseOwnedBytes above 0: a
  /// depthwise prologue whose output rows are at least this wide is built
  /// as blocks of whole output rows per work-item (their input rows copied,
  /// padded, into local memory once per channel) instead of 16-column
  /// panels computed from global memory. KernelOptions::forTarget sets 17
  /// on CPUs (on 14-wide maps the panels were faster).
  int64_t depthwiseRowBlocks = 0;
  /// Above 0 (where local memory is emulated, as on a CPU): a direct
  /// depthwise work-item owns a block of output rows: it copies their input
  /// rows, zero-padded, into this many bytes of local memory once, then
  /// computes the block with every tap one vector load and no edge tests.
  /// 0: each work-item computes one row segment straight from global memory.
  int64_t depthwiseOwnedBytes = 0;
  /// Above 0: a 3x3 stride-1 conv on maps at least 23 wide (one group, no
  /// prologue, constant weights) is computed by Winograd's F(2x2, 3x3):
  /// 16 products of output channels x input channels, each 2.25x fewer
  /// multiplies than the window's; a work-item transforms its 16 tiles'
  /// input into this many bytes of local memory at most (16 x C float16s)
  /// and computes every output channel from them (emitWinograd).
  /// KernelOptions::forTarget sets half the local memory on CPUs.
  int64_t winogradLocalBytes = 0;
  /// Column panels a work-item owning its panel computes at once (1 or 2):
  /// with 2, tiles of rows x 2*width, each broadcast of A feeding two FMAs.
  /// KernelOptions::forDevice sets 2 where the accumulators fit the
  /// registers (AVX-512: 12 rows x 2 float16).
  int panels = 1;
  /// A work-item owning a column panel with at most width / 2 results (the
  /// last panel of a 7x7 map holds 1 of 16 columns, a 14x14 map's 4)
  /// computes its tiles at half width from the panel's first half.
  /// KernelOptions::forDevice sets it where half the width is still a
  /// whole native vector (AVX2's 8 of 16 lanes).
  bool narrowTail = false;
  /// Products at most this deep whose owned panel is a plain load (a 1x1
  /// conv, a MatMul; not a gathered window or a prologue) give each
  /// work-group one row tile: consecutive work-groups then walk along N over
  /// the same rows, so each core writes a few long runs of C instead of one
  /// short segment in every row of M, and a shallow product is bound by
  /// those stores, not its FMAs. Reloading the K x W panel per tile costs
  /// 1/TM of the tile's loads. 0: M is split only to make work-groups.
  /// KernelOptions::forTarget sets it on CPUs.
  int64_t streamDepth = 0;
  /// A depthwise prologue's panel reads KH short row segments of each of K
  /// channel planes, runs too short and too many for the hardware
  /// prefetchers: true, each row read also prefetches the next
  /// work-group's segment of the same row (where the compiler has a
  /// prefetch). KernelOptions::forTarget sets it on CPUs.
  bool prefetchRows = false;
  /// The cores a CPU device runs work-groups on (the target's compute
  /// units; 0 elsewhere): a large product whose owned panels make a count
  /// of work-groups the cores do not divide, fewer than 8 per core, splits
  /// M further until they do (see emitGemm).
  int64_t cores = 0;
};

/// Whether `members` start with a MatMul, Gemm or Conv this family
/// generates (after a Mul scaling the conv's input channels, its prologue).
bool isGemmGroup(const Graph& g, const std::vector<NodeRef>& members);

/// The MatMul, Gemm or Conv whose product the group's kernel tiles: the
/// first member, or the second after a channel-scale Mul.
NodeRef gemmHead(const Graph& g, const std::vector<NodeRef>& members);

Expected<KernelSource> emitGemm(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                const std::string& name, const std::string& comment, const GemmTiling& tiling = {});

/// Whether `members` are two or more products of one input (MatMuls,
/// Gemms or Convs whose first operand is the first member's), each with
/// elementwise ops on its result alone: the Q, K and V projections of
/// attention, the expand convs of SqueezeNet's fire modules.
bool isHorizontalGemmGroup(const Graph& g, const std::vector<NodeRef>& members);

/// The gemm_horizontal family: the products of a horizontal group as one
/// launch. Each product is tiled as emitGemm tiles it alone (`tilingFor` its
/// MatMul or Gemm) into a function; the kernel hands each its range of
/// work-groups (or work-items, for untiled panels), so one launch does what
/// the separate kernels would, with A's rows read while in cache. Products
/// that emitGemm would tile in different work-groups, matrix-vector
/// products, depthwise convs (computed directly) and convs with a prologue
/// or a shortcut are refused.
Expected<KernelSource> emitGemmHorizontal(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                          const std::string& name, const std::string& comment,
                                          const std::function<GemmTiling(const NodeData&)>& tilingFor);

}  // namespace fusec::codegen
