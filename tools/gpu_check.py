#!/usr/bin/env python3
"""`make gpu-check`: the sidecar's view of this machine's GPUs against nvidia-smi's.

Runs cohort-gpu-info (the sidecar's NVML code, loading the real libnvidia-ml.so.1 the way the
sidecar does) with a telemetry sample and an XID/ECC event watch, runs nvidia-smi's query of
the same fields, and compares them GPU by GPU:

  identity  count, UUID, name, PCI bus id, total memory, compute capability, MIG and ECC mode,
            driver version: must be equal;
  telemetry memory used, utilisation, temperature, power, SM clock: read a moment apart by
            two programs, so each must be within a stated tolerance;
  SM activity on GPUs of compute capability 9.0 and later (NVML's GPM, measured over the
            watch; nvidia-smi has no such field): a ratio from 0 to 1;
  health    every GPU healthy, and the event watch registered (an XID cannot be caused on
            purpose on real hardware: the fake NVML's tests cover the events themselves).

Prints both views and one line per check; exits 1 when a check fails, 2 when the machine has
no NVIDIA driver or nvidia-smi (nothing to compare).
"""
import argparse
import json
import shutil
import subprocess
import sys

SMI_FIELDS = [
    "index", "uuid", "name", "pci.bus_id", "memory.total", "memory.used", "utilization.gpu",
    "temperature.gpu", "power.draw", "clocks.sm", "driver_version", "compute_cap",
    "mig.mode.current", "ecc.mode.current",
]


def run_gpu_info(program, seconds):
    command = [program, "--watch", str(seconds)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60)
    if done.returncode != 0:
        sys.exit(f"gpu-check: {' '.join(command)} exited {done.returncode}:\n{done.stderr}")
    return json.loads(done.stdout), done.stderr


def run_smi(program):
    command = [program, "--query-gpu=" + ",".join(SMI_FIELDS), "--format=csv,noheader,nounits"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        sys.exit(f"gpu-check: {' '.join(command)} exited {done.returncode}:\n{done.stderr}")
    rows = []
    for line in done.stdout.strip().splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) != len(SMI_FIELDS):
            sys.exit(f"gpu-check: nvidia-smi printed {len(values)} fields, not "
                     f"{len(SMI_FIELDS)}: {line!r}")
        rows.append(dict(zip(SMI_FIELDS, values)))
    return rows


def number(text):
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


