#!/usr/bin/env python3
"""The shim in the ways real servers use CUDA (issue 7), on the GPU machine.

Each item runs in fresh processes, without the shim and with it (its
defaults, H3SHIM_STATS=1), alternating for --rounds rounds; every output's
SHA-256 must be the same in every process:

  workloads  models that are not H3 must pass through untouched: a
             torchvision ResNet-50 (FP32, TF32 on), a timm ViT-B/16 (bf16
             autocast), a transformers Llama decoder built from a config
             (FP16), a 3-D convolution stack (FP16 autocast), SDPA with a
             boolean mask and causal (bf16), FP32 GEMMs with TF32 off and on,
             and a torch.compile'd MLP (Triton kernels); random init, fixed
             seeds; and an FP16 MLP captured in a CUDA graph and replayed
             on new inputs (the shim tracks graphs it sees captured).  Also times each for the overhead (a warm loop of 20
             iterations to a synchronisation, median of 7 loops): the ratio
             of the two arms per round, then the median over rounds (use 5+
             rounds for a 1% claim; arms alternate which goes first), and,
             in arm S, the shim's own host time over the same loops as a
             share of their wall time (h3shim_host_time, in the process);
             and arm P: the shim with its plain defaults (no stats), each
             workload timed in 15 pairs of loops in one process, observing
             and paused (h3shim_pause); H3_ROBUST_PAIR_ITERS=N makes the
             loops N iterations (as many iterations in all: 300 pairs of
             one), so that a pair's two loops meet the same host.  H3_ROBUST_WORKLOADS=NAME,... runs
             only those workloads.
  threads    two threads decoding different H3 tiles at once, each on its own
             stream and both on the default stream, against the same tiles
             decoded one after the other.
  children   DataLoader workers started by fork and by spawn (the shim is
             preloaded in them too), then an H3 tile decoded in the parent.
  compiled   one H3 block compiled with torch.compile (Inductor's Triton
             kernels), at 1797 tokens.
  nccl       (two GPUs) the tiles of a request split between two ranks with
             torch.distributed over NCCL and all-gathered, the shim in both
             ranks, against the same tiles on one GPU.
  variants   the H3 decoder as users change it: batch 2, a smaller tile, bf16
             autocast, no autocast, grad mode, another norm eps, forward
             hooks on a block and on a GEMM, FP16 reduced-precision reductions
             off, deterministic algorithms (every torch.empty filled); the
             stats lines show where the ops ran and where the match broke.
  implementations
             the block written other ways (block_impls.py: the norm by hand,
             three q/k/v GEMMs, interleaved RoPE, addcmul or in-place
             residuals, another SDPA backend, ...), each in both decode modes,
             at a shape of its own and at the committed signature's 1797
             tokens; arms A, S and L (no signature loaded: everything learned),
             three processes an arm; the report says which ops ran where.

    python3 tests/gpu/robust.py [--shim build/libh3shim.so] [--rounds 2] [--items workloads,threads,children,compiled,variants,nccl] [--tag SUFFIX]

H3_ROBUST_SIGNATURES=DIR gives the shim's arms H3SHIM_SIGNATURES=DIR (an empty
directory: every signature is learned in the process).

Writes tests/evidence/<date>-<gpu>-robust.json and .md (and copies to $OUT).
Exit status 0 when every item is bitwise equal across arms.
"""
import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
ITEMS = ("workloads", "threads", "children", "compiled", "variants", "implementations", "nccl")


# ---------------------------------------------------------------- child side

def sha(t):
    import torch
    return hashlib.sha256(t.detach().contiguous().cpu().view(torch.uint8).numpy()).hexdigest()


def shim_host_time():
    """(own ns, observed calls) of the preloaded shim so far, or None: no shim, or H3SHIM_STATS off."""
    import ctypes
    try:
        fn = ctypes.CDLL(None).h3shim_host_time
    except AttributeError:
        return None
    own, calls, issuing = ctypes.c_ulonglong(), ctypes.c_ulonglong(), ctypes.c_ulonglong()
    return (own.value, calls.value) if fn(ctypes.byref(own), ctypes.byref(calls), ctypes.byref(issuing)) == 0 else None


def shim_pause():
    """The preloaded shim's h3shim_pause, or None (no shim)."""
    import ctypes
    try:
        fn = ctypes.CDLL(None).h3shim_pause
    except AttributeError:
        return None
    fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
    return fn


