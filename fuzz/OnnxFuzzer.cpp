/// libFuzzer target for models: import (checker and shape inference),
/// constant folding, the reference interpreter on small random inputs, and
/// the compile pipeline through code generation (no device). Any input must
/// end in a result or an Error; a crash, a hang, a sanitizer report or an
/// escaping exception is a bug.
///
/// The mutator knows the format: it parses the input as a ModelProto and
/// changes one thing a hostile model would (a dim, an attribute value, an
/// initializer's dims or data, an op type, an operand), falling back to
/// libFuzzer's byte mutations when the input is not a model.
/// Build and run: scripts/fuzz.sh onnx [SECONDS]
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "fusec/codegen/Families.h"
#include "fusec/driver/Pipeline.h"
#include "fusec/engine/Interpreter.h"
#include "fusec/engine/OnnxIO.h"
#include "fusec/grammar/PackLoader.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t maxSize);

namespace {

using namespace fusec;

/// Numbers hostile models use: zero, one, negatives, the edges of 32 and 64
/// bits, and huge products.
int64_t cornerInt(std::mt19937& rng) {
  static const int64_t kCorners[] = {0, 1, -1, 2, 3, -5, 7, 64, 1 << 20, int64_t{1} << 31, int64_t{1} << 40,
                                     int64_t{1} << 62, std::numeric_limits<int64_t>::max(),
                                     std::numeric_limits<int64_t>::min()};
  return kCorners[rng() % std::size(kCorners)];
}

float cornerFloat(std::mt19937& rng) {
  static const float kCorners[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 1e-30f, 1e30f, -1e30f,
                                   std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                                   std::numeric_limits<float>::quiet_NaN()};
  return kCorners[rng() % std::size(kCorners)];
}

void mutateDim(onnx::TypeProto& type, std::mt19937& rng) {
  if (!type.has_tensor_type() || type.tensor_type().shape().dim_size() == 0) return;
  auto* shape = type.mutable_tensor_type()->mutable_shape();
  shape->mutable_dim(static_cast<int>(rng() % shape->dim_size()))->set_dim_value(cornerInt(rng));
}

void mutateAttribute(onnx::AttributeProto& a, std::mt19937& rng) {
  switch (a.type()) {
    case onnx::AttributeProto::INT: a.set_i(cornerInt(rng)); break;
    case onnx::AttributeProto::FLOAT: a.set_f(cornerFloat(rng)); break;
    case onnx::AttributeProto::INTS:
      if (a.ints_size() == 0 || rng() % 4 == 0) a.add_ints(cornerInt(rng));
      else a.set_ints(static_cast<int>(rng() % a.ints_size()), cornerInt(rng));
      break;
    case onnx::AttributeProto::FLOATS:
      if (a.floats_size() == 0 || rng() % 4 == 0) a.add_floats(cornerFloat(rng));
      else a.set_floats(static_cast<int>(rng() % a.floats_size()), cornerFloat(rng));
      break;
    default: break;
  }
}

void mutateInitializer(onnx::TensorProto& t, std::mt19937& rng) {
  switch (rng() % 4) {
    case 0:
      if (t.dims_size() > 0) t.set_dims(static_cast<int>(rng() % t.dims_size()), cornerInt(rng));
      else t.add_dims(cornerInt(rng));
      break;
    case 1: {  // cut or grow the data
      std::string* raw = t.mutable_raw_data();
      if (!raw->empty() && rng() % 2) raw->resize(rng() % raw->size());
      else raw->append(8, static_cast<char>(rng()));
      break;
    }
    case 2:
      if (t.int64_data_size() > 0) t.set_int64_data(static_cast<int>(rng() % t.int64_data_size()), cornerInt(rng));
      else if (t.raw_data().size() >= 8 && t.data_type() == onnx::TensorProto::INT64) {
        const int64_t v = cornerInt(rng);
        std::memcpy(t.mutable_raw_data()->data() + 8 * (rng() % (t.raw_data().size() / 8)), &v, 8);
      }
      break;
    default: t.set_data_type(static_cast<int32_t>(rng() % 17)); break;
  }
}

void mutateModel(onnx::ModelProto& m, std::mt19937& rng) {
  static const char* kOps[] = {"Add", "Mul", "Relu", "Reshape", "Expand", "Tile", "Pad", "Range", "ConstantOfShape",
                               "Conv", "MaxPool", "Gemm", "MatMul", "Concat", "Slice", "Gather", "Resize", "Softmax",
                               "LayerNormalization", "Max", "Transpose", "Shape", "Cast", "Where", "Split"};
  onnx::GraphProto& g = *m.mutable_graph();
  switch (rng() % 8) {
    case 0:
      if (g.input_size()) mutateDim(*g.mutable_input(static_cast<int>(rng() % g.input_size()))->mutable_type(), rng);
      break;
    case 1:
      if (g.node_size()) {
        onnx::NodeProto& n = *g.mutable_node(static_cast<int>(rng() % g.node_size()));
        if (n.attribute_size()) mutateAttribute(*n.mutable_attribute(static_cast<int>(rng() % n.attribute_size())), rng);
      }
      break;
    case 2:
      if (g.initializer_size()) mutateInitializer(*g.mutable_initializer(static_cast<int>(rng() % g.initializer_size())), rng);
      break;
    case 3:
      if (g.node_size()) g.mutable_node(static_cast<int>(rng() % g.node_size()))->set_op_type(kOps[rng() % std::size(kOps)]);
      break;
    case 4:  // rewire an operand to another value
      if (g.node_size() > 1) {
        onnx::NodeProto& n = *g.mutable_node(static_cast<int>(rng() % g.node_size()));
        const onnx::NodeProto& other = g.node(static_cast<int>(rng() % g.node_size()));
        if (n.input_size() && other.output_size()) n.set_input(static_cast<int>(rng() % n.input_size()), other.output(0));
      }
      break;
    case 5:  // an empty name (an omitted operand) at any operand position, optional or not
      if (g.node_size()) {
        onnx::NodeProto& n = *g.mutable_node(static_cast<int>(rng() % g.node_size()));
        if (n.input_size()) n.set_input(static_cast<int>(rng() % n.input_size()), "");
        else n.add_input("");
      }
      break;
    case 6:  // one more operand, empty or a repeat of one there (variadic ops: Max, Sum, Concat)
      if (g.node_size()) {
        onnx::NodeProto& n = *g.mutable_node(static_cast<int>(rng() % g.node_size()));
        n.add_input(n.input_size() && rng() % 2 ? n.input(static_cast<int>(rng() % n.input_size())) : std::string());
      }
      break;
    default:
      if (g.output_size()) mutateDim(*g.mutable_output(static_cast<int>(rng() % g.output_size()))->mutable_type(), rng);
      break;
  }
}

struct Packs {
  std::unique_ptr<RuleSet> rules;
  Target target;
  Packs() {
    setenv("FUSEC_MAX_TENSOR_BYTES", "67108864", 1);  // 64 MiB: bombs end early, not in the OOM killer
    setenv("FUSEC_MAX_INTERPRETER_STEPS", "16777216", 1);  // a second at most, not minutes
    setenv("FUSEC_INFERENCE_SECONDS", "5", 1);  // ONNX's inference, which can count to 2^62, inside the 10 s per input
    grammar::SourceManager sources;
    grammar::DiagnosticEngine diags(sources);
    grammar::ast::AstContext context;
    grammar::PackLoadOptions options;
    options.families = &codegen::kernelFamilies();
    Expected<Target> t = loadTarget(grammar::defaultRulesDir() + "/targets/pocl-cpu.toml");
    if (!t) std::abort();
    Expected<std::vector<std::string>> packs = grammar::defaultPackPaths(t.value());
    if (!packs) std::abort();
    rules = grammar::loadPacks(packs.value(), sources, context, diags, options).rules;
    if (!rules) std::abort();
    target = t.value();
  }
};

}  // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t maxSize, unsigned int seed) {
  onnx::ModelProto m;
  if (!m.ParseFromArray(data, static_cast<int>(size)) || !m.has_graph()) return LLVMFuzzerMutate(data, size, maxSize);
  std::mt19937 rng(seed);
  mutateModel(m, rng);
  const std::string out = m.SerializeAsString();
  if (out.size() > maxSize) return LLVMFuzzerMutate(data, size, maxSize);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Packs packs;
  Expected<Graph> g = importOnnxBuffer(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.onnx");
  if (!g) return 0;
  // Small random inputs where the declared shapes allow; otherwise no run.
  std::vector<Tensor> inputs;
  std::mt19937 rng(static_cast<unsigned>(size));
  for (ValueId v : g->inputs()) {
    const TensorType& t = g->value(v).type;
    if (!t.isStatic()) return 0;
    const std::optional<int64_t> n = checkedNumel(t.staticShape());
    if (!n || *n > (1 << 16) || t.dtype == DType::String || t.dtype == DType::Undefined) return 0;
    Tensor x(t.dtype, t.staticShape());
    for (size_t b = 0; b < x.byteSize(); ++b) x.raw()[b] = static_cast<std::byte>(rng() % 3);
    inputs.push_back(std::move(x));
  }
  try {
    (void)runGraph(g.value(), inputs, &packs.rules->catalog);
    driver::PipelineOptions options;
    options.inputs = &inputs;
    options.generate = true;
    (void)driver::compile(std::move(g.value()), *packs.rules, packs.target, options);
  } catch (const UserError&) {
    // A limit reached outside a stage's own error handling (the tensor size
    // limit) ends as an error in the command; fine here too.
  }
  return 0;
}
