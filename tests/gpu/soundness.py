#!/usr/bin/env python3
"""The shim's soundness in the ways real programs run the H3 block, on the GPU machine.

Each case runs in a fresh process without the shim (arm A) and in one with it
(arm S: LD_PRELOAD=--shim with its defaults, H3SHIM_STATS=1, the stats on
stderr), arm A first. A case prints one JSON line: `outputs`, compared between
the arms (SHA-256 of every output tensor's bytes, and events: whether a capture
or an allocation raised, an exception's type and first line with its numbers
blanked), and `info`, recorded only (timings, memory, raw messages). A case
passes when both arms exit alike and every output is the same in both; an
output a case computes twice (`{"repeats": [...]}`) that differs between its
two runs in arm A is PyTorch's own nondeterminism and is reported, not compared.
The block stack is scripts/h3_vae.py's decoder with 4 blocks on 7x16x16 latent
tiles: 1797 tokens a ViT call, the committed signature's.

  0 serving                  scripts/serve.py --mode serving --blocks 4, latent 1,24,17,32,48, 3 requests
                             after a warm-up, eager and --cuda-graphs: every request's hashes
  1 nograd_autocast_cache    torch.no_grad() and one autocast region (its cast cache on), parameters
                             requiring grad, three tiles and the first again in that one region
  2 inference_then_backward  a decode in inference_mode, then a new stack (parameters requiring
                             grad) forward under autocast and backward, twice: output and every .grad
  3 other_thread_capture     thread 1 decodes (eager, inference_mode, its own stream) in a loop
                             while thread 2 captures an FP16 MLP in capture_error_mode "global" and
                             replays it: first with CUDAGraph.capture_begin/capture_end, then with
                             torch.cuda.graph (whose entry empties the allocator's cache, so thread 1
                             may need a cudaMalloc during the capture, which the global mode
                             refuses); each thread warmed up in itself, sleeps inside each capture
                             make thread 1 run during it (counted)
  4 model_swap               four stacks of other seeds loaded, run and deleted (empty_cache after
                             each), then one allocation of arm A's free memory less 1 GiB (arm A
                             measures it after the last empty_cache, arm S allocates the same size)
  5 ctx_retain_release       a CUDA graph of a ViT call replayed, the primary context retained and
                             released through the driver API (ctypes, libcuda.so.1), replayed again
                             and an eager call after it
  6 flat_buffer_weights      the parameters made views of one flat buffer, run, new values written
                             through the buffer (copy_), run, the first values back, run
  7 inference_cast_fresh     inference_mode + autocast, three tiles: the project's earlier mode, a control

    python3 tests/gpu/soundness.py [--shim build/libh3shim.so] [--cases 0,1,... or names] [--tag SUFFIX]

Writes tests/evidence/<date>-<gpu>-soundness.json and .md (and copies them to
$OUT when set). Exit status 0 when every case is equal in both arms, 1 when
one is not, 2 for a usage error (no shim library).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
SERVE = os.path.join(ROOT, "scripts", "serve.py")
CASES = ("serving", "nograd_autocast_cache", "inference_then_backward", "other_thread_capture", "model_swap",
         "ctx_retain_release", "flat_buffer_weights", "inference_cast_fresh")
BLOCKS = 4
TILE = (1, 24, 7, 16, 16)  # 7 * 16 * 16 + 5 = 1797 tokens a ViT call
ALLOC_ENV = "H3_SOUNDNESS_ALLOC_BYTES"  # model_swap: the size arm A could allocate, for arm S
MARGIN = 1 << 30
CHILD_TIMEOUT = 300


# ---------------------------------------------------------------- child side

def sha(t):
    import hashlib
    import torch
    return hashlib.sha256(t.detach().contiguous().cpu().view(torch.uint8).numpy()).hexdigest()


def raised(e):
    """An exception as compared between arms: its type and first line, numbers and
    addresses blanked (an out-of-memory message counts bytes that differ by process)."""
    first = (str(e).strip().splitlines() or [""])[0]
    return f"raised {type(e).__name__}: {re.sub(r'0x[0-9a-fA-F]+|[0-9]+', '#', first)[:200]}"


class Case:
    """What a child case collects: outputs (compared) and info (recorded)."""

    def __init__(self):
        import torch
        sys.path.insert(0, os.path.join(ROOT, "scripts"))
        import h3_vae
        self.torch, self.h3_vae, self.dev = torch, h3_vae, torch.device("cuda")
        self.outputs, self.info = {}, {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                       "exceptions": {}}
        self.t0 = time.time()

    def model(self, seed=0, requires_grad=False):
        return self.h3_vae.build_model(BLOCKS, seed, self.dev, requires_grad=requires_grad)

    def tiles(self, n, first_seed=1):
        return [self.h3_vae.make_latent(TILE, first_seed + i, self.dev) for i in range(n)]

    def inference(self):
        return self.h3_vae.decode_context("inference", self.dev)

    def step(self, key, fn):
        """outputs[key] = fn() (a hash or an event), or the exception fn raised; returns fn()'s value or None."""
        try:
            value = fn()
        except Exception as e:  # noqa: BLE001  (whatever the step raises is the behaviour compared)
            self.outputs[key] = raised(e)
            self.info["exceptions"][key] = f"{type(e).__name__}: {e}"[:600]
            return None
        if value is not None:
            self.outputs[key] = value
        return value

    def done(self):
        self.info["seconds"] = round(time.time() - self.t0, 2)
        return {"outputs": self.outputs, "info": self.info}


