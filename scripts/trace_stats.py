#!/usr/bin/env python3
"""Counts the calls in h3shim JSONL traces, and the calls per block from two traces.

  trace_stats.py TRACE.jsonl [--after NAME] [--json] [--top N]
      counts per API, per kernel name and per decision (with its reason)
  trace_stats.py --diff A.jsonl B.jsonl [--after NAME] [--blocks N] [--json] [--check]
      B minus A per API and per kernel, divided by N (default 1): with traces
      of serve.py --blocks 2 (A) and --blocks 3 (B) on the same one-tile
      latent and one request, the calls of one block. --check exits with
      status 1 unless one block is 4 cublasLtMatmul, 1 cudnnBackendExecute
      and 37 runtime kernel launches (DESIGN.md section 2).

--after NAME drops every record up to and including the first launch of a
kernel whose name contains NAME: serve.py --trace-mark launches such a marker
(spin_kernel) just before its first request, so that model construction and
weight generation, whose calls grow with the number of blocks, are not counted.

A trace has one JSON object per line with fields such as "seq", "t_ns", "pid",
"tid", "dev", "stream", "api", "kernel" (absent for library APIs), "grid",
"block", "shmem", "param_sizes", "fp", "decision" and "reason"; only "api",
"kernel", "decision" and "reason" are read here and unknown fields are ignored.
Lines that are not JSON objects are counted and skipped. Output goes to
stdout; with --json it is one JSON document.
"""

import argparse
import json
import sys
from collections import Counter

DESIGN_BLOCK = {"cublasLtMatmul": 4, "cudnnBackendExecute": 1, "runtime_launches": 37}


def launch_kind(api):
    """Classifies an API name: "runtime", "driver" or "graph" launch, or None for other calls."""
    if "GraphLaunch" in api:
        return "graph"
    if api.startswith("cuLaunch"):
        return "driver"
    if api.lstrip("_").startswith("cudaLaunch"):
        return "runtime"
    return None


class MarkerMissing(Exception):
    """The --after marker kernel does not occur in a trace."""


def read_trace(path, after=None):
    """Reads one trace; returns a dict of Counters and the count of skipped lines.

    With `after`, records up to and including the first one whose kernel name
    contains `after` are not counted; MarkerMissing if there is none.
    """
    apis, kernels, decisions, kinds = Counter(), Counter(), Counter(), Counter()
    records = skipped = 0
    waiting = after is not None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                skipped += 1
                continue
            if not isinstance(rec, dict):
                skipped += 1
                continue
            if waiting:
                waiting = after not in str(rec.get("kernel", ""))
                continue
            records += 1
            api = str(rec.get("api", "?"))
            apis[api] += 1
            kernels[str(rec.get("kernel_pretty", rec.get("kernel", "(" + api + ")")))] += 1
            decision = rec.get("decision")
            if decision is not None:
                reason = rec.get("reason")
                decisions[f"{decision} ({reason})" if reason else str(decision)] += 1
            kind = launch_kind(api)
            if kind:
                kinds[kind + "_launches"] += 1
    if waiting:
        raise MarkerMissing(f"{path}: no kernel named like {after!r} (run serve.py with --trace-mark)")
    return {"path": path, "records": records, "skipped_lines": skipped, "api": apis, "kernel": kernels,
            "decision": decisions, "launches": kinds}


def per_block(a, b, blocks):
    """Calls per block: (B - A) / blocks for each API, kernel and launch kind."""
    def delta(key):
        names = set(a[key]) | set(b[key])
        out = {n: (b[key][n] - a[key][n]) / blocks for n in names}
        return {n: int(v) if v == int(v) else v for n, v in sorted(out.items()) if v}

    counts = {"cublasLtMatmul": delta("api").get("cublasLtMatmul", 0),
              "cudnnBackendExecute": delta("api").get("cudnnBackendExecute", 0)}
    counts.update({k: delta("launches").get(k, 0) for k in ("runtime_launches", "driver_launches")})
    return {"api": delta("api"), "kernel": delta("kernel"), "launches": delta("launches"), "block": counts,
            "design": DESIGN_BLOCK, "matches_design": all(counts[k] == v for k, v in DESIGN_BLOCK.items())}


