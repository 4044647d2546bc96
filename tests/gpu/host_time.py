#!/usr/bin/env python3
"""The shim's own host time per intercepted call, on the GPU machine, measured
in the process: the quick H3 decode (scripts/serve.py) under the shim with
H3SHIM_STATS=1, with no op (H3SHIM_OPS=none, only observing), with the
matcher alone and with the defaults. The stats' `shim host time` lines give
the mean (one-off work such as kernel registration, module loads and weight
copies' allocations included), the median and the tail of the shim's own time
per call, apart from the real calls it makes for the application (held
launches, ops' launches and cuBLASLt calls). `make bench-cpu` measures the
same on the fake CUDA stack, on a machine without a GPU.

With --floor, instead: the shim's own time against PyTorch's host dispatch
floor (issue 6's eager criterion: under 5% of it), both from one machine in
one run. `serve.py --floor` times the block stack at 6 tokens, where the GPU
waits on the host: arm A without the shim (the floor), S with the shim's
defaults, T the same with H3SHIM_STATS=1 (its own time per block: the steady
ns per call, one-off work left out, times the calls, over the blocks it
recognised), and with --shim-b a second build (arms SB, TB) beside it. The
arms alternate, the first rotating each round; medians.

Also reports the clock source, since every figure rests on clock reads.
Writes tests/evidence/<date>-<gpu>-host-time[-floor].json and .md (and copies
them to $OUT when set).

    python3 tests/gpu/host_time.py [--latent 1,24,12,24,24] [--shim build/libh3shim.so]
    python3 tests/gpu/host_time.py --floor [--rounds 3] [--shim-b OTHER.so] [--tag=-abc1234]
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import shimstats  # noqa: E402  (beside this script)


def clock():
    path = "/sys/devices/system/clocksource/clocksource0/current_clocksource"
    source = open(path).read().strip() if os.path.exists(path) else "?"
    n, t0 = 200000, time.perf_counter_ns()
    for _ in range(n):
        time.perf_counter_ns()
    return {"clocksource": source, "python_perf_counter_ns_per_read": (time.perf_counter_ns() - t0) / n}


def serve(latent, shim, env_add):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("H3SHIM_")}
    env.update(env_add, LD_PRELOAD=shim, H3SHIM_STATS="1")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "serve.py"), "--latent", latent,
                        "--requests", "3", "--json"], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": p.stderr[-2000:]}
    s = shimstats.parse(p.stderr)
    doc = json.loads(p.stdout)
    return {"median_ms_per_request": doc["summary"]["median_ms"],
            **{k: s.get(k) for k in ("host_ns_per_call", "forward_ns_per_call", "host_ns_quantiles")},
            "stats_lines": [line for line in p.stderr.splitlines() if "shim host time" in line],
            # The per-entry-point table: calls, errors, the shim's own ns per call.
            "api_own_ns": [line.split("stats: ", 1)[1] for line in p.stderr.splitlines()
                           if "stats: " in line and line.rstrip().split()[-1].isdigit() and
                           len(line.split("stats: ", 1)[1].split()) == 4]}


def floor_run(shim, stats):
    """One `serve.py --floor` process: ms per block, and with stats the shim's own time per block."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("H3SHIM_")}
    if shim:
        env.update(LD_PRELOAD=shim, **({"H3SHIM_STATS": "1"} if stats else {}))
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "serve.py"), "--floor", "--json"], env=env,
                       capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": p.stderr[-2000:]}
    r = {"ms_per_block": json.loads(p.stdout)["ms_per_block"]}
    if stats:
        s = shimstats.parse(p.stderr)
        r.update({k: s.get(k) for k in ("complete", "broken", "observed_calls", "host_ns_per_call",
                                        "host_ns_per_call_steady", "host_ns_by_part", "ops")})
        r["stats_lines"] = [line for line in p.stderr.splitlines() if "shim host time" in line]
        if s.get("complete") and s.get("host_ns_per_call_steady") is not None:
            # Every observed call is charged to the blocks, the few outside them too.
            r["own_us_per_block"] = s["host_ns_per_call_steady"] * s["observed_calls"] / s["complete"] / 1e3
    return r


