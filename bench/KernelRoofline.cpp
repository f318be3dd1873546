/// Benchmark: generated loop kernels against the device's measured roof, in
/// one run. First measures the roof on this device (FMA chains; a triad for
/// DRAM bandwidth), then times the zoo's shapes family by family: GEMMs
/// and convs for several tilings (GFLOP/s, fraction of peak), attention,
/// and the memory-bound kernels (fraction of the triad): depthwise convs
/// (also against their own roofline: a 5x5 window at stride 1 is past the
/// ridge point on a CPU), matrix-vector products, global pools, and groups of the other families
/// (pointwise chains, row and column reductions, data movement) fused
/// beside one kernel per op.
///   build/bench/kernel_roofline [--bandwidth: roofs and memory-bound rows only]
#include <algorithm>
#include <cstdio>
#include <string>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>

#include "Emitters.h"
#include "fusec/codegen/Executor.h"
#include "fusec/codegen/Families.h"
#include "fusec/codegen/Gemm.h"
#include "fusec/engine/Target.h"
#include "fusec/grammar/PackLoader.h"

using namespace fusec;

namespace {

// A kernel runs at least kRounds times and until its launches add up to
// kBudgetSeconds (at most kMaxRounds): the best of 5 runs of a 50 us kernel
// on a shared 2-core machine moved its row by 20 points between runs.
constexpr int kRounds = 5;
constexpr int kMaxRounds = 200;
constexpr double kBudgetSeconds = 0.02;

Tensor randomTensor(const Shape& s, std::mt19937& rng) {
  Tensor t(DType::Float32, s);
  std::uniform_real_distribution<float> d(-1, 1);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

/// Best device time of `kernel` over kRounds or more launches with `args`.
double bestTime(codegen::Device& device, const std::string& source, const std::string& name,
                const std::vector<codegen::KernelArg>& args, size_t global, size_t local = 0) {
  Expected<void*> k = device.kernel(source, name);
  if (!k) {
    std::fprintf(stderr, "%s\n", k.error().message.c_str());
    std::exit(1);
  }
  double best = 1e30, total = 0;
  for (int r = 0; r < kMaxRounds && (r < kRounds || total < kBudgetSeconds); ++r) {
    if (Status st = device.launch(k.value(), args, global, name, local); !st) {
      std::fprintf(stderr, "%s\n", st.error().message.c_str());
      std::exit(1);
    }
    auto times = device.finish();
    if (times && !times->empty()) {
      best = std::min(best, times->front().second);
      total += times->front().second;
    }
  }
  return best;
}

/// A generated kernel's best time on `buffers` (by value: its operands
/// and results); -1 after printing why when it was not generated.
double bestTime(codegen::Device& device, Expected<codegen::KernelSource> k,
                const std::map<ValueId, codegen::Buffer>& buffers) {
  if (!k) {
    std::fprintf(stderr, "%s\n", k.error().message.c_str());
    return -1.0;
  }
  std::vector<codegen::KernelArg> args;
  for (const std::vector<ValueId>* values : {&k->inputs, &k->outputs})
    for (ValueId x : *values) args.push_back(codegen::KernelArg::of(buffers.at(x)));
  std::vector<codegen::Buffer> derived;  // the constants the kernel derives (a Winograd conv's weights)
  for (const std::shared_ptr<const codegen::DerivedConstant>& t : k->derived) {
    Expected<codegen::Buffer> b = device.upload(*t->tensor());
    if (!b) {
      std::fprintf(stderr, "%s\n", b.error().message.c_str());
      return -1.0;
    }
    derived.push_back(std::move(b.value()));
  }
  for (const codegen::Buffer& b : derived) args.push_back(codegen::KernelArg::of(b));
  return bestTime(device, k->source, k->name, args, k->globalSize, k->localSize);
}

double measurePeak(codegen::Device& device) {
  // Independent FMA chains per work-item, the best of several shapes: the
  // chains must cover the FMA latency on every port without spilling, and
  // how many registers that takes depends on the CPU (8 float16 chains are
  // 16 AVX2 registers, all of them: 90-101 GFLOP/s on an AVX2 build
  // machine whose GEMMs ran at 131).
  const size_t items = 4096;
  const int steps = 4096;
  Expected<codegen::Buffer> out = device.allocate(items * 4);
  double best = 0;
  for (int width : {8, 16})
    for (int chains : {6, 8, 12}) {
      const std::string v = "float" + std::to_string(width);
      std::string src = "__kernel void peak(__global float* out, const int steps) {\n";
      src += "  const " + v + " m = (" + v + ")(0.999f), c = (" + v + ")(1e-4f);\n";
      for (int i = 0; i < chains; ++i)
        src += "  " + v + " a" + std::to_string(i) + " = (" + v + ")(get_global_id(0) * 1e-9f + " + std::to_string(i) + "e-3f);\n";
      src += "  for (int s = 0; s < steps; ++s) {\n";
      for (int i = 0; i < chains; ++i) src += "    a" + std::to_string(i) + " = fma(a" + std::to_string(i) + ", m, c);\n";
      src += "  }\n  " + v + " t = a0;\n";
      for (int i = 1; i < chains; ++i) src += "  t += a" + std::to_string(i) + ";\n";
      // Every lane summed: a lane never read would let the compiler drop it.
      src += width == 16 ? "  out[get_global_id(0)] = dot(t.lo.lo + t.lo.hi + t.hi.lo + t.hi.hi, (float4)(1.0f));\n}\n"
                         : "  out[get_global_id(0)] = dot(t.lo + t.hi, (float4)(1.0f));\n}\n";
      const double t = bestTime(device, src, "peak", {codegen::KernelArg::of(out.value()), codegen::KernelArg::of(steps)}, items);
      best = std::max(best, 2.0 * width * chains * steps * static_cast<double>(items) / t / 1e9);
    }
  return best;
}

double measureTriad(codegen::Device& device) {
  const char* src = R"(
__kernel void triad(__global float* a, __global const float* b, __global const float* c) {
  const int i = get_global_id(0);
  a[i] = b[i] + 0.5f * c[i];
}
)";
  const size_t n = size_t{1} << 24;
  // Inputs written first: pages never written read as the shared zero
  // page, from cache, and would inflate the figure.
  Tensor data(DType::Float32, {static_cast<int64_t>(n)});
  for (size_t i = 0; i < n; ++i) data.data<float>()[i] = static_cast<float>(i % 1024);
  auto a = device.upload(data), b = device.upload(data), c = device.upload(data);
  const double t = bestTime(device, src, "triad",
                            {codegen::KernelArg::of(a.value()), codegen::KernelArg::of(b.value()),
                             codegen::KernelArg::of(c.value())},
                            n);
  return 3.0 * 4 * static_cast<double>(n) / t / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  // --roofs-only: the two roofs and nothing else (bench/run draws its charts with them).
  const bool roofsOnly = argc > 1 && std::string(argv[1]) == "--roofs-only";
  // --bandwidth: the roofs and the memory-bound rows (depthwise, GEMV) only.
  const bool bandwidthOnly = argc > 1 && std::string(argv[1]) == "--bandwidth";
  grammar::SourceManager sources;
  grammar::DiagnosticEngine diags(sources);
  grammar::ast::AstContext context;
  auto ops = grammar::loadPacks({grammar::defaultRulesDir() + "/core/ops.fuse"}, sources, context, diags).rules;
  Expected<std::unique_ptr<codegen::Device>> opened = codegen::Device::open();
  if (!ops || !opened) {
    std::fprintf(stderr, "%s\n", opened ? "cannot load the op catalog" : opened.error().message.c_str());
    return 1;
  }
  codegen::Device& device = **opened;
  std::printf("device: %s (%lld compute units)\n", device.info().name.c_str(),
              static_cast<long long>(device.info().computeUnits));
  const double peak = measurePeak(device), triad = measureTriad(device);
  std::printf("measured roof: %.1f GFLOP/s (FMA chains), %.1f GB/s (triad, 16Mi floats)\n\n", peak, triad);
  if (roofsOnly) return 0;

  struct Shape3 {
    const char* what;
    int64_t M, K, N;
  };
  const Shape3 shapes[] = {{"attention projection", 128, 768, 768},
                           {"feed-forward up", 128, 768, 3072},
                           {"feed-forward down", 128, 3072, 768},
                           {"square 1024", 1024, 1024, 1024}};
  // What fusec runs by default here: the CPU profile's tiling fitted to
  // this device's vector registers (KernelOptions::forDevice), marked
  // "(default)".
  Expected<Target> profile = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
  if (!profile) {
    std::fprintf(stderr, "%s\n", profile.error().message.c_str());
    return 1;
  }
  const codegen::GemmTiling fitted = codegen::KernelOptions::forDevice(profile.value(), device.info()).gemm;
  // The fitted tiling with one column panel per work-item, against the
  // default's two (GemmTiling::panels) where the registers allow them.
  codegen::GemmTiling onePanel = fitted;
  onePanel.panels = 1;
  const codegen::GemmTiling tilings[] = {{12, 16, 0, 0}, {8, 16, 8, 128}, {8, 16, 16, 256}, {12, 16, 8, 128}, {12, 16, 16, 256}, {6, 16, 16, 256},
                                         onePanel, fitted};
  // Generates `node`'s kernel with tiling `t`, times it on `buffers` and
  // prints one row: `work` (FLOPs or DRAM bytes) per second, and its share
  // of `roof` (the measured peak or bandwidth). False when it does not generate.
  auto benchRow = [&](const Graph& g, NodeRef node, const codegen::GemmTiling& t,
                      const std::vector<const codegen::Buffer*>& buffers, double work, double roof, const char* what,
                      const char* shape, const std::string& kernel, double flops = 0) {
    Expected<codegen::KernelSource> k = codegen::emitGemm(g, {node}, ops->catalog, "bench_kernel", "bench", t);
    if (!k) {
      std::fprintf(stderr, "%s\n", k.error().message.c_str());
      return false;
    }
    std::vector<codegen::KernelArg> args;
    for (const codegen::Buffer* b : buffers) args.push_back(codegen::KernelArg::of(*b));
    const double sec = bestTime(device, k->source, k->name, args, k->globalSize, k->localSize);
    std::printf("%-22s %-16s %-20s %10.3f %10.1f %7.0f%%", what, shape, kernel.c_str(), sec * 1e3, work / sec / 1e9,
                100.0 * work / sec / 1e9 / roof);
    // With `flops`: also the share of the kernel's own roof, the lower of
    // the peak and its arithmetic intensity times the bandwidth (`work` is
    // then its bytes): past the ridge point a kernel is compute bound.
    if (flops > 0) std::printf(" %7.0f%%", 100.0 * flops / sec / 1e9 / std::min(peak, flops / work * triad));
    std::printf("\n");
    return true;
  };
  auto tile = [](const codegen::GemmTiling& t) {
    char text[32];
    std::snprintf(text, sizeof text, "%dx%d%s/%d/%d%s", t.rows, t.width, t.panels == 2 ? "x2" : "", t.localRows, t.depth,
                  t.convRowPanels ? "" : " gather");
    return std::string(text);
  };
  std::mt19937 rng(1);
  if (!bandwidthOnly) std::printf("%-22s %-16s %-20s %10s %10s %8s\n", "gemm", "MxKxN", "tile", "ms", "GFLOP/s", "of peak");
  for (const Shape3& s : bandwidthOnly ? std::vector<Shape3>{} : std::vector<Shape3>(std::begin(shapes), std::end(shapes))) {
    Graph g;
    ValueId a = g.addInput("a", TensorType::of(DType::Float32, {s.M, s.K}));
    ValueId b = g.addInput("b", TensorType::of(DType::Float32, {s.K, s.N}));
    ValueId c = g.addValue("c", TensorType::of(DType::Float32, {s.M, s.N}));
    NodeRef mm = g.addNode("MatMul", {a, b}, {c});
    g.addOutput(c);
    auto da = device.upload(randomTensor({s.M, s.K}, rng)), db = device.upload(randomTensor({s.K, s.N}, rng));
    auto dc = device.allocate(static_cast<size_t>(s.M * s.N) * 4);
    const double flops = 2.0 * s.M * s.N * s.K;
    char shape[40];
    std::snprintf(shape, sizeof shape, "%lldx%lldx%lld", static_cast<long long>(s.M), static_cast<long long>(s.K),
                  static_cast<long long>(s.N));
    for (const codegen::GemmTiling& t : tilings)
      if (!benchRow(g, mm, t, {&da.value(), &db.value(), &dc.value()}, flops, peak, s.what, shape,
                    tile(t) + (&t == std::end(tilings) - 1 ? " (default)" : "")))
        return 1;
  }

  // ResNet-18's convs (batch 1) through the same family: implicit GEMM with
  // the window gathered while B's panel is staged.
  struct ConvShape {
    const char* what;
    int64_t C, H, M, R, stride;
  };
  const ConvShape convs[] = {{"stem 7x7/2", 3, 224, 64, 7, 2},
                             {"stage 1 3x3", 64, 56, 64, 3, 1},
                             {"stage 2 3x3", 128, 28, 128, 3, 1},
                             {"stage 3 3x3", 256, 14, 256, 3, 1},
                             {"stage 4 3x3", 512, 7, 512, 3, 1},
                             {"SqueezeNet head 1x1", 512, 13, 1000, 1, 1},
                             {"DenseNet 3x3 (32 out)", 128, 56, 32, 3, 1},
                             {"DenseNet 3x3 (32 out)", 128, 28, 32, 3, 1},
                             {"DenseNet 3x3 (32 out)", 128, 14, 32, 3, 1},
                             {"DenseNet 3x3 (32 out)", 128, 7, 32, 3, 1}};
  // Each tiling with B's panels as input-row segments (the default) and,
  // marked "gather", as W outputs of the flattened output gathered lane by lane.
  auto gathered = [](codegen::GemmTiling t) {
    t.convRowPanels = false;
    return t;
  };
  const codegen::GemmTiling convTilings[] = {{12, 16, 16, 256}, gathered({12, 16, 16, 256}), {12, 16, 16, 128}, {8, 16, 16, 256},
                                             gathered({8, 16, 16, 256}), {8, 16, 8, 128}, gathered({8, 16, 8, 128}),
                                             {12, 16, 2, 256}, gathered({12, 16, 2, 256}), onePanel, fitted};
  if (!bandwidthOnly) std::printf("\n%-22s %-16s %-20s %10s %10s %8s\n", "conv", "CxHxW->M", "tile", "ms", "GFLOP/s", "of peak");
  for (const ConvShape& s : bandwidthOnly ? std::vector<ConvShape>{} : std::vector<ConvShape>(std::begin(convs), std::end(convs))) {
    const int64_t pad = s.R / 2, out = (s.H + 2 * pad - s.R) / s.stride + 1;
    Graph g;
    ValueId x = g.addInput("x", TensorType::of(DType::Float32, {1, s.C, s.H, s.H}));
    ValueId w = g.addInput("w", TensorType::of(DType::Float32, {s.M, s.C, s.R, s.R}));
    ValueId y = g.addValue("y", TensorType::of(DType::Float32, {1, s.M, out, out}));
    NodeRef conv = g.addNode("Conv", {x, w}, {y},
                             {{"strides", std::vector<int64_t>{s.stride, s.stride}},
                              {"pads", std::vector<int64_t>{pad, pad, pad, pad}},
                              {"kernel_shape", std::vector<int64_t>{s.R, s.R}}});
    g.addOutput(y);
    auto dx = device.upload(randomTensor({1, s.C, s.H, s.H}, rng)), dw = device.upload(randomTensor({s.M, s.C, s.R, s.R}, rng));
    auto dy = device.allocate(static_cast<size_t>(s.M * out * out) * 4);
    const double flops = 2.0 * s.M * out * out * s.C * s.R * s.R;
    char shape[40];
    std::snprintf(shape, sizeof shape, "%lldx%lldx%lld->%lld", static_cast<long long>(s.C), static_cast<long long>(s.H),
                  static_cast<long long>(s.H), static_cast<long long>(s.M));
    // With the weights a constant, as in a model: Winograd's F(2x2, 3x3)
    // where the default tiling takes it (emitWinograd), which is then the
    // default; FLOPs are still the window's.
    Graph gc;
    const ValueId xc = gc.addInput("x", g.value(x).type);
    const ValueId wc = gc.addConstant("w", randomTensor({s.M, s.C, s.R, s.R}, rng));
    const ValueId yc = gc.addValue("y", g.value(y).type);
    const NodeRef convc = gc.addNode("Conv", {xc, wc}, {yc}, g.node(conv).attrs);
    gc.addOutput(yc);
    Expected<codegen::KernelSource> winograd = codegen::emitGemm(gc, {convc}, ops->catalog, "bench_winograd", "bench", fitted);
    const bool byWinograd = winograd && !winograd->derived.empty();
    for (const codegen::GemmTiling& t : convTilings)
      if (!benchRow(g, conv, t, {&dx.value(), &dw.value(), &dy.value()}, flops, peak, s.what, shape,
                    tile(t) + (&t == std::end(convTilings) - 1 && !byWinograd ? " (default)" : "")))
        return 1;
    if (byWinograd) {
      std::map<ValueId, codegen::Buffer> buffers;
      buffers.emplace(xc, std::move(dx.value()));
      buffers.emplace(yc, std::move(dy.value()));
      const double sec = bestTime(device, std::move(winograd), buffers);
      if (sec < 0) return 1;
      std::printf("%-22s %-16s %-20s %10.3f %10.1f %7.0f%%\n", s.what, shape, "winograd (default)", sec * 1e3,
                  flops / sec / 1e9, 100.0 * flops / sec / 1e9 / peak);
    }
  }

  // BERT-base self-attention (12 heads, 128 tokens, head size 64), batch
  // 1: the attention kernel against what it replaces (the two batched
  // GEMMs and the scale-mask-softmax row reduction, their times summed).
  // FLOPs: the two products.
  if (!bandwidthOnly) {
    const int64_t H = 12, S = 128, Dh = 64;
    auto f32 = [](Shape s) { return TensorType::of(DType::Float32, std::move(s)); };
    // The graph with K given transposed ([heads, D, S]) or, with `keyRows`,
    // as rows ([heads, S, D], the heads of a projection: the form the
    // models run) transposed by a view the kernel reads; its buffers.
    struct Attention {
      Graph g;
      std::vector<NodeRef> nodes;
      std::map<ValueId, codegen::Buffer> buffers;
    };
    auto attention = [&](bool keyRows) {
      Attention a;
      Graph& g = a.g;
      const ValueId q = g.addInput("q", f32({1, H, S, Dh})), k = g.addInput("k", f32(keyRows ? Shape{1, H, S, Dh} : Shape{1, H, Dh, S})),
                    v = g.addInput("v", f32({1, H, S, Dh})), mask = g.addInput("mask", f32({1, 1, 1, S}));
      const ValueId scale = g.addConstant("scale", Tensor::fromVector<float>({}, {0.125f}));
      const ValueId s = g.addValue("s", f32({1, H, S, S})), z = g.addValue("z", f32({1, H, S, S})),
                    m = g.addValue("m", f32({1, H, S, S})), p = g.addValue("p", f32({1, H, S, S})),
                    o = g.addValue("o", f32({1, H, S, Dh}));
      ValueId kt = k;
      if (keyRows) {
        kt = g.addValue("kt", f32({1, H, Dh, S}));
        a.nodes.push_back(g.addNode("Transpose", {k}, {kt}, {{"perm", std::vector<int64_t>{0, 1, 3, 2}}}));
      }
      for (NodeRef n : {g.addNode("MatMul", {q, kt}, {s}), g.addNode("Mul", {s, scale}, {z}), g.addNode("Add", {z, mask}, {m}),
                        g.addNode("Softmax", {m}, {p}, {{"axis", int64_t{-1}}}), g.addNode("MatMul", {p, v}, {o})})
        a.nodes.push_back(n);
      g.addOutput(o);
      for (ValueId in : {q, k, v, mask}) a.buffers.emplace(in, device.upload(randomTensor(g.value(in).type.staticShape(), rng)).value());
      a.buffers.emplace(scale, device.upload(*g.value(scale).constant).value());
      for (ValueId t : {s, p, o, m})
        a.buffers.emplace(t, device.allocate(static_cast<size_t>(shapeNumel(g.value(t).type.staticShape())) * 4).value());
      return a;
    };
    const Attention given = attention(false), rows = attention(true);
    const Graph& g = given.g;
    const std::vector<NodeRef>& nodes = given.nodes;
    auto time = [&](Expected<codegen::KernelSource> k) { return bestTime(device, std::move(k), given.buffers); };
    const double flops = 4.0 * H * S * S * Dh;
    // The online form (a GPU's), and the form this device gets
    // (KernelOptions::attention): on a CPU each work-item keeps its query
    // rows' scores in private memory, and transposes its head's keys into
    // its local memory where they are rows.
    const codegen::AttentionForm form = codegen::KernelOptions::forDevice(profile.value(), device.info()).attention;
    const double online = time(codegen::emitAttention(g, nodes, ops->catalog, "bench_attention", "bench"));
    const double fused = time(codegen::emitAttention(g, nodes, ops->catalog, "bench_attention_form", "bench", form));
    const double unfused = time(codegen::emitGemm(g, {nodes[0]}, ops->catalog, "bench_scores", "bench")) +
                           time(codegen::emitRowReduce(g, {nodes[1], nodes[2], nodes[3]}, ops->catalog, "bench_softmax", "bench")) +
                           time(codegen::emitGemm(g, {nodes[4]}, ops->catalog, "bench_context", "bench"));
    const double keyRows = bestTime(
        device, codegen::emitAttention(rows.g, rows.nodes, ops->catalog, "bench_attention_rows", "bench", form), rows.buffers);
    if (online < 0 || fused < 0 || unfused < 0 || keyRows < 0) return 1;
    std::printf("\n%-22s %-16s %-20s %10s %10s %8s\n", "attention", "heads x S x D", "kernel", "ms", "GFLOP/s", "of peak");
    for (const auto& [kernel, sec] : {std::pair<const char*, double>{"attention, online", online},
                                      {form.scoreRows > 0 ? "attention, score rows" : "attention", fused},
                                      {form.ownedKeys ? "... K rows, owned" : "... K as rows", keyRows},
                                      {"gemm+softmax+gemm", unfused}})
      std::printf("%-22s %-16s %-20s %10.3f %10.1f %7.0f%%\n", "bert-base layer", "12x128x64", kernel, sec * 1e3,
                  flops / sec / 1e9, 100.0 * flops / sec / 1e9 / peak);
  }

  // BERT-base's Q, K and V projections of one input (128 tokens, 768 to
  // 768 each, with their biases): the gemm_horizontal kernel (one launch)
  // against the three gemm_epilogue kernels it replaces, in the tiling the
  // device gets (KernelOptions::forDevice).
  if (!bandwidthOnly) {
    const int64_t S = 128, D = 768;
    auto f32 = [](Shape s) { return TensorType::of(DType::Float32, std::move(s)); };
    Graph g;
    const ValueId x = g.addInput("x", f32({1, S, D}));
    std::vector<NodeRef> nodes;
    std::map<ValueId, codegen::Buffer> buffers;
    buffers.emplace(x, device.upload(randomTensor({1, S, D}, rng)).value());
    for (const char* name : {"q", "k", "v"}) {
      const ValueId w = g.addConstant(std::string("w") + name, randomTensor({D, D}, rng));
      const ValueId b = g.addConstant(std::string("b") + name, randomTensor({D}, rng));
      const ValueId m = g.addValue(std::string("m") + name, f32({1, S, D})), y = g.addValue(name, f32({1, S, D}));
      nodes.push_back(g.addNode("MatMul", {x, w}, {m}));
      nodes.push_back(g.addNode("Add", {m, b}, {y}));
      g.addOutput(y);
      for (ValueId c : {w, b}) buffers.emplace(c, device.upload(*g.value(c).constant).value());
      buffers.emplace(y, device.allocate(static_cast<size_t>(S * D) * 4).value());
    }
    auto time = [&](Expected<codegen::KernelSource> k) { return bestTime(device, std::move(k), buffers); };
    const double horizontal =
        time(codegen::emitGemmHorizontal(g, nodes, ops->catalog, "bench_qkv", "bench", [&](const NodeData&) { return fitted; }));
    double separate = 0;
    for (size_t i = 0; i < nodes.size() && separate >= 0; i += 2) {
      const double t = time(codegen::emitGemm(g, {nodes[i], nodes[i + 1]}, ops->catalog, "bench_projection", "bench", fitted));
      separate = t < 0 ? -1 : separate + t;
    }
    const double flops = 3 * 2.0 * S * D * D;
    std::printf("\n%-22s %-16s %-20s %10s %10s %8s\n", "horizontal gemm", "3 x MxKxN", "kernel", "ms", "GFLOP/s", "of peak");
    for (const auto& [kernel, sec] : {std::pair<const char*, double>{"gemm_horizontal (1)", horizontal}, {"gemm_epilogue (3)", separate}})
      if (sec > 0)
        std::printf("%-22s %-16s %-20s %10.3f %10.1f %7.0f%%\n", "bert-base q, k, v", "128x768x768", kernel, sec * 1e3,
                    flops / sec / 1e9, 100.0 * flops / sec / 1e9 / peak);
  }

  // MobileNetV2's depthwise 3x3 convs and EfficientNet-B0's 5x5 ones
  // (batch 1), through the conv_epilogue family's direct depthwise kernel:
  // memory bound, so judged against the triad bandwidth (input, weights
  // and output bytes, each once).
  struct DepthwiseShape {
    const char* what;
    int64_t C, H, stride, K = 3;
  };
  const DepthwiseShape depthwise[] = {{"mbv2 block 1", 32, 112, 1},    {"mbv2 block 2", 96, 112, 2},
                                      {"mbv2 block 3", 144, 56, 1},    {"mbv2 block 4", 144, 56, 2},
                                      {"mbv2 block 6", 192, 28, 1},    {"mbv2 block 8", 384, 14, 1},
                                      {"mbv2 block 14", 576, 14, 2},   {"mbv2 block 16", 960, 7, 1},
                                      {"effnet-b0 5x5 s2", 144, 56, 2, 5}, {"effnet-b0 5x5", 240, 28, 1, 5},
                                      {"effnet-b0 5x5", 672, 14, 1, 5},  {"effnet-b0 5x5", 1152, 7, 1, 5}};
  std::printf("\n%-22s %-16s %-20s %10s %10s %8s %8s\n", "depthwise conv", "CxHxW/stride", "kernel", "ms", "GB/s",
              "of DRAM", "of roof");
  for (const DepthwiseShape& s : depthwise) {
    const int64_t pad = s.K / 2, out = (s.H + 2 * pad - s.K) / s.stride + 1;
    Graph g;
    ValueId x = g.addInput("x", TensorType::of(DType::Float32, {1, s.C, s.H, s.H}));
    ValueId w = g.addInput("w", TensorType::of(DType::Float32, {s.C, 1, s.K, s.K}));
    ValueId y = g.addValue("y", TensorType::of(DType::Float32, {1, s.C, out, out}));
    NodeRef conv = g.addNode("Conv", {x, w}, {y},
                             {{"strides", std::vector<int64_t>{s.stride, s.stride}},
                              {"pads", std::vector<int64_t>{pad, pad, pad, pad}},
                              {"group", s.C}});
    g.addOutput(y);
    auto dx = device.upload(randomTensor({1, s.C, s.H, s.H}, rng)),
         dw = device.upload(randomTensor({s.C, 1, s.K, s.K}, rng));
    auto dy = device.allocate(static_cast<size_t>(s.C * out * out) * 4);
    const double bytes = 4.0 * (s.C * s.H * s.H + s.C * s.K * s.K + s.C * out * out);
    char shape[40];
    std::snprintf(shape, sizeof shape, "%lldx%lldx%lld/%lld k%lld", static_cast<long long>(s.C),
                  static_cast<long long>(s.H), static_cast<long long>(s.H), static_cast<long long>(s.stride),
                  static_cast<long long>(s.K));
    // The direct kernel (row segments gathered once at the edges, and each
    // tap gathering its own lanes), and the implicit GEMM, side by side.
    for (int variant : {0, 1, 2, 3}) {
      codegen::GemmTiling t;
      t.directDepthwise = variant < 3;
      t.depthwiseRowGather = variant == 1;
      if (variant == 0) t.depthwiseOwnedBytes = codegen::KernelOptions::kDepthwiseOwnedBytes;
      const char* kernel[] = {"direct, owned rows", "direct", "direct, tap gath", "implicit gemm"};
      if (!benchRow(g, conv, t, {&dx.value(), &dw.value(), &dy.value()}, bytes, triad, s.what, shape, kernel[variant],
                    2.0 * static_cast<double>(s.C * s.K * s.K * out * out)))
        return 1;
    }
  }

  // Batch-1 Linear layers (PyTorch's nn.Linear: Gemm with B transposed),
  // through the split-K matrix-vector kernel (GPUs), two rows per work-item
  // (CPUs) and the tiled GEMM side by side: every weight read once, so
  // judged against the triad bandwidth.
  struct LinearShape {
    const char* what;
    int64_t K, N;
  };
  const LinearShape linears[] = {{"mbv3-small fc 1", 576, 1024},
                                 {"mbv3-small fc 2", 1024, 1000},
                                 {"mbv2 classifier", 1280, 1000},
                                 {"resnet fc", 512, 1000},
                                 {"bert ff (1 token)", 768, 3072}};
  std::printf("\n%-22s %-16s %-20s %10s %10s %8s\n", "gemv (Linear, batch 1)", "KxN", "kernel", "ms", "GB/s", "of DRAM");
  for (const LinearShape& s : linears) {
    Graph g;
    ValueId a = g.addInput("a", TensorType::of(DType::Float32, {1, s.K}));
    ValueId b = g.addInput("b", TensorType::of(DType::Float32, {s.N, s.K}));
    ValueId c = g.addValue("c", TensorType::of(DType::Float32, {1, s.N}));
    NodeRef mm = g.addNode("Gemm", {a, b}, {c}, {{"transB", int64_t{1}}});
    g.addOutput(c);
    auto da = device.upload(randomTensor({1, s.K}, rng)), db = device.upload(randomTensor({s.N, s.K}, rng));
    auto dc = device.allocate(static_cast<size_t>(s.N) * 4);
    const double bytes = 4.0 * (s.K + s.K * s.N + s.N);
    char shape[40];
    std::snprintf(shape, sizeof shape, "%lldx%lld", static_cast<long long>(s.K), static_cast<long long>(s.N));
    for (int variant : {0, 1, 2}) {
      codegen::GemmTiling t;
      t.gemv = variant < 2;
      t.gemvSplitK = variant == 0;
      const char* kernel[] = {"split-K gemv", "row-pair gemv", "tiled gemm"};
      if (!benchRow(g, mm, t, {&da.value(), &db.value(), &dc.value()}, bytes, triad, s.what, shape, kernel[variant]))
        return 1;
    }
  }

  // Global average pools (squeeze and excitation, classifier heads): a
  // work-group per row reducing in local memory (GPUs), and a work-item per
  // row reading float16 vectors (CPUs); judged against the triad bandwidth.
  struct PoolShape {
    const char* what;
    int64_t C, H;
  };
  const PoolShape pools[] = {{"effnet-b0 SE", 96, 112}, {"effnet-b0 SE", 240, 28}, {"effnet-b0 SE", 672, 14},
                             {"effnet-b0 SE", 1152, 7}, {"resnet head", 512, 7}, {"mbv2 head", 1280, 7}};
  std::printf("\n%-22s %-16s %-20s %10s %10s %8s\n", "global average pool", "CxHxW", "kernel", "ms", "GB/s", "of DRAM");
  for (const PoolShape& s : pools) {
    Graph g;
    ValueId x = g.addInput("x", TensorType::of(DType::Float32, {1, s.C, s.H, s.H}));
    ValueId y = g.addValue("y", TensorType::of(DType::Float32, {1, s.C, 1, 1}));
    NodeRef pool = g.addNode("GlobalAveragePool", {x}, {y});
    g.addOutput(y);
    auto dx = device.upload(randomTensor({1, s.C, s.H, s.H}, rng));
    auto dy = device.allocate(static_cast<size_t>(s.C) * 4);
    const double bytes = 4.0 * (s.C * s.H * s.H + s.C);
    char shape[40];
    std::snprintf(shape, sizeof shape, "%lldx%lldx%lld", static_cast<long long>(s.C), static_cast<long long>(s.H),
                  static_cast<long long>(s.H));
    for (bool perWorkItem : {false, true}) {
      Expected<codegen::KernelSource> k = codegen::emitRowReduce(g, {pool}, ops->catalog, "bench_pool", "bench", perWorkItem);
      if (!k) {
        std::fprintf(stderr, "%s\n", k.error().message.c_str());
        return 1;
      }
      const double sec = bestTime(device, k->source, k->name, {codegen::KernelArg::of(dx.value()), codegen::KernelArg::of(dy.value())},
                                  k->globalSize, k->localSize);
      std::printf("%-22s %-16s %-20s %10.3f %10.1f %7.0f%%\n", s.what, shape, perWorkItem ? "row per item" : "group per row",
                  sec * 1e3, bytes / sec / 1e9, 100.0 * bytes / sec / 1e9 / triad);
    }
  }

  // The memory-bound groups of the other families on the zoo's shapes:
  // elementwise chains, row and axis (column) reductions with their
  // prologues, data movement composed into one index map. Each group as
  // the one kernel fusec builds for it (the family planning selects, with
  // KernelOptions::forDevice), beside one kernel per op (views launch
  // nothing); each row judged on the bytes its own kernels move (every
  // operand and result once) against the triad bandwidth, so the fused
  // row's time is the saving and its share of DRAM the kernel's quality.
  const codegen::KernelOptions options = codegen::KernelOptions::forDevice(profile.value(), device.info());
  auto groupRows = [&](const char* what, const char* shape, const Graph& g, const std::vector<NodeRef>& nodes) {
    std::map<ValueId, codegen::Buffer> buffers;
    auto buffer = [&](ValueId v) -> const codegen::Buffer& {
      if (auto it = buffers.find(v); it != buffers.end()) return it->second;
      const Value& d = g.value(v);
      const Shape s = d.type.staticShape();
      Expected<codegen::Buffer> b = d.constant                         ? device.upload(*d.constant)
                                    : d.type.dtype == DType::Float32 ? device.upload(randomTensor(s, rng))
                                                                     : device.upload(Tensor(d.type.dtype, s));
      return buffers.emplace(v, std::move(b.value())).first->second;
    };
    // One kernel's best time and the bytes it moves; zeros for a view.
    auto run = [&](const std::vector<NodeRef>& group) -> std::optional<std::pair<double, double>> {
      if (codegen::isViewGroup(g, group, ops->catalog)) return std::pair{0.0, 0.0};
      Expected<const KernelFamily*> family = codegen::kernelFamilies().select(g, group, ops->catalog, profile.value());
      Expected<codegen::KernelSource> k =
          family ? codegen::emitKernel(g, group, std::string(family.value()->name()), ops->catalog, "bench_group", "bench", options)
                 : Expected<codegen::KernelSource>(family.error());
      if (!k) {
        std::fprintf(stderr, "%s: %s\n", what, k.error().message.c_str());
        return std::nullopt;
      }
      std::vector<codegen::KernelArg> args;
      double bytes = 0;
      for (const std::vector<ValueId>* values : {&k->inputs, &k->outputs})
        for (ValueId x : *values) {
          args.push_back(codegen::KernelArg::of(buffer(x)));
          bytes += static_cast<double>(shapeNumel(g.value(x).type.staticShape()) * dtypeSize(g.value(x).type.dtype));
        }
      return std::pair{bestTime(device, k->source, k->name, args, k->globalSize, k->localSize), bytes};
    };
    std::optional<std::pair<double, double>> fused = run(nodes);
    std::pair<double, double> perOp{0, 0};
    int launches = 0;
    for (NodeRef n : nodes) {
      std::optional<std::pair<double, double>> one = run({n});
      if (!one) return false;
      perOp.first += one->first;
      perOp.second += one->second;
      launches += one->first > 0;
    }
    if (!fused) return false;
    const std::string perOpKernel = "per op (" + std::to_string(launches) + (launches == 1 ? " kernel)" : " kernels)");
    for (const auto& [kernel, timed] : {std::pair<std::string, std::pair<double, double>>{"fused (1 kernel)", *fused}, {perOpKernel, perOp}})
      std::printf("%-22s %-16s %-20s %10.3f %10.1f %7.0f%%\n", what, shape, kernel.c_str(), timed.first * 1e3,
                  timed.second / timed.first / 1e9, 100.0 * timed.second / timed.first / 1e9 / triad);
    return true;
  };
  auto f32 = [](Shape s) { return TensorType::of(DType::Float32, std::move(s)); };
  auto ints = [](Graph& g, std::vector<int64_t> v) {
    return g.addConstant("shape", Tensor::fromVector<int64_t>({static_cast<int64_t>(v.size())}, v));
  };
  auto number = [](Graph& g, float x) { return g.addConstant("c", Tensor::fromVector<float>({}, {x})); };
  std::printf("\n%-22s %-16s %-20s %10s %10s %8s\n", "memory-bound group", "shape", "kernel", "ms", "GB/s", "of DRAM");
  bool ok = true;
  {  // BERT-base's exact GELU after the FF up projection: x * 0.5 * (1 + erf(x / sqrt 2)).
    Graph g;
    const ValueId x = g.addInput("x", f32({1, 128, 3072}));
    const ValueId a = g.addValue("a", f32({1, 128, 3072})), b = g.addValue("b", f32({1, 128, 3072})),
                  c = g.addValue("c", f32({1, 128, 3072})), d = g.addValue("d", f32({1, 128, 3072})),
                  y = g.addValue("y", f32({1, 128, 3072}));
    const std::vector<NodeRef> nodes = {g.addNode("Div", {x, number(g, 1.4142135f)}, {a}), g.addNode("Erf", {a}, {b}),
                                        g.addNode("Add", {b, number(g, 1.0f)}, {c}), g.addNode("Mul", {x, c}, {d}),
                                        g.addNode("Mul", {d, number(g, 0.5f)}, {y})};
    g.addOutput(y);
    ok = ok && groupRows("bert gelu (pointwise)", "128x3072", g, nodes);
  }
  {  // GPT-2's tanh GELU after its FF up projection, as exported:
     // x * 0.5 * (1 + tanh(0.7978846 * (x + 0.044715 * x * x * x))).
    Graph g;
    const ValueId x = g.addInput("x", f32({1, 128, 3072}));
    std::vector<ValueId> v;
    for (const char* name : {"a", "b", "c", "d", "e", "t", "u", "w", "y"}) v.push_back(g.addValue(name, f32({1, 128, 3072})));
    const std::vector<NodeRef> nodes = {g.addNode("Mul", {x, x}, {v[0]}),
                                        g.addNode("Mul", {v[0], x}, {v[1]}),
                                        g.addNode("Mul", {v[1], number(g, 0.044715f)}, {v[2]}),
                                        g.addNode("Add", {x, v[2]}, {v[3]}),
                                        g.addNode("Mul", {v[3], number(g, 0.7978846f)}, {v[4]}),
                                        g.addNode("Tanh", {v[4]}, {v[5]}),
                                        g.addNode("Add", {v[5], number(g, 1.0f)}, {v[6]}),
                                        g.addNode("Mul", {x, v[6]}, {v[7]}),
                                        g.addNode("Mul", {v[7], number(g, 0.5f)}, {v[8]})};
    g.addOutput(v[8]);
    ok = ok && groupRows("gpt-2 gelu (tanh)", "128x3072", g, nodes);
  }
  {  // EfficientNet-B0's first SiLU, x * sigmoid(x), on its largest map.
    Graph g;
    const ValueId x = g.addInput("x", f32({1, 96, 112, 112}));
    const ValueId s = g.addValue("s", f32({1, 96, 112, 112})), y = g.addValue("y", f32({1, 96, 112, 112}));
    const std::vector<NodeRef> nodes = {g.addNode("Sigmoid", {x}, {s}), g.addNode("Mul", {x, s}, {y})};
    g.addOutput(y);
    ok = ok && groupRows("effnet silu (pointwise)", "96x112x112", g, nodes);
  }
  {  // DenseNet-121's Concat + BatchNorm (a per-channel multiply-add) + ReLU
     // before the sixth layer of its first block: 64 + 5 x 32 channels.
    Graph g;
    std::vector<ValueId> parts = {g.addInput("x0", f32({1, 64, 56, 56}))};
    for (int i = 1; i <= 5; ++i) parts.push_back(g.addInput("f" + std::to_string(i), f32({1, 32, 56, 56})));
    const ValueId scale = g.addInput("scale", f32({224, 1, 1})), shift = g.addInput("shift", f32({224, 1, 1}));
    const ValueId c = g.addValue("c", f32({1, 224, 56, 56})), m = g.addValue("m", f32({1, 224, 56, 56})),
                  a = g.addValue("a", f32({1, 224, 56, 56})), y = g.addValue("y", f32({1, 224, 56, 56}));
    const std::vector<NodeRef> nodes = {g.addNode("Concat", parts, {c}, {{"axis", int64_t{1}}}),
                                        g.addNode("Mul", {c, scale}, {m}), g.addNode("Add", {m, shift}, {a}),
                                        g.addNode("Relu", {a}, {y})};
    g.addOutput(y);
    ok = ok && groupRows("densenet concat+bn+relu", "224x56x56", g, nodes);
  }
  {  // BERT-base's residual add + LayerNormalization over the hidden axis.
    Graph g;
    const ValueId x = g.addInput("x", f32({1, 128, 768})), r = g.addInput("r", f32({1, 128, 768}));
    const ValueId gamma = g.addInput("gamma", f32({768})), beta = g.addInput("beta", f32({768}));
    const ValueId s = g.addValue("s", f32({1, 128, 768})), y = g.addValue("y", f32({1, 128, 768}));
    const std::vector<NodeRef> nodes = {g.addNode("Add", {x, r}, {s}),
                                        g.addNode("LayerNormalization", {s, gamma, beta}, {y}, {{"axis", int64_t{-1}}})};
    g.addOutput(y);
    ok = ok && groupRows("bert add+layernorm", "128x768", g, nodes);
  }
  {  // BERT-base's attention probabilities: scale, mask, softmax over the keys.
    Graph g;
    const ValueId x = g.addInput("x", f32({1, 12, 128, 128})), mask = g.addInput("mask", f32({1, 1, 1, 128}));
    const ValueId z = g.addValue("z", f32({1, 12, 128, 128})), m = g.addValue("m", f32({1, 12, 128, 128})),
                  p = g.addValue("p", f32({1, 12, 128, 128}));
    const std::vector<NodeRef> nodes = {g.addNode("Mul", {x, number(g, 0.125f)}, {z}), g.addNode("Add", {z, mask}, {m}),
                                        g.addNode("Softmax", {m}, {p}, {{"axis", int64_t{-1}}})};
    g.addOutput(p);
    ok = ok && groupRows("bert scale+mask+softmax", "12x128x128", g, nodes);
  }
  {  // A column reduction: the mean over ConvNeXt-T's 96 channels at each
     // pixel of its first stage, the centred input squared before it.
    Graph g;
    const ValueId x = g.addInput("x", f32({1, 96, 56, 56})), mu = g.addInput("mu", f32({1, 1, 56, 56}));
    const ValueId d = g.addValue("d", f32({1, 96, 56, 56})), q = g.addValue("q", f32({1, 96, 56, 56})),
                  v = g.addValue("v", f32({1, 1, 56, 56}));
    const std::vector<NodeRef> nodes = {g.addNode("Sub", {x, mu}, {d}), g.addNode("Mul", {d, d}, {q}),
                                        g.addNode("ReduceMean", {q}, {v}, {{"axes", std::vector<int64_t>{1}}})};
    g.addOutput(v);
    ok = ok && groupRows("convnext channel var", "96x56x56 ax 1", g, nodes);
  }
  {  // ConvNeXt-T's LayerNorm2d before its first downsampling: the 96
     // channels of each 56x56 pixel moved last, normalized, moved back.
    Graph g;
    const ValueId x = g.addInput("x", f32({1, 96, 56, 56})), scale = g.addInput("scale", f32({96})),
                  bias = g.addInput("bias", f32({96}));
    const ValueId t = g.addValue("t", f32({1, 56, 56, 96})), n = g.addValue("n", f32({1, 56, 56, 96})),
                  y = g.addValue("y", f32({1, 96, 56, 56}));
    const std::vector<NodeRef> nodes = {
        g.addNode("Transpose", {x}, {t}, {{"perm", std::vector<int64_t>{0, 2, 3, 1}}}),
        g.addNode("LayerNormalization", {t, scale, bias}, {n}, {{"epsilon", 1e-6f}}),
        g.addNode("Transpose", {n}, {y}, {{"perm", std::vector<int64_t>{0, 3, 1, 2}}})};
    g.addOutput(y);
    ok = ok && groupRows("convnext channel layernorm", "96x56x56 ax 1", g, nodes);
  }
  {  // ShuffleNetV2's channel shuffle on its 28x28 stage: the two branches
     // concatenated, shuffled (reshape, transpose, reshape) and split.
    Graph g;
    const ValueId a = g.addInput("a", f32({1, 58, 28, 28})), b = g.addInput("b", f32({1, 58, 28, 28}));
    const ValueId c = g.addValue("c", f32({1, 116, 28, 28})), r = g.addValue("r", f32({1, 2, 58, 28, 28})),
                  t = g.addValue("t", f32({1, 58, 2, 28, 28})), s = g.addValue("s", f32({1, 116, 28, 28})),
                  y0 = g.addValue("y0", f32({1, 58, 28, 28})), y1 = g.addValue("y1", f32({1, 58, 28, 28}));
    const std::vector<NodeRef> nodes = {
        g.addNode("Concat", {a, b}, {c}, {{"axis", int64_t{1}}}), g.addNode("Reshape", {c, ints(g, {1, 2, 58, 28, 28})}, {r}),
        g.addNode("Transpose", {r}, {t}, {{"perm", std::vector<int64_t>{0, 2, 1, 3, 4}}}),
        g.addNode("Reshape", {t, ints(g, {1, 116, 28, 28})}, {s}),
        g.addNode("Split", {s, ints(g, {58, 58})}, {y0, y1}, {{"axis", int64_t{1}}})};
    g.addOutput(y0);
    g.addOutput(y1);
    ok = ok && groupRows("shufflenet shuffle", "2x58x28x28", g, nodes);
  }
  {  // BERT-base's head split: [1, 128, 768] -> [1, 12, 128, 64].
    Graph g;
    const ValueId x = g.addInput("x", f32({1, 128, 768}));
    const ValueId r = g.addValue("r", f32({1, 128, 12, 64})), y = g.addValue("y", f32({1, 12, 128, 64}));
    const std::vector<NodeRef> nodes = {g.addNode("Reshape", {x, ints(g, {1, 128, 12, 64})}, {r}),
                                        g.addNode("Transpose", {r}, {y}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}})};
    g.addOutput(y);
    ok = ok && groupRows("bert head split", "128x768", g, nodes);
  }
  return ok ? 0 : 1;
}
