"""A Python worker of the task runtime: python -m cohort.worker --scheduler ADDR --objstore ADDR

It serves WorkerService, runs the Python functions drivers export (one task at a time), reads
its arguments from and stores its results in its node's object store, and tells the scheduler
when each task ends. A task that raises fails with its traceback; its results read as the error.
"""
import argparse
import collections
import concurrent.futures
import hmac
import ipaddress
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import traceback

import cloudpickle
import grpc

from cohort import _values, api
from cohort._client import Client
from cohort.runtime.v1 import messages_pb2, services_pb2_grpc, types_pb2

log = logging.getLogger("cohort.worker")
_STOP = object()
# The largest message the scheduler may send a worker: a task with its inline arguments, or a
# pickled function (--max-message-bytes).
DEFAULT_MAX_MESSAGE_BYTES = 256 << 20


class _RequireToken(grpc.ServerInterceptor):
    """Refuses every call without the job's token, UNAUTHENTICATED, before its message is read.

    gRPC asks this for a call's handler once the call's metadata has arrived. A call without
    the token gets a handler that takes its request as a stream and ends the call without
    reading from it: nothing of the message is parsed, let alone unpickled, and no more of it is
    received than the HTTP/2 flow-control window."""

    def __init__(self, token):
        self._want = f"Bearer {token}".encode()
        self._none = _refusal("this worker requires the job's token and the call has none: "
                              "send gRPC metadata \"authorization: Bearer <token>\"")
        self._wrong = _refusal("the call's token is not this worker's: use the token of the "
                               "job it serves")

    def intercept_service(self, continuation, handler_call_details):
        values = [v for k, v in handler_call_details.invocation_metadata or ()
                  if k == "authorization"]
        for value in values:
            given = value.encode() if isinstance(value, str) else value
            if hmac.compare_digest(given.strip(), self._want):
                return continuation(handler_call_details)
        return self._wrong if values else self._none


def _refusal(why):
    """A handler that ends a call UNAUTHENTICATED with `why` without reading its request."""
    def refuse(_requests, context):
        context.abort(grpc.StatusCode.UNAUTHENTICATED, why)
    return grpc.stream_unary_rpc_method_handler(refuse)


