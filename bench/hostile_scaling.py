"""Time `fusec compile` on graphs that grow in one direction only, to show
compile time linear in the input: a chain of N Relus, a Concat of N inputs,
a Max of N inputs, and a pack of N rules for `fusec verify` (issue: hostile
input, second round). Prints one row per size and the ratio of per-node
time at the largest size to the smallest (linear: about 1).
Run with Debian's python3 (python3-onnx):
  /usr/bin/python3 bench/hostile_scaling.py build/tools/fusec [MAX]   (MAX default 100000)"""
import os
import subprocess
import sys
import tempfile
import time

from onnx import TensorProto, helper


def relu_chain(n):
    nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"], name=f"r{i}") for i in range(n)]
    return helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [4])],
                             [helper.make_tensor_value_info(f"v{n}", TensorProto.FLOAT, [4])])


def wide(op, n, **attrs):
    inputs = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [1, 2]) for i in range(n)]
    shape = [1, 2 * n] if op == "Concat" else [1, 2]
    node = helper.make_node(op, [f"x{i}" for i in range(n)], ["y"], **attrs)
    return helper.make_graph([node], op.lower(), inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])


def model(graph):
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def timed(argv):
    start = time.monotonic()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        rc, tail = p.returncode, (p.stdout + p.stderr).strip().splitlines()[-1:]
    except subprocess.TimeoutExpired:
        rc, tail = "timeout", []
    return time.monotonic() - start, rc, tail


def main():
    fusec = sys.argv[1]
    biggest = int(sys.argv[2]) if len(sys.argv) > 2 else 100000
    cases = [("relu chain", relu_chain), ("concat", lambda n: wide("Concat", n, axis=1)), ("max", lambda n: wide("Max", n))]
    with tempfile.TemporaryDirectory() as work:
        print(f"{'graph':<12} {'N':>8} {'seconds':>9} {'us/N':>9}  exit")
        for name, make in cases:
            first = last = None
            n = 1000
            while n <= biggest:
                path = os.path.join(work, f"{name.replace(' ', '_')}_{n}.onnx")
                with open(path, "wb") as f:
                    f.write(model(make(n)).SerializeToString())
                seconds, rc, tail = timed([fusec, "compile", path])
                per = seconds / n * 1e6
                first = first or per
                last = per
                print(f"{name:<12} {n:>8} {seconds:>9.2f} {per:>9.1f}  {rc} {' '.join(tail)[:100]}", flush=True)
                n *= 10
            print(f"{name:<12} per-N time, largest / smallest: {last / first:.2f}")


if __name__ == "__main__":
    main()
