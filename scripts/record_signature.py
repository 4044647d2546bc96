#!/usr/bin/env python3
"""Records an h3shim signature file (format 1) from h3shim JSONL traces.

  record_signature.py TRACE[.gz]... --torch VERSION --cuda N --sm N
        [--cublaslt N] [--cudnn N] [--model NAME] [--group NAME] [--after NAME]
        [--length N] [--created YYYY-MM-DD] [-o FILE]

Each TRACE is a trace that h3shim wrote with H3SHIM_TRACE_PARAMS=1 while the
workload ran the group several times in a row, one process per trace
(signatures/README.md gives the commands). Give traces of two processes: the
bytes that stay equal within one process include uninitialised padding that
holds host addresses, which move from process to process. The output is the
signature file of signatures/FORMAT.md, on stdout or in FILE; a summary and
warnings go to stderr. The exit status is 0 when the file was written, and 2
with one line on stderr for bad input: a malformed trace line (with its line
number), no repetition, inconsistent wiring, or a call that format 1 cannot
describe.

How the recorder decides:

Calls. Launch records (with "kernel"), cublasLtMatmul records ("matmul"),
cudnnBackendExecute records ("cudnn") and cuBLAS GEMM records ("gemm") make
the call stream; every other record (cuGetProcAddress...) is ignored. Only the
calls after the last launch whose kernel name contains --after (default
"spin", the marker of serve.py --trace-mark) are searched for the group. A
call's identity is its API, demangled kernel name ("kernel_pretty", or
"kernel" when the trace has no other), launch configuration and parameter
sizes (launches), its description (matmuls: all but pointers and algorithm),
or its variant pack's unique ids (cuDNN; a call whose pack the trace does not
hold matches any pack when traces are compared).

The group. For each period L, the stretches where the identities repeat with
period L at least twice in a row are found; the instances are the windows of
the rotation that occurs most often, kept only in runs of two or more
consecutive windows. The period that covers the most calls wins (ties: the
shorter). Then, as long as a shorter period's instances cover more than half
of the winner's calls, the winner is a run of several groups (a whole request,
say) and the shorter period replaces it. --length N fixes the period. Every
trace must show the same group.

Bytes. A launch parameter byte is recorded ("bytes") when it is equal in every
instance of every trace and lies neither in a pointer slot nor in an 8-byte
word that holds a host address in some instance (a value in [0x7f0000000000,
0x800000000000): stack and shared-library addresses in PyTorch's closures).
Everything else is masked. So are bytes that PyTorch's kernels cannot read,
where the closure's layout is known (they hold whatever the host stack held,
which changes with the thread, the GPU and the command): the unused entries of
OffsetCalculator and CatArrInputTensorMetadata arrays, the one byte of a
functor PyTorch declares without captures, and the last 8-byte word of an
elementwise kernel's lambda closure when it differs between instances (a host
heap address in each recorded process, a 0x7f... one in a second thread).

Pointer slots. Device addresses cannot be told from other values by their look
(device memory and host mappings share the 0x7f... range), and a value that is
equal in every instance may still be a pointer (the caching allocator hands out
the same address again). The recorder starts, per trace, from addresses that
are device pointers for certain: the operands and workspaces of every
cublasLtMatmul and cuBLAS GEMM and the cuDNN workspaces. An 8-byte word at an
8-byte aligned offset of a kernel parameter is a pointer slot when, in every
instance, it is 0 or within 256 MiB of such an address, and it is not 0 in
every instance (a word that is always 0 is recorded as bytes); each accepted
word adds its values to the known addresses, until no further word is
accepted. An accepted word that is 0 in some instances only is padding, not a
pointer (a kernel's pointer is null always or never): it is masked, with a
note in the file. Matmul operands A, B, C, D and bias are always slots; a cuDNN unique
id gets a slot when its pointer passes the same test (a pointer to a host
scalar on the stack gets none).

References. A slot's candidate references are the slots of earlier calls of
the same instance whose value equals its value (@C.S), or is D bytes lower
with both in one buffer (@C.S+D): the slot lies less than 512 bytes past the
buffer's first slot (the caching allocator never puts two buffers closer
together), or within the extent of the matmul operand that the buffer starts
with. The REF is a
candidate that holds in every instance: one with D == 0 first, then the
smallest D, then the latest call, then the highest slot id (a matmul output is
referred to as D, not C). "null" is a slot that is 0 in every instance;
"first" one without a candidate that holds everywhere. The allocator hands a
freed buffer's address to the next buffer, so equalities that hold in some
instances only are expected ("first"), and ones that hold in every instance
are recorded like dataflow (the matcher then checks them too). Recording
stops with an error naming the call and slot when the instances disagree for
certain: a slot that is 0 in some instances only, or one that equals an
earlier slot in some instances only although a later matmul reads that slot
(A, B or bias, reads for certain) through a reference to exactly it, so that
no other buffer can have taken its address in between.

Dead buffers. The candidates are the buffers that the group hands from one
call to another (a "first" slot that a later slot refers to). After each
instance, the calls of the trace are scanned up to the call where a later
instance of the group holds the same address at the same slot again (the
buffer is made anew) or to the end of the trace. The buffer is live when a
scanned call carries its address, or one of its recorded views, in a pointer
or in any 8-byte parameter word (other than that slot in the closing call).
"dead @C.S" is written when the buffer is live after no instance. Only traces
whose calls all have known pointers take part (a cuDNN call without its
variant pack, or a launch without parameter bytes, leaves a trace out); with
none, nothing is dead. The trace does not say what a kernel reads or writes: a
buffer that the group updated in place and the next group read at the same
slot would look dead, and an input that each group only reads at the same slot
(a weight, a table) is reported dead, which says nothing since the group does
not write it.

Kernel names. KERNEL is the trace's "kernel" field, the mangled name that
cuKernelGetName returns, taken from the first trace that has it. When no trace
has it (traces from shims that wrote the demangled name there), the demangled
name is written with ' ', tab, '#' and '%' percent-escaped (%20, %09, %23,
%25) so that it stays one token, and the file and stderr say that it cannot
match.
"""

import argparse
import bisect
import datetime
import gzip
import json
import os
import re
import sys
from dataclasses import dataclass, field

PROG = "record_signature.py"

LAUNCH, MATMUL, CUDNN, GEMM = "launch", "matmul", "cudnn", "gemm"

