#!/usr/bin/env python3
"""Checks the Dockerfile without a container engine (tests/docker/dockerfile_test.sh).

1. One source of truth: the build stage starts from Debian bookworm, installs packages
   with tools/deps.sh (the script `make deps` runs) and builds with `make build`, and does
   not run cmake or ninja itself.
2. The runtime stage starts from debian:bookworm-slim, installs no -dev package, runs as
   uid 65532, and copies in the programs from the build stage.
3. Every shared library each shipped program loads (ldd on build/bin, which was built on
   this same Debian release) belongs to a Debian package that the runtime stage installs:
   the package of each directly linked library (DT_NEEDED) must be in its apt-get install
   list, or be libc6, which every Debian image has; every library loaded indirectly must
   come from that list or from a package those pull in (their Depends, recursively). And
   each listed package must provide a library some program links: nothing extra.
4. Each image the chart uses has a stage with the program as its entrypoint.

Prints PASS/FAIL lines; exit status 1 on any failure. A shipped program missing from
build/bin is a failure, after the others have been checked.
"""
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOCKERFILE = os.environ.get("DOCKERFILE", os.path.join(ROOT, "Dockerfile"))
BIN = os.path.join(ROOT, "build", "bin")
# Images named in charts/cohort/values.yaml and examples/quickstart.yaml.
IMAGES = ["cohort-operator", "cohort-coordinator", "cohort-sidecar", "cohort-agent-example",
          "cohort-objstore", "cohort-worker"]
# The contract's binaries (DESIGN.md), all of which the images carry.
REQUIRED_PROGRAMS = ["cohort-operator", "cohort-coordinator", "cohort-sidecar", "cohortctl",
                     "cohort-objstore", "cohort-worker"]
BASE_PACKAGES = {"libc6"}  # the C library: part of every Debian image

failures = 0
passes = 0


def report(ok, what, detail=""):
    global failures, passes
    if ok:
        passes += 1
        print(f"PASS {what}")
    else:
        failures += 1
        print(f"FAIL {what}" + (f": {detail}" if detail else ""))


def instructions(text):
    """(instruction, arguments) pairs, continuation lines joined, comments dropped."""
    out, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        word, _, rest = current.partition(" ")
        out.append((word.upper(), rest.strip()))
        current = ""
    return out


def stages(text):
    result, stage = [], None
    for inst, args in instructions(text):
        if inst == "FROM":
            m = re.match(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", args, re.I)
            stage = {"from": m.group(1), "name": m.group(2) or str(len(result)), "steps": []}
            result.append(stage)
        elif stage is not None:
            stage["steps"].append((inst, args))
    return result


def apt_packages(run):
    """The packages of every `apt-get install` in a RUN line."""
    pkgs = []
    for command in re.split(r"&&|;|\|\|", run):
        words = shlex.split(command)
        if "apt-get" in words and "install" in words:
            after = words[words.index("install") + 1:]
            pkgs += [w for w in after if not w.startswith("-")]
    return pkgs


def package_of(path):
    candidates = [path, os.path.realpath(path)]
    for p in list(candidates):
        if p.startswith("/usr/"):
            candidates.append(p[4:])
        else:
            candidates.append("/usr" + p)
    for p in candidates:
        r = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True)
        if r.returncode == 0:
            return r.stdout.split(":")[0].strip()
    return None


def libraries(binary):
    """(direct, all): {soname: path} from readelf's DT_NEEDED and ldd."""
    ldd = subprocess.run(["ldd", binary], capture_output=True, text=True)
    if ldd.returncode != 0:
        raise RuntimeError(f"ldd {binary}: {ldd.stderr.strip() or ldd.stdout.strip()}")
    everything = {}
    for line in ldd.stdout.splitlines():
        line = line.strip()
        m = re.match(r"(\S+) => (\S+) \(", line)
        if m:
            everything[m.group(1)] = m.group(2)
        elif "not found" in line:
            everything[line.split()[0]] = None
        else:
            m = re.match(r"(/\S+) \(", line)  # the dynamic loader
            if m:
                everything[os.path.basename(m.group(1))] = m.group(1)
    elf = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True, check=True)
    direct = {n: everything.get(n) for n in re.findall(r"\(NEEDED\)\s+Shared library: \[(\S+)\]", elf.stdout)}
    return direct, everything


def depends_closure(packages):
    """Packages installed along with `packages`: their Depends and Pre-Depends, recursively,
    as recorded by dpkg on this machine (the same Debian release as the image)."""
    seen, todo = set(), list(packages)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        r = subprocess.run(["dpkg-query", "-W", "-f=${Depends}, ${Pre-Depends}", p],
                           capture_output=True, text=True)
        if r.returncode != 0:
            continue
        for clause in r.stdout.split(","):
            for alt in clause.split("|"):
                name = re.sub(r"\(.*?\)", "", alt).strip().split(":")[0]
                if name:
                    installed = subprocess.run(["dpkg-query", "-W", "-f=${Status}", name],
                                               capture_output=True, text=True).stdout
                    if "ok installed" in installed:
                        todo.append(name)
                        break
    return seen


