#!/usr/bin/env python3
"""A small MiniMax-H3 video-VAE decode service: the reference workload of h3shim.

Decodes latents [B,24,T,H,W] to FP32 video [B,3,F,16H,16W] with the H3 decoder
(scripts/h3_vae.py, DESIGN.md section 2) and its tiling (scripts/h3_tiling.py:
temporal chunks of 7 latent frames at stride 5 with a 5-frame blend, spatial
tiles of 16x16 latent with >= 64 px overlap; [1,24,37,32,48] gives 84 ViT calls,
3024 block calls, 124 frames of 512x768). It prints per-request latency, a
summary, and the SHA-256 of each request's FP32 output bytes and of its uint8
frames; run it under LD_PRELOAD=libh3shim.so to put the shim in the path.

  serve.py --latent 1,24,17,32,48 --requests 3            decode three requests
           [--mode serving|inference] [--seed S] [--same-latent] [--blocks K] [--warmup W]
           [--cuda-graphs] [--tile-batch N] [--tile T,H,W] [--weights DIR] [--out FILE.pt] [--json]
           [--trace-mark]
  serve.py --latent 1,24,37,32,48 --vit-calls-only         print the tiling plan only (no PyTorch needed)
  serve.py --profile-block [--mode M]                      ms per block at 1797 tokens (DESIGN.md: 0.99 ms)
  serve.py --profile-vit [--mode M]                        one ViT call's CUDA-graph replay, per kernel and gap
  serve.py --floor [--blocks K] [--mode M]                 host dispatch floor: ms per block at 6 tokens
  serve.py --activation-stats --latent ...                 max |activation| per kind (FP16 headroom)
  serve.py --write-weights DIR [--blocks K]                write the synthetic weights as a safetensors checkpoint

--mode (h3_vae.decode_context) says how a decode runs. serving (the default)
is the H3 serving pipeline's way (vLLM-Omni MiniMaxH3Pipeline.forward): each
request under torch.no_grad() in one torch.autocast("cuda", float16) region
(its cast cache on, so a request casts each weight once and its later ViT
calls reuse the cached casts), the parameters left requiring grad as
nn.Module makes them. inference is this project's earlier way: every request
in one torch.inference_mode() + autocast region, the parameters
requires_grad_(False), every ViT call casting every weight. With
--cuda-graphs in serving mode each tile shape is captured (in the request
that first meets it) with autocast's cast cache off, so that the graph casts
its weights itself and does not read the capturing request's cached casts,
which that request's end frees. Both modes give the same bits (a cast is
the same cast, cached or not). The profiles run in the mode's context too:
in serving mode their repeated calls share one autocast region, so the
eager ones cast the weights once. --tile-batch N decodes the tiles of a
temporal chunk N at a time in one ViT call (concatenated along the batch
dimension); its output is not guaranteed to be bitwise equal to
--tile-batch 1's (the GEMMs run at N times the rows, where cuBLAS may choose
other kernels), so compare hashes only between runs of the same --tile-batch.

--tile T,H,W (default 7,16,16) is the latent size of a ViT call's tile,
T * H * W + 5 tokens: every tile of a decode has the same size (the last one
along an axis is moved back to overlap, never padded), so with the default
every ViT call of a latent whose sides are 16 or more has 1797 tokens, and
another count needs another tile (3,16,16: 773 tokens; 7,12,16: 1349).
Spatial tiles overlap by at least a quarter (rounded down); T < 7 covers each
7-frame temporal chunk with tiles of T frames, blended along time like the
spatial tiles (h3_tiling.py). The chunks and the output's shape stay those
of the default tile; the bits do not (other tiles, other blends), so compare
hashes only between runs of the same --tile. It applies to the decode,
--vit-calls-only and --activation-stats; the profiles keep their own shapes.

Latent shape rules: B >= 1, C == 24, T >= 7 (one temporal chunk), H, W >= 1
(a side shorter than the tile gives narrower tiles). Request i decodes the
deterministic latent of seed S + i (seed S for all with --same-latent); the
weights are synthetic from seed S unless --weights names a safetensors
checkpoint (a directory of *.safetensors or one file, parameter names in
h3_vae.py). Latency is the decode up to a device synchronise; hashing and the
copy to the host are outside it. --device cpu is a development-only smoke test
(autocast float16 on the CPU; slow; hashes differ from the GPU's).

Exit status: 0 on success, 2 for a usage error, a bad latent shape, no CUDA
GPU, or a checkpoint that does not match.
"""

