#!/usr/bin/env python3
"""The RMSNorm kernel (kernels/rmsnorm.cu, from the fatbin the Makefile
embeds) against PyTorch's own F.rms_norm and the FP16 cast after it, bit for
bit, on the GPU: the FP32 norm output, the per-row rstd PyTorch's kernel
stores, and the FP16 cast are compared as raw bits.

- the H3 widths: 2048 with weight (norm1, norm2) and 64 without (q/k norm),
  and other widths PyTorch sends to the same kernel (4 .. 8192, n % 4 == 0);
- random normal rows at scales 1e-6 .. 1e6, many row counts, millions of rows;
- special rows: all zero, -0, subnormal, huge (squares overflow), one huge
  element among tiny ones, inf, nan, +-65504 and values whose FP16 cast
  rounds to +-inf, weights with zeros, negatives and huge values.

The profiler names the kernel PyTorch ran for each case; the document lists
them, so a case that PyTorch sent elsewhere shows. Writes a JSON document on
stdout; exit status 0 when zero bits differ.

    python3 tests/gpu/test_rmsnorm.py [--fatbin build/kernels.fatbin] [--quick]
"""
import argparse
import ctypes
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fatbin import DEFAULT, Fatbin, bits_differing, ptr, report  # noqa: E402  (beside this script)

EPS = 1e-5


def kernel(fb, x, gamma, eps):
    rows, n = x.shape
    y = torch.full_like(x, float("nan"))
    rstd = torch.full((rows,), float("nan"), device="cuda")
    y16 = torch.full((rows, n), float("nan"), dtype=torch.float16, device="cuda")
    fb.launch("h3_rmsnorm_f32", (rows,), (32, 4),
              [ptr(x), ptr(gamma), ctypes.c_float(eps), ctypes.c_int(n), ptr(y), ptr(rstd), ptr(y16)])
    return y, rstd, y16


def reference(x, gamma, eps):
    n = x.shape[1]
    y, rstd = torch.ops.aten._fused_rms_norm(x, [n], gamma, eps)
    y2 = F.rms_norm(x, (n,), gamma, eps)  # what the model calls: must be the same bits
    assert bits_differing(y, y2) == 0, "F.rms_norm and _fused_rms_norm differ"
    return y, rstd.reshape(-1), y.to(torch.float16)


def reference_kernel_name(x, gamma, eps):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        F.rms_norm(x, (x.shape[1],), gamma, eps)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return names[0] if names else "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fatbin", default=DEFAULT)
    ap.add_argument("--quick", action="store_true", help="fewer random cases")
    a = ap.parse_args()
    fb = Fatbin(a.fatbin)
    gen = torch.Generator(device="cuda").manual_seed(2026)
    cases, kernels = [], {}

    def run(name, x, gamma, eps=EPS):
        x = x.contiguous()
        key = (x.shape[1], gamma is not None)
        if key not in kernels:
            kernels[key] = reference_kernel_name(x, gamma, eps)
        ry, rr, r16 = reference(x, gamma, eps)
        y, r, y16 = kernel(fb, x, gamma, eps)
        cases.append({"case": name, "rows": x.shape[0], "n": x.shape[1], "weight": gamma is not None,
                      "elements": x.numel(), "y_bits_differing": bits_differing(y, ry),
                      "rstd_bits_differing": bits_differing(r, rr), "y16_bits_differing": bits_differing(y16, r16)})

    def randn(*shape, scale=1.0):
        return torch.randn(*shape, generator=gen, device="cuda") * scale

    g2048 = randn(2048, scale=0.5) + 1.0
    # The H3 shapes: 1797 tokens x 2048 with weight; 1797 x 32 heads rows of 64 without.
    scales = (1.0, 37.0) if a.quick else (1e-6, 1e-3, 1.0, 37.0, 1e3, 1e6)
    for scale in scales:
        run(f"H3 norm [1797,2048] x{scale}", randn(1797, 2048, scale=scale), g2048)
        run(f"H3 q/k norm [57504,64] x{scale}", randn(57504, 64, scale=scale), None)
    # Millions of rows of 64, and of 2048 with weight.
    run("[1048576,64] normal", randn(1 << 20, 64, scale=3.0), None)
    run("[16384,2048] normal", randn(16384, 2048, scale=3.0), g2048)
    # Other widths and row counts the same kernel serves.
    for n in (4, 8, 60, 128, 516, 1000, 4096, 8192):
        for gamma in (None, randn(n, scale=2.0)):
            run(f"[333,{n}] normal{' weight' if gamma is not None else ''}", randn(333, n), gamma)
    # Special rows.
    tiny = torch.finfo(torch.float32).tiny
    cpu = torch.Generator().manual_seed(7)

    def crandn(n, scale=1.0):
        return torch.randn(n, generator=cpu) * scale

    for n, gamma in ((64, None), (2048, g2048)):
        rows = {
            "all zero": torch.zeros(n),
            "all -0": torch.full((n,), -0.0),
            "subnormal": torch.full((n,), tiny / 8) * torch.sign(crandn(n)),
            "huge (squares overflow)": crandn(n, scale=1e30),
            "one huge among tiny": torch.cat([torch.tensor([3e19]), crandn(n - 1, scale=1e-20)]),
            "one inf": torch.cat([torch.tensor([float("inf")]), crandn(n - 1)]),
            "one -inf": torch.cat([crandn(n - 1), torch.tensor([float("-inf")])]),
            "one nan": torch.cat([crandn(n // 2), torch.tensor([float("nan")]), crandn(n - n // 2 - 1)]),
            "+-65504": torch.tensor([65504.0, -65504.0] * (n // 2)),
            "cast overflows": torch.cat([torch.tensor([1e9]), crandn(n - 1, scale=1e-3)]),
            "eps dominates": crandn(n, scale=1e-4),
            "one nonzero": torch.cat([torch.tensor([2.5]), torch.zeros(n - 1)]),
        }
        x = torch.stack([r.to("cuda") for r in rows.values()]).float()
        run(f"special rows n={n}: " + ", ".join(rows), x.repeat(64, 1), gamma)
    # Weights with zeros, negatives and huge values; FP16 boundaries after the weight.
    g = randn(2048, scale=3.0)
    g[::7] = 0.0
    g[1::11] = -1e4
    g[2::13] = 6e4
    run("weight with zeros, negatives, huge", randn(1797, 2048), g)
    # Another eps.
    run("eps 1e-6 [1797,2048]", randn(1797, 2048, scale=1e-3), g2048, eps=1e-6)

    return report("h3_rmsnorm_f32", cases, reference_kernels={f"n={n} weight={w}": k for (n, w), k in kernels.items()})


if __name__ == "__main__":
    sys.exit(main())
