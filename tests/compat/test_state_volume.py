"""A coordinator whose --state-dir volume fills up: writes refused, nothing lost, back after.

The volume is a real 8 MiB tmpfs, mounted in a private mount namespace held by a `sleep`
process (nothing changes in the machine's own mounts); the coordinator runs in it through
nsenter, and a `dd` in it fills the volume to the last byte. The client is cohortctl over
gRPC. What must hold: every write the coordinator acknowledged reads back, before and after
restarts; once the volume is full a write is refused with RESOURCE_EXHAUSTED saying why, and
changes nothing; reads go on; a coordinator killed and started again on the full volume
comes up with everything; once space returns writes are accepted again and the state is
compacted onto the volume.
"""

import re
import signal
import subprocess
import time

from harness import (ProcessGroup, Volume, cohort_binary, free_port, start_cohort, tail,
                     wait_for_log)

VOLUME = "8m"          # AutoCompactBytes: 1 MiB of log; the reserve: 256 KiB
VALUE_BYTES = 16 << 10
BEFORE_FULL = 30       # 480 KiB of values: more than the reserve, so a restart on the full
                       # volume has no room for its snapshot
DEADLINE_S = 20


class Coordinator:
    def __init__(self, group, volume):
        self.group, self.volume = group, volume
        self.listen = f"127.0.0.1:{free_port()}"
        self.starts = 0
        self.server = None
        self.start()

    def start(self):
        self.starts += 1
        self.server = start_cohort(
            self.group, job="worker", tasks=1, heartbeat_s=10, http=True,
            name=f"cohort-{self.starts}", listen=self.listen, wrapper=self.volume.enter,
            extra=["--state-dir", f"{self.volume.path}/state"])

    def kill_and_restart(self):
        ProcessGroup.stop(self.server.proc, sig=signal.SIGKILL)
        self.start()
        wait_for_log(self.server.proc, r"restored the saved state", 15)

    def ctl(self, *args, value=None):
        return subprocess.run(
            [str(cohort_binary("cohortctl")), "--coordinator", self.listen, *args],
            input=value, capture_output=True, text=True, timeout=60)

    def put(self, key, value):
        """True: acknowledged; False: refused because the volume is full."""
        r = self.ctl("kv", "put", key, "-", value=value)
        if r.returncode == 0:
            return True
        assert r.returncode == 1 and "state volume is full" in r.stderr, \
            f"put {key}: exit {r.returncode}: {r.stderr}\n{tail(self.server.log())}"
        return False

    def assert_holds(self, acked, absent=()):
        for key, value in acked.items():
            r = self.ctl("kv", "get", key)
            assert r.returncode == 0 and r.stdout == value, \
                f"{key}: exit {r.returncode} {r.stderr}, {len(r.stdout)} bytes\n" \
                f"{tail(self.server.log())}"
        for key in absent:
            r = self.ctl("kv", "get", key)
            assert r.returncode == 1 and "not found" in r.stderr, (key, r.returncode, r.stderr)

    def refusals(self):
        """Key-value writes answered RESOURCE_EXHAUSTED, from the RPC metrics."""
        total = 0.0
        for line in self.server.metrics().splitlines():
            if line.startswith("cohort_coordinator_rpcs_total{") and \
                    'code="RESOURCE_EXHAUSTED"' in line and "KeyValue" in line:
                total += float(line.rsplit(" ", 1)[1])
        return total

    def full(self):
        return self.server.metric("cohort_coordinator_state_volume_full")


def value_of(i):
    return (f"value {i} " * (VALUE_BYTES // 8))[:VALUE_BYTES]


def test_a_full_volume_refuses_writes_loses_nothing_and_comes_back(group, tmp_path):
    volume = Volume(group, tmp_path / "volume", VOLUME)
    coordinator = Coordinator(group, volume)
    acked = {}
    for i in range(BEFORE_FULL):
        assert coordinator.put(f"k{i}", value_of(i))
        acked[f"k{i}"] = value_of(i)
    assert coordinator.full() == 0

    volume.fill()
    # The first write after the fill takes the reserve's room or finds the volume seen full;
    # one of the next few is refused (the reserve freed, or half of it gone).
    refused = None
    for i in range(BEFORE_FULL, BEFORE_FULL + 40):
        if not coordinator.put(f"k{i}", value_of(i)):
            refused = f"k{i}"
            break
        acked[f"k{i}"] = value_of(i)
    assert refused is not None, "no write was refused on the full volume"
    assert coordinator.full() == 1
    assert coordinator.refusals() >= 1  # answered with that code
    assert re.search(r"volume of --state-dir \S+ is full", coordinator.server.log())
    # Reads go on; the refused write changed nothing; deletes still work.
    coordinator.assert_holds(acked, absent=[refused])
    r = coordinator.ctl("kv", "rm", "k0")
    assert r.returncode == 0, r.stderr
    del acked["k0"]
    coordinator.assert_holds(acked, absent=["k0", refused])

    # Killed on the full volume: it comes up with everything, and still refuses writes.
    coordinator.kill_and_restart()
    log = coordinator.server.log()
    assert "no room for a snapshot of the restored state" in log, tail(log)
    coordinator.assert_holds(acked, absent=["k0", refused])
    assert coordinator.full() == 1
    assert not coordinator.put(refused, value_of(0))

    # Space returns: writes are accepted again (the volume is looked at every second) and
    # the snapshot the start could not write follows, replacing the older files.
    volume.empty()
    deadline = time.monotonic() + DEADLINE_S
    while not coordinator.put(refused, value_of(1)):
        assert time.monotonic() < deadline, f"writes still refused\n{tail(coordinator.server.log())}"
        time.sleep(0.2)
    acked[refused] = value_of(1)
    assert coordinator.full() == 0
    deadline = time.monotonic() + DEADLINE_S
    while len([f for f in volume.files() if f.startswith("snapshot-")]) != 1 or \
            len([f for f in volume.files() if f.startswith("log-")]) != 1:
        assert time.monotonic() < deadline, volume.files()
        time.sleep(0.2)
    assert "reserve" in volume.files()

    coordinator.kill_and_restart()
    coordinator.assert_holds(acked, absent=["k0"])
    assert coordinator.full() == 0
