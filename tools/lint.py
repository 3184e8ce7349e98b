#!/usr/bin/env python3
"""`make lint`: clang-tidy over cohort's own sources, with a cache of clean results.

Hand-written because neither Debian nor PyPI packages a clang-tidy cache (ccache does not run
clang-tidy). A file is checked again only when something clang-tidy would see changed: its
compile command, the contents of the file and of every header it includes (the build's own
dependency records, `ninja -t deps`), .clang-tidy, or clang-tidy's version. Only clean
results are kept, in $COHORT_CACHE/clang-tidy (safe to remove at any time), so a finding is
reported on every run until it is fixed. Paths inside the checkout are keyed relative to it,
so a fresh clone (CI's) reuses what an earlier checkout of the same code found clean.

A unity batch of the build (cmake/CohortUnity.cmake: BUILD/unity/*.cc) is checked as the
build compiles it, as one unit, with findings reported in every source it includes: clang-tidy
then parses the heavy headers once per batch instead of once per file (a fifth of the time).

  tools/lint.py [--build DIR] [--jobs N] [--no-cache]

Prints each finding, then "lint: N files (M clean in the cache, K checked; clang-tidy took C
CPU-s)"; exits 1 on any finding.
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Our own sources; not the generated protocol code (proto/) nor third-party headers.
OWN = re.compile(r"^(agent|common|operator|runtime|service|sidecar|bench|examples|tests)/")


def default_cache() -> Path:
    base = os.environ.get("COHORT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "cohort")
    return Path(base) / "clang-tidy"


def object_deps(build: Path) -> dict:
    """Object path (relative to the build directory) -> the absolute paths of the files its
    compile read."""
    out = subprocess.run(["ninja", "-C", str(build), "-t", "deps"], check=True,
                         capture_output=True, text=True).stdout
    deps, current = {}, None
    for line in out.splitlines():
        if not line.strip():
            current = None
        elif not line.startswith(" "):
            current = line.split(":", 1)[0]
            deps[current] = []
        elif current is not None:
            # ccache runs the compiler with paths relative to the build directory.
            deps[current].append(os.path.normpath(os.path.join(build, line.strip())))
    return deps


def object_of(entry: dict, command: str, build: Path):
    """The object file a compile_commands.json entry writes, relative to the build directory
    (its "output" field, which CMake 3.25 does not write, else the command's -o)."""
    output = entry.get("output")
    if output is None:
        words = shlex.split(command)
        if "-o" not in words[:-1]:
            return None
        output = words[words.index("-o") + 1]
    return os.path.relpath(os.path.join(entry.get("directory"), output), build)


def compiler_deps(command: str, directory: str) -> list:
    """The files a compile command reads, asked of the compiler itself (-M: the preprocessor
    alone, a second or so), for a source the build has not compiled: make test's build leaves
    the test binaries to the sanitizer builds, so ninja has no record of their headers."""
    words = shlex.split(command)
    out, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word == "-o":
            skip = True
        elif word != "-c":
            out.append(word)
    run = subprocess.run(out + ["-M", "-MF", "/dev/stdout"], cwd=directory, capture_output=True,
                         text=True)
    if run.returncode != 0:
        return None
    text = run.stdout.replace("\\\n", " ")
    return [os.path.normpath(os.path.join(directory, p)) for p in text.split(":", 1)[1].split()]


UNITY_INCLUDE = re.compile(r'^#include "([^"]+)"')


def unity_sources(path: str) -> list:
    """The sources a unity batch includes, as paths relative to the checkout."""
    sources = []
    for line in Path(path).read_text().splitlines():
        match = UNITY_INCLUDE.match(line)
        if match:
            sources.append(relative(os.path.join(os.path.dirname(path), match.group(1))))
    return sources


def header_filter() -> str:
    """.clang-tidy's HeaderFilterRegex, plus the sources of a unity batch (included through
    the batch's relative paths, unity/../../), whose findings clang-tidy would otherwise
    drop as if they were in a header outside the checkout's own."""
    match = re.search(r"^HeaderFilterRegex:\s*'([^']*)'", (ROOT / ".clang-tidy").read_text(),
                      re.MULTILINE)
    own = match.group(1) if match else ""
    return f"{own}|unity/\\.\\./" if own else "unity/\\.\\./"


def relative(path: str) -> str:
    """A path inside the checkout relative to it; others as they are."""
    p = os.path.normpath(path)
    root = str(ROOT)
    return os.path.relpath(p, root) if p == root or p.startswith(root + os.sep) else p


_file_hashes: dict = {}


def content_hash(path: str) -> str:
    if path not in _file_hashes:
        try:
            _file_hashes[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        except OSError:
            _file_hashes[path] = "missing"
    return _file_hashes[path]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=str(ROOT / "build"), help="the build directory (make build's)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--no-cache", action="store_true", help="check every file, keep nothing")
    args = ap.parse_args()
    build = Path(args.build).resolve()
    commands_file = build / "compile_commands.json"
    if not commands_file.exists():
        print(f"lint: {commands_file} is missing: run make build first", file=sys.stderr)
        return 2

    version = subprocess.run(["clang-tidy", "--version"], check=True, capture_output=True,
                             text=True).stdout
    config = (ROOT / ".clang-tidy").read_text()
    deps = object_deps(build)
    cache = default_cache()

    todo, cached = [], 0
    unity = str(build / "unity")
    entries = []
    for entry in json.loads(commands_file.read_text()):
        path = os.path.normpath(os.path.join(entry.get("directory"), entry.get("file")))
        source = relative(path)
        if os.path.dirname(path) == unity:
            if not any(OWN.match(s) for s in unity_sources(path)):
                continue
        elif not OWN.match(source):
            continue
        command = entry.get("command") or shlex.join(entry.get("arguments"))
        entries.append((source, command, object_of(entry, command, build), entry.get("directory")))

    # Sources the build did not compile: their headers from the compiler, side by side.
    missing = [e for e in entries if e[2] not in deps]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for (_, command, output, directory), read in zip(
                missing, pool.map(lambda e: compiler_deps(e[1], e[3]), missing)):
            if read is not None:
                deps[output] = read

    for source, command, output, _ in entries:
        key = hashlib.sha256()
        for part in (version, config, command.replace(str(ROOT), ".").replace(str(build), "<build>")):
            key.update(part.encode() + b"\0")
        read = deps.get(output)
        if read is None:  # the compiler could not say what it includes: never cached
            key.update(os.urandom(16))
        else:
            for path in sorted(read):
                key.update(f"{relative(path)} {content_hash(path)}\n".encode())
        marker = cache / key.hexdigest()[:2] / key.hexdigest()
        if not args.no_cache and marker.exists():
            cached += 1
        else:
            todo.append((source, marker))

    def check(item):
        source, marker = item
        run = subprocess.run(["clang-tidy", "-p", str(build), "--quiet",
                              f"--header-filter={header_filter()}", str(ROOT / source)],
                             capture_output=True, text=True, cwd=ROOT)
        findings = [l for l in run.stdout.splitlines() if re.search(r"(error|warning):", l)]
        clean = run.returncode == 0 and not findings
        if clean and not args.no_cache:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
        return source, clean, run.stdout + run.stderr

    failed = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for source, clean, text in pool.map(check, todo):
            if not clean:
                failed.append(source)
                print(f"lint: {source}:\n{text}")
    total = cached + len(todo)
    times = os.times()
    cpu = times.children_user + times.children_system
    print(f"lint: {total} files ({cached} clean in the cache {cache}, {len(todo)} checked; "
          f"clang-tidy took {cpu:.0f} CPU-s)")
    if failed:
        print(f"lint: findings in {len(failed)} files: {' '.join(failed)}")
        return 1
    print("clang-tidy: clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
