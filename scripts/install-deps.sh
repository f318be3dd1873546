#!/usr/bin/env bash
# Installs the Debian packages fusec builds and tests with. Idempotent and quiet
# when everything is already there; run as root (or with sudo available).
set -euo pipefail

packages=(
  build-essential cmake pkg-config ninja-build
  antlr4 libantlr4-runtime-dev
  libboost-graph-dev libtoml11-dev doctest-dev
  libcli11-dev libfmt-dev nlohmann-json3-dev
  opencl-headers ocl-icd-opencl-dev pocl-opencl-icd clinfo
  spirv-tools llvm-spirv-14 clang-14 libclang-rt-14-dev
  libonnx-dev protobuf-compiler libprotobuf-dev libonnx-testdata
  libz3-dev  # fusec verify: symbolic proofs of rewrite rules
  libssl-dev  # the kernel cache's keyed hashes (HMAC-SHA256)
  libopenblas-dev  # the reference interpreter's GEMM (Conv, MatMul, Gemm)
  time  # tests read a command's peak memory with /usr/bin/time
  python3-torch python3-torchvision python3-onnx  # the model zoo (bench/models/export_models.py)
  python3-venv python3-matplotlib  # bench/run: a venv for ONNX Runtime from PyPI; roofline charts
  python3-dev pybind11-dev python3-pytest  # the Python module (python/) and its tests
  graphviz chromium  # the HTML report draws graphs with dot; its test opens it in headless Chromium
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
