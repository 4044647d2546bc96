#!/usr/bin/env python3
"""Makes a replay file (scripts/trace_replay.py's output) of the H3 block
with a mutation in every block, as a user's variant of the block would have:

  middle   the 10th call from each norm that feeds a GEMM through three
           casts (norm1: inside the q and k norms and RoPE; norm2: before the
           second residual) made twice in a row: another kernel in the middle
           of what the ops take, twice in every block
  padding  the six padding bytes after the two isContiguous flags of every
           FP16 CatArrayBatchedCopy (bytes 1282-1287 of its metadata, which
           the kernel cannot read) zero in even blocks, in odd blocks the
           upper bytes of an address in the cat's output buffer, as stale
           stack bytes may be: the word holding the flags is then 0 in some
           instances and near a device address in others
  reader   a launch after the rope in the same group that reads k's FP16
           norm (a copy of call 10 into a buffer of its own, reading call
           10's output), and that norm's free moved from after call 22 to
           after it: an output of the q/k op freed while a held launch that
           reads it waits to be issued
  cast-reader  the w2 weight's cast (call 38) reading silu's output instead
           of its FP32 weight (a word of its parameters that is no pointer
           slot), and silu's output freed after that cast instead of after
           the mul: a launch another op claims that reads an output of
           swiglu's through a word the matcher does not compare
  early    the bias cast of to_qkv (call 1) reading a buffer of its own
           (MOVED_TO) instead of its FP32 bias, that buffer freed after the
           weight's cast (call 2), and the input's cast (call 3) writing
           where it was, its GEMM reading it there: the allocator gave a
           buffer that a launch between norm_cast's two calls reads to the
           output norm_cast writes ahead of that launch
  unique   3000 launches of the block's first kernel, each with a grid of
           its own: a stream in which no run of calls ever repeats
  kernels  another model's forward of 96 kernels of its own (the block's
           first launch renamed K0-K95), in turn, 100 times: more kernels
           than a table of 64 entries indexed by the handle alone holds
  gapped   another model's layers as a transformers Llama makes them in
           FP16: the first 30 launches of IN (a replay whose kernels are
           renamed) in runs of 6, a GEMM through cuBLAS's own entry point
           (a G line, which the learner cannot keep) after each run, the
           layer 100 times: calls that repeat, never in a run that could
           hold three instances of a group
  shared   another model's layers with a call of the H3 block in them, then
           the block: the gapped layer made from IN's launches renamed, with
           IN's first weight cast (its own kernel and grid) after the
           layer's first GEMM, 20 times, then IN (the block, learned)
  islands  another model's iterations as a Llama's forward makes them, then
           the block: 8 calls outside the layers (the block's own first
           eight: its norm, three casts, its first cuBLASLt GEMM and what
           follows, as the embedding and head of a model whose calls are
           the block's), then 4 of the gapped layers made from IN's
           launches renamed, 30 times, then IN (the block, learned)
  islands-adjacent  the same iterations, then IN from its first block on:
           the block right after the layers, its first eight calls after
           the island's two calls before
  islands-alternating  4 of those iterations, then IN's first three blocks,
           8 times: a block stack after the layers at every request
  islands-preamble  the islands' iterations with the calls outside the
           layers another model's (the block's first eight renamed), then
           two of them and two stacks of three blocks, then IN from its
           first block: two calls that begin the island right after the
           layers, before a block stack
  islands-long  the iterations with the block's first 50 calls outside the
           layers (more than a block), then two stacks of three blocks and
           IN from its first block
  islands-whole  the alternating stream with the layers beginning with the
           block's ninth and tenth calls: the island is the block's first
           ten calls, whole, and the stack after the layers goes on past it
  islands-suffix  the alternating stream with the calls outside the layers
           two of another model's, then the block's first eight, and a
           stack of three blocks and 50 calls after the layers after those
           two: the island's calls passed by end with the block's first
           eight, but do not begin with them, and the stack holds three
           instances after them
  islands-shared  two islands between the layers in turn, the block's first
           eight calls and another model's eight with the block's first
           cuBLASLt GEMM among them, 30 times, then IN: one GEMM in two
           islands, at the same place
  islands-shared2  the same with the block's first GEMM and the call after
           it in both islands
  islands-dup  an island of 14 calls that holds the block's first GEMM and
           the call after it twice (the block's first six calls, two of
           another model's, the GEMM and its next call again, two more),
           then 4 of the gapped layers, 30 times, then IN
  islands-crowded  an island of 20 calls that holds one cuBLASLt GEMM (the
           block's first, another model's) at 9 places, each before a call
           of its own but the last two's, then 4 of the gapped layers, 30
           times, then IN: more places than a quiet thread follows
  rewake   another model's layers with the block's first kernel at another
           grid in them, 30 times, a cuBLASLt GEMM of a new shape, a third
           model's layers (none of the block's kernels) 60 times, then IN
           from its first block: the block's first launch comes to a thread
           quiet again after a wake
  rewake-follow  the same layers with the block's first kernel in them, 30
           times, each after another model's eight calls outside the
           layers (the block's first eight renamed); then those calls once
           with their last two differing (a followed island that breaks,
           waking the thread), a third model's layers 60 times, then IN
           from its first block
  variant  a variant of the block that no signature can hold, then the
           block: IN's first three blocks with each GEMM through cuBLAS's
           own entry point (a G line) and every launch's grid but the
           weight casts' one larger (another token count), then IN
  variant-long  the variant's three blocks 20 times, then IN: a model whose
           kernels are the block's, refused, for long enough that the
           thread goes quiet (its launches idle) before the block comes
  variant-many  the variant's three blocks 20 times, without IN
  lengths  another model's layers at 70 prompt lengths, then the block:
           the gapped layer made from IN's launches renamed, each length's
           grids larger by one, 4 layers a length, then IN
  lt-lengths  another model's layers with cuBLASLt GEMMs at 70 prompt
           lengths, then the block: IN's first block renamed as the foreign
           replay renames it (its kernels, its GEMMs' rows), each length's
           grids and rows larger by one, 4 layers a length, then IN
  loose    the two padding bytes of the nan_to_num functor (bytes 6-7 of
           its closure, after its three FP16 values), which the kernel
           cannot read and no op's range spans, 0 in the first three blocks
           and the block's index in every later one, as a stack left-over
           that stays put while the block is learned and moves later
  streams  another model's layer on two streams: the first 20 launches of
           IN, the first of them on stream 9000, the layer 10 times (a
           group that repeats and cannot be learned)

    python3 tests/tools/replay_mutate.py WHAT IN OUT
"""
import sys


