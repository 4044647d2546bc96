#!/usr/bin/env python3
"""Verify mode's comparison kernels (kernels/verify.cu, from the fatbin the
Makefile embeds) on the GPU, launched as shim/verify.c launches them: for each
case a buffer and its copy with differences put in (none; one flipped bit at
the first byte, the last byte, random places; an FP16 NaN of another payload;
-0 against +0; many differences, of which the first must be found), at sizes
and offsets that take both the 16-byte and the byte-wise path. h3_verify_diff
must find the first differing byte exactly and h3_verify_note must copy it,
the element around it from both buffers, to pinned host memory, and set the
device word back to all ones. A case "differs" when the result is not exactly
what the case put in. Writes a JSON document on stdout; exit status 0 when no
case differs.

    python3 tests/gpu/test_verify.py [--fatbin build/kernels.fatbin]
"""
import argparse
import ctypes
import os
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fatbin import DEFAULT, Fatbin, report  # noqa: E402  (beside this script)

OUTPUTS = 24  # H3_VERIFY_OUTPUTS (kernels/verify_params.h)
NONE = (1 << 64) - 1


class Record(ctypes.Structure):
    _fields_ = [("first", ctypes.c_ulonglong), ("ref", ctypes.c_ubyte * 8), ("got", ctypes.c_ubyte * 8)]


class Batch(ctypes.Structure):
    _fields_ = [("ref", ctypes.c_void_p * OUTPUTS), ("got", ctypes.c_void_p * OUTPUTS),
                ("bytes", ctypes.c_ulonglong * OUTPUTS), ("elem", ctypes.c_uint * OUTPUTS), ("n", ctypes.c_uint), ("first", ctypes.c_void_p),
                ("out", ctypes.c_void_p)]


def run(fb, pairs, first, records):
    """Compares each (ref, got, elem) of `pairs` (uint8 CUDA tensors); the records read back."""
    batch = Batch()
    for k, (ref, got, elem) in enumerate(pairs):
        n = ctypes.c_ulonglong(ref.numel())
        w = ctypes.c_void_p(first.data_ptr() + 8 * k)
        blocks = max(1, min((ref.numel() // 16 + 255) // 256, 132 * 8))
        fb.launch("h3_verify_diff", (blocks,), (256,),
                  [ctypes.c_void_p(ref.data_ptr()), ctypes.c_void_p(got.data_ptr()), n, w], wait=False)
        batch.ref[k], batch.got[k], batch.elem[k] = ref.data_ptr(), got.data_ptr(), elem
        batch.bytes[k] = ref.numel()
    batch.n, batch.first, batch.out = len(pairs), first.data_ptr(), records.data_ptr()
    fb.launch("h3_verify_note", (1,), (32,), [batch])
    return [Record.from_address(records.data_ptr() + k * ctypes.sizeof(Record)) for k in range(len(pairs))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fatbin", default=DEFAULT)
    a = ap.parse_args()
    fb = Fatbin(a.fatbin)
    rng = random.Random(7)
    torch.manual_seed(7)
    first = torch.full((OUTPUTS,), -1, dtype=torch.int64, device="cuda")  # all ones, as verify.c sets it
    records = torch.zeros(OUTPUTS * ctypes.sizeof(Record), dtype=torch.uint8).pin_memory()
    cases = []
    sizes = [2, 14, 16, 17, 4096, 4098, 1 << 20, 29442048]  # 29442048: the H3 block's swiglu product
    for size in sizes:
        for offset in (0, 2, 6):  # 16-byte aligned, and not (the byte-wise path)
            for kind in ("equal", "first", "last", "random", "nan_payload", "signed_zero", "many"):
                base = torch.randint(0, 256, (size + offset + 16,), dtype=torch.uint8, device="cuda")
                ref = base[offset:offset + size]
                got = ref.clone() if offset == 0 else torch.empty_like(base)[offset:offset + size]
                got.copy_(ref)
                want = NONE
                if kind == "first":
                    want = 0
                elif kind == "last":
                    want = size - 1
                elif kind == "random":
                    want = rng.randrange(size)
                elif kind == "nan_payload" and size >= 2:
                    want = 2 * rng.randrange(size // 2)
                    ref[want:want + 2] = torch.tensor([0x00, 0x7E], dtype=torch.uint8)  # FP16 NaN 0x7e00
                    got[want:want + 2] = torch.tensor([0x01, 0x7E], dtype=torch.uint8)  # 0x7e01
                elif kind == "signed_zero" and size >= 2:
                    want = 2 * rng.randrange(size // 2)
                    ref[want:want + 2] = torch.tensor([0x00, 0x00], dtype=torch.uint8)
                    got[want:want + 2] = torch.tensor([0x00, 0x80], dtype=torch.uint8)
                    want += 1  # the sign's byte is the first that differs
                elif kind == "many":
                    places = sorted(rng.sample(range(size), min(size, 50)))
                    for p in places:
                        got[p] ^= 1 << rng.randrange(8)
                    want = places[0]
                if kind in ("first", "last", "random"):
                    got[want] ^= 1 << rng.randrange(8)
                r = run(fb, [(ref, got, 2)], first, records)[0]
                ok = r.first == want
                if ok and want != NONE:  # the element around it, no byte past the buffer (then 0)
                    at = want // 2 * 2
                    e = min(2, size - at)
                    ok = (bytes(r.ref[:2]) == bytes(ref[at:at + e].cpu().tolist()) + bytes(2 - e)
                          and bytes(r.got[:2]) == bytes(got[at:at + e].cpu().tolist()) + bytes(2 - e))
                ok &= int(first[0].item()) == -1  # set back for the next run
                cases.append({"size": size, "offset": offset, "kind": kind, "elements": size,
                              "want_first": None if want == NONE else want,
                              "found_first": None if r.first == NONE else r.first,
                              "result_bits_differing": 0 if ok else 1})  # 1: a wrong result
    # Twenty outputs in one batch, as qk_norm_rope's run has: each found on its own.
    pairs, wants = [], []
    for k in range(20):
        ref = torch.randint(0, 256, (4096 * (k + 1),), dtype=torch.uint8, device="cuda")
        got = ref.clone()
        want = NONE if k % 3 == 0 else rng.randrange(ref.numel())
        if want != NONE:
            got[want] ^= 0x10
        pairs.append((ref, got, 4))
        wants.append(want)
    rs = run(fb, pairs, first, records)
    bad = sum(r.first != w for r, w in zip(rs, wants))
    cases.append({"size": "20 outputs", "kind": "batch", "elements": sum(p[0].numel() for p in pairs),
                  "result_bits_differing": bad})
    return report("h3_verify_diff+h3_verify_note", cases)


if __name__ == "__main__":
    sys.exit(main())
