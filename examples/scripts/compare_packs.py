#!/usr/bin/env python3
"""One model, two rule-pack choices, side by side: what each fuses and what it costs.

    PYTHONPATH=build/python /usr/bin/python3 examples/scripts/compare_packs.py MODEL \\
        [--a-target T.toml] [--a-packs P ...] [--b-target T.toml] [--b-packs P ...] [--dim NAME=SIZE ...]

Each side is a target profile (default: the shipped pocl-cpu profile) and its
packs (default: the target's default packs). Prints a table of kernels, DRAM
traffic, FLOPs and estimated time for both, the rules each fired, and the
groups only one of them formed. Example, the NPU vendor pack against the
default packs:

    compare_packs.py examples/models/resblock.onnxtxt --b-target rules/vendor/npu/rk3588.toml --dim N=1
"""
import argparse
import sys
from typing import Dict, FrozenSet, List, Optional

import fusec


def compile_side(model: str, target: Optional[str], packs: Optional[List[str]], dims: Dict[str, int]):
    t = fusec.load_target(target)
    return t, fusec.compile(model, packs=packs or None, target=t, dims=dims)


def human(v: float, unit: str) -> str:
    for prefix in ("", "K", "M", "G", "T"):
        if abs(v) < 1000:
            return f"{v:.3g} {prefix}{unit}"
        v /= 1000
    return f"{v:.3g} P{unit}"


def seconds(s: float) -> str:
    return f"{s:.3g} s" if s >= 1 else f"{s * 1e3:.3g} ms" if s >= 1e-3 else f"{s * 1e6:.3g} us"


def fused_groups(compiled) -> Dict[FrozenSet[str], str]:
    """Member nodes -> 'rule (family)', for the groups of more than one node."""
    return {frozenset(n for n, _ in g.nodes): f"{g.rule} ({g.family})" for g in compiled.groups if g.fused}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    for side in ("a", "b"):
        parser.add_argument(f"--{side}-target", help=f"side {side.upper()}'s target profile")
        parser.add_argument(f"--{side}-packs", nargs="+", help=f"side {side.upper()}'s packs")
    parser.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE", help="size a symbolic input dim")
    args = parser.parse_args()
    dims = {}
    for d in args.dim:
        name, _, size = d.partition("=")
        if not size.isdigit():
            parser.error(f"--dim {d}: expected NAME=SIZE")
        dims[name] = int(size)

    try:
        ta, a = compile_side(args.model, args.a_target, args.a_packs, dims)
        tb, b = compile_side(args.model, args.b_target, args.b_packs, dims)
    except fusec.Error as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    ra, rb = a.report, b.report
    label_a = f"A: {ta.name}"
    label_b = f"B: {tb.name}"
    print(f"{args.model}\n  A = {ta.name} with {', '.join(ra['packs'])}\n  B = {tb.name} with {', '.join(rb['packs'])}\n")
    ea, eb = ra["estimates"]["fused"], rb["estimates"]["fused"]
    print(f"{'':<16} {label_a:>22} {label_b:>22} {'B / A':>8}")
    rows = [("kernels", ea["kernels"], eb["kernels"], str),
            ("DRAM traffic", ea["bytes"], eb["bytes"], lambda v: human(v, "B")),
            ("FLOPs", ea["flops"], eb["flops"], lambda v: human(v, "FLOP")),
            ("time (est.)", ea["seconds"], eb["seconds"], seconds),
            ("energy (est.)", ea["joules"], eb["joules"], lambda v: human(v, "J"))]
    for what, x, y, show in rows:
        ratio = f"{y / x:.2f}" if x else "-"
        print(f"{what:<16} {show(x):>22} {show(y):>22} {ratio:>8}")

    print("\nrules fired (rewrites; fusions chosen)")
    fired_a = dict(ra["rules_fired"], **{r: f["chosen"] for r, f in ra["fusions"].items()})
    fired_b = dict(rb["rules_fired"], **{r: f["chosen"] for r, f in rb["fusions"].items()})
    for rule in sorted(set(fired_a) | set(fired_b)):
        x, y = fired_a.get(rule, 0), fired_b.get(rule, 0)
        print(f"  {rule:<36} {x:>5} {y:>5}{'   <- differs' if x != y else ''}")

    ga, gb = fused_groups(a), fused_groups(b)
    only_a = [(m, r) for m, r in ga.items() if m not in gb]
    only_b = [(m, r) for m, r in gb.items() if m not in ga]
    print(f"\ngroups only A forms: {len(only_a)}; only B: {len(only_b)}")
    for side, groups in (("A", only_a), ("B", only_b)):
        for members, rule in groups[:10]:
            print(f"  {side}: {rule}: {', '.join(sorted(members))}")
        if len(groups) > 10:
            print(f"  {side}: ({len(groups) - 10} more)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