import argparse
import contextlib
import json
import os
import sys
import time

from h3_tiling import LatentShapeError, make_plan, parse_latent, parse_tile

PROG = "serve.py"


def fail(message):
    """Prints a one-line error and exits with status 2."""
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(2)


def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description="MiniMax-H3 video-VAE decode service (h3shim workload).")
    p.add_argument("--latent", default="1,24,17,32,48", help="latent shape B,C,T,H,W (default 1,24,17,32,48)")
    p.add_argument("--requests", type=int, default=3, help="number of timed requests (default 3)")
    p.add_argument("--warmup", type=int, default=1, help="untimed requests before them (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic weights and latents (default 0)")
    p.add_argument("--same-latent", action="store_true", help="every request decodes the latent of --seed")
    p.add_argument("--blocks", type=int, default=36, help="transformer blocks (default 36; fewer for quick tests)")
    p.add_argument("--cuda-graphs", action="store_true", help="capture each ViT call once per tile shape, replay it")
    p.add_argument("--mode", default="serving", choices=["serving", "inference"],
                   help="serving (default): no_grad, one autocast region per request (cast cache on), parameters "
                        "requiring grad, as the H3 serving pipeline; inference: inference_mode, one autocast region "
                        "for all requests, parameters requires_grad_(False)")
    p.add_argument("--tile-batch", type=int, default=1, metavar="N",
                   help="tiles of a temporal chunk per ViT call, concatenated along the batch (default 1; the "
                        "bits of N > 1 are not guaranteed to be those of 1)")
    p.add_argument("--tile", default="7,16,16", metavar="T,H,W",
                   help="latent size of a ViT call's tile, T*H*W+5 tokens (default 7,16,16: 1797; T at most 7; the "
                        "bits of another tile are not the default's)")
    p.add_argument("--weights", metavar="DIR", help="load a safetensors checkpoint instead of synthetic weights")
    p.add_argument("--out", metavar="FILE.pt", help="torch.save the last request's FP32 output (on the CPU)")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout and nothing else")
    p.add_argument("--trace-mark", action="store_true",
                   help="launch one marker kernel (spin_kernel) before the first request, for trace_stats.py --after")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cuda (default) or cpu (development-only smoke test)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--vit-calls-only", action="store_true", help="print the tiling plan and exit")
    mode.add_argument("--profile-block", action="store_true", help="time one block at 1797 tokens")
    mode.add_argument("--profile-vit", action="store_true",
                      help="time one ViT call at 1797 tokens as a CUDA-graph replay, per kernel and gap")
    mode.add_argument("--floor", action="store_true", help="time the block stack at 6 tokens (host floor)")
    mode.add_argument("--activation-stats", action="store_true", help="max |activation| per kind, one request")
    mode.add_argument("--write-weights", metavar="DIR", help="write the synthetic weights to DIR/h3vae.safetensors")
    args = p.parse_args(argv)
    if args.requests < 1 or args.warmup < 0 or args.blocks < 1 or args.tile_batch < 1:
        fail("--requests, --blocks and --tile-batch must be >= 1 and --warmup >= 0")
    if (args.cuda_graphs or args.trace_mark) and args.device != "cuda":
        fail("--cuda-graphs and --trace-mark need --device cuda")
    return args


def emit(args, doc, lines):
    """Prints the JSON document with --json, else the human-readable lines."""
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print("\n".join(lines))


def plan_lines(plan, tile_batch=1):
    s = plan.summary(tile_batch)
    frames = s["tile_latent"][0]
    along_time = (f"{len(s['tile_times'])} tiles of {frames} frame{'s' * (frames > 1)} x "
                  if "tile_times" in s else "")
    return [f"latent {s['latent']}: {s['temporal_chunks']} temporal chunks x {along_time}"
            f"{s['spatial_tiles']} spatial tiles{f', {tile_batch} to a call' if tile_batch > 1 else ''} = "
            f"{s['vit_calls']} ViT calls of {s['tokens_per_call']} tokens, {s['block_calls']} block calls "
            f"({s['blocks']} blocks), output {s['frames']} frames of {s['height']}x{s['width']}"]


