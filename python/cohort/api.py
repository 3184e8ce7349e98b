"""The driver's API: init, remote functions, put, get, wait."""
import functools
import os
import threading
import weakref

import cloudpickle

from cohort import _values
from cohort._client import Client
from cohort._values import TaskError
from cohort.runtime.v1 import types_pb2

_lock = threading.Lock()
_client = None
# Function names each connection exported already. Keyed by the Client itself, held weakly:
# not by id(client), which a connection made after another was closed and freed can reuse, and
# then its functions would never be exported to its (new) scheduler.
_exported = weakref.WeakKeyDictionary()


def _set_client(client):
    global _client
    with _lock:
        _client = client


def _require_client():
    if _client is None:
        raise RuntimeError("cohort.init() first: no connection to the task runtime")
    return _client


def init(scheduler=None, objstore=None, node_ip=None, token_file=None):
    """Connects this process as a driver.

    scheduler: the coordinator's gRPC HOST:PORT (default $COHORT_SCHEDULER).
    objstore: this node's object store (default $COHORT_OBJSTORE).
    """
    scheduler = scheduler or os.environ.get("COHORT_SCHEDULER")
    objstore = objstore or os.environ.get("COHORT_OBJSTORE")
    if not scheduler or not objstore:
        raise ValueError("cohort.init needs the scheduler's and the object store's addresses "
                         "(arguments, or COHORT_SCHEDULER and COHORT_OBJSTORE)")
    token = None
    token_file = token_file or os.environ.get("COHORT_AUTH_TOKEN_FILE")
    if token_file:
        with open(token_file) as f:
            token = f.read().strip()
    node_ip = node_ip or os.environ.get("COHORT_NODE_IP") or objstore.rsplit(":", 1)[0]
    client = Client(scheduler, objstore, node_ip=node_ip, is_driver=True, token=token)
    _set_client(client)
    return client


def shutdown():
    """Gives back every dropped reference and closes the connection."""
    global _client
    with _lock:
        client, _client = _client, None
    if client is not None:
        client.flush_releases()
        client.close()


class ObjectRef:
    """A handle on an object. The object lives while some handle (or task) needs it."""

    __slots__ = ("id", "_client", "__weakref__")

    def __init__(self, object_id, owned=True):
        self.id = object_id
        self._client = _client if owned else None

    def __del__(self):
        client = self._client
        if client is not None:
            client.release_later(self.id)

    def __reduce__(self):
        _values.note_contained(self.id)
        return (_rebuild_ref, (self.id,))

    def __repr__(self):
        return f"ObjectRef({self.id})"

    def __eq__(self, other):
        return isinstance(other, ObjectRef) and other.id == self.id

    def __hash__(self):
        return hash(self.id)


def _rebuild_ref(object_id):
    _values.note_decoded(object_id)
    return ObjectRef(object_id)


# A by-value argument larger than this is put as an object: the scheduler keeps every task's
# arguments (its lineage), and a large value belongs in the object store.
INLINE_ARG_BYTES = 100 * 1024


class RemoteFunction:
    """A function run as tasks: `f.remote(*args)` returns ObjectRefs to its results."""

    def __init__(self, fn, name, num_returns, export=True):
        self._fn = fn
        self._name = name
        self._num_returns = num_returns
        self._export = export
        if fn is not None:
            functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        if self._fn is None:
            raise TypeError(f"{self._name} runs only as a task: call {self._name}.remote()")
        return self._fn(*args, **kwargs)

    def _ensure_exported(self, client):
        if not self._export:
            return
        with _lock:
            names = _exported.setdefault(client, set())
        if self._name in names:
            return
        client.export_function(cloudpickle.dumps(
            {"name": self._name, "fn": self._fn, "num_returns": self._num_returns}))
        names.add(self._name)

    def remote(self, *args):
        client = _require_client()
        self._ensure_exported(client)
        values, temporaries = [], []
        for a in args:
            if isinstance(a, ObjectRef):
                values.append(types_pb2.Value(id=a.id))
                continue
            if type(a).__name__ == "ndarray" and type(a).__module__ == "numpy":
                # Stored in its raw layout (shared memory on this node), passed by id.
                ref = put(a)
                values.append(types_pb2.Value(id=ref.id))
                temporaries.append(ref)
                continue
            obj, contained = _values.encode(a)
            if contained or obj.ByteSize() > INLINE_ARG_BYTES:
                # Put as an object of its own, holding what it contains; the task holds it
                # while it waits, this handle goes once the task is submitted.
                object_id = client.put_obj(obj)
                client.add_contained(object_id, contained)
                values.append(types_pb2.Value(id=object_id))
                temporaries.append(object_id)
            else:
                values.append(types_pb2.Value(obj=obj))
        try:
            ids = client.submit(self._name, values)
        finally:
            # The task holds its arguments now; these handles go (an ObjectRef by itself).
            handles = [t for t in temporaries if not isinstance(t, ObjectRef)]
            if handles:
                client.release(handles)
            del temporaries
        refs = [ObjectRef(i) for i in ids]
        return refs[0] if self._num_returns == 1 else refs


