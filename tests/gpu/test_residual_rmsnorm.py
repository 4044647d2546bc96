#!/usr/bin/env python3
"""The residual_rmsnorm kernel (kernels/rmsnorm.cu) against the H3 block's own
PyTorch code for the scaled residual and the RMSNorm after it, bit for bit:

    p = b16 * scale                  (FP16 GEMM output times the FP32 scale: FP32)
    h2 = h + p
    y, rstd = aten._fused_rms_norm(h2, [n], gamma, eps);  y16 = y.half()

All five outputs (p, h2, y, rstd, y16) are compared as raw bits. Cases: the
block's [1797, 2048] at several scales, millions of rows, a strided b16 (rows
of a wider tensor), and special values: inf, nan, +-65504 and subnormal FP16
products, huge and tiny h, rows where h cancels p exactly, scales with zeros
and negatives; and in place, as the op launches it where PyTorch's
allocator gave y the memory of h and y16 that of b16. Writes a JSON document on stdout; exit status 0 when zero bits
differ.

    python3 tests/gpu/test_residual_rmsnorm.py [--fatbin build/kernels.fatbin]
"""
import argparse
import ctypes
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fatbin import DEFAULT, Fatbin, bits_differing, ptr, report  # noqa: E402  (beside this script)

EPS = 1e-5


def reference(b16, scale, h, gamma, eps=EPS):
    p = b16 * scale
    h2 = h + p
    y, rstd = torch.ops.aten._fused_rms_norm(h2, [h.shape[1]], gamma, eps)
    return p, h2, y, rstd.reshape(-1), y.to(torch.float16)


def kernel(fb, b16, scale, h, gamma, eps=EPS):
    rows, n = h.shape
    nan = float("nan")
    p, h2, y = (torch.full_like(h, nan) for _ in range(3))
    rstd = torch.full((rows,), nan, device="cuda")
    y16 = torch.full((rows, n), nan, dtype=torch.float16, device="cuda")
    fb.launch("h3_residual_rmsnorm_f32", (rows,), (32, 4),
              [ptr(b16), ctypes.c_longlong(b16.stride(0)), ptr(scale), ptr(h), ptr(p), ptr(h2), ptr(gamma),
               ctypes.c_float(eps), ctypes.c_int(n), ptr(y), ptr(rstd), ptr(y16)])
    return p, h2, y, rstd, y16


def kernel_in_place(fb, b16, scale, h, gamma, eps=EPS):
    """As PyTorch's allocator may arrange it: y in h's memory, y16 in b16's
    (both freed before y and y16 were allocated), p not written (its memory
    given to a later output). Returns None for p."""
    rows, n = h.shape
    nan = float("nan")
    hb, bb = h.clone(), b16.clone()
    h2 = torch.full_like(h, nan)
    rstd = torch.full((rows,), nan, device="cuda")
    fb.launch("h3_residual_rmsnorm_f32", (rows,), (32, 4),
              [ptr(bb), ctypes.c_longlong(bb.stride(0)), ptr(scale), ptr(hb), ctypes.c_void_p(0), ptr(h2),
               ptr(gamma), ctypes.c_float(eps), ctypes.c_int(n), ptr(hb), ptr(rstd), ptr(bb)])
    return None, h2, hb, rstd, bb


def kernel_residual_only(fb, b16, scale, h, gamma, eps=EPS, over_h=False):
    """As the op launches it for the block's last residual: p and h' only,
    no weight, no norm output; with `over_h`, h' in h's own memory."""
    rows, n = h.shape
    hb = h.clone()
    p = torch.full_like(h, float("nan"))
    h2 = hb if over_h else torch.full_like(h, float("nan"))
    none = ctypes.c_void_p(0)
    fb.launch("h3_residual_rmsnorm_f32", (rows,), (32, 4),
              [ptr(b16), ctypes.c_longlong(b16.stride(0)), ptr(scale), ptr(hb), ptr(p), ptr(h2), none,
               ctypes.c_float(0.0), ctypes.c_int(n), none, none, none])
    return p, h2, None, None, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fatbin", default=DEFAULT)
    a = ap.parse_args()
    fb = Fatbin(a.fatbin)
    gen = torch.Generator(device="cuda").manual_seed(31)
    cases = []
    names = ("p", "h2", "y", "rstd", "y16")

    def run(name, b16, scale, h, gamma, launch=kernel):
        ref = reference(b16, scale, h, gamma)
        got = launch(fb, b16, scale, h, gamma)
        case = {"case": name, "rows": h.shape[0], "n": h.shape[1], "elements": h.numel()}
        case.update({f"{k}_bits_differing": bits_differing(g, r) for k, g, r in zip(names, got, ref) if g is not None})
        cases.append(case)

    def randn(*shape, scale=1.0):
        return torch.randn(*shape, generator=gen, device="cuda") * scale

    n = 2048
    gamma = randn(n, scale=0.5) + 1.0
    scale = randn(n, scale=0.1)
    for s in (1e-3, 1.0, 30.0, 1e3):
        run(f"H3 [1797,2048] b16 x{s}", randn(1797, n, scale=s).half(), scale, randn(1797, n, scale=4.0), gamma)
    run("[16384,2048]", randn(16384, n, scale=3).half(), scale, randn(16384, n), gamma)
    run("in place: y over h, y16 over b16, p not written [16384,2048]", randn(16384, n, scale=3).half(), scale,
        randn(16384, n), gamma, launch=kernel_in_place)
    wide = randn(1797, 3 * n).half()
    run("b16 rows of a wider tensor", wide[:, n:2 * n], scale, randn(1797, n), gamma)
    # Special values.
    specials = torch.tensor([0.0, -0.0, 6e-8, -6e-8, 65504.0, -65504.0, float("inf"), float("-inf"),
                             float("nan"), 1.0, -3.0, 1e-3], device="cuda").half()
    b = specials[torch.randint(0, len(specials), (512, n), generator=gen, device="cuda")]
    h = randn(512, n) * torch.tensor([1e-30, 1.0, 1e30], device="cuda")[torch.randint(0, 3, (512, 1), generator=gen,
                                                                                          device="cuda")]
    sc = scale.clone()
    sc[::5] = 0.0
    sc[1::7] = -sc[1::7]
    sc[2::11] = 1e20
    run("special b16 values, huge and tiny h, special scales", b, sc, h, gamma)
    # Rows where h cancels p exactly: h2 is all zero.
    b = randn(64, n).half()
    ones = torch.ones(n, device="cuda")
    run("h cancels p (zero rows)", b, ones, -(b.float()), gamma)
    # Weight with zeros and huge values.
    g = randn(n, scale=3.0)
    g[::9] = 0.0
    g[3::13] = 6e4
    run("weight with zeros and huge values", randn(1797, n).half(), scale, randn(1797, n), g)
    # The block's last residual (no norm after it), as the op launches it.
    for s in (1e-3, 1.0, 1e3):
        run(f"residual only, H3 [1797,2048] b16 x{s}", randn(1797, n, scale=s).half(), scale,
            randn(1797, n, scale=4.0), gamma, launch=kernel_residual_only)
    run("residual only, h' over h [16384,2048]", randn(16384, n, scale=3).half(), scale, randn(16384, n), gamma,
        launch=lambda *a: kernel_residual_only(*a, over_h=True))
    b = specials[torch.randint(0, len(specials), (512, n), generator=gen, device="cuda")]
    run("residual only, special b16 values, huge and tiny h, special scales", b, sc, h, gamma,
        launch=kernel_residual_only)
    return report("h3_residual_rmsnorm_f32", cases)


if __name__ == "__main__":
    sys.exit(main())
