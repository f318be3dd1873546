/// `fusec._fusec`: the compiler's library for Python (pybind11). The public
/// module, `fusec` (python/fusec/__init__.py), wraps these with docstrings,
/// types and conveniences; scripts import `fusec`, not this.
///
/// Ownership: a Model owns its imported graph; Packs own a checked rule set;
/// a Compiled owns its compiled graph and shares the rule set it was planned
/// with (its plan names those rules), and opens its OpenCL program on the
/// first run. Failures raise the exception classes of `fusec.errors`, with
/// located diagnostics for pack errors; the GIL is released while compiling
/// and running.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "fusec/codegen/Executor.h"
#include "fusec/codegen/OpenCL.h"
#include "fusec/codegen/Spirv.h"
#include "fusec/driver/Explain.h"
#include "fusec/driver/Pipeline.h"
#include "fusec/driver/Report.h"
#include "fusec/driver/Session.h"
#include "fusec/driver/Verify.h"
#include "fusec/engine/Interpreter.h"
#include "fusec/engine/OnnxIO.h"
#include "fusec/engine/Planner.h"

namespace py = pybind11;

namespace fusec::python {
namespace {

/// A failure to raise as `fusec.errors.<kind>`.
struct RaisedError {
  std::string kind;  ///< ModelError, RuleError, TargetError, CompileError, DeviceError, RunError
  std::string message;
  std::vector<driver::PackDiagnostic> diagnostics;
};

[[noreturn]] void raise(std::string kind, std::string message) { throw RaisedError{std::move(kind), std::move(message), {}}; }

template <class T>
T take(Expected<T>&& e, const char* kind) {
  if (!e) raise(kind, e.error().message);
  return std::move(e).value();
}

// ---- tensors: numpy arrays in and out

/// numpy's name for an element type; empty when numpy has none.
std::string numpyName(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Float16: return "float16";
    case DType::Int8: return "int8";
    case DType::Int16: return "int16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::UInt8: return "uint8";
    case DType::UInt16: return "uint16";
    case DType::UInt32: return "uint32";
    case DType::UInt64: return "uint64";
    case DType::Bool: return "bool";
    default: return {};
  }
}

/// The array as a tensor of the model's input `value` (copied), its element
/// type and shape checked first: a wrong array costs no copy. Called with
/// the GIL held.
Tensor toTensor(const Value& value, const py::handle& object, bool staticShapes) {
  const std::string& name = value.name;
  // An ndarray is looked at where it is; anything else is converted first.
  py::array array = py::isinstance<py::array>(object) ? py::reinterpret_borrow<py::array>(object)
                                                      : py::array::ensure(object);
  if (!array) raise("RunError", "input `" + name + "` is not an array (numpy.ndarray or convertible)");
  const std::string dtypeName = py::str(array.dtype()).cast<std::string>();
  std::optional<DType> dtype;
  for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::Int8, DType::Int16, DType::Int32, DType::Int64,
                  DType::UInt8, DType::UInt16, DType::UInt32, DType::UInt64, DType::Bool})
    if (numpyName(t) == dtypeName) dtype = t;
  if (!dtype) raise("RunError", "input `" + name + "` has element type " + dtypeName + ", which fusec does not take");
  if (*dtype != value.type.dtype)
    raise("RunError", "input `" + name + "` is " + numpyName(*dtype) + "; the model takes " +
                          std::string(numpyName(value.type.dtype)) + " (convert it with .astype)");
  Shape shape(array.shape(), array.shape() + array.ndim());
  if (staticShapes && value.type.isStatic() && shape != value.type.staticShape())
    raise("RunError", "input `" + name + "` has shape " + shapeToString(shape) + "; the model was compiled for " +
                          shapeToString(value.type.staticShape()) + " (compile with dims= for other sizes)");
  array = py::array::ensure(array, py::array::c_style);  // a copy only where it is not contiguous
  if (!array) raise("RunError", "input `" + name + "` cannot be made contiguous");
  Tensor t(*dtype, shape);
  if (t.byteSize() != static_cast<size_t>(array.nbytes()))
    raise("RunError", "input `" + name + "`: unexpected size for its shape");
  if (t.byteSize()) std::memcpy(t.raw(), array.data(), t.byteSize());
  return t;
}

