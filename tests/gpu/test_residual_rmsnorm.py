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
allocator gave y the memory of h and y16 that of b16.

The staged form (h3_residual_rmsnorm_f32_staged, launched cooperatively with
the grid the shim picks) runs the same cases, and the ones only it may take:
h' in b16's memory (row r of h' over b16 rows 2r and 2r+1), at b16's start
and at offsets, p and y16 over b16 at offsets, with and without the norm.
Writes a JSON document on stdout; exit status 0 when zero bits differ.

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


STAGED = "h3_residual_rmsnorm_f32_staged"


def launch_staged(fb, rows, n, values):
    fit = fb.staged_grid(STAGED, rows, n * 2)
    if fit is None:
        raise RuntimeError(f"{rows} rows of {n} do not fit the staged kernel")
    grid, smem = fit
    fb.launch(STAGED, (grid,), (32, 4), values + [ctypes.c_int(rows)], smem=smem, cooperative=True)


def kernel(fb, b16, scale, h, gamma, eps=EPS, staged=False, omit=()):
    """The kernel as the op launches it, nothing shared; with `staged`, its staged form.
    Outputs named in `omit` (p, y, rstd) are passed as null, as the op leaves out
    those PyTorch's allocator freed: they must stay unwritten (None is returned
    for them after that check)."""
    rows, n = h.shape
    nan = float("nan")
    p, h2, y = (torch.full_like(h, nan) for _ in range(3))
    rstd = torch.full((rows,), nan, device="cuda")
    y16 = torch.full((rows, n), nan, dtype=torch.float16, device="cuda")
    out = {"p": p, "y": y, "rstd": rstd}
    arg = {k: ctypes.c_void_p(0) if k in omit else ptr(v) for k, v in out.items()}
    values = [ptr(b16), ctypes.c_longlong(b16.stride(0)), ptr(scale), ptr(h), arg["p"], ptr(h2), ptr(gamma),
              ctypes.c_float(eps), ctypes.c_int(n), arg["y"], arg["rstd"], ptr(y16)]
    if staged:
        launch_staged(fb, rows, n, values)
    else:
        fb.launch("h3_residual_rmsnorm_f32", (rows,), (32, 4), values)
    torch.cuda.synchronize()
    for k in omit:
        if not out[k].isnan().all():
            raise AssertionError(f"{k} was passed as null but written")
    return tuple(None if k in omit else v for k, v in zip(("p", "h2", "y", "rstd", "y16"), (p, h2, y, rstd, y16)))


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


def kernel_residual_only(fb, b16, scale, h, gamma, eps=EPS, over_h=False, p_out=True):
    """As the op launches it for the block's last residual: p and h' only,
    no weight, no norm output; with `over_h`, h' in h's own memory; without
    `p_out`, p left out (as once PyTorch's allocator freed it)."""
    rows, n = h.shape
    hb = h.clone()
    p = torch.full_like(h, float("nan"))
    h2 = hb if over_h else torch.full_like(h, float("nan"))
    none = ctypes.c_void_p(0)
    fb.launch("h3_residual_rmsnorm_f32", (rows,), (32, 4),
              [ptr(b16), ctypes.c_longlong(b16.stride(0)), ptr(scale), ptr(hb), ptr(p) if p_out else none, ptr(h2),
               none, ctypes.c_float(0.0), ctypes.c_int(n), none, none, none])
    torch.cuda.synchronize()
    if not p_out and not p.isnan().all():
        raise AssertionError("p was passed as null but written")
    return p if p_out else None, h2, None, None, None


def staged(fb, b16, scale, h, gamma, eps=EPS):
    return kernel(fb, b16, scale, h, gamma, eps, staged=True)


def staged_over_b16(fb, b16, scale, h, gamma, eps=EPS, h_at=0, p_at=None, y16_at=None, norm=True):
    """As PyTorch's allocator arranges it in the decode: b16 (dense rows) at
    the start of a freed block, and h' given that block at byte offset h_at
    (its rows then cover b16's rows that other thread blocks read); p and
    y16 optionally in it too, at their byte offsets. Without `norm`, the
    block's last residual (no norm outputs)."""
    rows, n = h.shape
    nan = float("nan")
    span = max([h_at + rows * n * 4] + [a + rows * n * 4 for a in (p_at,) if a is not None] +
               [a + rows * n * 2 for a in (y16_at,) if a is not None])
    block = torch.empty(span // 4 + 4, dtype=torch.float32, device="cuda")
    base = block.data_ptr()
    bb = block.view(torch.float16)[:rows * n].view(rows, n)
    bb.copy_(b16)

    def at(offset, dtype, count):
        return block.view(torch.uint8)[offset:offset + count * dtype.itemsize].view(dtype)

    h2 = at(h_at, torch.float32, rows * n).view(rows, n)
    p = at(p_at, torch.float32, rows * n).view(rows, n) if p_at is not None else torch.full_like(h, nan)
    y16 = (at(y16_at, torch.float16, rows * n).view(rows, n) if y16_at is not None else
           torch.full((rows, n), nan, dtype=torch.float16, device="cuda"))
    assert bb.data_ptr() == base
    y = torch.full_like(h, nan)
    rstd = torch.full((rows,), nan, device="cuda")
    # An output a later one overlaps is not written (the shim leaves it out): here only p can be.
    later = [(h_at, rows * n * 4)] + ([(y16_at, rows * n * 2)] if y16_at is not None and norm else [])
    p_written = p_at is None or not any(p_at < a + size and a < p_at + rows * n * 4 for a, size in later)
    none = ctypes.c_void_p(0)
    launch_staged(fb, rows, n, [ptr(bb), ctypes.c_longlong(n), ptr(scale), ptr(h), ptr(p) if p_written else none,
                                ptr(h2), ptr(gamma) if norm else none, ctypes.c_float(eps if norm else 0.0),
                                ctypes.c_int(n), ptr(y) if norm else none, ptr(rstd) if norm else none,
                                ptr(y16) if norm else none])
    return (p if p_written else None, h2, y if norm else None, rstd if norm else None, y16 if norm else None)


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
    # The staged form: the same arithmetic, every b16 row read before anything is written.
    for s in (1e-3, 1.0, 30.0, 1e3):
        run(f"staged, H3 [1797,2048] b16 x{s}", randn(1797, n, scale=s).half(), scale, randn(1797, n, scale=4.0),
            gamma, launch=staged)
    run("staged, [6000,2048]", randn(6000, n, scale=3).half(), scale, randn(6000, n), gamma, launch=staged)
    run("staged, b16 rows of a wider tensor", wide[:, n:2 * n], scale, randn(1797, n), gamma, launch=staged)
    b = specials[torch.randint(0, len(specials), (512, n), generator=gen, device="cuda")]
    run("staged, special b16 values, huge and tiny h, special scales", b, sc, h, gamma, launch=staged)
    for rows in (1797, 1, 7, 1584, 1585, 4000):
        for h_at in (0, 4096, 2 * 4096 * 100 + 16, rows * n * 2):
            run(f"staged, h' over b16 at byte {h_at}, [{rows},2048]", randn(rows, n, scale=3).half(), scale,
                randn(rows, n), gamma, launch=lambda *a, h_at=h_at: staged_over_b16(*a, h_at=h_at))
    run("staged, y16 over b16 at byte 48 (p there too, so not written), h' after it", randn(1797, n, scale=3).half(),
        scale, randn(1797, n), gamma,
        launch=lambda *a: staged_over_b16(*a, h_at=1797 * n * 2 + (1 << 20), p_at=32, y16_at=48))
    run("staged, p over b16 at byte 16 (written), h' after it", randn(1797, n, scale=3).half(), scale,
        randn(1797, n), gamma, launch=lambda *a: staged_over_b16(*a, h_at=1797 * n * 4 + (1 << 20), p_at=16))
    for s in (1e-3, 1.0, 1e3):
        run(f"staged residual only, h' over b16, H3 [1797,2048] b16 x{s}", randn(1797, n, scale=s).half(), scale,
            randn(1797, n, scale=4.0), gamma, launch=lambda *a: staged_over_b16(*a, h_at=4096, norm=False))
    b = specials[torch.randint(0, len(specials), (1797, n), generator=gen, device="cuda")]
    hh = randn(1797, n) * torch.tensor([1e-30, 1.0, 1e30], device="cuda")[
        torch.randint(0, 3, (1797, 1), generator=gen, device="cuda")]
    run("staged, h' over b16, special values", b, sc, hh, gamma, launch=lambda *a: staged_over_b16(*a, h_at=0))
    # As the op launches them once PyTorch's allocator freed the product and
    # rstd (H3SHIM_SKIP_RELEASED): those two left out, the rest compared.
    left_out = ("p", "rstd")
    for s in (1e-3, 1.0, 1e3):
        for st in (False, True):
            run(f"{'staged, ' if st else ''}p and rstd left out, H3 [1797,2048] b16 x{s}",
                randn(1797, n, scale=s).half(), scale, randn(1797, n, scale=4.0), gamma,
                launch=lambda *a, st=st: kernel(*a, staged=st, omit=left_out))
    b = specials[torch.randint(0, len(specials), (512, n), generator=gen, device="cuda")]
    run("p and rstd left out, special values", b, sc, h, gamma, launch=lambda *a: kernel(*a, omit=left_out))
    for s in (1e-3, 1.0, 1e3):
        run(f"residual only, p left out, H3 [1797,2048] b16 x{s}", randn(1797, n, scale=s).half(), scale,
            randn(1797, n, scale=4.0), gamma, launch=lambda *a: kernel_residual_only(*a, p_out=False))
    fit = fb.staged_grid(STAGED, 1797, n * 2)
    return report("h3_residual_rmsnorm_f32", cases, staged_grid_1797_rows=list(fit) if fit else None)


if __name__ == "__main__":
    sys.exit(main())
