#!/usr/bin/env python3
"""The shim learning the H3 block in the process, at every (token count, batch), on the GPU machine.

With H3SHIM_SIGNATURES naming an empty directory the shim has no signature to
load: it learns one from the call stream when a run of calls repeats three
times (three block instances), once per (token count, batch), and fuses the
blocks after it. For each token count of --tokens and each batch of
--batches this builds scripts/h3_vae.py's block stack (--blocks blocks of the
decoder, synthetic weights of --seed, h3_vae.decode_context(--mode):
inference_mode and FP16 autocast by default, as robust.py's H3 items), a
deterministic FP32 residual stream h [batch, tokens, 2048] and the decoder's
RoPE tables for a token grid of that count (tokens = 5 + T * H * W, H and W
at most 16 where they can be, T at most 7: the ViT calls of serve.py --tile
T,H,W), and runs model.decoder.run_blocks on them:

  1. with the shim's observation paused (h3shim_pause), before anything is
     observed, for every shape: the reference output, a second run that must
     give its bits, then --pairs timed runs;
  2. observing, shape by shape: --runs runs (the first one learns: its first
     three blocks run unfused), each output against the reference bit for
     bit (the FP32 words compared as int32); then --pairs pairs of runs, one
     paused and one observed, alternating which goes first, every output
     compared too. The shim refuses a pause once weight_cache holds copies
     (their sources' writes must be seen): then the paused times are those
     of step 1 and the shape says so (H3SHIM_OP_WEIGHT_CACHE=0 keeps the
     pairs).

Each run is timed with CUDA events around the whole stack (its kernels and
the gaps between them: host-bound at small token counts), per block; a
shape's ratio is the median paused time over the median observed one (above
1: the shim is faster). The GPU's time alone: the stack captured as a CUDA
graph unobserved (unfused) and observed after learning (fused), --pairs
replays of each alternating back to back (where the GPU may reach its power
cap), then as many again each after --space-ms of idle GPU (meant to keep it
under the cap; NVML's SM clock and clock-event reasons read during each),
and nvidia-smi's SM clock and power and NVML's energy counter under each
graph replaying for --clock-seconds (energy per block). Per shape the shim's observed calls per run come from
h3shim_host_time when H3SHIM_STATS=1; its other counts exist only in the
stats table it prints at exit, so the measurements run in a child process
(this script with --child, the same environment) whose stderr is read: the
table's learning, signature, plan, op and flush lines are reported for the
whole process, and each learned group's line (block-learned-N-Kcalls-nROWS) is
given to the shape whose tokens x batch is ROWS, its first GEMM's rows.
--process-per-shape runs one child per shape instead, each shape with its
own lines (the same signature directory): the learner keeps a bounded number
of groups a process (H3_LEARN_MAX_LEARNED in shim/learn.c), which 24 shapes
in one process may pass, leaving the last ones unfused (still bitwise equal).

    LD_PRELOAD=$PWD/build/libh3shim.so H3SHIM_SIGNATURES=$(mktemp -d) H3SHIM_STATS=1 \\
        python3 tests/gpu/learn_shapes.py [--tokens 261,517,773,1029,1285,1349,1541,1797] [--batches 1,2,4]
        [--blocks 8] [--runs 3] [--pairs 20] [--mode inference|serving] [--process-per-shape]
        [--space-ms 20] [--clock-seconds 3]
        [--json | --out FILE] [--evidence [--tag SUFFIX]]

Without LD_PRELOAD the child gets --shim (default build/libh3shim.so); an
unset H3SHIM_SIGNATURES becomes a new empty directory and an unset
H3SHIM_STATS 1. Prints a table, or the JSON document with --json; --out
writes the document to FILE; --evidence also writes
tests/evidence/<date>-<gpu>-learn-shapes.json and .md (copied to $OUT).
Exit status 0 when every observed output of every shape is bitwise equal to
its reference, 1 otherwise (or when a child fails), 2 for a usage error (no
shim library, or the shim refuses the first pause).
"""
import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path[:0] = [HERE, os.path.join(ROOT, "scripts")]
import harness  # noqa: E402  (beside this script: median, stats_table)
import robust  # noqa: E402  (shim_pause, shim_host_time)
import shimstats  # noqa: E402
from h3_tiling import EXTRA_TOKENS  # noqa: E402  (standard library only: 4 register tokens and the zero token)

