#!/usr/bin/env python3
"""Drives the GPU evidence run of h3shim; tests/gpu/run.sh builds the shim and starts it.

Every arm is a separate Python process, because LD_PRELOAD must be in a
process's environment from its start:

  A      no shim
  B      shim, H3SHIM_OPS=none
  C      shim with H3SHIM_TRACE (H3SHIM_OPS left at the shim's default)
  op:X   shim, H3SHIM_OPS=X for each X in $H3SHIM_OP_LIST (space separated; default:
         swiglu weight_cache norm_cast residual_norm qk_norm_rope)
  all    shim, H3SHIM_OPS=all

Steps: versions; the tiling arithmetic; the checkpoint loader; correctness
(each arm decodes with serve.py, its FP32 output compared bit for bit with
A's); the per-block call counts (traces of --blocks 2 and 3); FP16 activation
headroom; ms per block at 1797 tokens; then timing rounds that alternate the
arms (A B all A B all ...), each process measuring eager wall time per
request, CUDA-graph replay time and the host dispatch floor. Arms that need
the shim are reported as "skipped: no shim" when build/libh3shim.so is
missing, never as passed. The evidence goes to
tests/evidence/<date>-<gpu>[-full].json with a .md summary beside it (and
to --copy-to, normally $OUT). Exit status 1 if any check failed, else 0.
"""

import argparse
import datetime
import glob
import gzip
import hashlib
import json
import os
import re
import shutil
import tarfile
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shimstats  # noqa: E402  (beside this script)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
SERVE = os.path.join(REPO, "scripts", "serve.py")
TRACE_STATS = os.path.join(REPO, "scripts", "trace_stats.py")
WORKER = os.path.join(HERE, "worker.py")
CHECK_WEIGHTS = os.path.join(HERE, "check_weights.py")

ONE_TILE = "1,24,7,16,16"
CONFIGS = {
    "quick": {"latent": "1,24,12,24,24", "correct_requests": 2, "requests": 5, "warmup": 2, "rounds": 3,
              "timeout": 240, "floor_reps": 20},
    "full": {"latent": "1,24,37,32,48", "correct_requests": 1, "requests": 2, "warmup": 1, "rounds": 2,
             "timeout": 420, "floor_reps": 20},
}
DESIGN_MS_PER_BLOCK = {"eager": 0.99, "graph": 0.93, "host_floor": "0.6-0.7"}
MARKER = "spin_kernel"


