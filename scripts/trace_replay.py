#!/usr/bin/env python3
"""Turns an h3shim trace taken with H3SHIM_TRACE_PARAMS=1 into a replay file
that the fake CUDA stack's framework (tests/fake/framework.c, fw_replay)
issues call by call, so that the shim's matcher can be tested on the CPU
against a real recorded call stream.

    trace_replay.py TRACE[.gz] [--after spin] [-o FILE]

One line per call, space-separated, in trace order:
    L NAME GX GY GZ BX BY BZ SHMEM STREAM NPARAMS SIZE... HEX...
    M STREAM COMPUTE SCALE TRANSA TRANSB EPILOGUE BIAS WS_PTR WS_SIZE A B C D
      (then for each of a b c d: TYPE ORDER ROWS COLS LD BATCH STRIDE)
      (then ID TILE STAGES SPLITK REDUCTION SWIZZLE CUSTOM CLUSTER INNER)
    C STREAM PLAN WS N UID... PTR...
Pointers and streams are hexadecimal without 0x.  Calls before the last
launch of a kernel named like --after, cuGetProcAddress records and cuBLAS
GEMMs are left out.
"""
import argparse
import gzip
import json
import sys


def hexptr(s):
    return "%x" % int(str(s), 16) if s not in (None, "0") else "0"


def lines(records):
    for r in records:
        api = r["api"]
        if "kernel" in r and "params" in r:
            sizes = r["param_sizes"]
            yield " ".join(["L", r["kernel"], *map(str, r["grid"]), *map(str, r["block"]), str(r["shmem"]),
                            hexptr(r["stream"]), str(len(sizes)), *map(str, sizes), *r["params"]])
        elif api == "cublasLtMatmul":
            m = r["matmul"]
            out = ["M", hexptr(r["stream"]), *(str(m[k]) for k in ("compute", "scale", "transa", "transb", "epilogue")),
                   hexptr(m["bias"]), hexptr(m["workspace_ptr"]), str(m["workspace"]),
                   *(hexptr(m[k]) for k in ("A", "B", "C", "D"))]
            for op in "abcd":
                out += [str(m[op][k]) for k in ("type", "order", "rows", "cols", "ld", "batch", "stride")]
            algo = m.get("algo") or {}
            out += [str(algo.get(k, 0)) for k in ("id", "tile", "stages", "splitk", "reduction", "swizzle",
                                                   "custom", "cluster", "inner")]
            yield " ".join(out)
        elif api == "cudnnBackendExecute":
            d = r["cudnn"]
            yield " ".join(["C", hexptr(r["stream"]), hexptr(d["plan"]), hexptr(d["workspace"]), str(len(d["uids"])),
                            *map(str, d["uids"]), *(hexptr(p) for p in d["ptrs"])])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--after", default="spin")
    ap.add_argument("-o", "--output")
    a = ap.parse_args()
    opener = gzip.open if a.trace.endswith(".gz") else open
    with opener(a.trace, "rt") as f:
        records = [json.loads(line) for line in f if line.strip()]
    marks = [i for i, r in enumerate(records) if a.after in r.get("kernel_pretty", r.get("kernel", ""))]
    records = records[marks[-1] + 1:] if marks else records
    out = open(a.output, "w") if a.output else sys.stdout
    with out:
        for line in lines(records):
            out.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