TOKENS = (261, 517, 773, 1029, 1285, 1349, 1541, 1797)
BATCHES = (1, 2, 4)
# The stats lines reported: the learner's, the matcher's, the planners', the ops', the engine's; and warnings.
STATS_KEEP = re.compile(r"^h3shim: \d+ (stats: (learn|signature|plan|engine|op |flush|weight_cache|owed|skip_released|"
                        r"lt_shadow)|WARN|ERROR)")
# A learned group's line: the group is named block-learned-N-Kcalls-nROWS, ROWS the rows of its first GEMM
# (tokens x batch for the block), which is how a whole process's lines are given to its shapes.
LEARNED = re.compile(r"stats: signature \S+/(block-learned-\d+-(\d+)calls-n(\d+)): (\d+) complete, (\d+) broken")
LEARN_COUNTS = re.compile(r"stats: learn: (\d+) groups learned, (\d+) refused")
USAGE = 2


def ints(text):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every value must be >= 1")
    return values


def grid_for(tokens):
    """A token grid (T, H, W) with T * H * W + 5 == tokens, as serve.py --tile T,H,W tiles give: T <= 7 and
    16 >= H >= W, 16 x 16 if it can be, else T as large as it can be, then W; (1, 1, tokens - 5) where no
    such grid exists (261: 1x16x16, 1349: 7x16x12, 1797: 7x16x16)."""
    n = tokens - EXTRA_TOKENS
    grids = [(n // (hh * ww), hh, ww) for hh in range(1, 17) for ww in range(1, hh + 1)
             if n % (hh * ww) == 0 and n // (hh * ww) <= 7]
    return max(grids, key=lambda g: (g[1] == g[2] == 16, g[0], g[2]), default=(1, 1, n))


# ---------------------------------------------------------------- child side

def nvml_state(readings):
    """The median SM clock and every clock-event reason of (MHz, reasons) readings, as gpu_state_during
    reports them; {} where NVML gave none."""
    clocks = [c for c, _ in readings if c is not None]
    if not clocks:
        return {}
    reasons = 0
    for _, r in readings:
        reasons |= r or 0
    return {"samples": len(clocks), "sm_clock_mhz": harness.median(clocks), "clock_event_reasons": hex(reasons)}


def child(a):
    """Both steps for every shape of `a` in this process; returns the JSON-ready result."""
    import torch
    import h3_vae
    pause, host_time = robust.shim_pause(), robust.shim_host_time
    if pause is None:
        return {"usage_error": "no shim in the process (h3shim_pause not found): run under LD_PRELOAD"}
    if pause(1) != 0:  # before the model's weights are made: the learner sees nothing but the runs of step 2
        return {"usage_error": "h3shim_pause(1) refused at the start (a trace being written?)"}
    dev = torch.device("cuda")
    nvml = h3_vae.Nvml(dev)
    model = h3_vae.build_model(a.blocks, a.seed, dev, requires_grad=a.mode == "serving")
    decoder, blocks = model.decoder, a.blocks

    def timed(fwd, during=None):
        """fwd()'s output and its CUDA-event time per block; during(), if given, runs on the host while the
        GPU runs fwd's work (its result is the third value)."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = fwd()
        seen = during() if during else None
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end) / blocks
        return (out, ms, seen) if during else (out, ms)

    def differing(out, ref):
        """Elements whose bits differ (-1: another shape or dtype)."""
        if out.shape != ref.shape or out.dtype != ref.dtype:
            return -1
        if torch.equal(out.view(torch.int32), ref.view(torch.int32)):
            return 0
        return int((out.view(torch.int32) != ref.view(torch.int32)).sum())

    shapes = []
    with h3_vae.decode_context(a.mode, dev):
        for tokens in a.tokens:
            for batch in a.batches:
                grid = grid_for(tokens)
                h = h3_vae.make_latent((batch, tokens, h3_vae.WIDTH), a.seed + 1, dev)
                cos, sin = decoder.rope_tables(batch, *grid, dev)
                fwd = (lambda h=h, cos=cos, sin=sin: decoder.run_blocks(h, cos, sin))
                ref = fwd()
                again = fwd()
                paused_ms = [timed(fwd)[1] for _ in range(a.pairs)]
                # The unfused stack as a CUDA graph (captured unobserved): its replay is the GPU's time alone.
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    graph_out = fwd()
                shapes.append({"tokens": tokens, "batch": batch, "grid": list(grid), "fwd": fwd, "ref": ref,
                               "reference_repeatable": differing(again, ref) == 0,
                               "paused_ms_before_observation": paused_ms, "graph": (graph, graph_out)})
                del again
        torch.cuda.synchronize()
        pause(0)
        for s in shapes:
            fwd, ref = s.pop("fwd"), s.pop("ref")
            diffs, runs = [], []
            for _ in range(a.runs):
                before = host_time()
                out, ms = timed(fwd)
                after = host_time()
                diffs.append(differing(out, ref))
                runs.append({"ms_per_block": ms, "differing": diffs[-1],
                             "observed_calls": after[1] - before[1] if before and after else None})
            paired = {True: [], False: []}
            refused = False
            for i in range(a.pairs):
                for paused in ((True, False) if i % 2 == 0 else (False, True)):
                    if paused and (refused or pause(1) != 0):
                        refused = True
                        continue
                    out, ms = timed(fwd)
                    diffs.append(differing(out, ref))
                    if paused:
                        pause(0)
                    paired[paused].append(ms)
            # GPU time: the unfused graph beside the same stack captured observed (fused after learning),
            # replays alternating, every replay's output compared.
            plain, plain_out = s.pop("graph")
            fused = torch.cuda.CUDAGraph()
            with torch.cuda.graph(fused):
                fused_out = fwd()

            def replays(idle_ms):
                """{unfused?: ms per block} of --pairs replays of each graph alternating, each after idle_ms of
                idle GPU (0: back to back), every replay's output compared; with idle_ms, also {unfused?: (SM
                clock, clock-event reasons)} read from NVML while each replay runs."""
                times, seen = {True: [], False: []}, {True: [], False: []}
                for i in range(a.pairs):
                    for unfused in ((True, False) if i % 2 == 0 else (False, True)):
                        g, o = (plain, plain_out) if unfused else (fused, fused_out)
                        if idle_ms > 0:
                            torch.cuda.synchronize()
                            time.sleep(idle_ms / 1e3)
                            _, ms, state = timed(g.replay, lambda: (nvml.sm_clock_mhz(), nvml.event_reasons()))
                            seen[unfused].append(state)
                        else:
                            _, ms = timed(g.replay)
                        diffs.append(differing(o, ref))
                        times[unfused].append(ms)
                return times, seen

            gpu, _ = replays(0)
            s.update(gpu_ms_per_block_unfused=harness.median(gpu[True]),
                     gpu_ms_per_block_fused=harness.median(gpu[False]))
            s["gpu_ratio"] = s["gpu_ms_per_block_unfused"] / s["gpu_ms_per_block_fused"]
            # The same replays spaced by --space-ms of idle GPU each, meant to keep either graph from the power
            # cap that back-to-back replays reach: the block's GPU time where the host leaves gaps (eager
            # serving) or the GPU has power to spare.
            if a.space_ms > 0:
                spaced, seen = replays(a.space_ms)
                s.update(gpu_ms_per_block_unfused_spaced=harness.median(spaced[True]),
                         gpu_ms_per_block_fused_spaced=harness.median(spaced[False]))
                s["gpu_ratio_spaced"] = s["gpu_ms_per_block_unfused_spaced"] / s["gpu_ms_per_block_fused_spaced"]
                for unfused, arm in ((True, "unfused"), (False, "fused")):
                    s[f"gpu_state_{arm}_spaced"] = nvml_state(seen[unfused])
            if a.clock_seconds > 0:  # the SM clock and power under each graph's replays, back to back
                s["gpu_state_unfused"] = h3_vae.gpu_state_during(plain.replay, dev, seconds=a.clock_seconds)
                s["gpu_state_fused"] = h3_vae.gpu_state_during(fused.replay, dev, seconds=a.clock_seconds)
                for arm in ("unfused", "fused"):
                    if "energy_mj_per_call" in s[f"gpu_state_{arm}"]:
                        s[f"energy_mj_per_block_{arm}"] = s[f"gpu_state_{arm}"]["energy_mj_per_call"] / blocks
                diffs.append(differing(fused_out, ref))
            del plain, fused, plain_out, fused_out, out
            in_pairs = len(paired[True]) == a.pairs
            s.update(runs=runs, pairs=a.pairs, pause_refused=refused,
                     differing_max=max(diffs), outputs_compared=len(diffs),
                     bitwise_ok=s["reference_repeatable"] and all(d == 0 for d in diffs),
                     ms_per_block_observed=harness.median(paired[False]),
                     ms_per_block_paused=harness.median(paired[True] if in_pairs
                                                        else s["paused_ms_before_observation"]),
                     paused_timed="in pairs with the observed runs" if in_pairs else
                     "before anything was observed (the shim refused the pairs' pauses)")
            s["ratio_paused_over_observed"] = (s["ms_per_block_paused"] / s["ms_per_block_observed"]
                                               if s["ms_per_block_observed"] else None)
            s["ms_per_block_paused_before_observation"] = harness.median(s.pop("paused_ms_before_observation"))
            del fwd, ref
    env = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(dev), "cuda": torch.version.cuda,
           "pid": os.getpid(), **{k: v for k, v in os.environ.items() if k.startswith("H3SHIM_") or k == "LD_PRELOAD"}}
    return {"environment": env, "shapes": shapes}


# --------------------------------------------------------------- parent side

def child_env(a):
    """(environment of the children, notes on what was set): the shim preloaded, H3SHIM_SIGNATURES and
    H3SHIM_STATS set; None when there is no shim library to preload."""
    env, notes = dict(os.environ), []
    if "libh3shim" not in env.get("LD_PRELOAD", ""):
        if not os.path.isfile(a.shim):
            return None, [f"no shim: LD_PRELOAD names no libh3shim and {a.shim} does not exist"]
        env["LD_PRELOAD"] = os.path.abspath(a.shim)
        notes.append(f"LD_PRELOAD={env['LD_PRELOAD']} (--shim)")
    if not env.get("H3SHIM_SIGNATURES"):
        env["H3SHIM_SIGNATURES"] = tempfile.mkdtemp(prefix="h3shim-learn-")
        notes.append(f"H3SHIM_SIGNATURES={env['H3SHIM_SIGNATURES']} (a new empty directory)")
    env.update(shimstats.asked_env())
    env.setdefault("H3SHIM_STATS", "1")
    if os.environ.get("OUT") and not env.get("H3SHIM_RECORD"):
        # What was learned and what was refused comes back with the run's files.
        env["H3SHIM_RECORD"] = os.path.join(os.environ["OUT"], "learned")
        notes.append(f"H3SHIM_RECORD={env['H3SHIM_RECORD']} ($OUT/learned)")
    env["PYTHONUNBUFFERED"] = "1"
    return env, notes


def signature_files(path):
    """The files in the signature directory (or [path] for a file)."""
    if os.path.isdir(path):
        return sorted(os.listdir(path))
    return [path] if os.path.exists(path) else []


def run_child(a, env, tokens, batches):
    """One child measuring `tokens` x `batches`; returns {rc, seconds, result, stats_lines, stats, error}."""
    argv = [sys.executable, os.path.abspath(__file__), "--child", "--tokens", ",".join(map(str, tokens)),
            "--batches", ",".join(map(str, batches)), "--blocks", str(a.blocks), "--runs", str(a.runs),
            "--pairs", str(a.pairs), "--mode", a.mode, "--seed", str(a.seed),
            "--clock-seconds", str(a.clock_seconds), "--space-ms", str(a.space_ms)]
    t0 = time.time()
    try:
        p = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=a.timeout)
        rc, stdout, stderr = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, stdout, stderr = None, e.stdout or "", e.stderr or ""
        stdout, stderr = (x.decode(errors="replace") if isinstance(x, bytes) else x for x in (stdout, stderr))
    sys.stderr.write(stderr)  # the child's warnings and stats table, as a run without a child shows them
    out = {"rc": rc, "seconds": round(time.time() - t0, 1)}
    try:
        out["result"] = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        out["error"] = f"timed out after {a.timeout} s" if rc is None else "no JSON line on stdout"
        out["stderr_tail"] = stderr[-3000:]
    table = harness.stats_table(stderr) or ""
    out["stats_lines"] = [ln for ln in stderr.splitlines() if STATS_KEEP.search(ln)][:200]
    out["stats"] = shimstats.parse(table)
    m = LEARN_COUNTS.search(table)
    out["learned"] = {"groups": int(m.group(1)), "refused": int(m.group(2))} if m else None
    out["learned_signatures"] = [{"group": g, "calls": int(k), "rows": int(n), "complete": int(c), "broken": int(b)}
                                 for g, k, n, c, b in LEARNED.findall(table)]
    return out


def fmt(v, digits=4):
    return "-" if v is None else f"{v:.{digits}f}"


def clock(s, spaced=""):
    """'SM MHz, W, reasons: unfused / fused' of a shape whose graphs' replays were watched (--clock-seconds;
    spaced="_spaced": NVML's readings under the spaced replays, no power), else '-'."""
    states = [s.get(f"gpu_state_unfused{spaced}"), s.get(f"gpu_state_fused{spaced}")]
    if not all(isinstance(g, dict) and "sm_clock_mhz" in g for g in states):
        return "-"
    return " / ".join(f"{g['sm_clock_mhz']:.0f} MHz" + (f" {g['power_w']:.0f} W" if "power_w" in g else "")
                      + f" {g['clock_event_reasons']}" for g in states)