def remote(fn=None, *, num_returns=1, name=None):
    """Decorator: `@cohort.remote` or `@cohort.remote(num_returns=2)`."""
    if num_returns < 1:
        raise ValueError("num_returns must be at least 1")

    def wrap(f):
        return RemoteFunction(f, name or f"{f.__module__}.{f.__qualname__}", num_returns)

    return wrap(fn) if fn is not None else wrap


def function(name, num_returns=1):
    """A function some worker registered by name (the C++ workers' cohort.add, ...)."""
    return RemoteFunction(None, name, num_returns, export=False)


def put(value):
    """Stores `value` at this node's store; returns its ObjectRef. A numpy array on a node
    whose store shares memory goes there without a copy through gRPC."""
    client = _require_client()
    parts, metadata_offset, contained = _values.encode_stored(value)
    object_id = client.put_stored(parts, metadata_offset)
    client.add_contained(object_id, contained)
    return ObjectRef(object_id)


def _get_one(client, ref, timeout):
    if not isinstance(ref, ObjectRef):
        raise TypeError(f"cohort.get takes ObjectRefs, not {type(ref).__name__}")
    value, decoded = _values.decode_stored(*client.get_stored(ref.id, timeout=timeout))
    client.retain(decoded)
    return value


def get(refs, timeout=None):
    """The value of an ObjectRef, or a list of them. Raises TaskError for a failed task."""
    client = _require_client()
    if isinstance(refs, (list, tuple)):
        return [_get_one(client, r, timeout) for r in refs]
    return _get_one(client, refs, timeout)


def wait(refs, num_returns=1, timeout=None):
    """(ready, not_ready): waits until `num_returns` of `refs` are ready, or `timeout`."""
    client = _require_client()
    refs = list(refs)
    if num_returns > len(refs):
        raise ValueError(f"num_returns {num_returns} is more than the {len(refs)} refs given")
    ready_ids = set(client.wait([r.id for r in refs], num_returns, timeout))
    ready = [r for r in refs if r.id in ready_ids][:max(num_returns, 0)]
    taken = {id(r) for r in ready}
    return ready, [r for r in refs if id(r) not in taken]


def reusable(name, initializer, reinitializer=None):
    """Per-worker state: built on a worker by `initializer()` when a task first reads
    `cohort.reusables.<name>`, then rebuilt after every task that read it by
    `reinitializer(value)` (or `initializer()`)."""
    client = _require_client()
    client.export_reusable_variable(name, cloudpickle.dumps(initializer),
                                    cloudpickle.dumps(reinitializer) if reinitializer else b"")


class _Reusables:
    """`cohort.reusables.<name>` inside a task (the worker fills this in)."""

    def __init__(self):
        self._defs = {}
        self._values = {}
        self._used = set()

    def _define(self, name, initializer, reinitializer):
        self._defs[name] = (initializer, reinitializer)
        self._values.pop(name, None)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._defs:
            raise AttributeError(f"no reusable variable {name!r} was exported")
        if name not in self._values:
            self._values[name] = self._defs[name][0]()
        self._used.add(name)
        return self._values[name]

    def _after_task(self):
        for name in self._used:
            initializer, reinitializer = self._defs[name]
            value = self._values[name]
            self._values[name] = reinitializer(value) if reinitializer else initializer()
        self._used.clear()


reusables = _Reusables()

__all__ = ["init", "shutdown", "remote", "function", "put", "get", "wait", "reusable",
           "reusables", "ObjectRef", "RemoteFunction", "TaskError", "types_pb2"]
