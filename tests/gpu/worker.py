#!/usr/bin/env python3
"""Measurements that run inside one arm's process of tests/gpu/harness.py.

The harness starts this script once per arm and round, with or without
LD_PRELOAD=libh3shim.so, so that the shim is in the process from its start.
Every finished measurement is printed at once as one JSON object on its own
line of stdout, so a crash later in the process loses only what had not run.

  worker.py env
      versions of the GPU, driver, CUDA, PyTorch, cuBLAS(Lt), cuDNN, and which
      kernels SDPA runs for the block's shapes (run without the shim)
  worker.py bench --latent B,C,T,H,W --blocks K --requests N --warmup W [--skip-graphs]
      eager decode timing, host dispatch floor, CUDA-graph decode timing
"""

import argparse
import ctypes
import json
import os
import platform
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import h3_vae  # noqa: E402
from h3_tiling import make_plan, parse_latent  # noqa: E402


def emit(doc):
    print(json.dumps(doc), flush=True)


def loaded_library(fragment):
    """Path of the first library in this process whose file name contains `fragment`."""
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if fragment in os.path.basename(path):
                return path
    return None


def library_versions():
    """Versions reported by the CUDA libraries this process has loaded (the wheel's own copies).

    Each library is opened by the exact path it is already mapped from, so no
    second copy is loaded.
    """
    out = {}

    def call(fragment, symbol, *args, restype=ctypes.c_int):
        path = loaded_library(fragment)
        if path is None:
            return None
        fn = getattr(ctypes.CDLL(path), symbol)
        fn.restype = restype
        return path, fn(*args)

    value = ctypes.c_int()
    for key, fragment, symbol in (("cudart", "libcudart.so", "cudaRuntimeGetVersion"),
                                  ("cuda_driver_api", "libcuda.so", "cuDriverGetVersion")):
        r = call(fragment, symbol, ctypes.byref(value))
        if r:
            out[key] = {"path": r[0], "version": value.value}
    r = call("libcublasLt.so", "cublasLtGetVersion", restype=ctypes.c_size_t)
    if r:
        out["cublasLt"] = {"path": r[0], "version": r[1]}
    parts = []
    for prop in range(3):
        r = call("libcublas.so", "cublasGetProperty", prop, ctypes.byref(value))
        parts.append(str(value.value) if r and r[1] == 0 else "?")
    if r:
        out["cublas"] = {"path": r[0], "version": ".".join(parts)}
    r = call("libcudnn.so", "cudnnGetVersion", restype=ctypes.c_size_t)
    if r:
        out["cudnn"] = {"path": r[0], "version": r[1]}
    return out


def sdpa_kernels(device):
    """Names of the GPU kernels one SDPA call of the block's shapes runs (cuDNN or another backend)."""
    qkv = torch.randn(1, 1797, 32, 192, device=device, dtype=torch.float16)
    q, k, v = qkv.chunk(3, dim=-1)
    q, k, v = (t.transpose(1, 2) for t in (q.contiguous(), k.contiguous(), v))
    F.scaled_dot_product_attention(q, k, v)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        F.scaled_dot_product_attention(q, k, v)
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})


def command_env(_args):
    env = {"python": platform.python_version(), "torch": torch.__version__,
           "torch_git": getattr(torch.version, "git_version", None), "torch_cuda": torch.version.cuda,
           "cudnn_torch": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
           "host": platform.node(), "cpu": None, "cpus": os.cpu_count()}
    with open("/proc/cpuinfo") as f:
        env["cpu"] = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    if not torch.cuda.is_available():
        env["error"] = "no CUDA GPU visible"
        emit({"kind": "env", **env})
        return 1
    device = torch.device("cuda")
    props = torch.cuda.get_device_properties(device)
    env.update({"gpu": props.name, "sm": f"{props.major}.{props.minor}", "sms": props.multi_processor_count,
                "gpu_memory_gib": round(props.total_memory / 2 ** 30, 1),
                "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
                "fp16_reduced_precision_reduction": torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
                "sdp_enabled": {name: getattr(torch.backends.cuda, name + "_sdp_enabled")()
                                for name in ("cudnn", "flash", "mem_efficient", "math")}})
    with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16):
        F.linear(torch.randn(64, 2048, device=device), torch.randn(256, 2048, device=device),
                 torch.randn(256, device=device))
        F.conv3d(torch.randn(1, 24, 2, 2, 2, device=device), torch.randn(24, 24, 1, 1, 1, device=device))
        try:
            env["sdpa_kernels"] = sdpa_kernels(device)
        except Exception as e:  # The profiler is only a diagnostic here.
            env["sdpa_kernels"] = f"unavailable: {type(e).__name__}: {e}"
    torch.cuda.synchronize()
    env["libraries"] = library_versions()
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,"
                              "power.limit,memory.total,mig.mode.current", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        env["nvidia_smi"] = smi.stdout.strip() or smi.stderr.strip()
        env["driver"] = smi.stdout.split(",")[1].strip() if smi.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, IndexError) as e:
        env["nvidia_smi"] = f"unavailable: {e}"
    emit({"kind": "env", **env})
    return 0


