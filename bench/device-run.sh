#!/usr/bin/env bash
# Run on the device machine from the checkout root, after bench/device-prepare.sh:
# the roofline rows (ROOF_ARGS, e.g. --bandwidth) and MODELS fused vs unfused, checked.
cd "$(dirname "$0")/.."
G=$PWD/.gpu
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$G/lib:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
if [ -e /usr/local/nvidia/lib64/libnvidia-opencl.so.1 ]; then
  mkdir -p /tmp/icd && echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 > /tmp/icd/nvidia.icd
  export OCL_ICD_VENDORS=/tmp/icd
  T=rules/vendor/nvidia/h200.toml
else
  T=rules/targets/pocl-cpu.toml
fi
export FUSEC_CACHE_DIR=/tmp/fusec-cache HOME=/tmp/home; mkdir -p $HOME
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv 2>&1 | tee "$OUT/gpu.txt"
timeout ${ROOF_S:-100} "$G/kernel_roofline" ${ROOF_ARGS:-} 2>&1 | tee "$OUT/roofline.txt"
for m in ${MODELS:-squeezenet1_1 mobilenet_v3_small bert_encoder2}; do
  echo "== $m"
  timeout ${MODEL_S:-120} "$G/fusec" run "$G/models/$m/model.onnx" --input $(ls "$G"/models/$m/test_data_set_0/input_*.pb | sort -V) \
    --compare --check --repeat 20 --target $T --json "$OUT/$m.json" 2>&1 | tee "$OUT/$m.txt" | tail -45
done
