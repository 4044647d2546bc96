#!/usr/bin/env python3
"""The swiglu kernels (kernels/swiglu.cu, from the fatbin the Makefile embeds)
against PyTorch's own F.silu(g) * x on FP16, bit for bit, on the GPU: the
one-element h3_swiglu_f16 on every case, and the eight-wide h3_swiglu_f16x8 on
every case whose width is a multiple of 8 (the op's condition):

- every FP16 bit pattern as the gate (0, -0, subnormals, inf, nan, +-65504
  included), each with up values drawn from every bit pattern too;
- random normal inputs at several scales (1e-4 .. 1e4), many shapes, odd
  widths, one row, and the H3 block's [1797, 2*8192] (millions of elements);
- adversarial magnitudes: gates where exp(-g) over- and underflows, up values
  near 65504 so that the product overflows.

Both outputs (the silu output and the product) are compared as raw bits;
then the product alone, with the silu output passed as null (as the op
launches it once PyTorch's allocator freed it), which must stay unwritten.
Writes a JSON document on stdout; exit status 0 when zero bits differ.

    python3 tests/gpu/test_swiglu.py [--fatbin build/kernels.fatbin]
"""
import argparse
import ctypes
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fatbin import DEFAULT, Fatbin, bits_differing, graph_ms, ptr, report  # noqa: E402  (beside this script)


class Kernel:
    """h3_swiglu_f16 or h3_swiglu_f16x8 from the fatbin, launched as the shim launches them."""

    def __init__(self, path):
        self.fatbin = Fatbin(path)

    def __call__(self, d, width, wide=False, timed=False, silu=True):
        """silu_out, out for d = [rows, 2*width] FP16 (gate | up); with `timed`,
        the kernel's GPU time in ms instead (launches replayed from a CUDA graph).
        Without `silu`, silu_out is passed as null and None is returned for it."""
        rows = d.shape[0]
        silu_out = torch.full((rows, width), float("nan"), dtype=torch.float16, device="cuda")
        out = torch.full((rows, width), float("nan"), dtype=torch.float16, device="cuda")
        vals = [ctypes.c_uint64(d.data_ptr()), ctypes.c_uint64(d.data_ptr() + 2 * width),
                ctypes.c_longlong(d.stride(0)), ptr(silu_out) if silu else ctypes.c_void_p(0), ptr(out),
                ctypes.c_longlong(rows),
                ctypes.c_longlong(width)]
        n = rows * width // 8 if wide else rows * width
        blocks = min((n + 255) // 256, 132 * (64 if wide else 32))

        def launch(wait=True):
            self.fatbin.launch("h3_swiglu_f16x8" if wide else "h3_swiglu_f16", (blocks,), (256,), vals, wait=wait)

        if timed:
            return graph_ms(lambda: launch(wait=False))
        launch()
        if not silu and not silu_out.isnan().all():
            raise AssertionError("silu_out was passed as null but written")
        return (silu_out if silu else None), out


def reference(d, width):
    g, x = d.chunk(2, dim=-1)
    s = F.silu(g)
    return s, s * x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fatbin", default=DEFAULT)
    a = ap.parse_args()
    k = Kernel(a.fatbin)
    gen = torch.Generator(device="cuda").manual_seed(1234)
    cases = []

    def run(name, d, width):
        s_ref, o_ref = reference(d, width)
        for wide in (False, True):
            if wide and (width % 8 or d.stride(0) % 8 or d.data_ptr() % 16):
                continue
            for silu in (True, False):
                s, o = k(d, width, wide, silu=silu)
                case = {"case": name if silu else f"{name}, silu output left out",
                        "kernel": "h3_swiglu_f16x8" if wide else "h3_swiglu_f16",
                        "shape": list(d.shape), "elements": d.shape[0] * width,
                        "out_bits_differing": bits_differing(o, o_ref)}
                if silu:
                    case["silu_bits_differing"] = bits_differing(s, s_ref)
                cases.append(case)

    every = torch.arange(-32768, 32768, dtype=torch.int32, device="cuda").to(torch.int16).view(torch.float16)
    # Every gate bit pattern, with up = every bit pattern in 8 rotations.
    for shift in range(0, 65536, 8192):
        d = torch.cat([every.view(256, 256), torch.roll(every, shift).view(256, 256)], dim=1)
        run(f"every gate pattern, up rotated by {shift}", d.contiguous(), 256)
    # Random normal at several scales and shapes (odd widths, one row, the H3 block).
    for scale in (1e-4, 1e-2, 1.0, 8.0, 1e2, 1e4):
        for rows, width in ((1, 1), (1, 8192), (3, 7), (17, 1000), (257, 333), (1797, 8192)):
            d = (torch.randn(rows, 2 * width, generator=gen, device="cuda") * scale).to(torch.float16)
            run(f"normal x{scale} [{rows},{2 * width}]", d, width)
    # Adversarial: exp(-g) overflowing / underflowing, products overflowing.
    g = torch.cat([torch.linspace(-65504, -8, 4096, device="cuda"), torch.linspace(-20, 20, 8192, device="cuda"),
                   torch.linspace(8, 65504, 4096, device="cuda")])
    x = torch.cat([torch.full((8192,), 65504.0, device="cuda"), torch.full((8192,), -65504.0, device="cuda")])
    d = torch.stack([g, x[torch.randperm(x.numel(), generator=gen, device="cuda")]], dim=0).to(torch.float16)
    d = d.view(2, 128, 128).permute(1, 0, 2).reshape(128, 256).contiguous()
    run("adversarial magnitudes", d, 128)
    # A strided input, as in the block: the gate and up halves of one GEMM output.
    big = (torch.randn(1797, 2 * 8192, generator=gen, device="cuda") * 4).to(torch.float16)
    run("H3 block layout [1797, 16384]", big, 8192)
    # GPU time of the two kernels on the block's layout, alternating, medians.
    times = {(w, s): [] for w in (False, True) for s in (True, False)}
    for _ in range(5):
        for wide, silu in times:
            times[(wide, silu)].append(k(big, 8192, wide, timed=True, silu=silu))
    timing = {f"h3_swiglu_f16{'x8' if w else ''}{'' if s else '_no_silu'}_ms": sorted(v)[2]
              for (w, s), v in times.items()}
    timing.update({"layout": "[1797, 16384] -> 2 x [1797, 8192] (no_silu: the product alone)",
                   "reps": "5 alternating, each the median of 11 replays of 20 launches in a CUDA graph"})
    print(f"swiglu kernels on the block's layout, median ms: {timing}", file=sys.stderr)
    return report("h3_swiglu_f16, h3_swiglu_f16x8", cases, timing=timing)


if __name__ == "__main__":
    sys.exit(main())
