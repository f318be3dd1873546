#!/usr/bin/env python3
"""Writes the example models in ONNX text syntax, with seeded weights.

Standard library only, so it runs anywhere; the outputs are committed and this
script documents how they were made:  python3 make_examples.py
"""
import random


def values(rng, n, scale):
    return ", ".join(f"{rng.uniform(-scale, scale):.6g}" for _ in range(n))


def tensor(rng, name, shape, scale=0.5, positive=False):
    n = 1
    for d in shape:
        n *= d
    if positive:
        data = ", ".join(f"{rng.uniform(0.5, 1.5):.6g}" for _ in range(n))
    else:
        data = values(rng, n, scale)
    dims = ",".join(str(d) for d in shape)
    return f"float[{dims}] {name} = {{{data}}}"


def resblock(rng):
    """A ResNet basic block with a classifier head: Conv-BN-Relu-Conv-BN-Add-Relu-Pool-Gemm."""
    c = 8
    inits = [
        tensor(rng, "w1", [c, 3, 3, 3]), tensor(rng, "b1", [c]),
        tensor(rng, "g1", [c], positive=True), tensor(rng, "be1", [c]),
        tensor(rng, "m1", [c]), tensor(rng, "v1", [c], positive=True),
        tensor(rng, "w2", [c, c, 3, 3], 0.2),
        tensor(rng, "g2", [c], positive=True), tensor(rng, "be2", [c]),
        tensor(rng, "m2", [c]), tensor(rng, "v2", [c], positive=True),
        tensor(rng, "wp", [c, 3, 1, 1]),
        tensor(rng, "fc_w", [10, c]), tensor(rng, "fc_b", [10]),
    ]
    return f"""<ir_version: 8, opset_import: ["" : 17], producer_name: "make_examples.py">
resblock (float[N,3,32,32] image, {", ".join(inits)}) => (float[N,10] logits) {{
  c1 = Conv <pads = [1, 1, 1, 1]> (image, w1, b1)
  n1 = BatchNormalization <epsilon = 1e-05> (c1, g1, be1, m1, v1)
  r1 = Relu (n1)
  c2 = Conv <pads = [1, 1, 1, 1]> (r1, w2)
  n2 = BatchNormalization <epsilon = 1e-05> (c2, g2, be2, m2, v2)
  proj = Conv (image, wp)
  sum = Add (n2, proj)
  r2 = Relu (sum)
  pooled = GlobalAveragePool (r2)
  flat = Flatten (pooled)
  logits = Gemm <transB = 1> (flat, fc_w, fc_b)
}}
"""


def encoder_layer(rng):
    """One transformer encoder layer (single head) as PyTorch exports it:
    attention with scale and mask, residual Add + LayerNormalization, and an
    MLP with the erf form of GELU."""
    d, f = 16, 32
    inits = [
        tensor(rng, "wq", [d, d], 0.3), tensor(rng, "wk", [d, d], 0.3), tensor(rng, "wv", [d, d], 0.3),
        tensor(rng, "wo", [d, d], 0.3), tensor(rng, "bo", [d]),
        tensor(rng, "ln1_g", [d], positive=True), tensor(rng, "ln1_b", [d]),
        tensor(rng, "w1", [d, f], 0.3), tensor(rng, "b1", [f]),
        tensor(rng, "w2", [f, d], 0.3), tensor(rng, "b2", [d]),
        tensor(rng, "ln2_g", [d], positive=True), tensor(rng, "ln2_b", [d]),
        "float scale = {0.25}", "float half = {0.5}", "float one = {1.0}",
        "float inv_sqrt2 = {0.70710678}",
    ]
    return f"""<ir_version: 8, opset_import: ["" : 17], producer_name: "make_examples.py">
encoder_layer (float[B,8,16] x, float[B,1,8] mask, {", ".join(inits)}) => (float[B,8,16] y) {{
  q = MatMul (x, wq)
  k = MatMul (x, wk)
  v = MatMul (x, wv)
  kt = Transpose <perm = [0, 2, 1]> (k)
  scores = MatMul (q, kt)
  scaled = Mul (scores, scale)
  masked = Add (scaled, mask)
  probs = Softmax <axis = -1> (masked)
  ctx = MatMul (probs, v)
  proj = MatMul (ctx, wo)
  attn = Add (proj, bo)
  res1 = Add (x, attn)
  h1 = LayerNormalization <axis = -1, epsilon = 1e-05> (res1, ln1_g, ln1_b)
  f1 = MatMul (h1, w1)
  f1b = Add (f1, b1)
  e0 = Mul (f1b, inv_sqrt2)
  e1 = Erf (e0)
  e2 = Add (e1, one)
  e3 = Mul (f1b, e2)
  gelu = Mul (e3, half)
  f2 = MatMul (gelu, w2)
  f2b = Add (f2, b2)
  res2 = Add (h1, f2b)
  y = LayerNormalization <axis = -1, epsilon = 1e-05> (res2, ln2_g, ln2_b)
}}
"""


def main():
    rng = random.Random(20261129)
    with open("resblock.onnxtxt", "w") as f:
        f.write(resblock(rng))
    with open("encoder_layer.onnxtxt", "w") as f:
        f.write(encoder_layer(rng))


if __name__ == "__main__":
    main()
