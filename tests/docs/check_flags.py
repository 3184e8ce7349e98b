#!/usr/bin/env python3
"""The flags each page documents against the flags each program accepts.

For every program: each flag its --help lists must be named on its page, and each flag the
page's tables give a row of their own must be one the program accepts. Run by ctest
(docs_flags_test) with the build's bin directory; prints every mismatch and exits 1 on any.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# program -> the page that documents its flags
PAGES = {
    "cohort-coordinator": "docs/coordinator.md",
    "cohort-sidecar": "docs/sidecar.md",
    "cohort-operator": "docs/operator.md",
    "cohortctl": "docs/agent.md",
    "cohort-objstore": "docs/tasks.md",
    "cohort-worker": "docs/tasks.md",
    "cohort-agent-example": "examples/agent/README.md",
    "cohort-gpu-info": "docs/sidecar.md",
    "cohort-loadgen": "bench/README.md",
    "cohort-failure-bench": "bench/README.md",
    "cohort-restart-bench": "bench/README.md",
}
# Pages whose tables also give rows to another program's flags (tasks.md: the coordinator's
# task runtime flags), for the rows check only.
ALSO = {"docs/tasks.md": ["cohort-coordinator"]}
# Flags every program has, documented once for all (README.md, "Every program").
COMMON = {"--help", "--version"}

FLAG = re.compile(r"--[a-z][a-z0-9-]*")


def help_flags(binary):
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    text = out.stdout + out.stderr
    flags = set()
    for line in text.splitlines():
        stripped = line.strip()
        # Option lines start with a flag (or a short flag, then the long one).
        if not stripped.startswith("-"):
            continue
        names = stripped.split("  ")[0]
        flags.update(FLAG.findall(names))
    # cohortctl's subcommands have flags of their own.
    if os.path.basename(binary) == "cohortctl":
        for sub in (["kv", "get"], ["kv", "put"], ["kv", "rm"], ["kv", "watch"], ["tasks"],
                    ["barrier", "wait"], ["barrier", "cancel"], ["report-error"]):
            more = subprocess.run([binary] + sub + ["--help"], capture_output=True, text=True,
                                  timeout=30)
            for line in more.stdout.splitlines():
                stripped = line.strip()
                if stripped.startswith("-"):
                    flags.update(FLAG.findall(stripped.split("  ")[0]))
    return flags - COMMON


def page_flags(page):
    with open(os.path.join(ROOT, page)) as f:
        text = f.read()
    anywhere = set(FLAG.findall(text))
    # A table row of its own: its first cell names the flag ("| `--listen ADDR` | ...").
    rows = set()
    for line in text.splitlines():
        if not line.startswith("| `--"):
            continue
        first = line.split("|")[1]
        rows.update(FLAG.findall(first))
    return anywhere, rows


def main():
    bin_dir = sys.argv[1]
    problems = []
    by_page = {}
    for program, page in PAGES.items():
        accepted = help_flags(os.path.join(bin_dir, program))
        by_page.setdefault(page, set()).update(accepted)
        anywhere, _ = page_flags(page)
        for flag in sorted(accepted - anywhere):
            problems.append(f"{program} accepts {flag}, which {page} does not name")
    # A page's rows are for its programs (tasks.md: two of them, and some of the coordinator's).
    for page, programs in ALSO.items():
        for program in programs:
            by_page[page].update(help_flags(os.path.join(bin_dir, program)))
    for page, accepted in by_page.items():
        _, rows = page_flags(page)
        for flag in sorted(rows - accepted - COMMON):
            problems.append(f"{page} has a row for {flag}, which none of its programs accepts")
    for p in problems:
        print(p)
    print(f"docs flags: {len(PAGES)} programs checked, {len(problems)} mismatches")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
