"""The zoo benchmark behind bench/run (which sets up its Python: ONNX Runtime
from PyPI in a venv that sees Debian's torch, onnx, numpy and matplotlib).

For each model of bench/models/export_models.py (or, with --wider, of
export_wider.py), on the same file and the
same seeded input:
  fusec    `fusec run --compare --json`: nodes after rewrite, kernels fused and
           one per op, rules fired, time by stage, OpenCL build cold (empty
           kernel caches) and cached, device time and host-to-host time per
           inference (median, fused and unfused interleaved), device memory,
           and its output checked against PyTorch's by fusec's tolerance rule;
  ORT      ONNX Runtime, CPU execution provider, 1 and 2 intra-op threads,
           ORT_DISABLE_ALL and ORT_ENABLE_ALL: nodes after its optimizer and
           latency (median);
  side by side  fusec and ORT taking turns (--rounds), the best round of
           each: the fusec / ORT ratio to read on a machine that swings;
and the ratios. The machine's roofs come from build/bench/kernel_roofline in
the same run; each model gets a roofline chart of its kernels.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnx.numpy_helper  # noqa: E402
import onnxruntime as ort  # noqa: E402

REAL = ["resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "squeezenet1_1",
        "shufflenet_v2_x1_0", "densenet121", "convnext_tiny", "vit_b_16", "bert_base", "gpt2"]
VARIANTS = ["bert_base_opset17", "shufflenet_v2_x1_0_batch4"]
QUICK = ["squeezenet1_1", "mobilenet_v3_small", "shufflenet_v2_x1_0"]
ATOL, RTOL = 1e-5, 1e-3  # fusec's defaults (include/fusec/engine/Tolerance.h)


def check(got, want):
    """fusec's rule: |got - want| <= atol + rtol * max|want|; equal NaNs and
    same-sign infinities match. Returns (ok, max abs error, bound)."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return False, float("inf"), 0.0
    finite = np.isfinite(got) & np.isfinite(want)
    same = (np.isnan(got) & np.isnan(want)) | (np.isinf(got) & np.isinf(want) & (np.sign(got) == np.sign(want)))
    scale = float(np.max(np.abs(want[np.isfinite(want)]), initial=0.0))
    bound = ATOL + RTOL * scale
    err = float(np.max(np.abs(got[finite] - want[finite]), initial=0.0))
    return bool(np.all(finite | same) and err <= bound), err, bound


def tensors(folder, prefix):
    files = sorted((f for f in os.listdir(folder) if f.startswith(prefix)), key=lambda f: int(f[len(prefix):-3]))
    out = []
    for f in files:
        t = onnx.TensorProto()
        with open(os.path.join(folder, f), "rb") as fh:
            t.ParseFromString(fh.read())
        out.append((os.path.join(folder, f), onnx.numpy_helper.to_array(t)))
    return out


def fusec_run(fusec, case, extra, env, work, tag, compare=True):
    """One `fusec run` on the case's input; returns its --json record."""
    data = os.path.join(case, "test_data_set_0")
    record = os.path.join(work, tag + ".json")
    cmd = [fusec, "run", os.path.join(case, "model.onnx"), "--json", record] + (["--compare"] if compare else [])
    for path, _ in tensors(data, "input_"):
        cmd += ["--input", path]
    done = subprocess.run(cmd + extra, env=env, capture_output=True, text=True, timeout=7200)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd + extra)}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    with open(record) as f:
        return json.load(f)


def bench_fusec(fusec, case, repeat, work):
    env = dict(os.environ)
    env["FUSEC_CACHE_DIR"] = os.path.join(work, "kernel-cache")
    env["POCL_CACHE_DIR"] = os.path.join(work, "pocl-cache")
    out = os.path.join(work, "outputs")
    cold = fusec_run(fusec, case, ["--repeat", "1", "--output", out], env, work, "cold")
    cold = {"runs": [{"label": v["label"], "build_seconds": v["build_seconds"]} for v in cold["runs"]]}
    warm = fusec_run(fusec, case, ["--repeat", str(repeat)], env, work, "cached")
    # The tuner against the default tiling: its own timings of both, taken in
    # one pass, and the fused program's device time once tuned.
    tuned = fusec_run(fusec, case, ["--repeat", str(repeat), "--tune"], env, work, "tuned", compare=False)["runs"][0]
    want = [a for _, a in tensors(os.path.join(case, "test_data_set_0"), "output_")]
    got = [a for _, a in tensors(out, "output_")]
    verdicts = [check(g, w) for g, w in zip(got, want)]
    ok = len(got) == len(want) and all(v[0] for v in verdicts)
    worst = max(verdicts, key=lambda v: v[1] / max(v[2], 1e-30))
    return {"cold": cold, "cached": warm, "tuned": {k: tuned[k] for k in ("tuning", "device_seconds") if k in tuned},
            "check": {"ok": ok, "max_abs_error": worst[1], "bound": worst[2]}}


