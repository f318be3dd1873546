/// OpenCL runtime; see OpenCL.h. Handles are kept as void* in the header so
/// that only this file includes CL/cl.h.
#define CL_TARGET_OPENCL_VERSION 120
#include "fusec/codegen/OpenCL.h"

#include <CL/cl.h>

#include <cstdio>
#include <sched.h>
#include <sys/stat.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <thread>
#include <sstream>

#include "fusec/codegen/Canonical.h"
#include "fusec/codegen/CpuThreads.h"
#include "fusec/codegen/DiskCache.h"
#include "fusec/engine/Files.h"
#include "fusec/engine/Process.h"

namespace fusec::codegen {
namespace fs = std::filesystem;
namespace {

std::string clError(cl_int e) { return "OpenCL error " + std::to_string(e); }

std::string deviceString(cl_device_id d, cl_device_info what) {
  size_t n = 0;
  clGetDeviceInfo(d, what, 0, nullptr, &n);
  std::string s(n, '\0');
  clGetDeviceInfo(d, what, n, s.data(), nullptr);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

/// How PoCL compiles and caches, unless the user set it:
///
/// - One compilation per kernel. By default PoCL compiles a generic
///   work-group function when a program's binary is read (fusec reads it,
///   to cache it), then another, specialized to the launch's sizes, at the
///   first launch. POCL_WORK_GROUP_SPECIALIZATION=0 keeps the first: cold
///   builds 35-45 % shorter (ResNet-18 34.3 -> 22.3 s, a BERT layer 10.2 ->
///   5.6 s), device time unchanged within the noise of alternating runs
///   (seven zoo models, 0.97-1.08x either way, no model slower in both
///   sittings).
/// - No second cache. PoCL's own cache (by default in $HOME/.cache/pocl,
///   which it creates even for a HOME that does not exist, and trusts) is
///   off, in a private temporary folder: fusec's signed cache (DiskCache.h)
///   holds each program's binary with its compiled work-group function, so
///   a warm start compiles nothing without it.
void configurePoclByDefault() {
  ::setenv("POCL_WORK_GROUP_SPECIALIZATION", "0", 0);
  if (std::getenv("POCL_CACHE_DIR")) return;
  static const PrivateDir scratch("fusec-pocl");
  if (!scratch.path().empty()) ::setenv("POCL_CACHE_DIR", scratch.path().c_str(), 0);
  ::setenv("POCL_KERNEL_CACHE", "0", 0);
}

}  // namespace

Buffer::Buffer(Buffer&& o) noexcept : mem_(o.mem_), bytes_(o.bytes_) { o.mem_ = nullptr; }
Buffer& Buffer::operator=(Buffer&& o) noexcept {
  std::swap(mem_, o.mem_);
  std::swap(bytes_, o.bytes_);
  return *this;
}
Buffer::~Buffer() {
  if (mem_) clReleaseMemObject(static_cast<cl_mem>(mem_));
}

Device::~Device() {
  for (auto& [label, ev] : events_) clReleaseEvent(static_cast<cl_event>(ev));
  for (auto& [key, k] : kernels_) clReleaseKernel(static_cast<cl_kernel>(k));
  for (auto& [key, p] : programs_) clReleaseProgram(static_cast<cl_program>(p));
  if (queue_) clReleaseCommandQueue(static_cast<cl_command_queue>(queue_));
  if (context_) clReleaseContext(static_cast<cl_context>(context_));
}

Expected<std::unique_ptr<Device>> Device::open(const std::string& match) {
  static const bool configured = (pinPoclWorkersByDefault(), configurePoclByDefault(), true);  // before the first OpenCL call
  (void)configured;
  cl_uint count = 0;
  cl_int err = clGetPlatformIDs(0, nullptr, &count);
  if (err != CL_SUCCESS || count == 0)
    return Error{"no OpenCL platform found; install an OpenCL driver (on Debian: apt-get install pocl-opencl-icd "
                 "ocl-icd-libopencl1)"};
  std::vector<cl_platform_id> platforms(count);
  clGetPlatformIDs(count, platforms.data(), nullptr);
  std::string seen;
  for (cl_platform_id p : platforms) {
    cl_uint n = 0;
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &n) != CL_SUCCESS || n == 0) continue;
    std::vector<cl_device_id> devices(n);
    clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, n, devices.data(), nullptr);
    for (cl_device_id d : devices) {
      const std::string name = deviceString(d, CL_DEVICE_NAME);
      seen += (seen.empty() ? "" : ", ") + name;
      if (!match.empty() && name.find(match) == std::string::npos) continue;
      auto dev = std::unique_ptr<Device>(new Device());
      dev->platform_ = p;
      dev->device_ = d;
      dev->info_.name = name;
      dev->info_.version = deviceString(d, CL_DEVICE_VERSION);
      char pname[256] = {};
      clGetPlatformInfo(p, CL_PLATFORM_NAME, sizeof pname, pname, nullptr);
      dev->info_.platform = pname;
      cl_uint cu = 0;
      cl_ulong lmem = 0;
      size_t wg = 0;
      cl_uint alignBits = 0;
      clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, nullptr);
      clGetDeviceInfo(d, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof alignBits, &alignBits, nullptr);
      clGetDeviceInfo(d, CL_DEVICE_LOCAL_MEM_SIZE, sizeof lmem, &lmem, nullptr);
      clGetDeviceInfo(d, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof wg, &wg, nullptr);
      cl_uint nativeFloat = 1;
      cl_device_type type = 0;
      clGetDeviceInfo(d, CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT, sizeof nativeFloat, &nativeFloat, nullptr);
      clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof type, &type, nullptr);
      dev->info_.nativeFloatWidth = std::max<cl_uint>(nativeFloat, 1);
      dev->info_.cpu = (type & CL_DEVICE_TYPE_CPU) != 0;
      dev->info_.computeUnits = cu;
      dev->info_.localMemBytes = static_cast<int64_t>(lmem);
      dev->info_.maxWorkGroupSize = static_cast<int64_t>(wg);
      dev->info_.memBaseAlignBytes = std::max<int64_t>(alignBits / 8, 1);
      dev->context_ = clCreateContext(nullptr, 1, &d, nullptr, nullptr, &err);
      if (err != CL_SUCCESS) return Error{"cannot create an OpenCL context on `" + name + "`: " + clError(err)};
      dev->queue_ = clCreateCommandQueue(static_cast<cl_context>(dev->context_), d, CL_QUEUE_PROFILING_ENABLE, &err);
      if (err != CL_SUCCESS) return Error{"cannot create an OpenCL queue on `" + name + "`: " + clError(err)};
      return dev;
    }
  }
  if (seen.empty()) return Error{"no OpenCL device found; install one (on Debian: apt-get install pocl-opencl-icd)"};
  return Error{"no OpenCL device matches `" + match + "`; the devices are: " + seen};
}

