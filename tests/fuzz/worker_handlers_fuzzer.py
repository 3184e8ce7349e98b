"""atheris fuzzer of the Python task worker's gRPC surface (tools/fuzz.sh: make fuzz, make test).

Each input is one call to a real WorkerService server built the way `python -m cohort.worker`
builds it (cohort.worker's _RequireToken interceptor, its _Service handlers, a receive limit
and no BDP probing), over loopback, from a real gRPC client: the method (one of the five, or
one the server does not serve), the call's authorization metadata (none, the job's token, a
wrong one, the token with spaces, several entries) and its message (the input's bytes, or
repeated past the receive limit). What must hold, checked on every call:
  - without the job's token: UNAUTHENTICATED, and no handler ran, nothing was unpickled;
  - with it: an unknown method UNIMPLEMENTED; past the receive limit RESOURCE_EXHAUSTED and no
    handler ran; bytes that are not the method's message INTERNAL and no handler ran; the
    method's message OK, handed to the worker as parsed here.
The worker behind the handlers records what reaches it (the library boundary: a real one would
run what the scheduler sends, which is the point of holding the token), and cloudpickle.loads
in cohort.worker records its input and refuses it, so nothing the fuzzer makes is unpickled.
"""
import concurrent.futures
import logging
import queue
import sys

import atheris
import grpc

with atheris.instrument_imports():
    from cohort import worker as worker_module
    from cohort.runtime.v1 import messages_pb2, services_pb2, services_pb2_grpc

TOKEN = "the-jobs-token-0123456789"
LIMIT = 64 << 10  # the server's receive limit here (the worker's default is 256 MiB)
# The service's name on the wire, from its descriptor ("WorkerService": no package, as the
# protocol it keeps to).
SERVICE = f"/{services_pb2.DESCRIPTOR.services_by_name['WorkerService'].full_name}/"
REQUESTS = {
    "ExecuteTask": messages_pb2.ExecuteTaskRequest,
    "ImportFunction": messages_pb2.ImportFunctionRequest,
    "ImportReusableVariable": messages_pb2.ImportReusableVariableRequest,
    "Die": messages_pb2.DieRequest,
    "Alive": messages_pb2.AliveRequest,
}
METHODS = [SERVICE + m for m in REQUESTS] + [SERVICE + "Unknown", "/other.Service/Call"]


class RecordingWorker:
    """What the handlers hand work to: records it instead of running it."""

    def __init__(self):
        self.tasks = queue.Queue()
        self.seen = []

    def receive(self, request):
        self.seen.append(("ExecuteTask", request))

    def import_function(self, implementation):
        self.seen.append(("ImportFunction", implementation))


unpickled = []


def refuse_to_unpickle(data):
    unpickled.append(bytes(data))
    raise ValueError("the fuzzer unpickles nothing")


worker_module.cloudpickle.loads = refuse_to_unpickle
logging.getLogger("cohort.worker").setLevel(logging.ERROR)  # not a line per refused variable
recorder = RecordingWorker()
server = grpc.server(
    concurrent.futures.ThreadPoolExecutor(max_workers=2),
    interceptors=[worker_module._RequireToken(TOKEN)],
    options=[("grpc.max_receive_message_length", LIMIT), ("grpc.http2.bdp_probe", 0)])
services_pb2_grpc.add_WorkerServiceServicer_to_server(worker_module._Service(recorder), server)
port = server.add_insecure_port("127.0.0.1:0")
server.start()
channel = grpc.insecure_channel(f"127.0.0.1:{port}",
                                options=[("grpc.max_send_message_length", -1)])
callers = {m: channel.unary_unary(m) for m in METHODS}


def printable(fdp, most):
    # Metadata values gRPC sends: printable ASCII (the client refuses others before sending).
    return "".join(chr(32 + b % 95) for b in fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, most)))


def metadata_of(fdp):
    """The call's metadata and whether it carries the job's token."""
    mode = fdp.ConsumeIntInRange(0, 5)
    if mode == 0:
        return (), False
    if mode == 1:
        return (("authorization", f"Bearer {TOKEN}"),), True
    if mode == 2:
        value = printable(fdp, 60)
    elif mode == 3:  # the token, and maybe more
        value = f"Bearer {TOKEN}{printable(fdp, 4)}"
    if mode in (2, 3):
        # The worker takes the token with spaces around it (as gRPC's own parsers do).
        return (("authorization", value),), value.strip() == f"Bearer {TOKEN}"
    if mode == 4:  # a wrong entry, then the right one
        return (("authorization", printable(fdp, 30)), ("authorization", f"Bearer {TOKEN}")), True
    return (("x-other", printable(fdp, 30)),), False


def TestOneInput(data):
    fdp = atheris.FuzzedDataProvider(data)
    method = METHODS[fdp.ConsumeIntInRange(0, len(METHODS) - 1)]
    metadata, authorized = metadata_of(fdp)
    # Past the limit now and then: gRPC takes a few hundred ms to refuse one with the token.
    big = fdp.ConsumeIntInRange(0, 63) == 63  # (an input used up reads 0)
    payload = fdp.ConsumeBytes(fdp.remaining_bytes())
    if big:
        payload = (payload or b"\x00") * (LIMIT // max(len(payload), 1) + 2)
    seen, loads = len(recorder.seen), len(unpickled)
    try:
        callers[method](payload, metadata=metadata, timeout=10)
        code = grpc.StatusCode.OK
    except grpc.RpcError as e:
        code = e.code()
    name = method[len(SERVICE):] if method.startswith(SERVICE) else None
    try:
        parsed = REQUESTS[name].FromString(payload) if name in REQUESTS else None
    except Exception:  # not the method's message
        parsed = None
        parses = False
    else:
        parses = name in REQUESTS

    def fail(why):
        raise AssertionError(f"{method} with metadata {metadata!r} and {len(payload)} bytes: {why}")

    # In the order the server decides: the token with the call's metadata, then the method,
    # then the message's size as it arrives, then its parse.
    if not authorized:
        want = grpc.StatusCode.UNAUTHENTICATED
    elif name not in REQUESTS:
        want = grpc.StatusCode.UNIMPLEMENTED
    elif len(payload) > LIMIT:
        want = grpc.StatusCode.RESOURCE_EXHAUSTED
    elif not parses:
        want = grpc.StatusCode.INTERNAL
    else:
        want = grpc.StatusCode.OK
    if code != want:
        fail(f"answered {code.name}, not {want.name}")
    if want != grpc.StatusCode.OK:
        if len(recorder.seen) != seen or len(unpickled) != loads:
            fail("a handler ran, or something was unpickled")
        return
    # Accepted: what reached the worker is what the message holds.
    if name == "ExecuteTask" and recorder.seen[seen:] != [("ExecuteTask", parsed)]:
        fail("the task did not reach the worker as sent")
    if name == "ImportFunction" and \
            recorder.seen[seen:] != [("ImportFunction", parsed.function.implementation)]:
        fail("the function did not reach the worker as sent")
    if name == "ImportReusableVariable" and \
            unpickled[loads:] != [parsed.reusable_variable.initializer.implementation]:
        fail("the variable's initializer was not the one thing loaded")
    if name == "Die":
        recorder.tasks.get_nowait()  # the stop it queued (raises if none was)
    del recorder.seen[:]
    del unpickled[:]


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
