"""Turns bench/results/*.json into BENCHMARKS.md and the plots in docs/bench/.

Tables put cohort's figure beside each anchor's and the ratio; every ratio is oriented so
that above 1 means cohort is better (faster, more throughput, less memory). The text under
"Reading the numbers" comes from bench/analysis.md, written by hand for the last full run.

  python bench/report.py [--results bench/results] [--out BENCHMARKS.md]
"""

import argparse
import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SYSTEM_NAMES = {
    "cohort": "cohort",
    "cohort-tensorflow": "cohort (tensorflow protocol)",
    "cohort-torch": "cohort (TCPStore protocol)",
    "cohort-torch-sidecar": "cohort (TCPStore via sidecar)",
    "jaxlib": "jaxlib service",
    "etcd": "etcd 3.4",
    "cohort-durable": "cohort --state-dir",
    "cohort-durable-fast": "cohort --state-dir, faster mode (sync 1 s)",
    "etcd-disk": "etcd 3.4 on disk",
    "tcpstore": "TCPStore",
    "cohort-torch-cpp": "cohort (TCPStore protocol, C++ driver)",
    "tcpstore-cpp": "TCPStore (C++ driver)",
    "cohort-torch-sidecar-cpp": "cohort (TCPStore via sidecar, C++ driver)",
}
ANCHORS = ["jaxlib", "etcd", "tcpstore"]


def load(results, name):
    path = results / f"{name}.json"
    if not path.exists():
        return []
    return json.loads(path.read_text())["records"]


def fmt(x, digits=3):
    if x is None:
        return "—"
    if isinstance(x, str):
        return x
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def ratio(cohort, anchor, higher_is_better):
    if cohort in (None, 0) or anchor in (None, 0):
        return "—"
    r = cohort / anchor if higher_is_better else anchor / cohort
    return f"{r:.2f}×"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out) + "\n"


def by(records, **match):
    for r in records:
        if all(r.get(k) == v for k, v in match.items()) and "error" not in r:
            return r
    return None


def error_of(records, **match):
    for r in records:
        if all(r.get(k) == v for k, v in match.items()) and "error" in r:
            return r["error"]
    return None


def cell(records, value, **match):
    r = by(records, **match)
    if r is not None:
        return value(r)
    err = error_of(records, **match)
    return f"failed ({err[:60]})" if err else None


class Plots:
    def __init__(self, out_dir, markdown_dir):
        self.out_dir = out_dir
        self.markdown_dir = markdown_dir
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            self.plt = plt
        except ImportError:
            self.plt = None
        self.made = []

    def lines(self, name, title, xlabel, ylabel, series, logx=True, logy=False):
        """series: {label: [(x, y), ...]}; returns the markdown image line or ''."""
        if self.plt is None or not any(series.values()):
            return ""
        plt = self.plt
        fig, ax = plt.subplots(figsize=(6, 3.6), dpi=110)
        for label, points in series.items():
            points = [(x, y) for x, y in points if y is not None]
            if points:
                xs, ys = zip(*sorted(points))
                ax.plot(xs, ys, marker="o", label=label)
        if logx:
            ax.set_xscale("log")
        if logy:
            ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
        fig.tight_layout()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path = self.out_dir / f"{name}.png"
        fig.savefig(path)
        plt.close(fig)
        self.made.append(path)
        return f"![{title}]({os.path.relpath(path, self.markdown_dir)})\n"


def num(x):
    return x if isinstance(x, (int, float)) else None