std::string Device::programKey(const std::string& canonical) const {
  return sha256Hex(canonical + "\n" + info_.name + "\n" + info_.version + "\n" + kKernelBuildOptions);
}

Expected<void*> Device::program(const std::string& key, const std::string& canonical, bool build,
                                const std::string& kernelName, const std::string& readable) {
  if (auto it = programs_.find(key); it != programs_.end()) return it->second;
  cl_int err = CL_SUCCESS;
  auto ctx = static_cast<cl_context>(context_);
  auto dev = static_cast<cl_device_id>(device_);
  cl_program program = nullptr;
  // On-disk cache of device binaries, keyed by the canonical program and
  // the device. An entry is trusted only whole and signed by this user's
  // cache key (DiskCache); anything else is rebuilt from source and replaced.
  const DiskCache& cache = DiskCache::user();
  const std::string entry = key + ".bin";
  if (std::optional<std::string> bin = cache.get(entry)) {
    const unsigned char* ptr = reinterpret_cast<const unsigned char*>(bin->data());
    const size_t len = bin->size();
    cl_int status = CL_SUCCESS;
    program = clCreateProgramWithBinary(ctx, 1, &dev, &len, &ptr, &status, &err);
    if (err != CL_SUCCESS || status != CL_SUCCESS ||
        clBuildProgram(program, 1, &dev, kKernelBuildOptions, nullptr, nullptr) != CL_SUCCESS) {
      if (program) clReleaseProgram(program);
      program = nullptr;
    } else {
      ++cacheHits_;
    }
  }
  if (!program && !build) return nullptr;
  if (!program) {
    const char* src = canonical.c_str();
    program = clCreateProgramWithSource(ctx, 1, &src, nullptr, &err);
    if (err != CL_SUCCESS) return Error{"cannot create a program: " + clError(err)};
    err = clBuildProgram(program, 1, &dev, kKernelBuildOptions, nullptr, nullptr);
    if (err != CL_SUCCESS) {
      size_t n = 0;
      clGetProgramBuildInfo(program, dev, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
      std::string log(n, '\0');
      clGetProgramBuildInfo(program, dev, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
      clReleaseProgram(program);
      return Error{"kernel `" + kernelName + "` does not build on `" + info_.name + "`:\n" + log + "\n--- source ---\n" +
                   readable};
    }
    ++built_;
    size_t binSize = 0;
    clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof binSize, &binSize, nullptr);
    if (binSize > 0) {
      std::string bin(binSize, '\0');
      unsigned char* ptr = reinterpret_cast<unsigned char*>(bin.data());
      if (clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof ptr, &ptr, nullptr) == CL_SUCCESS) cache.put(entry, bin);
    }
  }
  programs_[key] = program;
  return static_cast<void*>(program);
}

