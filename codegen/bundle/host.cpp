// Host program of a fusec deployment bundle: plain OpenCL 1.2 and the C++17
// standard library, nothing else. It reads the bundle written by
// `fusec compile MODEL --emit bundle`:
//
//   program.txt      buffers, inputs, outputs and kernels in launch order
//   kernels/*.cl     one OpenCL C kernel per line `kernel` of program.txt
//   constants.bin    the weights, at the offsets program.txt gives
//   inputs/<i>.bin   sample inputs (raw, little-endian, row-major)
//   expected/<i>.bin what the reference interpreter computed for them
//
// builds every kernel, uploads the constants once, runs the kernels back to
// back on an in-order queue and reports the time of each from profiling
// events.
//
//   build:  c++ -O2 -std=c++17 host.cpp -lOpenCL -o fusec-bundle-run
//   run:    ./fusec-bundle-run [BUNDLE_DIR] [--input FILE]... [--output-dir DIR]
//                              [--repeat N] [--check] [--device NAME] [--copy-parts]
//
// Without --input the sample inputs are used; --check compares the outputs
// with expected/ by fusec's rule (Tolerance.h: float32 within
// atol + rtol * max|expected| per output, other types exactly) and exits 1 on
// a mismatch. --copy-parts gives every Concat input written in place a
// buffer of its own, copied into place after its kernel, and every Slice
// read in place one copied from its operand before each kernel reading it,
// as on a device whose sub-buffers cannot start at their offsets.
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "CpuThreads.h"
#include "Tolerance.h"
#include <fstream>
#include <iostream>
#include <map>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(cl_int err, const std::string& what) {
  if (err != CL_SUCCESS) throw Failure(what + " failed (OpenCL error " + std::to_string(err) + ")");
}

// A bundle may come from anywhere: every file it names is read only if it is
// a regular file (a FIFO neither blocks nor is read), of at most `maxBytes`.
constexpr size_t kMaxTextBytes = size_t{64} << 20;       // program.txt, a kernel
constexpr size_t kMaxDataBytes = size_t{1} << 36;        // constants.bin, inputs, expected outputs

