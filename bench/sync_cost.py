"""What one group sync of the state log costs on a disk: a write of RECORD bytes at the end
of the log followed by fdatasync, repeated, with the log appended to (each sync must also
record the file's new length) and with its room written ahead as zeros (the state store's
way: the sync writes the data and nothing else). Prints CPU and wall time per sync.

  python bench/sync_cost.py [--dir /var/tmp] [--syncs 2000] [--record 3000]
"""

import argparse
import os
import resource
import tempfile
import time


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure(directory, syncs, record, room):
    fd, path = tempfile.mkstemp(dir=directory, prefix="sync-cost-")
    try:
        if room:
            zeros = bytes(1 << 20)
            for _ in range((syncs * record >> 20) + 1):
                os.write(fd, zeros)
            os.fdatasync(fd)
        data = b"x" * record
        wall, cpu = time.monotonic(), cpu_seconds()
        for i in range(syncs):
            os.pwrite(fd, data, i * record)
            os.fdatasync(fd)
        return ((time.monotonic() - wall) / syncs * 1e6, (cpu_seconds() - cpu) / syncs * 1e6)
    finally:
        os.close(fd)
        os.unlink(path)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default="/var/tmp", help="a directory on the disk to measure")
    p.add_argument("--syncs", type=int, default=2000)
    p.add_argument("--record", type=int, default=3000, help="bytes written before each sync")
    a = p.parse_args()
    for room in (False, True, False, True):
        wall, cpu = measure(a.dir, a.syncs, a.record, room)
        print(f"{'room written ahead' if room else 'appended':>18}: "
              f"{wall:6.0f} us a sync in all, {cpu:5.0f} us of CPU")


if __name__ == "__main__":
    main()
