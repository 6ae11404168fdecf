#!/usr/bin/python3
"""Checks readme_commands.py itself: what it takes for a command, and that it fails when it should
(a command exiting non-zero, --json output that does not parse or is an error, a stale skip)."""

import os
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import readme_commands  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "readme_commands.py")

SAMPLE = """# Title

Text with `build/inline/not_a_command` in prose.

    build/tools/a --path DIR \\
        --json
    build/tools/b

```sh
# a comment
build/tools/c --x 1
```

```json
{"not": "a command"}
```

```console
$ build/tools/d
output line
```

| command | what |
|---|---|
| `build/bench/e --path DIR` | compares |
| plain cell | no command |
"""


class ExtractTest(unittest.TestCase):
    def test_takes_code_blocks_and_table_commands_only(self):
        got = [c for _, c in readme_commands.extract_commands(SAMPLE)]
        self.assertEqual(got, [
            "build/tools/a --path DIR --json",
            "build/tools/b",
            "build/tools/c --x 1",
            "build/tools/d",
            "build/bench/e --path DIR",
        ])

    def test_substitutes_build_and_dir_as_words(self):
        got = readme_commands.substitute("build/x --path DIR --out build/y.json DIRS rebuild/z",
                                         "/b", "/s")
        self.assertEqual(got, "/b/x --path /s --out /b/y.json DIRS rebuild/z")

    def test_json_check(self):
        self.assertIsNone(readme_commands.check_json('{"gbps": 1}\n'))
        self.assertIn("does not parse", readme_commands.check_json('{"a": 1}\ntrailing'))
        self.assertIn("is an error", readme_commands.check_json('{"error": "NotFound: x"}'))
        self.assertIn("not an object", readme_commands.check_json("[1]"))


class RunTest(unittest.TestCase):
    def run_readme(self, readme):
        with tempfile.TemporaryDirectory() as src, tempfile.TemporaryDirectory() as build:
            with open(os.path.join(src, "README.md"), "w") as f:
                f.write(readme)
            with open(os.path.join(src, "README.md"), "a") as f:
                for skipped in readme_commands.SKIPPED:  # else they are stale skips
                    f.write("\n    %s\n" % skipped)
            return subprocess.run([sys.executable, SCRIPT, "--source", src, "--build", build],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def test_passes_good_commands(self):
        p = self.run_readme("    true\n    echo '{\"x\": 1}'  # --json\n    test -d DIR\n")
        self.assertEqual(p.returncode, 0, p.stdout)
        self.assertIn("3 run", p.stdout)

    def test_fails_a_command_that_fails(self):
        p = self.run_readme("    true\n    false\n")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("exit code 1", p.stdout)

    def test_fails_json_that_does_not_parse(self):
        p = self.run_readme("    echo not-json --json\n")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("does not parse", p.stdout)

    def test_fails_a_stale_skip(self):
        with tempfile.TemporaryDirectory() as src, tempfile.TemporaryDirectory() as build:
            with open(os.path.join(src, "README.md"), "w") as f:
                f.write("    true\n")
            p = subprocess.run([sys.executable, SCRIPT, "--source", src, "--build", build],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("no longer shows", p.stdout)


if __name__ == "__main__":
    unittest.main()