def section_register(recs, plots, goals):
    out = ["## 1–2. Registration and barrier rounds\n\n",
           "N tasks register through the register barrier (first call to last release), then "
           "one burst barrier, then rounds where N−1 tasks are parked and the round is timed "
           "from the last task's call to the last release (p50/p99 over the rounds).\n"]
    ns = sorted({r["tasks"] for r in recs if "tasks" in r})
    systems = [s for s in SYSTEM_NAMES if any(r.get("system") == s for r in recs)]
    # jaxlib against cohort; torch's TCPStore server against cohort's TCPStore protocol (torch's
    # client and store-based barrier on both).
    pairs = [("cohort", "jaxlib")]
    for ours in ("cohort-torch", "cohort-torch-sidecar"):
        if ours in systems and "tcpstore" in systems:
            pairs.append((ours, "tcpstore"))
    for ours in ("cohort-torch-cpp", "cohort-torch-sidecar-cpp"):
        if ours in systems and "tcpstore-cpp" in systems:
            pairs.append((ours, "tcpstore-cpp"))
    # The goal's figure: from the C++ driver where it ran (torch's Python client, a thread per
    # rank, is what the other rows measure at 4,000 ranks).
    goal_pair = (("cohort-torch-cpp", "tcpstore-cpp") if ("cohort-torch-cpp", "tcpstore-cpp")
                 in pairs else ("cohort-torch", "tcpstore"))
    header = (["N"] + [SYSTEM_NAMES[s] for s in systems]
              + [f"{SYSTEM_NAMES[a]} ÷ {SYSTEM_NAMES[ours]}" for ours, a in pairs])
    rows_reg, rows_p50, rows_p99 = [], [], []
    for n in ns:
        reg = {s: cell(recs, lambda r: r["register_seconds"], system=s, tasks=n) for s in systems}
        p50 = {s: cell(recs, lambda r: r["round_p50_ms"], system=s, tasks=n) for s in systems}
        p99 = {s: cell(recs, lambda r: r["round_p99_ms"], system=s, tasks=n) for s in systems}
        for rows, figures in ((rows_reg, reg), (rows_p50, p50), (rows_p99, p99)):
            rows.append([f"{n:,}"] + [fmt(figures[s]) for s in systems]
                        + [ratio(num(figures.get(ours)), num(figures.get(a)), False)
                           for ours, a in pairs])
        if n == 4000 and goal_pair in pairs:
            c, t = num(p50.get(goal_pair[0])), num(p50.get(goal_pair[1]))
            goals.append(("TCPStore protocol: the store barrier at 4,000 ranks at least 10× "
                          "torch's server (p50" + (", C++ driver)" if "cpp" in goal_pair[0] else ")"),
                          f"cohort {fmt(c)} ms, torch {fmt(t)} ms ({ratio(c, t, False)})",
                          bool(c and t and t / c >= 10)))
        if n == 16000:
            goals.append(("16,000 tasks registered in under 10 s", f"{fmt(num(reg.get('cohort')))} s",
                          num(reg.get("cohort")) is not None and reg["cohort"] < 10))
        if n == 4000:
            c, j = num(p50.get("cohort")), num(p50.get("jaxlib"))
            goals.append(("barrier release latency at N = 4,000: at least 2× jaxlib's (p50)",
                          f"cohort {fmt(c)} ms, jaxlib {fmt(j)} ms ({ratio(c, j, False)})",
                          bool(c and j and j / c >= 2)))
    stalls = [f"{SYSTEM_NAMES.get(r['system'], r['system'])} at N = {r['tasks']:,}: "
              f"{r['rounds_stalled']} (after {r['rounds']} rounds; figures from those)"
              for r in recs if r.get("rounds_stalled")]
    out.append("\nRegister seconds:\n\n" + table(header, rows_reg))
    out.append("\nBarrier round, last arrival to all released, p50 ms:\n\n" + table(header, rows_p50))
    out.append("\nBarrier round p99 ms (the rounds are few, so p99 is near the max):\n\n"
               + table(header, rows_p99))
    if stalls:
        out.append("\nBarrier rounds that never released (the harness abandons a round after "
                   "60 s + 1 ms per task): " + "; ".join(stalls) + ".\n")
    series = {SYSTEM_NAMES[s]: [(r["tasks"], num(r.get("register_seconds")))
                                for r in recs if r.get("system") == s and "error" not in r]
              for s in systems}
    out.append("\n" + plots.lines("register", "Register N tasks", "tasks (N)", "seconds", series,
                                  logy=True))
    series = {SYSTEM_NAMES[s]: [(r["tasks"], num(r.get("round_p50_ms")))
                                for r in recs if r.get("system") == s and "error" not in r]
              for s in systems}
    out.append(plots.lines("barrier", "Barrier round p50 (last arrival to all released)",
                           "tasks (N)", "ms", series, logy=True))
    return "".join(out)


def section_heartbeat(recs, plots):
    out = ["\n## 3. Heartbeat capacity\n\n",
           "N registered tasks each heartbeat once per interval, spread evenly; the server's "
           "CPU (user + system, from /proc) over the measured window. The load generator "
           "shares the two cores.\n\n"]
    ns = sorted({r["tasks"] for r in recs if "tasks" in r})
    rows = []
    for n in ns:
        c, j = by(recs, system="cohort", tasks=n), by(recs, system="jaxlib", tasks=n)

        def f(r, k):
            return num(r.get(k)) if r else None
        rows.append([f"{n:,}", fmt(f(c, "heartbeats_per_second")),
                     fmt(f(c, "server_cpu_percent_of_one_core")),
                     fmt(f(c, "server_cpu_us_per_heartbeat")),
                     fmt(c["latency"]["p99_ms"] if c else None),
                     fmt(f(j, "server_cpu_percent_of_one_core")),
                     fmt(f(j, "server_cpu_us_per_heartbeat")),
                     fmt(j["latency"]["p99_ms"] if j else None),
                     ratio(f(c, "server_cpu_us_per_heartbeat"), f(j, "server_cpu_us_per_heartbeat"),
                           False)])
    out.append(table(["N", "heartbeats/s", "cohort CPU % of a core", "cohort CPU µs/heartbeat",
                      "cohort p99 ms", "jaxlib CPU %", "jaxlib CPU µs/heartbeat", "jaxlib p99 ms",
                      "jaxlib ÷ cohort (CPU per heartbeat)"], rows))
    series = {SYSTEM_NAMES[s]: [(r["tasks"], num(r.get("server_cpu_percent_of_one_core")))
                                for r in recs if r.get("system") == s and "error" not in r]
              for s in ("cohort", "jaxlib")}
    interval = recs[0].get("interval_seconds") if recs else "?"
    out.append("\n" + plots.lines("heartbeat_cpu", f"Server CPU, heartbeats every {interval} s",
                                  "tasks (N)", "% of one core", series))
    return "".join(out)


def kv_cells(recs, systems, op, value, clients):
    """Each system's rate ("failed" for a failed run) and p99 for one phase of one kv point."""
    rate, p99 = {}, {}
    for s in systems:
        r = by(recs, system=s, value_bytes=value, clients=clients)
        ph = (r or {}).get("phases", {}).get(op)
        rate[s] = ph["ops_per_second"] if ph and ph["ops"] else None
        p99[s] = ph["latency"]["p99_ms"] if ph and ph["ops"] else None
        if r is None and error_of(recs, system=s, value_bytes=value, clients=clients):
            rate[s] = "failed"
    return rate, p99


