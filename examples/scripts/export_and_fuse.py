#!/usr/bin/env python3
"""A PyTorch module to ONNX, fused by fusec, run on OpenCL, checked against PyTorch.

    PYTHONPATH=build/python /usr/bin/python3 examples/scripts/export_and_fuse.py [--batch 2] [--save DIR]

The module is a small residual CNN block and a classifier head: conv, batch
norm, ReLU, a residual add, pooling and a linear layer, as models in the wild
write them. fusec folds the batch norms into the convs and fuses the
activations and the residual add into the conv epilogues; the script prints
the report and the largest difference from PyTorch, and fails when the
outputs differ beyond float32 rounding.
"""
import argparse
import io
import sys

import numpy
import torch

import fusec


class Block(torch.nn.Module):
    def __init__(self, channels: int = 16, classes: int = 10):
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, channels, 3, padding=1, bias=False),
                                        torch.nn.BatchNorm2d(channels), torch.nn.ReLU())
        self.body = torch.nn.Sequential(torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False),
                                        torch.nn.BatchNorm2d(channels), torch.nn.ReLU(),
                                        torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False),
                                        torch.nn.BatchNorm2d(channels))
        self.head = torch.nn.Linear(channels, classes)

    def forward(self, x):
        y = self.stem(x)
        y = torch.relu(self.body(y) + y)
        return self.head(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--save", help="also write the fused model, plan, report and kernels here")
    args = parser.parse_args()

    torch.manual_seed(0)
    module = Block().eval()
    # Batch norm statistics that are not the identity, so folding them matters.
    for m in module.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
    x = torch.randn(args.batch, 3, 32, 32)

    exported = io.BytesIO()
    torch.onnx.export(module, (x,), exported, input_names=["image"], output_names=["logits"],
                      dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}}, opset_version=17)

    compiled = fusec.compile(exported.getvalue(), dims={"batch": args.batch})
    print(compiled.report_text)
    got = compiled.run({"image": x.numpy()})["logits"]
    with torch.no_grad():
        want = module(x).numpy()
    error = float(numpy.max(numpy.abs(got - want)))
    scale = float(numpy.max(numpy.abs(want)))
    device_ms = sum(seconds for _, seconds in compiled.timings) * 1e3
    est = compiled.report["estimates"]
    print(f"fusec on {compiled.device}: {est['imported']['kernels']} ops -> {len(compiled.timings)} kernels launched, "
          f"{device_ms:.3f} ms device time")
    print(f"largest difference from PyTorch: {error:.3g} (outputs up to {scale:.3g})")
    if args.save:
        compiled.save(args.save, emit=["onnx", "plan", "report", "opencl"])
        print(f"wrote {args.save}")
    if not numpy.allclose(got, want, rtol=1e-4, atol=1e-4 * max(scale, 1.0)):
        print("error: fusec's outputs differ from PyTorch's", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
