/// Writing a deployment bundle; see Bundle.h and bundle/host.cpp (the reader).
#include "fusec/codegen/Bundle.h"

#include <fstream>
#include <sstream>

#include "fusec/engine/Files.h"

namespace fusec::codegen {
namespace fs = std::filesystem;
namespace {

/// A name as one whitespace-free field of program.txt.
std::string field(const std::string& name) {
  std::string out = name.empty() ? "_" : name;
  for (char& c : out)
    if (std::isspace(static_cast<unsigned char>(c))) c = '_';
  return out;
}

std::string shapeField(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

Status writeFile(const fs::path& path, const void* data, size_t bytes) {
  return writeOutputFile(path.string(), std::string_view(static_cast<const char*>(data), bytes));
}

Status writeFile(const fs::path& path, const std::string& text) { return writeFile(path, text.data(), text.size()); }

const char* kindName(ScheduledBuffer::Kind k) {
  switch (k) {
    case ScheduledBuffer::Kind::Constant: return "constant";
    case ScheduledBuffer::Kind::Input: return "input";
    case ScheduledBuffer::Kind::Intermediate: return "intermediate";
    case ScheduledBuffer::Kind::Part: return "part";
    case ScheduledBuffer::Kind::View: return "view";
  }
  return "?";
}

const char* kCMakeLists = R"(# Builds the host program of a fusec deployment bundle (plain OpenCL).
cmake_minimum_required(VERSION 3.16)
project(fusec_bundle CXX)
set(CMAKE_CXX_STANDARD 17)
find_package(OpenCL REQUIRED)
add_executable(fusec-bundle-run host.cpp)
target_link_libraries(fusec-bundle-run PRIVATE OpenCL::OpenCL)
)";

std::string readme(const std::string& title, const Graph& g, const Schedule& s) {
  std::ostringstream os;
  os << "# fusec deployment bundle: " << title << "\n\n"
     << s.kernels.size() << " OpenCL C kernels in launch order, " << s.buffers.size()
     << " device buffers; the host program needs only an OpenCL 1.2 driver and a C++17 compiler.\n\n"
     << "    c++ -O2 -std=c++17 host.cpp -lOpenCL -o fusec-bundle-run   # or: cmake -S . -B build && cmake --build build\n"
     << "    ./fusec-bundle-run . --check           # runs the sample inputs, compares with expected/\n"
     << "    ./fusec-bundle-run . --input x.bin --output-dir out --repeat 10\n\n"
     << "Inputs and outputs are raw little-endian row-major files (`--input` once per input, in order):\n\n";
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const TensorType& t = g.value(g.inputs()[i]).type;
    os << "- input " << i << " `" << g.value(g.inputs()[i]).name << "`: " << dtypeName(t.dtype) << " "
       << shapeField(t.staticShape()) << "\n";
  }
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const TensorType& t = g.value(g.outputs()[i]).type;
    os << "- output " << i << " `" << g.value(g.outputs()[i]).name << "`: " << dtypeName(t.dtype) << " "
       << shapeField(t.staticShape()) << "\n";
  }
  os << "\nFiles: `program.txt` (buffers, inputs, outputs and kernels in launch order; each record's fields are\n"
     << "described in its comment lines), `kernels/*.cl`, `constants.bin` (the weights, at the offsets\n"
     << "program.txt gives), `inputs/<i>.bin` sample inputs and `expected/<i>.bin` the outputs fusec's\n"
     << "reference interpreter computed for them, `host.cpp` the host program (with `Tolerance.h` and\n"
     << "`CpuThreads.h`, which it includes).\n";
  return os.str();
}

}  // namespace