def kv_rows(recs, systems, pairs, op, values, clients):
    """(value, clients, rates, table row) of each kv point any system has: the systems' rate /
    p99 cells, then each pair's ratio (first ÷ second, more is better)."""
    for v in values:
        for c in clients:
            rate, p99 = kv_cells(recs, systems, op, v, c)
            if all(x is None for x in rate.values()):
                continue
            yield v, c, rate, ([size(v), c] + [f"{fmt(rate[s])} / {fmt(p99[s])}" for s in systems]
                               + [ratio(num(rate.get(a)), num(rate.get(b)), True)
                                  for a, b in pairs])


def section_kv(recs, plots, goals):
    out = ["\n## 4. Key-value throughput and latency\n\n",
           "Closed loops (each client waits for its answer before the next call), for the "
           "stated seconds per phase. cohort and jaxlib have N tasks registered first. "
           "Blocking get: a get on a missing key, the write that answers it, and the delete "
           "(etcd: watch, put once the watch is confirmed, cancel); its latency is from the "
           "wait's start to the value. TCPStore's set is not acknowledged by its server, so "
           "its set rate counts requests written, not applied.\n\n"]
    values = sorted({r["value_bytes"] for r in recs if "value_bytes" in r})
    clients = sorted({r["clients"] for r in recs if "clients" in r})
    systems = [s for s in ["cohort", "cohort-torch", "cohort-torch-sidecar"] + ANCHORS
               if any(r.get("system") == s for r in recs)]
    # Each anchor against cohort, and torch's server against cohort's TCPStore protocol,
    # direct and through the sidecar (the same client, torch's, drives all three).
    pairs = [("cohort", a) for a in ANCHORS if a in systems]
    for ours in ("cohort-torch", "cohort-torch-sidecar"):
        if ours in systems and "tcpstore" in systems:
            pairs.append((ours, "tcpstore"))
    slower = {"cohort-torch": [], "cohort-torch-sidecar": []}
    for op in ("set", "get", "blocking_get", "add"):
        rows = []
        for v, c, rate, row in kv_rows(recs, systems, pairs, op, values, clients):
            rows.append(row)
            t = num(rate.get("tcpstore"))
            for ours, rows_slower in slower.items():
                o = num(rate.get(ours))
                if t and ours in systems and (o is None or o < t):  # failed or missing: no pass
                    rows_slower.append(f"{op.replace('_', ' ')} {size(v)} × {c}")
        header = (["value", "clients"] + [SYSTEM_NAMES[s] + " ops/s / p99 ms" for s in systems]
                  + [f"{SYSTEM_NAMES[ours]} ÷ {SYSTEM_NAMES[a]}" for ours, a in pairs])
        out.append(f"**{op.replace('_', ' ')}**\n\n" + table(header, rows) + "\n")
    for ours, how in (("cohort-torch", "cohort's server"),
                      ("cohort-torch-sidecar", "cohort through a sidecar")):
        if (ours, "tcpstore") in pairs:
            goals.append((f"TCPStore protocol: {how} at least 1× torch's (libuv) on every "
                          "key-value row, torch's client on both",
                          "every row" if not slower[ours]
                          else "slower on: " + "; ".join(slower[ours]), not slower[ours]))
    # Goal: KV throughput at N = 4,000 vs jaxlib (64 clients, 100 B, set + get).
    c = by(recs, system="cohort", value_bytes=100, clients=64)
    j = by(recs, system="jaxlib", value_bytes=100, clients=64)
    if c and j:
        def total(r):
            return sum(r["phases"][p]["ops_per_second"] for p in ("set", "get")
                       if p in r["phases"])
        goals.append(("key-value throughput at N = 4,000 (64 clients, 100 B, set + get): at least "
                      "2× jaxlib's", f"cohort {fmt(total(c))}/s, jaxlib {fmt(total(j))}/s "
                      f"({ratio(total(c), total(j), True)})", total(c) >= 2 * total(j)))
    for v in values:
        series = {}
        for s in systems:
            pts = []
            for r in recs:
                if r.get("system") == s and r.get("value_bytes") == v and "phases" in r:
                    ph = r["phases"].get("get")
                    if ph and ph["ops"]:
                        pts.append((r["clients"], ph["ops_per_second"]))
            series[SYSTEM_NAMES[s]] = pts
        out.append(plots.lines(f"kv_get_{v}", f"get throughput, {size(v)} values",
                               "concurrent clients", "ops/s", series, logy=True))
    return "".join(out)


