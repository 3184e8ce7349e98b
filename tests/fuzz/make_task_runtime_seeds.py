#!/usr/bin/env python3
"""Writes the seeds of task_runtime_fuzzer (tests/fuzz/corpus/task_runtime_fuzzer/).

Each seed is a short session in the fuzzer's input format: a 1-byte selector (Scheduler's
methods, then ObjStore's, then LocalStore's, in .proto order; then three transport reports),
a 2-byte little-endian length, and the request encoded by `protoc --encode`. Run it again
after one of the services gains or loses a method:

    python3 tests/fuzz/make_task_runtime_seeds.py
"""

import pathlib
import re
import struct
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROTO = ROOT / "proto"
SERVICES = [
    ("cohort/runtime/v1/services.proto", "Scheduler"),
    ("cohort/runtime/v1/services.proto", "ObjStore"),
    ("cohort/runtime/v1/local_store.proto", "LocalStore"),
]


def methods():
    table, index = {}, 0
    for path, service in SERVICES:
        text = (PROTO / path).read_text()
        body = text[text.index(f"service {service} "):]
        body = body[:body.index("\n}")]
        for name, request in re.findall(r"^\s*rpc (\w+)\((?:stream )?([\w.]+)\)", body, re.M):
            full = request if "." in request else f"cohort.runtime.v1.{request}"
            table[(service, name)] = (index, full, path)
            index += 1
    return table, index


def encode(path, message, text):
    return subprocess.run(["protoc", f"-I{PROTO}", f"--encode={message}", path],
                          input=text.encode(), capture_output=True, check=True).stdout


S, O, L = "Scheduler", "ObjStore", "LocalStore"
SEEDS = {
    "session": [
        (S, "RegisterObjStore", 'objstore_address: "127.0.0.1:1"'),
        (S, "RegisterWorker", 'node_ip_address: "127.0.0.1" is_driver: true'),
        (S, "RegisterWorker", 'node_ip_address: "127.0.0.1" worker_address: "127.0.0.1:9"'),
        (S, "ReadyForNewTask", "workerid: 2"),
        (S, "RegisterFunction", 'workerid: 2 fnname: "f" num_return_vals: 1'),
        (S, "ExportFunction", 'function { implementation: "f" }'),
        (S, "SubmitTask", 'workerid: 1 task { name: "f" arg { obj { int_data { data: 1 } } } }'),
        (S, "PutObj", "workerid: 1"),
        (L, "Put", 'objectid: 2 total_size: 3 data: "abc"'),
        (S, "ObjReady", "objectid: 1 objstoreid: 1 size: 3"),
        (S, "RequestObj", "workerid: 1 objectid: 2"),
        (S, "SubmitTask", 'workerid: 1 task { name: "f" arg { id: 2 } }'),
        (S, "ReadyForNewTask", "workerid: 2 previous_task_info { task_succeeded: true }"),
        (S, "AliasObjectIDs", "alias_objectid: 3 target_objectid: 2"),
        (S, "AddContainedObjectIDs", "objectid: 2 contained_objectid: 1"),
        (S, "IncrementRefCount", "objectid: 2 objectid: 2"),
        (S, "DecrementRefCount", "objectid: 2"),
        (L, "Get", "objectid: 2 timeout_ms: 1"),
        (L, "Wait", "objectid: 2 objectid: 3 num_ready: 1 timeout_ms: 1"),
        (O, "StreamObjTo", "objectid: 2"),
        (O, "ObjStoreInfo", "objectid: 2"),
        (O, "NotifyAlias", "alias_objectid: 3 canonical_objectid: 2"),
        (O, "PutError", 'objectid: 4 error { message: "boom" }'),
        (S, "SchedulerInfo", ""),
        (S, "TaskInfo", ""),
        (S, "KillWorkers", ""),
        (O, "DeallocateObject", "canonical_objectid: 2"),
    ],
    "failures": [
        (S, "RegisterWorker", 'node_ip_address: "127.0.0.1" worker_address: "127.0.0.1:9"'),
        (S, "ReadyForNewTask", "workerid: 1"),
        (S, "RegisterFunction", 'workerid: 1 fnname: "g" num_return_vals: 2'),
        (S, "RegisterWorker", 'node_ip_address: "127.0.0.1" is_driver: true'),
        (S, "SubmitTask", 'workerid: 2 task { name: "g" }'),
        (S, "ReadyForNewTask", 'workerid: 1 previous_task_info { error_message: "raised" }'),
        (S, "RequestObj", "workerid: 2 objectid: 1"),
        (S, "IncrementCount", "objectid: 1"),
        (O, "StartDelivery", 'objstore_address: "127.0.0.1:1" objectid: 1'),
    ],
}


def main():
    table, count = methods()
    out = ROOT / "tests" / "fuzz" / "corpus" / "task_runtime_fuzzer"
    out.mkdir(parents=True, exist_ok=True)
    for name, calls in SEEDS.items():
        data = b""
        for service, method, text in calls:
            index, message, path = table[(service, method)]
            body = encode(path, message, text)
            data += struct.pack("<BH", index, len(body)) + body
        # The transport's reports: a worker lost, a store lost, a delivery failed.
        for extra, args in ((0, b"\x01"), (1, b"\x02"), (2, b"\x01\x02")):
            data += struct.pack("<BH", count + extra, len(args)) + args
        (out / name).write_bytes(data)
        print(f"wrote {out / name} ({len(calls)} calls)")


if __name__ == "__main__":
    main()
