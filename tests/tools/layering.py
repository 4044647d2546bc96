#!/usr/bin/env python3
"""The layering check of shim/: a file calls only functions of files on its
floor or below it (docs/design.md, "The pipeline").  Floors, top down:

  0 entry     hooks.c driver.c init.c fork.c c10_report.c (the entry points)
  1 record    record.c cudnn.c
  2 match     match.c learn.c
  3 engine    engine.c
  4 ops       ops.c op_*.c verify.c
  5 launch    issue.c kernels.c graphs.c
  6 services  trace.c stats.c config.c log.c sigfile.c signatures.c resolve.c json.c backtrace.c
              released.c lt_shadow.c

A call is a use of `h3_NAME(` in one file of a function defined (not
static) in another.  Today's calls that run up are listed in
tests/tools/layering-allowed.txt, one "CALLER -> CALLEE_FILE:FUNCTION" a
line: the check fails on any other one (a new back-call), and says which
listed ones are gone (delete them from the list).  The header's inline
helpers count as shim/h3shim.h, floor 6.

    python3 tests/tools/layering.py [--root DIR] [--write]   (--write: rewrite the list)

It also fails when a function's declaration in shim/h3shim.h sits outside
the section ("/* ---- FILE.c ...") of the file that defines it.

Exit status 0 when no call runs up beyond the list and every declaration is
in its file's section, 1 otherwise.
"""
import argparse
import os
import re
import sys

FLOORS = {}
for floor, names in enumerate([
        "hooks driver init fork c10_report", "record cudnn", "match learn", "engine", "ops op_* verify",
        "issue kernels graphs", "trace stats config log sigfile signatures resolve json backtrace released lt_shadow h3shim"]):
    for n in names.split():
        FLOORS[n] = floor

DEF = re.compile(r"^(?!static\b)[A-Za-z_][\w \*]*?\b(h3_\w+)\s*\([^;]*$", re.M)
INLINE = re.compile(r"^static inline[^\n(]*\b(h3_\w+)\s*\(", re.M)
CALL = re.compile(r"\b(h3_\w+)\s*\(")
STATIC = re.compile(r"^static\b[^\n(]*\b(h3_\w+)\s*\(", re.M)
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def floor_of(name):
    stem = os.path.splitext(os.path.basename(name))[0]
    if stem in FLOORS:
        return FLOORS[stem]
    return FLOORS["op_*"] if stem.startswith("op_") else None


def edges(root):
    shim = os.path.join(root, "shim")
    files = sorted(f for f in os.listdir(shim) if f.endswith(".c"))
    text = {f: COMMENT.sub("", open(os.path.join(shim, f)).read()) for f in files}
    header = COMMENT.sub("", open(os.path.join(shim, "h3shim.h")).read())
    owner = {}
    for f in files:
        for m in DEF.finditer(text[f]):
            owner.setdefault(m.group(1), f)
    for m in INLINE.finditer(header):
        owner.setdefault(m.group(1), "h3shim.h")
    found = set()
    for f in files:
        own = {m.group(1) for m in STATIC.finditer(text[f])}  # the file's own static functions
        for m in CALL.finditer(text[f]):
            callee = owner.get(m.group(1))
            if callee is None or callee == f or m.group(1) in own:
                continue
            a, b = floor_of(f), floor_of(callee)
            if a is not None and b is not None and b < a:
                found.add(f"{f} -> {callee}:{m.group(1)}")
    return found


SECTION = re.compile(r"^/\* ---- ([a-z_0-9]+\.c)\b")
DECL = re.compile(r"^(?!static\b|extern\b|typedef\b)[A-Za-z_][\w \*]*?\b(h3_\w+)\s*\(")


def misplaced(root):
    """Declarations in h3shim.h outside the section ("/* ---- FILE.c ...") of the file that defines them."""
    shim = os.path.join(root, "shim")
    owner = {}
    for f in sorted(f for f in os.listdir(shim) if f.endswith(".c")):
        for m in DEF.finditer(COMMENT.sub("", open(os.path.join(shim, f)).read())):
            owner.setdefault(m.group(1), f)
    out, section = [], None
    with open(os.path.join(shim, "h3shim.h")) as h:
        for n, line in enumerate(h, 1):
            m = SECTION.match(line)
            if m:
                section = m.group(1)
                continue
            m = DECL.match(line)
            if m and not line.rstrip().endswith("{") and owner.get(m.group(1), section) != section:
                out.append(f"h3shim.h:{n}: {m.group(1)} (defined in {owner[m.group(1)]}) in the section of {section}")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args(argv)
    allowed_path = os.path.join(a.root, "tests", "tools", "layering-allowed.txt")
    found = edges(a.root)
    if a.write:
        with open(allowed_path, "w") as f:
            f.write("# Calls in shim/ that run up a floor today (tests/tools/layering.py); each one is a\n"
                    "# thing to move down.  The check fails on any call up that is not listed.\n")
            f.writelines(line + "\n" for line in sorted(found))
        print(f"layering: {len(found)} calls up written to {allowed_path}")
        return 0
    allowed = set()
    if os.path.exists(allowed_path):
        allowed = {l.strip() for l in open(allowed_path) if l.strip() and not l.startswith("#")}
    new, gone = sorted(found - allowed), sorted(allowed - found)
    for line in new:
        print(f"layering: a call runs up a floor: {line}", file=sys.stderr)
    for line in gone:
        print(f"layering: no longer called (delete it from {os.path.basename(allowed_path)}): {line}")
    print(f"layering: {len(found)} calls up, {len(allowed)} allowed, {len(new)} new")
    wrong = misplaced(a.root)
    for line in wrong:
        print(f"layering: a declaration outside its file's section: {line}", file=sys.stderr)
    return 1 if new or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
