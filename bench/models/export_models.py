#!/usr/bin/python3
"""Exports the model zoo used by benchmarks and whole-model tests to ONNX.

Each model is written as an ONNX backend test case folder,
OUT_DIR/NAME/model.onnx plus test_data_set_0/{input,output}_*.pb holding a
seeded input and PyTorch's own output for it, so `fusec onnx-test OUT_DIR/NAME`
checks fusec against PyTorch. OUT_DIR is a cache (the build folder's `zoo/`),
never committed; a model already there is kept unless --force is given.

Runs with Debian's python3-torch, python3-torchvision and python3-onnx
(scripts/install-deps.sh installs them; they live under /usr/bin/python3, not
the pyenv python). Weights are random but seeded, so no download is needed.

    /usr/bin/python3 bench/models/export_models.py [--force] OUT_DIR [names...]

names: see ZOO below, or `--list`; default: all of the zoo.

Export settings are the ones a user gets from a plain torch.onnx.export:
opset 13, `do_constant_folding=False` (so the exporter's run-time shape
arithmetic, Shape -> Gather -> Unsqueeze -> Concat -> Reshape, reaches fusec
as it reaches every other runtime), and TrainingMode.PRESERVE with the model
in eval(): torch 1.13 folds BatchNorm into Conv in eval mode otherwise, and
BatchNorm is what the rules must fold. Every 1-D parameter and buffer gets its
own random values, or the exporter merges identical initializers behind
Identity nodes.
"""
import os
import sys

import onnx.numpy_helper
import torch
import torchvision

OPSET = 13


def randomize(model):
    """Distinct seeded values for every parameter and buffer that PyTorch
    initializes to a constant: norm scales and shifts, running statistics,
    biases (1-D), and the few weights set to one value (ViT's zero head and
    class token, ConvNeXt's layer scale of 1e-6), which would make an output
    constant or a block an identity and hide errors. Other weights keep
    PyTorch's random (Kaiming) init, which keeps activations near unit scale."""
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if not t.is_floating_point() or t.numel() == 0:
                continue
            if t.dim() == 1:
                if name.endswith("running_var") or name.endswith("weight"):
                    t.uniform_(0.5, 1.5)  # variances and norm scales stay positive
                else:
                    t.normal_(0.0, 0.1)
            elif bool((t == t.flatten()[0]).all()):
                fan_in = t[0].numel() if t.dim() > 1 and t.shape[0] > 1 else t.shape[-1]
                t.normal_(0.0, fan_in ** -0.5)
    return model


def vision(arch, batch=1, size=224):
    """A torchvision classifier at batch `batch`, random seeded weights."""
    def make():
        torch.manual_seed(0)
        model = randomize(getattr(torchvision.models, arch)(weights=None)).eval()
        return model, (torch.randn(batch, 3, size, size),), ["image"], ["logits"]
    return make