def clip(name, width):
    return name if len(name) <= width else name[:width - 3] + "..."


def print_counter(title, counter, top, width):
    print(f"{title}:")
    for name, n in counter.most_common(top or None):
        print(f"  {n:8d}  {clip(name, width)}")
    if top and len(counter) > top:
        print(f"  ... {len(counter) - top} more")


def print_delta(title, delta, width):
    print(f"{title}:")
    for name, n in sorted(delta.items(), key=lambda kv: (-abs(kv[1]), kv[0])):
        print(f"  {n:+8g}  {clip(name, width)}")


def jsonable(stats):
    return {k: dict(v.most_common()) if isinstance(v, Counter) else v for k, v in stats.items()}


def main(argv=None):
    p = argparse.ArgumentParser(prog="trace_stats.py", description="Counts calls in h3shim JSONL traces.")
    p.add_argument("trace", nargs="?", help="one trace to summarise")
    p.add_argument("--diff", nargs=2, metavar=("A", "B"), help="print B minus A (e.g. --blocks 2 vs --blocks 3)")
    p.add_argument("--after", metavar="NAME", help="count only records after the first kernel named like NAME")
    p.add_argument("--blocks", type=int, default=1, help="number of blocks B has more than A (default 1)")
    p.add_argument("--check", action="store_true", help="with --diff: exit 1 unless one block matches DESIGN.md")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--top", type=int, default=40, help="kernel names to list (0 = all; default 40)")
    p.add_argument("--width", type=int, default=140, help="clip names to this many characters in text output")
    args = p.parse_args(argv)
    if (args.trace is None) == (args.diff is None):
        p.error("give either one TRACE or --diff A B")
    if args.blocks < 1:
        p.error("--blocks must be >= 1")
    try:
        if args.trace:
            stats = read_trace(args.trace, args.after)
        else:
            a, b = (read_trace(path, args.after) for path in args.diff)
    except (OSError, MarkerMissing) as e:
        print(f"trace_stats.py: error: {e}", file=sys.stderr)
        return 2

    if args.trace:
        if args.json:
            print(json.dumps(jsonable(stats), indent=1))
            return 0
        print(f"{stats['path']}: {stats['records']} records, {stats['skipped_lines']} lines skipped")
        print_counter("per api", stats["api"], 0, args.width)
        print_counter("launches", stats["launches"], 0, args.width)
        print_counter("per kernel", stats["kernel"], args.top, args.width)
        if stats["decision"]:
            print_counter("per decision", stats["decision"], 0, args.width)
        return 0

    result = per_block(a, b, args.blocks)
    if args.json:
        doc = {"a": {k: a[k] for k in ("path", "records", "skipped_lines")},
               "b": {k: b[k] for k in ("path", "records", "skipped_lines")}, "blocks": args.blocks, **result}
        print(json.dumps(doc, indent=1))
    else:
        print(f"{b['path']} ({b['records']} records) minus {a['path']} ({a['records']} records), "
              f"per {args.blocks} block(s):")
        print_delta("per api", result["api"], args.width)
        print_delta("per kernel", result["kernel"], args.width)
        c = result["block"]
        print(f"per block: {c['cublasLtMatmul']} cublasLtMatmul, {c['cudnnBackendExecute']} cudnnBackendExecute, "
              f"{c['runtime_launches']} runtime kernel launches, {c['driver_launches']} driver launches; "
              f"DESIGN.md expects 4, 1, 37: {'match' if result['matches_design'] else 'MISMATCH'}")
    return 0 if result["matches_design"] or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