def section_durable(recs, goals):
    if not recs:
        return ""
    out = ["\n## 4b. Durable state: what nothing acknowledged lost costs\n\n",
           "The key-value loops of section 4 (xla protocol; etcd's own client) against cohort "
           "with its state in memory, with `--state-dir` on this machine's disk (the default: "
           "every answer after the `fdatasync` that covers its change, one `fdatasync` for the "
           "answers that wait together), in the opt-in faster mode (`--state-sync-interval 1s`: "
           "answers once written, synced every second), and etcd with its data directory on "
           "the same disk (etcd also answers a write only after its `fdatasync`, batching "
           "too). Set and blocking get write; get only reads. Each point ran "
           f"{runs_text(recs)}, the servers taking turns; each figure is the median of its "
           "runs.\n\n"]
    systems = [s for s in ["cohort", "cohort-durable", "cohort-durable-fast", "etcd-disk"]
               if any(r.get("system") == s for r in recs)]
    values = sorted({r["value_bytes"] for r in recs if "value_bytes" in r})
    clients = sorted({r["clients"] for r in recs if "clients" in r})
    pairs = [(a, b) for a, b in (("cohort-durable", "etcd-disk"), ("cohort-durable", "cohort"))
             if a in systems and b in systems]
    behind = []
    for op in ("set", "blocking_get", "get"):
        rows = []
        for v, c, rate, row in kv_rows(recs, systems, pairs, op, values, clients):
            rows.append(row)
            d, e = num(rate.get("cohort-durable")), num(rate.get("etcd-disk"))
            if op != "get" and e and (d is None or d < e):
                behind.append(f"{op.replace('_', ' ')} {size(v)} × {c}")
        header = (["value", "clients"] + [SYSTEM_NAMES[s] + " ops/s / p99 ms" for s in systems]
                  + [f"{SYSTEM_NAMES[a]} ÷ {SYSTEM_NAMES[b]}" for a, b in pairs])
        out.append(f"**{op.replace('_', ' ')}**\n\n" + table(header, rows) + "\n")
    d = by(recs, system="cohort-durable", value_bytes=100, clients=64)
    m = by(recs, system="cohort", value_bytes=100, clients=64)
    if d and m and "set" in d.get("phases", {}) and "set" in m.get("phases", {}):
        dr, mr = d["phases"]["set"]["ops_per_second"], m["phases"]["set"]["ops_per_second"]
        goals.append(("durable state: set at 64 clients (100 B) within 0.7× of the in-memory "
                      "coordinator", f"{fmt(dr)}/s against {fmt(mr)}/s ({ratio(dr, mr, True)})",
                      dr >= 0.7 * mr))
    if ("cohort-durable", "etcd-disk") in pairs:
        goals.append(("durable state (`--state-dir`, nothing acknowledged lost): at least etcd's "
                      "rate on the same disk on every write row",
                      "every row" if not behind else "slower on: " + "; ".join(behind),
                      not behind))
    return "".join(out)


def runs_text(recs):
    counts = sorted({r.get("runs", 1) for r in recs})
    return " or ".join(str(c) for c in counts) + (" time" if counts == [1] else " times")


def size(v):
    if v >= 1 << 20:
        return f"{v >> 20} MiB"
    if v >= 1 << 10:
        return f"{v >> 10} KiB"
    return f"{v} B"


def section_memory(recs, plots, goals):
    out = ["\n## 5. Memory per task\n\n",
           "The server's RSS before any task, once N tasks registered, and with three calls "
           "parked per task as a jaxlib process keeps them (PollForError, a blocking get of "
           "the preemption key, a task-state watch). Per task = (parked − before) ÷ N. "
           "'connections' is how many HTTP/2 connections the N tasks share (N = one per "
           "task, as in a real job; otherwise N/100, at least 16).\n\n"]
    rows = []
    keys = sorted({(r["tasks"], r.get("channels")) for r in recs
                   if "tasks" in r and r.get("system") in ("cohort", "jaxlib")})
    for n, ch in keys:
        c = by(recs, system="cohort", tasks=n, channels=ch)
        j = by(recs, system="jaxlib", tasks=n, channels=ch)

        def kib(r, k):
            return r[k] / 1024 if r and k in r else None
        rows.append([f"{n:,}", f"{ch:,}", fmt(kib(c, "bytes_per_task")),
                     fmt(kib(c, "bytes_per_parked_call")), fmt(kib(j, "bytes_per_task")),
                     fmt(kib(j, "bytes_per_parked_call")),
                     ratio(kib(c, "bytes_per_task"), kib(j, "bytes_per_task"), False)])
    out.append(table(["N", "connections", "cohort KiB/task", "cohort KiB/parked call",
                      "jaxlib KiB/task", "jaxlib KiB/parked call", "jaxlib ÷ cohort"], rows))
    c4 = [r for r in recs if r.get("system") == "cohort" and r.get("tasks") == 4000
          and "error" not in r]
    if c4:
        best = min(r["bytes_per_task"] for r in c4) / 1024
        goals.append(("under 8 KiB of coordinator memory per task (N = 4,000, 3 parked calls, "
                      "tasks connected straight to it)",
                      f"{fmt(best)} KiB", best < 8))
    series = {}
    for s in ("cohort", "jaxlib"):
        series[SYSTEM_NAMES[s] + " (shared connections)"] = [
            (r["tasks"], r["bytes_per_task"] / 1024) for r in recs
            if r.get("system") == s and r.get("channels") != r["tasks"] and "error" not in r]
    out.append("\n" + plots.lines("memory", "Server memory per task (3 parked calls)",
                                  "tasks (N)", "KiB per task", series))
    torch_systems = [s for s in ("tcpstore-cpp", "cohort-torch-cpp", "cohort-torch-sidecar-cpp")
                     if any(r.get("system") == s for r in recs)]
    if torch_systems:
        out.append("\nTCPStore protocol, memory per connected rank (cohort-loadgen --protocol "
                   "tcpstore: a connection per rank, then a WAIT parked on each); the process "
                   "measured is the one the ranks connect to: torch's server (a Python process "
                   "hosting it), the coordinator's --torch-store-listen, a sidecar's "
                   "--torch-store-proxy-listen. KiB per rank connected / with its WAIT parked:"
                   "\n\n")
        rows = []
        for n in sorted({r["tasks"] for r in recs if r.get("system") in torch_systems}):
            row = [f"{n:,}"]
            for s in torch_systems:
                r = by(recs, system=s, tasks=n)
                row.append("—" if not r or "error" in r else
                           f"{fmt(r['bytes_per_rank'] / 1024)} / "
                           f"{fmt(r['bytes_per_waiting_rank'] / 1024)}")
            rows.append(row)
        out.append(table(["N"] + [SYSTEM_NAMES[s] for s in torch_systems], rows))
    return "".join(out)


