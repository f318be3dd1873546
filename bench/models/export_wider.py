#!/usr/bin/python3
"""Exports the wider bench: models of kinds the zoo (export_models.py) lacks,
as ONNX backend test case folders in the zoo's format (model.onnx plus
test_data_set_0 with a seeded input and PyTorch's output), so
`fusec onnx-test OUT_DIR/NAME` and `fusec run --check` take them alike.

WIDER are the kinds the project works on: an LLM-style decoder (RMSNorm,
rotary embeddings, SwiGLU, grouped-query attention), segmentation (dilated
convs, bilinear resampling), windowed attention, 1-D and 3-D convolutions,
GroupNorm and InstanceNorm, transposed convs, a feature pyramid, grouped convs
with squeeze-and-excitation. HELD_OUT are never tuned on: their figures are
reported apart, to show how far the work on the others generalizes.

    /usr/bin/python3 bench/models/export_wider.py [--force] OUT_DIR [names...]

names: see WIDER and HELD_OUT below, or `--list`; default: all.
Same export settings as export_models.py (opset 13 unless stated,
do_constant_folding=False, random seeded weights).
"""
import math
import os
import sys

import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_models  # noqa: E402  (the zoo's randomize and export)

randomize = export_models.randomize
OPSET = export_models.OPSET


# ---- an LLM-style decoder --------------------------------------------------

class RMSNorm(torch.nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, torch.nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class LlamaBlock(torch.nn.Module):
    """Pre-RMSNorm attention with rotary embeddings on Q and K and grouped
    K/V heads (repeated to the query heads), then a SwiGLU MLP."""

    def __init__(self, d, heads, kv_heads, hidden, context):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.q = torch.nn.Linear(d, d, bias=False)
        self.kv = torch.nn.Linear(d, 2 * kv_heads * self.hd, bias=False)
        self.o = torch.nn.Linear(d, d, bias=False)
        self.w1 = torch.nn.Linear(d, hidden, bias=False)
        self.w3 = torch.nn.Linear(d, hidden, bias=False)
        self.w2 = torch.nn.Linear(hidden, d, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2).float() / self.hd))
        freqs = torch.outer(torch.arange(context).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos())
        self.register_buffer("sin", emb.sin())
        self.register_buffer("causal", torch.full((context, context), float("-inf")).triu(1))

    def forward(self, x):
        b, s, d = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, s, self.heads, self.hd).transpose(1, 2)
        k, v = self.kv(h).view(b, s, 2, self.kv_heads, self.hd).permute(2, 0, 3, 1, 4)
        cos, sin = self.cos[:s], self.sin[:s]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.hd) + self.causal[:s, :s]
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, s, d)
        x = x + self.o(y)
        h = self.n2(x)
        return x + self.w2(torch.nn.functional.silu(self.w1(h)) * self.w3(h))


class Llama(torch.nn.Module):
    def __init__(self, layers=2, d=256, heads=8, kv_heads=2, hidden=688, vocab=4096, context=256):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.blocks = torch.nn.ModuleList(LlamaBlock(d, heads, kv_heads, hidden, context) for _ in range(layers))
        self.norm = RMSNorm(d)

    def forward(self, ids):
        x = self.emb(ids)
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


def llama_decoder():
    torch.manual_seed(0)
    return randomize(Llama()).eval(), (torch.randint(0, 4096, (1, 64)),), ["ids"], ["hidden"]


# ---- convolutions of other ranks, other normalizations ---------------------

