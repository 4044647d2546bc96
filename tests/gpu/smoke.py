#!/usr/bin/env python3
"""Quick GPU smoke test of the interposer: a few ops of each kind the H3
block uses (autocast Linear -> cublasLtMatmul, SDPA -> cuDNN, element-wise
launches), run in a child process without the shim, with it, and with it
tracing; prints the SHA-256 of the outputs and a summary of the trace.

    python3 tests/gpu/smoke.py [--shim build/libh3shim.so] [--out DIR]
"""
import argparse
import collections
import hashlib
import json
import os
import subprocess
import sys

CHILD = r"""
import hashlib, torch, torch.nn.functional as F
torch.manual_seed(0)
dev = "cuda"
lin = torch.nn.Linear(2048, 6144).to(dev).requires_grad_(False)
x = torch.randn(1, 1797, 2048, device=dev)
outs = []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16):
    for _ in range(3):
        y = lin(torch.nn.functional.rms_norm(x, (2048,), eps=1e-5))
        q, k, v = y.view(1, 1797, 32, 192).chunk(3, -1)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        o = o.transpose(1, 2).nan_to_num(0)
        outs.append(o.float().cpu())
torch.cuda.synchronize()
h = hashlib.sha256()
for o in outs:
    h.update(o.numpy().tobytes())
print("SHA", h.hexdigest())
"""


def run(env_extra, shim):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if shim:
        env["LD_PRELOAD"] = shim
    env.update(env_extra)
    p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True)
    sha = [l.split()[1] for l in p.stdout.splitlines() if l.startswith("SHA ")]
    return p.returncode, (sha[0] if sha else None), p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shim", default=os.path.abspath("build/libh3shim.so"))
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args()
    trace = os.path.join(a.out, "smoke-trace.jsonl")
    if os.path.exists(trace):
        os.remove(trace)
    arms = [("no shim", {}, None), ("shim", {}, a.shim),
            ("shim+trace", {"H3SHIM_TRACE": trace, "H3SHIM_STATS": "1", "H3SHIM_TRACE_PARAMS": "1"}, a.shim),
            ("shim disabled", {"H3SHIM_DISABLE": "1"}, a.shim)]
    shas = {}
    ok = True
    for name, env, shim in arms:
        rc, sha, err = run(env, shim)
        shas[name] = sha
        print(f"{name:14s} rc={rc} sha={sha}")
        if rc != 0 or sha is None:
            ok = False
            print(err[-4000:])
        elif name == "shim+trace":
            print("\n".join([l for l in err.splitlines() if l.startswith("h3shim")][:80]))
    same = len(set(shas.values())) == 1 and None not in shas.values()
    print("bitwise identical across arms:", same)
    if os.path.exists(trace):
        apis, kernels, bad = collections.Counter(), collections.Counter(), 0
        with open(trace) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    bad += 1
                    continue
                apis[r["api"]] += 1
                if "kernel" in r:
                    kernels[r["kernel"][:90]] += 1
        print("trace records per api:", dict(apis), "invalid lines:", bad)
        for k, n in kernels.most_common(25):
            print(f"{n:6d} {k}")
    return 0 if ok and same else 1


if __name__ == "__main__":
    sys.exit(main())