def timed_requests(decoder, latent, device, warmup, requests):
    """Runs warmup + requests decodes; returns (ms list, host enqueue ms list, last output)."""
    ms, enqueue, video = [], [], None
    for i in range(warmup + requests):
        h3_vae.sync(device)
        t0 = time.perf_counter()
        video = decoder(latent)
        t1 = time.perf_counter()
        h3_vae.sync(device)
        t2 = time.perf_counter()
        if i >= warmup:
            ms.append((t2 - t0) * 1e3)
            enqueue.append((t1 - t0) * 1e3)
    return ms, enqueue, video


def measure(kind, fn):
    """Runs one measurement and prints its result, or its error, as one JSON line."""
    t0 = time.perf_counter()
    try:
        doc = fn()
    except Exception as e:  # A measurement that fails is reported, and the next one still runs.
        doc = {"error": f"{type(e).__name__}: {e}"[:2000]}
    emit({"kind": kind, "seconds": round(time.perf_counter() - t0, 3), **doc})


def command_bench(args):
    device = torch.device("cuda")
    plan = make_plan(parse_latent(args.latent), args.blocks)
    t0 = time.perf_counter()
    model = h3_vae.build_model(args.blocks, args.seed, device)
    latent = h3_vae.make_latent(plan.latent, args.seed, device)
    torch.cuda.synchronize()
    emit({"kind": "start", "pid": os.getpid(), "ld_preload": os.environ.get("LD_PRELOAD", ""),
          "h3shim_env": {k: v for k, v in os.environ.items() if k.startswith("H3SHIM_")},
          "plan": plan.summary(), "build_seconds": round(time.perf_counter() - t0, 3)})
    eager_video = {}

    def eager():
        decoder = h3_vae.TiledDecoder(model, plan, device)
        with torch.inference_mode(), h3_vae.autocast(device):
            ms, enqueue, video = timed_requests(decoder, latent, device, args.warmup, args.requests)
            again = decoder(latent)
        eager_video["v"] = video
        return {"ms": ms, "enqueue_ms": enqueue, "sha256_fp32": h3_vae.sha256(video),
                "sha256_u8": h3_vae.sha256(h3_vae.to_frames(video)),
                "repeatable_in_process": torch.equal(video.view(torch.int32), again.view(torch.int32))}

    def floor():
        return h3_vae.dispatch_floor(model, device, reps=args.floor_reps)

    def graphs():
        decoder = h3_vae.TiledDecoder(model, plan, device, cuda_graphs=True)
        with torch.inference_mode(), h3_vae.autocast(device):
            ms, enqueue, video = timed_requests(decoder, latent, device, max(args.warmup, 1), args.requests)
            graph, static_in, _ = next(iter(decoder.graphs.values()))
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            vit_ms = []
            for _ in range(args.requests):
                start.record()
                for _ in range(10):
                    graph.replay()
                end.record()
                end.synchronize()
                vit_ms.append(start.elapsed_time(end) / 10)
        doc = {"ms": ms, "vit_call_ms": vit_ms, "sha256_fp32": h3_vae.sha256(video),
               "sha256_u8": h3_vae.sha256(h3_vae.to_frames(video)), "graphs_captured": len(decoder.graphs)}
        if "v" in eager_video:
            doc["equal_to_eager"] = torch.equal(video.view(torch.int32), eager_video["v"].view(torch.int32))
        return doc

    measure("eager", eager)
    measure("floor", floor)
    if not args.skip_graphs:
        measure("graphs", graphs)
    emit({"kind": "done"})
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(prog="worker.py", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("env")
    b = sub.add_parser("bench")
    b.add_argument("--latent", required=True)
    b.add_argument("--blocks", type=int, default=36)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--requests", type=int, default=5)
    b.add_argument("--warmup", type=int, default=2)
    b.add_argument("--floor-reps", type=int, default=20)
    b.add_argument("--skip-graphs", action="store_true")
    args = p.parse_args(argv)
    return command_env(args) if args.command == "env" else command_bench(args)


if __name__ == "__main__":
    sys.exit(main())