# A parameter word within this distance of a known device address is a device address.
DEVICE_RADIUS = 256 << 20
# The caching allocator rounds every buffer to this many bytes, so two buffers are at least this far apart.
ALLOCATION_GRANULE = 512
# Values in this range are host mappings or the stack (the top of x86-64 user space).
HOST_LOW, HOST_HIGH = 0x7F00_0000_0000, 0x8000_0000_0000
# Parameter sizes that format 1 accepts.
PARAM_MIN, PARAM_MAX = 1, 4096
# One "bytes" line holds at most this many bytes, so that lines stay well below format 1's 8192.
BYTES_PER_LINE = 2048

DESC_KEYS = ("compute", "scale", "transa", "transb", "epilogue", "bias_type", "m", "n", "k", "workspace")
LAYOUT_KEYS = ("type", "order", "rows", "cols", "ld", "batch", "stride")
ALGO_KEYS = ("id", "tile", "stages", "splitk", "reduction", "swizzle", "custom", "cluster", "inner")
MATMUL_OPERANDS = ("A", "B", "C", "D", "bias")
MATMUL_READS = ("A", "B", "bias")
MATMUL_POINTERS = MATMUL_OPERANDS + ("workspace_ptr",)
GEMM_POINTERS = ("A", "B", "C")
# Bytes per element of the cudaDataType values that matmul layouts use.
ELEMENT_SIZES = {0: 4, 1: 8, 2: 2, 3: 1, 8: 1, 10: 4, 14: 2, 28: 1, 29: 1}

# Short human names for the comment above each call, tried in order on the kernel's name.
OP_NAMES = (
    ("layer_norm", "layer_norm"),
    ("bfloat16_copy", "bfloat16_copy"),
    ("float16_copy", "float16_copy"),
    ("direct_copy", "direct_copy"),
    ("nan_to_num", "nan_to_num"),
    ("silu", "silu"),
    ("neg_kernel", "neg"),
    ("CatArrayBatchedCopy", "cat"),
    ("MulFunctor", "mul"),
    ("DivFunctor", "div"),
    ("_add", "add"),
    ("FillFunctor", "fill"),
)


class RecordError(Exception):
    """Bad input: the message is printed on one line and the exit status is 2."""


def fail(message):
    raise RecordError(message)


@dataclass
class Call:
    """One call of the stream: a launch, a matmul, a cuDNN execution or a cuBLAS GEMM."""

    trace: str
    line: int
    kind: str
    identity: tuple
    record: dict
    params: list | None = None  # launches: each parameter's bytes; None when the trace has none

    @property
    def kernel(self):
        return self.record.get("kernel", "")

    @property
    def pretty(self):
        return self.record.get("kernel_pretty", self.kernel)

    def words(self):
        """Every pointer or pointer-sized value of the call as a dict {(place, offset): value}.

        Launches give every 8-byte word at an 8-byte aligned offset of every
        parameter (place: the parameter's index); library calls give their
        pointers (place: the operand's name, or uid:N). None when the trace
        does not hold the call's pointers.
        """
        if self.kind == LAUNCH:
            if self.params is None:
                return None
            return {(p, off): int.from_bytes(data[off:off + 8], "little")
                    for p, data in enumerate(self.params) for off in range(0, len(data) - 7, 8)}
        if self.kind == MATMUL:
            return {(name, 0): pointer(self, self.record["matmul"][name]) for name in MATMUL_POINTERS}
        if self.kind == GEMM:
            return {(name, 0): pointer(self, self.record["gemm"][name]) for name in GEMM_POINTERS}
        pack = self.record["cudnn"]
        if not pack_known(pack):
            return None
        words = {(f"uid:{uid}", 0): pointer(self, ptr) for uid, ptr in zip(pack["uids"], pack["ptrs"])}
        words[("workspace", 0)] = pointer(self, pack.get("workspace", "0"))
        return words

    def device_addresses(self):
        """The call's pointers that are device addresses for certain (library operands, workspaces)."""
        if self.kind == MATMUL:
            values = [pointer(self, self.record["matmul"][name]) for name in MATMUL_POINTERS]
        elif self.kind == GEMM:
            values = [pointer(self, self.record["gemm"][name]) for name in GEMM_POINTERS]
        elif self.kind == CUDNN:
            values = [pointer(self, self.record["cudnn"].get("workspace", "0"))]
        else:
            values = []
        return [v for v in values if v]


def pack_known(pack):
    """Whether a cudnn record holds its variant pack (older shims wrote empty lists)."""
    return bool(pack["uids"]) and pack.get("pack_known") is not False


def pointer(call, text):
    """A pointer field of a record ("0x7f..." or "0") as an integer."""
    if isinstance(text, str):
        try:
            return int(text, 16)
        except ValueError:
            pass
    fail(f"{call.trace}:{call.line}: malformed pointer {text!r}")


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def make_call(rec, path, line):
    """The Call of one trace record, or None for a record that is not a call of the stream."""
    where = f"{path}:{line}"
    api = rec.get("api")
    if not isinstance(api, str):
        fail(f"{where}: record without an \"api\" string")
    if "kernel" in rec:
        return make_launch(rec, api, path, line)
    if "matmul" in rec:
        m = rec["matmul"]
        if not isinstance(m, dict) or not all(is_int(m.get(key)) for key in DESC_KEYS):
            fail(f"{where}: \"matmul\" lacks an integer field of {', '.join(DESC_KEYS)}")
        for name in "abcd":
            layout = m.get(name)
            if not isinstance(layout, dict) or not all(is_int(layout.get(k)) for k in LAYOUT_KEYS):
                fail(f"{where}: matmul layout {name!r} missing or incomplete")
        algo = m.get("algo")
        if algo is not None and (not isinstance(algo, dict) or not all(is_int(algo.get(k)) for k in ALGO_KEYS)):
            fail(f"{where}: matmul \"algo\" incomplete")
        call = Call(path, line, MATMUL, ("matmul",) + tuple(desc_items(m)), rec)
    elif "cudnn" in rec:
        pack = rec["cudnn"]
        if (not isinstance(pack, dict) or not isinstance(pack.get("uids"), list)
                or not isinstance(pack.get("ptrs"), list) or len(pack["uids"]) != len(pack["ptrs"])
                or not all(is_int(u) for u in pack["uids"])):
            fail(f"{where}: \"cudnn\" needs lists \"uids\" (integers) and \"ptrs\" of one length")
        call = Call(path, line, CUDNN, ("cudnn", tuple(pack["uids"]) if pack_known(pack) else None), rec)
    elif "gemm" in rec:
        g = rec["gemm"]
        if not isinstance(g, dict) or not all(k in g for k in GEMM_POINTERS):
            fail(f"{where}: \"gemm\" needs pointers A, B and C")
        rest = tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in g.items() if k not in GEMM_POINTERS))
        call = Call(path, line, GEMM, ("gemm", api) + rest, rec)
    else:
        return None
    call.words()  # checks the pointers
    call.device_addresses()
    return call


