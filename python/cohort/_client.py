"""One connection to the task runtime: the scheduler and this node's object store."""
import collections
import itertools
import mmap
import os
import queue
import threading
import time

import grpc

from cohort.runtime.v1 import local_store_pb2, local_store_pb2_grpc, messages_pb2
from cohort.runtime.v1 import services_pb2_grpc, types_pb2

CHUNK = 1 << 20
# Small objects this process put or got are kept here (objects never change and ids are never
# reused), so reading one again makes no call: Ray keeps small objects in its driver as well.
# Objects from this size on go through shared memory when the store is on this machine.
SHARED_BYTES = 1 << 20
CACHED_BYTES = 64 * 1024      # objects larger than this are not kept
CACHE_BYTES = 32 * 1024 * 1024  # all kept objects together
_OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
# How long a call to the scheduler keeps trying while the coordinator cannot be reached (it
# restarts from its --state-dir and carries on): the call waits for it and is sent again.
RECONNECT_SECONDS = 120.0
_AGAIN = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class Client:
    def __init__(self, scheduler, objstore, node_ip="127.0.0.1", is_driver=True,
                 worker_address="", token=None):
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._scheduler_channel = grpc.insecure_channel(scheduler, options=_OPTIONS)
        self._store_channel = grpc.insecure_channel(objstore, options=_OPTIONS)
        self.scheduler = services_pb2_grpc.SchedulerStub(self._scheduler_channel)
        self.local = local_store_pb2_grpc.LocalStoreStub(self._store_channel)
        reply = self._call(self.scheduler.RegisterWorker, messages_pb2.RegisterWorkerRequest(
            node_ip_address=node_ip, objstore_address=objstore, is_driver=is_driver,
            worker_address=worker_address), timeout=30, wait_for_ready=True)
        self.worker_id = reply.workerid
        self._calls = itertools.count(1)
        self.store_id = reply.objstoreid
        self.address = reply.worker_address
        self._shm_dir = self._shared_memory()
        self._names = itertools.count()
        self._cache = collections.OrderedDict()  # id -> (Obj, size)
        self._cache_size = 0
        self._cache_lock = threading.Lock()
        self._releases = queue.Queue()
        self._closed = False
        self._releaser = threading.Thread(target=self._release_loop, daemon=True,
                                          name="cohort-release")
        self._releaser.start()

    def _shared_memory(self):
        """The store's shared-memory directory when it is on this machine and usable."""
        try:
            reply = self._call(self.local.Describe, local_store_pb2.DescribeRequest())
            with open("/proc/sys/kernel/random/boot_id") as f:
                boot_id = f.read().strip()
        except (grpc.RpcError, OSError):
            return None
        if reply.shm_dir and reply.boot_id == boot_id and os.access(reply.shm_dir, os.W_OK):
            return reply.shm_dir
        return None

    def _remember(self, object_id, obj, size):
        if size > CACHED_BYTES:
            return
        with self._cache_lock:
            if object_id in self._cache:
                return
            self._cache[object_id] = (obj, size)
            self._cache_size += size
            while self._cache_size > CACHE_BYTES:
                _, (_, dropped) = self._cache.popitem(last=False)
                self._cache_size -= dropped

    def _cached(self, object_id):
        with self._cache_lock:
            entry = self._cache.get(object_id)
            if entry is None:
                return None
            self._cache.move_to_end(object_id)
            return entry[0]

    def _call(self, method, request, timeout=30, **kwargs):
        return method(request, timeout=timeout, metadata=self._metadata, **kwargs)

    def _scheduler_call(self, method, request, numbered=False):
        """A call to the scheduler, sent again while the coordinator cannot be reached.

        A numbered call (cohort-call metadata) takes effect once however often it is sent:
        for the calls whose repeat would count twice (SubmitTask, PutObj, counts)."""
        metadata = self._metadata
        if numbered:
            metadata = metadata + (("cohort-call", f"{self.worker_id}/{next(self._calls)}"),)
        give_up = time.monotonic() + RECONNECT_SECONDS
        pause = 0.1
        while True:
            try:
                return method(request, timeout=30, metadata=metadata, wait_for_ready=True)
            except grpc.RpcError as e:
                if e.code() not in _AGAIN or time.monotonic() + pause > give_up:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    def close(self):
        if self._closed:
            return
        self._closed = True
        self._releases.put(None)
        self._releaser.join(timeout=5)
        self._scheduler_channel.close()
        self._store_channel.close()

    # Counts. Dropped references are given back in batches from a thread of their own:
    # __del__ must not make calls.
    def release_later(self, object_id):
        if not self._closed:
            self._releases.put(object_id)

    def _release_loop(self):
        while True:
            first = self._releases.get()
            batch = [] if first is None else [first]
            while True:
                try:
                    more = self._releases.get(timeout=0.01)
                except queue.Empty:
                    break
                if more is None:
                    first = None
                else:
                    batch.append(more)
            if batch:
                try:
                    self.release(batch)
                except grpc.RpcError:
                    pass  # the scheduler is gone; nothing to give back to
            if first is None:
                return

    def flush_releases(self):
        deadline = time.monotonic() + 10
        while not self._releases.empty() and time.monotonic() < deadline:
            time.sleep(0.01)

    def release(self, ids):
        self._scheduler_call(self.scheduler.DecrementRefCount,
                             messages_pb2.DecrementRefCountRequest(objectid=list(ids)),
                             numbered=True)

    def retain(self, ids):
        if ids:
            self._scheduler_call(self.scheduler.IncrementRefCount,
                                 messages_pb2.IncrementRefCountRequest(objectid=list(ids)),
                                 numbered=True)

    # Tasks and functions.
    def submit(self, name, args, wait=30.0):
        task = messages_pb2.SubmitTaskRequest(workerid=self.worker_id)
        task.task.name = name
        for arg in args:
            task.task.arg.append(arg)
        give_up = time.monotonic() + wait
        pause = 0.005
        while True:
            reply = self._scheduler_call(self.scheduler.SubmitTask, task, numbered=True)
            if reply.function_registered:
                return list(reply.result)
            if time.monotonic() + pause > give_up:
                raise LookupError(f"no worker registered function {name!r} within {wait}s")
            time.sleep(pause)
            pause = min(pause * 2, 0.2)

    def export_function(self, implementation):
        request = messages_pb2.ExportFunctionRequest()
        request.function.implementation = implementation
        self._scheduler_call(self.scheduler.ExportFunction, request)

    def export_reusable_variable(self, name, initializer, reinitializer):
        request = messages_pb2.ExportReusableVariableRequest()
        request.reusable_variable.name = name
        request.reusable_variable.initializer.implementation = initializer
        if reinitializer:
            request.reusable_variable.reinitializer.implementation = reinitializer
        self._scheduler_call(self.scheduler.ExportReusableVariable, request)

    def register_function(self, name, num_returns):
        self._scheduler_call(self.scheduler.RegisterFunction, messages_pb2.RegisterFunctionRequest(
            workerid=self.worker_id, fnname=name, num_return_vals=num_returns))

    def ready_for_new_task(self, previous=None, operation=0, leaving=False):
        """previous: (succeeded, error) of the last task, whose ExecuteTask named `operation`;
        leaving: this worker goes away after the report (it gets no new task)."""
        request = messages_pb2.ReadyForNewTaskRequest(workerid=self.worker_id, leaving=leaving)
        if previous is not None:
            request.previous_task_info.task_succeeded = previous[0]
            request.previous_task_info.error_message = previous[1]
            request.previous_task_info.operation = operation
        self._scheduler_call(self.scheduler.ReadyForNewTask, request)

    # Objects.
    def new_object(self):
        return self._scheduler_call(self.scheduler.PutObj,
                                    messages_pb2.PutObjRequest(workerid=self.worker_id),
                                    numbered=True).objectid

    def put_stored(self, parts, metadata_offset=0, object_id=None):
        """Stores the bytes `parts` (buffers, in order) as `object_id`, or as a new object."""
        if object_id is None:
            object_id = self.new_object()
        total = sum(memoryview(p).nbytes for p in parts)
        if self._shm_dir is not None and total >= SHARED_BYTES:
            self._put_shared(object_id, parts, total, metadata_offset)
            return object_id
        data = b"".join(bytes(p) if not isinstance(p, bytes) else p for p in parts)
        if len(data) <= CHUNK:
            self._call(self.local.PutInline, local_store_pb2.PutChunk(
                objectid=object_id, total_size=len(data), metadata_offset=metadata_offset,
                data=data), timeout=600)
            self._after_put(object_id, data, metadata_offset)
            return object_id

        def chunks():
            view = memoryview(data)
            offset = 0
            while True:
                piece = view[offset:offset + CHUNK]
                chunk = local_store_pb2.PutChunk(data=bytes(piece))
                if offset == 0:
                    chunk.objectid = object_id
                    chunk.total_size = len(data)
                    chunk.metadata_offset = metadata_offset
                yield chunk
                offset += len(piece)
                if offset >= len(data):
                    return

        self.local.Put(chunks(), timeout=600, metadata=self._metadata)
        self._after_put(object_id, data, metadata_offset)
        return object_id

    def _after_put(self, object_id, data, metadata_offset):
        if metadata_offset == 0 and len(data) <= CACHED_BYTES:
            obj = types_pb2.Obj()
            obj.ParseFromString(data)
            self._remember(object_id, obj, len(data))

    def _put_shared(self, object_id, parts, total, metadata_offset):
        name = f"put-{os.getpid()}-{next(self._names)}"
        path = os.path.join(self._shm_dir, name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            # write(), not a mapping: the kernel fills tmpfs pages about twice as fast as page
            # faults do.
            for p in parts:
                view = memoryview(p).cast("B")
                while view.nbytes:
                    view = view[os.write(fd, view[:64 << 20]):]
        finally:
            os.close(fd)
        try:
            self._call(self.local.PutShared, local_store_pb2.PutSharedRequest(
                objectid=object_id, name=name, size=total, metadata_offset=metadata_offset),
                timeout=600)
        except grpc.RpcError:
            try:
                os.unlink(path)  # not taken over
            except OSError:
                pass
            raise

    def put_obj(self, obj, object_id=None):
        """Stores `obj` (an Obj) as `object_id`, or as a new object; returns its id."""
        return self.put_stored([obj.SerializeToString()], 0, object_id)

    def request(self, object_id):
        self._scheduler_call(
            self.scheduler.RequestObj,
            messages_pb2.RequestObjRequest(workerid=self.worker_id, objectid=object_id))

    def get_stored(self, object_id, timeout=None, local=False):
        """(bytes-like, metadata_offset, Obj or None): the object, brought to this node's store
        first (`local`: it is there already, as a task's arguments are). A large object in
        shared memory is mapped, not copied."""
        cached = self._cached(object_id)
        if cached is not None:
            return None, 0, cached
        if not local:
            self.request(object_id)
        if self._shm_dir is not None:
            try:
                shared = self._call(self.local.GetShared,
                                    local_store_pb2.GetRequest(objectid=object_id),
                                    timeout=timeout)
                with open(os.path.join(self._shm_dir, shared.name), "rb") as f:
                    view = (memoryview(mmap.mmap(f.fileno(), shared.size, prot=mmap.PROT_READ))
                            if shared.size else memoryview(b""))
                return self._finish(object_id, view, shared.metadata_offset)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.FAILED_PRECONDITION:
                    raise
            except FileNotFoundError:
                pass  # deallocated meanwhile; the stream says what is left
        parts, metadata_offset = [], 0
        for chunk in self.local.Get(local_store_pb2.GetRequest(objectid=object_id),
                                    timeout=timeout, metadata=self._metadata):
            parts.append(chunk.data)
            metadata_offset = chunk.metadata_offset
        return self._finish(object_id, memoryview(b"".join(parts)), metadata_offset)

    def _finish(self, object_id, view, metadata_offset):
        if metadata_offset:
            return view, metadata_offset, None
        obj = types_pb2.Obj()
        obj.ParseFromString(bytes(view))
        self._remember(object_id, obj, view.nbytes)
        return None, 0, obj

    def get_obj(self, object_id, timeout=None):
        """The object as an Obj (for objects stored by the protocol's own path)."""
        view, metadata_offset, obj = self.get_stored(object_id, timeout)
        if obj is None:
            raise ValueError(f"object {object_id} is not a serialized Obj (metadata offset "
                             f"{metadata_offset})")
        return obj

    def wait(self, ids, num_ready, timeout=None):
        for object_id in ids:
            self.request(object_id)
        request = local_store_pb2.WaitRequest(objectid=list(ids), num_ready=num_ready,
                                              timeout_ms=int(timeout * 1000) if timeout else 0)
        return list(self.local.Wait(request, timeout=None if timeout is None else timeout + 30,
                                    metadata=self._metadata).ready)

    def alias(self, alias, target):
        self._scheduler_call(self.scheduler.AliasObjectIDs, messages_pb2.AliasObjectIDsRequest(
            alias_objectid=alias, target_objectid=target))

    def add_contained(self, object_id, contained):
        if contained:
            self._scheduler_call(self.scheduler.AddContainedObjectIDs,
                                 messages_pb2.AddContainedObjectIDsRequest(
                                     objectid=object_id, contained_objectid=list(contained)),
                                 numbered=True)

    def task_info(self):
        return self._scheduler_call(self.scheduler.TaskInfo, messages_pb2.TaskInfoRequest())

    def scheduler_info(self):
        return self._scheduler_call(self.scheduler.SchedulerInfo,
                                    messages_pb2.SchedulerInfoRequest())

    def kill_workers(self):
        return self._scheduler_call(self.scheduler.KillWorkers,
                                    messages_pb2.KillWorkersRequest()).success
