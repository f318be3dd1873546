/// OpenCL C for the pointwise kernel family: any connected group of
/// elementwise and broadcast ops, one work-item per element of the output,
/// composing each member's scalar semantics from the op catalog. Inputs are
/// read through broadcasting index maps; every value the group's outside
/// reads is written. Element types: float32, float64 (cl_khr_fp64), bool
/// (stored as uchar) and the 8- to 64-bit integers, which compute in their
/// own type with C's integer arithmetic (division never traps: a quotient
/// by zero is 0).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fusec/engine/Graph.h"
#include "fusec/engine/OpCatalog.h"

namespace fusec::codegen {

/// A constant the code generator derives from the graph's (a conv's
/// weights in another basis), computed when its values are first read:
/// planning emits a kernel several times and needs only its size, so the
/// arithmetic is done once, for the kernel that runs. Safe to read from
/// several threads.
class DerivedConstant {
 public:
  /// `fill` writes the values into a zeroed tensor of `dtype` and `shape`;
  /// it keeps what it reads alive itself (capture shared pointers).
  DerivedConstant(DType dtype, Shape shape, std::function<void(Tensor&)> fill)
      : dtype_(dtype), shape_(std::move(shape)), fill_(std::move(fill)) {}

  size_t byteSize() const { return static_cast<size_t>(shapeNumel(shape_)) * dtypeSize(dtype_); }

  /// The values, computed on the first call.
  const std::shared_ptr<const Tensor>& tensor() const {
    std::call_once(once_, [this] {
      auto t = std::make_shared<Tensor>(dtype_, shape_);
      fill_(*t);
      fill_ = nullptr;  // release what it captured
      tensor_ = std::move(t);
    });
    return tensor_;
  }

 private:
  DType dtype_;
  Shape shape_;
  mutable std::function<void(Tensor&)> fill_;
  mutable std::once_flag once_;
  mutable std::shared_ptr<const Tensor> tensor_;
};

struct KernelSource {
  std::string name;             ///< the OpenCL kernel's name
  std::string source;           ///< complete OpenCL C 1.2 text
  std::vector<ValueId> inputs;  ///< buffer arguments, in order
  std::vector<ValueId> outputs; ///< buffer arguments after the inputs
  /// Constants the code generator derives from the graph's (a conv's
  /// weights in another basis): buffer arguments after the outputs,
  /// uploaded with the graph's constants.
  std::vector<std::shared_ptr<const DerivedConstant>> derived;
  size_t globalSize = 0;        ///< work-items: elements of the output
  size_t localSize = 0;         ///< work-group size; 0 leaves it to the runtime
  size_t localMemBytes = 0;     ///< local memory a work-group declares
};

/// Generates the kernel for `members` (in topological order). Errors are
/// `unsupported` when the group has an op or type this family cannot run.
/// With `rowLoops` (for CPUs), a group with a broadcast operand, or with a
/// Concat before it, computes rows of the trailing dims in a loop per
/// work-item (the rows form, RowPieces in ElementwiseEmitter.h).
Expected<KernelSource> emitPointwise(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                     const std::string& name, const std::string& comment, bool rowLoops = false);

}  // namespace fusec::codegen
