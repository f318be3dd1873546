#!/usr/bin/env bash
# The main job on a shipped example: install what is missing, build, and run
# an example model, printing its outputs and timing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" "$root/build"
"$root/build/tools/fusec" run "$root/examples/models/resblock.onnxtxt" --repeat 3