class Audio1d(torch.nn.Module):
    """A 1-D conv net as speech front ends write it: strided and dilated
    Conv1d, BatchNorm1d, GELU, GroupNorm, a depthwise Conv1d, global pool."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Conv1d(1, 64, 10, stride=5), torch.nn.BatchNorm1d(64), torch.nn.GELU(),
            torch.nn.Conv1d(64, 64, 3, stride=2, padding=1), torch.nn.GroupNorm(8, 64), torch.nn.GELU(),
            torch.nn.Conv1d(64, 64, 3, padding=2, dilation=2), torch.nn.BatchNorm1d(64), torch.nn.ReLU(),
            torch.nn.Conv1d(64, 64, 5, padding=2, groups=64), torch.nn.Conv1d(64, 128, 1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(), torch.nn.Linear(128, 32))

    def forward(self, x):
        return self.net(x)


def audio1d():
    torch.manual_seed(0)
    return randomize(Audio1d()).eval(), (torch.randn(1, 1, 16000),), ["wave"], ["logits"]


def r3d_18():
    torch.manual_seed(0)
    model = randomize(torchvision.models.video.r3d_18(weights=None)).eval()
    return model, (torch.randn(1, 3, 8, 56, 56),), ["clip"], ["logits"]


class UNetGroupNorm(torch.nn.Module):
    """A small U-Net: GroupNorm and InstanceNorm blocks, max-pool down,
    ConvTranspose2d and nearest Upsample up, skip concatenations."""

    def __init__(self, c=32):
        super().__init__()

        def block(i, o, norm):
            return torch.nn.Sequential(torch.nn.Conv2d(i, o, 3, padding=1), norm(o), torch.nn.SiLU(),
                                       torch.nn.Conv2d(o, o, 3, padding=1), norm(o), torch.nn.SiLU())

        gn = lambda o: torch.nn.GroupNorm(8, o)  # noqa: E731
        inorm = lambda o: torch.nn.InstanceNorm2d(o, affine=True)  # noqa: E731
        self.d1, self.d2, self.mid = block(3, c, gn), block(c, 2 * c, inorm), block(2 * c, 4 * c, gn)
        self.up2 = torch.nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2)
        self.u2 = block(4 * c, 2 * c, gn)
        self.up1 = torch.nn.Upsample(scale_factor=2, mode="nearest")
        self.u1 = block(2 * c + c, c, inorm)
        self.head = torch.nn.Conv2d(c, 4, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(torch.nn.functional.max_pool2d(a, 2))
        m = self.mid(torch.nn.functional.max_pool2d(b, 2))
        y = self.u2(torch.cat([self.up2(m), b], 1))
        y = self.u1(torch.cat([self.up1(y), a], 1))
        return self.head(y)


def unet_groupnorm():
    torch.manual_seed(0)
    return randomize(UNetGroupNorm()).eval(), (torch.randn(1, 3, 64, 64),), ["image"], ["mask"]


# ---- segmentation, detection backbones, windowed attention -----------------

class OutOf(torch.nn.Module):
    """A torchvision model whose forward returns a dict: its `key` entry."""

    def __init__(self, model, key):
        super().__init__()
        self.model, self.key = model, key

    def forward(self, x):
        out = self.model(x)
        return out[self.key] if isinstance(out, dict) else out


def segmentation(arch, size=224):
    def make():
        torch.manual_seed(0)
        model = getattr(torchvision.models.segmentation, arch)(weights=None, weights_backbone=None)
        return randomize(OutOf(model, "out")).eval(), (torch.randn(1, 3, size, size),), ["image"], ["mask"]
    return make


class FpnResnet18(torch.nn.Module):
    """A detection backbone: ResNet-18's four stages into torchvision's
    FeaturePyramidNetwork (1x1 lateral convs, nearest upsampling, 3x3
    output convs); the four levels are the outputs."""

    def __init__(self):
        super().__init__()
        r = torchvision.models.resnet18(weights=None)
        self.stem = torch.nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool)
        self.stages = torch.nn.ModuleList([r.layer1, r.layer2, r.layer3, r.layer4])
        self.fpn = torchvision.ops.FeaturePyramidNetwork([64, 128, 256, 512], 64)

    def forward(self, x):
        x = self.stem(x)
        feats = {}
        for i, stage in enumerate(self.stages):
            x = stage(x)
            feats[str(i)] = x
        out = self.fpn(feats)
        return tuple(out[str(i)] for i in range(4))


def fpn_resnet18():
    torch.manual_seed(0)
    return randomize(FpnResnet18()).eval(), (torch.randn(1, 3, 224, 224),), ["image"], ["p2", "p3", "p4", "p5"]


def vision(arch, size=224):
    return export_models.vision(arch, size=size)


# name -> (builder, opset)
WIDER = {
    "llama_decoder": (llama_decoder, 17),
    "deeplabv3_mobilenet_v3_large": (segmentation("deeplabv3_mobilenet_v3_large"), OPSET),
    "lraspp_mobilenet_v3_large": (segmentation("lraspp_mobilenet_v3_large"), OPSET),
    "swin_t": (vision("swin_t"), OPSET),
    "audio1d": (audio1d, OPSET),
    "r3d_18": (r3d_18, OPSET),
    "unet_groupnorm": (unet_groupnorm, OPSET),
    "fpn_resnet18": (fpn_resnet18, OPSET),
    "regnet_y_400mf": (vision("regnet_y_400mf"), OPSET),
    "mnasnet0_5": (vision("mnasnet0_5"), OPSET),
    "efficientnet_v2_s": (vision("efficientnet_v2_s", size=160), OPSET),
    "resnext50_32x4d": (vision("resnext50_32x4d"), OPSET),
}
# Never tuned on: reported apart.
HELD_OUT = {
    "googlenet": (vision("googlenet"), OPSET),
    "mobilenet_v3_large": (vision("mobilenet_v3_large"), OPSET),
    "regnet_x_400mf": (vision("regnet_x_400mf"), OPSET),
}
ALL = {**WIDER, **HELD_OUT}


if __name__ == "__main__":
    export_models.main(ALL, __doc__, "export_wider")
