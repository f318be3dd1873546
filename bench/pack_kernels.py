#!/usr/bin/env python3
"""Kernels per inference on the model zoo, pack by pack: what each shipped
pack adds, and what each vendor profile (with its packs and limits) makes of
the same model, against ONNX Runtime's node count after its optimizer.

Counts come from `fusec compile --emit opencl` (one OpenCL C file per
launched kernel; reshape views launch none), so no device is needed. ONNX
Runtime's node counts are read from a bench/run results.json.

    bench/pack_kernels.py [--root ROOT] [--results bench/results.json] [--models a,b] [--out FILE]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

CNN = ["resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "squeezenet1_1",
       "shufflenet_v2_x1_0", "densenet121", "convnext_tiny"]
TRANSFORMERS = ["vit_b_16", "bert_base", "gpt2"]

# (column, --rules packs under rules/ or None for the profile's default packs, --target under rules/ or None)
CONFIGS = [
    ("core", ["core"], None),
    ("+cnn", ["core", "cnn"], None),
    ("+transformer", ["core", "cnn", "transformer"], None),
    ("+layout (default)", None, None),
    ("nvidia", None, "vendor/nvidia/h200.toml"),
    ("arm-mali", None, "vendor/arm-mali/g610.toml"),
    ("npu", None, "vendor/npu/rk3588.toml"),
]


def launched(fusec, model, rules_dir, packs, target, work):
    out = os.path.join(work, "out")
    cmd = [fusec, "compile", model, "-o", out, "--emit", "opencl"]
    if packs:
        cmd += ["--rules"] + [os.path.join(rules_dir, p) for p in packs]
    if target:
        cmd += ["--target", os.path.join(rules_dir, target)]
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    shutil.rmtree(out, ignore_errors=True)
    m = re.search(r"kernels: (\d+) OpenCL C files", text)
    if not m:
        raise RuntimeError(f"no kernel count in the output of {' '.join(cmd)}")
    return int(m.group(1))


def table(root, results_path, models):
    fusec = os.path.join(root, "build", "tools", "fusec")
    rules_dir = os.path.join(root, "rules")
    ort = {}
    if os.path.exists(results_path):
        with open(results_path) as f:
            for name, r in json.load(f)["models"].items():
                if "ort" in r:
                    ort[name] = r["ort"]["nodes_optimized"]
    work = tempfile.mkdtemp(prefix="fusec-packs-")
    rows = []
    try:
        for name in models:
            model = os.path.join(root, "build", "zoo", name, "model.onnx")
            if not os.path.exists(model):
                print(f"{name}: not exported (bench/models/export_models.py), skipped", file=sys.stderr)
                continue
            counts = [launched(fusec, model, rules_dir, packs, target, work) for _, packs, target in CONFIGS]
            rows.append((name, counts, ort.get(name)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lines = ["| model | " + " | ".join(c for c, _, _ in CONFIGS) + " | ORT nodes | default / ORT | goal |",
             "|---|" + "---|" * (len(CONFIGS) + 3)]
    for name, counts, nodes in rows:
        goal = 0.35 if name in TRANSFORMERS else 0.8
        ratio = f"{counts[3] / nodes:.2f}" if nodes else "?"
        met = "" if not nodes else (" met" if counts[3] <= goal * nodes else " not met")
        lines.append(f"| {name} | " + " | ".join(str(c) for c in counts) + f" | {nodes or '?'} | {ratio} | "
                     f"<= {goal}{met} |")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p.add_argument("--results", help="a bench/run results.json for ONNX Runtime's node counts (default: bench/)")
    p.add_argument("--models", help="comma-separated zoo names (default: the zoo's real models)")
    p.add_argument("--out", help="write the table here (default: print it)")
    args = p.parse_args()
    models = args.models.split(",") if args.models else CNN + TRANSFORMERS
    text = table(args.root, args.results or os.path.join(args.root, "bench", "results.json"), models)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