class Checks:
    def __init__(self):
        self.failed = 0
        self.passed = 0

    def equal(self, what, ours, theirs):
        ok = ours == theirs
        self._say(ok, f"{what}: cohort {ours!r}, nvidia-smi {theirs!r}")

    def close(self, what, ours, theirs, tolerance, unit):
        if theirs is None:
            print(f"SKIP {what}: nvidia-smi does not report it (cohort {ours} {unit})")
            return
        ok = ours is not None and abs(ours - theirs) <= tolerance
        self._say(ok, f"{what}: cohort {ours} {unit}, nvidia-smi {theirs} {unit} "
                      f"(within {tolerance})")

    def true(self, what, ok):
        self._say(ok, what)

    def _say(self, ok, text):
        print(("PASS " if ok else "FAIL ") + text)
        if ok:
            self.passed += 1
        else:
            self.failed += 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu-info", default="build/bin/cohort-gpu-info",
                        help="the cohort-gpu-info program (default: %(default)s)")
    parser.add_argument("--nvidia-smi", default="nvidia-smi", help="nvidia-smi to compare with")
    parser.add_argument("--watch", type=int, default=5,
                        help="seconds to listen for XID and ECC events (default: %(default)s)")
    args = parser.parse_args()

    smi = shutil.which(args.nvidia_smi)
    if not smi:
        print(f"gpu-check: {args.nvidia_smi} is not on this machine: nothing to compare with "
              "(make gpu-check is for machines with an NVIDIA GPU and its driver)")
        return 2
    ours, diagnostics = run_gpu_info(args.gpu_info, args.watch)
    theirs = run_smi(smi)
    print("== cohort-gpu-info (the sidecar's NVML view)")
    print(json.dumps(ours, indent=1))
    if diagnostics.strip():
        print("== cohort-gpu-info's diagnostics\n" + diagnostics.strip())
    print("== nvidia-smi --query-gpu")
    for row in theirs:
        print("  " + ", ".join(f"{k}={v}" for k, v in row.items()))
    print("== checks")

    checks = Checks()
    checks.true(f"NVML loaded from {ours['nvml']['library']} "
                f"(missing functions: {ours['nvml']['missing_functions'] or 'none'})",
                ours["nvml"]["loaded"])
    checks.equal("GPU count", len(ours["gpus"]), len(theirs))
    if theirs:
        checks.equal("driver version", ours["nvml"]["driver_version"], theirs[0]["driver_version"])
    samples = {s["index"]: s for s in ours.get("samples", [])}
    health = {h["index"]: h for h in ours.get("health", [])}
    for gpu, row in zip(ours["gpus"], theirs):
        i = gpu["index"]
        checks.equal(f"GPU {i} index", i, int(row["index"]))
        checks.equal(f"GPU {i} UUID", gpu["uuid"], row["uuid"])
        checks.equal(f"GPU {i} name", gpu["name"], row["name"])
        checks.equal(f"GPU {i} PCI bus id", gpu["pci_bus_id"].upper(), row["pci.bus_id"].upper())
        checks.equal(f"GPU {i} total memory (MiB)", gpu["memory_total_bytes"] // (1 << 20),
                     int(number(row["memory.total"]) or -1))
        if number(row["compute_cap"]) is not None:
            checks.equal(f"GPU {i} compute capability", gpu["compute_capability"],
                         row["compute_cap"])
        mig = (gpu.get("mig_mode") or {}).get("current")
        if row["mig.mode.current"] not in ("[N/A]", "[Not Supported]"):
            checks.equal(f"GPU {i} MIG mode", mig, row["mig.mode.current"].lower())
        if row["ecc.mode.current"] not in ("[N/A]", "[Not Supported]"):
            checks.equal(f"GPU {i} ECC enabled", gpu.get("ecc_enabled"),
                         row["ecc.mode.current"].lower() == "enabled")
        sample = samples.get(i)
        checks.true(f"GPU {i} has a telemetry sample", sample is not None and not sample["lost"])
        if sample:
            used = sample["memory_used_bytes"]
            checks.close(f"GPU {i} memory used", None if used is None else used // (1 << 20),
                         number(row["memory.used"]), 512, "MiB")
            checks.close(f"GPU {i} utilisation", sample["gpu_utilization_percent"],
                         number(row["utilization.gpu"]), 20, "%")
            checks.close(f"GPU {i} temperature", sample["temperature_celsius"],
                         number(row["temperature.gpu"]), 5, "C")
            power = sample["power_milliwatts"]
            checks.close(f"GPU {i} power", None if power is None else power / 1000,
                         number(row["power.draw"]), 50, "W")
            checks.close(f"GPU {i} SM clock", sample["sm_clock_mhz"], number(row["clocks.sm"]),
                         400, "MHz")
            capability = number(row["compute_cap"])
            if capability is not None and capability >= 9 and mig != "enabled":
                activity = sample.get("sm_activity")
                checks.true(f"GPU {i} SM activity over the watch (NVML GPM): {activity}",
                            isinstance(activity, (int, float)) and 0 <= activity <= 1)
        state = health.get(i)
        checks.true(f"GPU {i} healthy ({(state or {}).get('reasons') or 'no reasons'})",
                    bool(state and state["healthy"]))
    checks.true("the XID/ECC event watch registered with NVML",
                bool(ours.get("listening_for_events")))
    events = ours.get("events", []) + ours.get("health_events", [])
    print(f"XID/ECC events seen during the {args.watch} s watch: {len(events)}"
          + "".join(f"\n  {e}" for e in events))
    print(f"gpu-check: {checks.passed} passed, {checks.failed} failed")
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
