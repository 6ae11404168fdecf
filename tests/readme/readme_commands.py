#!/usr/bin/python3
"""Runs every command line README.md shows, exactly as written, so the README cannot rot.

What counts as a command line in README.md:
  - every line of an indented code block (4 spaces, after a blank line);
  - every line of a fenced block (```) with no language or sh/bash/shell/console (in a console
    block, only lines starting with "$ "); other fenced blocks (json, yaml, text, ...) are not
    commands;
  - the inline code span that starts the first cell of a table row (| `cmd` | ... |).
Lines ending with a backslash are joined with the next; blank lines and '#' comments are skipped.

How each runs: from the repository root, through bash, with
  - `build/` (at the start of a word) replaced by this test's build tree,
  - every word `DIR` replaced by a fresh scratch directory (one per command, removed after),
  - STRATA_BENCH_DIR set to that scratch directory (where bench/aio_micro puts its file).
It fails if a command exits non-zero, or if the command has `--json` and its stdout is not one
JSON object without an "error" field.

Commands that cannot run in a test are listed in SKIPPED with the reason, printed on every run;
a README command neither run nor listed cannot exist, and a SKIPPED entry that no longer matches
a README command fails the test (so the list stays true).
"""

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

# Exact command (as joined from README.md) -> why it is not run here.
SKIPPED = {
    "scripts/run.sh": "installs packages, builds strata in build/ (tests off) and trains for about "
    "a minute; the README's llama_nvme.json line runs the same `strata train` at a test size",
    "scripts/test.sh": "installs packages and builds and tests three trees (what CI runs; it runs "
    "this test)",
    "bench/cpu_adam_vs_deepspeed/compare.py": "needs pip torch + deepspeed and the C ABI library "
    "that is not built by default; not in CI (see its README)",
    "build/tools/strata/strata generate --model build/main-job/checkpoints "
    "--config configs/llama_nvme.json --prompt 'ROMEO:' --max-new-tokens 200 --temperature 0.8 "
    "--top-k 40 --seed 1": "needs the "
    "checkpoint scripts/run.sh writes; the README line before it generates from a checkpoint "
    "trained in the same command",
    "build/bench/swap_layout/swap_layout --path DIR": "has no size flags: writes and reads about 28 GB "
    "(minutes on a VM disk)",
}

SHELL_LANGS = {"", "sh", "bash", "shell", "console"}


def extract_commands(text):
    """Returns [(line_number, command)] in README order."""
    lines = text.split("\n")
    out = []
    i = 0
    prev_blank = True
    while i < len(lines):
        line = lines[i]
        fence = re.match(r"^\s*(```+|~~~+)\s*([\w+-]*)", line)
        if fence:
            marker, lang = fence.group(1), fence.group(2).lower()
            i += 1
            block = []
            while i < len(lines) and not lines[i].strip().startswith(marker):
                block.append((i + 1, lines[i]))
                i += 1
            i += 1
            if lang in SHELL_LANGS:
                if lang == "console":
                    block = [(n, l.strip()[2:]) for n, l in block if l.strip().startswith("$ ")]
                out += join_continuations(block)
            prev_blank = False
            continue
        if prev_blank and line.startswith("    ") and line.strip():
            block = []
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                block.append((i + 1, lines[i]))
                i += 1
            out += join_continuations(block)
            prev_blank = False
            continue
        table = re.match(r"^\|\s*`([^`]+)`", line)
        if table and not re.match(r"^\|[\s:|-]+\|?\s*$", line):
            out.append((i + 1, table.group(1).strip()))
        prev_blank = not line.strip()
        i += 1
    return out


def join_continuations(block):
    out = []
    pending, start = "", None
    for n, raw in block:
        s = raw.strip()
        if not pending and (not s or s.startswith("#")):
            continue
        if start is None:
            start = n
        if s.endswith("\\"):
            pending += s[:-1].rstrip() + " "
            continue
        out.append((start, (pending + s).strip()))
        pending, start = "", None
    if pending:
        out.append((start, pending.strip()))
    return out