def ort_session(model, threads, level, optimized=None):
    """An ONNX Runtime CPU session: `threads` intra-op threads, one inter-op;
    writes its optimized model to `optimized` when given."""
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.graph_optimization_level = level
    if optimized:
        so.optimized_model_filepath = optimized
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def ort_feeds(sess, case):
    """The case's inputs by the session's input names."""
    return {i.name: a for i, (_, a) in zip(sess.get_inputs(), tensors(os.path.join(case, "test_data_set_0"), "input_"))}


def median_latency(sess, feeds, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_ort(case, repeat, work):
    model = os.path.join(case, "model.onnx")
    feeds = ort_feeds(ort.InferenceSession(model, providers=["CPUExecutionProvider"]), case)
    want = [a for _, a in tensors(os.path.join(case, "test_data_set_0"), "output_")]
    optimized = os.path.join(work, "ort-optimized.onnx")
    result = {"latency": {}}
    for level_name, level in (("disable_all", ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
                              ("enable_all", ort.GraphOptimizationLevel.ORT_ENABLE_ALL)):
        for threads in (1, 2):
            keep = level_name == "enable_all" and threads == 1  # the optimized model and the check
            sess = ort_session(model, threads, level, optimized if keep else None)
            got = sess.run(None, feeds)  # warm-up
            result["latency"][f"{level_name}_{threads}t"] = median_latency(sess, feeds, repeat)
            if keep:
                result["nodes_optimized"] = len(onnx.load(optimized, load_external_data=False).graph.node)
                result["check_ok"] = all(check(g, w)[0] for g, w in zip(got, want))
    return result


def side_by_side(fusec, case, repeat, rounds, work):
    """fusec's fused program and ONNX Runtime (ORT_ENABLE_ALL, 1 and 2
    intra-op threads, sessions kept open) taking turns, `rounds` times: the
    machine's swings (2x within minutes on the shared build machines) then
    hit both alike. Each round: fusec's wall median of `repeat` runs, ORT's
    best median of `repeat` runs; the ratio is of the best rounds."""
    env = dict(os.environ)
    env["FUSEC_CACHE_DIR"] = os.path.join(work, "kernel-cache")
    env["POCL_CACHE_DIR"] = os.path.join(work, "pocl-cache")
    model = os.path.join(case, "model.onnx")
    sessions = [ort_session(model, threads, ort.GraphOptimizationLevel.ORT_ENABLE_ALL) for threads in (1, 2)]
    feeds = ort_feeds(sessions[0], case)
    for sess in sessions:
        sess.run(None, feeds)  # warm-up

    fusec_wall, ort_best = [], []
    for i in range(rounds):
        run = fusec_run(fusec, case, ["--repeat", str(repeat)], env, work, f"round{i}", compare=False)["runs"][0]
        fusec_wall.append(run["wall_seconds_median"])
        ort_best.append(min(median_latency(sess, feeds, repeat) for sess in sessions))
    return {"fusec_wall_seconds": fusec_wall, "ort_best_seconds": ort_best, "ratio": min(fusec_wall) / min(ort_best)}


def roofline_chart(name, run, roofs, path):
    peak, bw = roofs
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    xs = np.logspace(-2, 3, 200)
    ax.plot(xs, np.minimum(peak, xs * bw), color="black", linewidth=1)
    ax.text(0.012, peak * 1.08, f"{peak:.0f} GFLOP/s", fontsize=8)
    ax.text(0.012, 0.012 * bw * 1.3, f"{bw:.1f} GB/s", fontsize=8, rotation=28)
    for variant, colour in ((run["cached"]["runs"][1], "tab:grey"), (run["cached"]["runs"][0], "tab:red")):
        pts = [(k["flops"] / k["bytes"], k["flops"] / k["seconds"] / 1e9) for k in variant["per_kernel"]
               if k["flops"] > 0 and k["bytes"] > 0 and k["seconds"] > 0]
        if pts:
            ax.scatter(*zip(*pts), s=10, alpha=0.6, color=colour,
                       label=f"{variant['label']} ({len(pts)} of {len(variant['per_kernel'])} kernels)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(0.01, 1000)
    ax.set_ylim(0.01, peak * 3)
    ax.set_xlabel("arithmetic intensity (FLOP / DRAM byte, cost model)")
    ax.set_ylabel("achieved GFLOP/s")
    ax.set_title(f"{name}: kernels against the measured roofs", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def family(ops):
    """A kernel's family as the table names it, from its ops (`Conv[group=32] Clip`)."""
    names = ops.split(" ")
    if any(op.startswith("Conv[group=") for op in names):
        return "depthwise/grouped conv"
    if names[0] == "MatMul" and "Softmax" in names:
        return "attention"
    for anchor, label in (("Conv", "conv"), ("MatMul", "matmul"), ("Gemm", "gemm"), ("Pool", "pool"),
                          ("LayerNormalization", "layernorm"), ("Softmax", "softmax"), ("Reduce", "reduce"),
                          ("Concat", "data movement"), ("Transpose", "data movement"), ("Slice", "data movement"),
                          ("Gather", "data movement"), ("Split", "data movement"), ("Reshape", "data movement")):
        if any(anchor in op for op in names):
            return label
    return "elementwise"


def families(variant, peak, bw):
    """Device time per family, with the fraction of the roof each reaches."""
    out = {}
    for k in variant["per_kernel"]:
        f = out.setdefault(family(k["ops"]), {"seconds": 0.0, "roof_seconds": 0.0, "kernels": 0})
        f["seconds"] += k["seconds"]
        f["roof_seconds"] += max(k["flops"] / (peak * 1e9), k["bytes"] / (bw * 1e9))
        f["kernels"] += 1
    return out


def ms(s):
    return f"{s * 1e3:.1f}" if s < 10 else f"{s * 1e3:.0f}"


def markdown(results, roofs, machine, args, charts, packs_table=""):
    peak, bw = roofs
    rounds = next((len(r["side_by_side"]["fusec_wall_seconds"]) for r in results.values() if "side_by_side" in r), 0)
    lines = [
        "# fusec on the model zoo, against ONNX Runtime",
        "",
        f"Measured {machine['date']} on {machine['cpu']} ({machine['cores']} cores), OpenCL device "
        f"`{machine['device']}`; ONNX Runtime {ort.__version__} (PyPI, CPU execution provider). Roofs measured in "
        f"the same run by `build/bench/kernel_roofline`: **{peak:.0f} GFLOP/s, {bw:.1f} GB/s**.",
        "",
        f"Command: `bench/run{' ' + ' '.join(args) if args else ''}`. Models: `bench/models/"
        f"{'export_wider.py' if '--wider' in args else 'export_models.py'}` "
        "(torchvision and hand-written PyTorch modules, random seeded weights, opset 13 unless named, batch 1 unless "
        "named, `do_constant_folding=False`). Times are medians of the repeats on a shared 2-core machine: "
        "read the ratios, not the absolute figures. Raw figures: `results.json`.",
        "",
        "## fusec",
        "",
        "Kernels: launched per inference (reshape views launch none). Build: codegen and OpenCL build of the fused "
        "program, cold (empty kernel caches) / cached. Device: sum of profiling events. Wall: one inference host to "
        "host (upload, kernels, download). Memory: constants + peak intermediates with buffer reuse. Check: fused "
        "output against PyTorch's, `|got - want| <= 1e-5 + 1e-3 * max|want|`.",
        "",
        "| model | export nodes | after rewrite | kernels fused / unfused | rules fired | import / rewrite / plan / codegen ms "
        "| build cold / cached s | device ms fused / unfused | wall ms fused / unfused | memory MB | check vs PyTorch |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        if "error" in r:
            lines.append(f"| {name} | {r.get('export_nodes', '?')} | **failed**: {r['error'].splitlines()[0][:150]} |"
                         + " |" * 8)
            continue
        cold, warm = r["fusec"]["cold"], r["fusec"]["cached"]
        fused, unfused = warm["runs"][0], warm["runs"][1]
        st = warm["stage_seconds"]
        fired = {**warm["rules_fired"], **warm["fusions_chosen"]}
        fired_text = ", ".join(f"{k} {v}" for k, v in sorted(fired.items(), key=lambda kv: -kv[1])) or "none"
        c = r["fusec"]["check"]
        mem = (fused["memory"]["constants"] + fused["memory"]["peak"]) / 1e6
        lines.append(
            f"| {name} | {r['export_nodes']} | {warm['nodes_after_rewrite']} | {fused['kernels']} / {unfused['kernels']} "
            f"| {fired_text} | {ms(st['import'])} / {ms(st['rewrite'])} / {ms(st['plan'])} / {ms(st['codegen'])} "
            f"| {cold['runs'][0]['build_seconds']:.1f} / {fused['build_seconds']:.2f} "
            f"| {ms(fused['device_seconds'])} / {ms(unfused['device_seconds'])} "
            f"| {ms(fused['wall_seconds_median'])} / {ms(unfused['wall_seconds_median'])} | {mem:.0f} "
            f"| {'pass' if c['ok'] else '**FAIL**'} ({c['max_abs_error']:.1e} of {c['bound']:.1e}) |")
    lines += [
        "",
        "## ONNX Runtime, and the ratios",
        "",
        "Latency: one `InferenceSession.run`, median, for 1 and 2 intra-op threads, optimizer off (`ORT_DISABLE_ALL`) "
        "and on (`ORT_ENABLE_ALL`). Nodes: after ORT's optimizer (`optimized_model_filepath`). Ratios: fusec fused "
        "wall time over ORT's best latency, fusec fused kernels over ORT's nodes; fusion: unfused over fused wall time. "
        "Side by side: fusec (fused, wall median) and ORT (ORT_ENABLE_ALL, the better of 1 and 2 threads) taking turns "
        f"{rounds} times, the best round of each; the ratio to read where the machine swings.",
        "",
        "| model | ORT nodes | ORT ms off 1t / on 1t / off 2t / on 2t | ORT check | fusec / ORT time "
        "| side by side ms fusec / ORT | side by side fusec / ORT | fusec / ORT kernels | fusion speed-up |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        if "error" in r or "ort" not in r:
            continue
        o, warm = r["ort"], r["fusec"]["cached"]
        lat = o["latency"]
        best = min(lat.values())
        fused, unfused = warm["runs"][0], warm["runs"][1]
        sbs = r.get("side_by_side")
        sbs_cells = (f"{ms(min(sbs['fusec_wall_seconds']))} / {ms(min(sbs['ort_best_seconds']))} | {sbs['ratio']:.2f}x"
                     if sbs else "- | -")
        lines.append(
            f"| {name} | {o['nodes_optimized']} | {ms(lat['disable_all_1t'])} / {ms(lat['enable_all_1t'])} / "
            f"{ms(lat['disable_all_2t'])} / {ms(lat['enable_all_2t'])} | {'pass' if o['check_ok'] else 'FAIL'} "
            f"| {fused['wall_seconds_median'] / best:.1f}x | {sbs_cells} | {fused['kernels'] / o['nodes_optimized']:.2f} "
            f"| {unfused['wall_seconds_median'] / fused['wall_seconds_median']:.2f}x |")
    lines += [
        "",
        "## Where the time goes",
        "",
        "Fused device time by kernel family (from each kernel's ops), and the fraction of the roofline each family "
        "reaches: roofline time (max of FLOPs / peak and bytes / bandwidth, cost model figures) over measured time. "
        "Above 100 %: the working set stayed in cache, where the DRAM roof does not bind.",
        "",
        "| model | family: share of device time, fraction of roof |",
        "|---|---|",
    ]
    for name, r in results.items():
        if "error" in r:
            continue
        fused = r["fusec"]["cached"]["runs"][0]
        fam = families(fused, peak, bw)
        total = sum(f["seconds"] for f in fam.values()) or 1
        cells = "; ".join(f"{k} ({f['kernels']}) {100 * f['seconds'] / total:.0f} %, {100 * f['roof_seconds'] / f['seconds']:.0f} % of roof"
                          for k, f in sorted(fam.items(), key=lambda kv: -kv[1]["seconds"]) if f["seconds"] > 0)
        lines.append(f"| {name} | {cells} |")
    lines += [
        "",
        "## Tuning",
        "",
        "`fusec run --tune`: every gemm_epilogue kernel timed under each candidate tiling, round robin in one pass; a "
        "tiling replaces the default only below 0.9 of its time. Default / tuned: the tuner's own best times of the "
        "tuned kernels, summed; a ratio below 1.0 would mean it kept a slower tiling. Device: the fused program, "
        "default tilings (the run above) and tuned.",
        "",
        "| model | kernels tuned / retiled | tuned kernels ms default / tuned | default / tuned | device ms default / tuned |",
        "|---|---|---|---|---|",
    ]
    for name, r in results.items():
        t = r.get("fusec", {}).get("tuned", {})
        if "tuning" not in t:
            continue
        tu, fused = t["tuning"], r["fusec"]["cached"]["runs"][0]
        lines.append(f"| {name} | {tu['kernels']} / {tu['retiled']} | {ms(tu['default_seconds'])} / {ms(tu['tuned_seconds'])} "
                     f"| {tu['default_seconds'] / max(tu['tuned_seconds'], 1e-12):.2f}x "
                     f"| {ms(fused['device_seconds'])} / {ms(t['device_seconds'])} |")
    if packs_table:
        lines += ["", "## Kernels per pack", "",
                  "Launched kernels per inference as each shipped pack is added (`core`, then `cnn`, `transformer` and "
                  "`layout`: the CPU profile's default packs), and with each vendor profile and its packs, against ONNX "
                  "Runtime's nodes after its optimizer. Goal: at most 0.8x ORT's nodes on CNNs, 0.35x on transformers. "
                  "By `bench/pack_kernels.py` (from `fusec compile --emit opencl`).", "", packs_table.rstrip()]
    lines += ["", "## Roofline charts", "",
              "Every launched kernel with FLOPs at its arithmetic intensity and achieved GFLOP/s; fused red, one "
              "kernel per op grey; the lines are the roofs measured in this run.", ""]
    lines += [f"- [{name}]({path})" for name, path in charts.items()]
    # This file is rewritten whole on every run; what earlier sittings
    # measured is kept by hand in HISTORY.md beside it.
    lines += ["", "Earlier sittings, and the measurements behind the code generator's defaults: "
              "[HISTORY.md](HISTORY.md)."]
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", required=True)
    p.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    p.add_argument("--models", help="comma-separated zoo names (with --wider: names of the wider bench)")
    p.add_argument("--wider", action="store_true",
                   help="the wider bench (bench/models/export_wider.py: kinds the zoo lacks, and a held-out set "
                        "reported apart) instead of the zoo; into build/bench-wider/ unless --out is given")
    p.add_argument("--repeat", type=int, default=10, help="timed runs per configuration (median)")
    p.add_argument("--rounds", type=int, default=3, help="side-by-side rounds of fusec and ORT taking turns")
    p.add_argument("--side-by-side", action="store_true",
                   help="only fusec (fused) and ONNX Runtime taking turns, host to host: prints each model's ratio "
                        "and writes side_by_side.json (no cold/tuned runs, no RESULTS.md)")
    p.add_argument("--out", help="folder for RESULTS.md, results.json, roofline/ (default: bench/, or "
                                 "build/bench-quick/ with --quick)")
    args = p.parse_args()
    passed_args = sys.argv[3:]  # bench/run passes --root ROOT first
    root = args.root
    exporter = "export_wider.py" if args.wider else "export_models.py"
    if args.wider:
        listed = subprocess.run(["/usr/bin/python3", os.path.join(root, "bench", "models", exporter), "--list"],
                                capture_output=True, text=True, check=True).stdout.split()
        names = args.models.split(",") if args.models else listed
        out = args.out or os.path.join(root, "build", "bench-wider")
        zoo = os.path.join(root, "build", "wider")
    else:
        names = args.models.split(",") if args.models else QUICK if args.quick else REAL + VARIANTS
        out = args.out or (os.path.join(root, "build", "bench-quick") if args.quick else os.path.join(root, "bench"))
        zoo = os.path.join(root, "build", "zoo")
    os.makedirs(os.path.join(out, "roofline"), exist_ok=True)
    subprocess.run(["/usr/bin/python3", os.path.join(root, "bench", "models", exporter), zoo, *names],
                   check=True, stdout=subprocess.DEVNULL)
    fusec = os.path.join(root, "build", "tools", "fusec")
    roof_text = subprocess.run([os.path.join(root, "build", "bench", "kernel_roofline"), "--roofs-only"],
                               capture_output=True, text=True, check=True).stdout
    device = roof_text.splitlines()[0].removeprefix("device: ")
    roof_line = next(line for line in roof_text.splitlines() if line.startswith("measured roof"))
    roofs = (float(roof_line.split(":")[1].split("GFLOP")[0]), float(roof_line.split(",")[1].split("GB/s")[0]))
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    machine = {"date": datetime.date.today().isoformat(), "cpu": cpu, "cores": os.cpu_count(), "device": device,
               "roofs_gflops_gbs": roofs, "onnxruntime": ort.__version__}
    results, charts = {}, {}
    for name in names:
        case = os.path.join(zoo, name)
        r = results[name] = {"export_nodes": len(onnx.load(os.path.join(case, "model.onnx"),
                                                           load_external_data=False).graph.node)}
        work = tempfile.mkdtemp(prefix=f"fusec-bench-{name}-")
        start = time.time()
        if args.side_by_side:
            try:
                r["side_by_side"] = sbs = side_by_side(fusec, case, args.repeat, args.rounds, work)
                print(f"{name}: fusec {min(sbs['fusec_wall_seconds']) * 1e3:.2f} ms, ONNX Runtime "
                      f"{min(sbs['ort_best_seconds']) * 1e3:.2f} ms: {sbs['ratio']:.2f}x ({time.time() - start:.0f} s)",
                      flush=True)
            except Exception as e:  # noqa: BLE001 - a row of the table
                r["error"] = f"{type(e).__name__}: {e}"
                print(f"{name}: error {r['error'][:300]}", flush=True)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            continue
        try:
            r["fusec"] = bench_fusec(fusec, case, args.repeat, work)
            r["ort"] = bench_ort(case, args.repeat, work)
            r["side_by_side"] = side_by_side(fusec, case, args.repeat, args.rounds, work)
            chart = os.path.join("roofline", name + ".png")
            roofline_chart(name, r["fusec"], roofs, os.path.join(out, chart))
            charts[name] = chart
        except Exception as e:  # noqa: BLE001 - one model's failure is a row of the table, not the end of the run
            r["error"] = f"{type(e).__name__}: {e}"
        finally:
            shutil.rmtree(work, ignore_errors=True)
        status = "error" if "error" in r else ("check ok" if r["fusec"]["check"]["ok"] else "CHECK FAILED")
        print(f"{name}: {status} ({time.time() - start:.0f} s)", flush=True)
    if args.side_by_side:
        with open(os.path.join(out, "side_by_side.json"), "w") as f:
            json.dump({"machine": machine, "models": results}, f, indent=1)
        print(f"wrote {os.path.join(out, 'side_by_side.json')}")
        sys.exit(1 if any("error" in r for r in results.values()) else 0)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"machine": machine, "models": results}, f, indent=1)
    sys.path.insert(0, os.path.join(root, "bench"))
    import pack_kernels  # noqa: E402 - beside this script
    packs_table = pack_kernels.table(root, os.path.join(out, "results.json"), [n for n in names if n in
                                                                                pack_kernels.CNN + pack_kernels.TRANSFORMERS])
    with open(os.path.join(out, "RESULTS.md"), "w") as f:
        f.write(markdown(results, roofs, machine, passed_args, charts, packs_table))
    print(f"wrote {os.path.join(out, 'RESULTS.md')}")
    failed = [n for n, r in results.items() if "error" in r or not r["fusec"]["check"]["ok"]]
    if failed:
        sys.exit(f"bench: {len(failed)} model(s) failed: {' '.join(failed)}")


if __name__ == "__main__":
    main()
