#!/usr/bin/env bash
# Usage: output-roundtrip.sh FUSEC CASE_DIR WORK_DIR
# `fusec run --output` writes TensorProtos another runtime can read: the
# outputs the generated kernels computed for CASE_DIR's input become the
# expected outputs of a new test case, which the reference interpreter must
# then pass (and PyTorch's expected output must match them too).
set -euo pipefail
fusec=$1 case=$2 work=$3
rm -rf "$work"
mkdir -p "$work/test_data_set_0"
cp "$case/model.onnx" "$work/model.onnx"
cp "$case/test_data_set_0/input_0.pb" "$work/test_data_set_0/input_0.pb"
"$fusec" run "$case/model.onnx" --input "$case/test_data_set_0/input_0.pb" --output "$work/test_data_set_0" --no-split-back
test -s "$work/test_data_set_0/output_0.pb"
"$fusec" onnx-test "$work" | tee "$work/onnx-test.txt"
grep -q "onnx-test: 1 passed, 0 failed" "$work/onnx-test.txt"
# The written output is the device's, not a copy of PyTorch's file.
! cmp -s "$work/test_data_set_0/output_0.pb" "$case/test_data_set_0/output_0.pb"
