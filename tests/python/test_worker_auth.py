"""The task runtime's servers and the job's token, through the real programs: a caller without
the token is refused before anything of its call is read or unpickled, and a server that would
listen beyond loopback without a token does not start."""
import os
import pickle
import subprocess
import sys

import grpc
import pytest

import cohort
import tasks_lib
from cohort.runtime.v1 import messages_pb2, services_pb2_grpc, types_pb2
from conftest import BIN


class _CreatesAFile:
    """Unpickling this opens `path` for writing, which creates it: a stand-in for any code."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _worker(cluster, extra=()):
    store = cluster.add_store("127.0.0.2")
    cluster.add_python_worker(store, 0, extra)
    cluster.wait_for_workers(1)
    return services_pb2_grpc.WorkerServiceStub(
        grpc.insecure_channel(cluster.worker_address("py-worker-0")))


def test_an_anonymous_import_function_is_refused_and_its_pickle_never_runs(token_cluster,
                                                                             tmp_path):
    stub = _worker(token_cluster)
    marker = tmp_path / "created-by-the-pickle"
    request = messages_pb2.ImportFunctionRequest(
        function=types_pb2.Function(implementation=pickle.dumps(_CreatesAFile(marker))))
    variable = messages_pb2.ImportReusableVariableRequest(
        reusable_variable=types_pb2.ReusableVar(name="v", initializer=request.function))
    for metadata, says in [((), "has none"),
                           ((("authorization", "Bearer someone-elses-token"),), "not this")]:
        for call, message in [(stub.ImportFunction, request),
                              (stub.ImportReusableVariable, variable),
                              (stub.ExecuteTask, messages_pb2.ExecuteTaskRequest())]:
            with pytest.raises(grpc.RpcError) as refused:
                call(message, metadata=metadata, timeout=10)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED, refused.value
            assert says in refused.value.details(), refused.value.details()
    assert not marker.exists(), "an anonymous caller's pickle ran in the worker"
    # The same call with the token reaches the worker, which unpickles it: the file appears.
    # So the refusals above are what kept it from running.
    stub.ImportFunction(request, metadata=token_cluster.metadata(), timeout=10)
    assert marker.exists()


def test_an_anonymous_call_larger_than_the_limit_is_refused_for_its_token(token_cluster):
    # gRPC checks a message's size as it reads it: refused for the token and not for its size,
    # the message was not read. With the token, the same call is refused for its size.
    stub = _worker(token_cluster, ["--max-message-bytes", str(1 << 20)])
    big = messages_pb2.ImportFunctionRequest(
        function=types_pb2.Function(implementation=b"x" * (8 << 20)))
    with pytest.raises(grpc.RpcError) as anonymous:
        stub.ImportFunction(big, timeout=30)
    assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED, anonymous.value
    with pytest.raises(grpc.RpcError) as too_big:
        stub.ImportFunction(big, metadata=token_cluster.metadata(), timeout=30)
    assert too_big.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, too_big.value


def test_the_job_runs_with_the_token_everywhere(token_cluster):
    store = token_cluster.add_store("127.0.0.2")
    token_cluster.add_python_worker(store, 0)
    token_cluster.add_cpp_workers(store, 1)
    token_cluster.wait_for_workers(2)
    cohort.init(token_cluster.scheduler, store, token_file=str(token_cluster.tmp / "token"))
    # Python tasks, then a C++ one on their results: every server on the way requires the token.
    squares = [tasks_lib.square.remote(i) for i in range(8)]
    total = cohort.function("cohort.sum").remote(*squares)
    assert cohort.get(total) == sum(i * i for i in range(8))


@pytest.mark.parametrize("program", ["python-worker", "cohort-worker", "cohort-objstore"])
def test_a_server_beyond_loopback_without_a_token_does_not_start(program):
    argv = {
        "python-worker": [sys.executable, "-m", "cohort.worker", "--listen-host", "0.0.0.0"],
        "cohort-worker": [BIN / "cohort-worker", "--listen-host", "0.0.0.0"],
        "cohort-objstore": [BIN / "cohort-objstore", "--listen", "0.0.0.0:0", "--shm-dir", ""],
    }[program]
    # Nothing listens at 127.0.0.1:1: a program that got past the check would wait for it.
    addresses = (["--scheduler", "127.0.0.1:1"] if program == "cohort-objstore" else
                 ["--scheduler", "127.0.0.1:1", "--objstore", "127.0.0.1:1"])
    env = {k: v for k, v in os.environ.items() if k != "COHORT_AUTH_TOKEN_FILE"}
    done = subprocess.run([str(a) for a in argv + addresses], capture_output=True, text=True,
                          timeout=60, env=env)
    said = done.stdout + done.stderr
    assert done.returncode != 0, said
    assert "reaches beyond this machine" in said and "--insecure-no-auth" in said, said
