#!/usr/bin/env python3
"""Adds to a replay file (scripts/trace_replay.py's output) the frees that
PyTorch's caching allocator reports while the H3 block runs, as lines
"F ADDRESS BYTES [DEVICE TYPE]" (the type 1, CUDA, when left out), where the block's Python code (scripts/h3_vae.py) drops
the last reference to each tensor:

  - every RMSNorm's rstd, after the norm (F.rms_norm returns only its output);
  - q and k (calls 5-22): the FP32 copy after the norm, the norm's output
    after its cast, the rope's products and neg, cat and sum after the launch
    that reads them, the FP16 norm after the rope's last cat (q and k are
    rebound to the rope's output);
  - silu's output after the mul by the up half;
  - each scaled residual's product after the add.

What attention reads, the residual stream and the GEMMs' inputs are not
freed.  The fake framework passes each F line to c10's report as
libc10_cuda.so would (tests/fake/framework.c).

    python3 tests/tools/replay_frees.py WHEN IN OUT

WHEN:
  after    each free where PyTorch makes it (after the launch that last
           reads the tensor): a fused op leaves those outputs out
  before   each free moved to before the first launch of the group that
           made the tensor, as if the memory had been freed by an earlier
           owner: nothing may be left out
  cpu      each free where PyTorch makes it, but reported for a CPU device
           (as the CPU allocator's reports come): nothing may be left out
  casts    as after, and each GEMM's FP16 weight and bias (autocast's casts
           of the FP32 parameters) freed once the GEMM returns, as they are
           when the parameters do not require grad (nothing caches them):
           weight_cache need not make them.  Without this, the casts' outputs
           stay referenced, as autocast's cast cache and autograd keep them.
  moved    as casts, and the second block's last bias cast (call 37, which
           the allocator put where the freed bias of call 27 was, and the
           signature refers to it so) made at a fresh address (MOVED_TO),
           and its GEMM's bias with it: a new buffer at another address,
           as another program's allocations put it
  swiglu-moved  as after, and in the second block silu's output freed
           right after silu, the mul reading another buffer (MOVED_TO)
           where the signature says silu's output: the reference to the
           freed buffer is let go, so swiglu must see the mul's own pointer
  gemm-moved  as casts, and in the second block the last GEMM's weight
           cast freed right after the cast, the GEMM reading another buffer
           (MOVED_TO) where the signature says the cast's output:
           weight_cache must see the GEMM's own A
  moved-kept  the same move with the frees of after, less those of the
           memory at call 27's bias between that GEMM and call 37 (in the
           recording the norm at call 30 put its rstd there): nothing says
           the buffer is gone, so call 37 is not where a freed buffer was
"""
import sys

DATA2, DATA3 = 504, 608  # the data pointers after a 2- and a 3-operand OffsetCalculator closure
MUL_F32 = "gpu_kernel_implINS0_13BinaryFunctorIfffNS0_15binary_internal10MulFunctorIf"
# q's and k's outputs per row (bytes), and where each launch of the 18 keeps them.
QK_ROW = {"f32": 256, "y": 256, "n16": 128, "a": 96, "neg": 48, "rot": 96, "b": 96, "sum": 96}


def params(line):
    t = line.split(" ")
    n = int(t[10])
    return t, t[11 + n:11 + 2 * n]


def ptr(line, param, off=0):
    h = params(line)[1][param]
    return int.from_bytes(bytes.fromhex(h[2 * off:2 * off + 16]), "little")


def count(line):
    return int.from_bytes(bytes.fromhex(params(line)[1][0][:8]), "little")


def frees(lines):
    """(producer line, free after line, address, bytes) for every free the block's code makes."""
    out = []
    for i, line in enumerate(lines):
        if not line.startswith("L "):
            continue
        name = line.split(" ")[1]
        if "vectorized_layer_norm_kernel" in name:
            out.append((i, i, ptr(line, 6), int(line.split(" ")[2]) * 4))
        elif "silu_kernel" in name:
            out.append((i, i + 1, ptr(line, 1, DATA2), count(line) * 2))
        elif MUL_F32 in name and "CUDAFunctor_add" in lines[i + 1]:
            out.append((i, i + 1, ptr(line, 1, DATA3), count(line) * 4))
    for c, line in enumerate(lines):
        if not line.startswith("C ") or c < 18 or "direct_copy_kernel_cuda" not in lines[c - 18]:
            continue
        g = c - 18
        rows = int(lines[g + 1].split(" ")[2])  # the q norm's grid: one block per row
        for side in (0, 1):
            cp, nm, ca = g + 3 * side, g + 3 * side + 1, g + 3 * side + 2
            r = g + 6 + 6 * side  # mul1, neg, cat1, mul2, add, cat2
            out += [(cp, nm, ptr(lines[cp], 1, DATA2), rows * QK_ROW["f32"]),
                    (nm, ca, ptr(lines[nm], 7), rows * QK_ROW["y"]),
                    (ca, r + 5, ptr(lines[ca], 2), rows * QK_ROW["n16"]),
                    (r, r + 4, ptr(lines[r], 1, DATA3), rows * QK_ROW["a"]),
                    (r + 1, r + 2, ptr(lines[r + 1], 1, DATA2), rows * QK_ROW["neg"]),
                    (r + 2, r + 3, ptr(lines[r + 2], 0), rows * QK_ROW["rot"]),
                    (r + 3, r + 4, ptr(lines[r + 3], 1, DATA3), rows * QK_ROW["b"]),
                    (r + 4, r + 5, ptr(lines[r + 4], 2), rows * QK_ROW["sum"])]
    return out


