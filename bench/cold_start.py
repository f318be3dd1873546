"""Cold start: from a model file to the first result, for every zoo model.

For each model, with empty caches (a fresh FUSEC_CACHE_DIR; PoCL keeps no
cache of its own beside it): `fusec compile` (plan, time the fusions against
their members, build every distinct kernel program), then `fusec run` on the
warm cache (import, plan, programs from the cache, one inference), the
reference interpreter alone (`fusec run --interpreter`: what `--check` adds),
and ONNX Runtime's session creation on the same file (best of 3, CPU
execution provider). Prints a Markdown table and writes cold_start.json.

    bench/run --cold-start [--models a,b,...] [--out DIR]
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import onnxruntime as ort

GOALS = {"build": 15.0, "check": 10.0, "warm": 0.5}


def timed(argv, env):
    start = time.perf_counter()
    p = subprocess.run(argv, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {p.returncode}: {p.stderr[-2000:]}")
    return seconds, p.stdout


def measure(fusec, model, work):
    cache = tempfile.mkdtemp(prefix="cold-", dir=work)
    env = dict(os.environ, FUSEC_CACHE_DIR=cache)
    env.pop("POCL_CACHE_DIR", None)
    r = {}
    r["compile_seconds"], out = timed([fusec, "compile", model], env)
    m = re.search(r"^build: (\d+) kernels from (\d+) distinct programs, (\d+) programs compiled and (\d+) from the cache"
                  r".* in ([0-9.]+) s; (\d+) fusion", out, re.M)
    if not m:
        raise RuntimeError(f"no build line for {model}: {out[-1000:]}")
    r["kernels"], r["programs"], r["compiled"] = int(m[1]), int(m[2]), int(m[3])
    r["build_seconds"], r["fusions_timed"] = float(m[5]), int(m[6])
    r["warm_seconds"], out = timed([fusec, "run", model], env)
    m = re.search(r"built in (\d+) ms \((\d+) distinct programs, (\d+) of them from the cache\)", out)
    r["warm_build_ms"], r["warm_from_cache"] = int(m[1]), int(m[3]) == int(m[2])
    r["interpreter_seconds"], _ = timed([fusec, "run", "--interpreter", model], env)
    best = 1e30
    for _ in range(3):
        start = time.perf_counter()
        ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        best = min(best, time.perf_counter() - start)
    r["ort_session_seconds"] = best
    shutil.rmtree(cache, ignore_errors=True)
    return r


def table(results):
    rows = ["| model | kernels / distinct programs | programs compiled (with fusions' members) | compile cold s "
            "(build s) | run on the warm cache s | interpreter s | ORT session s |",
            "|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        rows.append(f"| {name} | {r['kernels']} / {r['programs']} | {r['compiled']} | {r['compile_seconds']:.1f} "
                    f"({r['build_seconds']:.1f}) | {r['warm_seconds']:.2f}{'' if r['warm_from_cache'] else ' (not all cached)'}"
                    f" | {r['interpreter_seconds']:.2f} | {r['ort_session_seconds']:.2f} |")
    return "\n".join(rows)


def main():
    root, args = sys.argv[1], sys.argv[2:]
    models = None
    out = os.path.join(root, "build", "bench-cold")
    while args:
        flag = args.pop(0)
        if flag == "--models":
            models = args.pop(0).split(",")
        elif flag == "--out":
            out = args.pop(0)
        else:
            sys.exit(f"cold_start: unknown argument {flag}")
    zoo = os.path.join(root, "build", "zoo")
    exporter = os.path.join(root, "bench", "models", "export_models.py")
    if models is None:
        models = subprocess.run(["/usr/bin/python3", exporter, "--list"], capture_output=True, text=True,
                                check=True).stdout.split()
    subprocess.run(["/usr/bin/python3", exporter, zoo, *models], check=True, stdout=subprocess.DEVNULL)
    os.makedirs(out, exist_ok=True)
    fusec = os.path.join(root, "build", "tools", "fusec")
    results = {}
    with tempfile.TemporaryDirectory() as work:
        for name in models:
            results[name] = measure(fusec, os.path.join(zoo, name, "model.onnx"), work)
            print(f"{name}: {json.dumps(results[name])}", flush=True)
    text = table(results)
    print(text)
    with open(os.path.join(out, "cold_start.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(out, "cold_start.md"), "w") as f:
        f.write(text + "\n")
    print(f"wrote {os.path.join(out, 'cold_start.md')} and cold_start.json")


if __name__ == "__main__":
    main()
