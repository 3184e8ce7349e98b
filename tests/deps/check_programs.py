#!/usr/bin/env python3
"""Every external program that the tests, the benchmarks and the dev tools call comes from a
Debian package that the project's own scripts install (tools/deps.sh --list), or from one of
those packages' dependencies, or from the base system (Essential or Priority: required).

A tool installed by hand on one machine must not hide a missing install step: the benchmark
smoke test once passed on a machine where etcdctl had been installed by hand, and failed on
a fresh one because tools/deps.sh installed etcd-server but not etcd-client.

How: the words in command position are collected (in shell scripts and Makefile recipes, the
first word of each command, after wrappers such as timeout, env, nice or unshare; in Python, the
first element of a list literal and shutil.which's argument; in Go, exec.Command's; in C++
tests, the first word of a string literal handed to a shell; in YAML, a container's command).
Each one that names a program on PATH is looked up with `dpkg -S`; its package must be in the
closure above. Programs from outside Debian's packages are refused unless listed in
NOT_FROM_DEBIAN below with the reason they may be; words that name a program but are not
calls of it are listed in NOT_CALLED with the reason.

  python3 tests/deps/check_programs.py          the check (exit 1 with what is missing)
  python3 tests/deps/check_programs.py --list   each program found, its path and package
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# What is scanned: shell and Python scripts, Go and C++ sources of the tests and tools.
SCAN_ROOTS = ["tests", "bench", "tools", "examples"]
SCAN_FILES = ["Makefile", ".ci/run", "tools/local-cluster"]
SCAN_SUFFIXES = {".sh", ".py", ".go", ".cc", ".h", ".yaml", ".txt"}

# Programs that come from the machine image rather than a Debian package. The brief's machine
# image has Go, Python (with pyenv's 3.12 beside Debian's 3.11), Node, g++, clang, cmake and
# ninja; deps.sh checks Go's version and installs the rest from Debian where it is missing.
NOT_FROM_DEBIAN = {
    "go": "the Go toolchain of the machine image (tools/deps.sh checks its version)",
    "gofmt": "ships with the Go toolchain",
    "python3": "pyenv's shim on the machine image; tools/find_python.sh falls back to Debian's",
    "python3.11": "pyenv's shim; Debian's python3.11 comes with python3-venv (tools/deps.sh)",
    "python3.12": "pyenv's 3.12 of the machine image, for jax 0.11+ (tools/find_python.sh)",
    "python3.13": "tools/find_python.sh asks for it; absent is fine",
    "pip": "pyenv's shim; the scripts only call the venvs' own pip",
    "pip3": "pyenv's shim; the scripts only call the venvs' own pip",
    "python": "pyenv's shim; the scripts call python3 or a venv's python",
}

# Words that are also program names on some machines but are not calls of them here.
NOT_CALLED = {
    "kubectl": "tests call build/tools/bin/kubectl, built from the pinned Kubernetes modules",
    "helm": "tests call build/tools/bin/helm, built from the pinned Helm module",
}

NAME = r"[A-Za-z][\w.+-]*"
# Shell: what may stand before a command on a line, and wrappers whose argument is a command.
SEPARATORS = re.compile(r"\|\||&&|[|;`(]|\$\(|\{ ")
KEYWORDS = {"if", "then", "do", "else", "elif", "while", "until", "!", "{", "exec", "command",
            "time", "builtin"}
WRAPPERS = {"timeout", "env", "nice", "nohup", "setsid", "unshare", "sudo", "xargs", "flock",
            "ionice", "stdbuf", "taskset"}
PY_CALLS = [re.compile(r"\[\s*[\"'](" + NAME + r")[\"']"),
            re.compile(r"which\(\s*[\"'](" + NAME + r")[\"']")]
GO_CALLS = [re.compile(r"exec\.Command(?:Context)?\((?:ctx, *)?\"(" + NAME + r")\""),
            re.compile(r"LookPath\(\"(" + NAME + r")\"")]
CC_CALLS = [re.compile(r"(?:RunShell|RunCommand|popen|system)\(\s*(?:std::string\(|absl::StrCat\()?"
                      r"\"(?:command -v )?(" + NAME + r")[ \"]")]
YAML_CALLS = [re.compile(r"command:\s*\[\s*\"?(" + NAME + r")")]


def shell_commands(text):
    """The first word of each command of a shell script (or of a Makefile's recipes)."""
    found = set()
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = re.sub(r"\s#.*$", "", line)
        for part in SEPARATORS.split(line):
            words = part.split()
            i = 0
            while i < len(words):
                w = words[i].lstrip("@-")
                if w in KEYWORDS or re.fullmatch(r"\w+=\S*", w):
                    i += 1
                    continue
                if w in WRAPPERS:
                    found.add(w)
                    i += 1
                    while i < len(words) and (words[i].startswith("-") or
                                              re.fullmatch(r"[\d.]+[smh]?|\w+=\S*", words[i])):
                        i += 1
                    continue
                if re.fullmatch(NAME, w):
                    found.add(w)
                break
    return found


def words_in(name, path):
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return set()
    suffix = path.suffix
    if suffix == ".py":
        return {m for r in PY_CALLS for m in r.findall(text)}
    if suffix == ".go":
        return {m for r in GO_CALLS for m in r.findall(text)}
    if suffix in (".cc", ".h"):
        return {m for r in CC_CALLS for m in r.findall(text)}
    if suffix in (".yaml", ".txt"):
        return {m for r in YAML_CALLS for m in r.findall(text)}
    if name == "Makefile":
        return shell_commands("\n".join(l for l in text.splitlines() if l.startswith("\t")))
    return shell_commands(text)


def run(argv):
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def files_to_scan():
    listed = run(["git", "-C", str(REPO), "ls-files", "--cached", "--others",
                  "--exclude-standard", "--", *SCAN_ROOTS, *SCAN_FILES]).stdout.split("\n")
    for name in sorted(set(filter(None, listed))):
        path = REPO / name
        if not path.is_file():
            continue
        if name in SCAN_FILES or path.suffix in SCAN_SUFFIXES:
            yield name, path
        elif path.suffix == "" and path.read_bytes()[:2] == b"#!":
            yield name, path


def package_of(path):
    """The Debian package that owns path (trying /usr-merged aliases), or None."""
    candidates = [path, os.path.realpath(path)]
    for p in list(candidates):
        if p.startswith("/usr/"):
            candidates.append(p[len("/usr"):])
        else:
            candidates.append("/usr" + p)
    for p in candidates:
        out = run(["dpkg-query", "-S", p])
        if out.returncode == 0:
            for line in out.stdout.splitlines():
                pkgs, _, owned = line.partition(": ")
                if owned.strip() == p and "diversion" not in pkgs:
                    return pkgs.split(",")[0].split(":")[0].strip()
    return None


def project_packages():
    out = run(["bash", str(REPO / "tools" / "deps.sh"), "--list"])
    if out.returncode != 0:
        sys.exit(f"check_programs: tools/deps.sh --list failed: {out.stderr.strip()}")
    return set(out.stdout.split())


def closure(packages):
    """The packages, their dependencies (recursively, no recommends), and the base system."""
    out = run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
               "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances",
               *sorted(packages)])
    found = set(packages)
    for line in out.stdout.splitlines():
        line = line.strip().lstrip("|")
        if ":" in line and line.split(":", 1)[0] in ("Depends", "PreDepends"):
            line = line.split(":", 1)[1]
        name = line.strip().strip("<>").split(":")[0]
        if name:
            found.add(name)
    base = run(["dpkg-query", "-W", "-f=${Package}\t${Essential}\t${Priority}\n"])
    for line in base.stdout.splitlines():
        name, essential, priority = (line.split("\t") + ["", ""])[:3]
        if essential == "yes" or priority == "required":
            found.add(name)
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="print every program found")
    args = parser.parse_args()

    mentioned = {}  # program word -> files that mention it
    for name, path in files_to_scan():
        for word in words_in(name, path):
            mentioned.setdefault(word, []).append(name)

    ours = project_packages()
    allowed = closure(ours)
    repo = str(REPO) + os.sep
    checked, problems = 0, []
    for word in sorted(mentioned):
        where = shutil.which(word)
        if not where or where.startswith(repo) or word in NOT_CALLED:
            continue
        checked += 1
        files = ", ".join(mentioned[word][:3]) + (" ..." if len(mentioned[word]) > 3 else "")
        pkg = package_of(where)
        if args.list:
            print(f"{word}\t{where}\t{pkg or '-'}")
        if pkg is None:
            if word not in NOT_FROM_DEBIAN:
                problems.append(f"{word} ({where}) is no Debian package's, and no project script "
                                f"installs it; mentioned in {files}")
        elif pkg not in allowed:
            problems.append(f"{word} ({where}) comes from the Debian package {pkg}, which no "
                            f"project script installs (add it to tools/deps.sh); mentioned in "
                            f"{files}")
    for p in problems:
        print(f"FAIL {p}")
    print(f"check_programs: {checked} programs the scripts name, each from "
          f"{len(ours)} packages of tools/deps.sh, their dependencies or the base system")
    print(f"{checked - len(problems)} passed, {len(problems)} failed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
