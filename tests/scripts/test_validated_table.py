#!/usr/bin/env python3
"""What is enabled where is checked against the validation reports.

shim/ops.def says on which SMs each op is on by default (its validated
SMs); README.md's table "What is validated where" says it per op and SM;
tests/evidence/ holds the validation command's reports
(`*-validate-*.json`, tests/gpu/validate.py). This test fails when:

- an op is validated on an SM in ops.def with no passing report of that SM
  in tests/evidence/ (every step run and passed, the versions naming the SM);
- the README's table has no row for an op of ops.def, or its SM 100 / SM 103
  cell says anything but "not run" while no passing report of those SMs exists;
- a passing report of an SM exists that the README's table does not name
  (then the table is behind the evidence).
"""
import json
import pathlib
import re
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
OP = re.compile(r"^H3_OP\((\w+),\s*\w+,\s*H3_SMS\(([\d,\s]*)\)", re.M)


def validated_sms():
    """{op: [SM, ...]} from shim/ops.def."""
    text = (ROOT / "shim" / "ops.def").read_text()
    return {m.group(1): [int(x) for x in m.group(2).replace(" ", "").split(",") if x] for m in OP.finditer(text)}


def reports(folder=ROOT / "tests" / "evidence"):
    """{SM: [report file, ...]} of the passing validation reports (archived ones aside)."""
    out = {}
    for path in sorted(folder.glob("*-validate*.json")):
        try:
            doc = json.loads(path.read_text())
        except ValueError:
            continue
        v = doc.get("versions", {})
        if not isinstance(doc.get("steps"), list) or "sm" not in v:
            continue  # one of a step's own files (decode, shapes), not a report
        ok = doc.get("pass") is True and doc["steps"] and all(s.get("pass") for s in doc["steps"])
        if ok:
            major, _, minor = str(v["sm"]).partition(".")
            out.setdefault(int(major) * 10 + int(minor or 0), []).append(path.name)
    return out


def table_rows(readme=ROOT / "README.md"):
    """{op: [cells]} of the README's table of what is validated where."""
    text = readme.read_text()
    section = text.split("## What is validated where", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"^\| `(\w+)` \|(.*)\|$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return rows


def problems(sms, found, rows):
    out = []
    for op, list_ in sms.items():
        for sm in list_:
            if sm not in found:
                out.append(f"{op}: validated on SM {sm} in shim/ops.def, but tests/evidence/ holds no passing "
                           f"validation report of SM {sm} (tests/gpu/validate.py)")
        if op not in rows:
            out.append(f"{op}: no row in README.md's table of what is validated where")
        elif rows[op][-1] != "not run" and not ({100, 103} & set(found)):
            out.append(f"{op}: README.md's SM 100, SM 103 cell says '{rows[op][-1]}' with no report of those SMs")
    for sm in found:
        if sm not in (90,) and all(r and r[-1] == "not run" for r in rows.values()):
            out.append(f"a passing validation report of SM {sm} ({found[sm][0]}) that README.md's table does not "
                       "name")
    return out


class ValidatedTable(unittest.TestCase):
    def test_the_table_and_ops_def_agree_with_the_reports(self):
        self.assertEqual(problems(validated_sms(), reports(), table_rows()), [])

    def test_a_claim_without_a_report_is_found(self):
        self.assertTrue(problems({"swiglu": [90, 100]}, {90: ["r.json"]}, {"swiglu": ["on", "not run"]}))
        self.assertTrue(problems({"swiglu": [90]}, {}, {"swiglu": ["on", "not run"]}))
        self.assertTrue(problems({"swiglu": [90]}, {90: ["r.json"]}, {"swiglu": ["on", "on"]}))
        self.assertTrue(problems({"swiglu": [90]}, {90: ["r.json"]}, {}))
        self.assertTrue(problems({"swiglu": [90]}, {90: ["r.json"], 100: ["b.json"]}, {"swiglu": ["on", "not run"]}))
        self.assertEqual(problems({"swiglu": [90]}, {90: ["r.json"]}, {"swiglu": ["on", "not run"]}), [])

    def test_ops_def_and_the_readme_are_read(self):
        self.assertIn("swiglu", validated_sms())
        self.assertIn("qk_norm_rope", table_rows())
        self.assertIn(90, reports())


if __name__ == "__main__":
    unittest.main()
