#!/usr/bin/env python3
"""Host time the shim adds on the GPU machine.

--what launch: a host-bound loop of tiny element-wise launches (one
__cudaLaunchKernel each), in ns per launch.  --what floor: the H3 block stack
at 6 tokens (serve.py --floor), in ms per block (42 intercepted calls).
Each runs in fresh processes without the shim, with the shim disabled
(H3SHIM_DISABLE=1), with the shim in its default mode, and with the shim
not interposing driver entry points (H3SHIM_INTERPOSE_DRIVER=0),
alternating A D S N A D S N ..., and the medians are compared.

    python3 tests/gpu/overhead.py [--what launch|floor] [--shim build/libh3shim.so] [--rounds 7] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import time, torch
x = torch.zeros(16, device="cuda")
n = 20000
for _ in range(2000):
    x.add_(1.0)
torch.cuda.synchronize()
t0 = time.perf_counter_ns()
for _ in range(n):
    x.add_(1.0)
t1 = time.perf_counter_ns()
torch.cuda.synchronize()
print((t1 - t0) / n)
"""


SERVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "serve.py")


def one(what, shim, env_extra):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if shim:
        env["LD_PRELOAD"] = shim
    env.update(env_extra)
    if what == "launch":
        cmd = [sys.executable, "-c", CHILD]
    else:
        cmd = [sys.executable, SERVE, "--floor", "--json"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    if what == "launch":
        return float(out.stdout.strip().splitlines()[-1])
    return float(json.loads(out.stdout)["ms_per_block"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shim", default=os.path.abspath("build/libh3shim.so"))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--what", choices=("launch", "floor"), default="launch")
    ap.add_argument("--json")
    a = ap.parse_args()
    arms = {"A no shim": (None, {}), "D shim disabled": (a.shim, {"H3SHIM_DISABLE": "1"}),
            "S shim default": (a.shim, {}),
            "N shim, no driver": (a.shim, {"H3SHIM_INTERPOSE_DRIVER": "0"})}
    samples = {k: [] for k in arms}
    for _ in range(a.rounds):
        for name, (shim, env) in arms.items():
            samples[name].append(one(a.what, shim, env))
    med = {k: statistics.median(v) for k, v in samples.items()}
    base = med["A no shim"]
    unit = "ns/launch" if a.what == "launch" else "ms/block"
    print(f"{'arm':18s} {unit + ' (median)':>20s} {'added':>10s} {'ratio':>7s}")
    for k, v in med.items():
        print(f"{k:18s} {v:20.4f} {v - base:10.4f} {v / base:7.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"what": a.what, "unit": unit, "samples": samples, "median": med}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