def median(values):
    s = sorted(v for v in values if v is not None)
    return (s[len(s) // 2] + s[(len(s) - 1) // 2]) / 2 if s else None


class Harness:
    def __init__(self, args):
        self.args = args
        self.cfg = CONFIGS[args.mode]
        self.start = time.time()
        self.work = args.work
        self.shim = args.shim if os.path.isfile(args.shim) else None
        self.ops = os.environ.get("H3SHIM_OP_LIST", "swiglu weight_cache norm_cast residual_norm qk_norm_rope").split()
        self.evidence = {"mode": args.mode, "started_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                         "config": self.cfg, "op_list": self.ops, "checks": {}, "arms": {}}
        for sub in ("logs", "out", "traces"):
            os.makedirs(os.path.join(self.work, sub), exist_ok=True)

    def log(self, message):
        print(f"[{time.time() - self.start:6.0f}s] {message}", flush=True)

    def remaining(self):
        return self.args.deadline - time.time()

    def arms(self):
        """(name, environment additions or None for no shim) of every arm, A first."""
        out = [("A", None), ("B", {"H3SHIM_OPS": "none"}),
               ("C", {"H3SHIM_TRACE": os.path.join(self.work, "traces", "C", "trace-%p.jsonl")}),
               # D and N bisect the shim's own host cost: everything off, and
               # everything but the driver entry points handed to libraries.
               ("D", {"H3SHIM_DISABLE": "1"}), ("N", {"H3SHIM_INTERPOSE_DRIVER": "0"}),
               # M runs the matcher alone: every block call must be recognised.
               ("M", {"H3SHIM_MATCH": "1", "H3SHIM_OPS": "none"}),
               # S: the shim as users get it, its defaults (the ops validated on this GPU).
               ("S", {}),
               # R runs the engine with the replay op: every group of every block
               # is held back and issued verbatim when it completes.
               ("R", {"H3SHIM_OP_REPLAY": "1", "H3SHIM_OPS": "none"})]
        out += [(f"op:{op}", {"H3SHIM_OPS": op}) for op in self.ops]
        out.append(("all", {"H3SHIM_OPS": "all"}))
        return out

    def check(self, name, status, **details):
        """Records one check: status is "pass", "FAIL" or "skipped: why"."""
        self.evidence["checks"][name] = {"status": status, **details}
        self.log(f"check {name}: {status}")

    def run(self, name, argv, shim_env=None, timeout=None):
        """Runs one process; shim_env None means without the shim. Returns a result dict.

        The child gets this environment without LD_PRELOAD and H3SHIM_*
        variables, plus LD_PRELOAD and shim_env when shim_env is a dict.
        """
        timeout = min(timeout or self.cfg["timeout"], self.remaining())
        if timeout < 20:
            self.log(f"{name}: skipped (time budget)")
            return {"name": name, "skipped": "time budget", "rc": None}
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("H3SHIM_")}
        env["PYTHONUNBUFFERED"] = "1"
        if shim_env is not None:
            env.update(shim_env)
            env["LD_PRELOAD"] = self.shim
        if "H3SHIM_TRACE" in env:
            os.makedirs(os.path.dirname(env["H3SHIM_TRACE"]), exist_ok=True)
        stem = os.path.join(self.work, "logs", re.sub(r"[^A-Za-z0-9_.-]", "_", name))
        t0 = time.time()
        with open(stem + ".out", "w") as out, open(stem + ".err", "w") as err:
            proc = subprocess.Popen([sys.executable, *argv], stdout=out, stderr=err, env=env, cwd=REPO,
                                    start_new_session=True)
            try:
                rc = proc.wait(timeout=timeout)
                timed_out = False
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                rc, timed_out = proc.wait(), True
        with open(stem + ".out") as f:
            stdout = f.read()
        with open(stem + ".err") as f:
            stderr = f.read()
        result = {"name": name, "rc": rc, "seconds": round(time.time() - t0, 1), "timed_out": timed_out,
                  "stdout": stdout, "stderr": stderr, "stderr_tail": stderr[-4000:],
                  "env": {k: v for k, v in env.items() if k.startswith("H3SHIM_") or k == "LD_PRELOAD"}}
        if rc != 0:
            why = f"timed out after {timeout:.0f}s" if timed_out else f"exit status {rc}"
            if rc is not None and rc < 0:
                why += f" ({signal.Signals(-rc).name})"
            result["error"] = why
            last = stderr.strip().splitlines()[-1] if stderr.strip() else "(no stderr)"
            self.log(f"{name}: {why}; last stderr line: {last}")
        return result

    @staticmethod
    def json_doc(result):
        """The JSON document a process printed on stdout, or None."""
        try:
            return json.loads(result.get("stdout") or "")
        except ValueError:
            return None

    @staticmethod
    def json_lines(result):
        docs = []
        for line in (result.get("stdout") or "").splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                docs.append(doc)
        return docs

    def step_env(self):
        r = self.run("env", [WORKER, "env"], timeout=180)
        docs = [d for d in self.json_lines(r) if d.get("kind") == "env"]
        env = docs[0] if docs else {"error": r.get("error") or "no output", "stderr_tail": r.get("stderr_tail")}
        env.pop("kind", None)
        self.evidence["environment"] = env
        shim = {"path": self.args.shim, "present": self.shim is not None}
        if self.shim:
            with open(self.shim, "rb") as f:
                shim["sha256"] = hashlib.sha256(f.read()).hexdigest()
            shim["bytes"] = os.path.getsize(self.shim)
        self.evidence["shim"] = shim
        self.evidence["repo"] = git_info()
        libs = env.get("libraries", {})
        self.log(f"GPU {env.get('gpu')} SM {env.get('sm')}, driver {env.get('driver')}, torch {env.get('torch')}, "
                 f"CUDA {env.get('torch_cuda')}, cuBLASLt {libs.get('cublasLt', {}).get('version')}, "
                 f"cuDNN {env.get('cudnn_torch')}; shim {'present' if self.shim else 'MISSING'}")
        return "gpu" in env

    def step_plan(self):
        expected = {"1,24,37,32,48": (84, 3024, 124, 512, 768), "1,24,62,48,84": (336, 12096, None, None, None)}
        found, ok = {}, True
        for latent, want in expected.items():
            r = self.run(f"plan-{latent}", [SERVE, "--latent", latent, "--vit-calls-only", "--json"], timeout=60)
            plan = (self.json_doc(r) or {}).get("plan", {})
            got = tuple(plan.get(k) for k in ("vit_calls", "block_calls", "frames", "height", "width"))
            found[latent] = plan
            ok &= all(w is None or w == g for w, g in zip(want, got))
        self.check("tiling_plan", "pass" if ok else "FAIL", plans=found,
                   expected="[1,24,37,32,48]: 84 ViT calls, 3024 block calls, 124 frames of 512x768; "
                            "[1,24,62,48,84]: 336 ViT calls, 12096 block calls")

    def step_weights(self):
        r = self.run("check_weights", [CHECK_WEIGHTS, "--device", "cuda", "--work", os.path.join(self.work, "ckpt")],
                     timeout=300)
        doc = self.json_doc(r) or {}
        status = "pass" if r["rc"] == 0 and doc.get("ok") else "FAIL"
        if r.get("skipped"):
            status = f"skipped: {r['skipped']}"
        self.check("weights_loader", status, result=doc or r.get("error"), stderr_tail=r.get("stderr_tail"))
        shutil.rmtree(os.path.join(self.work, "ckpt"), ignore_errors=True)

    def step_kernels(self):
        """Each op's kernel against PyTorch, bit for bit (tests/gpu/test_<op>.py)."""
        for op in self.ops:
            script = os.path.join(HERE, f"test_{op}.py")
            if not os.path.exists(script):
                self.check(f"kernel_{op}", f"skipped: no {os.path.basename(script)}")
                continue
            r = self.run(f"kernel-{op}", [script, "--fatbin", os.path.join(REPO, "build", "kernels.fatbin")],
                         timeout=300)
            doc = self.json_doc(r) or {}
            status = "pass" if r["rc"] == 0 and doc.get("pass") else "FAIL"
            if r.get("skipped"):
                status = f"skipped: {r['skipped']}"
            self.check(f"kernel_{op}", f"{status} ({doc.get('elements')} elements, {doc.get('bits_differing')} "
                                       f"differing, {len(doc.get('cases', []))} cases)", result=doc or r.get("error"))

    def serve_arm(self, arm, shim_env, latent, extra, tag):
        """Runs serve.py in one arm; returns (result, JSON doc) or a skip result."""
        if shim_env is not None and self.shim is None:
            return {"skipped": "no shim"}, None
        if shim_env is not None:
            shim_env = {**shim_env, "H3SHIM_STATS": "1"}
        r = self.run(f"{tag}-{arm}", [SERVE, "--latent", latent, "--json", *extra], shim_env)
        return r, self.json_doc(r)

    def step_correctness(self):
        latent, reference = self.cfg["latent"], None
        for arm, shim_env in self.arms():
            out = os.path.join(self.work, "out", re.sub(r"[^A-Za-z0-9_.-]", "_", arm) + ".pt")
            extra = ["--blocks", "36", "--requests", str(self.cfg["correct_requests"]), "--warmup", "1",
                     "--same-latent", "--out", out] + (["--trace-mark"] if arm == "C" else [])
            r, doc = self.serve_arm(arm, shim_env, latent, extra, "correct")
            entry = self.evidence["arms"].setdefault(arm, {"env": shim_env or {}})
            if "skipped" in r:
                entry["correctness"] = {"status": f"skipped: {r['skipped']}"}
                continue
            shas = [q["sha256_fp32"] for q in (doc or {}).get("requests", [])]
            c = {"rc": r["rc"], "seconds": r.get("seconds"), "sha256_fp32": shas,
                 "sha256_u8": [q["sha256_u8"] for q in (doc or {}).get("requests", [])],
                 "repeatable_in_process": len(set(shas)) == 1 if shas else None,
                 "summary": (doc or {}).get("summary")}
            if shim_env is not None:
                c["shim_stats"] = stats_table(r.get("stderr", ""))
            if r["rc"] != 0 or doc is None:
                c["status"] = f"error: {r.get('error') or 'no JSON output'}"
                c["stderr_tail"] = r.get("stderr_tail")
            elif arm == "A":
                reference = out
                c["status"] = "reference" if c["repeatable_in_process"] else "FAIL: not repeatable within process"
            elif reference is None:
                c["status"] = "skipped: no reference output from arm A"
            else:
                c["compare"] = compare_outputs(reference, out)
                if not c["compare"].get("equal"):
                    c["status"] = (f"FAIL: {c['compare'].get('differing_elements', '?')} elements differ from A "
                                   f"{c['compare'].get('error', '')}").strip()
                elif not c["repeatable_in_process"]:
                    c["status"] = "FAIL: not repeatable within process"
                else:
                    c["status"] = "pass: bitwise equal to A"
                os.remove(out)
            if arm == "C":
                c["trace"] = self.trace_summary(os.path.join(self.work, "traces", "C"), (doc or {}))
            if arm == "M" and doc is not None:
                self.check_matcher(c.get("shim_stats") or "", doc)
            if arm == "R" and doc is not None:
                blocks = doc["plan"]["block_calls"] * (1 + len(doc.get("requests", [])))
                ok, text = shimstats.replay_verdict(c.get("shim_stats") or "", blocks)
                self.check("replay_op_takes_every_group", f"{'pass' if ok else 'FAIL'} ({text})")
            entry["correctness"] = c
            self.log(f"correctness {arm}: {c['status']}")
        if reference:
            os.remove(reference)

    def check_matcher(self, stats, doc):
        """Arm M: the stats must show one complete instance of the block
        signature per block call (warm-up included), and none broken."""
        m = re.search(r"signature \S+/block: (\d+) complete, (\d+) broken(.*)", stats)
        expected = doc["plan"]["block_calls"] * (1 + len(doc.get("requests", [])))
        if m is None:
            self.check("matcher_recognises_blocks", "FAIL: no signature line in the stats (signature not loaded?)")
            return
        complete, broken = int(m.group(1)), int(m.group(2))
        status = "pass" if complete == expected else "FAIL"
        self.check("matcher_recognises_blocks", f"{status} ({complete} of {expected} block calls recognised, "
                                                f"{broken} broken attempts{m.group(3)})")

    def trace_summary(self, directory, doc):
        """trace_stats.py summary of the trace a serve.py run wrote into `directory`."""
        path = find_trace(directory, (doc.get("environment") or {}).get("pid"))
        if path is None:
            return {"status": "FAIL: no trace file written"}
        name = f"trace-stats-{os.path.basename(directory)}"
        r = self.run(name, [TRACE_STATS, path, "--after", MARKER, "--json", "--top", "0"], timeout=120)
        self.keep_trace(path)
        if self.json_doc(r) is not None:
            return {"path": path, "stats_after_marker": self.json_doc(r)}
        whole = self.run(name + "-whole", [TRACE_STATS, path, "--json", "--top", "0"], timeout=120)
        return {"path": path, "marker_error": r.get("stderr_tail"), "stats_whole_trace": self.json_doc(whole)}

    def keep_trace(self, path):
        """Keeps a compressed copy of a trace with the logs (copied out at the end)."""
        os.makedirs(os.path.join(self.work, "logs", "traces"), exist_ok=True)
        name = os.path.basename(os.path.dirname(path)) + "-" + os.path.basename(path) + ".gz"
        with open(path, "rb") as src, gzip.open(os.path.join(self.work, "logs", "traces", name), "wb") as dst:
            shutil.copyfileobj(src, dst)

    def step_trace_diff(self):
        if self.shim is None:
            self.check("trace_per_block", "skipped: no shim")
            return
        paths = []
        for blocks in (2, 3):
            directory = os.path.join(self.work, "traces", f"blocks{blocks}")
            env = {"H3SHIM_OPS": "none", "H3SHIM_TRACE": os.path.join(directory, "trace-%p.jsonl")}
            r = self.run(f"trace-blocks{blocks}", [SERVE, "--latent", ONE_TILE, "--blocks", str(blocks),
                                                   "--requests", "1", "--warmup", "0", "--trace-mark", "--json"], env)
            doc = self.json_doc(r) or {}
            path = find_trace(directory, (doc.get("environment") or {}).get("pid"))
            if r.get("skipped"):
                self.check("trace_per_block", f"skipped: {r['skipped']}")
                return
            if r["rc"] != 0 or path is None:
                self.check("trace_per_block", "FAIL", error=r.get("error") or "no trace file written",
                           stderr_tail=r.get("stderr_tail"))
                return
            paths.append(path)
            self.keep_trace(path)
        r = self.run("trace-diff", [TRACE_STATS, "--diff", *paths, "--after", MARKER, "--json"], timeout=120)
        diff = self.json_doc(r)
        if diff is None:
            self.check("trace_per_block", "FAIL", error=r.get("error"), stderr_tail=r.get("stderr_tail"))
            return
        self.check("trace_per_block", "pass" if diff["matches_design"] else "FAIL", block=diff["block"],
                   design=diff["design"], api=diff["api"], kernel=diff["kernel"])

    def step_activations(self):
        r = self.run("activation-stats", [SERVE, "--latent", ONE_TILE, "--activation-stats", "--json"])
        doc = self.json_doc(r)
        if doc is None:
            self.check("fp16_headroom", f"skipped: {r['skipped']}" if r.get("skipped") else "FAIL",
                       error=r.get("error"), stderr_tail=r.get("stderr_tail"))
            return
        headroom = doc.get("fp16_headroom") or 0
        self.check("fp16_headroom", "pass" if doc["finite"] and headroom > 16 else "FAIL",
                   fp16_headroom=headroom, finite=doc["finite"], max_abs=doc["max_abs"])

    def step_profile_block(self):
        out = {}
        for arm, shim_env in (("A", None), ("all", {"H3SHIM_OPS": "all"})):
            r, doc = self.serve_arm(arm, shim_env, ONE_TILE, ["--profile-block"], "profile-block")
            out[arm] = ({"status": f"skipped: {r['skipped']}"} if "skipped" in r else
                        {k: doc.get(k) for k in ("eager_ms", "graph_ms", "host_ms", "tokens", "kernels")} if doc else
                        {"status": f"error: {r.get('error')}", "stderr_tail": r.get("stderr_tail")})
        out["design_reference_ms"] = DESIGN_MS_PER_BLOCK
        self.evidence["profile_block"] = out
        self.log(f"profile block: {out.get('A')} (DESIGN.md 0.99 ms eager, 0.93 ms graph)")

    def step_timing(self):
        names = [a for a, _ in self.arms() if a != "C"]
        arms = [(a, e) for a, e in self.arms() if a != "C" and (e is None or self.shim)]
        rounds, per_round = [], None
        for index in range(self.cfg["rounds"]):
            if per_round and self.remaining() < per_round * len(arms) + 10:
                self.log(f"timing: stopping after {index} rounds (time budget)")
                break
            t0, results = time.time(), {}
            for arm, shim_env in arms:
                argv = [WORKER, "bench", "--latent", self.cfg["latent"], "--blocks", "36",
                        "--requests", str(self.cfg["requests"]), "--warmup", str(self.cfg["warmup"]),
                        "--floor-reps", str(self.cfg["floor_reps"])]
                r = self.run(f"bench-r{index}-{arm}", argv, shim_env)
                docs = {d["kind"]: d for d in self.json_lines(r) if "kind" in d}
                results[arm] = {"rc": r["rc"], "error": r.get("error") or r.get("skipped"), **docs}
                if r.get("error"):
                    results[arm]["stderr_tail"] = r.get("stderr_tail")
            per_round = (time.time() - t0) / len(arms)
            rounds.append(results)
            self.log(f"timing round {index + 1} done ({per_round:.0f}s per process)")
        self.evidence["timing_rounds"] = rounds
        self.evidence["timing"] = summarise_timing(rounds, names, self.shim is not None)
        for arm, t in self.evidence["timing"].items():
            self.log(f"timing {arm}: {t}")

    def finish(self):
        env = self.evidence.get("environment", {})
        self.evidence["repeatability"] = repeatability(self.evidence)
        self.check("repeatable_across_processes", self.evidence["repeatability"]["status"])
        self.evidence["seconds"] = round(time.time() - self.start, 1)
        slug = re.sub(r"[^a-z0-9]+", "-", str(env.get("gpu") or "no-gpu").lower()).strip("-")
        date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
        stem = f"{date}-{slug}" + ("-full" if self.args.mode == "full" else "")
        os.makedirs(self.args.evidence_dir, exist_ok=True)
        paths = [os.path.join(self.args.evidence_dir, stem + ext) for ext in (".json", ".md")]
        with open(paths[0], "w") as f:
            json.dump(self.evidence, f, indent=1, sort_keys=False)
            f.write("\n")
        markdown = render_markdown(self.evidence)
        with open(paths[1], "w") as f:
            f.write(markdown)
        if self.args.copy_to:
            for path in paths:
                shutil.copy(path, self.args.copy_to)
            # One archive: the GPU machine hands back only a few files.
            with tarfile.open(os.path.join(self.args.copy_to, "logs.tar.gz"), "w:gz") as tar:
                tar.add(os.path.join(self.work, "logs"), arcname="logs")
        print(markdown)
        self.log(f"evidence written: {paths[0]} and {paths[1]}")
        failed = [name for name, c in self.evidence["checks"].items() if c["status"].startswith("FAIL")]
        failed += [arm for arm, a in self.evidence["arms"].items()
                   if a.get("correctness", {}).get("status", "").startswith(("FAIL", "error"))]
        for arm, t in self.evidence.get("timing", {}).items():
            if t.get("errors") or False in (t.get("eager_output_equal_to_A"), t.get("graph_output_equal_to_A")):
                failed.append(f"timing {arm}")
        if failed:
            self.log(f"FAILED: {', '.join(failed)}")
        return 1 if failed else 0


def git_info():
    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30).stdout.strip()
        except OSError:
            return None
    status = git("status", "--porcelain")
    return {"commit": git("rev-parse", "HEAD") or None, "changed_files": len(status.splitlines()) if status else 0}


def stats_table(stderr):
    """The shim's H3SHIM_STATS table: stderr from its last header line ("api calls errors") on."""
    lines = stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if re.search(r"\bapi\s+calls\s+errors\b", line)]
    return "\n".join(lines[starts[-1]:])[:30000] if starts else None


