#!/usr/bin/env bash
# Prepares .gpu/ (ignored by git) for a run on a machine with a GPU and no
# fusec build: the stripped fusec and kernel_roofline, the shared libraries
# they need beyond the C and C++ runtimes, zoo models, and gpu.sh, which
# points OpenCL at NVIDIA's driver and runs the roofline rows and the models
# fused against unfused. With the device tool:
#   bench/device-prepare.sh mobilenet_v3_small
#   run: ROOF_ARGS=--bandwidth MODELS=mobilenet_v3_small ./.gpu/gpu.sh     (carry: [".gpu"])
# The carried folder must stay under the tool's 64 MiB with the checkout.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/.gpu
git -C "$root" check-ignore -q .gpu/ || echo "/.gpu/" >>"$(git -C "$root" rev-parse --git-dir)/info/exclude"
rm -rf "$out" && mkdir -p "$out/lib" "$out/models"
strip -o "$out/fusec" "$root/build/tools/fusec"
strip -o "$out/kernel_roofline" "$root/build/bench/kernel_roofline"
for lib in $(ldd "$root/build/tools/fusec" | awk '/=>/ {print $3}'); do
  case $(basename "$lib") in libc.so*|libm.so*|libstdc++*|libgcc_s*|libz.so*) ;; *) cp -L "$lib" "$out/lib/" ;; esac
done
for m in "${@:-mobilenet_v3_small}"; do cp -r "$root/build/zoo/$m" "$out/models/"; done
cp "$root/bench/device-run.sh" "$out/gpu.sh"
du -sh "$out"
