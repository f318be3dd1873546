/// Instances of a rule: small concrete graphs that its pattern matches, for
/// `fusec verify`. An instance is generated from the pattern itself: one op
/// picked from each alternative or class, a repetition length, optional
/// operands present or absent, values for the attributes the pattern binds
/// and for those it leaves free (`keepdims`, `axis`, ... that it does not
/// mention), operand shapes from what each op takes (Conv weights from the
/// input's channels, broadcast operands as suffixes, size-1 and scalar
/// dims), and data biased toward corners (zeros, negative and large values,
/// epsilon-sized variances, the numbers the guard compares with). Each
/// draw is typed by ONNX's inference; a draw the ops reject, or one the
/// rule's matcher and guard do not accept as a whole, is discarded and the
/// reason counted.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "fusec/engine/Graph.h"
#include "fusec/engine/RuleSet.h"
#include "fusec/engine/Tensor.h"

namespace fusec {

/// How large and how varied instances may be; shrinking lowers them.
struct InstanceLimits {
  InstanceLimits() = default;
  InstanceLimits(int rank, int64_t dim, int repeat, bool simple)
      : maxRank(rank), maxDim(dim), maxRepeat(repeat), simpleValues(simple) {}
  int maxRank = 5;            ///< Conv and BatchNormalization draw volumes (rank 5); other ops rank 4 at most
  int64_t maxDim = 5;
  int maxRepeat = 3;          ///< longest repetition chain (`Elementwise+`)
  bool simpleValues = false;  ///< data only from {0, 1, -1, 2, 0.5}
  /// Subnormal numbers among the special values. Off for kernels built to
  /// flush them to zero (kKernelBuildOptions: -cl-denorms-are-zero), where
  /// a subnormal times inf is NaN and floor(-1e-40) is -0.
  bool subnormals = true;
  /// Numbers that inputs bound to these pattern names should hold (a
  /// symbolic proof's separating values): mostly held, element for element.
  std::map<std::string, double> witness;
};

struct Instance {
  Graph graph;
  std::vector<Tensor> inputs;   ///< one per graph input, in order
  std::vector<NodeRef> matched; ///< the nodes generated for the pattern
  /// What this draw chose where the pattern leaves a choice: the element
  /// type, each alternative op, a chain's length, an optional operand there
  /// or not, a flag attribute's value, readers outside the pattern. `verify`
  /// draws until the instances it checked cover every choice it has seen.
  std::set<std::string> features;
  /// Input and constant elements plus nodes: what shrinking minimizes.
  int64_t size() const;

  /// Leaves whose data is still to be drawn (generateInstance with
  /// `Data::Deferred`): an input's tensor, or a constant too large for type
  /// inference to read, of the right shape and zero until drawData().
  struct PendingData {
    size_t input = 0;                  ///< index in `inputs`, when `constant` is null
    std::shared_ptr<Tensor> constant;  ///< the tensor the graph's constant shares
    std::function<Tensor()> draw;
  };
  std::vector<PendingData> pending;
  /// Draws the pending data: the same numbers whenever it is called (each
  /// leaf has its own seed, drawn with the structure).
  void drawData();
};

/// When a leaf's data is drawn. Most draws are discarded by the rule's guard,
/// which reads shapes, attributes and the few constants named in `value()` or
/// `const()`: `Deferred` leaves the other leaves' data to Instance::drawData,
/// so a discarded draw costs its structure only.
enum class Data { Drawn, Deferred };

/// One attempt; an error says why the draw was discarded (an op rejected its
/// operands, the guard failed, ...). The instance and its data do not depend
/// on `data`.
Expected<Instance> generateInstance(const Rule& rule, std::mt19937_64& rng, const InstanceLimits& limits = {},
                                    Data data = Data::Drawn);

}  // namespace fusec