def timed(fn, loops=7, iters=20, warmup=5):
    """(output, ms per iteration, shim): the median over `loops` of a warm loop of `iters`
    iterations timed by host clock to a device synchronisation (what a server sees: host
    dispatch and GPU time together, the launch gaps included); `shim`, under the shim with
    H3SHIM_STATS=1, is its own host time over those loops as a share of their wall time, and its
    observed calls per iteration (measured in the process: no other process's noise in it).
    With H3_ROBUST_PAUSE=1 (arm P: the shim with its defaults, no stats), `shim` instead compares
    loops with the shim observing against loops with its observation paused (h3shim_pause), in
    pairs of alternating order in this one process: wall and host (the loop's dispatch, before
    its synchronisation) times, and whether both kinds of loop gave the same bits."""
    import torch
    for _ in range(warmup):
        out = fn()
    torch.cuda.synchronize()
    pause = shim_pause() if os.environ.get("H3_ROBUST_PAUSE") == "1" else None
    if pause is not None:  # H3_ROBUST_PAIR_ITERS=N: pairs of N-iteration loops, as many iterations in all
        pair_iters = int(os.environ.get("H3_ROBUST_PAIR_ITERS", str(iters)))
        return paired(fn, pause, max(1, (2 * loops + 1) * iters // pair_iters), pair_iters, out)
    times = []
    before = shim_host_time()
    for _ in range(loops):
        t0 = time.perf_counter()
        for _ in range(iters):
            out = fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3 / iters)
    after = shim_host_time()
    shim = None
    if before is not None and after is not None:
        shim = {"own_share": (after[0] - before[0]) / (sum(times) * iters * 1e6),
                "calls_per_iter": (after[1] - before[1]) / (loops * iters)}
    return out, statistics.median(times), shim


def paired(fn, pause, pairs, iters, out):
    """timed()'s arm P: `pairs` pairs of loops, one observed and one paused, alternating which
    goes first; the medians of the pairs' ratios, observed over paused."""
    import torch
    wall, host, ms, outs, walls = [], [], [], {}, []
    own, observed_s = 0, 0.0  # with H3SHIM_STATS=1 (arm Q): the shim's own time in the observed loops
    for i in range(pairs):
        got = {}
        for paused in ((True, False) if i % 2 == 0 else (False, True)):
            if pause(1 if paused else 0) != 0:
                pause(0)
                return out, None, {"pause_refused": True}
            before = shim_host_time()
            t0 = time.perf_counter()
            for _ in range(iters):
                out = fn()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            after = shim_host_time()
            got[paused] = (t2 - t0, t1 - t0)
            if paused not in outs:  # the first loop of each kind (a hash of the Llama's logits is 131 MB read)
                outs[paused] = sha(out)
            if not paused and before is not None and after is not None:
                own, observed_s = own + after[0] - before[0], observed_s + t2 - t0
        pause(0)
        wall.append(got[False][0] / got[True][0])
        walls.append((got[False][0], got[True][0]))
        host.append(got[False][1] / got[True][1])
        ms.append(got[False][0] * 1e3 / iters)
    return out, statistics.median(ms), {"observed_over_paused": statistics.median(wall),
                                        "host_observed_over_paused": statistics.median(host),
                                        "pairs": pairs, "iters": iters, "pair_ratios": [round(x, 4) for x in wall],
                                        "host_pair_ratios": [round(x, 4) for x in host],
                                        "sum_observed_over_paused": sum(w[0] for w in walls) / sum(w[1] for w in walls),
                                        "paused_same_bits": outs[True] == outs[False],
                                        **({"own_share_observed": own / (observed_s * 1e9)} if observed_s else {})}


def child_workloads():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    dev = "cuda"
    res = {}

    def run(name, build):
        torch.manual_seed(0)
        fn = build()
        with torch.inference_mode():
            out, ms, shim = timed(fn)
        res[name] = {"sha256": sha(out.float() if out.dtype != torch.float32 else out), "ms": ms}
        if shim is not None and shim.get("paused_same_bits") is False:  # fails the item: no process gives this
            res[name]["sha256"] += " (but its loops with the shim paused gave other bits)"
        if shim is not None:
            res[name]["shim"] = shim

    def resnet():
        import torchvision
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        m = torchvision.models.resnet50().to(dev).eval()
        x = torch.randn(32, 3, 224, 224, device=dev)
        return lambda: m(x)

    def vit():
        import timm
        m = timm.create_model("vit_base_patch16_224", pretrained=False).to(dev).eval()
        x = torch.randn(32, 3, 224, 224, device=dev)

        def f():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return m(x)
        return f

    def llama():
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
                          num_key_value_heads=4, vocab_size=32000, max_position_embeddings=1024)
        m = LlamaForCausalLM(cfg).to(dev, torch.float16).eval()
        ids = torch.randint(0, 32000, (4, 512), device=dev)
        return lambda: m(input_ids=ids).logits

    def conv3d():
        m = nn.Sequential(nn.Conv3d(32, 64, 3, padding=1), nn.SiLU(), nn.Conv3d(64, 64, 3, padding=1),
                          nn.GroupNorm(8, 64), nn.Conv3d(64, 32, 3, padding=1)).to(dev).eval()
        x = torch.randn(2, 32, 16, 64, 64, device=dev)

        def f():
            with torch.autocast("cuda", dtype=torch.float16):
                return m(x)
        return f

    def sdpa():
        q, k, v = (torch.randn(4, 16, 1024, 64, device=dev, dtype=torch.bfloat16) for _ in range(3))
        mask = torch.rand(4, 1, 1024, 1024, device=dev) > 0.2

        def f():
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            return a + F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return f

    def gemm(tf32):
        def build():
            torch.backends.cuda.matmul.allow_tf32 = tf32
            a, b = torch.randn(4096, 4096, device=dev), torch.randn(4096, 4096, device=dev)
            return lambda: a @ b + torch.addmm(a, a, b, beta=0.5)
        return build

    def compiled_mlp():
        m = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024), nn.LayerNorm(1024)).to(dev)
        c = torch.compile(m.eval())
        x = torch.randn(64, 256, 1024, device=dev)
        return lambda: c(x)

    def graphed_mlp():
        # A CUDA graph captured under the shim that is not H3: the shim tracks
        # its capture and launches (weight_cache's graph mode) and must change
        # nothing. The input changes between replays.
        m = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).to(dev).eval()
        static_x = torch.randn(64, 1024, device=dev)
        g = torch.cuda.CUDAGraph()
        with torch.no_grad():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), torch.autocast("cuda", dtype=torch.float16):
                for _ in range(2):
                    m(static_x)
            torch.cuda.current_stream().wait_stream(side)
            with torch.cuda.graph(g), torch.autocast("cuda", dtype=torch.float16):
                static_y = m(static_x)
        xs = [torch.randn(64, 1024, device=dev) for _ in range(3)]

        def f():
            outs = []
            for x in xs:
                static_x.copy_(x)
                g.replay()
                outs.append(static_y.clone())
            return torch.cat(outs)
        return f

    only = [w for w in os.environ.get("H3_ROBUST_WORKLOADS", "").split(",") if w]  # default: all of them
    for name, build in (("resnet50_fp32_tf32", resnet), ("vit_b16_bf16", vit), ("llama_8l_fp16", llama),
                        ("conv3d_fp16", conv3d), ("sdpa_mask_causal_bf16", sdpa), ("gemm_fp32", gemm(False)),
                        ("gemm_tf32", gemm(True)), ("compiled_mlp_triton", compiled_mlp),
                        ("cuda_graph_mlp_fp16", graphed_mlp)):
        if only and name not in only:
            continue
        try:
            run(name, build)
        except Exception as e:  # a missing package: reported, not hidden
            res[name] = {"error": f"{type(e).__name__}: {e}"[:300]}
    return res


