#!/usr/bin/env python3
"""tests/tools/layering.py: a call up a floor fails the check unless listed."""
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import layering  # noqa: E402


class Layering(unittest.TestCase):
    def tree(self, files, allowed=""):
        root = tempfile.mkdtemp()
        os.makedirs(os.path.join(root, "shim"))
        os.makedirs(os.path.join(root, "tests", "tools"))
        for name, body in files.items():
            open(os.path.join(root, "shim", name), "w").write(body)
        open(os.path.join(root, "shim", "h3shim.h"), "w").write("static inline int h3_helper(void) { return 0; }\n")
        open(os.path.join(root, "tests", "tools", "layering-allowed.txt"), "w").write(allowed)
        return root

    FILES = {"engine.c": "void h3_engine_run(void)\n{\n    h3_op_go();\n    h3_helper();\n}\n",
             "ops.c": "void h3_op_go(void)\n{\n    h3_log_say();\n}\n",
             "log.c": "void h3_log_say(void)\n{\n}\n"}

    def test_calls_down_pass(self):
        self.assertEqual(layering.main(["--root", self.tree(self.FILES)]), 0)

    def test_a_call_up_fails(self):
        files = dict(self.FILES, **{"log.c": "void h3_log_say(void)\n{\n    h3_engine_run();\n}\n"})
        self.assertEqual(layering.main(["--root", self.tree(files)]), 1)

    def test_a_listed_call_up_passes(self):
        files = dict(self.FILES, **{"log.c": "void h3_log_say(void)\n{\n    h3_engine_run();\n}\n"})
        self.assertEqual(layering.main(["--root", self.tree(files, "log.c -> engine.c:h3_engine_run\n")]), 0)

    def test_static_and_commented_calls_do_not_count(self):
        files = dict(self.FILES, **{"log.c": "static void h3_engine_run(void);\n/* h3_op_go() */\n"
                                             "void h3_log_say(void)\n{\n}\n"})
        self.assertEqual(layering.main(["--root", self.tree(files)]), 0)

    def test_a_declaration_outside_its_files_section_fails(self):
        root = self.tree(self.FILES)
        header = os.path.join(root, "shim", "h3shim.h")
        open(header, "a").write("/* ---- ops.c: ops ---- */\nvoid h3_op_go(void);\n/* ---- log.c ---- */\n"
                                "void h3_log_say(void);\n")
        self.assertEqual(layering.main(["--root", root]), 0)
        open(header, "a").write("void h3_engine_run(void);\n")  # engine.c's, under log.c's section
        self.assertEqual(layering.main(["--root", root]), 1)

    def test_the_shim_has_no_new_call_up(self):
        self.assertEqual(layering.main([]), 0)

    def test_a_call_up_added_to_the_shim_fails(self):
        import shutil
        root = tempfile.mkdtemp()
        repo = os.path.join(HERE, "..", "..")
        shutil.copytree(os.path.join(repo, "shim"), os.path.join(root, "shim"))
        os.makedirs(os.path.join(root, "tests", "tools"))
        shutil.copy(os.path.join(repo, "tests", "tools", "layering-allowed.txt"), os.path.join(root, "tests", "tools"))
        log = os.path.join(root, "shim", "log.c")
        open(log, "a").write("\nvoid h3_log_calls_up(void);\nvoid h3_log_calls_up(void)\n{\n    h3_engine_setup();\n}\n")
        self.assertEqual(layering.main(["--root", root]), 1)


if __name__ == "__main__":
    unittest.main()
