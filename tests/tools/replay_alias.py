#!/usr/bin/env python3
"""Rewrites a replay file (scripts/trace_replay.py's output) so that, in one H3
block, an op's output lies inside one of its inputs' memory at an offset, as
PyTorch's allocator may place it once that memory is freed; the GEMM that
reads the output is rewritten with it, so the signature still matches.

    python3 tests/tools/replay_alias.py WHAT IN OUT

WHAT:
  y16-in-h     in the first block whose residual_norm runs fused, the FP16
               copy of norm2's output (call 33) inside h: residual_norm must
               issue that block's mul and add as they were and the norm and
               its cast as one kernel (`ran with y16_in_h`).
  swiglu-out-in-gate
               in the first block, the product silu(g) * x (call 36) inside
               w1's output: swiglu must fall back there (`aliased`).
  swiglu-out-unaligned
               in the first block, the product silu(g) * x (call 36) two
               bytes off its place (and w2's input with it): swiglu must use
               its one-element kernel there, the eight-wide one elsewhere.
  last-h-in-b16
               in the first block, the sum h' of the block's last residual
               (call 41) inside w2's output b16, a row of b16 off:
               residual_norm must issue that mul and add as they were
               (`aliased`).
"""
import sys

MUL_F32 = "gpu_kernel_implINS0_13BinaryFunctorIfffNS0_15binary_internal10MulFunctorIf"
MUL_F16 = "gpu_kernel_impl_nocastINS0_13BinaryFunctorIN3c104HalfES5_S5_NS0_15binary_internal10MulF"
DATA2, DATA3 = 504, 608  # the data pointers after a 2- and a 3-operand OffsetCalculator closure


def ptr(hexs, off):
    return int.from_bytes(bytes.fromhex(hexs[2 * off:2 * off + 16]), "little")


def set_ptr(hexs, off, v):
    return hexs[:2 * off] + v.to_bytes(8, "little").hex() + hexs[2 * off + 16:]


def move(lines, at, param_off, new, gemm_within):
    """Points the output at line `at` (last token, byte `param_off`) to `new`, and the GEMM after it too."""
    t = lines[at].split(" ")
    old = ptr(t[-1], param_off)
    t[-1] = set_ptr(t[-1], param_off, new)
    lines[at] = " ".join(t)
    for k in range(at + 1, at + 1 + gemm_within):
        if lines[k].startswith("M ") and f"{old:x}" in lines[k]:
            lines[k] = lines[k].replace(f"{old:x}", f"{new:x}")
            return
    sys.exit(f"replay_alias: no GEMM reading {old:x} after line {at + 1}")


def y16_in_h(lines):
    for i, line in enumerate(lines):
        t = line.split(" ")
        if t[0] != "L" or MUL_F32 not in t[1] or i + 6 >= len(lines):
            continue
        add, norm, cast = (lines[i + k].split(" ") for k in (1, 2, 5))
        if "layer_norm" not in norm[1] or "float16_copy" not in cast[1]:
            continue
        p, h = ptr(t[-1], DATA3), ptr(add[-1], 8)
        y = int.from_bytes(bytes.fromhex(norm[-1]), "little")
        if y != p:  # the plainly fused case: y in p's memory
            continue
        move(lines, i + 5, 0, h + 4096, 1)  # inside h, a row and a half of y16 off
        return
    sys.exit("replay_alias: no block with the norm's output in the product's memory")


def move_swiglu_out(lines, where):
    """Moves the first block's product silu(g) * x (call 36) to where(gate, out), and w2's input with it."""
    for i, line in enumerate(lines):
        t = line.split(" ")
        if t[0] != "L" or "silu_kernel" not in t[1] or MUL_F16 not in lines[i + 1]:
            continue
        gate = ptr(t[-1], DATA2 + 8)  # silu's input
        out = ptr(lines[i + 1].split(" ")[-1], DATA3)
        move(lines, i + 1, DATA3, where(gate, out), 4)
        return
    sys.exit("replay_alias: no silu launch followed by its mul")


def swiglu_out_in_gate(lines):
    move_swiglu_out(lines, lambda gate, out: gate + 4096)


def swiglu_out_unaligned(lines):
    move_swiglu_out(lines, lambda gate, out: out + 2)


def last_h_in_b16(lines):
    seen = 0  # the scaled residuals so far: each block's mid-block one, then its last
    for i, line in enumerate(lines):
        t = line.split(" ")
        if t[0] != "L" or MUL_F32 not in t[1] or i + 1 >= len(lines) or "CUDAFunctor_add" not in lines[i + 1]:
            continue
        seen += 1
        if seen < 2:
            continue
        add = lines[i + 1].split(" ")
        b16 = ptr(t[-1], DATA3 + 8)  # the mul's FP16 input
        add[-1] = set_ptr(add[-1], 0, b16 + 4096)
        lines[i + 1] = " ".join(add)
        return
    sys.exit("replay_alias: no block with two scaled residuals")


def main():
    what, src, dst = sys.argv[1:4]
    lines = open(src).read().split("\n")
    {"y16-in-h": y16_in_h, "swiglu-out-in-gate": swiglu_out_in_gate, "swiglu-out-unaligned": swiglu_out_unaligned,
     "last-h-in-b16": last_h_in_b16}[what](lines)
    open(dst, "w").write("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