std::string readFile(const std::string& path, size_t maxBytes = kMaxTextBytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw Failure("cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Failure(path + ": not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > maxBytes) {
    ::close(fd);
    throw Failure(path + ": " + std::to_string(st.st_size) + " bytes, more than the " + std::to_string(maxBytes) + " allowed");
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, &bytes[done], bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (done != bytes.size()) throw Failure("cannot read the whole of " + path);
  return bytes;
}

// `dir`/`file` when its real path lies inside the bundle's: a link to a file
// elsewhere is not read (its lines would show in a build log).
std::string insideBundle(const std::string& dir, const std::string& file) {
  const std::string path = dir + "/" + file;
  char* root = ::realpath(dir.c_str(), nullptr);
  char* real = ::realpath(path.c_str(), nullptr);
  const std::string r = root ? root : "", f = real ? real : "";
  std::free(root);
  std::free(real);
  if (r.empty() || f.empty()) throw Failure("cannot open " + path);
  if (f.size() <= r.size() || f.compare(0, r.size(), r) != 0 || f[r.size()] != '/')
    throw Failure(path + " leads outside the bundle");
  return path;
}

// Writes `data` to `file`, a regular file or none yet: never through a link,
// never into a device, FIFO or socket.
void writeRegularFile(const std::string& file, const std::string& data) {
  struct stat st {};
  if (::lstat(file.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) throw Failure(file + ": not a regular file; not written");
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) throw Failure("cannot write " + file + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (done != data.size()) throw Failure("cannot write " + file);
}

// A count in program.txt: decimal digits only, within `max` (no sign, no
// wrap-around).
bool parseCount(const std::string& text, uint64_t max, size_t& out) {
  if (text.empty() || text.size() > 20 || text.find_first_not_of("0123456789") != std::string::npos) return false;
  uint64_t v = 0;
  for (char c : text) {
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (v > (max - digit) / 10) return false;
    v = v * 10 + digit;
  }
  out = static_cast<size_t>(v);
  return true;
}

// A kernel file: `kernels/NAME.cl`, NAME of letters, digits and `_`: never
// a path out of the bundle.
bool safeKernelFile(const std::string& file) {
  const std::string prefix = "kernels/", suffix = ".cl";
  if (file.size() <= prefix.size() + suffix.size() || file.compare(0, prefix.size(), prefix) != 0 ||
      file.compare(file.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  for (size_t i = prefix.size(); i < file.size() - suffix.size(); ++i) {
    const char c = file[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

struct BufferSpec {
  std::string kind;  // constant, input, intermediate, part
  size_t bytes = 0;
  size_t offset = 0;  // into constants.bin; for a part, into its parent
  size_t parent = 0;  // a part's buffer
};

struct Port {  // a graph input or output
  std::string name, dtype, shape;
  size_t buffer = 0, bytes = 0;
};

struct KernelArg {
  size_t buffer = 0, bytes = 0;  // the buffer and how many bytes of it the kernel reads or writes
  bool writes = false;
};

struct KernelSpec {
  std::string name, file;
  size_t global = 0, local = 0;
  std::vector<KernelArg> args;
};

// The most work-items one launch may have: fusec's kernels index with 32
// bits.
constexpr size_t kMaxGlobalSize = size_t{1} << 31;

struct Program {
  std::vector<BufferSpec> buffers;
  std::vector<Port> inputs, outputs;
  std::vector<KernelSpec> kernels;
};

// program.txt: one record per line, fields separated by spaces; `#` starts
// a comment line. Everything is checked here, before any OpenCL call: sizes
// and offsets without overflow, every part and view inside its parent,
// every kernel argument inside its buffer, no kernel writing a constant, an
// input or a view, kernel files inside the bundle.
Program parseProgram(const std::string& dir) {
  std::istringstream text(readFile(dir + "/program.txt"));
  Program p;
  std::string line;
  int lineNo = 0;
  bool versioned = false;
  auto bad = [&](const std::string& why) {
    return Failure(dir + "/program.txt:" + std::to_string(lineNo) + ": " + why);
  };
  constexpr uint64_t kMaxBytes = kMaxDataBytes;
  auto count = [&](std::istringstream& in, uint64_t max, size_t& out) {
    std::string field;
    return static_cast<bool>(in >> field) && parseCount(field, max, out);
  };
  while (std::getline(text, line)) {
    ++lineNo;
    std::istringstream in(line);
    std::string record;
    if (!(in >> record) || record[0] == '#') continue;
    if (record != "fusec-bundle" && !versioned) throw bad("the first record must be `fusec-bundle 2`");
    if (record == "fusec-bundle") {
      size_t version = 0;
      if (!count(in, 1000, version) || version != 2)
        throw bad("bundle format version 2 expected (made by another fusec: build its own host.cpp)");
      versioned = true;
    } else if (record == "buffer") {
      size_t index = 0;
      BufferSpec b;
      if (!count(in, kMaxBytes, index) || !(in >> b.kind) || !count(in, kMaxBytes, b.bytes) || index != p.buffers.size())
        throw bad("malformed buffer");
      if (b.kind == "constant") {
        if (!count(in, kMaxBytes, b.offset)) throw bad("constant without offset");
      } else if (b.kind == "part" || b.kind == "view") {
        if (!count(in, kMaxBytes, b.parent) || !count(in, kMaxBytes, b.offset)) throw bad(b.kind + " without parent and offset");
        const bool inside = b.parent < index && b.bytes != 0 && b.offset <= p.buffers[b.parent].bytes &&
                            b.bytes <= p.buffers[b.parent].bytes - b.offset;
        const std::string parent = b.parent < index ? p.buffers[b.parent].kind : "";
        if (b.kind == "part" && (!inside || parent != "intermediate"))
          throw bad("a part must lie inside an earlier intermediate buffer");
        if (b.kind == "view" && (!inside || parent == "part" || parent == "view"))
          throw bad("a view must lie inside an earlier buffer that is not a part or a view");
      } else if (b.kind != "input" && b.kind != "intermediate") {
        throw bad("unknown buffer kind `" + b.kind + "`");
      }
      p.buffers.push_back(b);
    } else if (record == "input" || record == "output") {
      Port port;
      if (!count(in, kMaxBytes, port.buffer) || !count(in, kMaxBytes, port.bytes) || !(in >> port.dtype >> port.shape >> port.name))
        throw bad("malformed " + record);
      if (port.buffer >= p.buffers.size() || port.bytes > p.buffers[port.buffer].bytes) throw bad("bad buffer");
      if (record == "input" && p.buffers[port.buffer].kind != "input") throw bad("an input must name an input buffer");
      (record == "input" ? p.inputs : p.outputs).push_back(port);
    } else if (record == "kernel") {
      KernelSpec k;
      if (!(in >> k.name >> k.file) || !count(in, kMaxGlobalSize, k.global) || !count(in, kMaxGlobalSize, k.local))
        throw bad("malformed kernel (NAME FILE GLOBAL_SIZE LOCAL_SIZE, sizes at most 2^31)");
      if (!safeKernelFile(k.file)) throw bad("a kernel file must be kernels/NAME.cl, NAME of letters, digits and _");
      if (k.local != 0 && k.global % k.local != 0) throw bad("the global size must be a multiple of the local size");
      for (std::string field; in >> field;) {
        KernelArg a;
        const size_t first = field.find(':'), second = field.find(':', first + 1);
        if (first == std::string::npos || second == std::string::npos ||
            !parseCount(field.substr(0, first), kMaxBytes, a.buffer) ||
            !parseCount(field.substr(first + 1, second - first - 1), kMaxBytes, a.bytes))
          throw bad("a kernel argument is BUFFER:BYTES:r or BUFFER:BYTES:w");
        const std::string access = field.substr(second + 1);
        if (access != "r" && access != "w") throw bad("a kernel argument is read (r) or written (w)");
        a.writes = access == "w";
        if (a.buffer >= p.buffers.size()) throw bad("argument names no buffer");
        const BufferSpec& b = p.buffers[a.buffer];
        if (a.writes && b.kind != "intermediate" && b.kind != "part")
          throw bad(k.name + " would write into " + b.kind + " buffer " + std::to_string(a.buffer));
        if (a.bytes > b.bytes)
          throw bad("argument " + std::to_string(k.args.size()) + " of " + k.name + " takes " + std::to_string(a.bytes) +
                    " bytes of buffer " + std::to_string(a.buffer) + ", which has " + std::to_string(b.bytes));
        k.args.push_back(a);
      }
      p.kernels.push_back(k);
    } else {
      throw bad("unknown record `" + record + "`");
    }
  }
  if (!versioned) throw bad("no `fusec-bundle 2` record: not a bundle's program.txt");
  return p;
}

// The kernel file's first line states its launch and the bytes and access
// of each argument, as fusec generated them: the kernel record must say the
// same, so that program.txt alone can never make a kernel run past its
// buffers or over a constant (it only chooses the buffers, checked above).
void checkAgainstKernel(const KernelSpec& k, const std::string& source) {
  const std::string tag = "// fusec-bundle-kernel: ";
  const std::string first = source.substr(0, source.find('\n'));
  if (first.compare(0, tag.size(), tag) != 0) throw Failure(k.file + ": no `" + tag + "` line: not a bundle's kernel");
  std::string want = first.substr(tag.size()), got = std::to_string(k.global) + " " + std::to_string(k.local);
  for (const KernelArg& a : k.args) got += " " + std::to_string(a.bytes) + (a.writes ? ":w" : ":r");
  if (got != want) throw Failure("program.txt launches " + k.name + " as `" + got + "`; its kernel file says `" + want + "`");
}

std::string deviceName(cl_device_id d) {
  size_t n = 0;
  clGetDeviceInfo(d, CL_DEVICE_NAME, 0, nullptr, &n);
  std::string s(n, '\0');
  clGetDeviceInfo(d, CL_DEVICE_NAME, n, s.data(), nullptr);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

cl_device_id pickDevice(const std::string& match) {
  fusec::pinPoclWorkersByDefault();  // before the first OpenCL call
  cl_uint count = 0;
  if (clGetPlatformIDs(0, nullptr, &count) != CL_SUCCESS || count == 0)
    throw Failure("no OpenCL platform found; install an OpenCL driver (on Debian: pocl-opencl-icd)");
  std::vector<cl_platform_id> platforms(count);
  check(clGetPlatformIDs(count, platforms.data(), nullptr), "clGetPlatformIDs");
  std::string seen;
  for (cl_platform_id p : platforms) {
    cl_uint n = 0;
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &n) != CL_SUCCESS || n == 0) continue;
    std::vector<cl_device_id> devices(n);
    check(clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, n, devices.data(), nullptr), "clGetDeviceIDs");
    for (cl_device_id d : devices) {
      const std::string name = deviceName(d);
      seen += (seen.empty() ? "" : ", ") + name;
      if (match.empty() || name.find(match) != std::string::npos) return d;
    }
  }
  throw Failure(seen.empty() ? "no OpenCL device found" : "no OpenCL device matches `" + match + "`; there are: " + seen);
}

// Compares an output with the expected bytes; prints the first mismatch.
bool sameOutput(const Port& out, const std::string& got, const std::string& want) {
  if (want.size() != out.bytes) {
    std::cerr << "error: expected output `" << out.name << "` has " << want.size() << " bytes, not " << out.bytes << "\n";
    return false;
  }
  if (out.dtype != "float") {  // fusec's name for float32
    if (got == want) return true;
    std::cerr << "error: output `" << out.name << "` (" << out.dtype << ") differs from the expected bytes\n";
    return false;
  }
  auto element = [](const std::string& bytes) {
    return [&bytes](int64_t i) {
      float f;
      std::memcpy(&f, bytes.data() + 4 * i, 4);
      return static_cast<double>(f);
    };
  };
  const fusec::Comparison c =
      fusec::compareElements(static_cast<int64_t>(out.bytes / 4), element(got), element(want), fusec::Tolerance{});
  if (!c.ok) {
    std::cerr << "error: output `" << out.name << "` element " << c.worst << ": " << c.worstGot << ", expected "
              << c.worstWant << " (max abs error " << c.maxAbsError << ", bound " << c.bound << ")\n";
    return false;
  }
  std::printf("check  %-24s matches the expected output (max abs error %.2g, bound %.2g)\n", out.name.c_str(),
              c.maxAbsError, c.bound);
  return true;
}

int run(int argc, char** argv) {
  std::string dir = ".", outDir, device;
  std::vector<std::string> inputFiles;
  int repeat = 1;
  bool compare = false, copyParts = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw Failure(a + " needs a value");
      return argv[++i];
    };
    if (a == "--input") inputFiles.push_back(value());
    else if (a == "--output-dir") outDir = value();
    else if (a == "--device") device = value();
    else if (a == "--repeat") {
      size_t n = 0;
      if (!parseCount(value(), 1000000, n)) throw Failure("--repeat takes a count from 1 to 1000000");
      repeat = std::max<int>(1, static_cast<int>(n));
    }
    else if (a == "--check") compare = true;
    else if (a == "--copy-parts") copyParts = true;
    else if (a == "-h" || a == "--help") {
      std::printf("usage: %s [BUNDLE_DIR] [--input FILE]... [--output-dir DIR] [--repeat N] [--check] [--device NAME] "
                  "[--copy-parts]\n",
                  argv[0]);
      return 0;
    } else if (!a.empty() && a[0] == '-') throw Failure("unknown option " + a);
    else dir = a;
  }
  if (compare && !inputFiles.empty()) throw Failure("--check compares with the sample inputs' outputs; drop --input");
  const Program p = parseProgram(dir);
  if (inputFiles.size() > p.inputs.size()) throw Failure("the model takes " + std::to_string(p.inputs.size()) + " inputs");

  cl_device_id dev = pickDevice(device);
  cl_int err = CL_SUCCESS;
  // Every OpenCL object this run makes, released however it ends.
  struct Objects {
    cl_context ctx = nullptr;
    cl_command_queue queue = nullptr;
    std::vector<cl_mem> buffers;
    std::vector<cl_program> programs;
    std::vector<cl_kernel> kernels;
    ~Objects() {
      for (cl_kernel k : kernels) clReleaseKernel(k);
      for (cl_program prog : programs) clReleaseProgram(prog);
      for (cl_mem m : buffers) clReleaseMemObject(m);
      if (queue) clReleaseCommandQueue(queue);
      if (ctx) clReleaseContext(ctx);
    }
  } objects;
  cl_context& ctx = objects.ctx;
  cl_command_queue& queue = objects.queue;
  ctx = clCreateContext(nullptr, 1, &dev, nullptr, nullptr, &err);
  check(err, "clCreateContext");
  queue = clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &err);
  check(err, "clCreateCommandQueue");
  std::printf("device: %s\n", deviceName(dev).c_str());

  // Buffers: constants uploaded once, inputs and intermediates allocated.
  // A part (a Concat input its producer writes in place) is a sub-buffer of
  // its parent; where this device cannot start one at the part's offset, a
  // buffer of its own, copied into the parent after each kernel using it. A
  // view (a Slice read in place) likewise, copied from its parent before
  // each kernel reading it.
  const std::string constants = readFile(dir + "/constants.bin", kMaxDataBytes);
  cl_uint alignBits = 0;
  clGetDeviceInfo(dev, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof alignBits, &alignBits, nullptr);
  const size_t align = std::max<size_t>(alignBits / 8, 1);
  std::vector<cl_mem>& buffers = objects.buffers;
  std::vector<bool> detached(p.buffers.size(), false);
  for (const BufferSpec& b : p.buffers) {
    if (b.kind == "constant" && (b.offset > constants.size() || b.bytes > constants.size() - b.offset))
      throw Failure("constants.bin is too short for constant buffer " + std::to_string(buffers.size()));
    if ((b.kind == "part" || b.kind == "view") && b.offset % align == 0 && !copyParts) {
      const cl_buffer_region region{b.offset, b.bytes};
      cl_mem sub = clCreateSubBuffer(buffers[b.parent], CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region, &err);
      check(err, "clCreateSubBuffer of " + std::to_string(b.bytes) + " bytes");
      buffers.push_back(sub);
      continue;
    }
    detached[buffers.size()] = b.kind == "part" || b.kind == "view";
    cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE, std::max<size_t>(b.bytes, 4), nullptr, &err);
    check(err, "clCreateBuffer of " + std::to_string(b.bytes) + " bytes");
    buffers.push_back(m);
    if (b.kind == "constant")
      check(clEnqueueWriteBuffer(queue, m, CL_TRUE, 0, b.bytes, constants.data() + b.offset, 0, nullptr, nullptr),
            "constant upload");
  }

  // Kernels: one program per file, built once.
  const auto buildStart = std::chrono::steady_clock::now();
  std::vector<cl_program>& programs = objects.programs;
  std::vector<cl_kernel>& kernels = objects.kernels;
  for (const KernelSpec& k : p.kernels) {
    const std::string source = readFile(insideBundle(dir, k.file));
    checkAgainstKernel(k, source);
    const char* src = source.c_str();
    cl_program prog = clCreateProgramWithSource(ctx, 1, &src, nullptr, &err);
    check(err, "clCreateProgramWithSource for " + k.file);
    programs.push_back(prog);
    if (clBuildProgram(prog, 1, &dev, fusec::kKernelBuildOptions, nullptr, nullptr) != CL_SUCCESS) {
      size_t n = 0;
      clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
      std::string log(n, '\0');
      clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
      throw Failure(k.file + " does not build:\n" + log);
    }
    cl_kernel kernel = clCreateKernel(prog, k.name.c_str(), &err);
    check(err, "clCreateKernel " + k.name);
    kernels.push_back(kernel);
    for (cl_uint a = 0; a < k.args.size(); ++a)
      check(clSetKernelArg(kernel, a, sizeof(cl_mem), &buffers[k.args[a].buffer]),
            "argument " + std::to_string(a) + " of " + k.name);
  }
  const double buildSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - buildStart).count();
  std::printf("built %zu kernels in %.2f s\n", kernels.size(), buildSeconds);

  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const Port& in = p.inputs[i];
    const std::string file = i < inputFiles.size() ? inputFiles[i] : dir + "/inputs/" + std::to_string(i) + ".bin";
    const std::string data = readFile(file, kMaxDataBytes);
    if (data.size() != in.bytes)
      throw Failure(file + ": input `" + in.name + "` (" + in.dtype + " " + in.shape + ") needs " +
                    std::to_string(in.bytes) + " bytes, the file has " + std::to_string(data.size()));
    if (in.bytes) check(clEnqueueWriteBuffer(queue, buffers[in.buffer], CL_TRUE, 0, in.bytes, data.data(), 0, nullptr, nullptr),
                        "input upload");
  }

  // A view with a buffer of its own gets its bytes from its parent before it is read.
  auto copyView = [&](size_t a) {
    if (!detached[a] || p.buffers[a].kind != "view") return;
    const BufferSpec& view = p.buffers[a];
    check(clEnqueueCopyBuffer(queue, buffers[view.parent], buffers[a], view.offset, 0, view.bytes, 0, nullptr, nullptr),
          "copying a view from its buffer");
  };

  // Runs, timed by profiling events; the best run is reported.
  std::vector<double> best(kernels.size(), 0);
  double bestTotal = -1;
  for (int r = 0; r <= repeat; ++r) {  // run 0 warms up
    std::vector<cl_event> events(kernels.size(), nullptr);
    for (size_t k = 0; k < kernels.size(); ++k) {
      const KernelSpec& spec = p.kernels[k];
      if (spec.global == 0) continue;  // an empty tensor
      for (const KernelArg& a : spec.args) copyView(a.buffer);
      check(clEnqueueNDRangeKernel(queue, kernels[k], 1, nullptr, &spec.global, spec.local ? &spec.local : nullptr, 0,
                                   nullptr, &events[k]),
            "launch of " + spec.name);
      for (const KernelArg& arg : spec.args)
        if (const size_t a = arg.buffer; detached[a] && p.buffers[a].kind == "part") {
          const BufferSpec& part = p.buffers[a];
          check(clEnqueueCopyBuffer(queue, buffers[a], buffers[part.parent], 0, part.offset, part.bytes, 0, nullptr, nullptr),
                "copying a part into its buffer");
        }
    }
    check(clFinish(queue), "running the kernels");
    std::vector<double> times(kernels.size(), 0);
    double total = 0;
    for (size_t k = 0; k < kernels.size(); ++k) {
      if (!events[k]) continue;
      cl_ulong start = 0, end = 0;
      clGetEventProfilingInfo(events[k], CL_PROFILING_COMMAND_START, sizeof start, &start, nullptr);
      clGetEventProfilingInfo(events[k], CL_PROFILING_COMMAND_END, sizeof end, &end, nullptr);
      clReleaseEvent(events[k]);
      times[k] = static_cast<double>(end - start) * 1e-9;
      total += times[k];
    }
    if (r > 0 && (bestTotal < 0 || total < bestTotal)) {
      bestTotal = total;
      best = times;
    }
  }
  std::printf("%zu kernels launched, device time %.3f ms (best of %d runs, profiling events)\n", kernels.size(),
              bestTotal * 1e3, repeat);
  std::vector<size_t> order(kernels.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return best[a] > best[b]; });
  for (size_t i = 0; i < order.size() && i < 10; ++i)
    std::printf("  %-44s %9.3f ms\n", p.kernels[order[i]].name.c_str(), best[order[i]] * 1e3);

  bool ok = true;
  for (size_t i = 0; i < p.outputs.size(); ++i) {
    const Port& out = p.outputs[i];
    std::string data(out.bytes, '\0');
    if (out.bytes) copyView(out.buffer);
    if (out.bytes)
      check(clEnqueueReadBuffer(queue, buffers[out.buffer], CL_TRUE, 0, out.bytes, data.data(), 0, nullptr, nullptr),
            "output download");
    std::printf("output %-24s %s %s\n", out.name.c_str(), out.dtype.c_str(), out.shape.c_str());
    if (!outDir.empty()) {
      const std::string file = outDir + "/" + std::to_string(i) + ".bin";
      writeRegularFile(file, data);
    }
    if (compare) ok = sameOutput(out, data, readFile(dir + "/expected/" + std::to_string(i) + ".bin", kMaxDataBytes)) && ok;
  }

  return ok ? 0 : 1;
}

}  // namespace

#ifndef FUSEC_BUNDLE_HOST_NO_MAIN  // the fuzzer (fuzz/BundleFuzzer.cpp) calls run() itself
int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const Failure& f) {
    std::cerr << "error: " << f.what() << "\n";
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of memory (the bundle asks for more than this machine has)\n";
  }
  return 1;
}
#endif