def child_serving():
    """serve.py in serving mode, eager and with CUDA graphs, each in its own process (this
    one's environment, the shim preloaded in arm S; their stderr is this process's)."""
    outputs, info = {}, {"runs": {}}
    for name, extra in (("eager", []), ("graphs", ["--cuda-graphs"])):
        cmd = [sys.executable, SERVE, "--mode", "serving", "--latent", "1,24,17,32,48", "--blocks", str(BLOCKS),
               "--requests", "3", "--warmup", "1", "--json", *extra]
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=CHILD_TIMEOUT - 60)
        except subprocess.TimeoutExpired:
            outputs[f"{name}.rc"] = "timeout"
            continue
        outputs[f"{name}.rc"] = p.returncode
        try:
            doc = json.loads(p.stdout)
        except ValueError:
            outputs[f"{name}.json"] = "no JSON document on stdout"
            continue
        for q in doc.get("requests", []):
            outputs[f"{name}.request{q['request']}.sha256_fp32"] = q["sha256_fp32"]
            outputs[f"{name}.request{q['request']}.sha256_u8"] = q["sha256_u8"]
            outputs[f"{name}.request{q['request']}.vit_calls"] = q["vit_calls"]
        outputs[f"{name}.decode_mode"] = doc.get("decode_mode")
        info["runs"][name] = {"summary": doc.get("summary"), "gpu_memory": doc.get("gpu_memory")}
        info["gpu"] = info.get("gpu") or doc.get("environment", {}).get("gpu")
        info["torch"] = info.get("torch") or doc.get("environment", {}).get("torch")
    eager = [v for k, v in sorted(outputs.items()) if k.startswith("eager.request") and "sha256_fp32" in k]
    graphs = [v for k, v in sorted(outputs.items()) if k.startswith("graphs.request") and "sha256_fp32" in k]
    outputs["eager_equals_graphs"] = bool(eager) and eager == graphs
    return {"outputs": outputs, "info": info}


def child_nograd_autocast_cache():
    """The serving pipeline's context: no_grad, one autocast region, the cast cache on, parameters
    requiring grad; every tile after the first reads the weights' cached FP16 casts."""
    c = Case()
    torch = c.torch
    model = c.model(0, requires_grad=True)
    tiles = c.tiles(3)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
        c.info["autocast_cache_enabled"] = torch.is_autocast_cache_enabled()
        c.info["params_require_grad"] = all(p.requires_grad for p in model.parameters())
        for i, tile in enumerate(tiles):
            c.step(f"tile{i}", lambda tile=tile: sha(model(tile)))
        c.step("tile0_again", lambda: sha(model(tiles[0])))
    return c.done()


