#!/usr/bin/env python3
"""What the learner did with each call of a traced loop: reads a jsonl trace
(H3SHIM_TRACE) of a program that runs the same iteration in loops ended by a
device synchronisation (robust.py's timed(): 7 loops of 20), takes the last
complete loop, and writes a markdown summary: the calls of one iteration in
order with their `learner` field (kept, or why not), and the counts by
learner field and by entry point over the loop.

    python3 tests/tools/trace_learner.py TRACE.jsonl [--iters 20] [--json OUT.json]
    python3 tests/tools/trace_learner.py --evidence PREFIX DIR WORKLOAD...

The second form joins what session.sh's learner-costs step left in DIR for
each workload (learner-trace-W.json, learner-stats-W-learn1.log and -learn0.log:
robust.py's child with stats, its pairs observed over paused) into
PREFIX.json and PREFIX.md.

A call the learner kept takes the whole observed path at every iteration;
one passed by as a refused group's goes by its wrapper from the second
iteration on (learning.md), so the kept calls per iteration are what
learning costs a program that is not the H3 block.
"""
import argparse
import collections
import json
import sys

# What ends a loop (torch.cuda.synchronize); a stream synchronisation inside an iteration is one of its calls.
SYNCS = ("cudaDeviceSynchronize", "cuCtxSynchronize")


def short(name, width=70):
    name = name or ""
    return name if len(name) <= width else name[:width - 3] + "..."


def evidence(prefix, d, workloads):
    """The learner-costs step's files for `workloads` in directory `d`, joined into PREFIX.json and .md."""
    import os
    import re
    import subprocess
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip().splitlines()[0]
    except (OSError, IndexError):
        gpu = "GPU unknown"
    try:
        import torch
        torch_version = torch.__version__
    except ImportError:
        torch_version = "unknown"
    out, md = {"gpu": gpu, "torch": torch_version}, [
        "# The learner against other models' calls (session.sh learner-costs)\n",
        f"{gpu}, torch {torch_version}. For each workload of robust.py alone: a traced process, what the learner "
        "did with each call of one iteration (tests/tools/trace_learner.py); then robust.py's child with "
        "H3SHIM_STATS=1 and its pairs of one iteration, observing over paused, with learning on and off.\n"]
    for w in workloads:
        t = json.load(open(os.path.join(d, f"learner-trace-{w}.json")))
        item = {"trace": {k: t[k] for k in ("calls_per_iter", "by_learner", "by_api")}, "stats": {}}
        for learn in ("1", "0"):
            lines = open(os.path.join(d, f"learner-stats-{w}-learn{learn}.log")).read().splitlines()
            res = next((json.loads(x) for x in reversed(lines) if x.startswith("{")), {}).get(w, {})
            shim = res.get("shim", {})
            item["stats"][f"learn{learn}"] = {
                "observed_over_paused": shim.get("observed_over_paused"),
                "host_observed_over_paused": shim.get("host_observed_over_paused"),
                "own_share_observed": shim.get("own_share_observed"), "pairs": shim.get("pairs"),
                "ms": res.get("ms"),
                "lines": [re.sub(r"^h3shim: \d+ stats: ", "", x) for x in lines
                          if re.search(r"stats: (__cuda|cublas|cudnn|forwarded|learn: |shim host time:)", x)]}
        out[w] = item
        md.append(f"## {w}\n\nTraced (robust.py's timed loops), what the learner did with one iteration's "
                  f"{t['calls_per_iter']:.0f} calls:\n")
        md += [f"- {k}: {v / t['iters']:.1f} an iteration" for k, v in sorted(t["by_learner"].items())]
        for learn, st in item["stats"].items():
            md.append(f"\nWith stats, H3SHIM_LEARN={learn[-1]}, {st['pairs']} pairs of one iteration in one process: "
                      f"observed over paused {st['observed_over_paused']:.4f} (host dispatch "
                      f"{st['host_observed_over_paused']:.4f}), the shim's own time {100 * st['own_share_observed']:.2f}% "
                      f"of the observed loops:\n")
            md += [f"    {x}" for x in st["lines"]]
        md.append("")
    json.dump(out, open(prefix + ".json", "w"), indent=1)
    open(prefix + ".md", "w").write("\n".join(md) + "\n")


def main():
    if len(sys.argv) > 3 and sys.argv[1] == "--evidence":
        evidence(sys.argv[2], sys.argv[3], sys.argv[4:])
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--iters", type=int, default=20, help="iterations a loop")
    ap.add_argument("--json")
    a = ap.parse_args()
    recs = []
    with open(a.trace) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    recs.append(json.loads(line))
                except ValueError:
                    pass  # a record cut at exit
    ends = [i for i, r in enumerate(recs) if r.get("api") in SYNCS]
    if len(ends) < 2:
        print(f"trace_learner: {len(ends)} synchronisations in {len(recs)} records: no complete loop", file=sys.stderr)
        return 1
    loop = [r for r in recs[ends[-2] + 1:ends[-1]] if r.get("api") not in SYNCS]
    per = len(loop) // a.iters
    by_learner = collections.Counter(r.get("learner", "-") for r in loop)
    by_api = collections.Counter((r.get("api"), r.get("learner", "-")) for r in loop)
    first = loop[:per]
    out = {"records": len(recs), "loop_calls": len(loop), "iters": a.iters, "calls_per_iter": len(loop) / a.iters,
           "by_learner": dict(by_learner), "by_api": {f"{k[0]} {k[1]}": v for k, v in by_api.items()},
           "iteration": [{"api": r.get("api"), "kernel": r.get("kernel_pretty") or r.get("kernel"),
                          "grid": r.get("grid"), "learner": r.get("learner"), "reason": r.get("reason")}
                         for r in first]}
    print(f"# What the learner did, {a.trace}\n")
    print(f"The last complete loop: {len(loop)} calls, {len(loop) / a.iters:.1f} an iteration ({a.iters} a loop).\n")
    print("| learner | calls a loop | an iteration |\n|---|---|---|")
    for k, v in by_learner.most_common():
        print(f"| {k} | {v} | {v / a.iters:.1f} |")
    print("\n| entry point | learner | calls a loop |\n|---|---|---|")
    for (api, lr), v in by_api.most_common():
        print(f"| {api} | {lr} | {v} |")
    print(f"\nThe loop's first {per} calls (one iteration's worth), in order:\n")
    print("| # | entry point | kernel | grid | learner |\n|---|---|---|---|---|")
    for i, r in enumerate(first):
        print(f"| {i} | {r.get('api')} | {short(r.get('kernel_pretty') or r.get('kernel'))} | {r.get('grid', '')} "
              f"| {r.get('learner', '-')} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