def make_launch(rec, api, path, line):
    where = f"{path}:{line}"
    for key in ("kernel", "kernel_pretty"):
        if key in rec and (not isinstance(rec[key], str) or not rec[key]):
            fail(f"{where}: {key!r} is not a non-empty string")
    for key in ("grid", "block"):
        dims = rec.get(key)
        if not isinstance(dims, list) or len(dims) != 3 or not all(is_int(d) and d >= 0 for d in dims):
            fail(f"{where}: {key!r} is not three non-negative integers")
    sizes = rec.get("param_sizes")
    if not is_int(rec.get("shmem")) or not isinstance(sizes, list) or not all(is_int(s) and s >= 0 for s in sizes):
        fail(f"{where}: \"shmem\" or \"param_sizes\" missing or malformed")
    params = rec.get("params")
    if params is not None:
        if not isinstance(params, list) or len(params) != len(sizes) or not all(isinstance(h, str) for h in params):
            fail(f"{where}: \"params\" is not one hex string per parameter size")
        try:
            params = [bytes.fromhex(h) for h in params]
        except ValueError:
            fail(f"{where}: \"params\" holds a string that is not hex")
        if any(len(p) != s for p, s in zip(params, sizes)):
            fail(f"{where}: a parameter's bytes do not have its size in \"param_sizes\"")
    pretty = rec.get("kernel_pretty", rec["kernel"])
    identity = ("launch", api, pretty, tuple(rec["grid"]), tuple(rec["block"]), rec["shmem"], tuple(sizes))
    return Call(path, line, LAUNCH, identity, rec, params)


def desc_items(m):
    """The description fields of a matmul record as (KEY, value) pairs in format order."""
    items = [(key, m[key]) for key in DESC_KEYS]
    for name in "abcd":
        items += [(f"{name}.{key}", m[name][key]) for key in LAYOUT_KEYS]
    return items


def read_trace(path):
    """The calls of one trace, in trace order."""
    calls = []
    pids = set()
    opener = gzip.open if path.endswith(".gz") else open
    line = 0
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for line, text in enumerate(f, 1):
                if not text.strip():
                    continue
                try:
                    rec = json.loads(text)
                except json.JSONDecodeError as e:
                    fail(f"{path}:{line}: malformed trace line: {e.msg} (column {e.colno})")
                if not isinstance(rec, dict):
                    fail(f"{path}:{line}: malformed trace line: not a JSON object")
                call = make_call(rec, path, line)
                if call is not None:
                    calls.append(call)
                    pids.add(rec.get("pid"))
    except (OSError, EOFError, UnicodeDecodeError) as e:
        fail(f"{path}:{line + 1}: cannot read the trace: {e}")
    if len(pids) > 1:
        fail(f"{path}: records of {len(pids)} processes; trace one process per file (H3SHIM_TRACE=...%p...)")
    return calls


@dataclass
class Trace:
    """The calls of one trace and the instances of the group in them."""

    path: str
    calls: list
    first: int = 0  # index in `calls` of the first call after the marker
    starts: list = field(default_factory=list)  # index in `calls` of each instance's first call
    complete: bool = False  # every call after the marker has known pointers


def skip_marker(trace, marker):
    """Sets trace.first after the last launch whose kernel name contains `marker` ("" keeps every call)."""
    if not marker:
        return
    hits = [i for i, c in enumerate(trace.calls) if c.kind == LAUNCH and (marker in c.kernel or marker in c.pretty)]
    if not hits:
        fail(f"{trace.path}: no launch of a kernel named like {marker!r} (serve.py --trace-mark launches one; "
             f"--after '' searches the whole trace)")
    trace.first = hits[-1] + 1


def periodic_regions(seq, period):
    """The maximal stretches of `seq` that repeat with `period` at least twice: (start, length) pairs."""
    regions = []
    same = [a == b for a, b in zip(seq, seq[period:])]
    i = 0
    while i < len(same):
        if not same[i]:
            i += 1
            continue
        j = i
        while j < len(same) and same[j]:
            j += 1
        if j - i >= period:
            regions.append((i, j - i + period))
        i = j
    return regions


def instances_of(seq, pattern, regions):
    """The starts of the windows equal to `pattern` in `regions` that come in runs of two or more in a row."""
    period = len(pattern)
    starts = []
    for start, length in regions:
        offset = next((o for o in range(min(period, length - 2 * period + 1))
                       if tuple(seq[start + o:start + o + period]) == pattern), None)
        if offset is None:
            continue
        for s in range(start + offset, start + length - period + 1, period):
            if not starts or s >= starts[-1] + period:
                starts.append(s)
    kept, run = [], []
    for s in starts + [None]:
        if s is not None and run and s == run[-1] + period:
            run.append(s)
            continue
        if len(run) >= 2:
            kept += run
        run = [s]
    return kept


def best_pattern(seq, period):
    """The rotation of `period` calls that repeats most often in a row, and its instances' starts."""
    regions = periodic_regions(seq, period)
    best, best_starts = None, []
    for start, length in regions:
        for o in range(min(period, length - 2 * period + 1)):
            pattern = tuple(seq[start + o:start + o + period])
            starts = instances_of(seq, pattern, regions)
            if len(starts) > len(best_starts):
                best, best_starts = pattern, starts
    return best, best_starts


