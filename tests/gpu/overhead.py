#!/usr/bin/env python3
"""Host time the shim adds per intercepted call on the GPU machine.

A host-bound loop of tiny element-wise launches (one __cudaLaunchKernel each)
runs in fresh processes without the shim, with the shim disabled
(H3SHIM_DISABLE=1), and with the shim in its default mode, alternating
A D S A D S ..., and the medians of the per-launch host time are compared.

    python3 tests/gpu/overhead.py [--shim build/libh3shim.so] [--rounds 7] [--json FILE]
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


def one(shim, env_extra):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if shim:
        env["LD_PRELOAD"] = shim
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shim", default=os.path.abspath("build/libh3shim.so"))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json")
    a = ap.parse_args()
    arms = {"A no shim": (None, {}), "D shim disabled": (a.shim, {"H3SHIM_DISABLE": "1"}),
            "S shim default": (a.shim, {})}
    samples = {k: [] for k in arms}
    for _ in range(a.rounds):
        for name, (shim, env) in arms.items():
            samples[name].append(one(shim, env))
    med = {k: statistics.median(v) for k, v in samples.items()}
    base = med["A no shim"]
    print(f"{'arm':18s} {'ns/launch (median)':>20s} {'added ns':>10s}")
    for k, v in med.items():
        print(f"{k:18s} {v:20.1f} {v - base:10.1f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"samples_ns_per_launch": samples, "median": med}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
