#!/usr/bin/env bash
# The main job on a shipped example: install what is missing, build, compile
# an example model with the default packs (printing the fusion report), and
# run it, printing outputs and timing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" "$root/build"
model=$root/examples/models/resblock.onnxtxt
# The fusion report: rewrites, fused groups, kernels and estimated traffic/time.
"$root/build/tools/fusec" compile "$model" -o "$root/build/example-out"
echo
# The model on OpenCL (PoCL here), fused and one kernel per op side by side,
# every output checked against the reference interpreter.
"$root/build/tools/fusec" run "$model" --dim 8 --compare --check --repeat 5
