#!/usr/bin/env python3
"""The full H3 decode of a [1,24,37,32,48] latent on the GPU machine, without
and with the shim, eager and with CUDA graphs: checks 84 ViT calls and a
[1,3,124,512,768] output per request, compares every arm's SHA-256 with the
unshimmed eager decode, and writes evidence (JSON and a short .md) under
tests/evidence/ (and $OUT when set).  Arms alternate (A S G SG, twice).

    python3 tests/gpu/full_decode.py [--latent 1,24,37,32,48] [--requests 2] [--rounds 2]
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SERVE = os.path.join(ROOT, "scripts", "serve.py")


def run_arm(latent, requests, shim, graphs):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if shim:
        env["LD_PRELOAD"] = shim
    cmd = [sys.executable, SERVE, "--latent", latent, "--requests", str(requests), "--same-latent", "--json"]
    if graphs:
        cmd.append("--cuda-graphs")
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": p.stderr[-2000:]}
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--latent", default="1,24,37,32,48")
    ap.add_argument("--requests", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--shim", default=os.path.join(ROOT, "build", "libh3shim.so"))
    a = ap.parse_args()
    arms = {"A": (None, False), "S": (a.shim, False), "G": (None, True), "SG": (a.shim, True)}
    docs = {k: [] for k in arms}
    for _ in range(a.rounds):
        for name, (shim, graphs) in arms.items():
            docs[name].append(run_arm(a.latent, a.requests, shim, graphs))
    ref = None
    result = {"latent": a.latent, "requests_per_process": a.requests, "rounds": a.rounds, "arms": {}}
    ok = True
    for name, runs in docs.items():
        errors = [r["error"] for r in runs if "error" in r]
        reqs = [q for r in runs if "error" not in r for q in r["requests"]]
        if errors or not reqs:
            ok = False
            result["arms"][name] = {"error": errors[:1]}
            continue
        if ref is None:
            ref = reqs[0]["sha256_fp32"]
            result["environment"] = runs[0]["environment"]
            result["plan"] = runs[0]["plan"]
        shas = sorted({q["sha256_fp32"] for q in reqs})
        calls = sorted({q["vit_calls"] for q in reqs})
        shapes = sorted({tuple(q["output_shape"]) for q in reqs})
        arm_ok = shas == [ref] and calls == [result["plan"]["vit_calls"]] and len(shapes) == 1
        ok &= arm_ok
        result["arms"][name] = {
            "shim": arms[name][0] is not None, "cuda_graphs": arms[name][1],
            "median_ms_per_request": statistics.median(q["latency_ms"] for q in reqs),
            "sha256_fp32": shas, "vit_calls": calls, "output_shape": [list(s) for s in shapes],
            "bitwise_equal_to_A": shas == [ref], "pass": arm_ok}
    base = result["arms"].get("A", {}).get("median_ms_per_request")
    gbase = result["arms"].get("G", {}).get("median_ms_per_request")
    for name, arm in result["arms"].items():
        ref_ms = gbase if arm.get("cuda_graphs") else base
        if "median_ms_per_request" in arm and ref_ms:
            arm["speedup_vs_unshimmed_same_mode"] = ref_ms / arm["median_ms_per_request"]
    result["pass"] = ok
    env = result.get("environment", {})
    gpu = str(env.get("gpu", "gpu")).lower().replace(" ", "-")
    stem = f"{datetime.date.today().isoformat()}-{gpu}-full-decode"
    out_dir = os.path.join(ROOT, "tests", "evidence")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, stem + ".json"), "w") as f:
        json.dump(result, f, indent=1)
    plan = result.get("plan", {})
    lines = [f"# Full H3 decode, {env.get('gpu', '?')}, {datetime.date.today().isoformat()}", "",
             f"latent [{a.latent}]: {plan.get('vit_calls')} ViT calls, {plan.get('block_calls')} block calls, "
             f"{plan.get('frames')} frames of {plan.get('height')}x{plan.get('width')}; torch {env.get('torch')}; "
             f"{a.rounds} rounds x {a.requests} requests per arm, arms alternating; speed-ups against the "
             "unshimmed arm of the same mode (the shim fuses nothing yet).", "",
             "| arm | shim | CUDA graphs | ViT calls | output | bitwise = A | median ms/request | speed-up |",
             "|---|---|---|---|---|---|---|---|"]
    for name, arm in result["arms"].items():
        if "error" in arm:
            lines.append(f"| {name} | error | | | | | | |")
            continue
        lines.append(f"| {name} | {arm['shim']} | {arm['cuda_graphs']} | {arm['vit_calls']} | {arm['output_shape']} | "
                     f"{arm['bitwise_equal_to_A']} | {arm['median_ms_per_request']:.1f} | "
                     f"{arm.get('speedup_vs_unshimmed_same_mode', 0):.3f} |")
    lines += ["", f"Result: {'pass' if ok else 'FAIL'}", ""]
    with open(os.path.join(out_dir, stem + ".md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    if os.environ.get("OUT"):
        for ext in (".json", ".md"):
            shutil.copy(os.path.join(out_dir, stem + ext), os.environ["OUT"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
