#!/usr/bin/env python3
"""Warmed GPU time of each fused op against the unfused calls it replaces,
for the validation command: `serve.py --profile-block --json` without the
shim (A) and with its defaults (S), one H3 block at 1797 tokens, the
profiler over 20 eager blocks (the profiler's first not counted) and a
captured block's graph replays; the rows of the block (each op's calls
unfused in A, its kernel in S) side by side (profile_table.py). Evidence:
tests/evidence/<date>-<gpu>-op-latency<TAG>.{md,json}. Exit status 0 when
both arms ran and every fused kernel ran in S.

    python3 tests/gpu/op_latency.py [--shim build/libh3shim.so] [--mode inference|serving] [--tag SUFFIX]
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import profile_table  # noqa: E402
import shimstats  # noqa: E402

FUSED = ("h3_swiglu", "h3_rmsnorm", "h3_residual_rmsnorm", "h3_qk_norm_rope")


def arm(shim, mode):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("H3SHIM_")}
    if shim:
        env["LD_PRELOAD"] = shim
        env.update(shimstats.asked_env())
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "serve.py"), "--profile-block", "--json",
                        "--mode", mode], env=env, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return {"error": p.stderr[-2000:]}
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shim", default=os.path.join(ROOT, "build", "libh3shim.so"))
    ap.add_argument("--mode", default="inference", choices=["inference", "serving"])
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    docs = [("A", arm(None, a.mode)), ("S", arm(a.shim, a.mode))]
    errors = {n: d["error"] for n, d in docs if "error" in d}
    kernels = [n for n, _ in docs[1][1].get("kernels", {}).get("ms_per_block_by_kernel", [])]
    ran = {f: any(k.startswith(f) for k in kernels) for f in FUSED}
    ok = not errors and all(ran.values())
    lines = ([profile_table.table(docs, f"Each op's GPU time against the calls it replaces ({a.mode} mode)")]
             if not errors else ["# op latency", "", f"errors: {errors}"])
    lines += ["", f"Fused kernels seen in S: {ran}", "", f"Result: {'pass' if ok else 'FAIL'}", ""]
    gpu = docs[0][1].get("environment", {}).get("gpu", "gpu")
    shimstats.write_evidence(gpu, f"op-latency{a.tag}", {"mode": a.mode, "arms": dict(docs), "fused_seen": ran,
                                                         "pass": ok}, lines)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