def find_trace(directory, pid):
    """The trace file of process `pid` in `directory` (the shim expands %p), else the only/largest one."""
    files = sorted(glob.glob(os.path.join(directory, "*")), key=os.path.getsize, reverse=True)
    for path in files:
        if pid is not None and str(pid) in os.path.basename(path):
            return path
    return files[0] if files else None


def compare_outputs(path_a, path_b):
    """Compares two saved FP32 outputs bit for bit; reports the first differing element."""
    import torch
    try:
        a, b = torch.load(path_a), torch.load(path_b)
    except (OSError, RuntimeError) as e:
        return {"equal": False, "error": f"cannot load outputs: {e}"}
    if a.shape != b.shape or a.dtype != b.dtype:
        return {"equal": False, "error": f"shape/dtype differ: {list(a.shape)} {a.dtype} vs {list(b.shape)} {b.dtype}"}
    ai, bi = a.reshape(-1).view(torch.int32), b.reshape(-1).view(torch.int32)
    differ = ai != bi
    count = int(differ.sum())
    result = {"equal": count == 0, "differing_elements": count, "elements": a.numel()}
    if count:
        flat = int(differ.nonzero()[0])
        index, rest = [], flat
        for size in reversed(a.shape):
            index.append(rest % size)
            rest //= size
        va, vb = a.reshape(-1)[flat].item(), b.reshape(-1)[flat].item()
        both = torch.isfinite(a) & torch.isfinite(b)
        result.update({"first_index": index[::-1], "first_values": [repr(va), repr(vb)],
                       "first_bits": [f"0x{ai[flat].item() & 0xFFFFFFFF:08x}", f"0x{bi[flat].item() & 0xFFFFFFFF:08x}"],
                       "max_abs_diff_finite": float((a[both] - b[both]).abs().max()) if both.any() else None})
    return result


