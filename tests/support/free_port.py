"""A loopback port nothing listens on, for servers that cannot bind port 0.

The port comes from below the kernel's ephemeral range (net.ipv4.ip_local_port_range), so
an outgoing connection of this or another test cannot take it between this call and the
server's bind, and one process never gets the same port twice. Nor do two processes that
run at once: a port is the process's while it holds an flock on /tmp/cohort-test-ports/PORT,
kept until it exits. The C++ tests' FreePort in subprocess.h and the benchmarks
(free_port.h) follow the same rule and claim the same files; so does bench/run.py, which
imports this.
"""

import fcntl
import os
import random
import socket
import threading

_lock = threading.Lock()
_given = set()
_claims = []  # the open claim files: their locks last as long as the process
_random = random.Random(os.getpid() ^ int.from_bytes(os.urandom(4), "little"))


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _claim(port):
    """Whether this process now holds the port's claim (True, too, where none can be made)."""
    try:
        os.makedirs("/tmp/cohort-test-ports", mode=0o1777, exist_ok=True)
        f = open(f"/tmp/cohort-test-ports/{port}", "a")
    except OSError:
        return True
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        return False
    _claims.append(f)
    return True


def free_port():
    first = 12000
    last = max(first + 1000, _ephemeral_low()) - 1
    with _lock:
        for _ in range(1000):
            port = _random.randint(first, last)
            if port in _given:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            if not _claim(port):
                continue  # another process running now picked it
            _given.add(port)
            return port
    raise RuntimeError(f"no free loopback port between {first} and {last}")