def energy(s):
    """'mJ a block unfused / fused (ratio)' from NVML's energy counter under the back-to-back replays, else '-'."""
    u, f = s.get("energy_mj_per_block_unfused"), s.get("energy_mj_per_block_fused")
    if u is None or f is None or f <= 0:
        return "-"
    return f"{u:.3f} / {f:.3f} ({u / f:.3f})"


def render(doc):
    """The human summary: one row per shape, then the stats lines."""
    lines = [f"# The shim learning the H3 block in the process: {doc['environment'].get('gpu', '?')}, "
             f"{time.strftime('%Y-%m-%d')}", "",
             f"`tests/gpu/learn_shapes.py`: {doc['config']['blocks']} blocks, {doc['config']['mode']} mode, "
             f"{doc['config']['runs']} observed runs then {doc['config']['pairs']} pairs a shape; "
             f"H3SHIM_SIGNATURES {doc['signatures_dir']} ({len(doc['signature_files_at_start'])} files at the "
             f"start); torch {doc['environment'].get('torch')}.", "",
             "GPU time: the stack captured as a CUDA graph unobserved (unfused) and observed after learning "
             "(fused), replays alternating, medians. Eager: whole forwards with CUDA events (host-bound at small "
             "shapes). SM clock, power and clock-event reasons (0x4: the software power cap): nvidia-smi's "
             "medians while each graph replays back to back (unfused / fused); energy: the GPU's energy counter "
             "(NVML, the whole board, idle power included) over the same replays, per block."
             + (f" Spaced: the same replays, each after {doc['config']['space_ms']:g} ms of idle GPU, meant to keep "
                "either from reaching the power cap (unfused / fused, and their ratio), with NVML's SM clock and "
                "clock-event reasons read while each replay runs (medians, reasons of all)."
                if doc["config"].get("space_ms", 0) > 0 else ""), "",
             "| tokens | batch | grid | bitwise | GPU ms/block unfused | GPU ms/block fused | GPU ratio | "
             "SM clock, power (unfused / fused) | energy mJ/block (unfused / fused) | spaced GPU ms/block | "
             "spaced ratio | spaced SM clock (unfused / fused) | "
             "eager ms/block paused | eager ms/block observed | eager paused/observed | "
             "paused timed | runs, ms/block | observed calls a run | learned: complete (broken) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in doc["shapes"]:
        bits = ("equal" if s["bitwise_ok"] else f"DIFFERS ({s['differing_max']} elements at most)"
                if s["differing_max"] else "DIFFERS (two paused runs differed)")
        lines.append(f"| {s['tokens']} | {s['batch']} | {'x'.join(map(str, s['grid']))} | {bits} | "
                     f"{fmt(s.get('gpu_ms_per_block_unfused'))} | {fmt(s.get('gpu_ms_per_block_fused'))} | "
                     f"{fmt(s.get('gpu_ratio'), 3)} | {clock(s)} | {energy(s)} | "
                     f"{fmt(s.get('gpu_ms_per_block_unfused_spaced'))} / "
                     f"{fmt(s.get('gpu_ms_per_block_fused_spaced'))} | "
                     f"{fmt(s.get('gpu_ratio_spaced'), 3)} | {clock(s, '_spaced')} | "
                     f"{fmt(s['ms_per_block_paused'])} | {fmt(s['ms_per_block_observed'])} | "
                     f"{fmt(s['ratio_paused_over_observed'], 3)} | "
                     f"{'pairs' if not s['pause_refused'] else 'before observing'} | "
                     + ", ".join(fmt(r["ms_per_block"]) for r in s["runs"]) + " | "
                     + ", ".join("-" if r["observed_calls"] is None else str(r["observed_calls"]) for r in s["runs"])
                     + " | " + (", ".join(f"{g['complete']} ({g['broken']})" for g in s.get("learned_signatures", []))
                                or "-") + " |")
    for c in doc["children"]:
        learned = c.get("learned") or {}
        lines += ["", f"Child {c['shapes']} ({c['seconds']} s, exit status {c['rc']}"
                  + (f", {c['error']}" if c.get("error") else "")
                  + (f"; {learned['groups']} groups learned, {learned['refused']} refused" if learned else "")
                  + "): the shim's stats lines", "", "```"]
        lines += c["stats_lines"] or ["(none: H3SHIM_STATS=0?)"]
        lines.append("```")
    lines += ["", f"Result: {'pass' if doc['pass'] else 'FAIL'}"]
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(prog="learn_shapes.py",
                                description="The shim learning the H3 block in the process, per (tokens, batch).")
    p.add_argument("--tokens", type=ints, default=list(TOKENS), help="token counts (default %(default)s)")
    p.add_argument("--batches", type=ints, default=list(BATCHES), help="batches (default %(default)s)")
    p.add_argument("--blocks", type=int, default=8, help="blocks in the stack (default 8)")
    p.add_argument("--runs", type=int, default=3, help="observed runs a shape before the pairs; the first learns")
    p.add_argument("--pairs", type=int, default=20, help="timed pairs a shape, paused and observed (default 20)")
    p.add_argument("--mode", default="inference", choices=["inference", "serving"],
                   help="h3_vae.decode_context around everything (default inference: inference_mode + autocast)")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights (the input: seed + 1)")
    p.add_argument("--space-ms", type=float, default=20.0,
                   help="idle ms before each of the spaced replays (0: none; default %(default)s)")
    p.add_argument("--clock-seconds", type=float, default=3.0,
                   help="seconds each graph replays back to back under nvidia-smi's SM clock and power readings "
                        "(the first half second is not counted; 0: not read; default %(default)s)")
    p.add_argument("--shim", default=os.path.join(ROOT, "build", "libh3shim.so"),
                   help="preloaded in the children when LD_PRELOAD names no libh3shim")
    p.add_argument("--process-per-shape", action="store_true",
                   help="one child process a shape (each shape's own stats lines) instead of one for all")
    p.add_argument("--timeout", type=int, default=540, help="seconds a child may run (default 540)")
    p.add_argument("--json", action="store_true", help="print the JSON document instead of the table")
    p.add_argument("--out", metavar="FILE", help="write the JSON document to FILE")
    p.add_argument("--evidence", action="store_true", help="also write tests/evidence/<date>-<gpu>-learn-shapes.*")
    p.add_argument("--tag", default="", help="suffix of the evidence files' names")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.blocks < 1 or a.runs < 1 or a.pairs < 1 or min(a.tokens) <= EXTRA_TOKENS:
        p.error(f"--blocks, --runs and --pairs must be >= 1 and every token count > {EXTRA_TOKENS}")
    if a.child:
        result = child(a)
        print(json.dumps(result))
        return USAGE if "usage_error" in result else 0

    env, notes = child_env(a)
    if env is None:
        print(f"learn_shapes.py: error: {notes[0]}", file=sys.stderr)
        return USAGE
    for note in notes:
        print(f"learn_shapes.py: {note}", file=sys.stderr)
    sig_dir = env["H3SHIM_SIGNATURES"]
    at_start = signature_files(sig_dir)
    if at_start:
        print(f"learn_shapes.py: warning: {sig_dir} is not empty ({len(at_start)} files): the shim loads them "
              "and learns only what they do not match", file=sys.stderr)
    shapes = [(t, b) for t in a.tokens for b in a.batches]
    groups = [[s] for s in shapes] if a.process_per_shape else [shapes]
    children, measured, environment = [], [], {}
    for group in groups:
        c = run_child(a, env, sorted({t for t, _ in group}), sorted({b for _, b in group}))
        result = c.pop("result", {}) or {}
        if "usage_error" in result:
            print(f"learn_shapes.py: error: {result['usage_error']}", file=sys.stderr)
            return USAGE
        environment = result.get("environment", environment)
        for s in result.get("shapes", []):
            if a.process_per_shape:
                s["stats_lines"] = c["stats_lines"]
            s["learned_signatures"] = [g for g in c["learned_signatures"] if g["rows"] == s["tokens"] * s["batch"]]
            measured.append(s)
        children.append({"shapes": ";".join(f"{t}x{b}" for t, b in group), **c})
    got = {(s["tokens"], s["batch"]) for s in measured}
    ok = (all(c["rc"] == 0 and not c.get("error") for c in children) and got == set(shapes)
          and all(s["bitwise_ok"] for s in measured))
    config = ("tokens", "batches", "blocks", "runs", "pairs", "mode", "seed", "process_per_shape", "clock_seconds",
              "space_ms")
    doc = {"pass": ok, "config": {k: getattr(a, k) for k in config},
           "environment": environment, "signatures_dir": sig_dir, "signature_files_at_start": at_start,
           "signature_files_at_end": signature_files(sig_dir), "notes": notes,
           "missing_shapes": sorted(set(shapes) - got), "shapes": measured, "children": children}
    lines = render(doc)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    if a.evidence:  # write_evidence prints the table: on stderr when stdout is the JSON document's
        with contextlib.redirect_stdout(sys.stderr if a.json else sys.stdout):
            shimstats.write_evidence(environment.get("gpu", "no-gpu"), "learn-shapes" + a.tag, doc, lines)
    if a.json:
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    elif not a.evidence:
        print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
