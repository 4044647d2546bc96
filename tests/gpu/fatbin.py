"""Loads build/kernels.fatbin (the fused ops' kernels the shim embeds) with the
driver API and launches its kernels on PyTorch's current stream, for the GPU
kernel tests (tests/gpu/test_<op>.py)."""
import ctypes
import os
import sys

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT = os.path.join(ROOT, "build", "kernels.fatbin")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import h3_vae  # noqa: E402  (scripts/)


class Fatbin:
    def __init__(self, path=DEFAULT):
        torch.zeros(1, device="cuda")  # the primary context, current on this thread
        self.cu = ctypes.CDLL("libcuda.so.1")
        image = open(path, "rb").read()
        self.buf = ctypes.create_string_buffer(image, len(image))
        self.mod = ctypes.c_void_p()
        self.check(self.cu.cuModuleLoadData(ctypes.byref(self.mod), self.buf), "cuModuleLoadData")
        self.fns = {}

    @staticmethod
    def check(r, what):
        if r != 0:
            raise RuntimeError(f"{what} returned {r}")

    def function(self, name):
        if name not in self.fns:
            fn = ctypes.c_void_p()
            self.check(self.cu.cuModuleGetFunction(ctypes.byref(fn), self.mod, name.encode()), "cuModuleGetFunction")
            self.fns[name] = fn
        return self.fns[name]

    def launch(self, name, grid, block, values, smem=0, cooperative=False, wait=True):
        """Launches kernel `name` with ctypes `values` as its parameters and, with `wait`, waits
        for it (not while the stream is being captured)."""
        fn = self.function(name)
        args = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in values])
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        grid = tuple(grid) + (1,) * (3 - len(grid))
        block = tuple(block) + (1,) * (3 - len(block))
        if cooperative:
            self.check(self.cu.cuLaunchCooperativeKernel(fn, *grid, *block, smem, stream, args),
                       "cuLaunchCooperativeKernel")
        else:
            self.check(self.cu.cuLaunchKernel(fn, *grid, *block, smem, stream, args, None), "cuLaunchKernel")
        if wait:
            torch.cuda.synchronize()

    def staged_grid(self, name, rows, row_bytes, threads=128):
        """The grid and shared memory the shim gives a staged kernel
        (h3_kernels_launch_staged): the fewest rows per block whose blocks
        all fit on the GPU at once, at most 48 KiB a block; None if none."""
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        per = 1
        while per * row_bytes <= 48 * 1024:
            n = ctypes.c_int()
            self.check(self.cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(
                ctypes.byref(n), self.function(name), threads, ctypes.c_size_t(per * row_bytes)), "occupancy")
            grid = (rows + per - 1) // per
            if grid <= n.value * sms:
                return grid, per * row_bytes
            per += 1
        return None


def graph_ms(launch, n=20, reps=11):
    """GPU time of one `launch()` (launching without waiting): n launches
    captured in a CUDA graph, the median replay over n. One launch between two
    events measures the host's launch, not the kernel's time."""
    graph, _ = h3_vae.capture(launch, times=n)
    return h3_vae.event_ms(graph.replay, reps, per=n)


def ptr(t):
    """A kernel parameter for tensor t's data (NULL for None)."""
    return ctypes.c_uint64(0 if t is None else t.data_ptr())


def bits_differing(a, b):
    """Elements whose raw bits differ (NaN payloads included)."""
    view = {torch.float16: torch.int16, torch.float32: torch.int32}[a.dtype]
    return int((a.contiguous().view(view) != b.contiguous().view(view)).sum())


def report(kernel, cases, **extra):
    """Writes a kernel test's JSON document on stdout (every case's counts of
    differing bits are its keys ending in `_bits_differing`) and a one-line
    summary on stderr; returns the exit status: 0 when no bit differs."""
    import json
    import sys
    total = sum(c["elements"] for c in cases)
    bad = sum(v for c in cases for k, v in c.items() if k.endswith("_bits_differing"))
    doc = {"kernel": kernel, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cuda": torch.version.cuda, **extra, "cases": cases, "elements": total, "bits_differing": bad,
           "pass": bad == 0}
    json.dump(doc, sys.stdout, indent=1)
    print()
    print(f"{kernel}: {len(cases)} cases, {total} elements, {bad} differing outputs", file=sys.stderr)
    return 0 if bad == 0 else 1