def find_group(seq, length):
    """The group's pattern and its instances' starts in `seq` (identities numbered as integers)."""
    if length is not None:
        pattern, starts = best_pattern(seq, length)
        if not starts:
            fail(f"no sequence of {length} calls repeats at least twice in a row")
        return pattern, starts
    found = {}
    for period in range(1, len(seq) // 2 + 1):
        pattern, starts = best_pattern(seq, period)
        if starts:
            found[period] = (pattern, starts)
    if not found:
        fail("no sequence of calls repeats at least twice in a row after the marker")
    period = max(found, key=lambda p: (len(found[p][1]) * p, -p))
    while True:
        covered = {i for s in found[period][1] for i in range(s, s + period)}
        inner = {p: sum(i in covered for s in found[p][1] for i in range(s, s + p)) for p in found if p < period}
        shorter = [p for p in inner if 2 * inner[p] > len(covered)]
        if not shorter:
            return found[period]
        period = max(shorter, key=lambda p: (inner[p], -p))


def compatible(a, b):
    """Whether two identities are the same call; a cuDNN call without its variant pack matches any pack."""
    return a == b or (a[0] == b[0] == "cudnn" and None in (a[1], b[1]))


def locate_group(traces, length):
    """Finds the group in every trace (the same in all) and returns its number of calls."""
    numbers = {}
    first = None
    for trace in traces:
        seq = [numbers.setdefault(c.identity, len(numbers)) for c in trace.calls[trace.first:]]
        pattern, starts = find_group(seq, length)
        trace.starts = [trace.first + s for s in starts]
        group = [c.identity for c in trace.calls[trace.starts[0]:trace.starts[0] + len(pattern)]]
        if first is None:
            first = group
        elif len(group) != len(first) or not all(compatible(a, b) for a, b in zip(group, first)):
            fail(f"{trace.path}: the repeating group differs from the one in {traces[0].path}")
    return len(first)


@dataclass
class Slot:
    """A pointer of one call of the group, with its value in every instance."""

    place: tuple  # (parameter index or operand name, byte offset)
    values: list  # the value in every instance; None where the trace does not hold it
    ref: str = "first"
    root: tuple = None  # (call, slot id) of the "first" slot of the buffer that this slot points into
    offset: int = 0  # this slot's offset from the root's value
    views: set = field(default_factory=lambda: {0})  # on a root: offsets at which the group refers to it
    referenced: bool = False  # on a root: a later slot refers to it


@dataclass
class Position:
    """One call of the group, seen in every instance."""

    index: int
    calls: list  # this call in every instance
    slots: list = field(default_factory=list)
    ranges: list = field(default_factory=list)  # (parameter, offset, bytes) that must match
    notes: list = field(default_factory=list)  # comment lines written above the call
    masked: set = field(default_factory=set)  # (parameter, offset) of 8-byte words never compared
    unused: dict = field(default_factory=dict)  # parameter: [(start, end)] the kernel cannot read
    unused_what: list = field(default_factory=list)  # what those ranges are, for the note

    @property
    def kind(self):
        return self.calls[0].kind

    @property
    def known(self):
        """One call of this position whose pointers the trace holds (for a cuDNN call's uids), or None."""
        return next((c for c in self.calls if c.words() is not None), None)


@dataclass
class Signature:
    """What the recorder found: the group's calls, the traces with their instances, the dead buffers."""

    positions: list
    traces: list
    dead: list  # (call index, slot id)


def build_positions(traces, length):
    """The instances (trace, start) and the group's calls with every instance's call at each position."""
    instances = [(t, s) for t in traces for s in t.starts]
    positions = []
    for j in range(length):
        calls = [t.calls[s + j] for t, s in instances]
        first = calls[0]
        if first.kind == GEMM:
            fail(f"call {j} of the group is a cuBLAS GEMM ({first.record['api']}, {first.trace}:{first.line}): "
                 f"format 1 cannot describe it")
        if first.kind == LAUNCH:
            missing = next((c for c in calls if c.params is None), None)
            if missing is not None:
                fail(f"{missing.trace}:{missing.line}: launch without parameter bytes "
                     f"(record the trace with H3SHIM_TRACE_PARAMS=1)")
            mangled = sorted({c.kernel for c in calls if escape_kernel(c.kernel) == c.kernel})
            if len(mangled) > 1:
                fail(f"call {j} of the group has one demangled name but the kernel names {mangled[0]} and "
                     f"{mangled[1]}")
            bad = [s for s in first.identity[6] if not PARAM_MIN <= s <= PARAM_MAX]
            if bad:
                fail(f"call {j} of the group ({first.trace}:{first.line}) has a parameter of {bad[0]} bytes; "
                     f"format 1 allows {PARAM_MIN} to {PARAM_MAX}")
        positions.append(Position(j, calls))
    return instances, positions


class DeviceMemory:
    """The device addresses known in one trace, for the neighbourhood test of pointer slots."""

    def __init__(self, calls):
        self.addresses = sorted({a for c in calls for a in c.device_addresses()})

    def near(self, value):
        i = bisect.bisect_left(self.addresses, value)
        return any(0 <= j < len(self.addresses) and abs(self.addresses[j] - value) <= DEVICE_RADIUS
                   for j in (i - 1, i))

    def add(self, value):
        i = bisect.bisect_left(self.addresses, value)
        if i == len(self.addresses) or self.addresses[i] != value:
            self.addresses.insert(i, value)


def find_slots(positions, instances, traces):
    """Chooses the pointer slots of every call (the rule of the module documentation)."""
    memory = {id(t): DeviceMemory(t.calls) for t in traces}
    owners = [memory[id(t)] for t, _ in instances]
    candidates = []
    for pos in positions:
        if pos.kind != LAUNCH:
            continue
        words = [c.words() for c in pos.calls]
        for place in words[0]:
            values = [w[place] for w in words]
            if any(values):
                candidates.append((pos, place, values))
    accepted = set()
    changed = True
    while changed:
        changed = False
        for pos, place, values in candidates:
            if (pos.index, place) in accepted or not all(v == 0 or m.near(v) for m, v in zip(owners, values)):
                continue
            accepted.add((pos.index, place))
            changed = True
            for m, v in zip(owners, values):
                if v:
                    m.add(v)
    for pos, place, values in candidates:
        if (pos.index, place) not in accepted:
            continue
        if any(v == 0 for v in values):
            # A pointer the kernel reads is 0 in every instance or in none; a word that is 0 in
            # some only is padding (the unused entries of CatArrayBatchedCopy's input array).
            pos.masked.add(place)
            pos.notes.append(f"word {place[0]} {place[1]}: 0 in some instances only: padding, masked")
        else:
            pos.slots.append(Slot(place, values))
    for pos in positions:
        if pos.kind == MATMUL:
            words = [c.words() for c in pos.calls]
            pos.slots = [Slot((name, 0), [w[(name, 0)] for w in words]) for name in MATMUL_OPERANDS]
        elif pos.kind == CUDNN:
            find_cudnn_slots(pos, owners)


def find_cudnn_slots(pos, owners):
    """The slots of a cuDNN call: the unique ids whose pointers are device addresses wherever known."""
    known = pos.known
    if known is None:
        pos.notes.append("the trace holds no variant pack for this call (taken before the shim read variant "
                         "packs): no uids, no slots")
        return
    if any(c.words() is None for c in pos.calls):
        pos.notes.append("some traces hold no variant pack for this call: its slots come from the others")
    words = [c.words() for c in pos.calls]
    for uid in known.record["cudnn"]["uids"]:
        values = [None if w is None else w[(f"uid:{uid}", 0)] for w in words]
        if all(v is None or m.near(v) for m, v in zip(owners, values)) or not any(values):
            pos.slots.append(Slot((f"uid:{uid}", 0), values))
        else:
            pos.notes.append(f"uid {uid}: not a device address in every instance (a pointer to a host scalar, "
                             f"say): not compared")



# ---- Bytes a kernel cannot read (PyTorch's closures) ----
#
# PyTorch fills fixed-size arrays in its kernel closures only as far as it
# uses them; the rest is whatever the stack held, which can be equal in every
# process of one command and different under another. Where the layout is
# known, those bytes are masked from the start instead of by comparison.

OC_MAX_DIMS = 25  # at::cuda::detail::MAX_DIMS: OffsetCalculator's array length
OC_DIVIDER = 12  # IntDivider<uint32_t>: divisor, m1, shift


def int_divider_ok(data, off):
    """Whether data[off:off+12] is IntDivider<uint32_t>(d) for some d >= 1 (as its constructor makes it)."""
    d, m1, shift = (int.from_bytes(data[off + 4 * i:off + 4 * i + 4], "little") for i in range(3))
    if d < 1 or shift > 32 or (1 << shift) < d or (shift > 0 and (1 << (shift - 1)) >= d):
        return False
    return m1 == (((1 << 32) * ((1 << shift) - d)) // d + 1) & 0xFFFF_FFFF


def offset_calculators(data, slot_offsets):
    """(offset, dims, nargs) of every OffsetCalculator<nargs, uint32_t> in a closure's bytes.

    Its layout is `int dims; IntDivider sizes_[25]; uint32_t strides_[25][nargs]`,
    with entries [dims, 25) unset. One is recognised by dims in [1, 25], a valid
    divider for every used dimension, and the closure's data array (nargs
    pointer slots) right after it, which fixes nargs.
    """
    found = []
    for off in range(0, len(data) - 4 - OC_MAX_DIMS * OC_DIVIDER, 4):
        dims = int.from_bytes(data[off:off + 4], "little")
        if not 1 <= dims <= OC_MAX_DIMS:
            continue
        if not all(int_divider_ok(data, off + 4 + OC_DIVIDER * i) for i in range(dims)):
            continue
        strides = off + 4 + OC_MAX_DIMS * OC_DIVIDER
        for nargs in range(1, 9):
            end = strides + 4 * OC_MAX_DIMS * nargs
            first = (end + 7) // 8 * 8
            if (first + 8 * nargs <= len(data) and all(first + 8 * k in slot_offsets for k in range(nargs))
                    and first + 8 * nargs not in slot_offsets):
                found.append((off, dims, nargs))
                break
    return found


CAT_NAME = re.compile(r"CatArrayBatchedCopyI.*?E([jm])Li(\d+)ELi(\d+)ELi(\d+)EEEv")


def cat_metadata_unused(pos, size):
    """Unused ranges of CatArrayBatchedCopy's CatArrInputTensorMetadata parameter (of `size` bytes).

    Its arrays (input pointers, offset, dimSize, nElements, isContiguous, and
    tensorStride of sizes and strides) have batch_size entries, of which the
    launch uses grid.y (one block row per input).
    """
    m = CAT_NAME.search(pos.calls[0].kernel)
    if m is None:
        return []
    index = 4 if m.group(1) == "j" else 8
    dims, batch, stride_size = int(m.group(2)), int(m.group(3)), int(m.group(4))
    arrays = [8, index, index, index, 1]  # entry sizes, in declaration order
    layout, off = [], 0
    for entry in arrays:
        off = (off + entry - 1) // entry * entry
        layout.append((off, entry, batch))
        off += entry * batch
    off = (off + index - 1) // index * index
    layout.append((off, 2 * dims * index, stride_size))
    off += 2 * dims * index * stride_size
    if (off + 7) // 8 * 8 != size:
        return []
    used = pos.calls[0].record["grid"][1]
    return [(start + entry * used, start + entry * count) for start, entry, count in layout if used < count]


# Functors that PyTorch's source declares without captures (`[] GPU_LAMBDA`,
# aten/src/ATen/native/cuda/Copy.cu), by the mangled text naming their type.
# Such a functor is an empty class of one byte that no kernel reads; its value
# is whatever the host stack held (on the second GPU of a process, say, the
# device index), so it is masked. A functor that captures anything is not here.
EMPTY_FUNCTORS = (
    "float16_copy_kernel_cudaERNS_18TensorIteratorBaseEEUlfE_",  # [] (float v) { return Half(v); }
    "direct_copy_kernel_cudaERNS_18TensorIteratorBaseEENKUlvE1_clEvENKUlvE5_clEvEUlfE_",  # [] (float x) { return x; }
)
VECTORIZED = "_ZN2at6native29vectorized_elementwise_kernel"  # (int N, func_t f, array_t data)
LEGACY = "_ZN2at6native18elementwise_kernelILi128ELi4EZNS0_15gpu_kernel_impl"  # (int N, closure)
# A lambda closure that nvcc passes to PyTorch's elementwise kernels ends, when the lambda
# captures anything, with an 8-byte word holding a host address: in the recorded processes a
# heap address different in each (0xf2deda0 .. 0x40aba130), in a second thread 0x7fdd9c044bf0.
# Device code cannot dereference it, and outputs were bitwise equal whatever it held. Such a
# word (the last of the closure parameter, when it differs between instances) is masked whole.
CLOSURE_KERNELS = re.compile(r"_ZN2at6native(29vectorized_elementwise_kernel|"
                             r"18elementwise_kernelILi\d+ELi\d+EZNS0_(15gpu_kernel_impl|22gpu_kernel_impl_nocast)I)")


def empty_functor(kernel):
    """Whether the functor that kernel `kernel` applies is one of EMPTY_FUNCTORS."""
    return any(f in kernel for f in EMPTY_FUNCTORS)


def unused_ranges(pos):
    """{parameter: [(start, end)]} of the bytes the kernel of launch `pos` cannot read."""
    out = {}
    slot_offsets = {}
    for s in pos.slots:
        slot_offsets.setdefault(s.place[0], set()).add(s.place[1])
    pos.unused_what = []
    kernel = pos.calls[0].kernel
    empty = empty_functor(kernel)
    for p, data in enumerate(pos.calls[0].params):
        ranges = cat_metadata_unused(pos, len(data)) if p == 1 else []
        if ranges:
            pos.unused_what.append(f"unused entries of CatArrInputTensorMetadata (parameter {p}, {pos.calls[0].record['grid'][1]} "
                                   f"inputs)")
        if empty and kernel.startswith(VECTORIZED) and p == 1 and len(data) == 1:
            pos.unused_what.append(f"the captureless functor (parameter {p})")
            ranges.append((0, 1))
        for off, dims, nargs in offset_calculators(data, slot_offsets.get(p, set())):
            pos.unused_what.append(f"unused entries of OffsetCalculator<{nargs}> (parameter {p} offset {off}, {dims} dims)")
            strides = off + 4 + OC_MAX_DIMS * OC_DIVIDER
            ranges.append((off + 4 + OC_DIVIDER * dims, strides))
            ranges.append((strides + 4 * dims * nargs, strides + 4 * OC_MAX_DIMS * nargs))
            if empty and kernel.startswith(LEGACY):
                # gpu_kernel_impl's closure: offset_calc, data[nargs], f, dtypes[nargs], in that
                # order; then, to the parameter's end, padding and an 8-byte word that holds a host
                # address (a heap address in the main thread, 0x7f... in another thread) that
                # device code cannot dereference. The closure's members end with dtypes.
                functor = (strides + 4 * OC_MAX_DIMS * nargs + 7) // 8 * 8 + 8 * nargs
                tail = functor + 1 + nargs
                if tail <= len(data):
                    pos.unused_what.append(f"the captureless functor (parameter {p} offset {functor}) and the "
                                           f"closure's tail ({len(data) - tail} bytes from offset {tail})")
                    ranges.append((functor, functor + 1))
                    if tail < len(data):
                        ranges.append((tail, len(data)))
        last = len(data) - 8
        if p == 1 and CLOSURE_KERNELS.match(kernel) and len(data) % 8 == 0 and len(data) >= 16 and \
                len({bytes(c.params[p][last:]) for c in pos.calls}) > 1 and \
                not any(a < len(data) and last < b for a, b in ranges):
            pos.unused_what.append(f"the closure's last word, a host address (parameter {p} offset {last})")
            ranges.append((last, len(data)))
        if ranges:
            out[p] = ranges
    return out


def mask_unused(pos):
    """Masks what the kernel cannot read, and drops the pointer slots found there (stale values)."""
    unused = unused_ranges(pos)
    if not unused:
        return
    inside = lambda p, off: any(a <= off < b for a, b in unused.get(p, []))  # noqa: E731
    dropped = [s for s in pos.slots if inside(*s.place)]
    pos.slots = [s for s in pos.slots if not inside(*s.place)]
    pos.unused = unused
    total = sum(b - a for r in unused.values() for a, b in r)
    pos.notes.append(f"{total} bytes the kernel cannot read are masked: "
                     + ", ".join(pos.unused_what) + (f", with {len(dropped)} stale pointer(s)" if dropped else ""))


def find_bytes(pos):
    """The byte ranges of a launch's parameters that are equal in every instance and are not masked."""
    slots = {s.place for s in pos.slots}
    for p, size in enumerate(pos.calls[0].identity[6]):
        datas = [c.params[p] for c in pos.calls]
        keep = [all(d[b] == datas[0][b] for d in datas) for b in range(size)]
        live = [True] * size
        for a, b in pos.unused.get(p, []):
            keep[a:b] = live[a:b] = [False] * (b - a)
        for off in range(0, size - 7, 8):
            # A host address is looked for in what the kernel can read (a bool beside unused bytes is not one).
            host = any(HOST_LOW <= int.from_bytes(bytes(v if live[off + i] else 0 for i, v in enumerate(d[off:off + 8])),
                                                  "little") < HOST_HIGH for d in datas)
            # A padding word (0 in some instances only) is masked whole, unless part of it is
            # unused: then the bytes the kernel can read (a bool beside padding) are compared.
            padding = (p, off) in pos.masked and all(live[off:off + 8])
            if (p, off) in slots or padding or host:
                keep[off:off + 8] = [False] * 8
        b = 0
        while b < size:
            if not keep[b]:
                b += 1
                continue
            end = b
            while end < size and keep[end] and end - b < BYTES_PER_LINE:
                end += 1
            pos.ranges.append((p, b, datas[0][b:end]))
            b = end


def operand_extent(pos, name):
    """The bytes that a matmul operand spans, from its layout; None when not known."""
    if pos.kind != MATMUL or name not in ("A", "B", "C", "D"):
        return None
    layout = pos.calls[0].record["matmul"][name.lower()]
    size = ELEMENT_SIZES.get(layout["type"])
    if size is None:
        return None
    columns = layout["cols"] if layout["order"] == 0 else layout["rows"]
    return (layout["ld"] * columns + layout["stride"] * max(layout["batch"] - 1, 0)) * size


def ref_text(c, s, d):
    return f"@{c}.{s}" if d == 0 else f"@{c}.{s}{d:+d}"


def slot_name(pos, sid):
    place = pos.slots[sid].place
    return f"call {pos.index} slot {sid} ({place[0]} {place[1]})"


def wire(positions):
    """Sets every slot's REF from the values of all instances (the rule of the module documentation)."""

    def inside(c, s, d):
        """Whether slot s of call c plus d bytes lies in that slot's buffer for certain."""
        target = positions[c].slots[s]
        rc, rs = target.root
        offset = target.offset + d
        extent = operand_extent(positions[rc], positions[rc].slots[rs].place[0])
        return 0 < offset < ALLOCATION_GRANULE or (extent is not None and 0 < offset < extent)

    earlier = []  # (call, slot id, values) of the slots seen so far
    coincidences = []  # (position, slot id, instance, (call, slot id)) of every equality found
    for pos in positions:
        for sid, slot in enumerate(pos.slots):
            slot.root = (pos.index, sid)
            known = [i for i, v in enumerate(slot.values) if v is not None]
            if all(slot.values[i] == 0 for i in known):
                slot.ref = "null"
                continue
            if any(slot.values[i] == 0 for i in known):
                fail(f"{slot_name(pos, sid)}: the pointer is 0 in some instances and not in others")  # matmul, cuDNN
            seen = set()
            for c, s, values in earlier:
                for i in known:
                    if values[i]:
                        d = slot.values[i] - values[i]
                        if d == 0 or (d > 0 and inside(c, s, d)):
                            seen.add((c, s, d))
                            if d == 0:
                                coincidences.append((pos, sid, i, (c, s)))
            # A candidate holds when it holds in every instance where both values are known.
            common = [(c, s, d) for c, s, d in seen
                      if all(positions[c].slots[s].values[i] in (None, slot.values[i] - d) for i in known)]
            if common:
                c, s, d = min(common, key=lambda r: (r[2] != 0, r[2], -r[0], -r[1]))
                slot.ref = ref_text(c, s, d)
                target = positions[c].slots[s]
                slot.root, slot.offset = target.root, target.offset + d
                root = positions[slot.root[0]].slots[slot.root[1]]
                root.referenced = True
                root.views.add(slot.offset)
        earlier += [(pos.index, sid, slot.values) for sid, slot in enumerate(pos.slots)]
    check_coincidences(positions, coincidences)


def check_coincidences(positions, coincidences):
    """Fails when a slot equals an earlier buffer in some instances only while that buffer was live.

    The caching allocator gives a freed buffer's address to the next buffer it
    hands out, so a new buffer can equal an earlier one in some instances (the
    slot is then "first"), or even in all of them (the slot then refers to it).
    The buffer is known to be live only when a later matmul reads it (A, B and
    bias are reads for certain) through a reference to exactly that slot: as
    references name the latest slot that holds the address in every instance,
    no slot in between took the address over. Then the equality was an access
    to the buffer, and the instances disagree on the wiring.
    """
    for pos, sid, i, (c, s) in coincidences:
        slot = pos.slots[sid]
        if slot.ref != "first":
            continue
        reader = next((q.index for q in positions[pos.index + 1:] if q.kind == MATMUL
                       for later in q.slots if later.place[0] in MATMUL_READS and later.ref == ref_text(c, s, 0)),
                      None)
        if reader is None:
            continue
        target = positions[c].slots[s].values
        k = next(k for k, v in enumerate(slot.values) if None not in (v, target[k]) and v != target[k])
        fail(f"{slot_name(pos, sid)}: the instances disagree on the wiring: it equals {ref_text(c, s, 0)}, "
             f"which the matmul at call {reader} reads later, in instance {i} "
             f"({pos.calls[i].trace}:{pos.calls[i].line}) but not in instance {k} "
             f"({pos.calls[k].trace}:{pos.calls[k].line})")


def is_dead(pos, sid, instances, length):
    """Whether the buffer first seen at slot `sid` of `pos` is read after no instance of the group."""
    slot = pos.slots[sid]
    for i, (trace, start) in enumerate(instances):
        if not trace.complete:
            continue
        addresses = {slot.values[i] + d for d in slot.views}
        # The call at this position in each later instance of the trace, where the buffer may be made anew.
        remade = {s + pos.index for s in trace.starts if s > start}
        for q in range(start + length, len(trace.calls)):
            words = trace.calls[q].words()
            closing = q in remade and words.get(slot.place) == slot.values[i]
            if any(v in addresses for place, v in words.items() if not (closing and place == slot.place)):
                return False
            if closing:
                break
    return True


def find_dead(positions, instances, length):
    if not any(t.complete for t, _ in instances):
        return []
    return [(pos.index, sid) for pos in positions for sid, slot in enumerate(pos.slots)
            if slot.ref == "first" and slot.referenced and is_dead(pos, sid, instances, length)]


def record(paths, after="spin", length=None):
    """Reads the traces and returns the Signature of the group that they repeat."""
    traces = [Trace(path, read_trace(path)) for path in paths]
    for trace in traces:
        skip_marker(trace, after)
        trace.complete = all(c.words() is not None for c in trace.calls[trace.first:])
    length = locate_group(traces, length)
    instances, positions = build_positions(traces, length)
    find_slots(positions, instances, traces)
    for pos in positions:
        if pos.kind == LAUNCH:
            mask_unused(pos)
            find_bytes(pos)
    wire(positions)
    return Signature(positions, traces, find_dead(positions, instances, length))


def escape_kernel(name):
    """The name as one token: ' ', tab, '#', '%' and bytes outside printable ASCII percent-escaped."""
    return "".join(ch if "!" <= ch <= "~" and ch not in "#%" else "".join(f"%{b:02X}" for b in ch.encode())
                   for ch in name)


def kernel_token(pos):
    """The KERNEL of a launch: its calls' mangled name; None when the traces have demangled names only."""
    return next((c.kernel for c in pos.calls if escape_kernel(c.kernel) == c.kernel), None)


def mangled_base(name):
    """The innermost name of a mangled nested name (_ZN2at6native9my_kernelI... gives my_kernel)."""
    i = 3 if name.startswith("_ZN") else 2
    last = name
    while i < len(name) and name[i].isdigit():
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        n = int(name[i:j])
        last, i = name[j:j + n], j + n
    return last


def short_name(call):
    """A short human name for the comment above a call."""
    if call.kind == MATMUL:
        m = call.record["matmul"]
        return f"matmul m={m['m']} n={m['n']} k={m['k']}"
    if call.kind == CUDNN:
        return "cudnn"
    name = call.pretty
    for needle, short in OP_NAMES:
        if needle in name:
            return short
    if name.startswith("_Z"):
        return mangled_base(name)
    return re.split(r"[<(]", name)[0].split()[-1].split("::")[-1]


def counts(sig):
    """Calls per kind and slots per REF kind."""
    kinds = [p.kind for p in sig.positions]
    refs = [s.ref for p in sig.positions for s in p.slots]
    return {"calls": len(kinds), LAUNCH: kinds.count(LAUNCH), MATMUL: kinds.count(MATMUL),
            CUDNN: kinds.count(CUDNN), "instances": sum(len(t.starts) for t in sig.traces),
            "slots": len(refs), "first": refs.count("first"), "@": sum(r.startswith("@") for r in refs),
            "null": refs.count("null"), "dead": len(sig.dead)}


def summary(sig):
    n = counts(sig)
    return (f"{n['calls']} calls ({n[LAUNCH]} launch, {n[MATMUL]} matmul, {n[CUDNN]} cudnn), "
            f"{n['instances']} instances in {len(sig.traces)} trace(s); slots: {n['first']} first, {n['@']} @, "
            f"{n['null']} null; {n['dead']} dead")


def render(sig, meta):
    """The signature file's text."""
    demangled = any(p.kind == LAUNCH and kernel_token(p) is None for p in sig.positions)
    out = [f"# Recorded by scripts/record_signature.py from {meta['source']},",
           f"# after the last launch of a kernel named like {meta['after']!r}:",
           f"# {summary(sig)}.",
           "# bytes: equal in every instance; pointer slots and words holding host addresses are left out."]
    if len(sig.traces) == 1:
        out.append("# One process only: padding that held the same host values in every instance may differ "
                   "in another process.")
    if demangled:
        out += ["# WARNING: the traces name kernels demangled only (their \"kernel\" field predates the mangled",
                "# name): KERNEL tokens are demangled names with ' ', tab, '#' and '%' percent-escaped and",
                "# cannot match cuKernelGetName's mangled names. Record again from a trace with mangled names."]
    out.append("h3sig 1")
    for key in ("model", "group", "torch", "cuda", "sm", "created", "cublaslt", "cudnn", "source"):
        if meta.get(key) is not None:
            out.append(f"meta {key} {meta[key]}")
    for pos in sig.positions:
        first = pos.calls[0]
        out.append(f"# {short_name(first)}")
        out += [f"# {note}" for note in pos.notes]
        if pos.kind == LAUNCH:
            rec = first.record
            out.append(f"call {pos.index} launch {kernel_token(pos) or escape_kernel(first.pretty)}")
            out.append("  config " + " ".join(str(v) for v in rec["grid"] + rec["block"] + [rec["shmem"]]))
            out.append("  params " + " ".join(str(s) for s in first.identity[6]))
        elif pos.kind == MATMUL:
            out.append(f"call {pos.index} matmul")
            out.append("  desc " + " ".join(f"{k}={v}" for k, v in first.identity[1:]))
            out += algo_lines(pos)
        else:
            out.append(f"call {pos.index} cudnn")
            if pos.known is not None:
                out.append("  uids " + " ".join(str(u) for u in pos.known.record["cudnn"]["uids"]))
        # Slots keep their ids' order; a launch's bytes go between them, in parameter order.
        lines = [((s.place, 1), f"  slot {sid} {s.place[0]} {s.place[1]} {s.ref}") for sid, s in enumerate(pos.slots)]
        lines += [(((p, off), 0), f"  bytes {p} {off} {data.hex()}") for p, off, data in pos.ranges]
        out += [text for _, text in (sorted(lines) if pos.kind == LAUNCH else lines)]
    out += [f"dead @{c}.{s}" for c, s in sig.dead]
    out.append("end")
    return "\n".join(out) + "\n"


def algo_lines(pos):
    """The algo line of a matmul: the algorithm fields that are equal in every instance."""
    algos = [c.record["matmul"].get("algo") for c in pos.calls]
    if not all(algos):
        return []
    stable = [k for k in ALGO_KEYS if all(a[k] == algos[0][k] for a in algos)]
    lines = ["  algo " + " ".join(f"{k}={algos[0][k]}" for k in stable)] if stable else []
    if len(stable) < len(ALGO_KEYS):
        lines.append("  # algo " + ", ".join(k for k in ALGO_KEYS if k not in stable)
                     + ": differs between instances, not compared")
    return lines


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr and exit status 2."""

    def error(self, message):
        sys.stderr.write(f"{PROG}: error: {message}\n")
        sys.exit(2)


def parse_args(argv):
    p = Parser(prog=PROG, description="Record an h3shim signature file (format 1) from h3shim JSONL traces.")
    p.add_argument("traces", nargs="+", metavar="TRACE", help="trace taken with H3SHIM_TRACE_PARAMS=1 (.gz too)")
    p.add_argument("--torch", required=True, help="PyTorch version of the traced process, e.g. 2.11.0+cu130")
    p.add_argument("--cuda", required=True, type=int, help="CUDA runtime version, e.g. 13000")
    p.add_argument("--sm", required=True, type=int, help="compute capability as one number, e.g. 90")
    p.add_argument("--cublaslt", type=int, help="cuBLASLt version, e.g. 130100")
    p.add_argument("--cudnn", type=int, help="cuDNN version, e.g. 91900")
    p.add_argument("--model", default="minimax-h3-vae-decoder", help="meta model (default %(default)s)")
    p.add_argument("--group", default="block", help="meta group (default %(default)s)")
    p.add_argument("--after", default="spin", help="search after the last launch of a kernel named like this "
                   "(default %(default)s; '' for the whole trace)")
    p.add_argument("--length", type=int, help="the group's number of calls, instead of finding it")
    p.add_argument("--created", help="meta created, YYYY-MM-DD (default today)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the signature here instead of stdout")
    args = p.parse_args(argv)
    for name in ("torch", "model", "group"):
        if not re.fullmatch(r"\S+", getattr(args, name)):
            p.error(f"--{name} must be one word without spaces")
    for name in ("cuda", "sm", "cublaslt", "cudnn"):
        if getattr(args, name) is not None and getattr(args, name) < 0:
            p.error(f"--{name} must not be negative")
    if args.length is not None and args.length < 1:
        p.error("--length must be at least 1")
    try:
        created = datetime.date.fromisoformat(args.created) if args.created else datetime.date.today()
    except ValueError:
        p.error(f"--created {args.created!r} is not a date YYYY-MM-DD")
    args.created = created.isoformat()
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        sig = record(args.traces, args.after, args.length)
    except RecordError as e:
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return 2
    meta = {"model": args.model, "group": args.group, "torch": args.torch, "cuda": args.cuda, "sm": args.sm,
            "created": args.created, "cublaslt": args.cublaslt, "cudnn": args.cudnn,
            "source": " ".join(os.path.basename(p) for p in args.traces), "after": args.after}
    text = render(sig, meta)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    if any(p.kind == LAUNCH and kernel_token(p) is None for p in sig.positions):
        sys.stderr.write(f"{PROG}: warning: the traces have demangled kernel names only; the signature cannot "
                         f"match until recorded from a trace with mangled names\n")
    if len(sig.traces) == 1:
        sys.stderr.write(f"{PROG}: warning: one process only; record two processes so that padding holding "
                         f"host values is masked\n")
    sys.stderr.write(f"{PROG}: {summary(sig)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