class BertLayer(torch.nn.Module):
    """One BERT-base encoder layer written out by hand: attention with scale
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


def bert_layer():
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


def bert_encoder2():
    """A small BERT-style encoder (two hand-written layers) for tests."""
    torch.manual_seed(0)
    seq = 16
    mask = torch.zeros(1, 1, 1, seq)
    mask[..., seq - 3:] = -10000.0
    model = randomize(Encoder(2, d=64, heads=4, ff=256)).eval()
    return model, (torch.randn(1, seq, 64), mask), ["x", "mask"], ["y"]


class TorchEncoder(torch.nn.Module):
    """BERT-base as most users write it: nn.TransformerEncoder (post-LN, GELU),
    12 layers, d 768, 12 heads, with a key padding mask. Sequence-first, as
    nn.TransformerEncoder's default; the fused fast path only exists
    batch-first and does not export."""

    def __init__(self, layers=12, d=768, heads=12, ff=3072):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(d, heads, ff, dropout=0.1, activation="gelu")
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        for module in self.encoder.modules():  # the layers are deep copies of one: give each its own weights
            if module is not self and hasattr(module, "_reset_parameters"):
                module._reset_parameters()
            elif isinstance(module, torch.nn.Linear):
                module.reset_parameters()

    def forward(self, x, padding):
        return self.encoder(x, src_key_padding_mask=padding)


def bert_base():
    torch.manual_seed(0)
    seq = 128
    padding = torch.zeros(1, seq, dtype=torch.bool)
    padding[:, seq - 16:] = True
    return randomize(TorchEncoder()).eval(), (torch.randn(seq, 1, 768), padding), ["x", "padding"], ["y"]


class GptBlock(torch.nn.Module):
    """A GPT-2 block as GPT-2 writes it: pre-LN, fused QKV projection split
    three ways, causal mask sliced from a buffer at the run's length,
    tanh-GELU MLP."""

    def __init__(self, d, heads, context):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc, self.out = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
        self.register_buffer("causal", torch.tril(torch.ones(context, context, dtype=torch.bool))
                             .view(1, 1, context, context))

    def forward(self, x):
        b, s, d = x.size()
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (k.size(-1) ** 0.5)
        att = torch.where(self.causal[:, :, :s, :s], att, torch.tensor(torch.finfo(att.dtype).min))
        y = (torch.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(b, s, d)
        x = x + self.proj(y)
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt2(torch.nn.Module):
    """A GPT-2-small-style decoder: token and position embeddings, `layers`
    blocks, final LayerNorm; the hidden states are the output (no LM head, so
    the vocabulary can stay small)."""

    def __init__(self, layers=2, d=768, heads=12, vocab=8192, context=1024):
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(vocab, d), torch.nn.Embedding(context, d)
        self.blocks = torch.nn.ModuleList(GptBlock(d, heads, context) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(d)

    def forward(self, ids):
        pos = torch.arange(0, ids.size(1), dtype=torch.long).unsqueeze(0)
        x = self.wte(ids) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.ln(x)


def gpt2():
    torch.manual_seed(0)
    return randomize(Gpt2()).eval(), (torch.randint(0, 8192, (1, 128)),), ["ids"], ["hidden"]



# name -> (builder, opset). The twelve real exports first, then two variants
# (LayerNormalization as one op at opset 17; batch 4), then the hand-written
# models the unit tests use.
ZOO = {
    "resnet18": (vision("resnet18"), OPSET),
    "resnet50": (vision("resnet50"), OPSET),
    "mobilenet_v2": (vision("mobilenet_v2"), OPSET),
    "mobilenet_v3_small": (vision("mobilenet_v3_small"), OPSET),
    "efficientnet_b0": (vision("efficientnet_b0"), OPSET),
    "squeezenet1_1": (vision("squeezenet1_1"), OPSET),
    "shufflenet_v2_x1_0": (vision("shufflenet_v2_x1_0"), OPSET),
    "densenet121": (vision("densenet121"), OPSET),
    "convnext_tiny": (vision("convnext_tiny"), OPSET),
    "vit_b_16": (vision("vit_b_16"), OPSET),
    "bert_base": (bert_base, OPSET),
    "gpt2": (gpt2, OPSET),
    "bert_base_opset17": (bert_base, 17),
    "shufflenet_v2_x1_0_batch4": (vision("shufflenet_v2_x1_0", batch=4), OPSET),
    "bert_layer": (bert_layer, OPSET),
    "bert_encoder2": (bert_encoder2, OPSET),
}


def export(name, out, registry=None):
    """Writes model `name` of `registry` (default: ZOO) as OUT/NAME."""
    build, opset = (registry or ZOO)[name]
    model, args, inputs, outputs = build()
    case = os.path.join(out, name)
    data = os.path.join(case, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    path = os.path.join(case, "model.onnx")
    torch.onnx.export(model, args, path, opset_version=opset, input_names=inputs,
                      output_names=outputs, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.PRESERVE)
    with torch.no_grad():
        result = model(*args)
    results = result if isinstance(result, tuple) else (result,)
    for kind, tensors in (("input", args), ("output", results)):
        for i, t in enumerate(tensors):
            proto = onnx.numpy_helper.from_array(t.numpy())
            with open(os.path.join(data, f"{kind}_{i}.pb"), "wb") as f:
                f.write(proto.SerializeToString())


def main(registry=None, usage=__doc__, prog="export_models"):
    """The command line of this script and of export_wider.py: OUT_DIR
    [names...] (default: all of `registry`, ZOO unless given), --force,
    --list."""
    registry = registry or ZOO
    argv = sys.argv[1:]
    if "--list" in argv:
        print(" ".join(registry))
        return
    force = "--force" in argv
    argv = [a for a in argv if a != "--force"]
    if not argv:
        sys.exit(usage)
    out, names = argv[0], argv[1:] or list(registry)
    unknown = [n for n in names if n not in registry]
    if unknown:
        sys.exit(f"{prog}: unknown model(s) {' '.join(unknown)}; known: {' '.join(registry)}")
    os.makedirs(out, exist_ok=True)
    for name in names:
        case = os.path.join(out, name)
        done = os.path.join(case, "test_data_set_0", "output_0.pb")
        if os.path.exists(done) and not force:
            print(f"kept {case}")
            continue
        export(name, out, registry)  # output_0.pb is written last, so a cut-off export is redone
        print(f"wrote {case}")


if __name__ == "__main__":
    main()