def h3_model(blocks=4):
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import h3_vae
    import torch
    return h3_vae, h3_vae.build_model(blocks, 0, torch.device("cuda"))


def child_threads():
    import threading
    import torch
    h3_vae, model = h3_model()
    dev = torch.device("cuda")
    tiles = [h3_vae.make_latent((1, 24, 7, 16, 16), seed, dev) for seed in (1, 2)]

    def decode(tile, stream, out, i):
        with torch.cuda.stream(stream), torch.inference_mode(), h3_vae.autocast(dev):
            for _ in range(3):
                y = model(tile)
            out[i] = sha(y)
            stream.synchronize()

    res = {}
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    serial = [None, None]
    for i in range(2):
        decode(tiles[i], streams[i], serial, i)
    res["serial"] = serial
    default = torch.cuda.default_stream()
    for rnd in range(3):
        for name, pick in (("threads", lambda i: streams[i]), ("threads_shared_stream", lambda i: default)):
            # Own streams, then both threads on the default stream: PyTorch's allocator gives memory
            # one thread frees to the other's next allocation there.
            got = [None, None]
            ths = [threading.Thread(target=decode, args=(tiles[i], pick(i), got, i)) for i in range(2)]
            for t in ths:
                t.start()
            for t in ths:
                t.join()
            res[f"{name}_{rnd}"] = got
    return res


class _Squares:
    def __len__(self):
        return 8

    def __getitem__(self, i):
        import torch
        return torch.arange(16, dtype=torch.float32) * i


def child_children():
    import multiprocessing
    import torch
    res = {}
    for method in ("fork", "spawn"):
        loader = torch.utils.data.DataLoader(_Squares(), batch_size=4, num_workers=2,
                                             multiprocessing_context=multiprocessing.get_context(method))
        res[f"dataloader_{method}"] = sha(torch.cat([b.flatten() for b in loader]))
    h3_vae, model = h3_model()
    dev = torch.device("cuda")
    with torch.inference_mode(), h3_vae.autocast(dev):
        res["h3_tile_after_children"] = sha(model(h3_vae.make_latent((1, 24, 7, 16, 16), 3, dev)))
    return res


