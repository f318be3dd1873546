/// The OpenCL runtime: one device, its context and an in-order profiling
/// queue; programs built once per process and cached on disk by source and
/// device; buffers; kernel launches timed with profiling events (no
/// synchronization per kernel).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fusec/engine/Error.h"
#include "fusec/engine/Tensor.h"

namespace fusec::codegen {

struct DeviceInfo {
  std::string platform, name, version;
  int64_t computeUnits = 0;
  int64_t localMemBytes = 0;
  int64_t maxWorkGroupSize = 0;
  int64_t memBaseAlignBytes = 1;  ///< CL_DEVICE_MEM_BASE_ADDR_ALIGN in bytes: where sub-buffers may start
  int64_t nativeFloatWidth = 1;   ///< CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT: floats per vector register
  bool cpu = false;               ///< CL_DEVICE_TYPE_CPU (PoCL's pthread device)
};

/// A device buffer, released with the object.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  ~Buffer();
  void* handle() const { return mem_; }
  size_t bytes() const { return bytes_; }

 private:
  friend class Device;
  void* mem_ = nullptr;
  size_t bytes_ = 0;
};

/// A kernel argument: a buffer or a 32-bit integer.
struct KernelArg {
  const Buffer* buffer = nullptr;
  int32_t scalar = 0;
  static KernelArg of(const Buffer& b) { return KernelArg{&b, 0}; }
  static KernelArg of(int32_t v) { return KernelArg{nullptr, v}; }
};

class Device {
 public:
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  /// Opens the first device whose name contains `match` (any device when
  /// empty). The error says what to install when there is no OpenCL at all.
  static Expected<std::unique_ptr<Device>> open(const std::string& match = "");

  const DeviceInfo& info() const { return info_; }

  /// Builds (or takes from the caches) the canonical program of `source`
  /// (Canonical.h) and returns a handle for its kernel `kernelName`: sources
  /// that differ only in names and comments share one program, one cache
  /// entry and one handle. A build failure returns the compiler's log.
  Expected<void*> kernel(const std::string& source, const std::string& kernelName);

  /// (source, kernel name) pairs.
  using Sources = std::vector<std::pair<std::string, std::string>>;
  /// Builds, or takes from the kernel cache, every distinct program of
  /// `kernels` ahead of kernel() (which then finds them built), telling
  /// `progress` (done, total) as each distinct program is ready. PoCL
  /// compiles one program at a time in a process (one LLVM context behind
  /// one lock), so where a build helper is set, the kernel cache is on and
  /// two or more programs are missing, helper processes, one per further
  /// core, compile their share into the cache while this process compiles
  /// its own; a program a helper did not deliver is compiled here. A build
  /// failure returns the compiler's log, as kernel() does.
  Status prepare(const Sources& kernels, const std::function<void(size_t, size_t)>& progress = {});
  /// The program and arguments that, given `--device NAME FILE...` (each
  /// file a canonical program), compile each into the kernel cache and exit
  /// 0: `fusec build-kernels` (tools/main.cpp). Unset: no helpers.
  static void setBuildHelper(std::vector<std::string> argv);
  /// What a build helper does: opens the device whose name contains
  /// `deviceName` and compiles each file (a canonical program, at most
  /// 64 MiB) into the kernel cache. Every file is tried; the error names
  /// the first that failed.
  static Status buildProgramFiles(const std::string& deviceName, const std::vector<std::string>& files);

  Expected<Buffer> upload(const Tensor& t);
  Expected<Buffer> allocate(size_t bytes);
  /// `bytes` of `parent` from `offset` (a multiple of memBaseAlignBytes),
  /// as a buffer of their own: kernels writing it write into `parent`.
  Expected<Buffer> subBuffer(const Buffer& parent, size_t offset, size_t bytes);
  /// Copies `t` into the start of `b` (blocking).
  Status write(Buffer& b, const Tensor& t);
  Status download(const Buffer& b, Tensor& into);
  /// The same copies enqueued behind the launches, done by the next wait()
  /// or finish(): until then `t` must stay alive and unchanged, and `into`
  /// alive, unread and where it is. A run that enqueues its uploads,
  /// kernels and downloads and waits once spares the hand-overs to the
  /// runtime's worker threads and back of a blocking copy on each side.
  Status enqueueWrite(Buffer& b, const Tensor& t);
  Status enqueueRead(const Buffer& b, Tensor& into);

  /// Enqueues a 1-D launch (`localSize` 0: the runtime chooses); the event
  /// is kept for timing.
  Status launch(void* kernel, const std::vector<KernelArg>& args, size_t globalSize, const std::string& label,
                size_t localSize = 0);
  /// Waits for everything enqueued.
  Status wait();
  /// (label, seconds) per launch since the last call, measured by profiling
  /// events: call after wait(). Reading them takes about a microsecond a
  /// launch, which a host-to-host time should not count.
  std::vector<std::pair<std::string, double>> kernelTimes();
  /// wait(), then kernelTimes().
  Expected<std::vector<std::pair<std::string, double>>> finish();

  size_t programsBuilt() const { return built_; }
  size_t cacheHits() const { return cacheHits_; }

 private:
  Device() = default;
  DeviceInfo info_;
  void* platform_ = nullptr;
  void* device_ = nullptr;
  void* context_ = nullptr;
  void* queue_ = nullptr;
  /// The cache key of a canonical program on this device.
  std::string programKey(const std::string& canonical) const;
  /// programs_[key]: found there, read from the kernel cache, or (with
  /// `build`) compiled from `canonical`; nullptr when absent and not built.
  /// Errors name `kernelName` and show `readable` (the source as emitted).
  Expected<void*> program(const std::string& key, const std::string& canonical, bool build,
                          const std::string& kernelName, const std::string& readable);

  std::map<std::string, void*> programs_;  // cache key -> cl_program
  std::map<std::string, void*> kernels_;   // hash + name -> cl_kernel
  std::vector<std::pair<std::string, void*>> events_;
  size_t built_ = 0, cacheHits_ = 0;
};

}  // namespace fusec::codegen
