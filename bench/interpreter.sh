#!/usr/bin/env bash
# Times the reference interpreter on the model zoo (best of 3 runs each).
# The interpreter is the oracle for whole-model tests, so it must stay fast
# enough: ResNet-50 at batch 1 in seconds.
#   bench/interpreter.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
zoo=$build/zoo
for m in resnet18 resnet50 bert_layer; do
  [ -f "$zoo/$m/model.onnx" ] || /usr/bin/python3 "$root/bench/models/export_models.py" "$zoo" "$m" >/dev/null 2>&1
  printf '%-12s ' "$m"
  "$build/tools/fusec" run "$zoo/$m/model.onnx" --repeat 3 | tail -n 1
done
