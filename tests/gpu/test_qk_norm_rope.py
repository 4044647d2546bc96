#!/usr/bin/env python3
"""The qk_norm_rope kernels (kernels/qk_norm_rope.cu, from the fatbin the
Makefile embeds: h3_qk_norm_rope_f16 and its vector-access twin
h3_qk_norm_rope_f16x4, each on every case) against the H3 block's own PyTorch code for q and k, bit for
bit, on the GPU: from a to_qkv output [1, S, 32*192] FP16 and FP16 cos/sin
tables [1, S, 1, 48],

    q, k, v = qkv.view(1, S, 32, 192).chunk(3, -1)
    q = apply_rope(F.rms_norm(q.float(), (64,), eps=1e-5).to(fp16), cos, sin)   (k likewise)

with apply_rope the reference model's (scripts/h3_vae.py); and the four-wide
kernels that write `out` alone (h3_qk_norm_rope_out_f16x4, 16 lanes a row,
and h3_qk_norm_rope_out_f16x8, 8 lanes a row) on every case with only `out`
written. Every output of
PyTorch's 18 launches is compared, as the op has the kernel write them: the
FP32 copy, the norm's output and rstd, the FP16 norm, the rope's products,
neg, both concatenations and the sum; then again with only what
attention reads written and every other output passed as null (as the op
launches it once PyTorch's allocator freed them), which must stay
unwritten. Cases: random
normal at scales 1e-4 .. 1e4, the block's 1797 tokens and millions of rows,
the model's own rope tables, and special rows: all zero, subnormal, one huge
value, +-65504, inf, nan, and cos/sin with 0, -0, +-1 and special values.
Writes a JSON document on stdout; exit status 0 when zero bits differ.

    python3 tests/gpu/test_qk_norm_rope.py [--fatbin build/kernels.fatbin]
"""
import argparse
import ctypes
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
from fatbin import DEFAULT, Fatbin, bits_differing, graph_ms, report  # noqa: E402  (beside this script)
import h3_vae  # noqa: E402

HEADS, DIM, EPS = 32, 64, 1e-5


OUTPUTS = ("f32", "y", "rstd", "n16", "a", "neg", "rot", "b", "sum", "out")


class Side(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in OUTPUTS]


class Params(ctypes.Structure):
    """struct h3_qk_params (kernels/qk_params.h)."""
    _fields_ = [("qkv", ctypes.c_void_p), ("token_stride", ctypes.c_longlong), ("cosv", ctypes.c_void_p),
                ("sinv", ctypes.c_void_p), ("cs_stride", ctypes.c_longlong), ("tokens", ctypes.c_longlong),
                ("heads", ctypes.c_int), ("eps", ctypes.c_float), ("side", Side * 2)]


def one_side(x, cos, sin, eps):
    """Each output of PyTorch's launches for q or k, in the order they run."""
    f32 = x.float()
    y, rstd = torch.ops.aten._fused_rms_norm(f32, [DIM], None, eps)
    n16 = y.to(torch.float16)
    assert bits_differing(F.rms_norm(f32, (DIM,), eps=eps).to(torch.float16), n16) == 0
    xr, xp = n16[..., :48], n16[..., 48:]
    a = xr * cos
    neg = -xr[..., 24:]
    rot = torch.cat([neg, xr[..., :24]], dim=-1)
    b = rot * sin
    total = a + b
    out = torch.cat([total, xp], dim=-1)
    assert bits_differing(out, h3_vae.apply_rope(n16, cos, sin).contiguous()) == 0, "not the model's rope"
    return dict(zip(OUTPUTS, (f32, y, rstd, n16, a, neg, rot, b, total, out)))


def reference(qkv, cos, sin, eps=EPS):
    s = qkv.shape[1]
    q, k, _ = qkv.view(1, s, HEADS, 3 * DIM).chunk(3, dim=-1)
    return one_side(q, cos, sin, eps), one_side(k, cos, sin, eps)