def section_failure(recs, plots, goals):
    out = ["\n## 6. Failure detection\n\n",
           "**Heartbeat path** (cohort-loadgen): N tasks heartbeat once right after "
           "registering, then every timeout/2, with a PollForError parked; task 0 stops "
           "right after a heartbeat and its connection's calls are cancelled. Time from its last heartbeat until every other task's poll "
           "has returned the error.\n\n"]
    hb = [r for r in recs if r.get("scenario") == "failure"]
    for r in hb:
        if (r.get("first_told_seconds") or 0) < 0:
            answer = r.get("first_answer") or "not recorded"
            r["error"] = (f"false alarm: parked polls ended up to "
                          f"{-r['first_told_seconds']:.1f} s before the fault (first answer "
                          f"{answer.splitlines()[0][:90]}); {r.get('heartbeat_errors')} "
                          f"heartbeats failed")
    rows = []
    def told(r, system, n):
        if r:
            return fmt(r.get("all_told_seconds"))
        err = error_of(hb, system=system, tasks=n)
        return f"failed: {err}" if err else "—"

    for n in sorted({r["tasks"] for r in hb if "tasks" in r}):
        c = by(hb, system="cohort", tasks=n)
        j = by(hb, system="jaxlib", tasks=n)
        rows.append([f"{n:,}", fmt(c and c.get("heartbeat_timeout_seconds")),
                     told(c, "cohort", n), fmt(c and c.get("told")),
                     told(j, "jaxlib", n), fmt(j and j.get("told")),
                     ratio(num(c and c.get("all_told_seconds")),
                           num(j and j.get("all_told_seconds")), False)])
    out.append(table(["N", "heartbeat timeout s", "cohort: all told s", "cohort: told",
                      "jaxlib: all told s", "jaxlib: told", "jaxlib ÷ cohort"], rows))
    out.append("\n**Sidecar path** (cohort-failure-bench): real processes — a coordinator, "
               "the victim task (cohort-agent-example) and its cohort-sidecar on 8 fake "
               "GPUs — and N−1 simulated tasks with PollForError parked. `exit`: the victim "
               "is SIGKILLed and its sidecar reports the exit; `xid`: a critical XID is "
               "injected into its GPU; `heartbeat`: no sidecar, the coordinator's heartbeat "
               "timeout (10 s; the agent heartbeats every 5 s) finds it; `hang`: the victim runs on "
               "and heartbeats but its progress file stops changing, and its sidecar "
               "(`--progress-timeout`, its value in the row) records the victim's stacks and "
               "reports it hung. Figures: the fault (for `hang`, the last progress) to the last "
               "of the N−1 tasks told (p50 and max over the rounds), and to the first; to the "
               "operator's view of the coordinator holding the task in error (its "
               "CoordinatorWatcher in the bench, polling every 500 ms as cohort-operator's "
               "`--coordinator-poll` does) and to its restart decision (that, plus "
               "`--failure-settle`, 1 s); and one poll of the job's snapshot of N tasks.\n\n")
    rows = []
    side = [r for r in recs if str(r.get("scenario", "")).startswith("failure_detection_")]
    sidecar_all = {}
    for r in sorted(side, key=lambda r: (r["scenario"], r.get("tasks", 0))):
        fault = r["scenario"].replace("failure_detection_", "")
        if fault == "hang" and num(r.get("progress_timeout_s")) is not None:
            fault += f" (timeout {fmt(r['progress_timeout_s'])} s)"
        rows.append([fault, f"{r.get('tasks', 2):,}",
                     f"{r.get('detected')}/{r.get('rounds')}", fmt(num(r.get("p50_ms"))),
                     fmt(num(r.get("max_ms"))), fmt(num(r.get("first_told_p50_ms"))),
                     fmt(num(r.get("operator_sees_p50_ms"))), fmt(num(r.get("decision_p50_ms"))),
                     fmt(num(r.get("snapshot_poll_p50_ms")))])
        if r["scenario"] == "failure_detection_exit" and num(r.get("max_ms")) is not None:
            sidecar_all[r.get("tasks", 2)] = r["max_ms"]
    out.append(table(["fault", "N", "detected", "all told p50 ms", "all told max ms",
                      "first told p50 ms", "operator sees p50 ms", "restart decided p50 ms",
                      "snapshot poll p50 ms"], rows))
    if 4000 in sidecar_all:
        extra = (f"; N = 16,000: {fmt(sidecar_all[16000])} ms" if 16000 in sidecar_all else "")
        goals.append(("a failure known to all tasks in under 1 s through the sidecar (N = 4,000, "
                      "task killed, worst of the rounds)", f"{fmt(sidecar_all[4000])} ms{extra}",
                      sidecar_all[4000] < 1000))
    res = [r for r in recs if r.get("scenario") == "sidecar_resources"]
    if res:
        r = res[0]
        out.append(f"\nSidecar cost on 8 fake GPUs sampled every {r.get('sample_interval_s')} s: "
                   f"{fmt(r.get('cpu_percent_of_one_core'))} % of a core, "
                   f"{fmt(r.get('rss_kib', 0) / 1024)} MiB RSS.\n")
    prog = [r for r in recs if r.get("scenario") == "sidecar_resources_progress"]
    if res and prog and num(prog[0].get("cpu_percent_of_one_core")) is not None and \
            num(res[0].get("cpu_percent_of_one_core")) is not None:
        p = prog[0]
        out.append(f"With hang detection on (`--progress-timeout`, the progress file written ten "
                   f"times a second, polled four times a second): "
                   f"{fmt(p.get('cpu_percent_of_one_core'))} % of a core, "
                   f"{fmt(p.get('rss_kib', 0) / 1024)} MiB RSS: progress tracking adds "
                   f"{fmt(num(p.get('cpu_percent_of_one_core')) - num(res[0].get('cpu_percent_of_one_core')))}"
                   f" % of a core.\n")
    series = {SYSTEM_NAMES[s] + " heartbeat path": [
        (r["tasks"], r["all_told_seconds"]) for r in hb
        if r.get("system") == s and "error" not in r] for s in ("cohort", "jaxlib")}
    series["cohort sidecar path (exit, worst round)"] = [(n, ms / 1000)
                                                         for n, ms in sidecar_all.items()]
    out.append("\n" + plots.lines("failure", "Failure known to every other task",
                                  "tasks (N)", "seconds", series, logy=True))
    return "".join(out)