def calls(lines):
    """The indices of the lines that are calls (the frees, F lines, are not)."""
    return [i for i, line in enumerate(lines) if not line.startswith("F ")]


def block_starts(lines, at):
    """The positions in `at` where a block begins: norm1 (a layer_norm launch), the three casts, to_qkv's GEMM."""
    return [k for k in range(len(at) - 4)
            if lines[at[k]].startswith("L ") and "vectorized_layer_norm_kernel" in lines[at[k]].split(" ")[1]
            and all("float16_copy_kernel_cuda" in lines[at[k + j]] for j in (1, 2, 3))
            and lines[at[k + 4]].startswith("M ")]


def blocks_in(lines):
    """The call lines and the blocks' starts among them (block_starts); none found is said on stderr."""
    at = calls(lines)
    starts = block_starts(lines, at)
    if not starts:
        sys.stderr.write("replay_mutate.py: no block found\n")
    return at, starts


MODES = ("middle", "padding", "loose", "reader", "cast-reader", "early", "unique", "kernels", "gapped", "shared", "islands", "islands-adjacent", "islands-alternating",
         "islands-preamble", "islands-long", "islands-whole", "islands-suffix", "islands-shared", "islands-shared2", "islands-dup", "islands-crowded", "rewake", "rewake-follow", "variant", "variant-long", "variant-many", "lengths", "lt-lengths", "streams")


def foreign(line, grow=0):
    """A block line as another model's (the foreign replay's renaming): a launch's kernel renamed, a GEMM's rows
    8 more; every launch's grid and GEMM's rows `grow` more (another prompt length)."""
    f = line.split(" ")
    if f[0] == "L":
        f[1], f[2] = "X" + f[1], str(int(f[2]) + grow)
    elif f[0] == "M":
        f[37] = str(int(f[37]) + 8 + grow)
    return " ".join(f)