def main():
    text = open(DOCKERFILE).read()
    all_stages = stages(text)
    by_name = {s["name"]: s for s in all_stages}

    # -- 1. The build stage: the same scripts as make deps and make build.
    build = next((s for s in all_stages if any(i == "RUN" and "make build" in a for i, a in s["steps"])), None)
    report(build is not None, "a build stage runs `make build`")
    if build is None:
        return 1
    runs = [a for i, a in build["steps"] if i == "RUN"]
    report(build["from"].startswith("debian:bookworm") and "slim" not in build["from"],
           f"the build stage starts from Debian bookworm ({build['from']})")
    report(any(re.search(r"(^|\s)bash tools/deps\.sh(\s|$|&&)", r) or "make deps" in r for r in runs),
           "the build stage installs dependencies with tools/deps.sh")
    makefile = open(os.path.join(ROOT, "Makefile")).read()
    deps_recipe = re.search(r"^deps:.*\n((?:\t.*\n)+)", makefile, re.M)
    report(deps_recipe is not None and "tools/deps.sh" in deps_recipe.group(1),
           "`make deps` runs the same tools/deps.sh")
    report(not any(re.search(r"(^|\s)(cmake|ninja)\s", r) for r in runs),
           "the build stage runs no cmake or ninja of its own (make build does)")
    report(any(i == "COPY" and a.split()[-1] in (".", "./", "/src", "/src/") and a.split()[0] == "."
               for i, a in build["steps"]),
           "the build stage builds the whole source tree (COPY . .)")

    # -- 2. The runtime stage.
    runtime = next((s for s in all_stages
                    if any(i == "COPY" and "--from=" + build["name"] in a for i, a in s["steps"])), None)
    report(runtime is not None, "a runtime stage copies programs from the build stage")
    if runtime is None:
        return 1
    report(runtime["from"] == "debian:bookworm-slim", f"the runtime stage starts from debian:bookworm-slim ({runtime['from']})")
    installed = []
    for i, a in runtime["steps"]:
        if i == "RUN":
            installed += apt_packages(a)
    report(bool(installed), f"the runtime stage installs {len(installed)} packages")
    dev = [p for p in installed if p.endswith("-dev") or p in ("build-essential", "cmake", "ninja-build")]
    report(not dev, "the runtime stage installs no development package", dev)
    users = [a for i, a in runtime["steps"] if i == "USER"]
    report(users and users[-1].split(":")[0] == "65532", "the runtime stage runs as uid 65532", users)
    report(any(i == "RUN" and "useradd" in a and "65532" in a for i, a in runtime["steps"]),
           "the runtime stage creates the user 65532")
    programs = []
    for i, a in runtime["steps"]:
        if i == "COPY" and "--from=" + build["name"] in a:
            words = [w for w in a.split() if not w.startswith("--")]
            report(words[-1].rstrip("/") == "/usr/local/bin", "programs go to /usr/local/bin", words[-1])
            programs += [os.path.basename(w) for w in words[:-1]]
    stripped = " ".join(runs)
    for p in programs:
        if f"build/bin/{p}" not in stripped:
            report(False, f"{p} comes from build/bin in the build stage")
    missing_required = [p for p in REQUIRED_PROGRAMS if p not in programs]
    report(not missing_required, f"the images ship {', '.join(programs)}", f"missing {missing_required}")

    # -- 4. One stage per image, with the program as entrypoint.
    for image in IMAGES:
        s = by_name.get(image)
        entry = [a for i, a in (s["steps"] if s else []) if i == "ENTRYPOINT"]
        ok = s is not None and s["from"] == runtime["name"] and entry and f"/usr/local/bin/{image}" in entry[-1]
        report(ok, f"target {image}: FROM {runtime['name']}, ENTRYPOINT {image}", entry)

    # -- 3. Shared libraries against the packages the runtime stage installs.
    available = depends_closure(set(installed) | BASE_PACKAGES)
    used = set()
    absent = []
    for p in programs:
        path = os.path.join(BIN, p)
        if not os.access(path, os.X_OK):
            absent.append(p)
            continue
        direct, everything = libraries(path)
        problems = []
        for soname, lib in sorted(everything.items()):
            if soname.startswith("linux-vdso"):
                continue
            if lib is None:
                problems.append(f"{soname}: not found by ldd")
                continue
            pkg = package_of(lib)
            if pkg is None:
                problems.append(f"{soname} ({lib}): no Debian package owns it")
                continue
            used.add(pkg)
            if soname in direct and pkg not in installed and pkg not in BASE_PACKAGES:
                problems.append(f"{soname}: package {pkg} (linked directly) is not in the runtime apt-get install list")
            elif pkg not in available:
                problems.append(f"{soname}: package {pkg} is neither installed by the runtime stage nor pulled in by what it installs")
        report(not problems, f"{p}: all {len(everything)} shared libraries come from the runtime stage's packages",
               "\n       " + "\n       ".join(problems))
    if not absent:
        extra = [p for p in installed if p not in used]
        report(not extra, "every package the runtime stage installs is a library some program loads", extra)
    report(not absent, "every program the images ship is in build/bin",
           f"{absent} not built (make build); their libraries were not checked")
    print(f"dockerfile test: {passes} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