py::array toArray(const Tensor& t) {
  const std::string name = numpyName(t.dtype());
  if (name.empty()) raise("RunError", "an output has element type " + std::string(dtypeName(t.dtype())) + ", which numpy has not");
  py::array array(py::dtype(name), std::vector<py::ssize_t>(t.shape().begin(), t.shape().end()));
  if (t.byteSize()) std::memcpy(array.mutable_data(), t.raw(), t.byteSize());
  return array;
}

/// JSON as Python objects (via the json module: exact and short).
py::object toPython(const nlohmann::json& j) { return py::module_::import("json").attr("loads")(j.dump()); }

py::dict typeInfo(const Graph& g, ValueId v) {
  const Value& value = g.value(v);
  py::list shape;
  if (value.type.dims)
    for (const Dim& d : *value.type.dims) {
      if (d.isStatic()) shape.append(d.size);
      else if (!d.symbol.empty()) shape.append(d.symbol);
      else shape.append(py::none());
    }
  py::dict out;
  out["name"] = value.name;
  out["dtype"] = numpyName(value.type.dtype).empty() ? std::string(dtypeName(value.type.dtype)) : numpyName(value.type.dtype);
  out["shape"] = value.type.dims ? py::object(shape) : py::object(py::none());
  return out;
}

/// Name, dtype and shape of each of `values`.
py::list typeInfos(const Graph& g, const std::vector<ValueId>& values) {
  py::list out;
  for (ValueId v : values) out.append(typeInfo(g, v));
  return out;
}

// ---- the objects

struct Model {
  std::shared_ptr<const Graph> graph;
  std::string name;  ///< the file, or what the caller called it
};

struct Packs {
  std::shared_ptr<const RuleSet> rules;
  std::vector<std::string> files;
  std::vector<driver::PackDiagnostic> warnings;
};

struct TargetProfile {
  std::shared_ptr<const Target> target;
  std::string path;  ///< empty: the shipped pocl-cpu profile
};

Packs fromLoaded(driver::LoadedPacks loaded) {
  if (!loaded.rules) {
    std::string message = loaded.error;
    for (const driver::PackDiagnostic& d : loaded.diagnostics)
      if (d.severity == "error") {
        message = (d.file.empty() ? "" : d.file + ":" + std::to_string(d.line) + ":" + std::to_string(d.column) + ": ") +
                  d.message;
        break;
      }
    throw RaisedError{"RuleError", message.empty() ? "the packs did not load" : message, std::move(loaded.diagnostics)};
  }
  return Packs{std::shared_ptr<const RuleSet>(std::move(loaded.rules)), std::move(loaded.files),
               std::move(loaded.diagnostics)};
}

TargetProfile defaultTarget() { return TargetProfile{std::make_shared<Target>(take(driver::loadTargetOrDefault(""), "TargetError")), ""}; }

class Compiled {
 public:
  Compiled(Model model, Packs packs, TargetProfile target, std::unique_ptr<driver::Compiled> c, bool fuse)
      : model_(std::move(model)), packs_(std::move(packs)), target_(std::move(target)), c_(std::move(c)), fuse_(fuse) {}

  driver::ReportContext context() const { return {model_.name, target_.target->name, packs_.files, target_.target->calibrationPath}; }

  /// `f()` with the GIL released and the run lock held: the first OpenCL
  /// run may plan again (fusions split back), so the plan is read under it.
  template <class F>
  auto withPlan(F&& f) const -> decltype(f()) {
    py::gil_scoped_release release;
    const std::lock_guard<std::mutex> lock(mutex_);
    return f();
  }

  std::string reportText() const { return withPlan([&] { return driver::reportText(*c_, context()); }); }
  std::string htmlReport(const std::map<std::string, double>& measured) const {
    driver::HtmlOptions options;
    options.measuredSeconds = measured;
    return withPlan([&] { return driver::htmlReport(*c_, context(), *packs_.rules, *target_.target, options); });
  }
  py::object report() const { return toPython(withPlan([&] { return driver::reportJson(*c_, context()); })); }
  py::object plan() const { return toPython(withPlan([&] { return driver::planJson(c_->graph, c_->plan); })); }
  py::bytes fusedOnnx() const {
    return py::bytes(withPlan([&] { return exportOnnxBinary(buildFusedGraph(c_->graph, c_->plan)); }));
  }
  py::list inputs() const { return typeInfos(c_->graph, c_->graph.inputs()); }