def gapped_layer(launches):
    """Launches in runs of 6, a GEMM through cuBLAS's own entry point (a G line) after each run."""
    return [x for k in range(0, len(launches), 6) for x in launches[k:k + 6] + ["G"]]


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in MODES:
        sys.stderr.write(__doc__)
        return 2
    lines = open(sys.argv[2]).read().splitlines()
    if sys.argv[1] == "unique":
        first = next(line for line in lines if line.startswith("L ")).split(" ")
        out = [" ".join(first[:2] + [str(1000 + i)] + first[3:]) for i in range(3000)]
        open(sys.argv[3], "w").write("\n".join(out) + "\n")
        return 0
    if sys.argv[1] == "kernels":
        first = next(line for line in lines if line.startswith("L ")).split(" ")
        layer = [" ".join(first[:1] + ["K%d" % i] + first[2:]) for i in range(96)]
        open(sys.argv[3], "w").write("\n".join(layer * 100) + "\n")
        return 0
    if sys.argv[1] == "gapped":
        layer = gapped_layer([line for line in lines if line.startswith("L ")][:30])
        open(sys.argv[3], "w").write("\n".join(layer * 100) + "\n")
        return 0
    if sys.argv[1] == "shared":
        at, starts = blocks_in(lines)
        if not starts:
            return 2
        layer = gapped_layer([foreign(line) for line in lines if line.startswith("L ")][:30])
        layer.insert(7, lines[at[starts[0] + 1]])  # the block's first weight cast
        open(sys.argv[3], "w").write("\n".join(layer * 20 + lines) + "\n")
        return 0
    if sys.argv[1].startswith("islands"):
        at, starts = blocks_in(lines)
        if not starts:
            return 2
        layer = gapped_layer([foreign(line) for line in lines if line.startswith("L ")][:30])
        block = [lines[at[starts[0] + j]] for j in range(50)]
        outside = block[:8]
        stack = [x for x in lines[at[starts[0]]:at[starts[0] + 3 * 42]] if not x.startswith("F ")]
        after = lines[at[starts[0]]:]  # IN from its first block
        mode = sys.argv[1]
        if mode == "islands":
            out = (outside + layer * 4) * 30 + lines
        elif mode == "islands-adjacent":
            out = (outside + layer * 4) * 30 + after
        elif mode == "islands-alternating":
            out = ((outside + layer * 4) * 4 + stack) * 8
        elif mode == "islands-preamble":
            outside = [foreign(x, 1) for x in outside]
            out = (outside + layer * 4) * 30 + outside[:2] + stack * 2 + after
        elif mode == "islands-long":
            out = (block + layer * 4) * 30 + stack * 2 + after
        elif mode == "islands-shared":
            other = [foreign(x, 1) for x in block[:4]] + [block[4]] + [foreign(x, 1) for x in block[5:8]]
            out = (outside + layer * 3 + other + layer * 3) * 30 + lines
        elif mode == "islands-shared2":
            other = [foreign(x, 1) for x in block[:4]] + block[4:6] + [foreign(x, 1) for x in block[6:8]]
            out = (outside + layer * 3 + other + layer * 3) * 30 + lines
        elif mode == "islands-dup":
            dup = block[:6] + [foreign(x, 1) for x in block[6:8]] + block[4:6] + [foreign(x, 2) for x in block[6:8]]
            out = (dup + layer * 4) * 30 + lines
        elif mode == "islands-crowded":
            gemm = foreign(block[4], 1)
            crowd = [x for k in range(7) for x in (gemm, foreign(block[5], 10 + k))]
            crowd += [gemm, foreign(block[5], 30), foreign(block[7], 31), gemm, foreign(block[5], 30),
                      foreign(block[7], 32)]
            out = (crowd + layer * 4) * 30 + lines
        elif mode == "islands-whole":
            out = ((outside + block[8:10] + layer * 4) * 4 + stack) * 8
        else:  # islands-suffix
            outside = [foreign(x, 1) for x in block[:2]] + outside
            out = ((outside + layer * 4) * 4 + outside[:2] + stack + block) * 8
        open(sys.argv[3], "w").write("\n".join(out) + "\n")
        return 0
    if sys.argv[1] in ("rewake", "rewake-follow"):
        at, starts = blocks_in(lines)
        if not starts:
            return 2
        launches = [foreign(line) for line in lines if line.startswith("L ")][:30]
        first = lines[at[starts[0]]].split(" ")
        layer = gapped_layer(launches)
        layer.insert(3, " ".join(first[:2] + [str(int(first[2]) + 5)] + first[3:]))
        third = gapped_layer([foreign(x, 3) for x in launches[:20]])
        if sys.argv[1] == "rewake":
            wake = foreign(lines[at[starts[0] + 4]], 40)  # a GEMM of a shape no model ran
            out = layer * 30 + [wake] + third * 60 + lines[at[starts[0]]:]
        else:
            outside = [foreign(lines[at[starts[0] + j]], 1) for j in range(8)]
            broken = outside[:6] + [foreign(x, 7) for x in outside[6:]]
            out = (outside + layer * 4) * 30 + broken + third * 60 + lines[at[starts[0]]:]
        open(sys.argv[3], "w").write("\n".join(out) + "\n")
        return 0
    if sys.argv[1].startswith("variant"):
        at = calls(lines)
        starts = block_starts(lines, at)
        if not starts or starts[0] + 3 * 42 >= len(at):
            sys.stderr.write("replay_mutate.py: no three blocks\n")
            return 2
        end = at[starts[0] + 3 * 42]  # three instances of the block's 42 calls
        casts = {lines[at[starts[0] + j]].split(" ")[2] for j in (1, 2, 25, 26, 31, 32, 37, 38)}  # weight casts' grids
        variant = []
        for line in lines[at[starts[0]]:end]:
            f = line.split(" ")
            if f[0] == "M":
                variant.append("G")
                continue
            if f[0] == "L" and not ("float16_copy_kernel_cuda" in f[1] and f[2] in casts):
                f[2] = str(int(f[2]) + 1)
            variant.append(" ".join(f))
        out = {"variant": variant + lines, "variant-long": variant * 20 + lines,
               "variant-many": variant * 20}[sys.argv[1]]
        open(sys.argv[3], "w").write("\n".join(out) + "\n")
        return 0
    if sys.argv[1] == "lengths":
        launches = [line for line in lines if line.startswith("L ")][:30]
        out = [x for t in range(70) for x in gapped_layer([foreign(line, t) for line in launches]) * 4]
        open(sys.argv[3], "w").write("\n".join(out + lines) + "\n")
        return 0
    if sys.argv[1] == "lt-lengths":
        at = calls(lines)
        starts = block_starts(lines, at)
        if not starts or starts[0] + 42 >= len(at):
            sys.stderr.write("replay_mutate.py: no block found\n")
            return 2
        block = lines[at[starts[0]]:at[starts[0] + 42]]
        out = [x for t in range(70) for x in [foreign(line, t) for line in block] * 4]
        open(sys.argv[3], "w").write("\n".join(out + lines) + "\n")
        return 0
    if sys.argv[1] == "streams":
        layer = [line.split(" ") for line in lines if line.startswith("L ")][:20]
        layer[0][9] = "9000"
        open(sys.argv[3], "w").write("\n".join(" ".join(f) for f in layer * 10) + "\n")
        return 0
    if sys.argv[1] == "loose":
        at = calls(lines)
        nans = [at[k + 24] for k in block_starts(lines, at)
                if k + 24 < len(at) and "nan_to_num_kernel_cuda" in lines[at[k + 24]].split(" ")[1]]
        if len(nans) < 4:
            sys.stderr.write("replay_mutate.py: fewer than four blocks found\n")
            return 2
        for block, i in enumerate(nans):
            f = lines[i].split(" ")
            nparams = int(f[10])
            functor = bytearray.fromhex(f[len(f) - nparams + 1])
            functor[6:8] = (block if block >= 3 else 0).to_bytes(2, "little")
            f[len(f) - nparams + 1] = functor.hex()
            lines[i] = " ".join(f)
        open(sys.argv[3], "w").write("\n".join(lines) + "\n")
        return 0
    if sys.argv[1] == "reader":
        at = calls(lines)
        blocks = [k for k in block_starts(lines, at)
                  if k + 24 < len(at) and "nan_to_num_kernel_cuda" in lines[at[k + 24]].split(" ")[1]]
        if not blocks:
            sys.stderr.write("replay_mutate.py: no block found\n")
            return 2
        insert, drop = {}, set()
        for b, k in enumerate(blocks):
            f = lines[at[k + 10]].split(" ")
            nparams = int(f[10])
            ptrs = bytes.fromhex(f[-1])
            norm = int.from_bytes(ptrs[:8], "little")
            free = next(i for i in range(at[k + 22] + 1, at[k + 23])
                        if lines[i].startswith("F ") and int(lines[i].split(" ")[1], 16) == norm)
            f[-1] = ((0x7e0000000000 + b * 0x1000000).to_bytes(8, "little") + norm.to_bytes(8, "little")).hex()
            assert nparams == 3
            insert[at[k + 22]] = [" ".join(f), lines[free]]
            drop.add(free)
        out = []
        for i, line in enumerate(lines):
            if i not in drop:
                out += [line] + insert.get(i, [])
        open(sys.argv[3], "w").write("\n".join(out) + "\n")
        return 0
    if sys.argv[1] == "early":
        at, starts = blocks_in(lines)
        if not starts:
            return 2
        moved_to, after = 0x7e0000000000, {}
        for k in starts:
            bias, weight, cast, gemm = at[k + 1], at[k + 2], at[k + 3], at[k + 4]
            f = lines[bias].split(" ")
            f[-1] = (bytes.fromhex(f[-1])[:8] + moved_to.to_bytes(8, "little")).hex()
            lines[bias] = " ".join(f)
            f = lines[cast].split(" ")
            ptrs = bytes.fromhex(f[-1])
            out = int.from_bytes(ptrs[:8], "little")
            f[-1] = (moved_to.to_bytes(8, "little") + ptrs[8:]).hex()
            lines[cast] = " ".join(f)
            g = lines[gemm].split(" ")
            assert int(g[11], 16) == out, "the GEMM's B is not the input's cast"
            g[11] = "%x" % moved_to
            lines[gemm] = " ".join(g)
            after[weight] = "F 0x%x %d" % (moved_to, int(f[2]) * 128 * 8 * 2)
        out = [x for i, line in enumerate(lines) for x in [line] + ([after[i]] if i in after else [])]
        open(sys.argv[3], "w").write("\n".join(out) + "\n")
        return 0
    if sys.argv[1] == "cast-reader":
        out, moved = list(lines), {}
        for i, line in enumerate(lines):
            if not (line.startswith("L ") and "silu_kernel" in line.split(" ")[1]):
                continue
            free = i + 2  # the mul, then silu's output freed
            cast = free + 2  # the two weight casts of w2, then its GEMM
            if not (lines[free].startswith("F ") and "MulFunctor" in lines[i + 1]
                    and "float16_copy" in lines[cast] and lines[cast + 1].startswith("M ")):
                continue
            f = lines[cast].split(" ")
            ptrs = bytes.fromhex(f[-1])
            f[-1] = (ptrs[:8] + int(lines[free].split(" ")[1], 16).to_bytes(8, "little")).hex()
            out[cast] = " ".join(f)
            moved[free] = cast
        if not moved:
            sys.stderr.write("replay_mutate.py: no silu found\n")
            return 2
        after = {cast: lines[free] for free, cast in moved.items()}
        res = [x for i, line in enumerate(out) if i not in moved for x in [line] + ([after[i]] if i in after else [])]
        open(sys.argv[3], "w").write("\n".join(res) + "\n")
        return 0
    if sys.argv[1] == "padding":
        out, cats = [], 0
        for line in lines:
            f = line.split(" ")
            if f[0] == "L" and "CatArrayBatchedCopyINS1_10OpaqueTypeILj2EEE" in f[1]:
                nparams = int(f[10])
                hexes = f[len(f) - nparams:]
                out_ptr = int.from_bytes(bytes.fromhex(hexes[0]), "little")
                word = (out_ptr & ~0xFFFF).to_bytes(8, "little") if (cats // 4) % 2 else bytes(8)
                meta = bytearray.fromhex(hexes[1])
                meta[1282:1288] = word[2:8]
                hexes[1] = meta.hex()
                f[len(f) - nparams:] = hexes
                cats += 1
            out.append(" ".join(f))
        if cats == 0:
            sys.stderr.write("replay_mutate.py: no cat found\n")
            return 2
        open(sys.argv[3], "w").write("\n".join(out) + "\n")
        return 0
    at = calls(lines)
    starts = set(at[k + 9] for k in block_starts(lines, at) if k + 9 < len(at))
    if not starts:
        sys.stderr.write("replay_mutate.py: no block found\n")
        return 2
    out = []
    for i, line in enumerate(lines):
        out.append(line)
        if i in starts:
            out.append(line)
    open(sys.argv[3], "w").write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
