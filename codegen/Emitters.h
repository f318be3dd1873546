/// The emitters of the kernel families other than gemm (Gemm.h) and
/// pointwise (Pointwise.h): OpenCL C for one group each. Every emitter
/// takes the group's members in topological order and returns an
/// `unsupported` error for a group it cannot build; each family's file
/// registers the family that calls it (FamilyRegistry.h). Private to the
/// code generator and its tests: callers outside ask the families
/// (Families.h).
#pragma once

#include <optional>
#include <vector>

#include "fusec/codegen/Families.h"
#include "fusec/codegen/Pointwise.h"

namespace fusec::codegen {

// ---- window (pool_epilogue, and Convs the gemm family cannot tile)

/// OpenCL C for the window family: MaxPool (without its Indices result) and
/// AveragePool over 1 to 3 spatial dims, float32, with strides, pads,
/// dilations, ceil_mode and count_include_pad as ONNX defines them; one
/// work-item per output element looping over its window, followed by a
/// fused elementwise epilogue. Conv and ConvTranspose (grouped, strided,
/// dilated, padded, any number of spatial dims; output_padding,
/// output_shape, auto_pad; with bias) are the same shape of kernel: each
/// output element gathers the input positions its window reaches. (Convs
/// the gemm family can tile go there instead.) BatchNormalization in inference mode (a per-channel
/// affine map) uses the same frame. Global pools are row reductions
/// (row_reduce, below).
/// Whether `members` start with a pooling op this family generates.
bool isPoolGroup(const Graph& g, const std::vector<NodeRef>& members);

Expected<KernelSource> emitPool(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                const std::string& name, const std::string& comment);

// ---- row_reduce

/// OpenCL C for the row_reduce family: an optional elementwise prologue
/// feeding one reduction over a contiguous row: the innermost axis
/// (ReduceSum/Mean/Max/Min/L2/SumSquare, Softmax, LogSoftmax), the trailing
/// axes from `axis` (LayerNormalization, with its optional mean and
/// inverse-stddev results; Softmax/LogSoftmax before opset 13), or each
/// (image, channel) plane (global pools, InstanceNormalization). A row is
/// shared by up to 64 work-items that reduce through a local-memory tree;
/// short rows pack several to a work-group. Rows of up to 16 elements per
/// work-item are loaded once into registers (the prologue computed once);
/// mean and variance take two passes over them.
/// Whether `n` is a reduction this family generates.
bool isRowReduction(const Graph& g, NodeRef n);

/// Generates the kernel for `members` (topological order). The reduction
/// is last, or (a sum, mean, extreme, L2 norm or sum of squares keeping
/// its axis) followed by elementwise ops that read its result back along
/// the row (an epilogue: RMSNorm, `x / ||x||`): the kernel reduces the
/// row, then computes and writes the epilogue's last result in a second
/// pass, recomputing the prologue values it reads. Errors are
/// `unsupported` for groups outside the family.
/// With `rowPerWorkItem` (for CPUs, where barriers are emulated), a lone
/// sum, mean, extreme or sum of squares takes one work-item per row, read
/// as float16 vectors; so does Softmax, LogSoftmax or LayerNormalization
/// over the innermost axis whose row is a whole number of float4 vectors
/// and whose prologue has a vector form (the row computed once, kept in
/// the result's row for the later passes); other groups keep the
/// work-group per row.
Expected<KernelSource> emitRowReduce(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                     const std::string& name, const std::string& comment, bool rowPerWorkItem = false);

// ---- reduce

/// OpenCL C for the reduce family: a reduction over any set of axes
/// (ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare, keepdims,
/// noop_with_empty_axes) or the arg of one axis (ArgMax, ArgMin,
/// select_last_index), or Softmax/LogSoftmax/Hardmax over a non-innermost
/// axis (opset 13: one work-item per line of the axis writes the line),
/// with an optional elementwise prologue recomputed in the loop. One work-item per output element walks the reduced axes in
/// nested loops, so neighbouring work-items read neighbouring elements when
/// the innermost axis is kept (column reductions). Reductions over the
/// innermost axis alone go to the row_reduce family, which splits a row
/// across a work-group.
/// The axes `d` reduces over an input of rank `rank`, normalized and
/// sorted: Reduce*'s `axes` (attribute or constant operand; empty means
/// all unless noop_with_empty_axes), ArgMax/ArgMin's and, from opset 13,
/// Softmax/LogSoftmax/Hardmax's `axis`. nullopt when they are not known at
/// generation time (a computed operand), out of range, or (softmax before
/// opset 13) not one axis.
std::optional<std::vector<int64_t>> reducedAxes(const Graph& g, const NodeData& d, int64_t rank);

/// Whether `n` is a reduction or arg-reduction this family generates.
bool isAxisReduction(const Graph& g, NodeRef n);

/// Generates the kernel for `members` (topological order; the reduction
/// last). Errors are `unsupported` for groups outside the family.
/// With `vectorColumns` (for CPUs), a float sum, mean, sum of squares,
/// L1/L2 norm or extreme that keeps the innermost axis takes 4, 8 or 16
/// neighbouring outputs per work-item as one vector.
Expected<KernelSource> emitReduce(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                  const std::string& name, const std::string& comment, bool vectorColumns = false);

// ---- axis_layernorm

/// Whether `members` has this family's shape: Transpose, LayerNormalization,
/// Transpose (emitAxisLayerNorm says why when the details differ).
bool isAxisLayerNormGroup(const Graph& g, const std::vector<NodeRef>& members);

/// A LayerNormalization over one axis that is not the innermost, as
/// exporters write it (ConvNeXt's LayerNorm2d: a Transpose moving the
/// channels last, LayerNormalization over them, the inverse Transpose), as
/// one kernel reading and writing x's layout: each work-item walks the
/// normalized axis at its stride for one position of the others (with
/// `vectorColumns`, for CPUs, 4-16 neighbouring positions as one vector).
/// Errors are `unsupported` for groups outside the family.
Expected<KernelSource> emitAxisLayerNorm(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                         const std::string& name, const std::string& comment, bool vectorColumns);

// ---- squeeze_excite

/// Whether `members` has this family's shape: a channel mean
/// (GlobalAveragePool, or ReduceMean over every spatial axis) first, and
/// two Convs (emitSqueezeExcite says why when the details differ).
bool isSqueezeExciteGroup(const Graph& g, const std::vector<NodeRef>& members);

/// A squeeze-and-excitation gate as one kernel: the channel means of x
/// [N, C, spatial...], a 1x1 conv to S channels and elementwise ops on its
/// result, a 1x1 conv to E channels and elementwise ops on that (MobileNetV3's
/// ReLU and HardSigmoid, EfficientNet's SiLU and Sigmoid). One work-group per
/// image keeps the means and the squeezed vector in local memory; with
/// `oneWorkItem` (for CPUs) the group is one work-item with vector loads.
/// Errors are `unsupported` for groups outside the family.
Expected<KernelSource> emitSqueezeExcite(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                         const std::string& name, const std::string& comment, bool oneWorkItem);

// ---- index_map

/// OpenCL C for the index_map family: data movement, where each output
/// element is one input element (or a padding constant) at an index computed
/// from the output's coordinates. Elements are copied by their bits, so
/// every element type moves. Reshape, Flatten, Squeeze, Unsqueeze,
/// Transpose, Expand, Tile, Slice, Concat, Gather, GatherElements, Split,
/// DepthToSpace, SpaceToDepth, Trilu and Pad, one op or a group of them
/// composed into one index map (each result computed by walking back
/// through the members to the group's inputs); CumSum and Resize take a
/// kernel of their own. Shape operands must be constants and shapes static.
/// With `stridedRows` (for CPUs), a group whose one result is a strided
/// view of one input (Transpose, Slice, reshapes) is copied a row of the
/// result per step, its coordinates divided out once per row, and a lone
/// Concat or Split copies runs of its inputs or results in a loop.
bool isIndexMapOp(const Graph& g, NodeRef n);

Expected<KernelSource> emitIndexMap(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                    const std::string& name, const std::string& comment, bool stridedRows = false);

/// The data-movement members of a group as OpenCL C functions, for a kernel
/// that reads their results without storing them: `fetch<v>(i, ...)`
/// returns the bits of value v's element at linear index i (declared in
/// `functions`), walking back through the members' index maps to the
/// buffers `inputs` (kernel parameters `in<firstParam>`, ..., declared in
/// `params`; calls pass `args` after the index).
struct IndexMapFetches {
  std::string functions;
  std::vector<ValueId> inputs;
  std::string params;
  std::string args;
  DType type = DType::Undefined;  ///< the element type moved
  std::string bitsType;           ///< the unsigned type of its bits
};
Expected<IndexMapFetches> indexMapFetches(const Graph& g, const std::vector<NodeRef>& members, size_t firstParam);

// ---- attention

/// OpenCL C for the attention family: MatMul(Q, Kt), a constant scale (Mul
/// or Div), an optional additive mask, Softmax over the keys and MatMul
/// with V as one kernel. Each work-item computes a few query rows: it takes
/// the keys a block at a time, the block's scores as one vector (Kt's rows
/// are contiguous along the keys), and keeps a running maximum and sum
/// (online softmax), so the scores never leave registers; on a CPU
/// (AttentionForm::scoreRows) it keeps its rows' scores in private memory
/// and takes their maximum and sum once.
bool isAttentionGroup(const Graph& g, const std::vector<NodeRef>& members);

Expected<KernelSource> emitAttention(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                     const std::string& name, const std::string& comment, const AttentionForm& form = {});

// ---- contraction

/// OpenCL C for the contraction family: an Einsum, one work-item per output
/// element summing the product of its operands over the contracted letters
/// in nested loops (diagonals and broadcast ellipsis dims by their strides,
/// as EinsumGeometry gives them). A general fallback: plain matrix products
/// are MatMuls for the gemm family.
bool isEinsum(const Graph& g, NodeRef n);

Expected<KernelSource> emitEinsum(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                  const std::string& name, const std::string& comment);

}  // namespace fusec::codegen