def child_compiled():
    import torch
    h3_vae, model = h3_model(blocks=1)
    dev = torch.device("cuda")
    block = model.decoder.blocks[0]
    h, cos, sin = h3_vae.block_inputs(model, (7, 16, 16), dev, 0)
    c = torch.compile(block)
    with torch.inference_mode(), h3_vae.autocast(dev):
        eager = block(h, cos, sin)
        out = c(h, cos, sin)
        out = c(h, cos, sin)
    return {"compiled_block": sha(out), "eager_block": sha(eager)}


def child_implementations():
    import block_impls  # beside this script
    names = block_impls.GROUPS[int(os.environ.get("H3_ROBUST_IMPL_GROUP", "0"))]
    res, shapes = block_impls.run(names, sha)
    return {**res, "tokens_of": shapes}


def child_variants():
    """The H3 decoder as users change it; each must decode exactly as without the shim (the
    ops run where the signature still matches and fall back where it does not)."""
    import torch
    h3_vae, model = h3_model()
    dev = torch.device("cuda")
    tile = h3_vae.make_latent((1, 24, 7, 16, 16), 4, dev)
    res = {}

    def decode(name, x=tile, autocast=True, dtype=torch.float16, grad=False):
        ctx = torch.enable_grad() if grad else torch.inference_mode()
        try:
            with ctx, torch.autocast("cuda", dtype=dtype, enabled=autocast):
                for _ in range(2):
                    y = model(x)
            res[name] = sha(y)
        except Exception as e:  # the model itself rejects some variants: the same with and without the shim
            res[name] = f"raised {type(e).__name__}: {str(e)[:120]}"
        torch.cuda.synchronize()

    decode("as_recorded")
    decode("batch_2", x=torch.cat([tile, h3_vae.make_latent((1, 24, 7, 16, 16), 5, dev)]))
    decode("smaller_tile", x=tile[..., :12, :12].contiguous())
    decode("bf16_autocast", dtype=torch.bfloat16)
    decode("no_autocast_fp32", autocast=False)
    for p in model.parameters():
        p.requires_grad_(True)
    decode("grad_mode", grad=True)
    model.requires_grad_(False)
    blocks = model.decoder.blocks
    for b in blocks:
        b.norm1.eps = b.norm2.eps = 1e-6
    decode("norm_eps_1e-6")
    for b in blocks:
        b.norm1.eps = b.norm2.eps = h3_vae.EPS
    handle = blocks[1].register_forward_hook(lambda m, i, o: o * 1.0)
    decode("forward_hook_on_block_1")
    handle.remove()
    handle = blocks[2].attn.to_qkv.register_forward_hook(lambda m, i, o: o.clone())
    decode("forward_hook_on_to_qkv")
    handle.remove()
    decode("as_recorded_again")
    # PyTorch's own switches that change the block's calls, each set for its variant and put back.
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    decode("fp16_reduced_precision_reduction_off")
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS needs it
    torch.use_deterministic_algorithms(True)  # and torch.empty's memory filled (NaN) by a launch of its own
    decode("deterministic_algorithms")
    decode("deterministic_algorithms_batch_2", x=torch.cat([tile, h3_vae.make_latent((1, 24, 7, 16, 16), 5, dev)]))
    torch.use_deterministic_algorithms(False)
    decode("as_recorded_last")
    return res


