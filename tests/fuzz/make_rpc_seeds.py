#!/usr/bin/env python3
"""Writes the seeds of rpc_handlers_fuzzer (tests/fuzz/corpus/rpc_handlers_fuzzer/).

Each seed is a short session of valid calls in the fuzzer's input format: a 1-byte index
into every method of the four services (in the order of their .proto files), a 2-byte
little-endian length, and the request encoded by `protoc --encode` from the text below.
The fuzzer mutates from there into the handlers' deeper paths. Run it again after a
service gains or loses a method:

    python3 tests/fuzz/make_rpc_seeds.py
"""

import pathlib
import re
import struct
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROTO = ROOT / "proto"
# The services in the fuzzer's order (kServices in rpc_handlers_fuzzer.cc).
SERVICES = [
    ("tensorflow/coordination_service.proto", "tensorflow.CoordinationService"),
    ("xla/coordination_service.proto", "xla.coordination.CoordinationService"),
    ("xla/distributed_runtime.proto", "xla.DistributedRuntimeService"),
    ("cohort/v1/coordinator.proto", "cohort.v1.Coordinator"),
]


def methods():
    """(service, method) -> (index, request type, proto file), in descriptor order."""
    table, index = {}, 0
    for path, service in SERVICES:
        package = service.rsplit(".", 1)[0]
        text = (PROTO / path).read_text()
        body = text[text.index("service " + service.rsplit(".", 1)[1]):]
        for name, request in re.findall(r"^\s*rpc (\w+)\((?:stream )?([\w.]+)\)", body, re.M):
            full = request if "." in request else f"{package}.{request}"
            table[(service, name)] = (index, full, path)
            index += 1
    return table


def encode(path, message, text):
    return subprocess.run(["protoc", f"-I{PROTO}", f"--encode={message}", path],
                          input=text.encode(), capture_output=True, check=True).stdout


TF = "tensorflow.CoordinationService"
XLA = "xla.coordination.CoordinationService"
DR = "xla.DistributedRuntimeService"
COHORT = "cohort.v1.Coordinator"
W0 = 'source_task { job_name: "worker" task_id: 0 }'
W1 = 'source_task { job_name: "worker" task_id: 1 }'

SEEDS = {
    "tensorflow-session": [
        (TF, "RegisterTask", f"incarnation: 7 {W0}"),
        (TF, "Heartbeat", f"incarnation: 7 {W0}"),
        (TF, "InsertKeyValue", 'kv { key: "a/b" value: "1" }'),
        (TF, "GetKeyValue", 'key: "a/b"'),
        (TF, "TryGetKeyValue", 'key: "a/b"'),
        (TF, "GetKeyValueDir", 'directory_key: "a"'),
        (TF, "IncrementKeyValue", 'key: "n" increment: 2'),
        (TF, "DeleteKeyValue", 'key: "a"'),
        (TF, "GetTaskState", W0.replace("source_task", "source_task", 1)),
        (TF, "Barrier", f'barrier_id: "b" barrier_timeout_in_ms: 5 tasks {{ job_name: "worker" task_id: 0 }} {W0}'),
        (TF, "CancelBarrier", f'barrier_id: "c" {W0}'),
        (TF, "GetAliveTasks", f'requesting_task {{ job_name: "worker" task_id: 0 }} tasks {{ job_name: "worker" task_id: 0 }}'),
        (TF, "WaitForAllTasks", f"{W0}"),
        (TF, "PollForError", f"{W0}"),
    ],
    "tensorflow-errors": [
        (TF, "RegisterTask", f"incarnation: 9 {W1}"),
        (TF, "ReportErrorToService", 'error_code: 13 error_message: "oom" error_origin { job_name: "worker" task_id: 1 }'),
        (TF, "ReportErrorToTask", 'error_code: 13 error_message: "lost" error_payload { source_task { job_name: "worker" task_id: 2 } }'),
        (TF, "ResetTask", f"{W1}"),
        (TF, "WatchJobState", 'job_name: "worker" version_number: -1'),
        (TF, "ShutdownTask", f"{W1}"),
    ],
    "xla-session": [
        (XLA, "RegisterTask", "incarnation: 5 source_task_id: 0"),
        (XLA, "Heartbeat", "incarnation: 5 source_task_id: 0"),
        (XLA, "InsertKeyValue", 'kv { key: "k" value: "v" }'),
        (XLA, "GetKeyValue", 'key: "k"'),
        (XLA, "Barrier", 'barrier_id: "x" barrier_timeout_in_ms: 5 task_ids: 0 source_task_id: 0'),
        (XLA, "WatchTasks", ""),
        (XLA, "ReportErrorToService", 'error_code: 2 error_message: "bad" source_task_id: 0'),
    ],
    "distributed-runtime-session": [
        (DR, "Connect", "protocol_version: 1 timeout_milliseconds: 5 node_id: 0 client_id: 3"),
        (DR, "KeyValueSet", 'key: "k" value: "v"'),
        (DR, "KeyValueGet", 'key: "k" timeout_milliseconds: 5'),
        (DR, "WaitAtBarrier", 'barrier_id: "w" node_id: 0 timeout_milliseconds: 5'),
        (DR, "Heartbeat", "node_id: 0"),
        (DR, "Shutdown", "node_id: 0"),
    ],
    "cohort-session": [
        (TF, "RegisterTask", f"incarnation: 7 {W0}"),
        (COHORT, "WatchKeys", 'key: "a" start_revision: 0'),
        (COHORT, "GetClusterSnapshot", ""),
        (COHORT, "Park", 'id: 1 get_key_value { key: "a/b" timeout_ms: 5 }'),
        (COHORT, "Park", f'id: 2 barrier {{ barrier_id: "p" barrier_timeout_in_ms: 5 {W0} }}'),
        (COHORT, "Park", f'id: 3 poll_for_error {{ {W0} }}'),
    ],
}


def main():
    table = methods()
    out = ROOT / "tests" / "fuzz" / "corpus" / "rpc_handlers_fuzzer"
    out.mkdir(parents=True, exist_ok=True)
    for name, calls in SEEDS.items():
        data = b""
        for service, method, text in calls:
            index, message, path = table[(service, method)]
            body = encode(path, message, text)
            data += struct.pack("<BH", index, len(body)) + body
        (out / name).write_bytes(data)
        print(f"{out / name}: {len(calls)} calls, {len(data)} bytes")


if __name__ == "__main__":
    main()
