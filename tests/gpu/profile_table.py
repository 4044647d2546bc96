#!/usr/bin/env python3
"""Markdown table of `serve.py --profile-block --json` (or `--profile-vit --json`) documents side by side:
GPU time per H3 block by DESIGN.md's rows and by each fused kernel, the
kernel total and its ratio to the first document's (the unshimmed arm), and
the eager and graph-replay times.

    python3 tests/gpu/profile_table.py NAME=PROFILE.json [NAME=PROFILE.json ...] [--title TEXT]

Reads the files session.sh's profile step writes
(...-profile-block-{A,S,K}.json); prints the table on stdout.
"""
import argparse
import json
import sys


def load(spec):
    name, _, path = spec.partition("=")
    if not path:
        sys.exit(f"profile_table: '{spec}' is not NAME=PATH")
    with open(path) as f:
        return name, json.load(f)


def fmt(v):
    return "-" if v is None else f"{v:.4f}"


ABOUT = ("GPU time per block at 1797 tokens, ms (the profiler over 20 eager blocks, each block's output kept "
         "until the next one's, as in the decode; the profiler's first blocks not counted).")


def table(docs, title, about=ABOUT):
    rows, fused = [], []
    for _, d in docs:
        k = d.get("kernels", {})
        for r in k.get("ms_per_block_by_row", {}):
            if r not in rows:
                rows.append(r)
        for n, _ in k.get("ms_per_block_by_kernel", []):
            if n.startswith("h3_") and n not in fused:
                fused.append(n)
    out = [f"# {title}", "", about, "",
           "| | " + " | ".join(n for n, _ in docs) + " |", "|---|" + "---|" * len(docs)]
    per = [{n: ms for n, ms in d.get("kernels", {}).get("ms_per_block_by_kernel", [])} for _, d in docs]
    by_row = [d.get("kernels", {}).get("ms_per_block_by_row", {}) for _, d in docs]
    for r in rows:
        out.append(f"| {r} | " + " | ".join(fmt(b.get(r)) for b in by_row) + " |")
    for n in fused:
        out.append(f"| of which `{n}` | " + " | ".join(fmt(p.get(n)) for p in per) + " |")
    totals = [d.get("kernels", {}).get("total_ms") for _, d in docs]
    out.append("| **kernel total** | " + " | ".join(fmt(t) for t in totals) + " |")
    base = totals[0]
    out.append("| against the first | " + " | ".join(
        "-" if not t or not base else f"{base / t:.3f}x" for t in totals) + " |")
    for key, label in (("eager_ms", "eager, event span / block"), ("graph_ms", "one block's graph replay"),
                       ("host_ms", "host time to enqueue a block"),
                       ("replay_ms_per_block", "a ViT call's graph replay / block (events)")):
        if any(key in d for _, d in docs):
            out.append(f"| {label} | " + " | ".join(fmt(d.get(key)) for _, d in docs) + " |")
    # Gaps only for graph replays: in eager blocks under the profiler they are mostly the host's.
    if any("replay_ms_per_block" in d for _, d in docs):
        out.append("| idle gaps between kernels / block | " +
                   " | ".join(fmt(d.get("kernels", {}).get("gap_ms")) for _, d in docs) + " |")
    for key, label, form in (("sm_clock_mhz", "SM clock under the replays, MHz (median)", "{:.0f}"),
                             ("power_w", "power, W (median)", "{:.0f}"),
                             ("clock_event_reasons", "clock-event reasons seen (0x4: software power cap)", "{}")):
        if any(key in d.get("gpu_state", {}) for _, d in docs):
            out.append(f"| {label} | " + " | ".join(
                "-" if key not in d.get("gpu_state", {}) else form.format(d["gpu_state"][key]) for _, d in docs) + " |")
    env = docs[0][1].get("environment", {})
    out += ["", f"{env.get('gpu')}, torch {env.get('torch')}, CUDA {env.get('cuda')}."]
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("docs", nargs="+", help="NAME=PATH of a --profile-block --json document")
    ap.add_argument("--title", default="One H3 block, per kernel")
    ap.add_argument("--about", default=ABOUT, help="the sentence under the title (how the documents were made)")
    a = ap.parse_args()
    sys.stdout.write(table([load(s) for s in a.docs], a.title, a.about))
    return 0


if __name__ == "__main__":
    sys.exit(main())
