#!/usr/bin/python3
"""Exports the model zoo used by benchmarks and whole-model tests to ONNX.

Each model is written as an ONNX backend test case folder,
OUT_DIR/NAME/model.onnx plus test_data_set_0/{input,output}_*.pb holding a
seeded input and PyTorch's own output for it, so `fusec onnx-test OUT_DIR/NAME`
checks fusec against PyTorch.

Runs with Debian's python3-torch, python3-torchvision and python3-onnx
(scripts/install-deps.sh installs them; they live under /usr/bin/python3, not
the pyenv python). Weights are random but seeded, so no download is needed.

    /usr/bin/python3 bench/models/export_models.py OUT_DIR [names...]

names: resnet18 resnet50 bert_layer bert_encoder2 (default: all).

Two export facts: torch 1.13 folds BatchNorm into Conv in eval mode even
without constant folding, so the ResNets are exported with
TrainingMode.PRESERVE (model in eval()) to keep the BatchNorm nodes that
rules must fold; and every parameter and buffer gets its own random values,
or the exporter merges identical initializers behind Identity nodes.
"""
import os
import sys

import onnx.numpy_helper
import torch
import torchvision

OPSET = 13


def randomize(model):
    """Distinct seeded values for every 1-D parameter and buffer (norm scales,
    shifts, running statistics, biases), which PyTorch initializes to
    constants. Weight matrices keep PyTorch's random (Kaiming) init, which
    keeps activations near unit scale."""
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if not t.is_floating_point() or t.dim() != 1:
                continue
            if name.endswith("running_var") or name.endswith("weight"):
                t.uniform_(0.5, 1.5)  # variances and norm scales stay positive
            else:
                t.normal_(0.0, 0.1)
    return model


def resnet(name):
    torch.manual_seed(0)
    model = randomize(getattr(torchvision.models, name)(weights=None)).eval()
    return model, (torch.randn(1, 3, 224, 224),), ["image"], ["logits"]


class BertLayer(torch.nn.Module):
    """One BERT-base encoder layer as PyTorch writes it: attention with scale
    and additive mask, residual Add + LayerNorm, GELU (erf) MLP."""

    def __init__(self, d=768, heads=12, ff=3072):
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d) for _ in range(4))
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.ff1, self.ff2 = torch.nn.Linear(d, ff), torch.nn.Linear(ff, d)

    def split(self, t):
        b, s, _ = t.shape
        return t.view(b, s, self.heads, self.dh).transpose(1, 2)

    def forward(self, x, mask):
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        scores = q @ k.transpose(-1, -2) / self.dh ** 0.5 + mask
        ctx = torch.softmax(scores, dim=-1) @ v
        b, h, s, dh = ctx.shape
        attn = self.o(ctx.transpose(1, 2).reshape(b, s, h * dh))
        h1 = self.ln1(x + attn)
        return self.ln2(h1 + self.ff2(torch.nn.functional.gelu(self.ff1(h1))))


def bert_layer(_name):
    torch.manual_seed(0)
    seq = 128
    return randomize(BertLayer()).eval(), (torch.randn(1, seq, 768), torch.zeros(1, 1, 1, seq)), ["x", "mask"], ["y"]


class Encoder(torch.nn.Module):
    def __init__(self, layers, **kw):
        super().__init__()
        self.layers = torch.nn.ModuleList(BertLayer(**kw) for _ in range(layers))

    def forward(self, x, mask):
        for layer in self.layers:
            x = layer(x, mask)
        return x


def bert_encoder2(_name):
    """A small BERT-style encoder (two layers) for tests."""
    torch.manual_seed(0)
    seq = 16
    mask = torch.zeros(1, 1, 1, seq)
    mask[..., seq - 3:] = -10000.0
    model = randomize(Encoder(2, d=64, heads=4, ff=256)).eval()
    return model, (torch.randn(1, seq, 64), mask), ["x", "mask"], ["y"]


MODELS = {"resnet18": resnet, "resnet50": resnet, "bert_layer": bert_layer, "bert_encoder2": bert_encoder2}


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    names = sys.argv[2:] or list(MODELS)
    os.makedirs(out, exist_ok=True)
    for name in names:
        model, args, inputs, outputs = MODELS[name](name)
        case = os.path.join(out, name)
        data = os.path.join(case, "test_data_set_0")
        os.makedirs(data, exist_ok=True)
        path = os.path.join(case, "model.onnx")
        with torch.no_grad():
            torch.onnx.export(model, args, path, opset_version=OPSET, input_names=inputs,
                              output_names=outputs, do_constant_folding=True,
                              training=torch.onnx.TrainingMode.PRESERVE)
            result = model(*args)
        results = result if isinstance(result, tuple) else (result,)
        for kind, tensors in (("input", args), ("output", results)):
            for i, t in enumerate(tensors):
                proto = onnx.numpy_helper.from_array(t.numpy())
                with open(os.path.join(data, f"{kind}_{i}.pb"), "wb") as f:
                    f.write(proto.SerializeToString())
        print(f"wrote {case}")


if __name__ == "__main__":
    main()