def summarise_timing(rounds, arms, have_shim):
    """Per arm: medians pooled over rounds, speed-ups against A (A time / arm time), output agreement."""
    out = {}
    for arm in arms:
        if arm != "A" and not have_shim:
            out[arm] = {"status": "skipped: no shim"}
            continue
        eager, graph_req, vit, floor, errors, shas, graph_shas, graph_eq = [], [], [], [], [], set(), set(), set()
        for results in rounds:
            r = results.get(arm, {})
            if r.get("error"):
                errors.append(r["error"])
            eager += r.get("eager", {}).get("ms", [])
            graph_req += r.get("graphs", {}).get("ms", [])
            vit += r.get("graphs", {}).get("vit_call_ms", [])
            floor += r.get("floor", {}).get("samples_ms_per_block", [])
            errors += [f"{k}: {r[k]['error']}" for k in ("eager", "graphs", "floor") if r.get(k, {}).get("error")]
            shas.add(r.get("eager", {}).get("sha256_fp32"))
            graph_shas.add(r.get("graphs", {}).get("sha256_fp32"))
            graph_eq.add(r.get("graphs", {}).get("equal_to_eager"))
        out[arm] = {"eager_ms_per_request": median(eager), "graph_ms_per_request": median(graph_req),
                    "graph_ms_per_vit_call": median(vit), "floor_ms_per_block": median(floor),
                    "samples": {"eager": len(eager), "graph": len(graph_req), "floor": len(floor)},
                    "eager_sha256_fp32": sorted(s for s in shas if s),
                    "graph_sha256_fp32": sorted(s for s in graph_shas if s),
                    "graph_equal_to_eager": sorted(graph_eq - {None}) == [True] if graph_eq - {None} else None}
        if errors:
            out[arm]["errors"] = errors
    base = out.get("A", {})
    for arm, t in out.items():
        for key in ("eager_ms_per_request", "graph_ms_per_request", "graph_ms_per_vit_call", "floor_ms_per_block"):
            if base.get(key) and t.get(key):
                t["speedup_vs_A_" + key] = base[key] / t[key]
        for key in ("eager_sha256_fp32", "graph_sha256_fp32"):
            if arm != "A" and base.get(key) and t.get(key):
                t[key.replace("sha256_fp32", "output_equal_to_A")] = t[key] == base[key]
    return out