def section_operator(results):
    """Scenario 7, written by bench/operator_bench.sh (a JSON list of records)."""
    path = results / "operator.json"
    if not path.exists():
        return ""
    records = json.loads(path.read_text())
    if isinstance(records, dict):
        records = records.get("records", [])
    out = ["\n## 7. Operator (local cluster)\n\n",
           "From `bench/operator_bench.sh` on the local cluster (tools/local-cluster); no "
           "anchor is driven here.\n\n"]
    for scenario in dict.fromkeys(r.get("scenario", "?") for r in records):
        rows = [r for r in records if r.get("scenario", "?") == scenario]
        keys = [k for k in dict.fromkeys(k for r in rows for k in r) if k != "scenario"]
        out.append(f"**{scenario.replace('_', ' ')}**\n\n"
                   + table(keys, [[fmt(r.get(k)) for k in keys] for r in rows]) + "\n")
    return "".join(out)


def section_restart(recs, goals, results):
    """Scenario 8: the coordinator crashing under tasks behind sidecars (cohort-restart-bench),
    beside the gang restart of section 7 that it replaces."""
    if not recs:
        return ""
    out = ["\n## 8. Coordinator restart behind sidecars\n\n",
           "`cohort-restart-bench`: real processes on loopback — a coordinator with "
           "`--state-dir`, P sidecars with `--proxy-listen`, N tasks simulated over the "
           "tensorflow protocol and spread over the sidecars, each reading a key in a closed "
           "loop. The coordinator is SIGKILLed and started again at once on the same "
           "directory; the figure is, per task, the time from the kill until a read it issued "
           "after the kill came back (p50 over tasks, and the slowest task). Before this, a "
           "lost coordinator meant a gang restart (section 7: tens of seconds at 64 workers, "
           "and one of `maxRestarts`).\n\n"]
    run = json.loads((results / "restart.json").read_text()).get("run")
    machine = json.loads((results / "machine.json").read_text()) \
        if (results / "machine.json").exists() else {}
    if run and run.get("commit") != machine.get("commit"):
        network = ("a private network namespace" if run.get("network_namespace") == "private"
                   else "the host's loopback")
        cpu, full_cpu = run.get("cpu"), machine.get("records", {}).get("cpu")
        where = ("same machine" if not cpu or cpu == full_cpu else
                 f"another machine of the same size ({cpu}; the full run's: {full_cpu}), so "
                 f"set these figures beside each other, not beside other sections'")
        out.append(f"Measured in a run of this scenario alone (`bench/run.py --scenarios "
                   f"restart`), at commit {run.get('commit')} on {run.get('date')}, on "
                   f"{network}; {where}.\n\n")
    rows = []
    for r in recs:
        if r.get("scenario") != "coordinator_restart":
            continue
        rows.append([f"{r.get('tasks', 0):,}", fmt(r.get("sidecars")),
                     fmt(r.get("served_p50_ms")), fmt(r.get("served_max_ms")),
                     fmt(r.get("failed_calls")), r.get("error", "")])
    out.append(table(["tasks (N)", "sidecars", "every task served again, p50 (ms)",
                      "max (ms)", "failed calls", "error"], rows))
    mem_rows = []
    for r in recs:
        if r.get("scenario") != "coordinator_memory_behind_sidecars":
            continue
        side, direct = r.get("through_sidecars", {}), r.get("direct", {})
        loaded = num(side.get("rss_loaded_kib"))
        mem_rows.append([f"{r.get('tasks', 0):,}", fmt(side.get("sidecars")),
                         fmt(side.get("kib_per_task")), fmt(direct.get("kib_per_task")),
                         fmt(loaded / 1024) if loaded is not None else ""])
        if r.get("tasks") == 4000 and num(side.get("kib_per_task")) is not None:
            goals.append(("under 8 KiB of coordinator memory per task behind sidecars "
                          "(N = 4,000, 3 parked calls per task)",
                          f"{fmt(side['kib_per_task'])} KiB", side["kib_per_task"] < 8))
    out.append("\n**Coordinator memory per task**, three calls parked per task (an error "
               "poll, a blocking get, a job-state watch, as jaxlib keeps): through the "
               "sidecars, and the same tasks connected straight to the coordinator. Per task: "
               "the coordinator's RSS with the calls parked less its RSS before the tasks "
               "registered (the job's configured tasks included), over N. Behind sidecars "
               "every waiting call of a pod rides one Park stream, so a parked call costs the "
               "core's record of it, not a gRPC call.\n\n")
    out.append(table(["tasks (N)", "sidecars", "KiB per task behind sidecars",
                      "KiB per task direct", "whole RSS behind sidecars (MiB)"], mem_rows))
    pod_rows = []
    for r in recs:
        if r.get("scenario") != "memory_by_tasks_per_sidecar":
            continue
        side = r.get("through_sidecars", {})
        with_sidecars = num(side.get("kib_per_task_with_sidecars"))
        if with_sidecars is not None:
            goals.append((f"under 8 KiB of coordinator memory per task behind sidecars at "
                          f"{r.get('tasks_per_sidecar')} task(s) per pod (its connection "
                          f"counted, 3 parked calls per task)",
                          f"{fmt(with_sidecars)} KiB", with_sidecars < 8))
        pod_rows.append([fmt(r.get("tasks_per_sidecar")), f"{r.get('tasks', 0):,}",
                         fmt(side.get("sidecars")), fmt(side.get("kib_per_task_with_sidecars")),
                         fmt(side.get("sidecar_kib_per_task")),
                         fmt(side.get("coordinator_cpu_ms_per_task_per_min")),
                         fmt(side.get("sidecar_cpu_ms_per_task_per_min")),
                         side.get("error", r.get("error", ""))])
    if pod_rows:
        out.append("\n**Per task at real pod sizes** (1, 4 and 8 processes per pod, each behind "
                   "its pod's sidecar; three calls parked per task as above, and one heartbeat "
                   "per task over the CPU window, jaxlib's interval). Coordinator KiB per task: "
                   "its RSS with the calls parked less its RSS before any sidecar connected, "
                   "over N, so each pod's connection, registration and Park stream count; "
                   "sidecar KiB per task: the sidecars' whole RSS (shared pages of their "
                   "libraries included) over N; CPU: user + system time over the window, per "
                   "task and minute.\n\n")
        out.append(table(["tasks per sidecar", "tasks (N)", "sidecars",
                          "coordinator KiB per task", "sidecar KiB per task",
                          "coordinator CPU ms per task-minute", "sidecar CPU ms per task-minute",
                          "error"], pod_rows))
    for r in recs:
        if r.get("scenario") != "sidecar_latency" or "error" in r:
            continue
        d, p = r.get("direct", {}), r.get("through_sidecar", {})
        out.append(f"\n**Added latency per call through the sidecar** ({r.get('calls')} "
                   f"sequential key reads each way): p50 {fmt(d.get('p50_ms'))} ms direct, "
                   f"{fmt(p.get('p50_ms'))} ms through the sidecar "
                   f"(+{fmt(r.get('added_p50_us'))} µs); p99 +{fmt(r.get('added_p99_us'))} µs.\n")
    return "".join(out)


