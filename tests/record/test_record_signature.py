#!/usr/bin/env python3
"""Tests of scripts/record_signature.py (standard library only).

  python3 tests/record/test_record_signature.py [-v]

The real traces under tests/record/data/ come from an H200 (PyTorch
2.11.0+cu130, serve.py --latent 1,24,7,16,16 --blocks 3 --requests 2
--trace-mark): the first from a shim that wrote demangled kernel names and no
cuDNN variant packs, the second (-v2) from another process with mangled names
and variant packs. The synthetic traces are built here, record by record, with
the fields the shim writes.
"""

import json
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "record_signature.py"
DATA = ROOT / "tests" / "record" / "data"
V1 = DATA / "h3-block3-h200-torch2.11.jsonl.gz"
V2 = DATA / "h3-block3-h200-torch2.11-v2.jsonl.gz"
V3 = DATA / "h3-block3-h200-torch2.11-quick.jsonl.gz"  # another command: other uninitialised bytes
COMMITTED = ROOT / "signatures" / "h3-block-torch2.11.0+cu130-sm90.sig"
# serve.py --mode serving, traced by tests/gpu/record_serving.sh (two processes of one command, one of another).
SERVING = [DATA / f"h3-serving3-h200-torch2.11-{t}.jsonl.gz" for t in "abc"]
META = ["--torch", "2.11.0+cu130", "--cuda", "13000", "--sm", "90", "--cublaslt", "130100", "--cudnn", "91900"]

sys.path.insert(0, str(SCRIPT.parent))
import record_signature as rs  # noqa: E402

# The H3 block as DESIGN.md section 2 lists it, in the recorder's short names.
H3_BLOCK = (["layer_norm"] + ["float16_copy"] * 3 + ["matmul"]
            + ["direct_copy", "layer_norm", "float16_copy"] * 2
            + ["mul", "neg", "cat", "mul", "add", "cat"] * 2
            + ["cudnn", "nan_to_num", "float16_copy", "float16_copy", "matmul", "mul", "add", "layer_norm"]
            + ["float16_copy"] * 3 + ["matmul", "silu", "mul", "float16_copy", "float16_copy", "matmul", "mul", "add"])

DEV = 0x7F20_0000_0000  # where the synthetic traces' device buffers live


def u32(v):
    return v.to_bytes(4, "little")


def u64(v):
    return v.to_bytes(8, "little")


class TraceWriter:
    """Builds a synthetic h3shim trace, one record per call."""

    def __init__(self, pid=1000):
        self.records = []
        self.pid = pid

    def add(self, api, **fields):
        rec = {"seq": len(self.records), "pid": self.pid, "tid": self.pid, "api": api, "stream": "0"}
        rec.update(fields)
        self.records.append(rec)

    def launch(self, kernel, params, grid=(1, 1, 1)):
        self.add("__cudaLaunchKernel", kernel=kernel, grid=list(grid), block=[128, 1, 1], shmem=0,
                 param_sizes=[len(p) for p in params], params=[p.hex() for p in params])

    def matmul(self, A, B, D, bias=0, m=64, n=64, k=16):
        layout = {"type": 2, "order": 0, "batch": 1, "stride": 0}
        self.add("cublasLtMatmul", matmul={
            "compute": 68, "scale": 0, "transa": 1, "transb": 0, "epilogue": 4 if bias else 1, "bias_type": -1,
            "m": m, "n": n, "k": k, "workspace": 1 << 20, "bias": hex(bias), "A": hex(A), "B": hex(B),
            "C": hex(D), "D": hex(D), "workspace_ptr": hex(DEV + (200 << 20)),
            "a": dict(layout, rows=k, cols=m, ld=k), "b": dict(layout, rows=k, cols=n, ld=k),
            "c": dict(layout, rows=m, cols=n, ld=m), "d": dict(layout, rows=m, cols=n, ld=m),
            "algo": {"id": 66, "tile": 415, "stages": 35, "splitk": 1, "reduction": 0, "swizzle": 0,
                     "custom": 5, "cluster": 3, "inner": 0}})

    def marker(self):
        self.launch("_Z11spin_kernell", [u64(1000)])

    def other(self, name, *pointers):
        """A call outside the group, with these pointers in its parameters."""
        self.launch(f"_Z{len(name)}{name}v", [u32(7)] + [u64(p) for p in pointers])

    def write(self, path):
        Path(path).write_text("".join(json.dumps(rec) + "\n" for rec in self.records), encoding="utf-8")
        return str(path)


