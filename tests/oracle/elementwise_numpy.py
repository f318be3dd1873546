#!/usr/bin/python3
"""Elementwise ops on inputs where formulas part ways, fusec against NumPy.

Usage: elementwise_numpy.py FUSEC WORKDIR

Each op runs alone in a one-node ONNX model (opset 17, non-default
attributes) through `fusec run --interpreter` on float32 inputs that mix
ordinary values with large and tiny magnitudes, subnormals, signed zeros,
infinities and NaN. The oracle is the op's definition written here with
NumPy in float64, then rounded to float32: independent of fusec's op
catalog, which the interpreter's elementwise kernels run from. A mismatch
names the op, the input and both results; the exit status is 1.
"""
import math
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def sample(seed, n=512):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, n)
    picks = {3: rng.uniform(-300, 300, n), 11: rng.uniform(-300, 300, n), 5: np.full(n, np.nan),
             6: np.full(n, np.inf), 7: np.full(n, -np.inf), 9: rng.uniform(-2, 2, n) * 1e-40,
             10: np.where(np.arange(n) % 32 == 10, 0.0, -0.0), 13: rng.uniform(-2, 2, n) * 1e-6,
             14: rng.uniform(-2, 2, n) * 1e30, 15: np.round(rng.uniform(-4, 4, n) * 2) / 2}  # halves: Round's ties
    for k, v in picks.items():
        x[np.arange(n) % 16 == k] = v[np.arange(n) % 16 == k]
    return x.astype(np.float32)


erf = np.vectorize(math.erf, otypes=[np.float64])
SELU_A, SELU_G = 1.5, 1.25

# op -> (attributes, definition on float64 operands)
UNARY = {
    "Abs": ({}, np.abs), "Neg": ({}, np.negative), "Relu": ({}, lambda x: np.maximum(x, 0)),
    "Exp": ({}, np.exp), "Log": ({}, np.log), "Sqrt": ({}, np.sqrt), "Reciprocal": ({}, lambda x: 1 / x),
    "Floor": ({}, np.floor), "Ceil": ({}, np.ceil), "Round": ({}, np.round), "Sign": ({}, np.sign),
    "Tanh": ({}, np.tanh), "Erf": ({}, erf),
    "Sin": ({}, np.sin), "Cos": ({}, np.cos), "Tan": ({}, np.tan), "Asin": ({}, np.arcsin), "Acos": ({}, np.arccos),
    "Atan": ({}, np.arctan), "Sinh": ({}, np.sinh), "Cosh": ({}, np.cosh), "Asinh": ({}, np.arcsinh),
    "Acosh": ({}, np.arccosh), "Atanh": ({}, np.arctanh),
    "Sigmoid": ({}, lambda x: 1 / (1 + np.exp(-x))),
    "Softplus": ({}, lambda x: np.logaddexp(0, x)),
    "Softsign": ({}, lambda x: x / (1 + np.abs(x))),
    "HardSwish": ({}, lambda x: x * np.clip(x / 6 + 0.5, 0, 1)),
    "LeakyRelu": ({"alpha": 0.3}, lambda x: np.where(x >= 0, x, 0.3 * x)),
    "Elu": ({"alpha": 0.7}, lambda x: np.where(x > 0, x, 0.7 * np.expm1(x))),
    "Celu": ({"alpha": 1.5}, lambda x: np.maximum(0, x) + np.minimum(0, 1.5 * np.expm1(x / 1.5))),
    "Selu": ({"alpha": SELU_A, "gamma": SELU_G}, lambda x: SELU_G * np.where(x > 0, x, SELU_A * np.expm1(x))),
    "HardSigmoid": ({"alpha": 0.25, "beta": 0.375}, lambda x: np.clip(0.25 * x + 0.375, 0, 1)),
    "ThresholdedRelu": ({"alpha": 0.75}, lambda x: np.where(x > 0.75, x, 0)),
}
BINARY = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Pow": np.power,
    "Max": np.fmax, "Min": np.fmin,  # replaced below: ONNX Max/Min propagate NaN
}
BINARY["Max"] = lambda a, b: np.where(np.isnan(a) | np.isnan(b), np.nan, np.maximum(a, b))
BINARY["Min"] = lambda a, b: np.where(np.isnan(a) | np.isnan(b), np.nan, np.minimum(a, b))


def run(fusec, work, op, attrs, inputs):
    names = ["x", "y"][: len(inputs)]
    node = helper.make_node(op, names, ["z"], **attrs)
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info(n, TensorProto.FLOAT, [len(inputs[0])]) for n in names],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [len(inputs[0])])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    folder = os.path.join(work, op)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.onnx")
    onnx.save(model, path)
    cmd = [fusec, "run", path, "--interpreter", "--output", os.path.join(folder, "out")]
    for n, a in zip(names, inputs):
        f = os.path.join(folder, n + ".pb")
        with open(f, "wb") as fh:
            fh.write(numpy_helper.from_array(a, n).SerializeToString())
        cmd += ["--input", f]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {done.returncode}\n{done.stderr}")
    t = TensorProto()
    with open(os.path.join(folder, "out", "output_0.pb"), "rb") as fh:
        t.ParseFromString(fh.read())
    return numpy_helper.to_array(t)


def mismatches(got, want):
    """Elements where got (float32) differs from want (float64, rounded to float32) by more than a few ulps."""
    with np.errstate(all="ignore"):
        want32 = want.astype(np.float32)
        both_nan = np.isnan(got) & np.isnan(want32)
        same = (got == want32) | both_nan
        close = np.abs(got.astype(np.float64) - want32) <= 4 * np.spacing(np.abs(want32)).astype(np.float64) + 1e-37
    return np.flatnonzero(~(same | (close & np.isfinite(want32))))


def main():
    fusec, work = sys.argv[1], sys.argv[2]
    failures, checked = [], 0
    x, y = sample(1), sample(2)
    with np.errstate(all="ignore"):
        cases = [(op, attrs, [x], f(x.astype(np.float64))) for op, (attrs, f) in UNARY.items()]
        cases += [(op, {}, [x, y], f(x.astype(np.float64), y.astype(np.float64))) for op, f in BINARY.items()]
    for op, attrs, inputs, want in cases:
        got = run(fusec, work, op, attrs, inputs)
        bad = mismatches(got, want)
        checked += 1
        if len(bad):
            i = bad[0]
            operands = ", ".join(f"{a[i]!r}" for a in inputs)
            failures.append(f"{op}({operands}): fusec {got[i]!r}, NumPy {np.float32(want[i])!r} ({len(bad)} of {len(got)} elements)")
    for f in failures:
        print("mismatch:", f)
    print(f"elementwise vs NumPy: {checked - len(failures)} of {checked} ops agree on {len(x)} wide-ranging inputs")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