def floor_main(a, gpu, torch):
    arms = {"A": (None, False), "S": (a.shim, False), "T": (a.shim, True)}
    if a.shim_b:
        arms.update(SB=(a.shim_b, False), TB=(a.shim_b, True))
    names = list(arms)
    runs = {n: [] for n in names}
    for r in range(a.rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            runs[n].append(floor_run(*arms[n]))
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    summary = {n: {"ms_per_block": med([x["ms_per_block"] for x in runs[n] if "error" not in x])} for n in names}
    for n in names:
        own = [x["own_us_per_block"] for x in runs[n] if x.get("own_us_per_block") is not None]
        if own:
            summary[n]["own_us_per_block"] = med(own)
    doc = {"gpu": gpu, "torch": torch.__version__, "cuda": torch.version.cuda, "clock": clock(),
           "shim": a.shim, "shim_b": a.shim_b, "rounds": a.rounds, "summary": summary, "runs": runs}
    base = summary["A"]["ms_per_block"]
    lines = [f"# The shim's own host time against the dispatch floor, {gpu}, {datetime.date.today().isoformat()}",
             "", f"torch {doc['torch']}, CUDA {doc['cuda']}; clock source {doc['clock']['clocksource']}. "
             f"`serve.py --floor` (the block stack at 6 tokens, 36 blocks x 20 timed repetitions; the GPU waits "
             f"on the host), {a.rounds} rounds, arms alternating; medians. A: no shim; S: the shim's defaults; "
             "T: the same with H3SHIM_STATS=1" + ("; SB, TB: the same with " + a.shim_b if a.shim_b else "") + ".",
             "", "| arm | ms per block | over A | shim's own us per block (steady) | own over A's floor | blocks "
             "recognised, broken |", "|---|---|---|---|---|---|"]
    for n in names:
        m, own = summary[n]["ms_per_block"], summary[n].get("own_us_per_block")
        last = next((x for x in reversed(runs[n]) if "error" not in x), {})
        lines.append(f"| {n} | {m if m is None else f'{m:.4f}'} | "
                     f"{'-' if m is None or base is None else f'{m / base:.3f}'} | "
                     f"{'-' if own is None else f'{own:.1f}'} | "
                     f"{'-' if own is None or base is None else f'{own / (base * 1e3) * 100:.2f}%'} | "
                     f"{last.get('complete', '-')}, {last.get('broken', '-')} |")
    for n in names:
        for x in runs[n][-1:]:
            if "error" in x:
                lines += ["", f"{n} failed: ```{x['error'][-500:]}```"]
            elif x.get("stats_lines"):
                lines += ["", f"{n}, last round:", "", "```"] + x["stats_lines"] + ["```"]
    lines.append("")
    shimstats.write_evidence(gpu, "host-time-floor" + a.tag, doc, lines)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--latent", default="1,24,12,24,24")
    ap.add_argument("--shim", default=os.path.join(ROOT, "build", "libh3shim.so"))
    ap.add_argument("--floor", action="store_true", help="the shim's own time against the dispatch floor")
    ap.add_argument("--shim-b", help="with --floor: a second build timed beside the first")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tag", default="", help="appended to the evidence files' name")
    a = ap.parse_args()
    import torch
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no-gpu"
    if a.floor:
        return floor_main(a, gpu, torch)
    arms = {"observe only (H3SHIM_OPS=none)": {"H3SHIM_OPS": "none"},
            "matcher (H3SHIM_MATCH=1, H3SHIM_OPS=none)": {"H3SHIM_OPS": "none", "H3SHIM_MATCH": "1"},
            "defaults": {},
            "all ops (H3SHIM_OPS=all)": {"H3SHIM_OPS": "all"}}
    doc = {"gpu": gpu, "torch": torch.__version__, "cuda": torch.version.cuda, "latent": a.latent,
           "clock": clock(), "in_process": {k: serve(a.latent, a.shim, e) for k, e in arms.items()}}
    lines = [f"# The shim's own host time per call, {gpu}, {datetime.date.today().isoformat()}", "",
             f"torch {doc['torch']}, CUDA {doc['cuda']}; clock source {doc['clock']['clocksource']} "
             f"({doc['clock']['python_perf_counter_ns_per_read']:.0f} ns per clock read from Python).", "",
             f"In the process: quick decode [{a.latent}], warm-up plus 3 requests, H3SHIM_STATS=1. 'Own' is the "
             "shim's time before forwarding, less the real calls it made for the application meanwhile; the "
             "mean includes one-off work (first-use lookups and registration, module loads, weight copies' "
             "allocations), the quantiles are bucket bounds.", "",
             "| arm | own mean ns | own median ns | own p90 ns | own p99 ns | issuing for the application, mean ns |",
             "|---|---|---|---|---|---|"]
    for name, r in doc["in_process"].items():
        if "error" in r:
            lines.append(f"| {name} | error | | | | |")
            continue
        q = r.get("host_ns_quantiles") or {}
        fmt = lambda k: "-".join(map(str, q[k])) if k in q else "?"  # noqa: E731
        lines.append(f"| {name} | {r['host_ns_per_call']} | {fmt('p50')} | {fmt('p90')} | {fmt('p99')} | "
                     f"{r['forward_ns_per_call']} |")
    for name, r in doc["in_process"].items():
        if r.get("api_own_ns"):
            lines += ["", f"Per entry point, {name}: calls, errors, the shim's own ns per call", "", "```"]
            lines += r["api_own_ns"] + ["```"]
    lines.append("")
    shimstats.write_evidence(gpu, "host-time", doc, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