def small_group(t, i, padding=None, host_word=0x7FFD_1234_5670, reuse_x=None, zero_in=None):
    """One instance of a 4-call group: norm, cast (a closure), matmul, and a kernel reading views.

    Buffers: h (input), x = norm(h), x16 = cast(x), y = x16 @ w16 (matmul D),
    then `view` reads x16 + 128 (a view), x + 1024 (too far without an extent)
    and y + 4096 (inside the matmul's D). The closure's bytes 4..7 are
    `padding` (varying by instance unless given), and its word at 24 a host
    stack address. `reuse_x` gives call 1's spare pointer that value in the
    first instance instead of a fresh one; `zero_in` sets call 3's first
    pointer to 0 in that instance.
    """
    h = DEV + 0x10_0000 * (i + 1)
    x, x16, w16, y = DEV + 0x100_0000, DEV + 0x200_0000, DEV + 0x300_0000, DEV + 0x400_0000
    pad = u32(0x9E3779B9 * (i + 1) & 0xFFFFFFFF) if padding is None else u32(padding)
    t.launch("_Z4normiPKfPf", [u32(2048), u64(h), u64(x)], grid=(64, 1, 1))
    spare = DEV + 0x500_0000 + 0x1000 * i if reuse_x is None or i != 0 else reuse_x
    closure = u32(4096) + pad + u64(x16) + u64(x) + u64(host_word) + u64(spare)
    t.launch("_Z4castILi8EEvi7Closure", [u32(4096), closure], grid=(32, 1, 1))
    t.matmul(A=w16, B=x16, D=y)
    first = 0 if zero_in == i else x16 + 128
    t.launch("_Z4viewPKDF16_PKfS2_", [u64(first), u64(x + 1024), u64(y + 4096)], grid=(8, 1, 1))


def small_trace(path, tail=(), **kw):
    """A trace of three instances of small_group after the marker, then tail calls carrying `tail`."""
    t = TraceWriter()
    t.other("prelude", DEV)
    t.marker()
    t.other("prelude", DEV + 0x600_0000)
    for i in range(3):
        small_group(t, i, **kw)
    for p in tail:
        t.other("tail", p)
    return t.write(path)


def validate(text):
    """Checks the rules of signatures/FORMAT.md that the recorder must keep; returns the calls."""
    lines = [ln.split("#")[0].split() for ln in text.split("\n")[:-1]]
    assert text.endswith("\n") and all(len(ln.encode()) <= 8192 for ln in text.split("\n"))
    lines = [ln for ln in lines if ln]
    assert lines[0] == ["h3sig", "1"] and lines[-1] == ["end"], (lines[0], lines[-1])
    meta = {ln[1] for ln in lines if ln[0] == "meta"}
    assert {"model", "group", "torch", "cuda", "sm", "created"} <= meta, meta
    calls = []  # per call: {"sizes": [...], "ranges": [(param, start, end)], "slots": [(place, ref)]}
    for ln in lines[1:-1]:
        if ln[0] == "call":
            assert int(ln[1]) == len(calls) and ln[2] in ("launch", "matmul", "cudnn"), ln
            assert ln[2] != "launch" or len(ln) == 4, "a kernel name must be one token"
            calls.append({"kind": ln[2], "sizes": None, "ranges": [], "slots": []})
        elif ln[0] == "params":
            calls[-1]["sizes"] = [int(v) for v in ln[1:]]
            assert all(1 <= v <= 4096 for v in calls[-1]["sizes"])
        elif ln[0] in ("bytes", "slot"):
            c = calls[-1]
            if ln[0] == "slot":
                assert int(ln[1]) == len(c["slots"]), ln
                c["slots"].append((ln[2], ln[4]))
                place, off, n = ln[2], int(ln[3]), 8
                ref = re.fullmatch(r"@(\d+)\.(\d+)([+-]\d+)?|first|null", ln[4])
                assert ref, ln
                if ref.group(1):
                    assert int(ref.group(1)) < len(calls) - 1 and int(ref.group(2)) < len(
                        calls[int(ref.group(1))]["slots"]), ln
            else:
                assert re.fullmatch(r"([0-9a-f]{2})+", ln[3]), ln
                place, off, n = ln[1], int(ln[2]), len(ln[3]) // 2
            if c["kind"] == "launch":
                p = int(place)
                assert off + n <= c["sizes"][p], ln
                assert all(q != p or end <= off or off + n <= start for q, start, end in c["ranges"]), ln
                c["ranges"].append((p, off, off + n))
        elif ln[0] == "dead":
            c, s = map(int, re.fullmatch(r"@(\d+)\.(\d+)", ln[1]).groups())
            assert calls[c]["slots"][s][1] == "first", ln
        else:
            assert ln[0] in ("meta", "config", "desc", "algo", "uids"), ln
    return calls