Expected<void*> Device::kernel(const std::string& source, const std::string& kernelName) {
  // Groups that compute the same thing share one program, one binary and
  // one kernel object (Canonical.h); arguments are set at each launch.
  const CanonicalProgram canonical = canonicalProgram(source, kernelName);
  const std::string key = programKey(canonical.text);
  if (auto it = kernels_.find(key + canonical.entry); it != kernels_.end()) return it->second;
  Expected<void*> p = program(key, canonical.text, true, kernelName, source);
  if (!p) return p.error();
  cl_int err = CL_SUCCESS;
  cl_kernel k = clCreateKernel(static_cast<cl_program>(p.value()), canonical.entry.c_str(), &err);
  if (err != CL_SUCCESS) return Error{"no kernel `" + kernelName + "` in its program: " + clError(err)};
  kernels_[key + canonical.entry] = k;
  return static_cast<void*>(k);
}

namespace {

std::vector<std::string>& buildHelper() {
  static std::vector<std::string> argv;
  return argv;
}

}  // namespace

void Device::setBuildHelper(std::vector<std::string> argv) { buildHelper() = std::move(argv); }

Status Device::buildProgramFiles(const std::string& deviceName, const std::vector<std::string>& files) {
  Expected<std::unique_ptr<Device>> d = open(deviceName);
  if (!d) return d.error();
  std::optional<Error> first;
  for (const std::string& file : files) {
    Expected<std::string> text = readInputFile(file, int64_t{64} << 20);
    // Already canonical: its key is the one the process that asked uses.
    Status st = text ? (*d)->prepare({{text.value(), std::string(kCanonicalEntry)}}) : Status(text.error());
    if (!st && !first) first = Error{file + ": " + st.error().message};
  }
  if (first) return *first;
  return Status::success();
}