def is_loopback(host):
    """Whether only this machine reaches `host` (localhost, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _Service(services_pb2_grpc.WorkerServiceServicer):
    def __init__(self, worker):
        self._worker = worker

    def ExecuteTask(self, request, context):
        self._worker.receive(request)
        return messages_pb2.ExecuteTaskReply()

    def ImportFunction(self, request, context):
        self._worker.import_function(request.function.implementation)
        return messages_pb2.ImportFunctionReply()

    def ImportReusableVariable(self, request, context):
        var = request.reusable_variable
        try:
            initializer = cloudpickle.loads(var.initializer.implementation)
            reinitializer = (cloudpickle.loads(var.reinitializer.implementation)
                             if var.reinitializer.implementation else None)
        except Exception as e:  # a variable this interpreter cannot load
            log.warning("reusable variable %s cannot be loaded here: %s", var.name, e)
            return messages_pb2.AckReply()
        api.reusables._define(var.name, initializer, reinitializer)
        return messages_pb2.AckReply()

    def Die(self, request, context):
        log.info("told to die by the scheduler")
        self._worker.tasks.put(_STOP)
        return messages_pb2.DieReply()

    def Alive(self, request, context):
        return messages_pb2.AckReply()


class Worker:
    def __init__(self, scheduler, objstore, host, token=None, insecure_no_auth=False,
                 max_message_bytes=DEFAULT_MAX_MESSAGE_BYTES):
        self.tasks = queue.Queue()
        # Operations received and not yet reported, and the last ones reported: an ExecuteTask
        # for any of them is a repeat from a coordinator restarted from its --state-dir.
        self._held = set()
        self._reported = collections.deque(maxlen=1024)
        self._lock = threading.Lock()
        self.leaving = False  # SIGTERM: finish the task at hand, say so, exit
        self.functions = {}
        if not token and not insecure_no_auth and not is_loopback(host):
            raise ValueError(
                f"--listen-host {host} reaches beyond this machine and no --auth-token-file is "
                "given: anyone who reaches the port could make this worker run code. Give the "
                "job's token, listen on loopback (127.0.0.1), or pass --insecure-no-auth to "
                "serve everyone")
        self.server = grpc.server(
            concurrent.futures.ThreadPoolExecutor(max_workers=4),
            interceptors=[_RequireToken(token)] if token else [],
            # No bandwidth-delay probing: a refused call's message is not buffered ahead of a
            # read that never comes (the coordinator's reason, coordinator_server.cc).
            options=[("grpc.max_receive_message_length", max_message_bytes),
                     ("grpc.http2.bdp_probe", 0)])
        services_pb2_grpc.add_WorkerServiceServicer_to_server(_Service(self), self.server)
        port = self.server.add_insecure_port(f"{host}:0")
        if port == 0:
            raise SystemExit(f"cannot serve WorkerService on {host}")
        self.server.start()
        self.client = Client(scheduler, objstore, node_ip=host, is_driver=False,
                             worker_address=f"{host}:{port}", token=token)
        api._set_client(self.client)
        log.info("worker %d serving on %s:%d with store %s", self.client.worker_id, host, port,
                 objstore)

    def receive(self, request):
        with self._lock:
            if request.operation:
                if request.operation in self._held or request.operation in self._reported:
                    return
                self._held.add(request.operation)
        self.tasks.put(request)

    def import_function(self, implementation):
        try:
            spec = cloudpickle.loads(implementation)
            name, fn, num_returns = spec["name"], spec["fn"], spec["num_returns"]
        except Exception as e:  # not a Python function (a C++ built-in's name), or unloadable
            log.debug("an exported function is not one this worker can run: %s", e)
            return
        self.functions[name] = (fn, num_returns)
        self.client.register_function(name, num_returns)

    def run(self):
        self.client.ready_for_new_task(None)
        while True:
            request = self.tasks.get()
            if request is _STOP:
                if self.leaving:
                    self._leave(None)
                return 0
            error = self.execute(request.task)
            api.reusables._after_task()
            leaving = self.leaving
            try:
                self.client.ready_for_new_task((error is None, error or ""), request.operation,
                                               leaving=leaving)
            except grpc.RpcError as e:
                log.error("the scheduler did not take the task's end: %s", e.details())
                return 1
            finally:
                with self._lock:
                    self._held.discard(request.operation)
                    self._reported.append(request.operation)
            if leaving:
                log.info("left the pool after finishing task %s", request.task.name)
                return 0

    def _leave(self, _):
        # Only a courtesy (the scheduler loses a silent worker anyway): one short try, so that
        # a worker whose coordinator is gone too is not held up.
        try:
            self.client.scheduler.ReadyForNewTask(
                messages_pb2.ReadyForNewTaskRequest(workerid=self.client.worker_id, leaving=True),
                timeout=2, metadata=self.client._metadata)
            log.info("left the pool")
        except grpc.RpcError as e:
            log.warning("the scheduler did not hear that this worker leaves: %s", e.details())

    def execute(self, task):
        """Runs one task; None, or why it failed."""
        entry = self.functions.get(task.name)
        if entry is None:
            return f"this worker has no function {task.name!r}"
        fn, num_returns = entry
        try:
            args = []
            for arg in task.arg:
                if arg.id:
                    # The scheduler sends a task once its arguments are at this store.
                    value, decoded = _values.decode_stored(
                        *self.client.get_stored(arg.id, local=True))
                else:
                    value, decoded = _values.decode(arg.obj)
                self.client.retain(decoded)
                args.append(value)
            result = fn(*args)
            results = [result] if num_returns == 1 else list(result)
            if len(results) != num_returns:
                return (f"{task.name} returned {len(results)} values; it is declared with "
                        f"num_returns={num_returns}")
            for object_id, value in zip(task.result, results):
                if isinstance(value, api.ObjectRef):
                    self.client.alias(object_id, value.id)
                    continue
                parts, metadata_offset, contained = _values.encode_stored(value)
                self.client.put_stored(parts, metadata_offset, object_id)
                self.client.add_contained(object_id, contained)
            return None
        except _values.TaskError as e:
            return f"{task.name}: an argument is an error: {e.message}"
        except Exception:
            return traceback.format_exc()


def _run_several(args, argv):
    """Runs args.workers worker processes (this program again, one worker each) until all
    have exited; SIGTERM and SIGINT are passed on. Exits with the first non-zero code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    children = [subprocess.Popen([sys.executable, "-m", "cohort.worker", *argv, "--workers", "1"])
                for _ in range(args.workers)]

    def forward(sig, _frame):
        for child in children:
            if child.poll() is None:
                child.send_signal(sig)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    codes = [child.wait() for child in children]
    return next((c for c in codes if c != 0), 0)