def run_cli(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def refs_hold(sig):
    """Every @C.S+D of the signature holds in every instance where both values are known."""
    for pos in sig.positions:
        for slot in pos.slots:
            m = re.fullmatch(r"@(\d+)\.(\d+)([+-]\d+)?", slot.ref)
            if not m:
                continue
            target = sig.positions[int(m.group(1))].slots[int(m.group(2))]
            d = int(m.group(3) or 0)
            for v, u in zip(slot.values, target.values):
                if None not in (v, u) and v != u + d:
                    return False
    return True


class RealTraces(unittest.TestCase):
    """The H3 block in the H200 traces."""

    @classmethod
    def setUpClass(cls):
        cls.both = rs.record([str(V2), str(V1)])
        cls.all = rs.record([str(V2), str(V1), str(V3)])
        cls.v1 = rs.record([str(V1)])

    def test_block_is_the_h3_block(self):
        for sig in (self.both, self.v1):
            n = rs.counts(sig)
            self.assertEqual((n["calls"], n["launch"], n["matmul"], n["cudnn"]), (42, 37, 4, 1))
            self.assertEqual([rs.short_name(p.calls[0]) for p in sig.positions][:5],
                             ["layer_norm", "float16_copy", "float16_copy", "float16_copy",
                              "matmul m=6144 n=1797 k=2048"])
            self.assertEqual([rs.short_name(p.calls[0]).split()[0] for p in sig.positions], H3_BLOCK)
        self.assertEqual(rs.counts(self.v1)["instances"], 9)
        self.assertEqual(rs.counts(self.both)["instances"], 18)

    def test_wiring_holds_in_every_instance(self):
        self.assertTrue(refs_hold(self.both))
        self.assertTrue(refs_hold(self.v1))
        refs = {(p.index, s): slot.ref for p in self.both.positions for s, slot in enumerate(p.slots)}
        # k and v are views of the to_qkv output (matmul D at call 4): k at +128, v at +256 (via k).
        self.assertEqual(refs[(5, 1)], "@4.3")
        self.assertEqual(refs[(8, 1)], "@5.1+128")
        self.assertEqual(refs[(23, 3)], "@8.1+128")
        # The SwiGLU product reads the two halves of the w1 output (matmul D at call 34).
        self.assertEqual(refs[(35, 1)], "@34.3")
        self.assertEqual(refs[(36, 2)], "@35.1+16384")

    def test_matmul_a_is_the_preceding_weight_cast(self):
        # Autocast casts the bias, the weight and (unless it is FP16 already) the input
        # right before each matmul; A is the weight cast's output, the largest of them.
        for sig in (self.both, self.v1):
            for pos in (p for p in sig.positions if p.kind == "matmul"):
                casts = []
                while rs.short_name(sig.positions[pos.index - len(casts) - 1].calls[0]) == "float16_copy":
                    casts.insert(0, sig.positions[pos.index - len(casts) - 1])
                weight = max(casts, key=lambda c: c.calls[0].record["grid"][0])
                self.assertEqual(weight.slots[0].place, (2, 0))  # the output: the first of the copy's pointers
                self.assertEqual([s.place[0] for s in pos.slots], ["A", "B", "C", "D", "bias"])
                self.assertEqual(pos.slots[0].ref, f"@{weight.index}.0")
                self.assertEqual(pos.slots[4].ref, f"@{casts[0].index}.0")

    def test_cudnn_pack_from_the_trace_that_has_it(self):
        attention = self.both.positions[23]
        self.assertEqual([s.place[0] for s in attention.slots], ["uid:3", "uid:0", "uid:1", "uid:2"])
        self.assertEqual(self.both.positions[24].slots[1].ref, "@23.0")  # nan_to_num reads the attention output
        self.assertIn("uid 5: not a device address", " ".join(attention.notes))  # the host scale pointer
        self.assertEqual(self.v1.positions[23].slots, [])
        self.assertIn("no variant pack", " ".join(self.v1.positions[23].notes))
        self.assertEqual(self.v1.dead, [])  # its cuDNN pointers are unknown: nothing can be dead

    def test_second_process_masks_host_values(self):
        # Within one process the closure tail holds the same heap address in every
        # instance; the other process has another one there.
        def tail(sig):
            return [r for r in sig.positions[5].ranges if r[0] == 1 and r[1] <= 528 < r[1] + len(r[2])]
        self.assertTrue(tail(self.v1))
        self.assertFalse(tail(self.both))

    def test_unused_closure_entries_are_masked(self):
        # PyTorch fills its closures' fixed arrays only as far as it uses them; the rest is
        # stack left-overs, equal in the two processes of one command and different under
        # another (on the H200 the quick decode's first match failed at call 8 that way).
        # The q copy (call 8) is a strided copy: OffsetCalculator<2> with 2 of 25 dims used.
        def compared(sig, pos, lo, hi):
            return sum(len(r[2]) for r in sig.positions[pos].ranges if r[0] == 1 and lo <= r[1] < hi)
        for sig in (self.both, self.all):
            self.assertEqual(compared(sig, 8, 4 + 12 * 2, 304), 0)  # dividers 2..24
            self.assertEqual(compared(sig, 8, 304 + 4 * 2 * 2, 504), 0)  # stride rows 2..24
            self.assertEqual(compared(sig, 8, 0, 4 + 12 * 2), 4 + 12 * 2)  # dims and the used dividers
            self.assertEqual(compared(sig, 13, 16, 512), 0)  # cat: input pointers 2..63
            self.assertEqual(sig.positions[8].unused[1], [(28, 304), (320, 504), (520, 521), (523, 536)])
        # With the layouts known, a third process of another command masks nothing more.
        def ranges(sig):
            return {(p.index, r[0], r[1], bytes(r[2])) for p in sig.positions for r in p.ranges}
        self.assertEqual(ranges(self.both) - ranges(self.all), set())
        self.assertEqual(rs.counts(self.all)["instances"], 42)
        self.assertTrue(refs_hold(self.all))

    def test_captureless_functors_are_masked(self):
        # A `[]` lambda is an empty class of one byte that its kernel never reads; its value is
        # stack left-over (on the H200 the second GPU of a process held 01 where the recording
        # held 00, and nothing was fused there). The float16 casts pass it as parameter 1; the
        # strided copies (calls 5 and 8) hold it in their closure right after the data pointers.
        for sig in (self.both, self.all):
            for pos in sig.positions:
                if pos.kind == rs.LAUNCH and rs.empty_functor(pos.calls[0].kernel):
                    if pos.calls[0].kernel.startswith(rs.VECTORIZED):
                        self.assertEqual(pos.unused.get(1), [(0, 1)], pos.index)
                    else:  # the closure ends with the two dtypes (Float out, Half in) at 521-522
                        self.assertEqual(pos.unused.get(1, [])[-2:], [(520, 521), (523, 536)], pos.index)
                        self.assertEqual([(r[1], bytes(r[2])) for r in pos.ranges if r[0] == 1 and r[1] >= 504],
                                         [(521, b"\x06\x05")], pos.index)
            self.assertEqual([p.index for p in sig.positions if p.kind == rs.LAUNCH and rs.empty_functor(p.calls[0].kernel)],
                             [1, 2, 3, 5, 7, 8, 10, 25, 26, 31, 32, 33, 37, 38])  # the casts, the strided copies
        # The word after the dtypes held a host address in another thread (H200, 2026-11-30:
        # 0x7fdd9c070c70 where the main thread's held 0x100b7810), so threads fused nothing.
        # A functor that holds a value (a scalar, say) is read by its kernel: never masked.
        self.assertFalse(rs.empty_functor(
            "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_13AUnaryFunctorIfffNS0_15binary_internal10MulFunctorIfEEEE"
            "St5arrayIPcLm2EEEEviT0_T1_"))

    def test_closure_last_word_is_masked(self):
        # The elementwise kernels' lambda closures end with a word that holds a host address:
        # a heap address in each recorded process, 0x7fdd9c044bf0 in a second thread on the
        # H200, where the old signature's equal upper half broke every block (call 5).
        for sig in (self.both, self.all):
            def last_word_masked(p):
                size = len(p.calls[0].params[1])
                return any(a <= size - 8 and b == size for a, b in p.unused.get(1, []))
            masked = [p.index for p in sig.positions if p.kind == rs.LAUNCH and last_word_masked(p)
                      and rs.CLOSURE_KERNELS.match(p.calls[0].kernel)]
            self.assertEqual(masked, [5, 8, 11, 12, 14, 17, 18, 20, 24, 28, 35, 36, 40])
            for i in masked:
                pos = sig.positions[i]
                size = len(pos.calls[0].params[1])
                words = {int.from_bytes(c.params[1][size - 8:], "little") for c in pos.calls}
                self.assertGreater(len(words), 1, i)  # never a constant
                self.assertFalse([r for r in pos.ranges if r[0] == 1 and r[1] + len(r[2]) > size - 8], i)
        self.assertTrue(refs_hold(self.all))

    def test_int_divider(self):
        # IntDivider<uint32_t>(1797): shift 11, m1 = 2^32 * (2048 - 1797) // 1797 + 1 (0x23c1e33a, as on the H200)
        d = (1797).to_bytes(4, "little") + (599909178).to_bytes(4, "little") + (11).to_bytes(4, "little")
        self.assertTrue(rs.int_divider_ok(d, 0))
        self.assertFalse(rs.int_divider_ok(d[:8] + (10).to_bytes(4, "little"), 0))
        self.assertTrue(rs.int_divider_ok((1).to_bytes(4, "little") + (1).to_bytes(4, "little") + bytes(4), 0))
        self.assertFalse(rs.int_divider_ok(bytes(12), 0))

    def test_kernel_names(self):
        text = rs.render(self.both, {"source": "t", "after": "spin", "model": "m", "group": "g", "torch": "t",
                                     "cuda": 1, "sm": 90, "created": "2026-11-29"})
        kernels = [ln.split()[3] for ln in text.splitlines() if ln.startswith("call") and " launch " in ln]
        self.assertEqual(len(kernels), 37)
        self.assertTrue(all(k.startswith("_Z") for k in kernels))
        self.assertNotIn("WARNING", text)
        v1 = rs.render(self.v1, {"source": "t", "after": "spin", "model": "m", "group": "g", "torch": "t",
                                 "cuda": 1, "sm": 90, "created": "2026-11-29"})
        self.assertIn("WARNING: the traces name kernels demangled", v1)
        self.assertIn("call 0 launch void%20at::native::(anonymous%20namespace)::vectorized_layer_norm_kernel", v1)
        validate(v1)

    def test_committed_signature_is_current_and_deterministic(self):
        with tempfile.TemporaryDirectory() as tmp:
            outputs = []
            for n in range(2):
                out = Path(tmp) / f"{n}.sig"
                r = run_cli(V2, V1, V3, *META, "--created", "2026-11-29", "-o", out)
                self.assertEqual(r.returncode, 0, r.stderr)
                outputs.append(out.read_bytes())
        self.assertEqual(outputs[0], outputs[1])
        self.assertEqual(outputs[0], COMMITTED.read_bytes(),
                         "signatures/ is stale: regenerate it with the command in signatures/README.md")
        calls = validate(outputs[0].decode())
        self.assertEqual(len(calls), 42)

    def test_serving_signatures_are_current(self):
        # The block as the serving pipeline runs it: a request's first tile
        # (42 calls, its casts kept by autocast's cache) and its later ones (34).
        for name, length in (("first", 42), ("cached", 34)):
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "s.sig"
                r = run_cli(*SERVING, *META, "--length", str(length), "--group", f"block-serving-{name}",
                            "--created", "2026-12-01", "-o", out)
                self.assertEqual(r.returncode, 0, r.stderr)
                committed = ROOT / "signatures" / f"h3-serving-block-{name}-torch2.11.0+cu130-sm90.sig"
                self.assertEqual(out.read_bytes(), committed.read_bytes(),
                                 f"{committed.name} is stale: regenerate it (signatures/README.md)")
                self.assertEqual(len(validate(out.read_text())), length)

    @unittest.skipUnless((ROOT / "build" / "h3sig").exists(), "build/h3sig is not built (make)")
    def test_committed_signature_passes_h3sig(self):
        r = subprocess.run([str(ROOT / "build" / "h3sig"), str(COMMITTED)], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)


class Synthetic(unittest.TestCase):

    def setUp(self):
        self.dir = Path(tempfile.mkdtemp())

    def tearDown(self):
        shutil.rmtree(self.dir)

    def record(self, *paths, **kw):
        return rs.record([str(p) for p in paths], **kw)

    def test_small_group(self):
        sig = self.record(small_trace(self.dir / "t.jsonl"))
        self.assertEqual(rs.counts(sig)["calls"], 4)
        self.assertEqual(rs.counts(sig)["instances"], 3)
        refs = [[s.ref for s in p.slots] for p in sig.positions]
        self.assertEqual(refs[0], ["first", "first"])  # h, x
        self.assertEqual(refs[1], ["first", "@0.1", "first"])  # x16, x, a spare buffer
        self.assertEqual(refs[2], ["first", "@1.0", "first", "first", "null"])  # w16, x16, y (C and D), no bias
        validate(rs.render(sig, {"source": "t", "after": "spin", "model": "m", "group": "g", "torch": "t",
                                 "cuda": 1, "sm": 90, "created": "2026-11-29"}))

    def test_padding_and_host_words_are_masked(self):
        sig = self.record(small_trace(self.dir / "t.jsonl"))
        cast = sig.positions[1]
        self.assertEqual([s.place for s in cast.slots], [(1, 8), (1, 16), (1, 32)])
        # numel (bytes 0-3) is kept; the padding (4-7, varying) and the host address (24-31) are not.
        self.assertEqual([(p, off, data.hex()) for p, off, data in cast.ranges],
                         [(0, 0, "00100000"), (1, 0, "00100000")])
        # Padding that is the same in every instance is kept: only variation or a host address shows it.
        sig = self.record(small_trace(self.dir / "u.jsonl", padding=0x12345678))
        self.assertIn((1, 0, bytes.fromhex("0010000078563412")), sig.positions[1].ranges)

    def test_views(self):
        sig = self.record(small_trace(self.dir / "t.jsonl"))
        view = sig.positions[3]
        self.assertEqual([s.ref for s in view.slots], [
            "@2.1+128",   # x16 + 128 (the matmul's B is the latest slot holding x16): within 512 bytes
            "first",      # x + 1024: may be another buffer, since x's extent is unknown
            "@2.3+4096",  # y + 4096: inside the matmul's D (64 x 64 halves)
        ])
        self.assertEqual(sig.positions[1].slots[0].views, {0, 128})

    def test_dead(self):
        # x and x16 are made anew at the same slot by each next instance and read by nothing
        # else; a tail call after the last instance reads one of them. y (matmul D) is seen
        # again as C of the next matmul, which may read it: live.
        x, x16 = DEV + 0x100_0000, DEV + 0x200_0000
        sig = self.record(small_trace(self.dir / "t.jsonl", tail=[x]))
        self.assertEqual(sig.dead, [(1, 0)])
        sig = self.record(small_trace(self.dir / "u.jsonl", tail=[x16 + 128]))  # through its view
        self.assertEqual(sig.dead, [(0, 1)])
        sig = self.record(small_trace(self.dir / "v.jsonl"))
        self.assertEqual(sig.dead, [(0, 1), (1, 0)])

    def test_no_repetition(self):
        t = TraceWriter()
        t.marker()
        for i in range(6):
            t.launch("_Z1kv", [u32(i)], grid=(i + 1, 1, 1))
        path = t.write(self.dir / "t.jsonl")
        with self.assertRaisesRegex(rs.RecordError, "no sequence of calls repeats"):
            self.record(path)
        r = run_cli(path, *META)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        self.assertIn("error: no sequence of calls repeats", r.stderr)

    def test_group_not_request(self):
        # Three identical requests (prelude, three blocks, tail): the block repeats, not the request.
        t = TraceWriter()
        t.marker()
        for _ in range(3):
            t.other("prelude_a")
            t.other("prelude_b")
            for _ in range(3):
                for name in ("norm", "proj", "act"):
                    t.other(name)
            t.other("tail")
        sig = self.record(t.write(self.dir / "t.jsonl"))
        self.assertEqual(rs.counts(sig)["calls"], 3)
        self.assertEqual(rs.counts(sig)["instances"], 9)
        sig = self.record(self.dir / "t.jsonl", length=12)
        self.assertEqual(rs.counts(sig)["instances"], 3)

    def test_inconsistent_wiring(self):
        # Call 1's spare pointer equals x in the first instance only; nothing reads x later
        # for certain, so x may have been freed and its address reused: "first".
        sig = self.record(small_trace(self.dir / "t.jsonl", reuse_x=DEV + 0x100_0000))
        self.assertEqual(sig.positions[1].slots[2].ref, "first")
        # Here call 1 equals call 0's buffer in the first instance only, and the matmul reads
        # that buffer afterwards, so it was not freed: the instances disagree.
        t = TraceWriter()
        t.marker()
        for i in range(3):
            a = DEV + 0x100_0000
            t.launch("_Z2k0Pf", [u64(a)])
            t.launch("_Z2k1Pf", [u64(a if i == 0 else DEV + 0x300_0000 + 0x1000 * i)])
            t.matmul(A=DEV + 0x200_0000, B=a, D=DEV + 0x400_0000)
        with self.assertRaisesRegex(rs.RecordError, r"call 1 slot 0 \(0 0\): the instances disagree on the "
                                                    r"wiring: it equals @0\.0, which the matmul at call 2 reads "
                                                    r"later, in instance 0 \(.*u\.jsonl:3\) but not in instance 1"):
            self.record(t.write(self.dir / "u.jsonl"))

    def test_word_null_in_some_instances_is_masked(self):
        # A kernel reads a pointer that is null always or never: a word that is 0 in one
        # instance only is padding, so it is neither a slot nor compared bytes.
        sig = self.record(small_trace(self.dir / "v.jsonl", zero_in=1))
        self.assertNotIn((0, 0), [s.place for s in sig.positions[3].slots])
        text = rs.render(sig, {"source": "t", "after": "spin", "model": "m", "group": "g", "torch": "t",
                               "cuda": "1", "sm": "90", "created": "2026-11-29"})
        call3 = validate(text)[3]
        self.assertFalse([r for r in call3["ranges"] if r[0] == 0 and r[1] < 8], call3["ranges"])
        self.assertIn("word 0 0: 0 in some instances only: padding, masked", text)

    def test_malformed_line(self):
        path = small_trace(self.dir / "t.jsonl")
        lines = Path(path).read_text().splitlines()
        lines[4] = lines[4][:-5]
        Path(path).write_text("\n".join(lines) + "\n")
        with self.assertRaisesRegex(rs.RecordError, r"t\.jsonl:5: malformed trace line"):
            self.record(path)
        r = run_cli(path, *META)
        self.assertEqual((r.returncode, r.stderr.count("\n")), (2, 1), r.stderr)
        self.assertIn("t.jsonl:5: malformed trace line", r.stderr)

    def test_malformed_params(self):
        t = TraceWriter()
        t.launch("_Z1kv", [u32(1)])
        t.records[0]["params"] = ["0011"]
        with self.assertRaisesRegex(rs.RecordError, r":1: a parameter's bytes do not have its size"):
            self.record(t.write(self.dir / "t.jsonl"))

    def test_marker_and_params_needed(self):
        path = small_trace(self.dir / "t.jsonl")
        with self.assertRaisesRegex(rs.RecordError, "no launch of a kernel named like 'marker'"):
            self.record(path, after="marker")
        self.assertEqual(rs.counts(self.record(path, after=""))["calls"], 4)
        lines = [json.loads(ln) for ln in Path(path).read_text().splitlines()]
        for rec in lines:
            rec.pop("params", None)
        Path(path).write_text("".join(json.dumps(rec) + "\n" for rec in lines))
        with self.assertRaisesRegex(rs.RecordError, "launch without parameter bytes .*H3SHIM_TRACE_PARAMS=1"):
            self.record(path)

    def test_gemm_in_group(self):
        t = TraceWriter()
        t.marker()
        for i in range(2):
            t.other("norm", DEV)
            t.add("cublasSgemm_v2", gemm={"m": 4, "n": 4, "k": 4, "A": hex(DEV), "B": hex(DEV + 64),
                                          "C": hex(DEV + 128)})
        with self.assertRaisesRegex(rs.RecordError, "call 1 of the group is a cuBLAS GEMM"):
            self.record(t.write(self.dir / "t.jsonl"))

    def test_two_processes(self):
        # A closure word that is the same in every instance of one process but differs
        # between the processes is masked only when both traces are given.
        paths = [small_trace(self.dir / f"p{n}.jsonl", padding=0x1000 + n) for n in range(2)]
        one = self.record(paths[0])
        both = self.record(*paths)
        self.assertEqual(rs.counts(both)["instances"], 6)
        self.assertIn((1, 0, bytes.fromhex("0010000000100000")), one.positions[1].ranges)
        self.assertIn((1, 0, bytes.fromhex("00100000")), both.positions[1].ranges)

    def test_demangled_names_are_escaped(self):
        t = TraceWriter()
        t.marker()
        for i in range(2):
            t.launch("void k<1>(int, float*)", [u32(1)])
            t.launch("void {lambda()#1} 100%", [u32(2)])
        path = t.write(self.dir / "t.jsonl")
        out = self.dir / "t.sig"
        r = run_cli(path, *META, "-o", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("demangled kernel names only", r.stderr)
        text = out.read_text()
        self.assertIn("call 0 launch void%20k<1>(int,%20float*)\n", text)
        self.assertIn("call 1 launch void%20{lambda()%231}%20100%25\n", text)
        validate(text)

    def test_cli_options(self):
        path = small_trace(self.dir / "t.jsonl")
        r = run_cli(path, "--cuda", "13000", "--sm", "90")
        self.assertEqual((r.returncode, r.stderr.count("\n")), (2, 1), r.stderr)
        self.assertIn("--torch", r.stderr)
        r = run_cli(path, *META, "--created", "29.11.2026")
        self.assertEqual(r.returncode, 2)
        self.assertIn("is not a date", r.stderr)
        r = run_cli(path, *META, "--model", "two words")
        self.assertEqual(r.returncode, 2)
        r = run_cli(path, *META, "--created", "2026-11-29")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("meta created 2026-11-29\n", r.stdout)
        self.assertIn("meta cudnn 91900\n", r.stdout)
        self.assertIn("one process only", r.stderr)


if __name__ == "__main__":
    unittest.main()