Status Device::prepare(const Sources& kernels, const std::function<void(size_t, size_t)>& progress) {
  struct Wanted {
    std::string key, canonical;
    const std::pair<std::string, std::string>* from;  // (readable source, kernel name), for errors
  };
  std::vector<Wanted> missing;
  std::set<std::string> seen;
  size_t total = 0, done = 0;
  for (const auto& k : kernels) {
    CanonicalProgram c = canonicalProgram(k.first, k.second);
    std::string key = programKey(c.text);
    if (!seen.insert(key).second) continue;
    ++total;
    Expected<void*> found = program(key, c.text, false, k.second, k.first);  // built or cached already
    if (!found) return found.error();
    if (!found.value()) missing.push_back({std::move(key), std::move(c.text), &k});
  }
  done = total - missing.size();
  if (progress) progress(done, total);
  auto buildHere = [&](const Wanted& w) -> Status {
    Expected<void*> p = program(w.key, w.canonical, true, w.from->second, w.from->first);
    if (!p) return p.error();
    if (progress) progress(++done, total);
    return Status::success();
  };
  // Helpers, one per further core, each with every (helpers+1)-th program.
  size_t cores = std::max<size_t>(1, std::thread::hardware_concurrency());
  cpu_set_t allowed;  // the cores this process may run on (taskset, a cgroup's cpuset)
  if (::sched_getaffinity(0, sizeof allowed, &allowed) == 0) cores = std::max(1, CPU_COUNT(&allowed));
  // A helper starts PoCL and loads its kernel library (~0.5 s) before it
  // compiles: worth it from two programs each. fusec verify's instances,
  // one to three programs each, ran 10 % slower with a helper per pair.
  const size_t processes = std::min(cores, missing.size() / 2);
  const size_t helpers = buildHelper().empty() || !DiskCache::user().enabled() || processes < 2 ? 0 : processes - 1;
  std::optional<PrivateDir> scratch;  // the helpers' programs and logs
  if (helpers > 0) scratch.emplace("fusec-build");
  std::vector<std::thread> running;
  if (helpers > 0 && !scratch->path().empty()) {
    for (size_t h = 0; h < helpers; ++h) {
      std::vector<std::string> argv = buildHelper();
      argv.insert(argv.end(), {"--device", info_.name});
      for (size_t i = h + 1; i < missing.size(); i += helpers + 1) {
        const std::string file = (scratch->path() / (std::to_string(i) + ".cl")).string();
        if (!writeOutputFile(file, missing[i].canonical)) continue;
        argv.push_back(file);
      }
      const std::filesystem::path log = scratch->path() / ("helper" + std::to_string(h) + ".log");
      // Its exit status does not matter: what it does not deliver is
      // compiled here. A helper that hangs is stopped after a generous
      // minute plus half a minute a program.
      const double limit = 60 + 30.0 * static_cast<double>(argv.size());
      running.emplace_back([argv, log, limit] { (void)runProgram(argv, log, limit); });
    }
  }
  const size_t stride = running.empty() ? 1 : helpers + 1;
  Status mine = Status::success();
  for (size_t i = 0; i < missing.size() && mine; i += stride) mine = buildHere(missing[i]);
  for (std::thread& t : running) t.join();
  if (!mine) return mine;
  // What the helpers compiled is in the cache now; what they did not
  // deliver (a helper that failed, a cache entry that did not verify) is
  // compiled here.
  for (size_t i = 0; i < missing.size(); ++i) {
    if (i % stride == 0) continue;
    const size_t hits = cacheHits_;
    if (Status st = buildHere(missing[i]); !st) return st;
    if (cacheHits_ > hits) {  // a helper compiled it
      --cacheHits_;
      ++built_;
    }
  }
  return Status::success();
}

Expected<Buffer> Device::allocate(size_t bytes) {
  cl_int err = CL_SUCCESS;
  Buffer b;
  b.bytes_ = bytes;
  b.mem_ = clCreateBuffer(static_cast<cl_context>(context_), CL_MEM_READ_WRITE, std::max<size_t>(bytes, 4), nullptr, &err);
  if (err != CL_SUCCESS) return Error{"cannot allocate " + std::to_string(bytes) + " bytes on the device: " + clError(err)};
  return b;
}

Expected<Buffer> Device::subBuffer(const Buffer& parent, size_t offset, size_t bytes) {
  if (bytes == 0 || offset + bytes > parent.bytes() || offset % static_cast<size_t>(info_.memBaseAlignBytes) != 0)
    return Error{"no sub-buffer of " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) + " in a buffer of " +
                 std::to_string(parent.bytes()) + " bytes (the device aligns sub-buffers to " +
                 std::to_string(info_.memBaseAlignBytes) + " bytes)"};
  const cl_buffer_region region{offset, bytes};
  cl_int err = CL_SUCCESS;
  Buffer b;
  b.bytes_ = bytes;
  b.mem_ = clCreateSubBuffer(static_cast<cl_mem>(parent.handle()), CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region,
                             &err);
  if (err != CL_SUCCESS) return Error{"cannot create a sub-buffer: " + clError(err)};
  return b;
}