KERNELS = ("h3_qk_norm_rope_f16", "h3_qk_norm_rope_f16x4")
# The kernels that write `out` alone (run only so), and their rows per block.
OUT_KERNELS = {"h3_qk_norm_rope_out_f16x4": 16, "h3_qk_norm_rope_out_f16x8": 32}


def kernel(fb, qkv, cos, sin, eps=EPS, kname=KERNELS[0], timed=False, only=OUTPUTS):
    """Every output, as the kernel `kname` writes them; with `timed`, its GPU time in ms instead.
    Outputs not in `only` are passed as null, as the op leaves out those PyTorch's
    allocator freed: they must stay unwritten (None is returned for them)."""
    s = qkv.shape[1]
    side, got = (Side * 2)(), []
    shapes = {"f32": (DIM, torch.float32), "y": (DIM, torch.float32), "rstd": (None, torch.float32),
              "n16": (DIM, torch.float16), "a": (48, torch.float16), "neg": (24, torch.float16),
              "rot": (48, torch.float16), "b": (48, torch.float16), "sum": (48, torch.float16),
              "out": (DIM, torch.float16)}
    for w in range(2):
        bufs = {}
        for name, (width, dtype) in shapes.items():
            shape = (1, s, HEADS) + ((width,) if width else ())
            bufs[name] = torch.full(shape, float("nan"), dtype=dtype, device="cuda")
            setattr(side[w], name, bufs[name].data_ptr() if name in only else 0)
        got.append(bufs)
    p = Params(qkv.data_ptr(), qkv.stride(1), cos.data_ptr(), sin.data_ptr(), cos.stride(1), s, HEADS, eps, side)
    rows = s * HEADS * 2
    per_block = OUT_KERNELS.get(kname, 16)

    def launch(wait=True):
        fb.launch(kname, ((rows + per_block - 1) // per_block,), (256,), [p], wait=wait)

    if timed:
        return graph_ms(lambda: launch(wait=False))
    launch()
    for bufs in got:
        for name in OUTPUTS:
            if name not in only:
                if not bufs[name].isnan().all():
                    raise AssertionError(f"{name} was passed as null but written")
                bufs[name] = None
    return got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fatbin", default=DEFAULT)
    a = ap.parse_args()
    fb = Fatbin(a.fatbin)
    gen = torch.Generator(device="cuda").manual_seed(99)
    cases = []

    def run(name, qkv, cos, sin):
        ref = reference(qkv, cos, sin)
        # Every output, then only what attention reads (the others left out,
        # as the op launches it once PyTorch's allocator freed them).
        for only in (OUTPUTS, ("out",)):
            for kname in KERNELS + (tuple(OUT_KERNELS) if only == ("out",) else ()):
                got = kernel(fb, qkv, cos, sin, kname=kname, only=only)
                case = {"case": name if only == OUTPUTS else f"{name}, only out written", "kernel": kname,
                        "tokens": qkv.shape[1], "elements": 2 * ref[0]["out"].numel()}
                for w, side in enumerate("qk"):
                    for o in only:
                        case[f"{side}_{o}_bits_differing"] = bits_differing(got[w][o].reshape(ref[w][o].shape),
                                                                            ref[w][o])
                cases.append(case)

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen, device="cuda") * scale).to(torch.float16)

    def tables(s):
        ang = torch.rand(1, s, 1, 24, generator=gen, device="cuda", dtype=torch.float64) * 20
        ang = torch.cat([ang, ang], dim=-1)
        return torch.cos(ang).to(torch.float16).contiguous(), torch.sin(ang).to(torch.float16).contiguous()

    # The model's own tables for a 7x16x16 tile (1797 tokens).
    model = h3_vae.build_model(1, 0, torch.device("cuda"))
    mcos, msin = model.decoder.rope_tables(1, 7, 16, 16, torch.device("cuda"))
    for scale in (1e-4, 1e-2, 1.0, 5.0, 1e2, 1e4):
        run(f"H3 [1797] x{scale}, model tables", randn(1, 1797, HEADS * 3 * DIM, scale=scale), mcos, msin)
    c, s = tables(65536)
    run("[65536] normal, random tables", randn(1, 65536, HEADS * 3 * DIM, scale=3.0), c, s)
    # Special rows: each token's q and k rows take one pattern.
    pats = [torch.zeros(DIM), torch.full((DIM,), 6e-8), torch.full((DIM,), -6e-8),
            torch.cat([torch.tensor([60000.0]), torch.full((DIM - 1,), 1e-3)]),
            torch.tensor([65504.0, -65504.0] * (DIM // 2)), torch.full((DIM,), 65504.0),
            torch.cat([torch.tensor([float("inf")]), torch.ones(DIM - 1)]),
            torch.cat([torch.ones(DIM - 1), torch.tensor([float("-inf")])]),
            torch.cat([torch.ones(DIM // 2), torch.tensor([float("nan")]), torch.ones(DIM // 2 - 1)]),
            torch.cat([torch.tensor([3.0]), torch.zeros(DIM - 1)]), torch.linspace(-4, 4, DIM)]
    n = len(pats) * 8
    qkv = torch.randn(1, n, HEADS, 3 * DIM)
    for i in range(n):
        qkv[0, i, :, :DIM] = pats[i % len(pats)]
        qkv[0, i, :, DIM:2 * DIM] = pats[(i // len(pats)) % len(pats)]
    qkv = qkv.to(torch.float16).reshape(1, n, HEADS * 3 * DIM).to("cuda")
    specials = torch.tensor([0.0, -0.0, 1.0, -1.0, 0.5, 6e-8, float("inf"), float("nan"), 65504.0])
    sc = specials[torch.randint(0, len(specials), (1, n, 1, 48))].to(torch.float16).to("cuda")
    ss = specials[torch.randint(0, len(specials), (1, n, 1, 48))].to(torch.float16).to("cuda")
    run("special rows, model-like tables", qkv, *tables(n))
    run("special rows, special tables", qkv, sc, ss)
    # Random FP16 bit patterns everywhere (nan and inf included).
    bits = torch.randint(-32768, 32768, (1, 4096, HEADS * 3 * DIM), generator=gen, device="cuda", dtype=torch.int32)
    raw = bits.to(torch.int16).view(torch.float16)
    cb = torch.randint(-32768, 32768, (1, 4096, 1, 48), generator=gen, device="cuda", dtype=torch.int32)
    run("random bit patterns", raw, cb.to(torch.int16).view(torch.float16), cb.flip(1).to(torch.int16).view(torch.float16))

    # GPU time of each kernel at the block's 1797 tokens, every output written
    # and `out` alone, 20 launches in a CUDA graph (no launch gaps), medians.
    qkv = randn(1, 1797, HEADS * 3 * DIM)
    times = {(k, o): [] for k in KERNELS for o in ("all", "out")}
    times.update({(k, "out"): [] for k in OUT_KERNELS})
    for _ in range(5):
        for kname, o in times:
            times[(kname, o)].append(kernel(fb, qkv, mcos, msin, kname=kname, timed=True,
                                            only=OUTPUTS if o == "all" else ("out",)))
    timing = {f"{k}_{o}_ms": sorted(v)[2] for (k, o), v in times.items()}
    timing.update(tokens=1797, outputs="all: every output; out: only what attention reads", reps=5,
                  how="20 launches captured in a CUDA graph, replayed 11 times: the median over 20; "
                      "inputs partly in L2 across launches, so faster than in the block")
    print(f"qk_norm_rope kernels at 1797 tokens, median ms: {timing}", file=sys.stderr)
    return report(", ".join(KERNELS), cases, timing=timing)


if __name__ == "__main__":
    sys.exit(main())
