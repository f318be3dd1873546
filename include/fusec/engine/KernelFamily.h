/// Kernel families: the shapes of kernel code generation can build.
///
/// A family is declared here and implemented by the code generator
/// (codegen/Families.h), which hands the planner its registry. The planner
/// asks the family a rule names whether it can build each candidate group;
/// a group no family can build is never planned, and the reason reaches
/// the compile report and `fusec explain`. So what `check` and `compile`
/// accept is what runs: codegen decides legality, not the rule.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fusec/engine/Error.h"
#include "fusec/engine/Graph.h"
#include "fusec/engine/OpCatalog.h"
#include "fusec/engine/Target.h"

namespace fusec {

/// What one kernel of a family uses of the device, for legality against the
/// target's limits.
struct KernelResources {
  int64_t localMemBytes = 0;   ///< per work-group
  int64_t workGroupSize = 0;   ///< 0: left to the runtime
};

class KernelFamily {
 public:
  virtual ~KernelFamily() = default;
  /// The name rules use after `kernel`.
  virtual std::string_view name() const = 0;
  /// One sentence on the groups the family builds (for docs and `--help`).
  virtual std::string_view accepts() const = 0;
  /// Whether `group` has the family's shape (its head or tail op, its
  /// size): cheap, and canEmit may still refuse it.
  virtual bool claims(const Graph& g, const std::vector<NodeRef>& group, const OpCatalog& catalog) const = 0;
  /// Success when the family builds one kernel for `group` (topological
  /// order) that fits `target` and writes every value of the group read
  /// outside it; otherwise why not, phrased to follow "cannot build this
  /// group: ". Kernels are built for static shapes: while some of the
  /// group's shapes are symbolic (a model compiled without binding its
  /// input dims), only claims() is decided, and `run`, which binds them,
  /// plans again.
  virtual Status canEmit(const Graph& g, const std::vector<NodeRef>& group, const OpCatalog& catalog,
                         const Target& target) const = 0;
};

/// The families a code generator offers, in order of preference for a
/// single node that no rule fused.
class KernelFamilies {
 public:
  void add(std::unique_ptr<KernelFamily> family) { families_.push_back(std::move(family)); }
  const KernelFamily* find(std::string_view name) const;
  std::vector<std::string> names() const;
  const std::vector<std::unique_ptr<KernelFamily>>& all() const { return families_; }
  /// The first family that builds `group`; when none does, an error with
  /// the reasons of the families that claim it.
  Expected<const KernelFamily*> select(const Graph& g, const std::vector<NodeRef>& group, const OpCatalog& catalog,
                                       const Target& target) const;
  /// The name of select()'s family; empty when none builds `group`.
  std::string selectName(const Graph& g, const std::vector<NodeRef>& group, const OpCatalog& catalog,
                         const Target& target) const {
    Expected<const KernelFamily*> f = select(g, group, catalog, target);
    return f ? std::string(f.value()->name()) : std::string();
  }

 private:
  std::vector<std::unique_ptr<KernelFamily>> families_;
};

/// "op `X` has no kernel path: REASONS" (or "no kernel family takes it"
/// when `reasons` is empty).
std::string noFamilyMessage(const Graph& g, const std::vector<NodeRef>& group, const std::string& reasons);

}  // namespace fusec