def child_inference_then_backward():
    """A decode in inference_mode, then in the same process a new stack forward under autocast
    (grad on, parameters requiring grad) and backward, twice; the backward's nondeterministic
    sums (attention's, atomics) show as repeats that differ in arm A."""
    c = Case()
    torch = c.torch
    tiles = c.tiles(2)  # made outside inference_mode: a tensor autograd saves must not be an inference tensor
    first = c.model(0)
    with c.inference():
        c.step("inference", lambda: sha(first(tiles[0])))
    model = c.model(1, requires_grad=True)
    runs = {}
    for rep in range(2):
        try:
            model.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.float16):
                y = model(tiles[1])
            y.float().square().mean().backward()
            runs.setdefault("forward", []).append(sha(y))
            for name, p in model.named_parameters():
                runs.setdefault(f"grad.{name}", []).append(sha(p.grad) if p.grad is not None else "no grad")
        except Exception as e:  # noqa: BLE001
            c.outputs[f"run{rep}"] = raised(e)
            c.info["exceptions"][f"run{rep}"] = f"{type(e).__name__}: {e}"[:600]
            break
    for key, values in runs.items():
        c.outputs[key] = {"repeats": values}
    return c.done()


def child_other_thread_capture():
    """Thread 1 decodes while thread 2 captures a graph in global capture mode, in two phases.
    Each thread warms up in itself first (PyTorch's cuBLAS and cuDNN handles are the thread's
    own, and a handle made during another thread's global capture fails: its cudaMalloc is
    refused), thread 1 holding one output while it makes the next as in its loop (so that its
    allocator has every block the loop needs cached), so that without the shim thread 1 need
    make no call a global capture forbids, at least while nothing empties the cache. In each
    phase thread 1 runs at least MIN_ITERS iterations and goes on until thread 2's capture has
    ended, and synchronises only after it; the sleeps inside the capture let it run meanwhile."""
    import threading
    c = Case()
    torch = c.torch
    nn = torch.nn
    model = c.model(0)
    tile = c.tiles(1)[0]
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).to(c.dev, torch.float16)
    static_x = torch.randn(64, 1024).to(c.dev, torch.float16)
    xs = [torch.randn(64, 1024).to(c.dev, torch.float16) for _ in range(3)]
    torch.cuda.synchronize()
    min_iters, max_iters = 8, 5000
    phases = [{"name": name, "capturing": threading.Event(), "captured": threading.Event(), "iters": 0, "during": 0}
              for name in ("capture_begin", "graph_context")]
    barrier = threading.Barrier(2, timeout=120)

    def record(key, e):
        c.outputs[key] = raised(e)
        c.info["exceptions"][key] = f"{type(e).__name__}: {e}"[:600]

    def body(ph):  # what the graph holds; the sleeps hand the GIL to thread 1 inside the capture
        ph["capturing"].set()
        h = mlp[0](static_x)
        time.sleep(0.02)
        h = mlp[1](h)
        time.sleep(0.02)
        y = mlp[2](h)
        time.sleep(0.02)
        return y

    def begin_end(ph):  # the capture torch.cuda.graph makes, without its synchronize and empty_cache
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.no_grad(), torch.cuda.stream(stream):
            graph.capture_begin()  # capture_error_mode "global", the default
            try:
                out = body(ph)
            finally:
                graph.capture_end()
        torch.cuda.current_stream().wait_stream(stream)
        return graph, out

    def graph_context(ph):  # its entry synchronises and empties the allocator's cache, thread 1's blocks too
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph):  # capture_error_mode="global", the default
            out = body(ph)
        return graph, out

    def thread1():
        s1 = torch.cuda.Stream()
        try:
            with torch.cuda.stream(s1), c.inference():
                for _ in range(3):  # as the loop below: the last output held while the next is made
                    y = model(tile)
            s1.synchronize()
            del y
        except Exception as e:  # noqa: BLE001
            record("thread1_warmup", e)
        for ph in phases:
            name, y = ph["name"], None
            try:
                barrier.wait()
                with torch.cuda.stream(s1), c.inference():
                    while ph["iters"] < min_iters or not ph["captured"].is_set():
                        if ph["capturing"].is_set():
                            ph["during"] += 1
                        y = model(tile)
                        ph["iters"] += 1
                        if ph["iters"] >= max_iters:
                            break
                s1.synchronize()
                c.outputs[f"{name}.thread1"] = sha(y)
            except Exception as e:  # noqa: BLE001
                ph["captured"].wait(60)  # touch the GPU no more while the capture may be under way
                record(f"{name}.thread1", e)

    def thread2():
        try:
            with torch.no_grad():
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(2):
                        mlp(static_x)
                torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001
            record("thread2_warmup", e)
        for ph, capture_with in zip(phases, (begin_end, graph_context)):
            name, graph, out = ph["name"], None, None
            try:
                barrier.wait()
                graph, out = capture_with(ph)
                c.outputs[f"{name}.capture"] = "ok"
            except Exception as e:  # noqa: BLE001
                record(f"{name}.capture", e)
            finally:
                ph["capturing"].clear()
                ph["captured"].set()
            if graph is None:
                continue
            try:
                outs = []
                for x in xs:
                    static_x.copy_(x)
                    graph.replay()
                    outs.append(out.clone())
                torch.cuda.synchronize()
                c.outputs[f"{name}.replays"] = sha(torch.cat(outs))
            except Exception as e:  # noqa: BLE001
                record(f"{name}.replays", e)

    threads = [threading.Thread(target=thread1, daemon=True), threading.Thread(target=thread2, daemon=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    c.outputs["threads_finished"] = not any(t.is_alive() for t in threads)
    for ph in phases:
        c.outputs[f"{ph['name']}.overlapped"] = ph["during"] > 0  # thread 1 began an iteration mid-capture
        c.info[ph["name"]] = {"iters": ph["iters"], "during": ph["during"]}
    with torch.no_grad():  # what thread 2's replays must give: the MLP run eagerly
        c.step("eager_mlp", lambda: sha(torch.cat([mlp(x) for x in xs])))
    with c.inference():
        c.step("tile_after", lambda: sha(model(tile)))
    return c.done()


def child_model_swap():
    """Stacks loaded, run and deleted one after the other, then nearly all the memory arm A has free."""
    import gc
    c = Case()
    torch = c.torch
    tile = c.tiles(1)[0]
    for k in range(4):
        model = c.model(10 + k)
        with c.inference():
            c.step(f"model{k}", lambda: sha(model(tile)))
        del model
        gc.collect()
        torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    size = int(os.environ.get(ALLOC_ENV) or max(free - MARGIN, 0))
    c.info.update(free_bytes=free, total_bytes=total, alloc_bytes=size, size_from_arm_a=bool(os.environ.get(ALLOC_ENV)),
                  torch_reserved_bytes=torch.cuda.memory_reserved())
    oom = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
    try:
        big = torch.empty(size, dtype=torch.uint8, device=c.dev)
        big[-1:].fill_(1)
        torch.cuda.synchronize()
        c.outputs["big_alloc"] = "ok"
        del big
    except oom as e:  # only whether: its message counts this process's bytes
        c.outputs["big_alloc"] = "raised OutOfMemoryError"
        c.info["exceptions"]["big_alloc"] = str(e)[:600]
    except Exception as e:  # noqa: BLE001
        c.outputs["big_alloc"] = raised(e)
        c.info["exceptions"]["big_alloc"] = f"{type(e).__name__}: {e}"[:600]
    torch.cuda.empty_cache()
    model = c.model(10)
    with c.inference():
        again = c.step("model0_again", lambda: sha(model(tile)))
    c.outputs["model0_again_equals_model0"] = again is not None and again == c.outputs.get("model0")
    return c.done()


def child_ctx_retain_release():
    """A graph replayed before and after a retain and release of the primary context, whose
    count stays above zero throughout (the runtime holds it): nothing may be freed."""
    import ctypes
    c = Case()
    torch, h3_vae = c.torch, c.h3_vae
    model = c.model(0)
    tile = c.tiles(1)[0]
    with c.inference():
        static_in = tile.clone()
        graph, static_out = h3_vae.capture(lambda: model(static_in), warmups=2)
        graph.replay()
        torch.cuda.synchronize()
        c.step("replay_before", lambda: sha(static_out))
    cuda = ctypes.CDLL("libcuda.so.1")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    cuda.cuDeviceGet.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    cuda.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
    try:  # cuda.h maps cuDevicePrimaryCtxRelease to the _v2 export (CUDA 11 and later)
        release, c.info["release_symbol"] = cuda.cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease_v2"
    except AttributeError:
        release, c.info["release_symbol"] = cuda.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease"
    release.argtypes = [ctypes.c_int]
    for f in (cuda.cuDeviceGet, cuda.cuDevicePrimaryCtxRetain, release):
        f.restype = ctypes.c_int
    c.outputs["cuDeviceGet"] = cuda.cuDeviceGet(ctypes.byref(dev), torch.cuda.current_device())
    c.outputs["cuDevicePrimaryCtxRetain"] = cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev.value)
    c.outputs["cuDevicePrimaryCtxRelease"] = release(dev.value)

    def replay():
        graph.replay()
        torch.cuda.synchronize()  # an illegal address shows here
        return sha(static_out)

    c.step("replay_after", replay)
    with c.inference():
        c.step("eager_after", lambda: sha(model(tile)))
    return c.done()


def child_flat_buffer_weights():
    """Parameters as views of one flat buffer (as FSDP's or a loader's flat weights), changed
    through the buffer, not through any parameter."""
    c = Case()
    torch = c.torch
    model = c.model(0)
    tile = c.tiles(1)[0]
    params = list(model.parameters())
    flat = torch.empty(sum(p.numel() for p in params), device=c.dev)
    with torch.no_grad():
        off = 0
        for p in params:
            n = p.numel()
            flat[off:off + n].copy_(p.reshape(-1))
            p.data = flat[off:off + n].view_as(p)
            off += n
        original = flat.clone()
        other = c.model(1)
        other_flat = torch.nn.utils.parameters_to_vector(other.parameters())
    c.info["flat_elements"] = flat.numel()
    with c.inference():
        before = c.step("before", lambda: sha(model(tile)))
        c.step("other_model", lambda: sha(other(tile)))
    del other
    with torch.no_grad():
        flat.copy_(other_flat)
    with c.inference():
        c.step("after_copy", lambda: sha(model(tile)))
    with torch.no_grad():
        flat.copy_(original)
    with c.inference():
        c.step("restored", lambda: sha(model(tile)))
    c.outputs["after_copy_equals_other_model"] = c.outputs.get("after_copy") == c.outputs.get("other_model")
    c.outputs["restored_equals_before"] = before is not None and c.outputs.get("restored") == before
    return c.done()


def child_inference_cast_fresh():
    """The project's earlier mode: inference_mode, requires_grad_(False), every call casting the weights."""
    c = Case()
    model = c.model(0)
    tiles = c.tiles(3)
    with c.inference():
        for i, tile in enumerate(tiles):
            c.step(f"tile{i}", lambda tile=tile: sha(model(tile)))
    return c.done()


# --------------------------------------------------------------- parent side

def run_child(case, shim, env_extra=None):
    """One process of `case`: without the shim (shim None) or with it (H3SHIM_STATS=1)."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("H3SHIM_")
           and k != ALLOC_ENV}
    env["PYTHONUNBUFFERED"] = "1"
    if shim:
        env.update(LD_PRELOAD=shim, H3SHIM_STATS="1")
    env.update(env_extra or {})
    t0 = time.time()
    try:
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", case], env=env,
                           capture_output=True, text=True, timeout=CHILD_TIMEOUT)
        rc, stdout, stderr = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc = "timeout"
        stdout = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        stderr = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
    out = {"rc": rc, "seconds": round(time.time() - t0, 1)}
    try:
        out["result"] = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        out["error"] = "no JSON line on stdout"
    if shim:
        lines = stderr.splitlines()
        out["shim_lines"] = [ln for ln in lines if ln.startswith("h3shim:")][:80]
    if shim or rc != 0 or "result" not in out:
        out["stderr_tail"] = stderr[-3000:]
    return out


def verdict(base, shim):
    """(ok, findings, nondeterministic keys) for one case's two runs (run_child's dicts):
    ok when both arms exited 0 with a result and every output of arm A is the same in
    arm S (an output given as {"repeats": [...]} whose repeats differ in arm A is left out)."""
    findings = []
    for arm, run in (("A", base), ("S", shim)):
        if run.get("rc") != 0:
            findings.append(f"arm {arm} exited {run.get('rc')}")
        if "result" not in run:
            findings.append(f"arm {arm} printed no result")
    bo = (base.get("result") or {}).get("outputs", {})
    so = (shim.get("result") or {}).get("outputs", {})
    nondeterministic = []
    if "result" in base and "result" in shim:
        for k in sorted(set(bo) | set(so)):
            if k not in bo or k not in so:
                findings.append(f"{k}: only in arm {'A' if k in bo else 'S'} ({bo.get(k, so.get(k))})")
                continue
            b, s = bo[k], so[k]
            if isinstance(b, dict) and "repeats" in b:
                reps = b["repeats"]
                if len(set(map(str, reps))) > 1:
                    nondeterministic.append(k)
                    continue
                got = s["repeats"] if isinstance(s, dict) and "repeats" in s else [s]
                if any(g != reps[0] for g in got):
                    findings.append(f"{k}: {short(reps[0])} without the shim, {', '.join(map(short, got))} with it")
            elif b != s:
                findings.append(f"{k}: {short(b)} without the shim, {short(s)} with it")
    return not findings, findings, nondeterministic


def short(v):
    """A hash shortened to 16 digits; anything else as it is."""
    v = str(v)
    return v[:16] if re.fullmatch(r"[0-9a-f]{64}", v) else v


def pick_cases(spec):
    """Case names from --cases: names or indices, comma-separated."""
    names = []
    for item in filter(None, (x.strip() for x in spec.split(","))):
        if item.isdigit() and int(item) < len(CASES):
            names.append(CASES[int(item)])
        elif item in CASES:
            names.append(item)
        else:
            raise ValueError(f"unknown case {item!r}: give names or numbers 0-{len(CASES) - 1} of {', '.join(CASES)}")
    return names


def stats_summary(lines):
    """The shim's stats lines that say what it matched and ran (signature, ops, fallbacks, weight_cache)."""
    keep = ("stats: signature", "stats: op ", "weight_cache", "WARN", "ERROR", "flush")
    return [ln for ln in lines if any(k in ln for k in keep)][:30]


