#!/usr/bin/env python3
"""The full H3 decode of a [1,24,37,32,48] latent on the GPU machine, without
and with the shim, eager and with CUDA graphs: checks 84 ViT calls and a
[1,3,124,512,768] output per request, compares every arm's SHA-256 with the
unshimmed eager decode, and writes evidence (JSON and a short .md) under
tests/evidence/ (and $OUT when set).  Arms alternate (A S G SG R RG, twice):
R and RG run the engine with the replay op (H3SHIM_OP_REPLAY=1); in R every
block call of every decode (warm-up included) must be recognised and each of
its groups run by the op.

    python3 tests/gpu/full_decode.py [--latent 1,24,37,32,48] [--requests 2] [--rounds 2]
        [--arms A,S,G,SG,R,RG] [--mode serving|inference] [--tag SUFFIX]

A runs always, and G whenever a CUDA-graph arm does (its speed-up's reference).
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SERVE = os.path.join(ROOT, "scripts", "serve.py")


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shimstats  # noqa: E402  (beside this script)

# The ops on by default on SM 90 (README, "What is validated where").
DEFAULT_OPS = ["swiglu", "weight_cache", "norm_cast", "residual_norm", "qk_norm_rope"]


def run_arm(latent, requests, shim, graphs, shim_env, mode="serving", serve_args=()):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("H3SHIM_")}
    if shim:
        env["LD_PRELOAD"] = shim
        env.update(shimstats.asked_env())
        env.update(shim_env, H3SHIM_STATS="1")
    cmd = [sys.executable, SERVE, "--latent", latent, "--requests", str(requests), "--same-latent", "--json",
           "--mode", mode, *serve_args]
    if graphs:
        cmd.append("--cuda-graphs")
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": p.stderr[-2000:]}
    doc = json.loads(p.stdout)
    doc["shim_stats"] = p.stderr[-60000:] if shim else None
    return doc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--latent", default="1,24,37,32,48")
    ap.add_argument("--requests", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--shim", default=os.path.join(ROOT, "build", "libh3shim.so"))
    ap.add_argument("--arms", default="A,S,G,SG,R,RG",
                    help="comma-separated subset of A,S,G,SG,R,RG,O,OG,WG,NG,K,KG,B,BG,L,LG,V,VG,U,UN (A always "
                         "runs; V and VG: the defaults with H3SHIM_VERIFY=3; U and UN: --shim-b, a build with a "
                         "wrong kernel, with and without it; O and OG: "
                         "H3SHIM_OPS=--ops; WG and NG: the defaults with H3SHIM_WEIGHT_CACHE_GRAPHS=1 and =0, CUDA "
                         "graphs; K and KG: the defaults with H3SHIM_SKIP_RELEASED=0, every output written; L and LG: "
                         "the defaults with H3SHIM_SIGNATURES at an empty directory, every signature learned in "
                         "the process)")
    ap.add_argument("--ops", default="swiglu", help="H3SHIM_OPS of arms O and OG")
    ap.add_argument("--tag", default="", help="suffix of the evidence files' names")
    ap.add_argument("--mode", default="serving", choices=["serving", "inference"],
                    help="serve.py --mode: the serving pipeline's (default) or inference_mode")
    ap.add_argument("--serve-args", default="",
                    help="more serve.py arguments, one string (e.g. '--tile 7,16,12 --tile-batch 2')")
    ap.add_argument("--shim-b", help="another build of the shim: arm P runs it eager with H3SHIM_OPS=--ops, "
                                     "alternating with O (unless B or BG is asked for); arms B and BG run it with "
                                     "its defaults, eager and CUDA graphs, alternating with S and SG: two builds "
                                     "in one run")
    a = ap.parse_args()
    replay = {"H3SHIM_OP_REPLAY": "1", "H3SHIM_OPS": "none"}
    ops = {"H3SHIM_OPS": a.ops}
    arms = {"A": (None, False, {}), "S": (a.shim, False, {}), "G": (None, True, {}), "SG": (a.shim, True, {}),
            "R": (a.shim, False, replay), "RG": (a.shim, True, replay),
            "O": (a.shim, False, ops), "OG": (a.shim, True, ops), "P": (a.shim_b, False, ops),
            "B": (a.shim_b, False, {}), "BG": (a.shim_b, True, {}),
            "WG": (a.shim, True, {"H3SHIM_WEIGHT_CACHE_GRAPHS": "1"}),
            "NG": (a.shim, True, {"H3SHIM_WEIGHT_CACHE_GRAPHS": "0"}),
            "K": (a.shim, False, {"H3SHIM_SKIP_RELEASED": "0"}), "KG": (a.shim, True, {"H3SHIM_SKIP_RELEASED": "0"})}
    learn = {"H3SHIM_SIGNATURES": tempfile.mkdtemp(prefix="h3shim-no-signatures-")}
    arms.update({"L": (a.shim, False, learn), "LG": (a.shim, True, learn)})
    # Verify mode: V and VG the defaults with H3SHIM_VERIFY=3; U the --shim-b build (one with
    # a wrong kernel: make KERNEL_DEFS=-DH3_TEST_SWIGLU_ULP) with it, which must stay bitwise
    # equal with the wrong op off, and UN that build without it, which must not.
    verify = {"H3SHIM_VERIFY": "3", "H3SHIM_SIGNATURES": os.path.join(ROOT, "signatures")}
    arms.update({"V": (a.shim, False, verify), "VG": (a.shim, True, verify), "U": (a.shim_b, False, verify),
                 "UN": (a.shim_b, False, {"H3SHIM_SIGNATURES": verify["H3SHIM_SIGNATURES"]})})
    wanted = set(a.arms.split(","))
    graphs_wanted = any(arms[k][1] for k in wanted if k in arms)  # G: the graph arms' reference
    arms = {k: v for k, v in arms.items()
            if (k == "A" or k in wanted or (k == "G" and graphs_wanted) or
                (k == "P" and a.shim_b and not wanted & {"B", "BG", "U", "UN"})) and
            (k not in ("P", "B", "BG", "U", "UN") or a.shim_b)}
    docs = {k: [] for k in arms}
    for _ in range(a.rounds):
        for name, (shim, graphs, shim_env) in arms.items():
            docs[name].append(run_arm(a.latent, a.requests, shim, graphs, shim_env, a.mode,
                                        a.serve_args.split()))
    ref = None
    result = {"latent": a.latent, "mode": a.mode, "serve_args": a.serve_args, "requests_per_process": a.requests, "rounds": a.rounds,
              "arms": {}}
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
        # UN, the wrong build without verify mode, must change the bits (else the test cannot fail).
        arm_ok = (shas != [ref] if name == "UN" else shas == [ref]) and calls == [result["plan"]["vit_calls"]] \
            and len(shapes) == 1
        engine = None
        if arms[name][0] and name != "UN":
            # Every process decodes a warm-up request and `requests` timed ones.
            blocks = result["plan"]["block_calls"] * (1 + a.requests)
            if "H3SHIM_VERIFY" in arms[name][2] or any("stats: verify: op" in (r["shim_stats"] or "") for r in runs):
                # verify mode asked for, or on by itself (an op run where it is not validated)
                wrong = ("swiglu",) if name == "U" else ()
                verdicts = [shimstats.verify_verdict(r["shim_stats"], blocks, DEFAULT_OPS, wrong) for r in runs]
            elif "H3SHIM_OPS" in arms[name][2]:
                verdicts = [shimstats.ops_verdict(r["shim_stats"], blocks, a.ops.split(",")) for r in runs]
            elif "H3SHIM_OP_REPLAY" in arms[name][2]:
                verdicts = [shimstats.replay_verdict(r["shim_stats"], blocks) for r in runs]
            else:  # the defaults: every op on
                verdicts = [shimstats.ops_verdict(r["shim_stats"], blocks, DEFAULT_OPS) for r in runs]
            engine = {"verdicts": [t for _, t in verdicts], "stats": [shimstats.parse(r["shim_stats"]) for r in runs],
                      # the learner's own lines: what it learned, refused and why
                      "learn_lines": [[ln.split("stats: ", 1)[1] for ln in (r["shim_stats"] or "").splitlines()
                                       if "stats: learn:" in ln] for r in runs]}
            if not arms[name][1]:  # eager: every block seen; with graphs only the captures are
                engine["pass"] = all(v for v, _ in verdicts)
                arm_ok &= engine["pass"]
        ok &= arm_ok
        result["arms"][name] = {
            "shim": arms[name][0] is not None, "cuda_graphs": arms[name][1], "shim_env": arms[name][2],
            "engine": engine,
            "median_ms_per_request": statistics.median(q["latency_ms"] for q in reqs),
            # Per process, each request's latency and the host time to make its launches (the
            # spread between processes, and whether the request was bound by the host).
            "requests_ms": [[[round(q["latency_ms"], 1), round(q.get("host_ms", 0), 1)] for q in r["requests"]]
                            for r in runs if "error" not in r],
            "gpu_memory": [r.get("gpu_memory") for r in runs if "error" not in r],
            # the untimed first request of each process: first sights, weight copies, verify mode's runs
            "warmup_ms": [[round(ms, 1) for ms in r.get("warmup_ms", [])] for r in runs if "error" not in r],
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
    plan = result.get("plan", {})
    lines = [f"# Full H3 decode, {env.get('gpu', '?')}, {datetime.date.today().isoformat()}", "",
             f"latent [{a.latent}]: {plan.get('vit_calls')} ViT calls, {plan.get('block_calls')} block calls, "
             f"{plan.get('frames')} frames of {plan.get('height')}x{plan.get('width')}; serve.py --mode {a.mode}"
             f"{' ' + a.serve_args if a.serve_args else ''}; "
             f"torch {env.get('torch')}; "
             f"{a.rounds} rounds x {a.requests} requests per arm, arms alternating; speed-ups against the "
             "unshimmed arm of the same mode. S/SG: the shim with its defaults; R/RG: the replay op holds back "
             f"and replays every group; O/OG: H3SHIM_OPS={a.ops}"
             + (f"; P: the same ops with the shim build {a.shim_b}" if a.shim_b else "")
             + ("; WG: the defaults with H3SHIM_WEIGHT_CACHE_GRAPHS=1 (weight_cache inside the captures)"
                if "WG" in result["arms"] else "")
             + ("; NG: the defaults with H3SHIM_WEIGHT_CACHE_GRAPHS=0 (weight_cache falls back inside the captures)"
                if "NG" in result["arms"] else "")
             + ("; K/KG: the defaults with H3SHIM_SKIP_RELEASED=0 (every output the unfused launches wrote is "
                "written)" if "K" in result["arms"] or "KG" in result["arms"] else "")
             + ("; L/LG: the defaults with no signature loaded, every signature learned in the process (each "
                "process learns from its first instances, which run unfused)"
                if "L" in result["arms"] or "LG" in result["arms"] else "")
             + ("; V/VG: the defaults with H3SHIM_VERIFY=3 (each op range's first 3 runs compared on the GPU "
                "with the calls it replaces, which run as made)" if "V" in result["arms"] or "VG" in result["arms"]
                else "")
             + ("; U: --shim-b, a build with a wrong kernel (one element of every swiglu product one unit in the "
                "last place off), with H3SHIM_VERIFY=3; UN: that build without it, whose bits must differ"
                if "U" in result["arms"] or "UN" in result["arms"] else "") + ".", "",
             "| arm | shim | CUDA graphs | ViT calls | output | bitwise = A | median ms/request | speed-up "
             "| first (untimed) request, ms | GPU memory used, MiB (PyTorch peak reserved) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, arm in result["arms"].items():
        if "error" in arm:
            lines.append(f"| {name} | error | | | | | | | | |")
            continue
        lines.append(f"| {name} | {arm['shim']} | {arm['cuda_graphs']} | {arm['vit_calls']} | {arm['output_shape']} | "
                     f"{arm['bitwise_equal_to_A']} | {arm['median_ms_per_request']:.1f} | "
                     + (f"{arm['speedup_vs_unshimmed_same_mode']:.3f}" if "speedup_vs_unshimmed_same_mode" in arm
                        else "-") + " | " + ", ".join(f"{w[0]:.0f}" for w in arm["warmup_ms"] if w) + " | "
                     + ", ".join(f"{m['device_used_mib']:.0f} ({m['torch_max_reserved_mib']:.0f})"
                                 for m in arm["gpu_memory"] if m) + " |")
    for name, arm in result["arms"].items():
        if arm.get("engine"):
            lines += ["", f"Arm {name} ({arm['shim_env']}{', CUDA graphs: only the captured calls pass the shim' if arm['cuda_graphs'] else ''}):"]
            lines += [f"- {v}" for v in arm["engine"]["verdicts"]]
            for st in arm["engine"]["stats"]:
                extra = []
                if "weight_cache" in st:
                    extra.append("weight_cache {copies} copies, {mib} MiB, {hits} hits, {fills} fills, "
                                 "{drops} drops".format(**st["weight_cache"]))
                if "host_ns_per_call" in st:
                    extra.append(f"shim's own host time {st['host_ns_per_call']} ns per observed call "
                                 f"(beside {st['forward_ns_per_call']} ns issuing held launches and ops' calls)")
                if "host_ns_per_call_steady" in st:
                    extra.append(f"{st['host_ns_per_call_steady']} ns without one-off work")
                if extra:
                    lines.append("- " + "; ".join(extra))
    lines += ["", f"Result: {'pass' if ok else 'FAIL'}", ""]
    shimstats.write_evidence(env.get("gpu", "gpu"), f"full-decode{a.tag}", result, lines)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
