#!/usr/bin/env python3
"""The validation command: the evidence that enabling an op on a GPU asks
for, produced on the GPU it runs on, as one markdown report and one JSON file.

    python3 tests/gpu/validate.py [--shim build/libh3shim.so] [--budget 570] [--tag SUFFIX]

It runs the project's own GPU scripts in one call, each under its own time
limit, in this order, and reports each one's result, time and last lines:

  versions     the GPU product, compute capability, driver, CUDA, PyTorch,
               cuBLASLt and cuDNN (tests/gpu/worker.py env), and Triton's
               version where it is installed
  kernel-*     every fused kernel against PyTorch bit for bit over random,
               special and adversarial inputs (tests/gpu/test_*.py, the fatbin
               the build made), and weight_cache's following of weight changes
  shapes       block stacks at production and edge shapes, batches 1 and 2,
               with no signature loaded: each learned in the process, fused,
               compared bit for bit with the unobserved stack, GPU time per
               block against the unfused calls (learn_shapes.py)
  decode       a complete decode (the quick latent, serving mode) without the
               shim, with the committed signatures and with learned ones, eager
               and CUDA graphs, and with verify mode (H3SHIM_VERIFY=3: each op
               range's first runs compared on the GPU with the calls it
               replaces), every output's hash against the unshimmed one, every
               block's ops counted (full_decode.py arms S, SG, L, LG, V)
  variants     the H3 variants and contracts that must stay on the reference
               path or stay exact (batch 2, a smaller tile, bf16, no autocast,
               grad mode, another eps, forward hooks: robust.py variants)
  op-latency   each op's warmed GPU time against the unfused calls it
               replaces: one block at 1797 tokens under the profiler, without
               and with the shim (op_latency.py)

A step that does not fit in what is left of --budget is reported as skipped.
Each script writes its own evidence under tests/evidence/ too; this report
names them. The report is tests/evidence/<date>-<gpu>-validate<TAG>.json and
.md (copied to $OUT when set). Exit status 0 when every step ran and passed,
1 otherwise, 2 for a usage error (no shim library).

On an SM where no op is validated yet (a B200's SM 100), every step runs
with H3SHIM_OPS=all (H3_VALIDATE_ENV, which the scripts pass to the shim), so
that the ops run and are measured; verify mode is then on by itself, but for
the block stacks, which compare every output themselves.

What the report does not do: an op is enabled on an SM by ops.def's list of
validated SMs, changed by hand with this report attached; the report does not
enable anything.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import shimstats  # noqa: E402  (write_evidence)

KERNEL_TESTS = ("rmsnorm", "residual_rmsnorm", "qk_norm_rope", "swiglu", "weight_cache", "verify")
# (name, seconds it may take at most, argv after python3); the kernel tests first.
STEPS = ([(f"kernel-{t}", 200, [os.path.join(HERE, f"test_{t}.py"), "--fatbin",
                                 os.path.join(ROOT, "build", "kernels.fatbin")]) for t in KERNEL_TESTS]
         + [("shapes", 200, [os.path.join(HERE, "learn_shapes.py"), "--tokens", "261,1029,1797", "--batches", "1,2",
                             "--pairs", "5", "--clock-seconds", "0", "--evidence", "--tag=-validate"]),
            ("decode", 240, [os.path.join(HERE, "full_decode.py"), "--latent", "1,24,12,24,24", "--arms", "S,SG,L,LG,V",
                             "--rounds", "1", "--tag=-validate"]),
            ("variants", 200, [os.path.join(HERE, "robust.py"), "--items", "variants", "--rounds", "1",
                               "--tag=-validate"]),
            ("op-latency", 150, [os.path.join(HERE, "op_latency.py"), "--tag=-validate"])])


def versions():
    """The machine's versions: worker.py env's document, and Triton's version (None when not installed)."""
    out = {}
    try:
        p = subprocess.run([sys.executable, os.path.join(HERE, "worker.py"), "env"], capture_output=True, text=True,
                           timeout=180)
        docs = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
        out = next((d for d in docs if d.get("kind") == "env"), {"error": p.stderr[-500:]})
        out.pop("kind", None)
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        out = {"error": str(e)}
    try:
        p = subprocess.run([sys.executable, "-c", "import triton; print(triton.__version__)"], capture_output=True,
                           text=True, timeout=60)
        out["triton"] = p.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        out["triton"] = None
    return out