def main(argv=None):
    ap = argparse.ArgumentParser(description="The shim against no shim in real programs' ways of running H3.")
    ap.add_argument("--child", choices=CASES)
    ap.add_argument("--shim", default=os.path.join(ROOT, "build", "libh3shim.so"))
    ap.add_argument("--cases", default=",".join(CASES), help="names or numbers 0-7, comma-separated (default all)")
    ap.add_argument("--tag", default="", help="suffix of the evidence files' names")
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(globals()[f"child_{a.child}"]()))
        return 0
    try:
        cases = pick_cases(a.cases)
    except ValueError as e:
        print(f"soundness.py: error: {e}", file=sys.stderr)
        return 2
    shim = os.path.abspath(a.shim)
    if not os.path.isfile(shim):
        print(f"soundness.py: error: no shim library at {shim} (make, or --shim PATH)", file=sys.stderr)
        return 2
    sys.path.insert(0, HERE)
    import shimstats
    doc, ok, lines, gpu, torch_version = {"shim": shim, "cases": {}}, True, [], None, None
    started = time.time()
    for case in cases:
        base = run_child(case, None)
        extra = {}
        alloc = ((base.get("result") or {}).get("info") or {}).get("alloc_bytes")
        if case == "model_swap" and alloc is not None:
            extra[ALLOC_ENV] = str(alloc)  # the shim's arm allocates what arm A could
        with_shim = run_child(case, shim, extra)
        case_ok, findings, nondet = verdict(base, with_shim)
        ok &= case_ok
        for run in (base, with_shim):
            info = (run.get("result") or {}).get("info") or {}
            gpu, torch_version = gpu or info.get("gpu"), torch_version or info.get("torch")
        doc["cases"][case] = {"pass": case_ok, "findings": findings, "nondeterministic_without_shim": nondet,
                              "runs": {"A": base, "S": with_shim}}
        n = len((base.get("result") or {}).get("outputs", {}))
        lines.append(f"## {CASES.index(case)} {case}: {'pass' if case_ok else 'FAIL'}\n")
        lines.append(f"{n} outputs compared; arm A {base['seconds']} s (exit {base['rc']}), "
                     f"arm S {with_shim['seconds']} s (exit {with_shim['rc']})")
        lines += [f"- {f}" for f in findings] or ["- every output the same in both arms"]
        if nondet:
            lines.append(f"- not compared, different in arm A's own two runs (PyTorch's nondeterminism): "
                         f"{len(nondet)} outputs, e.g. {', '.join(nondet[:4])}")
        events = {k: v for k, v in ((base.get("result") or {}).get("outputs") or {}).items()
                  if isinstance(v, (str, bool, int)) and not re.fullmatch(r"[0-9a-f]{64}", str(v))}
        if events:
            lines.append("- events without the shim: " + "; ".join(f"{k} = {v}" for k, v in events.items()))
        if case == "model_swap":
            free = [((r.get("result") or {}).get("info") or {}).get("free_bytes") for r in (base, with_shim)]
            if None not in free:
                lines.append(f"- free after the last empty_cache: {free[0] / 2**30:.2f} GiB without the shim, "
                             f"{free[1] / 2**30:.2f} GiB with it")
        if case == "other_thread_capture":
            for arm, r in (("A", base), ("S", with_shim)):
                info = (r.get("result") or {}).get("info") or {}
                lines.append(f"- arm {arm}: thread 1's iterations (during a capture): " + ", ".join(
                    f"{ph} {info[ph]['iters']} ({info[ph]['during']})" for ph in ("capture_begin", "graph_context")
                    if ph in info))
        stats = stats_summary(with_shim.get("shim_lines", []))
        lines.append("\nShim stats (arm S): " + ("; ".join(s.split("stats: ")[-1] for s in stats) or "none"))
        if not case_ok:  # what the process said besides the stats (a traceback, a warning)
            tail = [ln for ln in with_shim.get("stderr_tail", "").splitlines() if ln.strip()
                    and not ln.startswith("h3shim:")][-8:]
            if tail:
                lines += ["", "Arm S's stderr besides the stats, last lines:", "```", *tail, "```"]
        lines.append("")
    doc["pass"] = ok
    doc["seconds"] = round(time.time() - started, 1)
    head = [f"# The shim in real programs' ways of running the H3 block, {gpu or 'unknown GPU'}, "
            f"{time.strftime('%Y-%m-%d')}", "",
            f"`tests/gpu/soundness.py`, torch {torch_version}: each case in a fresh process without the shim (A) and "
            f"with it (S: its defaults, H3SHIM_STATS=1), {BLOCKS} blocks at 1797 tokens a ViT call; every output "
            f"hash and event compared. {doc['seconds']} s.", ""]
    shimstats.write_evidence(gpu or "no-gpu", "soundness" + a.tag, doc,
                             head + lines + [f"Result: {'pass' if ok else 'FAIL'}"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
