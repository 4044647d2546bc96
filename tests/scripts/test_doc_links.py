#!/usr/bin/env python3
"""Every relative link in the project's documents names a file that exists:
the README, docs/, the tests' and signatures' READMEs and the evidence index
(a claim whose file was moved to archive/ must be pointed at its new file)."""
import pathlib
import re
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ["README.md", "tests/README.md", "signatures/README.md", "tests/evidence/INDEX.md",
        "scripts/README-workload.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
# [text](target) and reference definitions "[name]: target".
LINK = re.compile(r"\]\(([^)\s]+)\)|^\[[^\]]+\]:\s*(\S+)", re.M)
# An evidence file named in full in code spans: `tests/evidence/NAME` (from the repository's root).
EVIDENCE = re.compile(r"`(tests/evidence/[^`*{}]+)`")


def broken(doc):
    text = (ROOT / doc).read_text()
    out = []
    for m in LINK.finditer(text):
        target = (m.group(1) or m.group(2)).split("#")[0]
        if not target or re.match(r"[a-z]+:", target):
            continue  # an anchor in the same file, or a URL
        if not ((ROOT / doc).parent / target).exists():
            out.append(target)
    out += [p for p in EVIDENCE.findall(text) if not (ROOT / p).exists()]
    return out


class DocLinks(unittest.TestCase):
    def test_every_relative_link_exists(self):
        for doc in DOCS:
            with self.subTest(doc=doc):
                self.assertEqual(broken(doc), [], f"{doc} links to files that do not exist")

    def test_a_missing_file_is_found(self):
        self.assertTrue(LINK.search("see [x](no/such/file.md)"))
        self.assertEqual(broken_text("[x](no/such/file.md)"), ["no/such/file.md"])
        self.assertEqual(broken_text("`tests/evidence/no-such-run.md`"), ["tests/evidence/no-such-run.md"])


def broken_text(text, doc="README.md"):
    tmp = ROOT / "build" / "doc-links-probe.md"
    tmp.parent.mkdir(exist_ok=True)
    tmp.write_text(text)
    try:
        return broken(str(tmp.relative_to(ROOT)))
    finally:
        tmp.unlink()


if __name__ == "__main__":
    unittest.main()
