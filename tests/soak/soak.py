"""make soak: real clients through sidecars while the coordinator is killed, its disk fills and
a sidecar is killed; at the end every acknowledged value is read back and compared.

Two gangs, as two CoordinatedJobs would be, each with its own coordinator (--state-dir: a
directory of its own on one tmpfs, mounted in a private mount namespace, so nothing changes in
the machine's mounts); each job's tasks are a pod behind their own sidecar proxy
(cohort-sidecar --proxy-listen):
  gang a, job worker  unmodified jaxlib clients (the compat suite's main venv)
  gang a, job agent   C++ tasks on the cohort agent library (soak_agent_client)
  gang b, job tf      unmodified TensorFlow clients (its tensorflow-cpu venv)
Every task runs rounds of a key-value write, a blocking get of another task's key (its value
compared) and a barrier that every task of its gang passes together (soak_client.py).

Meanwhile, at random (--seed), both coordinators are killed with SIGKILL and started again on
the same ports and directories (--kill-every MIN:MAX seconds); the volume is filled to the last
byte and emptied again (--fills, each held --fill-hold seconds), so writes are refused with
RESOURCE_EXHAUSTED for a while; and, once, the agent tasks' sidecar is killed with SIGKILL and
started again. At the end every task stops at the same round, and every key a task saw
acknowledged is read back from the coordinator and compared with the value written.

It passes when nothing acknowledged is lost or altered, no client saw an error, and the
coordinators, the sidecar and the volume went through what was asked (--min-kills). The
figures go to --out (JSON) and, with --report, to a Markdown report (RELIABILITY.md).
"""

import argparse
import datetime
import json
import os
import platform
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SOAK_DIR = Path(__file__).resolve().parent
REPO = SOAK_DIR.parents[1]
sys.path.insert(0, str(REPO / "tests" / "compat"))
sys.path.insert(0, str(SOAK_DIR))
from harness import (ProcessGroup, Volume, cohort_binary, free_port, installed_version,  # noqa
                     start_cohort, tail, tensorflow_client, wait_accepting, wait_for_log)
from soak_values import key_of, value_of  # noqa: E402

# Two gangs, as two CoordinatedJobs would be: each with its own coordinator, whose state is a
# directory of its own on the one volume. (TensorFlow's agent exchanges devices with every
# workload task of its coordinator, WaitForAllTasks, which jaxlib's client never calls: the
# TensorFlow tasks cannot share a coordinator with jaxlib's.) Each job's tasks are one pod
# behind one sidecar.
GANGS = {"a": ("worker", "agent"), "b": ("tf",)}
KEY_KIND = {"worker": "jax", "tf": "tf", "agent": "agent"}
RESTART_DEADLINE_S = 60
EXIT_DEADLINE_S = 600


def parse_duration(text):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(s|m|h)?", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration is a number of seconds, or one "
                                         "with s, m or h after it (90s, 30m, 2h)")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]


def parse_range(text):
    try:
        lo, hi = (parse_duration(p) for p in text.split(":"))
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(f"{text!r}: expected MIN:MAX, such as 10:40")
    if not 0 < lo <= hi:
        raise argparse.ArgumentTypeError(f"{text!r}: MIN must be above 0 and at most MAX")
    return lo, hi