def section_tasks(results, goals):
    """Scenario 9: the task runtime beside Ray (bench/tasks_bench.py, results/tasks.json)."""
    path = results / "tasks.json"
    if not path.exists():
        return ""
    import tasks_bench

    data = json.loads(path.read_text())
    rendered = tasks_bench.table(data)
    rows = tasks_bench.comparisons(data)
    met = sum(1 for _, _, _, ratio in rows if ratio is not None and ratio >= 1.0)
    goals.append(("task runtime: at least Ray's figure on each workload",
                  f"{met} of {len(rows)} workloads", met == len(rows)))
    p = data.get("params", {})
    return ("\n## 9. Task runtime beside Ray\n\n"
            "`bench/tasks_bench.py`: the same workloads through cohort's Python package "
            "(cohort-coordinator, one cohort-objstore and "
            f"{p.get('workers', '?')} Python workers as processes on loopback) and through "
            f"Ray {data.get('ray_version', '')} from PyPI (`ray.init(num_cpus="
            f"{p.get('workers', '?')})`), each in a process of its own, driven from Python; "
            f"measured at {data.get('when', '?')}. The last column is cohort's figure over "
            "Ray's, turned so that above 1 means cohort is ahead"
            + ("; the one after it is cohort again with the coordinator's `--state-dir`, every "
               "scheduler change written to its log before it is answered"
               if "cohort-durable" in data else "")
            + ".\n\n" + rendered + "\n" + section_tasks_k8s(results))