def _nccl_rank(rank, world, port, out):
    """One rank: decodes its share of the tiles on its GPU, all-gathers every tile's pixels."""
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    h3_vae, model = h3_model()
    dev = torch.device("cuda", rank)
    tiles = [h3_vae.make_latent((1, 24, 7, 16, 16), 10 + i, dev) for i in range(4)]
    with torch.inference_mode(), h3_vae.autocast(dev):
        mine = torch.stack([model(t) for t in tiles[rank::world]])
        gathered = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(gathered, mine)
    if rank == 0:  # tile i is gathered[i % world][i // world]
        order = torch.stack([gathered[i % world][i // world] for i in range(len(tiles))])
        with open(out, "w") as f:
            json.dump({"tiles_two_gpus": sha(order)}, f)
    dist.destroy_process_group()


def child_nccl():
    """The tiles of one request split between two ranks (NCCL, one GPU each), all-gathered; and
    the same tiles decoded one after the other on one GPU in this process."""
    import socket
    import tempfile
    import torch
    import torch.multiprocessing as mp
    if torch.cuda.device_count() < 2:
        return {"skipped": "fewer than 2 GPUs"}
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    out = tempfile.mktemp(suffix=".json")
    mp.spawn(_nccl_rank, args=(2, port, out), nprocs=2, join=True)
    res = json.load(open(out))
    h3_vae, model = h3_model()
    dev = torch.device("cuda", 0)
    tiles = [h3_vae.make_latent((1, 24, 7, 16, 16), 10 + i, dev) for i in range(4)]
    with torch.inference_mode(), h3_vae.autocast(dev):
        res["tiles_one_gpu"] = sha(torch.stack([model(t) for t in tiles]))
    return res


# --------------------------------------------------------------- parent side

# A row of the stats' table of calls per entry point: calls, errors, own ns a call, describing.
API_ROW = re.compile(r"stats: (?:__cuda|cuda|cu[A-Z]|cublas|cudnn)\w*\s+\d+\s+\d+\s+\d+")
# The workloads' arms timed in pairs in one process (observing against paused): what each adds
# to the shim's defaults, and whether its stats are on. P the defaults, N learning off (what the
# learner costs beside P), Q the defaults with stats (the shim's own time beside the pairs).
PAIRED_ARMS = {"P": ({}, False), "N": ({"H3SHIM_LEARN": "0"}, False), "Q": ({}, True)}


def pooled_pairs(rounds, key="pair_ratios"):
    """Every pair of every round of an arm timed in pairs: the median of their ratios (`key`:
    wall, or host_pair_ratios: the host's dispatch alone) and its bootstrap 95% interval, or None
    when there is none."""
    import shimstats  # beside this script
    pooled = [r for x in rounds for r in x.get(key, [])]
    return dict(zip(("median", "low", "high"), shimstats.median_interval(pooled)), n=len(pooled)) if pooled else None


def run_child(item, shim, paired_in_process=False, stats=True, shim_env=None, child_env=None):
    """One child process for `item`: without the shim, with it (stats on unless not `stats`,
    `shim_env` added), and with `paired_in_process` the workloads timed in pairs (PAIRED_ARMS);
    `child_env` in every arm."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("H3SHIM_")}
    env.pop("H3_ROBUST_PAUSE", None)
    env.update(child_env or {})
    if shim:
        env.update(LD_PRELOAD=shim)
        import shimstats  # beside this script
        env.update(shimstats.asked_env())
        if os.environ.get("H3_ROBUST_SIGNATURES"):  # another signature directory (an empty one: all learned)
            env.update(H3SHIM_SIGNATURES=os.environ["H3_ROBUST_SIGNATURES"])
        if stats:
            env.update(H3SHIM_STATS="1")
        if paired_in_process:
            env.update(H3_ROBUST_PAUSE="1")
        env.update(shim_env or {})
    t0 = time.time()
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", item], env=env, capture_output=True,
                       text=True, timeout=400)
    out = {"rc": p.returncode, "seconds": round(time.time() - t0, 1)}
    try:
        out["result"] = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        out["error"] = p.stderr[-1500:]
    if shim and stats:  # every process's block line (a child's too), then at most 20 more
        lines = p.stderr.splitlines()
        out["shim_stats"] = [ln for ln in lines if "stats: signature" in ln] + \
            [ln for ln in lines if "stats: op " in ln or "WARN" in ln or "ERROR" in ln][:20] + \
            [ln for ln in lines if "stats: learn: " in ln or "shim host time" in ln or API_ROW.search(ln)
             or "stats: lt_shadow: " in ln or "stats: configuration calls noted" in ln] + \
            ([ln for ln in lines if "stats: plan " in ln] if item == "implementations" else [])
    return out


def run_children(item, shim, **kw):
    """run_child, or for the implementations one child per group of block_impls.GROUPS, merged."""
    if item != "implementations":
        return run_child(item, shim, **kw)
    import block_impls  # beside this script
    parts = [run_child(item, shim, child_env={"H3_ROBUST_IMPL_GROUP": str(g)}, **kw)
             for g in range(len(block_impls.GROUPS))]
    out = {"rc": max(p["rc"] for p in parts), "seconds": round(sum(p["seconds"] for p in parts), 1),
           "result": {}, "shim_stats": [], "tokens_of": {}}
    for p in parts:
        result = dict(p.get("result") or {})
        out["tokens_of"].update(result.pop("tokens_of", {}))
        out["result"].update(result)
        out["shim_stats"] += p.get("shim_stats", [])
        if "error" in p:
            out.setdefault("error", "")
            out["error"] += p["error"]
        if "result" not in p:
            out["result"][f"group_{parts.index(p)}"] = "error: no result"
    return out


def implementations_fused(runs):
    """{arm: {implementation: what its own shape's learned signatures did}} from the stats lines:
    blocks complete and broken, and the ops planned."""
    found = {}
    for arm in ("S", "L"):
        for r in runs.get(arm, [])[:1]:
            by_rows = {}
            for ln in r.get("shim_stats", []):
                m = re.search(r"stats: signature (\S+?-n(\d+)): (\d+) complete, (\d+) broken", ln)
                if m:
                    e = by_rows.setdefault(int(m.group(2)), {"complete": 0, "broken": 0, "ops": set(), "sigs": set()})
                    e["complete"] += int(m.group(3))
                    e["broken"] += int(m.group(4))
                    e["sigs"].add(m.group(1))
            for ln in r.get("shim_stats", []):
                m = re.search(r"stats: plan (\S+?-n(\d+)): op (\w+) takes", ln)
                if m and int(m.group(2)) in by_rows:
                    by_rows[int(m.group(2))]["ops"].add(m.group(3))
            found[arm] = {name: {"complete": by_rows.get(t, {}).get("complete", 0),
                                 "broken": by_rows.get(t, {}).get("broken", 0),
                                 "ops": sorted(by_rows.get(t, {}).get("ops", ()))}
                          for name, t in sorted(r.get("tokens_of", {}).items())}
    return found


def fused_everywhere(stats_lines, processes):
    """Whether each of `processes` processes recognised the H3 block and broke no attempt (H3SHIM_STATS)."""
    found = re.findall(r"h3shim: (\d+) stats: signature \S+: (\d+) complete, (\d+) broken", "\n".join(stats_lines))
    return len({pid for pid, _, _ in found}) == processes and all(int(c) > 0 and b == "0" for _, c, b in found)


def flatten(result, prefix=""):
    """{key: sha} for every output hash of a child's result."""
    flat = {}
    for k, v in (result or {}).items():
        if isinstance(v, dict):
            if "sha256" in v:
                flat[prefix + k] = v["sha256"]
            elif "error" in v:
                flat[prefix + k] = "error: " + v["error"]
        elif isinstance(v, list):
            for i, x in enumerate(v):
                flat[f"{prefix}{k}[{i}]"] = x
        else:
            flat[prefix + k] = v
    return flat


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", choices=ITEMS)
    ap.add_argument("--shim", default=os.path.join(ROOT, "build", "libh3shim.so"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--items", default=",".join(ITEMS))
    ap.add_argument("--tag", default="", help="suffix of the evidence files' names")
    ap.add_argument("--workload-arms", default="A,S,P",
                    help="the workloads' arms: A no shim, S stats, P pairs observed/paused, N the same with "
                         "learning off (H3SHIM_LEARN=0), Q the pairs with stats (the shim's own time in the same "
                         "process as the pairs)")
    ap.add_argument("--deadline", type=float, default=0,
                    help="seconds from the start: begin no round that would end past it, and report the rounds "
                         "done (0: none)")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(globals()[f"child_{a.child}"]()))
        return 0
    sys.path.insert(0, HERE)
    import shimstats
    import torch
    doc, ok, lines = {"rounds": a.rounds, "items": {}}, True, []
    started, longest = time.time(), 0.0
    for item in a.items.split(","):
        arms = tuple(a.workload_arms.split(",")) if item == "workloads" else \
            ("A", "S", "L") if item == "implementations" else ("A", "S")
        runs = {arm: [] for arm in arms}
        rounds_done = 0
        for rnd in range(a.rounds):  # the arms rotate: none always goes first
            if a.deadline and time.time() - started + longest > a.deadline and rounds_done > 0:
                break  # a round like the longest so far would outrun the caller's limit
            t0 = time.time()
            for arm in arms[rnd % len(arms):] + arms[:rnd % len(arms)]:
                shim_env, stats = PAIRED_ARMS.get(arm, ({}, True))
                if arm == "L":  # nothing loaded: every signature learned in the process
                    shim_env = {"H3SHIM_SIGNATURES": tempfile.mkdtemp(prefix="h3shim-robust-")}
                runs[arm].append(run_children(item, a.shim if arm != "A" else None,
                                              paired_in_process=arm in PAIRED_ARMS, stats=stats, shim_env=shim_env))
            longest, rounds_done = max(longest, time.time() - t0), rounds_done + 1
        flats = [flatten(r.get("result")) for arm in arms for r in runs[arm]]
        keys = sorted(set().union(*flats))
        outputs = {}
        for k in keys:
            vals = {f.get(k) for f in flats}
            outputs[k] = {"same_in_every_process": len(vals) == 1 and None not in vals
                          and not str(next(iter(vals))).startswith("error"), "values": sorted(map(str, vals))[:3]}
        if item == "nccl":  # two ranks must give the one-GPU bits
            for f in flats:
                if "skipped" not in f and f.get("tiles_two_gpus") != f.get("tiles_one_gpu"):
                    outputs["two_gpus_equal_one_gpu"] = {"same_in_every_process": False}
            # ... and the shim must fuse in both ranks and the parent, not fall back quietly on GPU 1
            # (it did, until the recorder masked the one-byte functors that hold stack left-overs).
            for r in runs["S"]:
                if "skipped" not in flatten(r.get("result")) and not fused_everywhere(r.get("shim_stats", []), 3):
                    outputs["fused_in_every_process"] = {"same_in_every_process": False,
                                                         "values": [ln for ln in r.get("shim_stats", [])
                                                                    if "stats: signature" in ln]}
        if item == "threads":  # the threads' hashes must also equal the serial ones
            for f in flats:
                for rnd in range(3):
                    for i in range(2):
                        for name in ("threads", "threads_shared_stream"):
                            if f.get(f"{name}_{rnd}[{i}]") != f.get(f"serial[{i}]"):
                                outputs.setdefault(f"{name}_equal_serial", {"same_in_every_process": False})
        item_ok = bool(keys) and all(o["same_in_every_process"] for o in outputs.values()) and \
            all(r["rc"] == 0 for arm in runs.values() for r in arm)
        if keys == ["skipped"]:  # e.g. nccl on one GPU: neither pass nor fail, and said so
            lines.append(f"## {item}: skipped ({flats[0]['skipped']})\n")
            doc["items"][item] = {"skipped": flats[0]["skipped"]}
            continue
        entry = {"pass": item_ok, "outputs": outputs, "runs": runs, "rounds_done": rounds_done}
        if item == "implementations":
            entry["fused_at_own_shape"] = implementations_fused(runs)
        if item == "workloads":
            over = {}
            for k in keys:
                ratios = [s["result"][k]["ms"] / r["result"][k]["ms"] for r, s in zip(runs.get("A", []), runs.get("S", []))
                          if "ms" in (r.get("result") or {}).get(k, {}) and "ms" in (s.get("result") or {}).get(k, {})]
                shares = [s["result"][k]["shim"]["own_share"] for s in runs.get("S", [])
                          if "shim" in (s.get("result") or {}).get(k, {})]
                if ratios:
                    over[k] = {"ratio_shim_over_none": statistics.median(ratios), "rounds": ratios}
                if shares:  # the shim's own time / wall time, in the process: the overhead, without noise
                    over.setdefault(k, {})["shim_own_share"] = max(shares)
                    over[k]["shim_own_share_rounds"] = shares
                pairs = [p["result"][k]["shim"] for p in runs.get("P", [])
                         if "observed_over_paused" in ((p.get("result") or {}).get(k, {}).get("shim") or {})]
                with_stats = [p["result"][k]["shim"] for p in runs.get("Q", [])
                              if "own_share_observed" in ((p.get("result") or {}).get(k, {}).get("shim") or {})]
                if with_stats:  # the pairs' ratio beside the own time, in the same process
                    over.setdefault(k, {})["q_rounds"] = [
                        {"observed_over_paused": x["observed_over_paused"], "own_share": x["own_share_observed"]}
                        for x in with_stats]
                if pairs:  # observed over paused, in one process: the end-to-end overhead with the defaults
                    over.setdefault(k, {})["observed_over_paused"] = statistics.median(
                        x["observed_over_paused"] for x in pairs)
                    over[k]["host_observed_over_paused"] = statistics.median(
                        x["host_observed_over_paused"] for x in pairs)
                    over[k]["observed_over_paused_rounds"] = [x["observed_over_paused"] for x in pairs]
                    over[k]["host_observed_over_paused_rounds"] = [x["host_observed_over_paused"] for x in pairs]
                    pooled = pooled_pairs(pairs)
                    if pooled:
                        over[k]["pooled_pairs"] = pooled
                    over[k]["iters_per_loop"] = pairs[0].get("iters", 20)
                    over[k]["pooled_host_pairs"] = pooled_pairs(pairs, "host_pair_ratios")
                    over[k]["sum_ratio_rounds"] = [x.get("sum_observed_over_paused") for x in pairs]
                learn_off = [p["result"][k]["shim"] for p in runs.get("N", [])
                             if "observed_over_paused" in ((p.get("result") or {}).get(k, {}).get("shim") or {})]
                if learn_off:  # the same with learning off: what the learner adds, beside P
                    over.setdefault(k, {})["learn_off"] = {
                        "observed_over_paused": statistics.median(x["observed_over_paused"] for x in learn_off),
                        "rounds": [x["observed_over_paused"] for x in learn_off],
                        "sum_ratio_rounds": [x.get("sum_observed_over_paused") for x in learn_off],
                        "pooled_host_pairs": pooled_pairs(learn_off, "host_pair_ratios"),
                        "pooled_pairs": pooled_pairs(learn_off)}
            entry["overhead"] = over
        doc["items"][item] = entry
        ok &= item_ok
        lines.append(f"## {item}: {'pass' if item_ok else 'FAIL'}\n")
        if rounds_done < a.rounds:
            lines.append(f"(stopped after {rounds_done} of {a.rounds} rounds: --deadline {a.deadline:.0f} s)\n")
        for k, o in outputs.items():
            ratio = entry.get("overhead", {}).get(k, {}).get("ratio_shim_over_none")
            share = entry.get("overhead", {}).get(k, {}).get("shim_own_share")
            pair = entry.get("overhead", {}).get(k, {})
            lines.append(f"- {k}: {'bitwise equal in every process' if o['same_in_every_process'] else 'DIFFERS: ' + str(o.get('values'))}"
                         + (f"; time with the shim / without: {ratio:.4f}" if ratio else "")
                         + (f"; the shim's own host time, in the process: {100 * share:.3f}% of the wall time "
                            f"(the largest of the rounds)" if share is not None else "")
                         + (f"; in one process, observing over paused (arm P, medians of the rounds' pair "
                            f"medians): wall {pair['observed_over_paused']:.4f}, host dispatch "
                            f"{pair['host_observed_over_paused']:.4f}" if "observed_over_paused" in pair else "")
                         + ("; all {n} pairs pooled: {median:.4f} (95% interval {low:.4f}-{high:.4f})".format(
                             **pair["pooled_pairs"]) + f" ({pair['iters_per_loop']} iterations a loop; each round's "
                             "observed time over paused, summed: " + ", ".join(
                                 f"{x:.4f}" for x in pair["sum_ratio_rounds"] if x) + ")"
                            + ("; host dispatch alone, pooled: {median:.4f} ({low:.4f}-{high:.4f})".format(
                                **pair["pooled_host_pairs"]) if pair.get("pooled_host_pairs") else "")
                            if "pooled_pairs" in pair else "")
                         + ("; arm Q (pairs with stats), observed over paused against the shim's own time "
                            "in the same process: " + ", ".join(f"{q['observed_over_paused']:.4f} against "
                                                                 f"{100 * q['own_share']:.2f}%"
                                                                 for q in pair["q_rounds"])
                            if "q_rounds" in pair else "")
                         + ("; arm N (learning off), observed over paused: {observed_over_paused:.4f}".format(
                             **pair["learn_off"]) + "; {n} pooled: {median:.4f} ({low:.4f}-{high:.4f})".format(
                             **pair["learn_off"]["pooled_pairs"]) + "; summed: " + ", ".join(
                                 f"{x:.4f}" for x in pair["learn_off"]["sum_ratio_rounds"] if x)
                            + ("; host dispatch alone, pooled: {median:.4f} ({low:.4f}-{high:.4f})".format(
                                **pair["learn_off"]["pooled_host_pairs"])
                               if pair["learn_off"].get("pooled_host_pairs") else "")
                            if pair.get("learn_off", {}).get("pooled_pairs") else ""))
        for arm, per in entry.get("fused_at_own_shape", {}).items():
            lines.append(f"\nArm {arm}'s first round, each implementation's own shape (learned signatures): " +
                         "; ".join(f"{n} ({r['complete']} blocks fused, {r['broken']} broken"
                                   + (f", ops {' '.join(r['ops'])})" if r["ops"] else ", no op planned)")
                                   for n, r in per.items()))
        stats = [ln for r in runs.get("S", []) for ln in r.get("shim_stats", [])]
        for r in runs.get("Q", [])[:1]:  # the learner's and the own time's lines of one process with pairs
            lines.append("\nArm Q's first process: " + "; ".join(ln.split("stats: ")[-1] for ln in r.get("shim_stats", [])
                                                                 if "learn:" in ln or "shim host time" in ln
                                                                 or "lt_shadow:" in ln or "configuration calls" in ln
                                                                 or API_ROW.search(ln)))
        lines.append("\nShim stats lines (arm S): " + ("; ".join(sorted(set(s.split("stats: ")[-1] for s in stats
                                                                      if "stats: plan " not in s))) or "none"))
        lines.append("")
    doc["pass"] = ok
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no-gpu"
    head = [f"# The shim in real serving patterns (issue 7), {gpu}, {time.strftime('%Y-%m-%d')}", "",
            f"`tests/gpu/robust.py`, {a.rounds} rounds, arms alternating: A no shim, S the shim with its defaults "
            f"(H3SHIM_STATS=1); for the workloads also P, the shim with its plain defaults (no stats), each "
            f"workload timed in pairs of loops in one process, one with the shim observing and one with its "
            f"observation paused (h3shim_pause); torch {torch.__version__}.", ""]
    shimstats.write_evidence(gpu, "robust" + a.tag, doc, head + lines + [f"Result: {'pass' if ok else 'FAIL'}"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