def summarise(times, plan):
    """Latency summary of a list of per-request milliseconds."""
    s = sorted(times)
    median = (s[len(s) // 2] + s[(len(s) - 1) // 2]) / 2
    return {"requests": len(s), "median_ms": median, "mean_ms": sum(s) / len(s), "min_ms": s[0], "max_ms": s[-1],
            "p90_ms": s[min(len(s) - 1, -(-9 * len(s) // 10) - 1)],
            "median_ms_per_vit_call": median / plan.vit_calls, "median_ms_per_block_call": median / plan.block_calls}


def load_torch(args):
    """Imports PyTorch and the model; returns (torch, h3_vae, device) or exits with status 2."""
    try:
        import torch
        import h3_vae
    except ImportError as e:
        fail(f"cannot import PyTorch ({e}); install torch or use --vit-calls-only")
    if args.device == "cuda" and not torch.cuda.is_available():
        fail("no CUDA GPU is visible (torch.cuda.is_available() is False); --device cpu is a development-only mode")
    device = torch.device(args.device)
    return torch, h3_vae, device


def environment(torch, device):
    env = {"torch": torch.__version__, "device": str(device), "pid": os.getpid(),
           "ld_preload": os.environ.get("LD_PRELOAD", "")}
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
        env["sm"] = "%d.%d" % torch.cuda.get_device_capability(device)
        env["cuda"] = torch.version.cuda
    return env


def gpu_memory(torch, device):
    """GPU memory after the requests, in MiB: the device's used memory (what nvidia-smi shows, the CUDA
    context and anything allocated outside PyTorch, such as the shim's weight copies, included) and
    PyTorch's own peak reservation."""
    if device.type != "cuda":
        return None
    free, total = torch.cuda.mem_get_info(device)
    return {"device_used_mib": (total - free) / 2**20,
            "torch_max_reserved_mib": torch.cuda.max_memory_reserved(device) / 2**20}


def decode_requests(args, torch, h3_vae, device, model, plan):
    """Runs the warm-up and timed requests; returns (JSON doc, text lines).

    Inference mode: all requests in one decode context. Serving mode: one per
    request (a request's autocast region, and with it its cached weight casts,
    ends with the request); its result is hashed after the region."""
    decoder = h3_vae.TiledDecoder(model, plan, device, cuda_graphs=args.cuda_graphs, mode=args.mode,
                                  tile_batch=args.tile_batch)
    per_request = args.mode == "serving"
    results, times, warm, video = [], [], [], None
    if args.trace_mark:
        torch.cuda._sleep(1)
    with (contextlib.nullcontext() if per_request else h3_vae.decode_context(args.mode, device)):
        for i in range(-args.warmup, args.requests):
            with (h3_vae.decode_context(args.mode, device) if per_request else contextlib.nullcontext()):
                latent = h3_vae.make_latent(plan.latent, args.seed + (0 if args.same_latent else max(i, 0)), device)
                h3_vae.sync(device)
                calls_before = decoder.vit_calls
                t0 = time.perf_counter()
                video = decoder(latent)
                host_ms = (time.perf_counter() - t0) * 1e3  # every launch made; the GPU may still be working
                h3_vae.sync(device)
                ms = (time.perf_counter() - t0) * 1e3
            if i < 0:
                warm.append(ms)  # first sights, weight copies, verify mode's compared runs
                continue
            times.append(ms)
            results.append({"request": i, "latency_ms": ms, "host_ms": host_ms, "sha256_fp32": h3_vae.sha256(video),
                            "sha256_u8": h3_vae.sha256(h3_vae.to_frames(video)),
                            "vit_calls": decoder.vit_calls - calls_before, "output_shape": list(video.shape)})
    if args.out:
        torch.save(video.cpu(), args.out)
    summary = summarise(times, plan)
    memory = gpu_memory(torch, device)
    doc = {"mode": "decode", "decode_mode": args.mode, "tile_batch": args.tile_batch,
           "plan": plan.summary(args.tile_batch), "cuda_graphs": args.cuda_graphs, "warmup": args.warmup,
           "warmup_ms": warm,
           "seed": args.seed, "same_latent": args.same_latent, "weights": args.weights or "synthetic",
           "environment": environment(torch, device), "requests": results, "summary": summary,
           "gpu_memory": memory, "out": args.out}
    lines = plan_lines(plan, args.tile_batch) + [
        f"device {doc['environment'].get('gpu', device)}, {args.mode} mode, "
        f"{'CUDA graphs' if args.cuda_graphs else 'eager'}, tile batch {args.tile_batch}, weights {doc['weights']}"]
    lines += [f"request {r['request']}: {r['latency_ms']:9.2f} ms  fp32 sha256 {r['sha256_fp32']}  "
              f"u8 sha256 {r['sha256_u8']}  {r['vit_calls']} ViT calls, output {r['output_shape']}" for r in results]
    lines.append(f"summary: {summary['requests']} requests, median {summary['median_ms']:.2f} ms "
                 f"(min {summary['min_ms']:.2f}, mean {summary['mean_ms']:.2f}, p90 {summary['p90_ms']:.2f}, "
                 f"max {summary['max_ms']:.2f}), {summary['median_ms_per_block_call']:.4f} ms per block call")
    return doc, lines


def main(argv=None):
    args = parse_args(argv)
    try:
        plan = make_plan(parse_latent(args.latent), args.blocks, parse_tile(args.tile))
    except LatentShapeError as e:
        fail(str(e))
    if args.vit_calls_only:
        emit(args, {"mode": "plan", "plan": plan.summary(args.tile_batch)}, plan_lines(plan, args.tile_batch))
        return 0

    torch, h3_vae, device = load_torch(args)
    blocks = 1 if args.profile_block else args.blocks
    try:
        model = h3_vae.build_model(blocks, args.seed, device, args.weights, requires_grad=args.mode == "serving")
    except h3_vae.CheckpointError as e:
        fail(f"checkpoint does not match: {e}")
    env = environment(torch, device)

    if args.write_weights:
        os.makedirs(args.write_weights, exist_ok=True)
        path = os.path.join(args.write_weights, "h3vae.safetensors")
        h3_vae.write_safetensors(path, dict(model.named_parameters()))
        emit(args, {"mode": "write_weights", "path": path, "blocks": blocks, "seed": args.seed},
             [f"wrote {path} ({blocks} blocks, seed {args.seed})"])
    elif args.profile_block:
        r = h3_vae.profile_block(model, device, mode=args.mode)
        line = (f"block at {r['tokens']} tokens, {args.mode} mode: eager {r['eager_ms']:.4f} ms/block "
                f"(DESIGN.md reference 0.99 ms)")
        if "graph_ms" in r:
            line += (f", CUDA-graph replay {r['graph_ms']:.4f} ms/block (DESIGN.md 0.93 ms), "
                     f"host enqueue {r['host_ms']:.4f} ms/block")
        emit(args, {"mode": "profile_block", "decode_mode": args.mode, "environment": env, **r}, [line])
    elif args.profile_vit:
        if device.type != "cuda":
            fail("--profile-vit replays a CUDA graph: it needs --device cuda")
        r = h3_vae.profile_vit(model, device, mode=args.mode)
        k = r.get("kernels", {})
        emit(args, {"mode": "profile_vit", "decode_mode": args.mode, "environment": env, **r},
             [f"ViT call at {r['tokens']} tokens, {r['blocks']} blocks, {args.mode} mode, CUDA-graph replay: "
              f"{r['replay_ms']:.3f} ms, "
              f"{r['replay_ms_per_block']:.4f} ms/block; kernels {k.get('total_ms', float('nan')):.4f}, "
              f"gaps {k.get('gap_ms', float('nan')):.4f} ms/block"])
    elif args.floor:
        r = h3_vae.dispatch_floor(model, device, mode=args.mode)
        emit(args, {"mode": "floor", "decode_mode": args.mode, "environment": env, **r},
             [f"dispatch floor, {args.mode} mode: {r['blocks']} blocks at {r['tokens']} tokens: "
              f"{r['ms_per_block']:.4f} ms per block "
              f"(DESIGN.md: PyTorch alone about 0.6-0.7 ms on the H200 machine)"])
    elif args.activation_stats:
        decoder = h3_vae.TiledDecoder(model, plan, device, mode=args.mode, tile_batch=args.tile_batch)
        r = h3_vae.activation_stats(model, decoder, h3_vae.make_latent(plan.latent, args.seed, device),
                                    mode=args.mode)
        lines = [f"{kind:40s} {value:12.4f}" for kind, value in r["max_abs"].items()]
        lines.append(f"finite: {r['finite']}, FP16 headroom (65504 / largest FP16 activation): {r['fp16_headroom']}")
        emit(args, {"mode": "activation_stats", "decode_mode": args.mode, "plan": plan.summary(args.tile_batch), "environment": env,
                    **r}, lines)
    else:
        doc, lines = decode_requests(args, torch, h3_vae, device, model, plan)
        emit(args, doc, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
