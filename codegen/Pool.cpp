/// The window family (pool_epilogue, direct Conv); see Emitters.h.
#include "Emitters.h"

#include <functional>
#include <sstream>

#include "ElementwiseEmitter.h"
#include "fusec/engine/Window.h"
#include "FamilyRegistry.h"

namespace fusec::codegen {

bool isPoolGroup(const Graph& g, const std::vector<NodeRef>& members) {
  if (members.empty()) return false;
  const NodeData& d = g.node(members.front());
  return d.domain.empty() &&
         (d.op == "MaxPool" || d.op == "AveragePool" || d.op == "Conv" || d.op == "ConvTranspose" ||
          d.op == "BatchNormalization");
}

namespace {

/// A window kernel's frame: one work-item per element of `y` (the first
/// member's result, computed into `acc`), its operands, then the fused
/// elementwise epilogue's (parameters and statements).
struct WindowKernel {
  KernelSource source;
  std::string epilogueParams, epilogueBody;
};

Expected<WindowKernel> windowKernel(detail::Emitter& e, const std::vector<NodeRef>& members, ValueId y,
                                    const std::vector<ValueId>& operands, const std::string& name, const std::string& family) {
  Expected<detail::Emitter::Epilogue> epi = e.epilogue(members, y, family);
  if (!epi) return epi.error();
  WindowKernel w;
  w.source.name = name;
  w.source.inputs = operands;
  w.source.inputs.insert(w.source.inputs.end(), epi->inputs.begin(), epi->inputs.end());
  w.source.outputs = epi->outputs;
  const Shape ys = e.graph().value(y).type.staticShape();
  w.source.globalSize = static_cast<size_t>(shapeNumel(ys));
  e.bind(y, "acc");
  if (Status st = e.emitBody(epi->members, epi->inputs, ys, "i", w.epilogueParams, w.epilogueBody, operands.size(), false); !st)
    return st.error();
  return w;
}

/// Conv and ConvTranspose as a gather: each output element sums, over its
/// group's input channels and the kernel taps, the input positions its
/// window reaches (Conv: i = o * stride - padBegin + t * dilation;
/// ConvTranspose: o + padBegin = i * stride + t * dilation); bias and the
/// elementwise epilogue follow. Any number of spatial dims; the gemm family
/// takes the Convs it can tile.
/// A ConvTranspose that tiles its output exactly as a product (see
/// emitDirectConv): rows m = (output channel, taps) of the group's weights,
/// columns the input positions, a work-item kTileRows x kTileLanes of them.
constexpr int64_t kTileRows = 8, kTileLanes = 8;

Expected<KernelSource> emitConvTransposeTiles(const NodeData& d, const Shape& xs, const Shape& ws, const Shape& ys,
                                              int64_t group, bool hasBias, const std::string& name,
                                              const std::string& comment) {
  const size_t k = xs.size() - 2;
  const int64_t C = xs[1], Cg = C / group, Mg = ws[1], taps = shapeNumel(Shape(ws.begin() + 2, ws.end()));
  const int64_t M = Mg * taps, N = shapeNumel(Shape(xs.begin() + 2, xs.end())), Cout = ys[1];
  const int64_t MT = (M + kTileRows - 1) / kTileRows, NT = (N + kTileLanes - 1) / kTileLanes;
  const std::string iv = "int" + std::to_string(kTileLanes), vec = "float" + std::to_string(kTileLanes);
  static const char* kHex = "0123456789abcdef";
  KernelSource ks;
  ks.name = name;
  ks.inputs = {d.inputs[0], d.inputs[1]};
  if (hasBias) ks.inputs.push_back(d.inputs[2]);
  ks.outputs = {d.outputs[0]};
  ks.globalSize = static_cast<size_t>(xs[0] * group * MT * NT);
  std::ostringstream src;
  src << "// " << comment << "\n// ConvTranspose as a product: C[" << M << "x" << N << "] = W^T[" << M << "x" << Cg << "] * X[" << Cg
      << "x" << N << "] per image and group, each result stored at its tap's output; a work-item computes " << kTileRows
      << "x" << kTileLanes << ".\n" << detail::Emitter::prelude();
  src << "__kernel void " << name << "(\n    __global const float* restrict in0,\n    __global const float* restrict in1";
  if (hasBias) src << ",\n    __global const float* restrict in2";
  src << ",\n    __global float* restrict out0) {\n";
  src << "  const int t = get_global_id(0), nt = t % " << NT << ", mt = (t / " << NT << ") % " << MT << ", gi = (t / " << NT * MT
      << ") % " << group << ", img = t / " << NT * MT * group << ";\n";
  src << "  const int n0 = nt * " << kTileLanes << ", m0 = mt * " << kTileRows << ";\n";
  src << "  const __global float* x = in0 + (img * " << C << " + gi * " << Cg << ") * " << N << ";\n";
  src << "  const __global float* w = in1 + gi * " << Cg * M << ";\n";
  src << "  const " << iv << " n = min((" << iv << ")(n0) + (" << iv << ")(";
  for (int64_t j = 0; j < kTileLanes; ++j) src << (j ? ", " : "") << j;
  src << "), (" << iv << ")(" << N - 1 << "));\n";
  for (int64_t r = 0; r < kTileRows; ++r) src << "  " << vec << " acc" << r << " = (" << vec << ")(0.0f);\n";
  src << "  for (int ci = 0; ci < " << Cg << "; ++ci) {\n";
  src << "    const __global float* row = x + ci * " << N << ";\n";
  src << "    const " << vec << " bv = n0 + " << kTileLanes << " <= " << N << " ? vload" << kTileLanes << "(0, row + n0) : (" << vec
      << ")(";
  for (int64_t j = 0; j < kTileLanes; ++j) src << (j ? ", " : "") << "row[n.s" << kHex[j] << "]";
  src << ");\n";
  for (int64_t r = 0; r < kTileRows; ++r)
    src << "    acc" << r << " = fma((" << vec << ")(w[ci * " << M << " + min(m0 + " << r << ", " << M - 1 << ")]), bv, acc" << r
        << ");\n";
  src << "  }\n";
  // Each lane's input position, as coordinates; its output offset for tap (t0, t1, ...).
  const Shape inStrides = stridesOf(Shape(xs.begin() + 2, xs.end())), outStrides = stridesOf(Shape(ys.begin() + 2, ys.end())),
              kStrides = stridesOf(Shape(ws.begin() + 2, ws.end()));
  src << "  " << iv << " base = (" << iv << ")(0);\n";
  for (size_t q = 0; q < k; ++q)
    src << "  base += (n / " << inStrides[q] << ") % " << xs[q + 2] << " * " << ws[q + 2] * outStrides[q] << ";\n";
  src << "  const int valid = min(" << kTileLanes << ", " << N << " - n0);\n";
  for (int64_t r = 0; r < kTileRows; ++r) {
    src << "  if (m0 + " << r << " < " << M << ") {\n";
    src << "    const int m = m0 + " << r << ", co = gi * " << Mg << " + m / " << taps << ", tap = m % " << taps << ";\n";
    src << "    int at = (img * " << Cout << " + co) * " << shapeNumel(Shape(ys.begin() + 2, ys.end())) << ";\n";
    for (size_t q = 0; q < k; ++q)
      src << "    at += (tap / " << kStrides[q] << ") % " << ws[q + 2] << " * " << outStrides[q] << ";\n";
    src << "    const " << vec << " v = acc" << r << (hasBias ? " + in2[co]" : "") << ";\n";
    for (int64_t j = 0; j < kTileLanes; ++j)
      src << "    if (" << j << " < valid) out0[at + base.s" << kHex[j] << "] = v.s" << kHex[j] << ";\n";
    src << "  }\n";
  }
  src << "}\n";
  ks.source = src.str();
  return ks;
}

/// The most input channels a non-overlapping ConvTranspose's kernel
/// writes out one by one (a line each).
constexpr int64_t kUnrolledChannels = 1024;

Expected<KernelSource> emitDirectConv(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                      const std::string& name, const std::string& comment) {
  const NodeData& d = g.node(members.front());
  const bool transposed = d.op == "ConvTranspose";
  const std::string op = d.op.str();
  const ValueId x = d.inputs[0], y = d.outputs[0];
  const bool hasBias = d.inputs.size() > 2 && d.inputs[2] != kNoValue;
  std::vector<ValueId> operands = {x, d.inputs.size() > 1 ? d.inputs[1] : kNoValue};
  if (hasBias) operands.push_back(d.inputs[2]);
  for (ValueId v : operands) {
    if (v == kNoValue) return Error{op + " needs a weight", true};
    if (!g.value(v).type.isStatic() || g.value(v).type.dtype != DType::Float32)
      return Error{op + " on `" + g.value(v).name + "` (not float with a static shape) has no kernel path", true};
  }
  if (!g.value(y).type.isStatic()) return Error{"value `" + g.value(y).name + "` has no static shape", true};
  const Shape xs = g.value(x).type.staticShape(), ws = g.value(operands[1]).type.staticShape(),
              ys = g.value(y).type.staticShape();
  if (xs.size() < 3 || ws.size() != xs.size()) return Error{op + " needs input and weight of one rank >= 3", true};
  // Weights: ConvTranspose [C, M/group, k...]; Conv [M, C/group, k...].
  const int64_t group = d.attrInt("group", 1), C = xs[1];
  if (group <= 0 || C % group != 0 || (transposed ? ws[0] != C : ws[1] != C / group || ws[0] % group != 0))
    return Error{op + " weight does not match its input", true};
  const int64_t Cg = C / group, Mg = transposed ? ws[1] : ws[0] / group;
  const Shape spatial(xs.begin() + 2, xs.end()), kernel(ws.begin() + 2, ws.end());
  Expected<WindowGeometry> w =
      transposed ? transposedWindowGeometry(d, spatial, kernel) : windowGeometry(d, spatial, kernel, false);
  if (!w) return Error{op + " `" + d.name + "`: " + w.error().message, true};
  const size_t k = spatial.size();

  // A ConvTranspose that tiles its output exactly (kernel = stride along
  // every axis, no dilation, pads or output padding: U-Net's 2x2 stride-2
  // up-convolutions), alone in its group, is a product: for each input
  // position the Cg channels times the weights' [Cg, Mg x taps] rows. A
  // work-item computes kTileRows of those rows for kTileLanes neighbouring
  // input positions (a vector load per channel, a broadcast weight per row)
  // and stores each result at its tap's output. The per-output gather
  // (below, written out channel by channel) took U-Net's 128 -> 64 on 16x16
  // 2.96 ms, 6.5x its estimate.
  bool tiles = transposed && members.size() == 1;
  for (size_t q = 0; q < k; ++q)
    tiles &= kernel[q] == w->strides[q] && w->dilations[q] == 1 && w->padBegin[q] == 0 && w->out[q] == spatial[q] * kernel[q];
  if (tiles) return emitConvTransposeTiles(d, xs, ws, ys, group, hasBias, name, comment);

  detail::Emitter e(g, catalog);
  Expected<WindowKernel> wk = windowKernel(e, members, y, operands, name, op);
  if (!wk) return wk.error();
  KernelSource& ks = wk->source;
  const std::string &epiParams = wk->epilogueParams, &epiBody = wk->epilogueBody;

  std::ostringstream src;
  src << "// " << comment << "\n" << detail::Emitter::prelude();
  src << "__kernel void " << name << "(\n    __global const float* restrict in0,\n    __global const float* restrict in1";
  if (hasBias) src << ",\n    __global const float* restrict in2";
  if (!epiParams.empty()) src << ",\n    " << epiParams;
  for (size_t o = 0; o < ks.outputs.size(); ++o) src << ",\n    __global float* restrict out" << o;
  src << ") {\n  const int i = get_global_id(0);\n";
  src << detail::Emitter::coordinates(ys, "i", "  ");
  src << "  const int gi = c1 / " << Mg << ", mg = c1 % " << Mg << ";\n";
  // The epilogue on `acc` and the stores, ending the kernel.
  auto finish = [&]() -> Expected<KernelSource> {
    src << epiBody;
    for (size_t o = 0; o < ks.outputs.size(); ++o)
      src << "  out" << o << "[i] = " << (ks.outputs[o] == y ? std::string("acc") : e.vars().at(ks.outputs[o])) << ";\n";
    src << "}\n";
    ks.source = src.str();
    return ks;
  };
  src << "  float acc = " << (hasBias ? "in2[c1]" : "0.0f") << ";\n";
  // A ConvTranspose whose windows do not overlap (kernel <= stride along
  // every axis, no dilation: U-Net's 2x2 stride-2 up-convolutions): each
  // output reads one tap of one input position per channel, the same for
  // every channel. Written out channel by channel, without loops: PoCL
  // vectorizes a kernel across work-items only when it has none (U-Net's
  // 128 -> 64 up-convolution on 16x16: 20x its estimate with the loops).
  bool disjoint = transposed && Cg <= kUnrolledChannels;
  for (size_t q = 0; q < k; ++q) disjoint &= w->dilations[q] == 1 && kernel[q] <= w->strides[q];
  if (disjoint) {
    std::string ok = "1", at = "0", tap = "0";
    for (size_t q = 0; q < k; ++q) {
      const std::string c = "c" + std::to_string(q + 2), p = "p" + std::to_string(q), kk = "k" + std::to_string(q);
      src << "  const int " << kk << " = (" << c << " + " << w->padBegin[q] << ") % " << w->strides[q] << ", " << p << " = (" << c
          << " + " << w->padBegin[q] << ") / " << w->strides[q] << ";\n";
      ok += " && " + kk + " < " + std::to_string(kernel[q]) + " && " + p + " < " + std::to_string(spatial[q]);
      at = "(" + at + ") * " + std::to_string(spatial[q]) + " + " + p;
      tap = "(" + tap + ") * " + std::to_string(kernel[q]) + " + " + kk;
    }
    src << "  const int ok = " << ok << ";\n";
    src << "  const __global float* x = in0 + (c0 * " << C << " + gi * " << Cg << ") * " << w->inSize() << " + (ok ? " << at
        << " : 0);\n";
    src << "  const __global float* t = in1 + (gi * " << Cg << " * " << Mg << " + mg) * " << w->kernelSize() << " + (ok ? "
        << tap << " : 0);\n";
    src << "  float sum = 0.0f;\n";
    for (int64_t ci = 0; ci < Cg; ++ci)
      src << "  sum = fma(x[" << ci * w->inSize() << "], t[" << ci * Mg * w->kernelSize() << "], sum);\n";
    src << "  if (ok) acc += sum;\n";
    return finish();
  }
  src << "  for (int ci = 0; ci < " << Cg << "; ++ci) {\n";
  src << "    const __global float* plane = in0 + (c0 * " << C << " + gi * " << Cg << " + ci) * " << w->inSize() << ";\n";
  if (transposed)
    src << "    const __global float* taps = in1 + ((gi * " << Cg << " + ci) * " << Mg << " + mg) * " << w->kernelSize()
        << ";\n";
  else
    src << "    const __global float* taps = in1 + (c1 * " << Cg << " + ci) * " << w->kernelSize() << ";\n";
  std::string indent = "    ", at = "0", tap = "0";
  for (size_t q = 0; q < k; ++q) {
    const std::string c = "c" + std::to_string(q + 2), t = "t" + std::to_string(q), p = "p" + std::to_string(q),
                      kk = "k" + std::to_string(q);
    if (transposed && w->dilations[q] == 1) {
      // Only the taps k with (o + padBegin - k) a multiple of the stride
      // reach an input: from (o + padBegin) % stride, a stride apart (a
      // stride-2 2x2 ConvTranspose visits 1 tap in 4, with no division
      // left in the loop). The same count of them for every output
      // (kernel / stride, rounded up; those past the kernel left out):
      // PoCL vectorizes across work-items only loops of one trip count.
      // U-Net's 2x2 stride-2 up-convolutions were 20x their estimates.
      const int64_t trips = (kernel[q] + w->strides[q] - 1) / w->strides[q];
      const std::string t0 = "t" + std::to_string(q) + "0", j = "j" + std::to_string(q);
      src << indent << "const int " << t0 << " = (" << c << " + " << w->padBegin[q] << ") % " << w->strides[q] << ";\n";
      src << indent << "for (int " << j << " = 0; " << j << " < " << trips << "; ++" << j << ") {\n";
      indent += "  ";
      src << indent << "const int " << kk << " = " << t0 << " + " << j << " * " << w->strides[q] << ";\n";
      src << indent << "const int " << p << " = (" << c << " + " << w->padBegin[q] << " - " << kk << ") / " << w->strides[q]
          << ";\n";
      src << indent << "if (" << kk << " >= " << kernel[q] << " || " << p << " < 0) continue;\n";
    } else {
      src << indent << "for (int " << kk << " = 0; " << kk << " < " << kernel[q] << "; ++" << kk << ") {\n";
      indent += "  ";
      if (transposed) {
        src << indent << "const int " << t << " = " << c << " + " << w->padBegin[q] << " - " << kk << " * "
            << w->dilations[q] << ";\n";
        src << indent << "if (" << t << " < 0 || " << t << " % " << w->strides[q] << " != 0) continue;\n";
        src << indent << "const int " << p << " = " << t << " / " << w->strides[q] << ";\n";
      } else {
        src << indent << "const int " << p << " = " << c << " * " << w->strides[q] << " - " << w->padBegin[q] << " + "
            << kk << " * " << w->dilations[q] << ";\n";
        src << indent << "if (" << p << " < 0) continue;\n";
      }
    }
    src << indent << "if (" << p << " >= " << spatial[q] << ") continue;\n";
    at = "(" + at + ") * " + std::to_string(spatial[q]) + " + " + p;
    tap = "(" + tap + ") * " + std::to_string(kernel[q]) + " + " + kk;
  }
  src << indent << "acc += plane[" << at << "] * taps[" << tap << "];\n";
  for (size_t q = k; q-- > 0;) {
    indent.resize(indent.size() - 2);
    src << indent << "}\n";
  }
  src << "  }\n";
  return finish();
}

/// BatchNormalization's kernel parameters: X, scale, B, mean, var, the
/// epilogue's inputs, then the results.
std::string batchNormParams(const WindowKernel& wk) {
  std::string params;
  for (size_t k = 0; k < 5; ++k) params += (k ? "," : "") + std::string("\n    __global const float* restrict in") + std::to_string(k);
  if (!wk.epilogueParams.empty()) params += ",\n    " + wk.epilogueParams;
  for (size_t o = 0; o < wk.source.outputs.size(); ++o) params += ",\n    __global float* restrict out" + std::to_string(o);
  return params;
}

/// BatchNormalization in training mode (opset 14 and later): one work-group
/// per channel. Its lanes sum the channel (axis 1) over the batch and
/// spatial positions, then the squared deviations from that mean, each
/// through a local-memory tree; lane 0 writes the running statistics
/// (momentum-weighted), and all lanes normalize with the batch mean and
/// biased variance, then apply the epilogue.
Expected<KernelSource> emitBatchNormTraining(const Graph& g, const std::vector<NodeRef>& members,
                                             const OpCatalog& catalog, const std::string& name,
                                             const std::string& comment, float eps) {
  const NodeData& d = g.node(members.front());
  const ValueId y = d.outputs[0];
  const Shape xs = g.value(d.inputs[0]).type.staticShape();
  const int64_t channels = xs[1], batch = xs[0], spatial = shapeNumel(Shape(xs.begin() + 2, xs.end()));
  const float momentum = d.attrFloat("momentum", 0.9f);
  constexpr int kLanes = 64;

  detail::Emitter e(g, catalog);
  Expected<WindowKernel> wk = windowKernel(e, members, y, d.inputs, name, "BatchNormalization");
  if (!wk) return wk.error();
  KernelSource& ks = wk->source;
  // The running statistics, where used, follow the epilogue's results.
  std::vector<std::string> statistics;
  for (size_t o = 1; o < 3 && o < d.outputs.size(); ++o) {
    const ValueId v = d.outputs[o];
    if (v == kNoValue || (g.uses(v).empty() && !g.isGraphOutput(v))) continue;
    statistics.push_back("  out" + std::to_string(ks.outputs.size()) + "[c] = in" + std::to_string(o + 2) + "[c] * " +
                         detail::floatLiteral(momentum) + " + " + (o == 1 ? "mean" : "var") + " * " +
                         detail::floatLiteral(1.0 - momentum) + ";\n");
    ks.outputs.push_back(v);
  }
  ks.globalSize = static_cast<size_t>(channels) * kLanes;
  ks.localSize = kLanes;
  ks.localMemBytes = kLanes * sizeof(float);
  const std::string count = std::to_string(batch * spatial), lanes = std::to_string(kLanes);
  // Element j of channel c over the batch and spatial positions.
  const std::string element = "(j / " + std::to_string(spatial) + " * " + std::to_string(channels) + " + c) * " +
                              std::to_string(spatial) + " + j % " + std::to_string(spatial);
  auto treeSum = [&](const std::string& var) {
    return "  part[lane] = " + var + ";\n  barrier(CLK_LOCAL_MEM_FENCE);\n  for (int w = " + std::to_string(kLanes / 2) +
           "; w > 0; w >>= 1) {\n    if (lane < w) part[lane] += part[lane + w];\n"
           "    barrier(CLK_LOCAL_MEM_FENCE);\n  }\n";
  };
  std::ostringstream src;
  src << "// " << comment << "\n" << detail::Emitter::prelude();
  src << "__kernel __attribute__((reqd_work_group_size(" << kLanes << ", 1, 1))) void " << name << "(";
  src << batchNormParams(*wk);
  src << ") {\n  __local float part[" << kLanes << "];\n";
  src << "  const int c = get_group_id(0), lane = get_local_id(0);\n";
  // Moments of x - x[first] (the shifted-data algorithm): near a large
  // offset the differences are exact, where a mean rounded at the offset's
  // ulp would move every deviation by it.
  src << "  const float shift = in0[c * " << spatial << "];\n";
  src << "  float sum = 0.0f;\n  for (int j = lane; j < " << count << "; j += " << lanes << ") sum += in0[" << element
      << "] - shift;\n";
  src << treeSum("sum") << "  const float moved = part[0] / " << count
      << ".0f, mean = shift + moved;\n  barrier(CLK_LOCAL_MEM_FENCE);\n";
  src << "  float sq = 0.0f;\n  for (int j = lane; j < " << count << "; j += " << lanes << ") {\n"
      << "    const float dev = (in0[" << element << "] - shift) - moved;\n    sq += dev * dev;\n  }\n";
  src << treeSum("sq") << "  const float var = part[0] / " << count << ".0f;  // biased, as ONNX defines it\n";
  if (!statistics.empty()) {
    src << "  if (lane == 0) {\n";
    for (const std::string& line : statistics) src << "  " << line;
    src << "  }\n";
  }
  src << "  const float a = in1[c] * rsqrt(var + " << detail::floatLiteral(eps) << ");\n";
  src << "  for (int j = lane; j < " << count << "; j += " << lanes << ") {\n";
  src << "    const int i = " << element << ";\n";
  if (!wk->epilogueBody.empty()) src << detail::Emitter::coordinates(g.value(y).type.staticShape(), "i", "    ");
  src << "    const float acc = ((in0[i] - shift) - moved) * a + in2[c];\n";
  std::istringstream body(wk->epilogueBody);
  for (std::string line; std::getline(body, line);) src << "  " << line << "\n";
  for (size_t o = 0; o < ks.outputs.size() - statistics.size(); ++o)
    src << "    out" << o << "[i] = " << (ks.outputs[o] == y ? std::string("acc") : e.vars().at(ks.outputs[o])) << ";\n";
  src << "  }\n}\n";
  ks.source = src.str();
  return ks;
}

/// BatchNormalization in inference mode: a per-channel affine map of each
/// element (channel = axis 1), then the epilogue. Training mode: above.
Expected<KernelSource> emitBatchNorm(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                     const std::string& name, const std::string& comment) {
  const NodeData& d = g.node(members.front());
  const bool training = d.attrInt("training_mode", 0) != 0;
  // Before opset 14 training was told by the statistics results being used.
  for (size_t o = 1; o < d.outputs.size() && !training; ++o)
    if (d.outputs[o] != kNoValue && (!g.uses(d.outputs[o]).empty() || g.isGraphOutput(d.outputs[o])))
      return Error{"BatchNormalization in training mode before opset 14 has no kernel path", true};
  if (d.attrInt("spatial", 1) == 0) return Error{"BatchNormalization with spatial = 0 has no kernel path", true};
  if (d.inputs.size() != 5) return Error{"BatchNormalization needs scale, bias, mean and variance", true};
  const ValueId y = d.outputs[0];
  for (ValueId v : d.inputs)
    if (v == kNoValue || !g.value(v).type.isStatic() || g.value(v).type.dtype != DType::Float32)
      return Error{"BatchNormalization on other than float with static shapes has no kernel path", true};
  const Shape xs = g.value(d.inputs[0]).type.staticShape();
  if (xs.size() < 2) return Error{"BatchNormalization needs a channel axis", true};
  for (size_t k = 1; k < 5; ++k)
    if (shapeNumel(g.value(d.inputs[k]).type.staticShape()) != xs[1])
      return Error{"BatchNormalization with parameters not per channel has no kernel path", true};
  const float eps = d.attrFloat("epsilon", 1e-5f);
  if (training) return emitBatchNormTraining(g, members, catalog, name, comment, eps);

  detail::Emitter e(g, catalog);
  Expected<WindowKernel> wk = windowKernel(e, members, y, d.inputs, name, "BatchNormalization");
  if (!wk) return wk.error();
  KernelSource& ks = wk->source;
  const Shape ys = g.value(y).type.staticShape();
  std::ostringstream src;
  src << "// " << comment << "\n" << detail::Emitter::prelude();
  src << "__kernel void " << name << "(";
  src << batchNormParams(*wk);
  src << ") {\n  const int i = get_global_id(0);\n";
  src << detail::Emitter::coordinates(ys, "i", "  ");
  src << "  const float acc = (in0[i] - in3[c1]) * rsqrt(in4[c1] + " << detail::floatLiteral(eps)
      << ") * in1[c1] + in2[c1];\n";
  src << wk->epilogueBody;
  for (size_t o = 0; o < ks.outputs.size(); ++o)
    src << "  out" << o << "[i] = " << (ks.outputs[o] == y ? std::string("acc") : e.vars().at(ks.outputs[o])) << ";\n";
  src << "}\n";
  ks.source = src.str();
  return ks;
}

/// A lone 2-D MaxPool or AveragePool, a work-item per kLanes outputs along
/// a row: where the row segment all their windows reach lies inside the
/// input, each window row is read once with vector loads and its taps
/// picked out as lanes, so no load gathers; rows' edges take the scalar
/// path. The one-output-per-work-item kernel gathered every tap (PoCL
/// vectorizes across work-items: stride-2 windows are strided lanes).
constexpr int64_t kLanes = 8;

/// The floats of a window row the row kernel's kLanes outputs reach.
int64_t rowPoolSpan(const WindowGeometry& w) { return (kLanes - 1) * w.strides[1] + (w.kernel[1] - 1) * w.dilations[1] + 1; }

Expected<KernelSource> emitRowPool(const Graph& g, const NodeData& d, const WindowGeometry& w, const std::string& name,
                                   const std::string& comment) {
  const bool isMax = d.op == "MaxPool", includePad = d.attrInt("count_include_pad", 0) != 0;
  const Shape xs = g.value(d.inputs[0]).type.staticShape();
  const int64_t H = w.in[0], W = w.in[1], OH = w.out[0], OW = w.out[1], KH = w.kernel[0], KW = w.kernel[1];
  const int64_t SH = w.strides[0], SW = w.strides[1], DH = w.dilations[0], DW = w.dilations[1];
  const int64_t PH = w.padBegin[0], PW = w.padBegin[1];
  const int64_t span = rowPoolSpan(w), tiles = (OW + kLanes - 1) / kLanes;
  KernelSource ks;
  ks.name = name;
  ks.inputs = {d.inputs[0]};
  ks.outputs = {d.outputs[0]};
  ks.globalSize = static_cast<size_t>(xs[0] * xs[1] * OH * tiles);
  const std::string init = isMax ? "-INFINITY" : "0.0f", n = std::to_string(kLanes), vec = "float" + n;
  // Positions in the padding count for an average with count_include_pad
  // (not past it: ceil_mode windows can overhang).
  const std::string rowCounts = includePad ? "iy < " + std::to_string(H + w.padEnd[0]) : "iy >= 0 && iy < " + std::to_string(H);

  // The segment as vectors of 16, 8, 4, 2 floats and a last float (s0,
  // s1, ...), and element `at` of it as a component of one of them: taps
  // are lanes picked from registers (a private array of the segment made
  // PoCL spill it: no faster than the gathers).
  std::vector<std::string> loads;
  std::vector<std::pair<int64_t, int64_t>> pieces;  // offset, width
  for (int64_t at = 0; at < span;) {
    int64_t width = 16;
    while (width > span - at) width /= 2;
    const std::string var = "s" + std::to_string(pieces.size());
    loads.push_back(width == 1 ? "const float " + var + " = r[" + std::to_string(at) + "];"
                               : "const float" + std::to_string(width) + " " + var + " = vload" + std::to_string(width) +
                                     "(0, r + " + std::to_string(at) + ");");
    pieces.push_back({at, width});
    at += width;
  }
  auto element = [&](int64_t at) {
    static const char* kHex = "0123456789abcdef";
    for (size_t p = 0; p < pieces.size(); ++p)
      if (at < pieces[p].first + pieces[p].second) {
        const std::string var = "s" + std::to_string(p);
        return pieces[p].second == 1 ? var : var + ".s" + kHex[at - pieces[p].first];
      }
    return std::string("0.0f");  // not reached: taps lie inside the segment
  };

  std::ostringstream src;
  src << "// " << comment << "\n// " << d.op.str() << " " << KH << "x" << KW << " stride " << SH << "x" << SW
      << ", a work-item per " << kLanes << " outputs of a row; inside the input each window row is one segment of "
      << span << " floats.\n" << detail::Emitter::prelude();
  src << "__kernel void " << name << "(__global const float* restrict in0, __global float* restrict out0) {\n";
  src << "  const int t = get_global_id(0), row = t / " << tiles << ", ox0 = t % " << tiles << " * " << kLanes << ";\n";
  src << "  const int oy = row % " << OH << ";\n";
  src << "  const __global float* in = in0 + row / " << OH << " * " << H * W << ";\n";
  src << "  __global float* out = out0 + row * " << OW << " + ox0;\n";
  src << "  const int ix0 = ox0 * " << SW << " - " << PW << ";\n";
  // The vector path also takes a row's last, partial tile where its valid
  // outputs' windows lie inside the row: its segment's loads run on into
  // the next row (lanes not stored), unless that would leave the input.
  // SqueezeNet's 55-wide MaxPool (6 tiles and one of 7), its input in the
  // caches: 0.19 -> 0.11 ms (one process, alternating launches, AVX-512
  // Zen 4 PoCL): a seventh of the work-items on the scalar path took most
  // of the time. Not measured apart in the model, where the input comes
  // fresh from the conv before it (3 MB read from DRAM).
  const int64_t reach = (KW - 1) * DW + 1;  // the floats a window row reaches
  src << "  const int valid = min(" << kLanes << ", " << OW << " - ox0);\n";
  src << "  if (ix0 >= 0 && ix0 + (valid - 1) * " << SW << " + " << reach << " <= " << W << " && (ix0 + " << span
      << " <= " << W << " || row / " << OH << " * " << H * W << " + min(oy * " << SH << " - " << PH << " + "
      << (KH - 1) * DH << ", " << H - 1 << ") * " << W << " + ix0 + " << span << " <= " << shapeNumel(xs) << ")) {\n";
  src << "    " << vec << " acc = (" << vec << ")(" << init << ");\n    int count = 0;\n";
  for (int64_t ky = 0; ky < KH; ++ky) {
    src << "    {\n      const int iy = oy * " << SH << " - " << PH << " + " << ky * DH << ";\n";
    if (!isMax) src << "      if (" << rowCounts << ") count += " << KW << ";\n";
    src << "      if (iy >= 0 && iy < " << H << ") {\n";
    src << "        const __global float* r = in + iy * " << W << " + ix0;\n";
    for (const std::string& load : loads) src << "        " << load << "\n";
    for (int64_t kx = 0; kx < KW; ++kx) {
      src << "        acc = " << (isMax ? "FUSEC_VMAX(acc, " : "acc + ") << "(" << vec << ")(";
      for (int64_t j = 0; j < kLanes; ++j) src << (j ? ", " : "") << element(j * SW + kx * DW);
      src << (isMax ? "));\n" : ");\n");
    }
    src << "      }\n    }\n";
  }
  if (isMax) src << "    (void)count;\n";
  else src << "    acc = count ? acc / (float)count : (" << vec << ")(0.0f);\n";
  src << "    if (valid == " << kLanes << ") vstore" << n << "(acc, 0, out);\n";
  src << "    else {\n" << detail::validLaneStores("acc", "out", "0", "valid", kLanes, "      ") << "    }\n";
  src << "    return;\n  }\n";
  // Rows' edges (padding, a partial last tile): the same lanes, each tap
  // gathered where it lies inside the input and left out where it lies in
  // the padding (counted there for an average with count_include_pad).
  // One lane at a time before: GoogLeNet's 3x3 stride-1 pools (padded at
  // both ends of every row, all their tiles at an edge on 14- and 7-wide
  // maps) ran at 1 GB/s, 5-7x their estimates.
  const std::string iv = "int" + n;
  src << "  const " << iv << " lane = (" << iv << ")(";
  for (int64_t j = 0; j < kLanes; ++j) src << (j ? ", " : "") << j;
  src << ");\n  " << vec << " acc = (" << vec << ")(" << init << ");\n  " << iv << " count = (" << iv << ")(0);\n";
  src << "  for (int ky = 0; ky < " << KH << "; ++ky) {\n";
  src << "    const int iy = oy * " << SH << " - " << PH << " + ky * " << DH << ";\n";
  src << "    const " << iv << " rowIn = (" << iv << ")(iy >= 0 && iy < " << H << " ? -1 : 0);\n";
  if (includePad) src << "    const " << iv << " rowCounts = (" << iv << ")(iy < " << H + w.padEnd[0] << " ? -1 : 0);\n";
  src << "    for (int kx = 0; kx < " << KW << "; ++kx) {\n";
  src << "      const " << iv << " ix = ix0 + lane * " << SW << " + kx * " << DW << ";\n";
  src << "      const " << iv << " inside = rowIn & (ix >= 0) & (ix < " << W << ");\n";
  src << "      const " << iv << " at = select((" << iv << ")(0), iy * " << W << " + ix, inside);\n";
  src << "      const " << vec << " v = (" << vec << ")(";
  static const char* kHex = "0123456789abcdef";
  for (int64_t j = 0; j < kLanes; ++j) src << (j ? ", " : "") << "in[at.s" << kHex[j] << "]";
  src << ");\n";
  if (isMax) src << "      acc = select(acc, FUSEC_VMAX(acc, v), inside);\n";
  else src << "      acc += select((" << vec << ")(0.0f), v, inside);\n";
  if (!isMax) src << "      count -= " << (includePad ? "rowCounts & (ix < " + std::to_string(W + w.padEnd[1]) + ")" : "inside") << ";\n";
  src << "    }\n  }\n";
  if (!isMax) src << "  acc = select((" << vec << ")(0.0f), acc / convert_" << vec << "(count), count != 0);\n";
  else src << "  (void)count;\n";
  src << "  if (valid == " << kLanes << ") vstore" << n << "(acc, 0, out);\n";
  src << "  else {\n" << detail::validLaneStores("acc", "out", "0", "valid", kLanes, "    ") << "  }\n}\n";
  ks.source = src.str();
  return ks;
}

}  // namespace

Expected<KernelSource> emitPool(const Graph& g, const std::vector<NodeRef>& members, const OpCatalog& catalog,
                                const std::string& name, const std::string& comment) {
  if (!isPoolGroup(g, members)) return Error{"group `" + name + "` does not start with a pooling op", true};
  const NodeData& d = g.node(members.front());
  if (d.op == "Conv" || d.op == "ConvTranspose") return emitDirectConv(g, members, catalog, name, comment);
  if (d.op == "BatchNormalization") return emitBatchNorm(g, members, catalog, name, comment);
  const bool isMax = d.op == "MaxPool";
  const ValueId x = d.inputs[0], y = d.outputs[0];
  for (ValueId v : {x, y})
    if (!g.value(v).type.isStatic() || g.value(v).type.dtype != DType::Float32)
      return Error{d.op.str() + " on `" + g.value(v).name + "` (not float with a static shape) has no kernel path", true};
  // MaxPool's Indices: the flattened input offset of each maximum.
  ValueId indices = kNoValue;
  if (isMax && d.outputs.size() > 1 && d.outputs[1] != kNoValue &&
      (!g.uses(d.outputs[1]).empty() || g.isGraphOutput(d.outputs[1]))) {
    indices = d.outputs[1];
    for (NodeRef m : members)
      if (std::find(g.node(m).inputs.begin(), g.node(m).inputs.end(), indices) != g.node(m).inputs.end())
        return Error{"MaxPool's Indices read inside its group has no kernel path", true};
  }
  const Shape xs = g.value(x).type.staticShape(), ys = g.value(y).type.staticShape();
  if (xs.size() < 3 || xs.size() > 5) return Error{d.op.str() + " over other than 1 to 3 spatial dims has no kernel path", true};
  const Attribute* ka = d.attr("kernel_shape");
  if (!ka || !std::holds_alternative<std::vector<int64_t>>(*ka))
    return Error{d.op.str() + " `" + d.name + "` has no kernel_shape", true};
  const Shape spatial(xs.begin() + 2, xs.end());
  Expected<WindowGeometry> w = windowGeometry(d, spatial, std::get<std::vector<int64_t>>(*ka), d.attrInt("ceil_mode", 0) != 0);
  if (!w) return Error{d.op.str() + " `" + d.name + "`: " + w.error().message, true};
  const bool includePad = d.attrInt("count_include_pad", 0) != 0;
  const size_t k = spatial.size();
  if (members.size() == 1 && k == 2 && indices == kNoValue && w->kernelSize() <= 64 && rowPoolSpan(w.value()) <= 64)
    return emitRowPool(g, d, w.value(), name, comment);

  detail::Emitter e(g, catalog);
  Expected<WindowKernel> wk = windowKernel(e, members, y, {x}, name, "pooling");
  if (!wk) return wk.error();
  KernelSource& ks = wk->source;
  if (indices != kNoValue) ks.outputs.push_back(indices);
  const std::string &epiParams = wk->epilogueParams, &epiBody = wk->epilogueBody;
  const bool columnMajor = d.attrInt("storage_order", 0) != 0;

  std::ostringstream src;
  src << "// " << comment << "\n" << detail::Emitter::prelude();
  src << "__kernel void " << name << "(\n    __global const float* restrict in0";
  if (!epiParams.empty()) src << ",\n    " << epiParams;
  for (size_t o = 0; o < ks.outputs.size(); ++o)
    src << ",\n    __global " << (ks.outputs[o] == indices ? "long" : "float") << "* restrict out" << o;
  src << ") {\n  const int i = get_global_id(0);\n";
  src << detail::Emitter::coordinates(ys, "i", "  ");
  if (indices != kNoValue) src << "  long best = -1;\n";
  src << "  const __global float* plane = in0 + (c0 * " << xs[1] << " + c1) * " << w->inSize() << ";\n";
  src << "  float acc = " << (isMax ? "-INFINITY" : "0.0f") << ";\n  int count = 0;\n";
  std::string offset = "0", columnOffset = "0";
  int64_t stride = 1, columnStride = 1;
  for (size_t q = k; q-- > 0;) {
    offset = "p" + std::to_string(q) + " * " + std::to_string(stride) + " + " + offset;
    stride *= spatial[q];
  }
  for (size_t q = 0; q < k; ++q) {  // storage_order = 1: the first spatial axis varies fastest
    columnOffset += " + p" + std::to_string(q) + " * " + std::to_string(columnStride);
    columnStride *= spatial[q];
  }
  // Small windows are written out tap by tap: PoCL vectorizes a kernel
  // across work-items only when it has no loops (ResNet-18's 3x3 MaxPool:
  // 1.6x faster so). Larger ones loop over the taps.
  const bool unrolled = w->kernelSize() <= 64;
  std::string indent = "  ";
  std::vector<int64_t> tap(k, 0);  // the tap being written out, when unrolled
  std::function<void(size_t)> window = [&](size_t q) {
    if (q == k) {
      std::string inside;
      for (size_t r = 0; r < k; ++r) {
        const std::string p = "p" + std::to_string(r);
        inside += (r ? " && " : "") + p + " >= 0 && " + p + " < " + std::to_string(spatial[r]);
      }
      if (includePad) src << indent << "++count;\n";
      src << indent << "if (" << inside << ") {\n";
      src << indent << "  const float v = plane[" << offset << "];\n";
      if (isMax && indices != kNoValue)
        src << indent << "  if (v > acc || best < 0) { acc = v; best = " << (columnMajor ? columnOffset : offset) << "; }\n";
      else if (isMax) src << indent << "  acc = FUSEC_MAX(acc, v);  // NaN wins, as in the interpreter\n";
      else src << indent << "  acc += v;\n" << (includePad ? "" : indent + "  ++count;\n");
      src << indent << "}\n";
      return;
    }
    const std::string c = "c" + std::to_string(q + 2), p = "p" + std::to_string(q), kk = "k" + std::to_string(q);
    for (int64_t t = 0; t < (unrolled ? w->kernel[q] : 1); ++t) {
      src << indent << (unrolled ? "{\n" : "for (int " + kk + " = 0; " + kk + " < " + std::to_string(w->kernel[q]) + "; ++" + kk + ") {\n");
      indent += "  ";
      src << indent << "const int " << p << " = " << c << " * " << w->strides[q] << " - " << w->padBegin[q] << " + "
          << (unrolled ? std::to_string(t) : kk) << " * " << w->dilations[q] << ";\n";
      // Positions in the padding count (not past it: ceil_mode windows can overhang).
      const std::string past = p + " < " + std::to_string(spatial[q] + w->padEnd[q]);
      if (includePad && unrolled) src << indent << "if (" << past << ") {\n";
      if (includePad && !unrolled) src << indent << "if (!(" << past << ")) continue;\n";
      window(q + 1);
      if (includePad && unrolled) src << indent << "}\n";
      indent.resize(indent.size() - 2);
      src << indent << "}\n";
    }
  };
  window(0);
  if (!isMax) src << "  acc = count ? acc / count : 0.0f;\n";
  else src << "  (void)count;\n";
  src << epiBody;
  for (size_t o = 0; o < ks.outputs.size(); ++o) {
    std::string v = ks.outputs[o] == y ? std::string("acc") : "";
    if (ks.outputs[o] == indices)
      v = "best < 0 ? -1 : (c0 * " + std::to_string(xs[1]) + "L + c1) * " + std::to_string(w->inSize()) + "L + best";
    else if (v.empty()) v = e.vars().at(ks.outputs[o]);
    src << "  out" << o << "[i] = " << v << ";\n";
  }
  src << "}\n";
  ks.source = src.str();
  return ks;
}

FUSEC_KERNEL_FAMILY(pool_epilogue) {
  return {"pool_epilogue",
          "MaxPool, AveragePool, ConvTranspose or BatchNormalization (inference, or training mode from opset 14; "
          "float32) followed by elementwise ops on its result",
          "it does not start with a pooling op, ConvTranspose or BatchNormalization",
          {"#eadccd", "#8a5a2b"},
          [](const Graph& g, const std::vector<NodeRef>& group, const OpCatalog&) {
            return isPoolGroup(g, group) && g.node(group.front()).op != "Conv";
          },
          [](const EmitRequest& r) { return emitPool(r.graph, r.group, r.catalog, r.name, r.comment); }};
}

}  // namespace fusec::codegen