  /// group name -> OpenCL C, in launch order.
  std::vector<std::pair<std::string, std::string>> kernelSources() const {
    Expected<driver::KernelSources> k =
        withPlan([&] { return driver::kernelSources(*c_, packs_.rules->catalog, *target_.target); });
    return take(std::move(k), "CompileError").kernels;
  }

  /// Builds the program on OpenCL now, when it is not built yet: the
  /// fusions timed against their members, then every distinct kernel
  /// program (from the kernel cache where it is there). `progress` (None or
  /// a callable) is called with (phase, done, total) as work completes.
  void build(const std::string& device, const py::object& progress) {
    py::gil_scoped_release release;
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!program_) open(device, progress);
  }

  /// Runs on OpenCL (the program built on the first call) or the reference
  /// interpreter; returns the outputs and, on OpenCL, (kernel, seconds) per launch.
  std::pair<py::dict, std::vector<std::pair<std::string, double>>> run(const py::dict& feeds, bool interpreter,
                                                                       const std::string& device,
                                                                       const py::object& progress) {
    const Graph& original = *model_.graph;
    const Graph& g = interpreter ? original : c_->graph;
    std::vector<Tensor> inputs;
    for (ValueId v : g.inputs()) {
      const Value& value = g.value(v);
      if (!feeds.contains(value.name)) raise("RunError", "no array for input `" + value.name + "`");
      inputs.push_back(toTensor(value, feeds[py::str(value.name)], !interpreter));
    }
    for (const auto& [key, _] : feeds) {
      const std::string name = py::str(key);
      bool known = false;
      for (ValueId v : g.inputs()) known |= g.value(v).name == name;
      if (!known) raise("RunError", "the model has no input `" + name + "`");
    }
    std::vector<Tensor> outputs;
    std::vector<std::pair<std::string, double>> times;
    {
      py::gil_scoped_release release;
      // One run at a time per compiled model: the program's buffers are its own.
      const std::lock_guard<std::mutex> lock(mutex_);
      if (interpreter) {
        outputs = take(runGraph(original, inputs, &packs_.rules->catalog), "RunError");
      } else {
        if (!program_) open(device, progress);
        codegen::DeviceRun r = take(program_->run(inputs), "RunError");
        outputs = std::move(r.outputs);
        times = std::move(r.kernelTimes);
      }
    }
    py::dict out;
    for (size_t i = 0; i < outputs.size(); ++i) out[py::str(g.value(g.outputs()[i]).name)] = toArray(outputs[i]);
    return {out, times};
  }

  std::string deviceName() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return device_ ? device_->info().name : std::string();
  }

 private:
  /// Opens the device and builds the program, telling `progress` (None or
  /// a callable taking phase, done, total; called with the GIL) how far it
  /// is. Without the GIL.
  void open(const std::string& match, const py::object& progress) {
    auto tell = [&progress](const char* phase) {
      return [&progress, phase](size_t done, size_t total) {
        py::gil_scoped_acquire gil;
        if (!progress.is_none()) progress(phase, done, total);
      };
    };
    if (Status st = requireStaticShapes(c_->graph, "compile with dims= to size the symbolic input dims"); !st)
      raise("RunError", st.error().message);
    const std::string& want = match.empty() ? target_.target->deviceMatch : match;
    device_ = take(codegen::Device::open(want), "DeviceError");
    // Never a loss: fusions measured slower than their members are split back.
    if (fuse_) {
      driver::PipelineOptions options;
      options.fuse = true;
      codegen::SplitBackOptions split;
      split.progress = tell("timing fusions");
      take(driver::splitBackLosses(*c_, *device_, *packs_.rules, *target_.target, options, split), "CompileError");
    }
    program_ = take(codegen::DeviceProgram::build(*device_, c_->graph, c_->groups, packs_.rules->catalog,
                                                  codegen::KernelOptions::forDevice(*target_.target, device_->info()),
                                                  tell("building kernels")),
                    "CompileError");
  }

  Model model_;
  Packs packs_;
  TargetProfile target_;
  std::unique_ptr<driver::Compiled> c_;
  std::unique_ptr<codegen::Device> device_;
  std::optional<codegen::DeviceProgram> program_;  // built on device_
  bool fuse_ = true;                               // planned fusion: the first run measures it
  mutable std::mutex mutex_;                       // held by a run and by readers of the plan (without the GIL)
};