def cast_frees(lines):
    """(GEMM line, address, bytes) of the weight and bias casts each GEMM reads (M lines: A at
    field 10, the bias at 7), from the float16_copy launch that wrote each (N elements of FP16)."""
    made = {}
    out = []
    for i, line in enumerate(lines):
        if line.startswith("L ") and "float16_copy_kernel_cuda" in line:
            made[ptr(line, 2)] = count(line) * 2
        elif line.startswith("M "):
            t = line.split(" ")
            for field in (10, 7):
                addr = int(t[field], 16)
                if addr in made:
                    out.append((i, addr, made[addr]))
    return out


MOVED_TO = 0x7e0000000000


def move_last_bias(lines, block=1):
    """Moves the bias cast of GEMM 39 of block `block` (0-based) and that GEMM's bias to MOVED_TO;
    returns the lines of GEMM 27 and of the cast, and the address the cast had."""
    gemms = [i for i, line in enumerate(lines) if line.startswith("M ")]
    gemm = gemms[4 * block + 3]
    t = lines[gemm].split(" ")
    old = int(t[7], 16)
    cast = next(i for i in range(gemm - 1, gemms[4 * block + 2], -1)
                if "float16_copy_kernel_cuda" in lines[i] and ptr(lines[i], 2) == old)
    t[7] = f"{MOVED_TO:x}"
    lines[gemm] = " ".join(t)
    c = lines[cast].split(" ")
    n = int(c[10])
    h = c[11 + n + 2]
    c[11 + n + 2] = MOVED_TO.to_bytes(8, "little").hex() + h[16:]
    lines[cast] = " ".join(c)
    return gemms[4 * block + 1], cast, old


def set_ptr(lines, i, param, off, value):
    t = lines[i].split(" ")
    n = int(t[10])
    h = t[11 + n + param]
    t[11 + n + param] = h[:2 * off] + value.to_bytes(8, "little").hex() + h[2 * off + 16:]
    lines[i] = " ".join(t)


def move_mul_input(lines, block=1):
    """Moves the mul after block `block`'s silu off silu's output; returns the silu's line and output."""
    silu = [i for i, line in enumerate(lines) if line.startswith("L ") and "silu_kernel" in line][block]
    set_ptr(lines, silu + 1, 1, DATA3 + 8, MOVED_TO)
    return silu, ptr(lines[silu], 1, DATA2)


def move_gemm_weight(lines, block=1):
    """Moves GEMM 39 of block `block` off its weight cast's output; returns the cast's line and output."""
    gemm = [i for i, line in enumerate(lines) if line.startswith("M ")][4 * block + 3]
    t = lines[gemm].split(" ")
    old = int(t[10], 16)
    cast = next(i for i in range(gemm - 1, 0, -1)
                if "float16_copy_kernel_cuda" in lines[i] and ptr(lines[i], 2) == old)
    t[10] = f"{MOVED_TO:x}"
    lines[gemm] = " ".join(t)
    return cast, old


def group_start(lines, i):
    while i > 0 and lines[i - 1].startswith("L "):
        i -= 1
    return i


def main():
    when, src, dst = sys.argv[1:4]
    if when not in ("after", "before", "cpu", "casts", "moved", "moved-kept", "swiglu-moved", "gemm-moved"):
        sys.exit(__doc__)
    lines = [x for x in open(src).read().split("\n") if x]
    kept = early = None
    if when.startswith("moved"):
        kept = move_last_bias(lines)
    elif when == "swiglu-moved":
        early = move_mul_input(lines)
    elif when == "gemm-moved":
        early = move_gemm_weight(lines)
    casts = cast_frees(lines) if when in ("casts", "moved", "gemm-moved") else []
    if when == "gemm-moved":  # the moved GEMM reads no cast: that cast's output freed right after it
        casts.append((early[0], early[1], count(lines[early[0]]) * 2))
    before, after = {}, {}
    for made, freed, addr, size in frees(lines):
        if when == "swiglu-moved" and (made, addr) == early:
            freed = made  # silu's output freed before the mul
        if when == "moved-kept" and kept[0] < freed < kept[1] and addr <= kept[2] < addr + size:
            continue
        if when in ("after", "casts", "moved", "moved-kept", "swiglu-moved", "gemm-moved"):
            after.setdefault(freed, []).append(f"F {addr:#x} {size}")
        elif when == "cpu":
            after.setdefault(freed, []).append(f"F {addr:#x} {size} 0")
        else:
            before.setdefault(group_start(lines, made), []).append(f"F {addr:#x} {size}")
    for gemm, addr, size in casts:
        after.setdefault(gemm, []).append(f"F {addr:#x} {size}")
    out = []
    for i, line in enumerate(lines):
        out += before.get(i, []) + [line] + after.get(i, [])
    open(dst, "w").write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