def repeatability(evidence):
    """Whether every arm-A process produced the same FP32 output for the same latent and seed."""
    shas = set()
    correctness = evidence["arms"].get("A", {}).get("correctness", {})
    shas.update(correctness.get("sha256_fp32") or [])
    processes = 1 if correctness.get("sha256_fp32") else 0
    for results in evidence.get("timing_rounds", []):
        sha = results.get("A", {}).get("eager", {}).get("sha256_fp32")
        if sha:
            shas.add(sha)
            processes += 1
    if processes < 2:
        return {"status": "skipped: fewer than two arm-A processes finished", "sha256_fp32": sorted(shas)}
    return {"status": "pass" if len(shas) == 1 else "FAIL", "processes": processes, "sha256_fp32": sorted(shas)}


def fmt(value, digits=3):
    return "-" if value is None else f"{value:.{digits}f}"


def render_markdown(ev):
    """The short human summary written beside the JSON evidence."""
    env, lines = ev.get("environment", {}), []
    libs = env.get("libraries", {})
    lines.append(f"# h3shim GPU evidence: {ev['started_utc'][:10]}, {env.get('gpu', 'no GPU')} ({ev['mode']})\n")
    lines.append(f"- GPU {env.get('gpu')} (SM {env.get('sm')}, {env.get('sms')} SMs), driver {env.get('driver')}, "
                 f"CUDA {env.get('torch_cuda')} (runtime {libs.get('cudart', {}).get('version')}), "
                 f"PyTorch {env.get('torch')}, cuBLAS {libs.get('cublas', {}).get('version')}, "
                 f"cuBLASLt {libs.get('cublasLt', {}).get('version')}, cuDNN {env.get('cudnn_torch')}")
    lines.append(f"- host CPU {env.get('cpu')} ({env.get('cpus')} threads); Python {env.get('python')}")
    shim = ev.get("shim", {})
    lines.append(f"- shim {shim.get('path')}: " + (f"sha256 {shim.get('sha256', '')[:16]}" if shim.get("present")
                                                    else "MISSING, shim arms skipped"))
    lines.append(f"- repo {ev.get('repo', {}).get('commit')} ({ev.get('repo', {}).get('changed_files')} files changed)")
    lines.append(f"- workload latent [{ev['config']['latent']}], 36 blocks, 1797 tokens per ViT call; "
                 f"{ev.get('seconds')} s in all\n")
    lines.append("## Checks\n\n| check | result |\n|---|---|")
    for name, c in ev["checks"].items():
        detail = ""
        if name == "trace_per_block" and "block" in c:
            b = c["block"]
            detail = (f" (per block {b['cublasLtMatmul']} cublasLtMatmul, {b['cudnnBackendExecute']} "
                      f"cudnnBackendExecute, {b['runtime_launches']} runtime launches, {b['driver_launches']} "
                      "driver launches; DESIGN.md 4, 1, 37)")
        if name == "fp16_headroom" and "fp16_headroom" in c:
            detail = f" (65504 / largest FP16 activation = {fmt(c['fp16_headroom'], 1)})"
        lines.append(f"| {name} | {c['status']}{detail} |")
    lines.append("\n## Arms\n\nSpeed-up is A's median time over the arm's (above 1 is faster). "
                 "An op is validated only where its arm is bitwise equal to A and the shim's stats show the op ran; "
                 "an arm that is enabled but never fused proves nothing.\n")
    lines.append("| arm | env | bitwise vs A | eager ms/request (speed-up) | graph ms/ViT call (speed-up) | "
                 "floor ms/block (speed-up) |\n|---|---|---|---|---|---|")
    timing = ev.get("timing", {})
    for arm, a in ev["arms"].items():
        t = timing.get(arm, {})
        env_text = " ".join(f"{k}={v}" for k, v in a.get("env", {}).items() if k != "H3SHIM_TRACE") or \
            {"C": "trace", "S": "the defaults"}.get(arm, "no shim")
        lines.append(f"| {arm} | {env_text} | {a.get('correctness', {}).get('status')} | "
                     f"{fmt(t.get('eager_ms_per_request'), 1)} ({fmt(t.get('speedup_vs_A_eager_ms_per_request'))}) | "
                     f"{fmt(t.get('graph_ms_per_vit_call'))} ({fmt(t.get('speedup_vs_A_graph_ms_per_vit_call'))}) | "
                     f"{fmt(t.get('floor_ms_per_block'), 4)} ({fmt(t.get('speedup_vs_A_floor_ms_per_block'))}) |")
    trace = ev["arms"].get("C", {}).get("correctness", {}).get("trace", {}).get("stats_after_marker")
    if isinstance(trace, dict):
        lines.append(f"\nTrace of arm C (decode only): {trace.get('records')} calls; decisions: "
                     + ", ".join(f"{n} x {d}" for d, n in trace.get("decision", {}).items()))
    pb = ev.get("profile_block", {})
    lines.append("\n## One block at 1797 tokens (ms)\n")
    for arm in ("A", "all"):
        p = pb.get(arm, {})
        lines.append(f"- {arm}: " + (p["status"] if "status" in p else
                                     f"eager {fmt(p.get('eager_ms'), 4)} (DESIGN.md 0.99), graph replay "
                                     f"{fmt(p.get('graph_ms'), 4)} (0.93), host enqueue {fmt(p.get('host_ms'), 4)}"))
    ka, kall = pb.get("A", {}).get("kernels") or {}, pb.get("all", {}).get("kernels") or {}
    if ka:
        rows = list(ka.get("design_ms_by_row", {})) + sorted(
            (set(ka.get("ms_per_block_by_row", {})) | set(kall.get("ms_per_block_by_row", {})))
            - set(ka.get("design_ms_by_row", {})))
        lines += ["", "GPU time per block by kernel kind (profiler, 20 eager blocks; ms):", "",
                  "| kind | DESIGN.md | A (no shim) | all ops |", "|---|---|---|---|"]
        for row in rows:
            lines.append(f"| {row} | {fmt(ka.get('design_ms_by_row', {}).get(row), 3)} | "
                         f"{fmt(ka.get('ms_per_block_by_row', {}).get(row), 3)} | "
                         f"{fmt(kall.get('ms_per_block_by_row', {}).get(row), 3)} |")
        lines.append(f"| total | 0.93 | {fmt(ka.get('total_ms'), 3)} | {fmt(kall.get('total_ms'), 3)} |")
    a = timing.get("A", {})
    if a.get("floor_ms_per_block") is not None:
        lines.append(f"- host dispatch floor, arm A: {fmt(a['floor_ms_per_block'], 4)} ms per block at 6 tokens "
                     "(DESIGN.md: 0.6-0.7); eager speed-ups are bounded by it")
    stats = ev["arms"].get("all", {}).get("correctness", {}).get("shim_stats")
    if stats:
        lines += ["\n## Shim stats, arm all (H3SHIM_STATS=1)\n", "```", stats[:6000], "```"]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(prog="harness.py", description="h3shim GPU evidence run (see tests/gpu/run.sh).")
    p.add_argument("--mode", choices=sorted(CONFIGS), default="quick")
    p.add_argument("--shim", default=os.path.join(REPO, "build", "libh3shim.so"))
    p.add_argument("--work", required=True, help="scratch directory for outputs, traces and logs")
    p.add_argument("--deadline", type=float, required=True, help="Unix time by which to finish")
    p.add_argument("--evidence-dir", default=os.path.join(REPO, "tests", "evidence"))
    p.add_argument("--copy-to", help="also copy the evidence, logs and compressed traces here (normally $OUT)")
    args = p.parse_args(argv)
    h = Harness(args)
    h.log(f"mode {args.mode}, latent {h.cfg['latent']}, {h.remaining():.0f}s of budget, op list {h.ops or 'empty'}")
    if h.step_env():
        h.step_plan()
        h.step_kernels()
        h.step_correctness()
        h.step_trace_diff()
        h.step_weights()
        h.step_activations()
        h.step_profile_block()
        h.step_timing()
    else:
        h.check("gpu", "FAIL", error="no CUDA GPU visible to PyTorch; nothing measured")
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())