std::shared_ptr<Compiled> compile(const Model& model, const std::optional<Packs>& packs,
                                  const std::optional<TargetProfile>& target, const std::map<std::string, int64_t>& dims,
                                  bool fuse, bool rewrite) {
  TargetProfile t = target ? *target : defaultTarget();
  Packs p = packs ? *packs : fromLoaded(driver::loadPacks({}, *t.target));
  driver::PipelineOptions options;
  options.dims = dims;
  options.fuse = fuse;
  options.rewrite = rewrite;
  Expected<std::unique_ptr<driver::Compiled>> c = [&] {
    py::gil_scoped_release release;
    return driver::compile(model.graph->clone(), *p.rules, *t.target, options);
  }();
  if (!c) raise("CompileError", model.name + ": " + c.error().message);
  return std::make_shared<Compiled>(model, std::move(p), std::move(t), std::move(c).value(), fuse);
}

py::list diagnosticList(const std::vector<driver::PackDiagnostic>& diags) {
  py::object make = py::module_::import("fusec.errors").attr("Diagnostic");
  py::list out;
  for (const driver::PackDiagnostic& d : diags)
    out.append(make(d.severity, d.file, d.line, d.column, d.message, d.sourceLine, d.caret));
  return out;
}

}  // namespace
}  // namespace fusec::python

using namespace fusec;
using namespace fusec::python;