def section_tasks_k8s(results):
    """The example's map-reduce on the local cluster (bench/tasks_k8s_bench.sh), beside Ray."""
    path = results / "tasks_k8s.json"
    if not path.exists():
        return ""
    data = json.loads(path.read_text())
    rows = ["| worker pods (one worker each) | cohort: the driver's map-reduce (s) | cohort: "
            "`kubectl apply` to Succeeded (s) | Ray, as many workers, same program (s) |",
            "|---|---|---|---|"]
    for r in data.get("runs", []):
        rows.append(f"| {r['pods']} | {r['driver_seconds']:.2f} | {r['job_seconds']:.1f} | "
                    f"{r['ray']['seconds']:.2f} |")
    return ("\n### On the local cluster\n\n"
            "`bench/tasks_k8s_bench.sh`: `examples/tasks-python.yaml` (a map of "
            f"{data.get('shards', '?'):,} tasks summing squares, then a 16-way reduce) as a "
            "CoordinatedJob on the local cluster, each worker pod running one Python worker "
            "beside its sidecar's object store, the driver in a pod of its own; and the same "
            "program on Ray from PyPI on this machine with as many workers "
            "(`bench/tasks_mapreduce_ray.py`). The job's time includes starting its pods. "
            f"Measured at {data.get('when', '?')} on {data.get('machine', {}).get('cpus', '?')} "
            "cores.\n\n" + "\n".join(rows) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--results", default=str(REPO / "bench" / "results"))
    p.add_argument("--out", default=str(REPO / "BENCHMARKS.md"))
    p.add_argument("--plots", default=str(REPO / "docs" / "bench"))
    args = p.parse_args()
    results = Path(args.results)
    machine = load(results, "machine") or {}
    plots = Plots(Path(args.plots).resolve(), Path(args.out).resolve().parent)
    goals = []
    body = [section_register(load(results, "register"), plots, goals),
            section_heartbeat(load(results, "heartbeat"), plots),
            section_kv(load(results, "kv"), plots, goals),
            section_durable(load(results, "durable"), goals),
            section_memory(load(results, "memory"), plots, goals),
            section_failure(load(results, "failure"), plots, goals),
            section_operator(results),
            section_restart(load(results, "restart"), goals, results),
            section_tasks(results, goals)]
    v = machine.get("versions", {})
    head = [
        "# Benchmarks\n\n",
        "cohort beside what a user would otherwise run, measured in the same run on the same "
        "machine. Generated by `make bench` (bench/run.sh → bench/run.py → bench/report.py) "
        "from `bench/results/*.json`; do not edit by hand, except `bench/analysis.md`.\n",
        "\n## Machine and run\n\n",
        table(["", ""], [
            ["CPU", f"{machine.get('cpu', '?')}, {machine.get('cores', '?')} cores"],
            ["memory", f"{machine.get('memory_gib', '?')} GiB"],
            ["OS / kernel", f"{machine.get('os', '?')} / {machine.get('kernel', '?')}"],
            ["cohort commit", machine.get("commit", "?")],
            ["date", machine.get("date", "?")],
            ["other load", "1-minute load average before each measurement is in the JSON "
             "(`loadavg_1m_before`); the machine is shared with other work"],
            ["network", "a private network namespace, loopback only"
             if machine.get("network_namespace") == "private" else "the host's loopback"],
            ["jaxlib", v.get("jaxlib") or "not installed"],
            ["etcd", v.get("etcd") or "not installed"],
            ["torch (TCPStore)", v.get("torch") or "not installed"],
            ["gRPC (cohort, Debian)", v.get("grpc (cohort)") or "?"],
        ]),
        "\nReproduce: `make bench` (installs etcd-server and a `.venv-bench` with jaxlib, "
        "matplotlib and torch, builds `build-bench/` in Release, runs everything, about "
        "30 minutes). One scenario: `bash bench/run.sh --scenarios kv --systems cohort,etcd`.\n",
        "\nEvery server and the load generator share the machine's cores; figures are what "
        "one 2-core machine does with both ends of the traffic on it, not a server's "
        "ceiling.\n",
    ]
    if machine.get("skipped"):
        head.append("\nSkipped in this run: "
                    + "; ".join(f"{k}: {r}" for k, r in machine["skipped"].items()) + ".\n")
    head.append("\n## How each system was driven\n\n" + table(["system", "how"], [
        ["cohort", "cohort-coordinator (Release build), one job of N tasks; cohort-loadgen "
         "simulates the N tasks over `xla.coordination` (and over `tensorflow` for the "
         "register/barrier rows so named), async gRPC callback API, tasks spread over 16 "
         "connections (N/100, at least 16) unless stated"],
        ["jaxlib service", "jaxlib's own coordination service (`get_distributed_runtime_service`"
         ", what `jax.distributed` starts in process 0) hosted alone by "
         "bench/jaxlib_service.py; the same cohort-loadgen drives it over the same "
         "`xla.coordination` protocol"],
        ["etcd 3.4", "Debian's etcd-server, a fresh single-member cluster per measurement with "
         "its data on tmpfs (/dev/shm): etcd fsyncs every write, and on this machine's disk "
         "that alone would be the figure, so tmpfs shows etcd's best case (cohort keeps memory "
         "only); --max-request-bytes 32 MiB. cohort-loadgen's etcd driver speaks etcd's v3 "
         "gRPC API (KV Put/Range, Watch) from bench/etcd/etcd_kv.proto"],
        ["TCPStore", "torch.distributed.TCPStore server (libuv backend) in its own process; "
         "bench/tcpstore_driver.py runs the same scenarios with torch's client, one "
         "connection and one Python thread per simulated task or client; the barrier is the "
         "usual store barrier (add, the last arrival sets a key the others wait for). The "
         "driver's Python overhead is part of its figures."],
        ["cohort (TCPStore protocol)", "cohort-coordinator --torch-store-listen (docs/pytorch.md),"
         " its job of N tasks as a job of N ranks would have; driven by the same "
         "bench/tcpstore_driver.py as TCPStore, torch's own client, in the same run"],
        ["cohort (TCPStore via sidecar)", "a cohort-sidecar's --torch-store-proxy-listen in "
         "front of a coordinator (the path of `framework: pytorch` on the cluster): every "
         "client of the run on the one sidecar, which carries each command to the coordinator "
         "over its gRPC port; the same driver"],
        ["TCPStore / cohort (TCPStore protocol / via sidecar), C++ driver", "the same servers, "
         "the register and barrier rows driven by cohort-loadgen --protocol tcpstore "
         "(bench/tcpstore_load.cc): the same store barrier over a connection per rank, one "
         "thread, epoll for the releases, so that the figure is the server's. On the host's "
         "loopback torch's server (2.15) answered every 50th new connection 5 s late; in the "
         "private network namespace of bench/run.sh it does not. Connecting is not part of "
         "the figures"],
    ]))
    goal_rows = [[g, m, "met" if ok else "**missed**"] for g, m, ok in goals]
    head.append("\n## Goals\n\n" + table(["goal", "measured", ""], goal_rows))
    analysis = REPO / "bench" / "analysis.md"
    tail = ["\n## Reading the numbers\n\n" + analysis.read_text()] if analysis.exists() else []
    Path(args.out).write_text("".join(head) + "\n" + "".join(body) + "".join(tail))
    print(f"report: wrote {args.out} and {len(plots.made)} plots under {args.plots}")


if __name__ == "__main__":
    main()