def unvalidated(sm):
    """Whether no op of shim/ops.def is validated on `sm` ("9.0", or None when not known): then the
    steps run with H3SHIM_OPS=all (verify mode on by itself), so that the ops run and are measured."""
    import re
    if not sm:
        return False
    major, _, minor = str(sm).partition(".")
    n = int(major) * 10 + int(minor or 0)
    text = open(os.path.join(ROOT, "shim", "ops.def")).read()
    lists = re.findall(r"^H3_OP\(\w+,\s*\w+,\s*H3_SMS\(([\d,\s]*)\)", text, re.M)
    return not any(str(n) in [x.strip() for x in sms.split(",")] for sms in lists)


def run_step(name, limit, argv, env):
    """One step: its exit status, seconds and the last lines of its output."""
    t0 = time.time()
    try:
        p = subprocess.run([sys.executable] + argv, capture_output=True, text=True, timeout=limit, env=env, cwd=ROOT)
        rc, output = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, output = None, ((e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes)
                            else (e.stdout or ""))
    lines = [ln for ln in output.splitlines() if ln.strip()]
    return {"name": name, "argv": argv, "rc": rc, "seconds": round(time.time() - t0, 1),
            "pass": rc == 0, "timed_out": rc is None, "tail": lines[-12:]}


def report(doc):
    """The markdown report."""
    v = doc["versions"]
    lines = [f"# Validation of h3shim on {v.get('gpu', '?')}, {doc['date']}", "",
             f"GPU {v.get('gpu')}, SM {v.get('sm')}, driver {v.get('driver')}, CUDA {v.get('torch_cuda')}, "
             f"PyTorch {v.get('torch')}, Triton {v.get('triton')}; shim {doc['shim']}."
             + (" No op is validated on this SM: every step ran with H3SHIM_OPS=all (verify mode on by itself, "
                "but for the block stacks)." if doc.get("ops_asked") else ""), "",
             "| step | result | seconds |", "|---|---|---|"]
    for s in doc["steps"]:
        result = ("skipped (budget)" if s.get("skipped") else "pass" if s["pass"] else
                  "timed out" if s.get("timed_out") else f"FAIL (exit {s['rc']})")
        lines.append(f"| {s['name']} | {result} | {s.get('seconds', '-')} |")
    for s in doc["steps"]:
        if s.get("tail"):
            lines += ["", f"## {s['name']}", "", "```"] + [ln[:300] for ln in s["tail"]] + ["```"]
    lines += ["", f"Result: {'pass' if doc['pass'] else 'FAIL'}", ""]
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description="The validation command: every check an op's enabling asks for.")
    ap.add_argument("--shim", default=os.path.join(ROOT, "build", "libh3shim.so"))
    ap.add_argument("--budget", type=float, default=570, help="seconds for the whole run (default 570)")
    ap.add_argument("--tag", default="", help="suffix of the report's file names")
    a = ap.parse_args(argv)
    if not os.path.exists(a.shim):
        sys.stderr.write(f"validate.py: no shim library at {a.shim} (run make)\n")
        return 2
    start = time.time()
    doc = {"date": datetime.date.today().isoformat(), "shim": a.shim, "versions": versions(), "steps": []}
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("H3SHIM_")}
    doc["ops_asked"] = unvalidated(doc["versions"].get("sm"))
    for name, limit, args in STEPS:
        # On an SM where nothing is validated yet every op is asked for (H3SHIM_OPS=all): verify mode
        # is on by itself there, but for the block stacks, which compare every output themselves.
        env.pop("H3_VALIDATE_ENV", None)
        if doc["ops_asked"]:
            env["H3_VALIDATE_ENV"] = "H3SHIM_OPS=all" + (",H3SHIM_VERIFY=0" if name == "shapes" else "")
        left = a.budget - (time.time() - start)
        if left < limit:
            doc["steps"].append({"name": name, "skipped": True, "pass": False})
            continue
        if not name.startswith("kernel-"):  # the scripts that preload the shim get this one
            args = args + ["--shim", a.shim]
        doc["steps"].append(run_step(name, limit, args, env))
    doc["pass"] = all(s["pass"] for s in doc["steps"])
    shimstats.write_evidence(doc["versions"].get("gpu", "gpu"), f"validate{a.tag}", doc, report(doc))
    return 0 if doc["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
