#!/usr/bin/env python3
"""shim/hooks.def's property column agrees with the entry points' names and
kinds: the per-thread forms (_ptsz) and only they are PER_THREAD; a _ptsz
form has its twin's other properties; DEFERRABLE only on launches;
WRITES_ANYWHERE, FREES and the capture and context edges only on SYNC calls."""
import pathlib
import re
import unittest

DEF = pathlib.Path(__file__).resolve().parents[2] / "shim" / "hooks.def"


def rows(text):
    """(lib, kind, name, set of properties) of every H3_HOOK row."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    out, i = [], 0
    while (j := text.find("H3_HOOK(", i)) >= 0:
        depth, k = 0, j + 7
        while True:
            depth += {"(": 1, ")": -1}.get(text[k], 0)
            if depth == 0:
                break
            k += 1
        body = text[j + 8:k]
        lib, kind, _, name = [x.strip() for x in body.split(",", 4)[:4]]
        tail = body[body.rfind(")") + 1:] if body.rstrip().endswith(")") is False else ""
        props = set(re.findall(r"H3_P_([A-Z_]+)", tail))
        out.append((lib, kind, name, props))
        i = k + 1
    return out


class HooksTable(unittest.TestCase):
    def setUp(self):
        self.rows = rows(DEF.read_text())

    def test_the_table_is_read(self):
        self.assertGreater(len(self.rows), 200)
        self.assertIn(("CUDART", "LAUNCH", "__cudaLaunchKernel", {"DEFERRABLE"}), self.rows)

    def test_per_thread_is_the_ptsz_forms(self):
        for lib, kind, name, props in self.rows:
            with self.subTest(name=name):
                self.assertEqual("PER_THREAD" in props, "_ptsz" in name)

    def test_a_ptsz_form_has_its_twins_properties(self):
        by_name = {name: props for _, _, name, props in self.rows}
        for name, props in by_name.items():
            twin = name.replace("_ptsz", "")
            if "_ptsz" in name and twin in by_name:
                with self.subTest(name=name):
                    self.assertEqual(props - {"PER_THREAD"}, by_name[twin])

    def test_kinds_carry_their_properties(self):
        for lib, kind, name, props in self.rows:
            with self.subTest(name=name):
                if "DEFERRABLE" in props:
                    self.assertEqual(kind, "LAUNCH")
                for p in ("WRITES_ANYWHERE", "ENDS_CONTEXT", "CAPTURE_BEGIN", "CAPTURE_INTO_GRAPH",
                          "CAPTURE_END", "GRAPH_LAUNCH", "FREES"):
                    if p in props:
                        self.assertEqual(kind, "SYNC")
                if "GRAPH_LAUNCH" in props:
                    self.assertIn("WRITES_ANYWHERE", props)


if __name__ == "__main__":
    unittest.main()
