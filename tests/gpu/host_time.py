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
one run. Arm A: `serve.py --floor` without the shim, the block stack at 6
tokens, where the GPU waits on the host (the floor); S: the same under the
shim (it recognises no block at 6 tokens: another host-bound program's
cost); T: the quick decode under the shim with H3SHIM_STATS=1, every block
fused: its own time per block (one-off work and the stats' clock reads
inside its parts taken out, every observed call charged to the blocks).
With --shim-b a second build (arms SB, TB) beside it. The arms alternate,
the first rotating each round; medians.

Also reports the clock source, since every figure rests on clock reads.
Writes tests/evidence/<date>-<gpu>-host-time[-floor].json and .md (and copies
them to $OUT when set).

    python3 tests/gpu/host_time.py [--latent 1,24,12,24,24] [--shim build/libh3shim.so]
    python3 tests/gpu/host_time.py --floor [--rounds 3] [--latent ...] [--shim-b OTHER.so] [--tag=-abc1234]
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


PIN = []  # --pin: taskset's prefix for every child


def child_env(shim, stats):
    """The environment of a child: `shim` is a library path, or (path, {VAR: value}) for an arm with settings."""
    shim, extra = shim if isinstance(shim, tuple) else (shim, {})
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("H3SHIM_")}
    if shim:
        env.update(LD_PRELOAD=shim, **({"H3SHIM_STATS": "1"} if stats else {}), **extra)
    return env


def serve(latent, shim, env_add):
    env = child_env(shim, True)
    env.update(env_add)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "serve.py"), "--latent", latent,
                        "--requests", "3", "--json"], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": p.stderr[-2000:]}
    s = shimstats.parse(p.stderr)
    doc = json.loads(p.stdout)
    return {"median_ms_per_request": doc["summary"]["median_ms"],
            **{k: s.get(k) for k in ("host_ns_per_call", "forward_ns_per_call", "host_ns_quantiles")},
            "stats_lines": [line for line in p.stderr.splitlines() if "shim host time" in line],
            "api_own_ns": api_own_ns(p.stderr)}


def api_own_ns(stderr):
    """The stats' per-entry-point table: calls, errors, the shim's own ns per call."""
    return [line.split("stats: ", 1)[1] for line in stderr.splitlines()
            if "stats: " in line and line.rstrip().split()[-1].isdigit() and len(line.split("stats: ", 1)[1].split()) == 4]