def substitute(command, build_dir, scratch):
    command = re.sub(r"(?<![\w./-])build/", shlex.quote(build_dir) + "/", command)
    return re.sub(r"\bDIR\b", shlex.quote(scratch), command)


def check_json(stdout):
    """None if stdout is one JSON object without an "error" field, else what is wrong."""
    try:
        doc = json.loads(stdout)
    except ValueError as e:
        return "--json output does not parse (%s): %r" % (e, stdout[:400])
    if not isinstance(doc, dict):
        return "--json output is not an object: %r" % stdout[:400]
    if "error" in doc:
        return "--json output is an error: %s" % doc["error"]
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", required=True, help="repository root (holds README.md)")
    ap.add_argument("--build", required=True, help="the build tree that replaces build/")
    ap.add_argument("--bench", default="ON", help="OFF if this tree has no bench/ programs")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per command")
    ap.add_argument("--list", action="store_true", help="print the commands and exit")
    args = ap.parse_args()
    source, build = os.path.abspath(args.source), os.path.abspath(args.build)
    bench_built = args.bench.upper() not in ("OFF", "0", "FALSE", "NO", "")

    with open(os.path.join(source, "README.md")) as f:
        commands = extract_commands(f.read())
    if args.list:
        for n, c in commands:
            print("README.md:%d: %s" % (n, c))
        return 0

    scratch_root = os.environ.get("STRATA_TEST_DIR") or os.path.join(build, "test-scratch")
    os.makedirs(scratch_root, exist_ok=True)
    failures, ran, skipped = [], 0, 0
    seen = set()
    for n, command in commands:
        seen.add(command)
        where = "README.md:%d" % n
        reason = SKIPPED.get(command)
        if reason is None and not bench_built and re.match(r"^build/bench/", command):
            reason = "this build tree has no benchmarks (STRATA_BUILD_BENCH=OFF)"
        if (reason is None and "build/python" in command
                and not os.path.isdir(os.path.join(build, "python", "strata"))):
            reason = "this build tree has no Python package (off in sanitizer trees)"
        if reason is not None:
            print("SKIP %s: %s\n     because: %s" % (where, command, reason), flush=True)
            skipped += 1
            continue
        scratch = tempfile.mkdtemp(prefix="readme-", dir=scratch_root)
        run = substitute(command, build, scratch)
        env = dict(os.environ, STRATA_BENCH_DIR=scratch)
        print("RUN  %s: %s\n     as: %s" % (where, command, run), flush=True)
        t0 = time.monotonic()
        try:
            p = subprocess.run(["bash", "-o", "pipefail", "-c", run], cwd=source, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=args.timeout)
            problem = None
            if p.returncode != 0:
                problem = "exit code %d" % p.returncode
                program = shlex.split(run)[0] if shlex.split(run) else ""
                if program.startswith(build + "/") and not os.path.exists(program):
                    problem += " (%s is not built in this tree)" % program
            elif "--json" in shlex.split(command):
                problem = check_json(p.stdout)
        except subprocess.TimeoutExpired as e:
            p, problem = e, "no exit after %.0f s" % args.timeout
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        elapsed = time.monotonic() - t0
        ran += 1
        if problem is None:
            print("     ok (%.1f s)" % elapsed, flush=True)
            continue
        print("     FAILED (%.1f s): %s" % (elapsed, problem), flush=True)
        for name, data in (("stdout", p.stdout), ("stderr", p.stderr)):
            if data:
                text = data if isinstance(data, str) else data.decode(errors="replace")
                print("     --- %s (last 2000 chars) ---\n%s" % (name, text[-2000:]), flush=True)
        failures.append("%s: %s: %s" % (where, command, problem))

    stale = sorted(set(SKIPPED) - seen)
    for command in stale:
        failures.append("SKIPPED lists %r, which README.md no longer shows: drop it from "
                        "tests/readme/readme_commands.py" % command)
    print("\n%d README command(s): %d run, %d skipped, %d problem(s)" %
          (len(commands), ran, skipped, len(failures)))
    for f in failures:
        print("FAIL " + f)
    if not commands:
        print("FAIL no command found in README.md (the extraction is broken)")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
