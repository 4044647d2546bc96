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

Also reports the clock source, since every figure rests on clock reads.
Writes tests/evidence/<date>-<gpu>-host-time.json and .md (and copies them to
$OUT when set).

    python3 tests/gpu/host_time.py [--latent 1,24,12,24,24] [--shim build/libh3shim.so]
"""
import argparse
import datetime
import json
import os
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--latent", default="1,24,12,24,24")
    ap.add_argument("--shim", default=os.path.join(ROOT, "build", "libh3shim.so"))
    a = ap.parse_args()
    import torch
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no-gpu"
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