Status writeBundle(const fs::path& dir, const Graph& g, const Schedule& s, const BundleSample& sample,
                   const std::string& title) {
  if (sample.inputs.size() != g.inputs().size() || sample.expected.size() != g.outputs().size())
    return Error{"bundle sample needs one tensor per graph input and output"};
  for (size_t i = 0; i < g.inputs().size(); ++i)
    if (!s.inputBuffers[i]) return Error{"input `" + g.value(g.inputs()[i]).name + "` has no static shape"};
  std::error_code ec;
  for (const char* sub : {"kernels", "inputs", "expected"}) {
    fs::create_directories(dir / sub, ec);
    if (ec) return Error{(dir / sub).string() + ": cannot create folder: " + ec.message()};
  }
  std::ostringstream program;
  program << "fusec-bundle 2\n# " << title << "\n";
  // Buffers; constants are concatenated into constants.bin.
  std::string constants;
  program << "# buffer INDEX constant BYTES OFFSET | buffer INDEX input|intermediate BYTES | buffer INDEX part BYTES "
             "PARENT OFFSET\n";
  for (size_t b = 0; b < s.buffers.size(); ++b) {
    const ScheduledBuffer& sb = s.buffers[b];
    program << "buffer " << b << " " << kindName(sb.kind);
    if (sb.kind == ScheduledBuffer::Kind::Constant) {
      const Tensor& t = sb.constant(g);
      constants.resize((constants.size() + 63) / 64 * 64);  // each constant 64-byte aligned in the file
      program << " " << t.byteSize() << " " << constants.size();
      constants.append(reinterpret_cast<const char*>(t.raw()), t.byteSize());
    } else if (sb.kind == ScheduledBuffer::Kind::Part || sb.kind == ScheduledBuffer::Kind::View) {
      program << " " << sb.bytes << " " << sb.parent << " " << sb.offset;
    } else {
      program << " " << sb.bytes;
    }
    program << "\n";
  }
  auto port = [&](const char* record, size_t buffer, const Value& v) {
    const Shape shape = v.type.staticShape();
    program << record << " " << buffer << " " << shapeNumel(shape) * static_cast<int64_t>(dtypeSize(v.type.dtype)) << " "
            << dtypeName(v.type.dtype) << " " << shapeField(shape) << " " << field(v.name) << "\n";
  };
  program << "# input|output BUFFER BYTES DTYPE SHAPE NAME\n";
  for (size_t i = 0; i < g.inputs().size(); ++i) port("input", *s.inputBuffers[i], g.value(g.inputs()[i]));
  for (size_t i = 0; i < g.outputs().size(); ++i) port("output", s.outputBuffers[i], g.value(g.outputs()[i]));
  // Each argument with the bytes the kernel reads (r) or writes (w) there:
  // the host checks every buffer is large enough and that nothing writes
  // into a constant or an input.
  program << "# kernel NAME FILE GLOBAL_SIZE LOCAL_SIZE(0: the driver's choice) BUFFER:BYTES:r|w... (inputs, outputs, "
             "derived constants)\n";
  auto valueBytes = [&](ValueId v) {
    return shapeNumel(g.value(v).type.staticShape()) * static_cast<int64_t>(dtypeSize(g.value(v).type.dtype));
  };
  // The kernel file states its own launch and the bytes of each argument
  // (its first line): program.txt only chooses the buffers, and the host
  // holds it to what the kernel says.
  for (size_t k = 0; k < s.kernels.size(); ++k) {
    const KernelSource& ks = s.kernels[k];
    const std::string file = "kernels/" + ks.name + ".cl";
    std::string launch = std::to_string(ks.globalSize) + " " + std::to_string(ks.localSize), args;
    program << "kernel " << ks.name << " " << file << " " << launch;
    for (size_t a = 0; a < s.arguments[k].size(); ++a) {
      const size_t in = ks.inputs.size(), out = in + ks.outputs.size();
      const int64_t bytes = a < in ? valueBytes(ks.inputs[a])
                            : a < out ? valueBytes(ks.outputs[a - in])
                                      : static_cast<int64_t>(ks.derived[a - out]->byteSize());
      const std::string arg = std::to_string(bytes) + ":" + (a >= in && a < out ? "w" : "r");
      program << " " << s.arguments[k][a] << ":" << arg;
      args += " " + arg;
    }
    program << "\n";
    if (Status st = writeFile(dir / file, "// fusec-bundle-kernel: " + launch + args + "\n" + ks.source); !st) return st;
  }
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const Tensor& t = sample.inputs[i];
    if (Status st = writeFile(dir / "inputs" / (std::to_string(i) + ".bin"), t.raw(), t.byteSize()); !st) return st;
  }
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const Tensor& t = sample.expected[i];
    if (Status st = writeFile(dir / "expected" / (std::to_string(i) + ".bin"), t.raw(), t.byteSize()); !st) return st;
  }
  for (auto [name, text] : {std::pair<const char*, std::string>{"program.txt", program.str()},
                            {"constants.bin", constants},
                            {"host.cpp", bundleHostSource()},
                            {"Tolerance.h", bundleToleranceSource()},
                            {"CpuThreads.h", bundleCpuThreadsSource()},
                            {"CMakeLists.txt", kCMakeLists},
                            {"README.md", readme(title, g, s)}})
    if (Status st = writeFile(dir / name, text); !st) return st;
  return Status::success();
}

}  // namespace fusec::codegen
