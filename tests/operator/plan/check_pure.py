"""The operator's plan is pure: what operator/plan/ and operator/api/ include, and call.

The plan (library cohort_operator_plan) decides from a CoordinatedJob and what was observed
of it; the controller gathers and applies. Its link line keeps the Kubernetes client, gRPC
and logging out; this check keeps them out of its sources too (a header-only include would
pass the linker), and with them threads, files, sockets and clocks.

  python tests/operator/plan/check_pure.py [REPO]   (exit 1 and the offending lines)
"""

import re
import sys
from pathlib import Path

# Project and library headers a plan file may include, and the files allowed each extra.
# common/failure_reason.h: the coordinator's typed reasons, a plain enum (header-only).
# common/task_progress.h: a task's step and busy seconds per step, a plain struct (header-only).
ALLOWED_PREFIXES = ("operator/api/", "operator/plan/", "absl/", "nlohmann/",
                    "common/failure_reason.h", "common/task_progress.h")
EXTRA = {
    "yaml-cpp/": {"children_coordinator_config.cc"},  # the coordinator's ConfigMap
    "openssl/evp.h": {"spec_change.cc", "kueue.cc"},  # SHA-256 of a spec, SHA-1 of a name
}
ALLOWED_SYSTEM = {"algorithm", "cstdint", "initializer_list", "limits", "map", "optional",
                  "set", "string", "utility", "vector", "functional", "tuple", "cstddef",
                  "array", "memory", "string_view", "cmath"}
# Calls that read a clock or make randomness: the plan takes `Observed::now` and the
# controller's fresh token and certificates as inputs.
FORBIDDEN_CALLS = re.compile(r"absl::Now\(|::now\(\)|\brand\(|random_device|getrandom|"
                             r"absl::SleepFor|std::this_thread")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def problems(repo):
    found = []
    for directory in ("operator/plan", "operator/api"):
        for path in sorted((repo / directory).glob("*")):
            if path.suffix not in (".h", ".cc"):
                continue
            rel = path.relative_to(repo)
            for number, line in enumerate(path.read_text().splitlines(), 1):
                where = f"{rel}:{number}: {line.strip()}"
                m = INCLUDE.match(line)
                if m:
                    kind, name = m.groups()
                    extra = [k for k, files in EXTRA.items()
                             if name.startswith(k) and path.name in files]
                    if extra:
                        continue
                    if kind == '"' and not name.startswith(ALLOWED_PREFIXES):
                        found.append(f"{where}  (not the API types, the plan, abseil or json)")
                    if kind == "<" and name not in ALLOWED_SYSTEM:
                        found.append(f"{where}  (a system header the plan has no use for)")
                elif FORBIDDEN_CALLS.search(line.split("//")[0]):
                    found.append(f"{where}  (a clock, a sleep or randomness)")
    return found


def main():
    repo = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[3]
    found = problems(repo)
    for line in found:
        print(line)
    if found:
        print(f"check_pure: {len(found)} line(s) make the operator's plan impure")
        return 1
    print("check_pure: operator/plan and operator/api include and call nothing impure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