PYBIND11_MODULE(_fusec, m) {
  m.doc() = "fusec's compiler library; use the `fusec` package, which wraps it.";
  // A limit set to nonsense (FUSEC_MAX_TENSOR_BYTES=abc) is refused before
  // any work, as the command line does.
  if (Status st = checkLimitsInEnv(); !st) throw py::value_error(st.error().message);

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const RaisedError& e) {
      py::object cls = py::module_::import("fusec.errors").attr(e.kind.c_str());
      py::object error = cls(e.message, diagnosticList(e.diagnostics));
      PyErr_SetObject(cls.ptr(), error.ptr());
    } catch (const py::error_already_set&) {
      throw;  // a Python exception on its way back
    } catch (const py::builtin_exception&) {
      throw;  // pybind11's own (argument types): TypeError and the like
    } catch (const std::bad_alloc&) {
      throw;  // MemoryError
    } catch (const std::exception& e) {
      // Anything else is fusec's bug, but still an error the script can catch.
      py::object cls = py::module_::import("fusec.errors").attr("Error");
      py::object error = cls(std::string("internal error: ") + e.what(), py::list());
      PyErr_SetObject(cls.ptr(), error.ptr());
    }
  });

  py::class_<Model>(m, "Model")
      .def_property_readonly("name", [](const Model& x) { return x.name; })
      .def_property_readonly("num_nodes", [](const Model& x) { return x.graph->numNodes(); })
      .def_property_readonly("inputs", [](const Model& x) { return typeInfos(*x.graph, x.graph->inputs()); })
      .def_property_readonly("outputs", [](const Model& x) { return typeInfos(*x.graph, x.graph->outputs()); });

  m.def("load_model_file", [](const std::string& path) {
    Expected<Graph> g = [&] {
      py::gil_scoped_release release;
      return importOnnxFile(path);
    }();
    return Model{std::make_shared<const Graph>(take(std::move(g), "ModelError")), path};
  });
  m.def("load_model_bytes", [](const py::bytes& bytes, const std::string& name) {
    const std::string data = bytes;
    Expected<Graph> g = [&] {
      py::gil_scoped_release release;
      return importOnnxBuffer(data, name);
    }();
    return Model{std::make_shared<const Graph>(take(std::move(g), "ModelError")), name};
  });

  py::class_<Packs>(m, "Packs")
      .def_property_readonly("files", [](const Packs& x) { return x.files; })
      .def_property_readonly("warnings", [](const Packs& x) { return diagnosticList(x.warnings); })
      .def_property_readonly("rules", [](const Packs& x) {
        std::vector<std::pair<std::string, std::string>> out;
        for (const Rule& r : x.rules->rules) out.emplace_back(r.name, r.kind == Rule::Kind::Fusion ? "fusion" : "rewrite");
        return out;
      });
  m.def("load_packs", [](const std::vector<std::string>& files, const std::optional<TargetProfile>& target,
                         const std::vector<std::string>& added) {
    TargetProfile t = target ? *target : defaultTarget();
    return fromLoaded(driver::loadPacks(files, *t.target, added));
  });
  m.def("pack_from_string",
        [](const std::string& text, const std::string& name) { return fromLoaded(driver::loadPackText(name, text)); });

  py::class_<TargetProfile>(m, "Target")
      .def_property_readonly("name", [](const TargetProfile& x) { return x.target->name; })
      .def_property_readonly("path", [](const TargetProfile& x) { return x.path; })
      .def_property_readonly("device_match", [](const TargetProfile& x) { return x.target->deviceMatch; });
  m.def("load_target", [](const std::string& path) {
    if (path.empty()) return defaultTarget();
    return TargetProfile{std::make_shared<Target>(take(driver::loadTargetOrDefault(path), "TargetError")), path};
  });

  py::class_<Compiled, std::shared_ptr<Compiled>>(m, "Compiled")
      .def("report_text", &Compiled::reportText)
      .def("html_report", &Compiled::htmlReport, py::arg("measured"))
      .def("report", &Compiled::report)
      .def("plan", &Compiled::plan)
      .def("fused_onnx", &Compiled::fusedOnnx)
      .def("inputs", &Compiled::inputs)
      .def("kernel_sources", &Compiled::kernelSources)
      .def("run", &Compiled::run, py::arg("feeds"), py::arg("interpreter"), py::arg("device"), py::arg("progress"))
      .def("build", &Compiled::build, py::arg("device"), py::arg("progress"))
      .def("device_name", &Compiled::deviceName);
  m.def("compile", &compile, py::arg("model"), py::arg("packs"), py::arg("target"), py::arg("dims"), py::arg("fuse"),
        py::arg("rewrite"));

  // Parallel kernel builds (Device::prepare): `helper` is the argv that runs
  // fusec/_build_kernels.py; build_kernel_files is what that script does.
  m.def("set_build_helper", [](const std::vector<std::string>& helper) { codegen::Device::setBuildHelper(helper); });
  // The error's message, empty on success (the helper imports this module
  // alone, without the package's error classes).
  m.def("build_kernel_files", [](const std::string& device, const std::vector<std::string>& files) {
    py::gil_scoped_release release;
    Status st = codegen::Device::buildProgramFiles(device, files);
    return st ? std::string() : st.error().message;
  });

  m.def("spirv", [](const std::string& source, const std::string& kernel) {
    Expected<codegen::SpirvModule> spv = [&] {
      py::gil_scoped_release release;
      return codegen::compileToSpirv(source, kernel);
    }();
    const codegen::SpirvModule module = take(std::move(spv), "CompileError");
    return py::bytes(reinterpret_cast<const char*>(module.words.data()), module.words.size() * 4);
  });

  m.def("verify", [](const Packs& p, const std::vector<std::string>& only, int instances, uint64_t seed, bool opencl,
                     const std::optional<TargetProfile>& target) {
    if (instances < 1 || instances > 100000) raise("RuleError", "instances must be between 1 and 100000");
    for (const std::string& name : only)
      if (!p.rules->find(name)) raise("RuleError", "no rule `" + name + "` in the packs");
    TargetProfile t = target ? *target : defaultTarget();
    std::unique_ptr<codegen::Device> device;
    if (opencl) device = take(codegen::Device::open(t.target->deviceMatch), "DeviceError");
    driver::VerifyOptions options;
    options.seed = seed;
    options.instances = instances;
    options.target = t.target.get();
    options.device = device.get();
    std::vector<std::tuple<std::string, std::string, int, std::string, std::string>> out;
    py::gil_scoped_release release;
    for (const driver::RuleVerdict& v : driver::verifyRules(*p.rules, options, only))
      out.emplace_back(v.rule->name, std::string(driver::verdictName(v.kind)), v.instances, v.detail,
                       v.counterexample ? driver::describeCounterexample(v) : std::string());
    return out;
  });

  m.def("explain", [](const Model& model, const std::string& rule, const std::string& node,
                      const std::optional<Packs>& packs, const std::optional<TargetProfile>& target) {
    TargetProfile t = target ? *target : defaultTarget();
    Packs p = packs ? *packs : fromLoaded(driver::loadPacks({}, *t.target));
    Expected<std::string> text = [&] {
      py::gil_scoped_release release;
      return driver::explainRule(model.graph->clone(), *p.rules, *t.target, rule, node);
    }();
    return take(std::move(text), "RuleError");
  });
}
