/// Graph execution on an OpenCL device; see Executor.h.
#include "fusec/codegen/Executor.h"

#include <map>

#include "fusec/codegen/RowReduce.h"
#include "fusec/codegen/IndexMap.h"
#include "fusec/codegen/Gemm.h"
#include "fusec/codegen/Pool.h"

namespace fusec::codegen {

Expected<KernelSource> emitKernel(const Graph& g, const std::vector<NodeRef>& group, const OpCatalog& catalog,
                                  const std::string& name, const std::string& comment, const KernelOptions& options) {
  if (isGemmGroup(g, group)) return emitGemm(g, group, catalog, name, comment, options.gemm);
  if (isPoolGroup(g, group)) return emitPool(g, group, catalog, name, comment);
  if (isRowReduction(g, group.back())) return emitRowReduce(g, group, catalog, name, comment);
  if (group.size() == 1 && isIndexMapOp(g, group.front())) return emitIndexMap(g, group, name, comment);
  return emitPointwise(g, group, catalog, name, comment);
}

std::vector<std::vector<NodeRef>> singleNodeGroups(const Graph& g) {
  std::vector<std::vector<NodeRef>> groups;
  Expected<std::vector<NodeRef>> order = g.topologicalOrder();
  for (NodeRef n : order ? order.value() : g.nodes()) groups.push_back({n});
  return groups;
}

Expected<DeviceRun> runOnDevice(Device& device, const Graph& g, const std::vector<std::vector<NodeRef>>& groups,
                                const OpCatalog& catalog, const std::vector<Tensor>& inputs,
                                const KernelOptions& options) {
  if (inputs.size() != g.inputs().size())
    return Error{"model takes " + std::to_string(g.inputs().size()) + " inputs, got " + std::to_string(inputs.size())};
  std::map<ValueId, Buffer> buffers;
  std::map<ValueId, const Tensor*> host;  // inputs and constants, for outputs that are neither computed
  for (size_t i = 0; i < inputs.size(); ++i) host[g.inputs()[i]] = &inputs[i];
  auto ensure = [&](ValueId v) -> Status {
    if (buffers.count(v)) return Status::success();
    const Tensor* t = nullptr;
    if (auto it = host.find(v); it != host.end()) t = it->second;
    else if (g.isConstant(v)) t = g.value(v).constant.get();
    if (!t) return Error{"value `" + g.value(v).name + "` is read before it is computed"};
    Expected<Buffer> b = device.upload(*t);
    if (!b) return b.error();
    buffers.emplace(v, std::move(b.value()));
    return Status::success();
  };
  size_t index = 0;
  for (const std::vector<NodeRef>& group : groups) {
    std::string ops;
    for (NodeRef n : group) ops += (ops.empty() ? "" : ", ") + g.node(n).op.str();
    const std::string name = "k" + std::to_string(index++) + "_" + g.node(group.back()).op.str();
    const std::string comment = "fusec kernel " + name + ": " + ops;
    Expected<KernelSource> k = emitKernel(g, group, catalog, name, comment, options);
    if (!k) return k.error();
    for (ValueId v : k->inputs)
      if (Status st = ensure(v); !st) return st.error();
    std::vector<KernelArg> args;
    for (ValueId v : k->inputs) args.push_back(KernelArg::of(buffers.at(v)));
    for (ValueId v : k->outputs) {
      const TensorType& t = g.value(v).type;
      Expected<Buffer> b = device.allocate(static_cast<size_t>(shapeNumel(t.staticShape())) * dtypeSize(t.dtype));
      if (!b) return b.error();
      buffers[v] = std::move(b.value());
      args.push_back(KernelArg::of(buffers.at(v)));
    }
    Expected<void*> kernel = device.kernel(k->source, k->name);
    if (!kernel) return kernel.error();
    if (Status st = device.launch(kernel.value(), args, k->globalSize, k->name, k->localSize); !st) return st.error();
  }
  DeviceRun run;
  Expected<std::vector<std::pair<std::string, double>>> times = device.finish();
  if (!times) return times.error();
  run.kernelTimes = std::move(times.value());
  for (ValueId v : g.outputs()) {
    const TensorType& type = g.value(v).type;
    if (auto it = buffers.find(v); it != buffers.end()) {
      Tensor t(type.dtype, type.staticShape());
      if (Status st = device.download(it->second, t); !st) return st.error();
      run.outputs.push_back(std::move(t));
    } else if (auto h = host.find(v); h != host.end()) {
      run.outputs.push_back(*h->second);
    } else if (g.isConstant(v)) {
      run.outputs.push_back(*g.value(v).constant);
    } else {
      return Error{"graph output `" + g.value(v).name + "` was not computed"};
    }
  }
  return run;
}

}  // namespace fusec::codegen
