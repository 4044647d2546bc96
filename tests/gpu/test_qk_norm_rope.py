#!/usr/bin/env python3
"""The qk_norm_rope kernel (kernels/qk_norm_rope.cu, from the fatbin the
Makefile embeds) against the H3 block's own PyTorch code for q and k, bit for
bit, on the GPU: from a to_qkv output [1, S, 32*192] FP16 and FP16 cos/sin
tables [1, S, 1, 48],

    q, k, v = qkv.view(1, S, 32, 192).chunk(3, -1)
    q = apply_rope(F.rms_norm(q.float(), (64,), eps=1e-5).to(fp16), cos, sin)   (k likewise)

with apply_rope the reference model's (scripts/h3_vae.py). Cases: random
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
from fatbin import DEFAULT, Fatbin, bits_differing, ptr, report  # noqa: E402  (beside this script)
import h3_vae  # noqa: E402

HEADS, DIM, EPS = 32, 64, 1e-5


def reference(qkv, cos, sin, eps=EPS):
    s = qkv.shape[1]
    q, k, _ = qkv.view(1, s, HEADS, 3 * DIM).chunk(3, dim=-1)
    q = h3_vae.apply_rope(F.rms_norm(q.float(), (DIM,), eps=eps).to(torch.float16), cos, sin)
    k = h3_vae.apply_rope(F.rms_norm(k.float(), (DIM,), eps=eps).to(torch.float16), cos, sin)
    return q.contiguous(), k.contiguous()


def kernel(fb, qkv, cos, sin, eps=EPS):
    s = qkv.shape[1]
    q = torch.full((1, s, HEADS, DIM), float("nan"), dtype=torch.float16, device="cuda")
    k = torch.full_like(q, float("nan"))
    rows = s * HEADS * 2
    fb.launch("h3_qk_norm_rope_f16", ((rows + 15) // 16,), (256,),
              [ptr(qkv), ctypes.c_longlong(qkv.stride(1)), ctypes.c_int(HEADS), ptr(cos), ptr(sin),
               ctypes.c_longlong(cos.stride(1)), ctypes.c_float(eps), ptr(q), ptr(k), ctypes.c_longlong(s)])
    return q, k


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fatbin", default=DEFAULT)
    a = ap.parse_args()
    fb = Fatbin(a.fatbin)
    gen = torch.Generator(device="cuda").manual_seed(99)
    cases = []

    def run(name, qkv, cos, sin):
        rq, rk = reference(qkv, cos, sin)
        q, k = kernel(fb, qkv, cos, sin)
        cases.append({"case": name, "tokens": qkv.shape[1], "elements": 2 * q.numel(),
                      "q_bits_differing": bits_differing(q, rq), "k_bits_differing": bits_differing(k, rk)})

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

    return report("h3_qk_norm_rope_f16", cases)


if __name__ == "__main__":
    sys.exit(main())