class Soak:
    def __init__(self, args, log_dir):
        self.args = args
        self.log_dir = log_dir
        self.group = ProcessGroup(log_dir / "procs")
        self.rng = random.Random(args.seed)
        self.figures = {"kills": 0, "restart_seconds": [], "fills": 0, "sidecar_kills": 0}
        self.failure = None

    # ---------------------------------------------------------------- the parts

    def start_coordinator(self, gang):
        g = self.gangs[gang]
        g["starts"] += 1
        jobs = GANGS[gang]
        extra = []
        for job in jobs[1:]:
            extra += ["--job", f"{job}={self.args.tasks}"]
        g["server"] = start_cohort(
            self.group, job=jobs[0], tasks=self.args.tasks, heartbeat_s=10, http=True,
            name=f"cohort-{gang}-{g['starts']}", listen=g["listen"], wrapper=self.volume.enter,
            extra=[*extra, "--default-job", jobs[0], "--auxiliary-job", f"sidecar={len(jobs)}",
                   "--state-dir", f"{self.volume.path}/state-{gang}"])

    def start_sidecar(self, pod):
        gang, job = pod["gang"], pod["job"]
        handoff = self.log_dir / f"pod-{job}"
        handoff.mkdir(exist_ok=True)
        pod["proc"] = self.group.start(f"sidecar-{job}-{pod['starts']}", [
            str(cohort_binary("cohort-sidecar")), "--coordinator", self.gangs[gang]["listen"],
            "--proxy-listen", pod["endpoint"], "--outage-tolerance", "300s",
            "--http-listen", f"127.0.0.1:{free_port()}", "--handoff-dir", str(handoff),
            "--job", job, "--task", str(GANGS[gang].index(job)),
            "--num-tasks", str(len(GANGS[gang]))])
        pod["starts"] += 1
        wait_accepting(pod["endpoint"], 30, pod["proc"])

    def start_clients(self):
        a = self.args
        tf_python, self.tf_version, tf_skip = tensorflow_client()
        if tf_skip:
            raise SystemExit(f"soak: {tf_skip}")
        tf_workers = ",".join(f"127.0.0.1:{free_port()}" for _ in range(a.tasks))
        self.clients = []
        for pod in self.pods:
            job, kind = pod["job"], KEY_KIND[pod["job"]]
            for t in range(a.tasks):
                name = f"{kind}-{t}"
                files = {f: str(self.log_dir / f"{name}.{f}") for f in ("ack", "summary")}
                common = ["--address", pod["endpoint"], "--task", str(t), "--tasks",
                          str(a.tasks), "--ack", files["ack"],
                          "--stop", str(self.gangs[pod["gang"]]["stop"]), "--summary", files["summary"],
                          "--round-pause", str(a.round_pause)]
                if job == "agent":
                    argv = [str(cohort_binary("soak_agent_client")), "--kind", "agent", *common]
                elif job == "tf":
                    argv = [tf_python, str(SOAK_DIR / "soak_client.py"), "--kind", "tf",
                            "--tf-workers", tf_workers, *common]
                else:
                    argv = [sys.executable, str(SOAK_DIR / "soak_client.py"), "--kind", "jax",
                            *common]
                proc = self.group.start(name, argv)
                proc.kind, proc.gang, proc.files = kind, pod["gang"], files
                self.clients.append(proc)

    # ---------------------------------------------------------------- the faults

    def kill_coordinators(self):
        """Both gangs' coordinators at once, then both started again on their directories."""
        for g in self.gangs.values():
            ProcessGroup.stop(g["server"].proc, sig=signal.SIGKILL)
        started = time.monotonic()
        for gang in self.gangs:
            self.start_coordinator(gang)
        for g in self.gangs.values():
            wait_for_log(g["server"].proc, r"restored the saved state", RESTART_DEADLINE_S)
        self.figures["kills"] += 1
        self.figures["restart_seconds"].append(round(time.monotonic() - started, 3))

    def kill_sidecar(self, pod):
        ProcessGroup.stop(pod["proc"], sig=signal.SIGKILL)
        self.start_sidecar(pod)
        wait_for_log(pod["proc"], r"registering as incarnation \d+, this pod's sidecar's "
                     "before it restarted", 30)
        self.figures["sidecar_kills"] += 1

    def progress(self, gang):
        """The highest round any task of the gang has written."""
        best = -1
        for c in self.clients:
            if c.gang != gang:
                continue
            try:
                lines = Path(c.files["ack"]).read_text().split()
            except FileNotFoundError:
                continue
            if lines:
                best = max(best, int(lines[-1].rsplit("/", 1)[1]))
        return best

    def dead(self):
        """A part that ended on its own, described; None while all run."""
        parts = [*(g["server"].proc for g in self.gangs.values()), self.volume.holder,
                 *(pod["proc"] for pod in self.pods), *self.clients]
        for p in parts:
            if p.poll() is not None:
                return f"{p.name} ended with status {p.returncode}:\n{tail(p.log_path.read_text(errors='replace'))}"
        return None

    def run(self):
        a = self.args
        self.volume = Volume(self.group, self.log_dir / "volume", a.volume_size)
        self.gangs = {gang: {"listen": f"127.0.0.1:{free_port()}", "starts": 0,
                             "stop": self.log_dir / f"stop-{gang}"} for gang in GANGS}
        for gang in GANGS:
            self.start_coordinator(gang)
        self.pods = [{"gang": gang, "job": job, "endpoint": f"127.0.0.1:{free_port()}",
                      "starts": 0} for gang, jobs in GANGS.items() for job in jobs]
        for pod in self.pods:
            self.start_sidecar(pod)
        self.start_clients()
        for c in self.clients:
            wait_for_log(c, r"connected", 180)
        print(f"soak: {len(self.clients)} tasks connected; running for {a.duration:.0f} s", flush=True)

        began = time.monotonic()
        end = began + a.duration
        next_kill = began + self.rng.uniform(*a.kill_every)
        fill_at = [began + a.duration * (k + 1) / (a.fills + 1) for k in range(a.fills)]
        sidecar_at = began + a.duration * 0.55 if a.sidecar_kill else None
        full_until = None
        last_report = began
        while time.monotonic() < end:
            now = time.monotonic()
            if now >= next_kill:
                self.kill_coordinators()
                next_kill = time.monotonic() + self.rng.uniform(*a.kill_every)
            if fill_at and now >= fill_at[0] and full_until is None:
                fill_at.pop(0)
                self.volume.fill(exact=False)
                self.figures["fills"] += 1
                full_until = time.monotonic() + a.fill_hold
                print(f"soak: the volume is full (fill {self.figures['fills']})", flush=True)
            if full_until is not None and now >= full_until:
                self.volume.empty()
                full_until = None
                print("soak: the volume has room again", flush=True)
            if sidecar_at is not None and now >= sidecar_at:
                self.kill_sidecar(next(p for p in self.pods if p["job"] == a.sidecar_of))
                sidecar_at = None
                print(f"soak: the {a.sidecar_of} tasks' sidecar was killed and started again",
                      flush=True)
            if now - last_report >= 60:
                last_report = now
                print(f"soak: {now - began:.0f} s, {self.figures['kills']} kills, rounds "
                      f"{ {gang: self.progress(gang) for gang in GANGS} }", flush=True)
            if (why := self.dead()) is not None:
                self.failure = why
                return
            time.sleep(0.2)  # the soak's own pace between looks at the clock
        if full_until is not None:
            self.volume.empty()
        self.finish()

    # ---------------------------------------------------------------- the end

    def finish(self):
        # Every task stops after the same round: a few rounds past the furthest any has
        # written, then checked, since a task that had already passed that round would wait
        # alone at the next barrier.
        for gang, g in self.gangs.items():
            last = self.progress(gang) + self.args.stop_margin
            tmp = g["stop"].with_suffix(".tmp")
            tmp.write_text(str(last))
            os.replace(tmp, g["stop"])
            if self.progress(gang) > last:
                self.failure = f"gang {gang}'s tasks ran past round {last} before the stop was written"
                return
        late = []
        deadline = time.monotonic() + EXIT_DEADLINE_S
        for c in self.clients:
            try:
                c.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                late.append(c.name)
        self.summaries = {}
        for c in self.clients:
            try:
                self.summaries[c.name] = json.loads(Path(c.files["summary"]).read_text())
            except (FileNotFoundError, ValueError):
                self.summaries[c.name] = {"errors": [f"no summary (exit status {c.poll()}):\n"
                                                     f"{tail(c.log_path.read_text(errors='replace'))}"]}
        if late:
            self.failure = f"tasks still running {EXIT_DEADLINE_S} s after the stop: {late}"
        self.read_back()

    def read_back(self):
        """Every acknowledged key, read from the coordinator itself (cohortctl kv ls per task)
        and compared with the value its key makes."""
        self.figures.update(acknowledged=0, read_back=0, lost=[], altered=[])
        for c in self.clients:
            acked = Path(c.files["ack"]).read_text().split()
            prefix = key_of(c.kind, int(c.name.rsplit("-", 1)[1]), "")
            listen = self.gangs[c.gang]["listen"]
            r = subprocess.run([str(cohort_binary("cohortctl")), "--coordinator", listen,
                                "kv", "ls", prefix], capture_output=True, text=True, timeout=300)
            if r.returncode != 0:
                self.failure = f"cohortctl kv ls {prefix}: exit {r.returncode}: {r.stderr}"
                return
            held = dict(line.split("\t", 1) for line in r.stdout.splitlines() if line)
            self.figures["acknowledged"] += len(acked)
            for key in acked:
                if key not in held:
                    self.figures["lost"].append(key)
                    continue
                self.figures["read_back"] += 1
                if held[key] != value_of(key):
                    self.figures["altered"].append({"key": key, "got": held[key][:200]})
            # What is there without an acknowledgement (a write cut short by the stop) must
            # still hold its own value.
            for key, value in held.items():
                if key not in acked and value != value_of(key):
                    self.figures["altered"].append({"key": key, "got": value[:200]})

    def result(self):
        s = getattr(self, "summaries", {})
        total = lambda field: sum(x.get(field, 0) for x in s.values())  # noqa: E731
        errors = [f"{name}: {e}" for name, x in s.items() for e in x.get("errors", [])]
        wrong = [f"{name}: {w}" for name, x in s.items() for w in x.get("wrong", [])]
        f = self.figures
        rounds = min((x.get("rounds", 0) for x in s.values()), default=0)
        return {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": git_commit(),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {cpu_model()}",
            "command": self.args.command,
            "seed": self.args.seed,
            "duration_s": self.args.duration,
            "tasks": {"jaxlib": self.args.tasks, "tensorflow": self.args.tasks,
                      "agent library": self.args.tasks},
            "clients": {"jaxlib": installed_version(sys.executable, "jaxlib"),
                        "tensorflow": getattr(self, "tf_version", "")},
            "coordinator_kills": f["kills"],
            "restart_seconds_max": max(f["restart_seconds"], default=0),
            "volume_fills": f["fills"],
            "sidecar_kills": f["sidecar_kills"],
            "rounds": rounds,
            "writes": total("writes"),
            "blocking_gets_checked": total("values_checked"),
            "barriers_passed": sum(x.get("rounds", 0) for x in s.values()),
            "writes_refused_full": total("refused_full"),
            "resent_after_endpoint_loss": total("resent_after_endpoint_loss"),
            "acknowledged": f.get("acknowledged", 0),
            "read_back": f.get("read_back", 0),
            "lost": len(f.get("lost", [])),
            "altered": len(f.get("altered", [])) + len(wrong),
            "client_errors": len(errors),
            "examples": {"lost": f.get("lost", [])[:10], "altered": (f.get("altered", []) + wrong)[:10],
                         "errors": errors[:10]},
            "failure": self.failure,
        }


