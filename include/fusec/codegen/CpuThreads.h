/// How fusec runs PoCL's CPU device: used by the OpenCL runtime and by the
/// deployment bundle's host program (which ships this header, so it depends
/// on nothing but the C and POSIX libraries).
///
/// PoCL's CPU driver runs work-groups on one worker thread per core. Left to
/// the OS scheduler, the workers and the thread that launches and waits
/// move between cores from one kernel to the next; pinned (POCL_AFFINITY=1:
/// worker i on CPU i) a model of many short kernels runs faster on the
/// 2-core build machine (ShuffleNetV2, SqueezeNet, MobileNets, GPT-2 3-33 %
/// host to host, ResNet-18 and DenseNet-121 unchanged; bench/HISTORY.md
/// "2026-12-02 (ninth)").
#pragma once

#include <cstdlib>

#ifdef __linux__
#include <sched.h>
#include <unistd.h>
#endif

namespace fusec {

/// The options every kernel program is built with, by the runtime and by
/// the bundle's host program alike. -cl-denorms-are-zero lets the device
/// flush single-precision denormals to zero, as ML runtimes do on CPUs
/// (PoCL then runs the kernel with FTZ/DAZ set): an x86 core takes a
/// microcode assist of ~100 cycles for each FMA whose result is a
/// denormal, so a kernel whose products underflow crawls (MobileNetV2's
/// 16 -> 96 1x1 conv with inputs and weights of 1e-20: 21.5 ms, flushed
/// 0.29 ms; on ordinary data 0.25 either way). Results change only below
/// 1.2e-38, far inside every tolerance.
inline constexpr const char* kKernelBuildOptions = "-cl-std=CL1.2 -cl-denorms-are-zero";

/// Asks PoCL to pin its CPU workers unless the user decided: call before the
/// first OpenCL call (PoCL reads the variable as it starts its workers). Only
/// where the process may run on every online CPU: pinning worker i to CPU i
/// would otherwise leave a mask the user chose (taskset, a cgroup's cpuset)
/// or fail. A POCL_AFFINITY or POCL_MAX_PTHREAD_COUNT already set is left
/// alone (POCL_AFFINITY=0 turns pinning off). Other OpenCL drivers ignore
/// the variable.
inline void pinPoclWorkersByDefault() {
#ifdef __linux__
  if (std::getenv("POCL_AFFINITY") || std::getenv("POCL_MAX_PTHREAD_COUNT")) return;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (online <= 0 || online > CPU_SETSIZE || CPU_COUNT(&allowed) != online) return;
  for (long c = 0; c < online; ++c)
    if (!CPU_ISSET(c, &allowed)) return;
  setenv("POCL_AFFINITY", "1", 0);
#endif
}

}  // namespace fusec