Expected<Buffer> Device::upload(const Tensor& t) {
  Expected<Buffer> b = allocate(t.byteSize());
  if (!b) return b;
  if (Status st = write(b.value(), t); !st) return st.error();
  return b;
}

namespace {

Status writeBuffer(void* queue, Buffer& b, const Tensor& t, cl_bool blocking) {
  if (t.byteSize() == 0) return Status::success();
  if (t.byteSize() > b.bytes()) return Error{"upload of " + std::to_string(t.byteSize()) + " bytes into a smaller buffer"};
  cl_int err = clEnqueueWriteBuffer(static_cast<cl_command_queue>(queue), static_cast<cl_mem>(b.handle()), blocking, 0,
                                    t.byteSize(), t.raw(), 0, nullptr, nullptr);
  if (err != CL_SUCCESS) return Error{"upload failed: " + clError(err)};
  return Status::success();
}

Status readBuffer(void* queue, const Buffer& b, Tensor& into, cl_bool blocking) {
  if (into.byteSize() == 0) return Status::success();
  if (into.byteSize() > b.bytes())
    return Error{"download of " + std::to_string(into.byteSize()) + " bytes from a smaller buffer"};
  cl_int err = clEnqueueReadBuffer(static_cast<cl_command_queue>(queue), static_cast<cl_mem>(b.handle()), blocking, 0,
                                   into.byteSize(), into.raw(), 0, nullptr, nullptr);
  if (err != CL_SUCCESS) return Error{"download failed: " + clError(err)};
  return Status::success();
}

}  // namespace

Status Device::write(Buffer& b, const Tensor& t) { return writeBuffer(queue_, b, t, CL_TRUE); }
Status Device::download(const Buffer& b, Tensor& into) { return readBuffer(queue_, b, into, CL_TRUE); }
Status Device::enqueueWrite(Buffer& b, const Tensor& t) { return writeBuffer(queue_, b, t, CL_FALSE); }
Status Device::enqueueRead(const Buffer& b, Tensor& into) { return readBuffer(queue_, b, into, CL_FALSE); }

Status Device::launch(void* kernel, const std::vector<KernelArg>& args, size_t globalSize, const std::string& label,
                      size_t localSize) {
  auto k = static_cast<cl_kernel>(kernel);
  for (cl_uint i = 0; i < args.size(); ++i) {
    cl_int err;
    if (args[i].buffer) {
      cl_mem m = static_cast<cl_mem>(args[i].buffer->handle());
      err = clSetKernelArg(k, i, sizeof m, &m);
    } else {
      err = clSetKernelArg(k, i, sizeof(int32_t), &args[i].scalar);
    }
    if (err != CL_SUCCESS) return Error{"argument " + std::to_string(i) + " of `" + label + "`: " + clError(err)};
  }
  if (globalSize == 0) return Status::success();
  cl_event ev = nullptr;
  cl_int err = clEnqueueNDRangeKernel(static_cast<cl_command_queue>(queue_), k, 1, nullptr, &globalSize,
                                      localSize ? &localSize : nullptr, 0, nullptr, &ev);
  if (err != CL_SUCCESS) return Error{"cannot launch `" + label + "`: " + clError(err)};
  events_.emplace_back(label, ev);
  return Status::success();
}

Status Device::wait() {
  cl_int err = clFinish(static_cast<cl_command_queue>(queue_));
  if (err != CL_SUCCESS) return Error{"the device failed: " + clError(err)};
  return Status::success();
}

std::vector<std::pair<std::string, double>> Device::kernelTimes() {
  std::vector<std::pair<std::string, double>> times;
  for (auto& [label, e] : events_) {
    cl_ulong start = 0, end = 0;
    auto ev = static_cast<cl_event>(e);
    clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof start, &start, nullptr);
    clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof end, &end, nullptr);
    times.emplace_back(label, static_cast<double>(end - start) * 1e-9);
    clReleaseEvent(ev);
  }
  events_.clear();
  return times;
}

Expected<std::vector<std::pair<std::string, double>>> Device::finish() {
  if (Status st = wait(); !st) return st.error();
  return kernelTimes();
}

}  // namespace fusec::codegen
