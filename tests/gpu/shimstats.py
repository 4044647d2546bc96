"""Reads the matcher's and the engine's lines from an H3SHIM_STATS=1 table
(stderr of a process run with the shim), for the GPU scripts' checks."""
import os
import re

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SIGNATURE = os.path.join(ROOT, "signatures", "h3-block-torch2.11.0+cu130-sm90.sig")


def groups_per_block(path=SIGNATURE):
    """The engine's groups in one block instance: maximal runs of launches in the signature."""
    kinds = [line.split()[2] for line in open(path) if line.startswith("call ")]
    return sum(1 for i, k in enumerate(kinds) if k == "launch" and (i == 0 or kinds[i - 1] != "launch"))


def parse(stats):
    """{complete, broken, first_break, deferred, issue_errors, op_runs, op_calls, flushes{reason: (groups, calls)}}"""
    out = {"flushes": {}, "signatures": {}}
    # One line per signature (the block, and its variants: block-serving-first, ...); an instance
    # is counted once, for the signature it was matched into.
    for m in re.finditer(r"signature \S+/(block\S*): (\d+) complete, (\d+) broken(?: \(first break: ([^)]*)\))?",
                         stats or ""):
        out["signatures"][m.group(1)] = {"complete": int(m.group(2)), "broken": int(m.group(3)),
                                         "first_break": m.group(4), "plan": {}}
    if out["signatures"]:
        sigs = out["signatures"].values()
        out.update(complete=sum(v["complete"] for v in sigs), broken=sum(v["broken"] for v in sigs),
                   first_break="; ".join(f"{k}: {v['first_break']}" for k, v in out["signatures"].items()
                                         if v["first_break"] and v["complete"] == 0) or None)
    m = re.search(r"learn: (\d+) groups learned, (\d+) refused", stats or "")
    if m:
        out.update(learned=int(m.group(1)), refused=int(m.group(2)))
    m = re.search(r"engine: (\d+) launches deferred; (\d+) issued with an error", stats or "")
    if m:
        out.update(deferred=int(m.group(1)), issue_errors=int(m.group(2)))
    out["ops"], out["fallbacks"] = {}, {}
    for m in re.finditer(r"op (\S+)\s+(\d+) groups run \((\d+) calls\)", stats or ""):
        out["ops"][m.group(1)] = (int(m.group(2)), int(m.group(3)))
    for m in re.finditer(r"op (\S+)\s+fallback (\S+)\s+(\d+)", stats or ""):
        out["fallbacks"].setdefault(m.group(1), {})[m.group(2)] = int(m.group(3))
    out["ran_with"] = {}  # how an op with more than one exact way ran, e.g. residual_norm: {h_in_b16: N}
    for m in re.finditer(r"op (\S+)\s+ran with (\S+)\s+(\d+)", stats or ""):
        out["ran_with"].setdefault(m.group(1), {})[m.group(2)] = int(m.group(3))
    m = re.search(r"weight_cache: (\d+) copies, ([\d.]+) MiB of GPU memory(?: \(peak ([\d.]+) MiB\))?; (\d+) hits, "
                  r"(\d+) fills, (\d+) drops", stats or "")
    if m:
        out["weight_cache"] = {"copies": int(m.group(1)), "mib": float(m.group(2)),
                               "peak_mib": float(m.group(3) or m.group(2)), "hits": int(m.group(4)),
                               "fills": int(m.group(5)), "drops": int(m.group(6))}
    m = re.search(r"owed writes: (\d+) made .*?, (\d+) not made", stats or "")
    if m:
        out["owed"] = {"made": int(m.group(1)), "not_made": int(m.group(2))}
    m = re.search(r"shim host time: (\d+) observed calls, (\d+) ns per call of its own.*?, (\d+) ns per call "
                  r"issuing", stats or "")
    if m:
        out["observed_calls"] = int(m.group(1))
        out["host_ns_per_call"] = int(m.group(2))
        out["forward_ns_per_call"] = int(m.group(3))
    m = re.search(r"its own, by part: (.*)", stats or "")
    if m:  # {"describing": ns, "matching": ns, ...} per call
        out["host_ns_by_part"] = {re.sub(r" \(.*", "", k).strip(): int(v) for k, v in
                                  re.findall(r"([^,:]+?(?: \([^)]*\))?) (\d+) ns", m.group(1))}
    m = re.search(r"one-off work in it: .*?; without them, (\d+) ns per call of its own", stats or "")
    if m:  # the steady cost: first sights of kernels, weight copies' allocations, module loads left out
        out["host_ns_per_call_steady"] = int(m.group(1))
    m = re.search(r"clock reads in it: ([\d.]+) a call .*?, ([\d.]+) ns a read .*?; without them and the one-off "
                  r"work, (\d+) ns per call of its own", stats or "")
    if m:  # the steady cost less the stats' own clock reads between a call's first and last
        out.update(stats_reads_per_call=float(m.group(1)), clock_read_ns=float(m.group(2)),
                   host_ns_per_call_net=int(m.group(3)))
    m = re.search(r"its own: median (\d+)-(\d+) ns, 90th percentile (\d+)-(\d+) ns, 99th percentile (\d+)-(\d+) ns",
                  stats or "")
    if m:
        v = list(map(int, m.groups()))
        out["host_ns_quantiles"] = {"p50": v[0:2], "p90": v[2:4], "p99": v[4:6]}
    out["verify"] = {}  # verify mode (H3SHIM_VERIFY): per op, its runs compared and what they found
    for m in re.finditer(r"verify: op (\S+)\s+(\d+) runs a range; (\d+) compared, (\d+) equal, (\d+) differing, "
                         r"(\d+) not read; (\d+) ranges verified(; off)?[^;\n]*(?:; (\d+) outputs compared)?",
                         stats or ""):
        out["verify"][m.group(1)] = dict(zip(("runs", "compared", "equal", "differing", "unread", "ranges"),
                                             map(int, m.groups()[1:7])), off=m.group(8) is not None,
                                         outputs=int(m.group(9)) if m.group(9) else None)
    out["verify_warnings"] = re.findall(r"WARN (verify: op .*)", stats or "")
    out["plan"] = {}  # per op: the places it takes in a block, as many as in the signature planned most
    for m in re.finditer(r"plan \S+/(block\S*): op (\S+) takes calls", stats or ""):
        plan = out["signatures"].setdefault(m.group(1), {"complete": 0, "broken": 0, "first_break": None,
                                                          "plan": {}})["plan"]
        plan[m.group(2)] = plan.get(m.group(2), 0) + 1
    for v in out["signatures"].values():
        for op, n in v["plan"].items():
            out["plan"][op] = max(out["plan"].get(op, 0), n)
    if "replay" in out["ops"]:
        out.update(op_runs=out["ops"]["replay"][0], op_calls=out["ops"]["replay"][1])
    for m in re.finditer(r"flush (\S+)\s+(\d+) groups issued untouched \((\d+) calls\)", stats or ""):
        out["flushes"][m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return out


def asked_env():
    """The H3SHIM_* settings the validation command asks of every process it runs with the shim
    (H3_VALIDATE_ENV, "NAME=VALUE,..."): on an SM where no op is validated yet, H3SHIM_OPS=all, so
    that the ops run there (verify mode on by itself) and are measured. Empty elsewhere."""
    spec = os.environ.get("H3_VALIDATE_ENV", "")
    return dict(kv.split("=", 1) for kv in spec.split(",") if "=" in kv)


def replay_verdict(stats, blocks):
    """(ok, text) for a run with H3SHIM_OP_REPLAY=1 that made `blocks` block calls: every block
    recognised, every group of every block run by the replay op, nothing issued with an error."""
    s = parse(stats)
    groups = groups_per_block()
    taken = sum(c for _, c in s["ops"].values())  # by the replay op and any fused op beside it
    ok = (s.get("complete") == blocks and s.get("op_runs") == groups * blocks and s.get("issue_errors") == 0
          and s.get("deferred") == taken + sum(c for _, c in s["flushes"].values()))
    text = (f"{s.get('complete')} of {blocks} block calls recognised"
            + (f" ({s['learned']} signatures learned from {learning} of them)" if s.get("learned") else "")
            + f" ({s.get('broken')} broken attempts"
            f"{', first break: ' + s['first_break'] if s.get('first_break') else ''}); replay op ran "
            f"{s.get('op_runs')} of {groups * blocks} groups ({s.get('op_calls')} launches), "
            f"{s.get('deferred')} launches deferred, flushes {s['flushes'] or 'none'}, "
            f"{s.get('issue_errors')} issue errors")
    return ok, text


# Fallbacks that are a designed, exact path: the group's launches issued as PyTorch made them
# where the fused kernel would race on memory PyTorch's allocator shared between an output and
# an input (residual_norm at a block's end when h' has b16's memory).
EXACT_FALLBACKS = ("aliased",)


# The instances of a group the shim learns from (shim/learn.c): they run unfused.
LEARNING_INSTANCES = 3


def ops_verdict(stats, blocks, ops):
    """(ok, text) for a run with fused ops on that made `blocks` block calls: every block recognised
    (but the LEARNING_INSTANCES a signature learned in the process was learned from), each op in
    `ops` run at every place its plan gives in every block or fallen back there for a reason in
    EXACT_FALLBACKS (and run at least once), no other fallback, nothing issued with an error."""
    s = parse(stats)
    learning = LEARNING_INSTANCES * s.get("learned", 0)
    runs = {op: s["ops"].get(op, (0, 0))[0] for op in ops}
    # Every place each signature's plan gives, in every instance of it (a variant of the block
    # where an op has no place, as the serving mode's later tiles for weight_cache, asks none).
    want = {op: sum(v["plan"].get(op, 0) * v["complete"] for v in s["signatures"].values()) for op in ops}
    ops = [op for op in ops if want[op] > 0 or runs[op] > 0]
    exact = {op: sum(n for why, n in s["fallbacks"].get(op, {}).items() if why in EXACT_FALLBACKS) for op in ops}
    other = any(why not in EXACT_FALLBACKS for f in s["fallbacks"].values() for why in f)
    ok = (s.get("complete") is not None and s["complete"] + learning == blocks and all(0 < runs[op] and runs[op] + exact[op] == want[op] for op in ops)
          and not other and s.get("issue_errors") == 0)
    text = (f"{s.get('complete')} of {blocks} block calls recognised ({s.get('broken')} broken attempts"
            f"{', first break: ' + s['first_break'] if s.get('first_break') else ''}); "
            + ", ".join(f"{op} ran {runs[op]} of {want[op]}" for op in ops)
            + f"; fallbacks {s['fallbacks'] or 'none'}; ran with {s['ran_with'] or 'one way'}; "
              f"flushes {s['flushes'] or 'none'}; "
              f"{s.get('issue_errors')} issue errors")
    return ok, text


def median_interval(values, level=0.95, draws=4000, seed=1):
    """The median of `values` and a bootstrap percentile interval for it
    (resampling the values with replacement, a fixed seed so that a report is
    reproducible): with a few rounds on a host whose speed swings, the
    interval says how little one median settles."""
    import random
    import statistics
    if not values:
        return None, None, None
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    lo = meds[int((1 - level) / 2 * draws)]
    hi = meds[min(draws - 1, int((1 + level) / 2 * draws))]
    return statistics.median(values), lo, hi


def write_evidence(gpu, name, doc, lines):
    """Writes tests/evidence/<date>-<gpu>-<name>.json (doc) and .md (lines),
    prints the markdown, and copies both to $OUT when set."""
    import datetime
    import json
    import shutil
    stem = f"{datetime.date.today().isoformat()}-{str(gpu).lower().replace(' ', '-')}-{name}"
    out_dir = os.path.join(ROOT, "tests", "evidence")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, stem + ".json"), "w") as f:
        json.dump(doc, f, indent=1)
    with open(os.path.join(out_dir, stem + ".md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    for ext in (".json", ".md") if os.environ.get("OUT") else ():
        shutil.copy(os.path.join(out_dir, stem + ext), os.environ["OUT"])


def verify_verdict(stats, blocks, ops, wrong=()):
    """(ok, text) for a run with verify mode on (H3SHIM_VERIFY): every block recognised; each op in
    `ops` compared on its first runs (but weight_cache, which launches no kernel of its own) and run
    fused at the rest of its places, or fallen back there for a reason of verify mode (a run not
    compared: its calls ran as made); no difference found, but in the ops of `wrong`, which must be
    found differing, warned about and off."""
    s = parse(stats)
    learning = LEARNING_INSTANCES * s.get("learned", 0)
    want = {op: sum(v["plan"].get(op, 0) * v["complete"] for v in s["signatures"].values()) for op in ops}
    ops = [op for op in ops if want[op] > 0]
    ok = s.get("complete") is not None and s["complete"] + learning == blocks and s.get("issue_errors") == 0
    parts = []
    for op in ops:
        runs = s["ops"].get(op, (0, 0))[0]
        v = s["verify"].get(op, {})
        fb = s["fallbacks"].get(op, {})
        verify_fb = sum(n for why, n in fb.items() if why.startswith("verify_"))
        exact = sum(n for why, n in fb.items() if why in EXACT_FALLBACKS)
        other = {why: n for why, n in fb.items() if not why.startswith("verify_") and why not in EXACT_FALLBACKS}
        compared = v.get("compared", 0)
        covered = runs + compared + verify_fb + exact == want[op]
        if op in wrong:
            op_ok = v.get("differing", 0) >= 1 and v.get("off") and runs == 0 and any(
                w.startswith(f"verify: op {op} differs") for w in s["verify_warnings"])
        elif op == "weight_cache":
            op_ok = runs > 0 and compared == 0
        else:  # (outputs compared: counted since the second review; None in older tables)
            op_ok = (compared >= 1 and v.get("differing", 1) == 0 and v.get("unread", 0) == 0 and runs > 0
                     and v.get("outputs") != 0)
        ok &= covered and op_ok and not other
        parts.append(f"{op} fused {runs}, compared {compared} ({v.get('equal', 0)} equal, {v.get('differing', 0)} "
                     f"differing{', off' if v.get('off') else ''}), verify fallbacks {verify_fb}, of {want[op]}"
                     + (f", other fallbacks {other}" if other else ""))
    text = (f"{s.get('complete')} of {blocks} block calls recognised; " + "; ".join(parts)
            + (f"; warnings: {s['verify_warnings']}" if s["verify_warnings"] else ""))
    return ok, text