class _JsonFormatter(logging.Formatter):
    def format(self, record):
        return json.dumps({"time": self.formatTime(record), "level": record.levelname.lower(),
                           "logger": record.name, "msg": record.getMessage()})


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m cohort.worker",
        description="A Python worker of cohort's task runtime: runs the functions drivers "
                    "export with @cohort.remote, with its node's object store.")
    env = os.environ.get
    parser.add_argument("--scheduler", default=env("COHORT_SCHEDULER"),
                        help="the coordinator's gRPC HOST:PORT (default $COHORT_SCHEDULER)")
    parser.add_argument("--objstore", default=env("COHORT_OBJSTORE"),
                        help="this node's object store HOST:PORT (default $COHORT_OBJSTORE)")
    parser.add_argument("--listen-host", default=env("COHORT_NODE_IP", "127.0.0.1"),
                        help="host to serve WorkerService on, on an unused port (default "
                             "$COHORT_NODE_IP, else 127.0.0.1)")
    parser.add_argument("--workers", type=int, default=int(env("COHORT_TASK_WORKERS", "1")),
                        help="worker processes to run, each serving on its own port (default "
                             "$COHORT_TASK_WORKERS, else 1)")
    parser.add_argument("--auth-token-file", default=env("COHORT_AUTH_TOKEN_FILE"),
                        help="the job's token: sent on every call and required of every call "
                             "(default $COHORT_AUTH_TOKEN_FILE)")
    parser.add_argument("--insecure-no-auth", action="store_true",
                        help="serve beyond loopback without --auth-token-file: anyone who "
                             "reaches a worker's port can make it run code (refused otherwise)")
    parser.add_argument("--max-message-bytes", type=int, default=DEFAULT_MAX_MESSAGE_BYTES,
                        help="largest gRPC message taken from the scheduler (a task with its "
                             "inline arguments, a pickled function; default %(default)s)")
    parser.add_argument("--log-format", choices=["text", "json"], default="text")
    parser.add_argument("--log-level", default="info",
                        choices=["debug", "info", "warning", "error"])
    args = parser.parse_args(argv)
    if not args.scheduler or not args.objstore:
        parser.error("--scheduler and --objstore are needed (or $COHORT_SCHEDULER and "
                     "$COHORT_OBJSTORE)")
    if not 1 << 20 <= args.max_message_bytes < 1 << 31:
        parser.error(f"--max-message-bytes {args.max_message_bytes}: must be from 1 MiB to 2 GiB")
    if not 1 <= args.workers <= 256:
        parser.error(f"--workers {args.workers}: must be from 1 to 256")
    if args.workers > 1:
        return _run_several(args, argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if args.log_format == "json" else
                         logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=args.log_level.upper(), handlers=[handler])
    token = None
    if args.auth_token_file:
        try:
            with open(args.auth_token_file) as f:
                token = f.read().strip()
        except OSError as e:
            log.error("--auth-token-file: cannot read the token file: %s", e)
            return 2
        if not token:
            log.error("--auth-token-file: the token file %s is empty", args.auth_token_file)
            return 2
    try:
        worker = Worker(args.scheduler, args.objstore, args.listen_host, token,
                        insecure_no_auth=args.insecure_no_auth,
                        max_message_bytes=args.max_message_bytes)
    except ValueError as e:
        log.error("%s", e)
        return 2
    except grpc.RpcError as e:
        log.error("registering with the scheduler at %s: %s", args.scheduler, e.details())
        return 1
    def drain(*_):
        # Pod deletion: finish the task at hand, tell the scheduler this worker leaves (it
        # sends no new task), exit.
        worker.leaving = True
        worker.tasks.put(_STOP)

    signal.signal(signal.SIGTERM, drain)
    code = worker.run()
    worker.server.stop(1)
    worker.client.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
