#!/usr/bin/env python3
"""weight_cache on the GPU: the decode follows every way a serving process
changes its weights between requests, bit for bit.

The same script runs twice, in fresh processes: without the shim (the
reference) and with it (H3SHIM_OP_WEIGHT_CACHE=1, H3SHIM_STATS=1). Each
process decodes one latent, then after each of these changes to the model
decodes it again and hashes the output:

  inplace   a block GEMM weight changed in place (`weight.add_(...)`, a launch)
  copy      a weight overwritten with `copy_` from another tensor (a copy)
  bias      a bias changed in place
  state     `load_state_dict` with every block's weights changed (copies)
  restore   the original state dict loaded back

Every step's SHA-256 must equal the reference process's, and the outputs
must differ from step to step (so a stale cache could not pass), and the
shim's stats must show copies dropped. Writes a JSON document on stdout;
exit status 0 on success.

    python3 tests/gpu/test_weight_cache.py [--latent 1,24,7,16,16] [--blocks 4] [--shim build/libh3shim.so] [--graphs]

With --graphs the decoder replays CUDA graphs (captured at its first call)
and the shim runs with H3SHIM_WEIGHT_CACHE_GRAPHS=1: its stats must also show
graph launches and copies refilled at them.
"""
import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))


def child(latent, blocks, graphs):
    import torch
    import h3_vae
    from h3_tiling import make_plan, parse_latent

    device = torch.device("cuda")
    plan = make_plan(parse_latent(latent), blocks)
    model = h3_vae.build_model(blocks, 0, device)
    decoder = h3_vae.TiledDecoder(model, plan, device, cuda_graphs=graphs)
    x = h3_vae.make_latent(plan.latent, 0, device)
    original = {k: v.clone() for k, v in model.state_dict().items()}
    gen = torch.Generator(device="cuda").manual_seed(7)
    block = model.decoder.blocks[len(model.decoder.blocks) // 2]
    steps = []

    def decode(name):
        with torch.inference_mode(), h3_vae.autocast(device):
            video = decoder(x)
        torch.cuda.synchronize()
        steps.append({"step": name, "sha256": h3_vae.sha256(video)})

    decode("first")
    decode("again")
    with torch.no_grad():
        block.attn.to_qkv.weight.add_(torch.randn(block.attn.to_qkv.weight.shape, generator=gen, device="cuda") * 1e-3)
    decode("inplace")
    with torch.no_grad():
        block.ff.w1.weight.copy_(torch.randn(block.ff.w1.weight.shape, generator=gen, device="cuda") * 0.02)
    decode("copy")
    with torch.no_grad():
        block.ff.w2.bias.mul_(1.5)
    decode("bias")
    changed = {k: (v * 1.01 if ".blocks." in k and k.endswith("weight") else v) for k, v in original.items()}
    model.load_state_dict(changed)
    decode("state")
    model.load_state_dict(original)
    decode("restore")
    print(json.dumps({"steps": steps}))


def run(argv, env):
    p = subprocess.run([sys.executable, __file__, *argv], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--latent", default="1,24,7,16,16")
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--shim", default=os.path.join(ROOT, "build", "libh3shim.so"))
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--fatbin", help="ignored (the op has no kernel of its own; tests/gpu/harness.py passes it)")
    ap.add_argument("--graphs", action="store_true",
                    help="decode by CUDA-graph replay (captured once, replayed after every change) with "
                         "H3SHIM_WEIGHT_CACHE_GRAPHS=1: the copies must be refilled at the launches")
    a = ap.parse_args()
    if a.child:
        child(a.latent, a.blocks, a.graphs)
        return 0
    base_env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("H3SHIM_")}
    argv = ["--child", "--latent", a.latent, "--blocks", str(a.blocks)] + (["--graphs"] if a.graphs else [])
    ref, ref_err = run(argv, base_env)
    shim_env = dict(base_env, LD_PRELOAD=a.shim, H3SHIM_OP_WEIGHT_CACHE="1", H3SHIM_OPS="none", H3SHIM_STATS="1")
    if a.graphs:
        shim_env["H3SHIM_WEIGHT_CACHE_GRAPHS"] = "1"
    got, stats = run(argv, shim_env)
    doc = {"latent": a.latent, "blocks": a.blocks, "cuda_graphs": a.graphs}
    if ref is None or got is None:
        doc.update(error=(ref_err if ref is None else stats)[-2000:], ok=False, elements=0, bits_differing=None)
    else:
        pairs = list(zip(ref["steps"], got["steps"]))
        equal = [r["sha256"] == g["sha256"] for r, g in pairs]
        shas = [r["sha256"] for r in ref["steps"]]
        # Every change must change the output (else a stale copy could pass), except "again".
        changes = {s["step"]: shas[i] != shas[i - 1] for i, s in enumerate(ref["steps"]) if i > 0}
        m = re.search(r"weight_cache: (\d+) copies.*?(\d+) hits, (\d+) fills, (\d+) drops", stats)
        wc = dict(zip(("copies", "hits", "fills", "drops"), map(int, m.groups()))) if m else None
        ok = (all(equal) and all(v for k, v in changes.items() if k not in ("again",)) and not changes["again"]
              and wc is not None and wc["hits"] > 0 and wc["drops"] > 0)
        if a.graphs:  # the graph read copies, and the changes were refilled at its launches
            g = re.search(r"weight_cache graphs: (\d+) launches .*?, (\d+) copies refilled", stats)
            wc["graph_launches"], wc["graph_refills"] = (int(g.group(1)), int(g.group(2))) if g else (0, 0)
            ok &= wc["graph_launches"] > 0 and wc["graph_refills"] > 0
        doc.update(steps=[{"step": r["step"], "reference": r["sha256"], "shim": g["sha256"], "equal": e}
                          for (r, g), e in zip(pairs, equal)], output_changed=changes, weight_cache=wc, ok=ok,
                   elements=len(pairs), bits_differing=sum(not e for e in equal))
    doc["pass"] = doc["ok"]
    json.dump(doc, sys.stdout, indent=1)
    print()
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