def git_commit():
    r = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                       capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return r.stdout.strip() + (" (with uncommitted changes)" if dirty else "")


def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def verdict(res, args):
    problems = []
    if res["failure"]:
        problems.append(res["failure"])
    for field in ("lost", "altered", "client_errors"):
        if res[field]:
            problems.append(f"{field}: {res[field]} (examples: {res['examples']})")
    if res["coordinator_kills"] < args.min_kills:
        problems.append(f"the coordinator was killed {res['coordinator_kills']} times, fewer "
                        f"than --min-kills {args.min_kills}")
    if res["volume_fills"] < args.fills:
        problems.append(f"the volume was filled {res['volume_fills']} of {args.fills} times")
    if args.fills and not res["writes_refused_full"]:
        problems.append("the volume was filled, yet no write was refused: the fill did not "
                        "reach the coordinator")
    if args.sidecar_kill and res["sidecar_kills"] != 1:
        problems.append("the sidecar was not killed")
    if res["acknowledged"] == 0:
        problems.append("no write was acknowledged")
    return problems


def report(res, problems, path):
    ok = "passed" if not problems else "FAILED"
    lines = [
        "# Reliability",
        "",
        "What `make soak` (tests/soak/soak.py) measured: real clients through their pods' sidecars,",
        "in two gangs with a durable coordinator each (jaxlib and agent-library tasks in one,",
        "TensorFlow tasks in the other), while both coordinators are killed with SIGKILL at random,",
        "their state volume fills up and empties again, and one sidecar is killed; at the end every",
        "value a client saw acknowledged is read back from the coordinators and compared with what",
        "was written.",
        "Regenerate with the command below (it writes this file).",
        "",
        f"**{ok}**: {res['coordinator_kills']} kills of both coordinators survived, "
        f"{res['acknowledged']:,} acknowledged writes read back, **lost: {res['lost']}**, "
        f"altered: {res['altered']}, client errors: {res['client_errors']}.",
        "",
        "| | |",
        "|---|---|",
        f"| command | `{res['command']}` |",
        f"| when, commit | {res['date']}, {res['commit']} |",
        f"| machine | {res['machine']} |",
        f"| duration | {res['duration_s'] / 60:.1f} min, seed {res['seed']} |",
        f"| tasks | {res['tasks']['jaxlib']} jaxlib {res['clients']['jaxlib']}, "
        f"{res['tasks']['tensorflow']} TensorFlow {res['clients']['tensorflow']}, "
        f"{res['tasks']['agent library']} agent library; each job behind its own sidecar |",
        f"| kills (SIGKILL of both coordinators, each started again on its directory) | "
        f"{res['coordinator_kills']}, {2 * res['coordinator_kills']} coordinator processes "
        f"(slowest return of both to service: {res['restart_seconds_max']} s) |",
        f"| volume filled to the last byte, then emptied | {res['volume_fills']} times |",
        f"| sidecar killed (SIGKILL) and started again | {res['sidecar_kills']} |",
        f"| rounds every task finished (write, blocking get, barrier of its gang) | {res['rounds']:,} |",
        f"| writes acknowledged | {res['writes']:,} |",
        f"| blocking gets, value compared | {res['blocking_gets_checked']:,} |",
        f"| barriers passed (per task) | {res['barriers_passed']:,} |",
        f"| writes refused while the volume was full (RESOURCE_EXHAUSTED, sent again) | "
        f"{res['writes_refused_full']:,} |",
        f"| agent-library calls sent again after their sidecar was killed | "
        f"{res['resent_after_endpoint_loss']:,} |",
        f"| acknowledged values read back at the end | {res['read_back']:,} of {res['acknowledged']:,} |",
        f"| **lost** | **{res['lost']}** |",
        f"| altered (read back or by a blocking get) | {res['altered']} |",
        f"| client errors | {res['client_errors']} |",
        "",
    ]
    if problems:
        lines += ["## What failed", ""] + [f"- {p}" for p in problems] + [""]
    lines += [
        "## What counts",
        "",
        "- **Lost**: a key a client saw acknowledged that the coordinator no longer holds at the end.",
        "  **Altered**: a value, read back at the end or by a client's blocking get, that differs",
        "  from what its key's writer wrote (values are made from their keys: tests/soak/soak_values.py).",
        "- **Client errors**: any call that failed, except the two answers the soak provokes on purpose",
        "  and counts apart: a write refused with `RESOURCE_EXHAUSTED` \"the coordinator's state volume",
        "  is full\" while the volume is full (the client sends it again), and, for the agent-library",
        "  tasks only, a call that failed because their own sidecar was gone (gRPC's transport error,",
        "  `UNAVAILABLE`; each such call is safe to repeat and was). jaxlib and TensorFlow clients are",
        "  unmodified and saw every coordinator kill only as a pause.",
        "- A sidecar that restarts registers as the incarnation it had (kept in its pod's hand-off",
        "  directory), so the job goes on instead of stopping for a task that restarted.",
        "",
    ]
    Path(path).write_text("\n".join(lines))


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Environment: COHORT_BIN_DIR (default build/bin). The venvs come from "
               "tests/compat/run.sh (make soak makes them).")
    p.add_argument("--duration", type=parse_duration, default=parse_duration("30m"),
                   help="how long the faults go on (default 30m)")
    p.add_argument("--kill-every", type=parse_range, default=(10.0, 40.0), metavar="MIN:MAX",
                   help="seconds between coordinator kills, drawn uniformly (default 10:40)")
    p.add_argument("--min-kills", type=int, default=None,
                   help="fewer kills fail the run (default: 50 for 30 minutes and more, else "
                        "the duration over the longest wait)")
    p.add_argument("--fills", type=int, default=None,
                   help="times the volume is filled (default: one per 6 minutes, at least 1)")
    p.add_argument("--fill-hold", type=parse_duration, default=10.0,
                   help="how long the volume stays full (default 10s)")
    p.add_argument("--no-sidecar-kill", dest="sidecar_kill", action="store_false",
                   help="leave the sidecars alone")
    p.add_argument("--sidecar-of", default="agent", choices=[j for js in GANGS.values() for j in js],
                   help="whose sidecar is killed (default agent: the agent library rides it out; "
                        "unmodified jaxlib and TensorFlow do not, docs/sidecar.md)")
    p.add_argument("--tasks", type=int, default=2, help="tasks per client kind (default 2)")
    p.add_argument("--round-pause", type=float, default=0.05,
                   help="seconds each task pauses between rounds (default 0.05): what the state "
                        "grows by, a round's worth of keys per task each time")
    p.add_argument("--volume-size", default="128m", help="the state volume's tmpfs size (128m)")
    p.add_argument("--seed", type=int, default=None, help="for the faults' times (default: random)")
    p.add_argument("--stop-margin", type=int, default=20, help=argparse.SUPPRESS)
    p.add_argument("--log-dir", type=Path, default=None,
                   help="the processes' logs (default: a new directory under /tmp, kept)")
    p.add_argument("--out", type=Path, default=None, help="the figures as JSON")
    p.add_argument("--report", type=Path, default=None,
                   help="write the figures as Markdown here (RELIABILITY.md)")
    args = p.parse_args(argv)
    if args.tasks < 2:
        p.error("--tasks must be at least 2 (each task reads the next one's keys)")
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)
    if args.fills is None:
        args.fills = max(1, int(args.duration // 360))
    if args.min_kills is None:
        args.min_kills = 50 if args.duration >= 1800 else max(1, int(args.duration // args.kill_every[1]))
    # make soak names itself (tests/soak/run.sh); run directly, the command line is the command.
    args.command = os.environ.get("SOAK_COMMAND") or "python3 tests/soak/soak.py " + " ".join(
        sys.argv[1:] if argv is None else argv)
    for binary in ("cohort-coordinator", "cohort-sidecar", "cohortctl", "soak_agent_client"):
        if not os.access(cohort_binary(binary), os.X_OK):
            p.error(f"{cohort_binary(binary)} not found: build it first (make build) or set "
                    "COHORT_BIN_DIR")
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="cohort-soak-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    print(f"soak: seed {args.seed}, logs in {log_dir}", flush=True)
    soak = Soak(args, log_dir)

    def stop(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, stop)  # so that the processes are stopped below
    try:
        soak.run()
    except AssertionError as e:  # a part that did not come up in time, with its log
        soak.failure = str(e)
    except KeyboardInterrupt as e:
        soak.failure = f"interrupted ({e})"
    finally:
        soak.group.close()
    res = soak.result()
    problems = verdict(res, args)
    print(json.dumps(res, indent=1), flush=True)
    if args.out:
        args.out.write_text(json.dumps(res, indent=1))
    if args.report:
        report(res, problems, args.report)
        print(f"soak: wrote {args.report}", flush=True)
    for line in problems:
        print(f"soak: FAILED: {line}", flush=True)
    if not problems:
        print(f"soak: passed: {res['coordinator_kills']} kills, {res['acknowledged']} "
              f"acknowledged writes read back, lost 0", flush=True)
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