def floor_run(shim):
    """One `serve.py --floor` process: PyTorch's host dispatch cost per block (plus the shim's, with one)."""
    p = subprocess.run(PIN + [sys.executable, os.path.join(ROOT, "scripts", "serve.py"), "--floor", "--json"],
                       env=child_env(shim, False), capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": p.stderr[-2000:]}
    return {"ms_per_block": json.loads(p.stdout)["ms_per_block"]}


def own_run(shim, latent):
    """One quick decode under the shim with stats: its own host time per recognised block."""
    p = subprocess.run(PIN + [sys.executable, os.path.join(ROOT, "scripts", "serve.py"), "--latent", latent,
                              "--requests", "3", "--json"], env=child_env(shim, True), capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": p.stderr[-2000:]}
    s = shimstats.parse(p.stderr)
    r = {k: s.get(k) for k in ("complete", "broken", "observed_calls", "host_ns_per_call", "host_ns_per_call_steady",
                               "host_ns_per_call_net", "stats_reads_per_call", "clock_read_ns", "host_ns_by_part",
                               "ops")}
    r["median_ms_per_request"] = json.loads(p.stdout)["summary"]["median_ms"]
    r["stats_lines"] = [line for line in p.stderr.splitlines() if "shim host time" in line]
    r["api_own_ns"] = api_own_ns(p.stderr)
    per_call = s.get("host_ns_per_call_net", s.get("host_ns_per_call_steady"))
    if s.get("complete") and per_call is not None:
        # Every observed call is charged to the blocks, the few outside them too.
        r["own_us_per_block"] = per_call * s["observed_calls"] / s["complete"] / 1e3
    return r


def floor_main(a, gpu, torch):
    # A: the floor without the shim; S: with it (at 6 tokens it recognises no block: what another host-bound
    # program's launches pay); T: the shim's own time per block in the quick decode, where every block is fused.
    arms = {"A": ("floor", None), "S": ("floor", a.shim), "T": ("own", a.shim)}
    b = (a.shim_b or a.shim, dict(x.split("=", 1) for x in a.env_b))
    if a.shim_b or a.env_b:
        arms.update(SB=("floor", b), TB=("own", b))
    if a.no_s:  # the own time only: more rounds in the same time
        arms = {k: v for k, v in arms.items() if k not in ("S", "SB")}
    names = list(arms)
    runs = {n: [] for n in names}
    for r in range(a.rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            kind, shim = arms[n]
            runs[n].append(floor_run(shim) if kind == "floor" else own_run(shim, a.latent))
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    summary = {}
    for n in names:
        ok = [x for x in runs[n] if "error" not in x]
        key = "ms_per_block" if arms[n][0] == "floor" else "own_us_per_block"
        summary[n] = {key: med([x[key] for x in ok if x.get(key) is not None])}
    # The host's speed swings between processes (up to 2x for seconds at a time): T against the A of its own
    # round, which ran next to it, says more than the two medians.
    for t, f in (("T", "A"), ("TB", "A")):
        if t in names:
            paired = [x["own_us_per_block"] / (y["ms_per_block"] * 1e3) for x, y in zip(runs[t], runs[f])
                      if x.get("own_us_per_block") is not None and y.get("ms_per_block") is not None]
            summary[t]["own_over_floor_paired"] = med(paired)
            summary[t]["own_over_floor_by_round"] = paired
    if "TB" in names:  # the two builds against each other, round by round
        ratios = [x["own_us_per_block"] / y["own_us_per_block"] for x, y in zip(runs["T"], runs["TB"])
                  if x.get("own_us_per_block") and y.get("own_us_per_block")]
        summary["T_over_TB_by_round"] = ratios
        summary["T_over_TB"], lo, hi = shimstats.median_interval(ratios)
        summary["T_over_TB_interval_95"] = [lo, hi]
    for t in ("T", "TB"):
        if summary.get(t, {}).get("own_over_floor_by_round"):
            _, lo, hi = shimstats.median_interval(summary[t]["own_over_floor_by_round"])
            summary[t]["own_over_floor_interval_95"] = [lo, hi]
    doc = {"gpu": gpu, "torch": torch.__version__, "cuda": torch.version.cuda, "clock": clock(), "latent": a.latent,
           "shim": a.shim, "shim_b": a.shim_b, "env_b": a.env_b, "rounds": a.rounds, "pin": a.pin, "summary": summary,
           "runs": runs}
    base = summary["A"]["ms_per_block"]
    lines = [f"# The shim's own host time against the dispatch floor, {gpu}, {datetime.date.today().isoformat()}",
             "", f"torch {doc['torch']}, CUDA {doc['cuda']}; clock source {doc['clock']['clocksource']}. "
             f"{a.rounds} rounds, arms alternating; medians. A: `serve.py --floor` without the shim (the block "
             "stack at 6 tokens, 36 blocks x 20 timed repetitions; the GPU waits on the host): PyTorch's host "
             "dispatch floor per block. S: the same under the shim's defaults (at 6 tokens it recognises no "
             f"block, so this is what another host-bound program's launches pay). T: the quick decode [{a.latent}] "
             "under the shim's defaults with H3SHIM_STATS=1, where every block is fused: the shim's own host time "
             "per block, one-off work and the stats' clock reads inside its parts taken out, every observed call "
             "charged to the blocks." + (f" SB, TB: the same with {a.shim_b or a.shim}"
                                          f"{' and ' + ' '.join(a.env_b) if a.env_b else ''}." if "TB" in names else ""),
             "",
             "| arm | floor ms per block | over A | shim's own us per block | over A's floor | blocks recognised, "
             "broken |", "|---|---|---|---|---|---|"]
    for n in names:
        m, own = summary[n].get("ms_per_block"), summary[n].get("own_us_per_block")
        last = next((x for x in reversed(runs[n]) if "error" not in x), {})
        lines.append(f"| {n} | {'-' if m is None else f'{m:.4f}'} | "
                     f"{'-' if m is None or base is None else f'{m / base:.3f}'} | "
                     f"{'-' if own is None else f'{own:.1f}'} | "
                     f"{'-' if own is None or base is None else f'{own / (base * 1e3) * 100:.2f}%'} | "
                     f"{last.get('complete', '-')}, {last.get('broken', '-')} |")
    for t in ("T", "TB"):
        if summary.get(t, {}).get("own_over_floor_paired") is not None:
            lo, hi = summary[t].get("own_over_floor_interval_95", [None, None])
            lines += ["", f"{t} over the A of the same round: " + ", ".join(
                f"{x * 100:.2f}%" for x in summary[t]["own_over_floor_by_round"]) +
                f"; median {summary[t]['own_over_floor_paired'] * 100:.2f}%" +
                (f" (bootstrap 95% interval of the median {lo * 100:.2f}-{hi * 100:.2f}%)" if lo is not None else "")]
    if summary.get("T_over_TB") is not None:
        lo, hi = summary["T_over_TB_interval_95"]
        lines += ["", "T over TB, round by round: " + ", ".join(f"{x:.3f}" for x in summary["T_over_TB_by_round"]) +
                  f"; median {summary['T_over_TB']:.3f} (bootstrap 95% interval of the median {lo:.3f}-{hi:.3f})"]
    if a.pin:
        lines += ["", f"Every process ran on CPUs {a.pin} (taskset)."]
    lines += ["", "Per round: " + "; ".join(
        f"{n} " + ", ".join(f"{x[k]:.4f}" if x.get(k) is not None else "error" for x in runs[n]
                            for k in ["ms_per_block" if arms[n][0] == "floor" else "own_us_per_block"])
        for n in names)]
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
    ap.add_argument("--no-s", action="store_true", help="with --floor: leave out the arms S and SB")
    ap.add_argument("--env-b", action="append", default=[], metavar="VAR=VALUE",
                    help="with --floor: the arms SB and TB with this setting too (with the same library unless --shim-b)")
    ap.add_argument("--pin", help="run every child on these CPUs (taskset -c), for steadier timings")
    a = ap.parse_args()
    if a.pin:
        PIN[:] = ["taskset", "-c", a.pin]
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
