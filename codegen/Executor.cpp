/// Graph execution on an OpenCL device; see Executor.h.
#include "fusec/codegen/Executor.h"

#include <map>
#include <set>

#include "fusec/codegen/Gemm.h"
#include "fusec/codegen/IndexMap.h"
#include "fusec/codegen/Pool.h"
#include "fusec/codegen/RowReduce.h"

namespace fusec::codegen {
namespace {

size_t bytesOf(const TensorType& t) { return static_cast<size_t>(shapeNumel(t.staticShape())) * dtypeSize(t.dtype); }

/// A C identifier from a node name (kernel names must be identifiers).
/// Reshape-likes keep the bytes and their order: the result can be a view
/// of the operand's buffer instead of a copy kernel.
bool isView(const Graph& g, const std::vector<NodeRef>& group) {
  if (group.size() != 1) return false;
  const NodeData& d = g.node(group[0]);
  static const std::set<std::string> kViews = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"};
  return d.domain.empty() && kViews.count(d.op.str()) && !d.inputs.empty() && d.inputs[0] != kNoValue &&
         d.outputs.size() == 1 && g.value(d.outputs[0]).type.isStatic() && g.value(d.inputs[0]).type.isStatic() &&
         g.value(d.outputs[0]).type.dtype == g.value(d.inputs[0]).type.dtype;
}

std::string identifier(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "n_" + out;
  return out;
}

}  // namespace

Expected<KernelSource> emitKernel(const Graph& g, const std::vector<NodeRef>& group, const OpCatalog& catalog,
                                  const std::string& name, const std::string& comment, const KernelOptions& options) {
  if (isGemmGroup(g, group)) return emitGemm(g, group, catalog, name, comment, options.gemm);
  if (isPoolGroup(g, group)) return emitPool(g, group, catalog, name, comment);
  if (isRowReduction(g, group.back())) return emitRowReduce(g, group, catalog, name, comment);
  if (group.size() == 1 && isIndexMapOp(g, group.front())) return emitIndexMap(g, group, name, comment);
  return emitPointwise(g, group, catalog, name, comment);
}

std::vector<KernelGroup> planGroups(const Plan& plan) {
  std::vector<KernelGroup> groups;
  for (const Group& grp : plan.groups) groups.emplace_back(grp.nodes, grp.name);
  return groups;
}

std::vector<KernelGroup> singleNodeGroups(const Graph& g) {
  std::vector<KernelGroup> groups;
  Expected<std::vector<NodeRef>> order = g.topologicalOrder();
  size_t index = 0;
  for (NodeRef n : order ? order.value() : g.nodes()) {
    const NodeData& d = g.node(n);
    groups.emplace_back(std::vector<NodeRef>{n}, "k" + std::to_string(index++) + "_" + identifier(d.name.empty() ? d.op.str() : d.name));
  }
  return groups;
}

Expected<DeviceProgram> DeviceProgram::build(Device& device, const Graph& g, const std::vector<KernelGroup>& groups,
                                             const OpCatalog& catalog, const KernelOptions& options) {
  DeviceProgram p(device, g);
  // Generate every kernel first: which values each one reads and writes.
  size_t index = 0;
  for (const KernelGroup& group : groups) {
    if (isView(g, group.nodes)) {
      const NodeData& d = g.node(group.nodes[0]);
      p.views_[d.outputs[0]] = p.resolve(d.inputs[0]);
      continue;
    }
    std::string ops;
    for (NodeRef n : group.nodes) ops += (ops.empty() ? "" : ", ") + g.node(n).op.str();
    const std::string name =
        group.name.empty() ? "k" + std::to_string(index) + "_" + g.node(group.nodes.back()).op.str() : identifier(group.name);
    ++index;
    Expected<KernelSource> k = emitKernel(g, group.nodes, catalog, name, "fusec kernel " + name + ": " + ops, options);
    if (!k) return k.error();
    p.kernels_.push_back(std::move(k.value()));
  }
  // Liveness: the last kernel reading each value (through its views).
  std::map<ValueId, size_t> lastUse;
  for (size_t s = 0; s < p.kernels_.size(); ++s)
    for (ValueId v : p.kernels_[s].inputs) lastUse[p.resolve(v)] = s;
  std::set<ValueId> pinned;  // read back after the run
  for (ValueId v : g.outputs()) pinned.insert(p.resolve(v));
  // Constants once; graph inputs get their own buffers, filled per run.
  for (const KernelSource& k : p.kernels_)
    for (ValueId input : k.inputs) {
      const ValueId v = p.resolve(input);
      if (p.constants_.count(v)) continue;
      if (g.isConstant(v)) {
        Expected<Buffer> b = device.upload(*g.value(v).constant);
        if (!b) return b.error();
        p.memory_.constants += b->bytes();
        p.constants_.emplace(v, std::move(b.value()));
      } else if (g.value(v).isGraphInput) {
        if (!g.value(v).type.isStatic()) return Error{"input `" + g.value(v).name + "` has no static shape"};
        Expected<Buffer> b = device.allocate(std::max<size_t>(bytesOf(g.value(v).type), 1));
        if (!b) return b.error();
        p.memory_.inputs += b->bytes();
        p.constants_.emplace(v, std::move(b.value()));
      }
    }
  // Intermediate values: a slot each, reusing the smallest free slot that
  // fits once its previous value is dead. Graph outputs are never freed.
  std::multimap<size_t, size_t> free;  // bytes -> slot
  std::vector<size_t> slotBytes;
  for (size_t s = 0; s < p.kernels_.size(); ++s) {
    const KernelSource& k = p.kernels_[s];
    for (ValueId v : k.inputs)
      if (!p.constants_.count(p.resolve(v)) && !p.slotOf_.count(p.resolve(v)))
        return Error{"value `" + g.value(v).name + "` is read before it is computed"};
    for (ValueId v : k.outputs) {
      const size_t bytes = std::max<size_t>(bytesOf(g.value(v).type), 1);
      p.memory_.withoutReuse += bytes;
      auto it = free.lower_bound(bytes);
      if (it != free.end()) {
        p.slotOf_[v] = it->second;
        free.erase(it);
      } else {
        p.slotOf_[v] = slotBytes.size();
        slotBytes.push_back(bytes);
      }
    }
    auto release = [&](ValueId v) {
      if (pinned.count(v)) return;
      auto slot = p.slotOf_.find(v);
      if (slot != p.slotOf_.end()) free.emplace(slotBytes[slot->second], slot->second);
    };
    std::set<ValueId> read;
    for (ValueId v : k.inputs) read.insert(p.resolve(v));
    for (ValueId v : read)
      if (lastUse[v] == s) release(v);
    for (ValueId v : k.outputs)
      if (!lastUse.count(v)) release(v);  // written but never read by a later kernel
  }
  for (size_t bytes : slotBytes) {
    Expected<Buffer> b = device.allocate(bytes);
    if (!b) return b.error();
    p.memory_.peak += bytes;
    p.slots_.push_back(std::move(b.value()));
  }
  p.memory_.buffers = p.slots_.size();
  for (const KernelSource& k : p.kernels_) {
    Expected<void*> kernel = device.kernel(k.source, k.name);
    if (!kernel) return kernel.error();
    p.handles_.push_back(kernel.value());
  }
  return p;
}

ValueId DeviceProgram::resolve(ValueId v) const {
  for (auto it = views_.find(v); it != views_.end(); it = views_.find(v)) v = it->second;
  return v;
}

Buffer* DeviceProgram::bufferOf(ValueId v) {
  v = resolve(v);
  if (auto it = constants_.find(v); it != constants_.end()) return &it->second;
  if (auto it = slotOf_.find(v); it != slotOf_.end()) return &slots_[it->second];
  return nullptr;
}

Expected<DeviceRun> DeviceProgram::run(const std::vector<Tensor>& inputs) {
  const Graph& g = *g_;
  if (inputs.size() != g.inputs().size())
    return Error{"model takes " + std::to_string(g.inputs().size()) + " inputs, got " + std::to_string(inputs.size())};
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ValueId v = g.inputs()[i];
    auto it = constants_.find(v);
    if (it == constants_.end()) continue;  // read by no kernel
    if (inputs[i].shape() != g.value(v).type.staticShape() || inputs[i].dtype() != g.value(v).type.dtype)
      return Error{"input `" + g.value(v).name + "` must be " + std::string(dtypeName(g.value(v).type.dtype)) + " " +
                   shapeToString(g.value(v).type.staticShape()) + ", got " + shapeToString(inputs[i].shape())};
    if (Status st = device_->write(it->second, inputs[i]); !st) return st.error();
  }
  for (size_t s = 0; s < kernels_.size(); ++s) {
    const KernelSource& k = kernels_[s];
    std::vector<KernelArg> args;  // inputs, then outputs
    for (ValueId v : k.inputs) args.push_back(KernelArg::of(*bufferOf(v)));
    for (ValueId v : k.outputs) args.push_back(KernelArg::of(*bufferOf(v)));
    if (Status st = device_->launch(handles_[s], args, k.globalSize, k.name, k.localSize); !st) return st.error();
  }
  DeviceRun run;
  Expected<std::vector<std::pair<std::string, double>>> times = device_->finish();
  if (!times) return times.error();
  run.kernelTimes = std::move(times.value());
  for (ValueId v : g.outputs()) {
    const TensorType& type = g.value(v).type;
    const ValueId source = resolve(v);  // outputs that view an input or a constant are read on the host
    if (auto i = std::find(g.inputs().begin(), g.inputs().end(), source); i != g.inputs().end()) {
      const Tensor& in = inputs[static_cast<size_t>(i - g.inputs().begin())];
      run.outputs.push_back(source == v ? in : in.reshaped(type.staticShape()));
    } else if (g.isConstant(source)) {
      const Tensor& c = *g.value(source).constant;
      run.outputs.push_back(source == v ? c : c.reshaped(type.staticShape()));
    } else if (Buffer* b = bufferOf(v)) {
      Tensor t(type.dtype, type.staticShape());
      if (Status st = device_->download(*b, t); !st) return st.error();
      run.outputs.push_back(std::move(t));
    } else {
      return Error{"graph output `" + g.value(v).name + "` was not computed"};
    }
  }
  return run;
}

Expected<DeviceRun> runOnDevice(Device& device, const Graph& g, const std::vector<KernelGroup>& groups,
                                const OpCatalog& catalog, const std::vector<Tensor>& inputs,
                                const KernelOptions& options) {
  Expected<DeviceProgram> program = DeviceProgram::build(device, g, groups, catalog, options);
  if (!program) return program.error();
  return program->run(inputs);
}

}  // namespace fusec::codegen
