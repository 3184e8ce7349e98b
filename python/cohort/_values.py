"""Python values <-> the task runtime's Obj messages.

Plain values travel as the protocol's own types (so C++ workers can read them): int (64-bit),
float, str, bool, None, and lists, tuples and dicts of them. Object references travel as
ObjID. Anything else is pickled with cloudpickle into PyObj; references inside it are found
while pickling (ObjectRef.__reduce__). An Obj holding a TaskError raises it when decoded.
"""
import json
import threading

import cloudpickle

from cohort.runtime.v1 import types_pb2

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_context = threading.local()


class TaskError(Exception):
    """A task failed (it raised, its worker was lost too often, or its value was lost)."""

    def __init__(self, message, function_name="", operation=0):
        super().__init__(message)
        self.message = message
        self.function_name = function_name
        self.operation = operation


def _contained():
    return getattr(_context, "contained", None)


def note_contained(object_id):
    """Called while encoding: `object_id` is inside the value being encoded."""
    found = _contained()
    if found is not None:
        found.append(object_id)


def note_decoded(object_id):
    """Called while decoding: a new reference to `object_id` was made."""
    found = getattr(_context, "decoded", None)
    if found is not None:
        found.append(object_id)


def encode(value):
    """(Obj, [ids contained in it])."""
    previous = _contained()
    _context.contained = []
    try:
        obj = types_pb2.Obj()
        _encode_into(value, obj)
        return obj, _context.contained
    finally:
        _context.contained = previous


def _encode_into(value, obj):
    from cohort.api import ObjectRef  # circular at import time only

    if value is None:
        obj.empty_data.SetInParent()
    elif isinstance(value, bool):
        obj.bool_data.data = value
    elif isinstance(value, int) and INT64_MIN <= value <= INT64_MAX:
        obj.int_data.data = value
    elif isinstance(value, float):
        obj.double_data.data = value
    elif isinstance(value, str):
        obj.string_data.data = value
    elif isinstance(value, ObjectRef):
        obj.objectid_data.data = value.id
        note_contained(value.id)
    elif type(value) is list:
        obj.list_data.SetInParent()
        for item in value:
            _encode_into(item, obj.list_data.elem.add())
    elif type(value) is tuple:
        obj.tuple_data.SetInParent()
        for item in value:
            _encode_into(item, obj.tuple_data.elem.add())
    elif type(value) is dict:
        obj.dict_data.SetInParent()
        for k, v in value.items():
            entry = obj.dict_data.elem.add()
            _encode_into(k, entry.key)
            _encode_into(v, entry.value)
    else:
        obj.pyobj_data.data = cloudpickle.dumps(value, protocol=5)


NDARRAY_MAGIC = b"COHORT-NDARRAY\n"


def encode_stored(value):
    """(buffers, metadata_offset, contained ids): how `value` is stored as an object. A numpy
    array is stored as its raw bytes followed by a header (dtype, shape) at metadata_offset,
    so that a reader on the node maps it without a copy; anything else as a serialized Obj."""
    kind = type(value)
    if kind.__name__ == "ndarray" and kind.__module__ == "numpy" and not value.dtype.hasobject:
        import numpy as np

        array = np.ascontiguousarray(value)
        header = NDARRAY_MAGIC + json.dumps({"dtype": array.dtype.str,
                                             "shape": list(array.shape)}).encode()
        raw = memoryview(array).cast("B") if array.nbytes else b""
        return [raw, header], array.nbytes, []
    obj, contained = encode(value)
    return [obj.SerializeToString()], 0, contained


def decode_stored(view, metadata_offset, obj):
    """(value, [ids a new reference was made to]) of what get_stored returned."""
    if obj is not None:
        return decode(obj)
    header = bytes(view[metadata_offset:])
    if not header.startswith(NDARRAY_MAGIC):
        raise ValueError("an object in a layout this package does not read")
    import numpy as np

    meta = json.loads(header[len(NDARRAY_MAGIC):])
    array = np.frombuffer(view[:metadata_offset], dtype=np.dtype(meta["dtype"]))
    return array.reshape(meta["shape"]), []


def decode(obj):
    """(value, [ids a new reference was made to]). Raises TaskError for an error value."""
    previous = getattr(_context, "decoded", None)
    _context.decoded = []
    try:
        value = _decode(obj)
        return value, _context.decoded
    finally:
        _context.decoded = previous


def _decode(obj):
    from cohort.api import ObjectRef

    which = [field.name for field, _ in obj.ListFields()]
    if not which:
        raise ValueError("an Obj with no value")
    kind = which[0]
    if kind == "error_data":
        e = obj.error_data
        raise TaskError(e.message, e.function_name, e.operationid)
    if kind == "empty_data":
        return None
    if kind in ("int_data", "long_data", "double_data", "string_data", "bool_data"):
        return getattr(obj, kind).data
    if kind == "objectid_data":
        note_decoded(obj.objectid_data.data)
        return ObjectRef(obj.objectid_data.data)
    if kind == "list_data":
        return [_decode(e) for e in obj.list_data.elem]
    if kind == "tuple_data":
        return tuple(_decode(e) for e in obj.tuple_data.elem)
    if kind == "dict_data":
        return {_decode(e.key): _decode(e.value) for e in obj.dict_data.elem}
    if kind == "pyobj_data":
        return cloudpickle.loads(obj.pyobj_data.data)
    if kind == "array_data":
        return _decode_array(obj.array_data)
    raise ValueError(f"an Obj of a kind this package does not read: {kind}")


def _decode_array(array):
    import numpy as np

    for field, dtype in (("double_data", np.float64), ("float_data", np.float32),
                         ("int_data", np.int64), ("uint_data", np.uint64)):
        data = getattr(array, field)
        if len(data):
            out = np.array(data, dtype=dtype)
            break
    else:
        out = np.array([], dtype=np.float64)
    if array.is_scalar:
        return out.reshape(()).item() if out.size == 1 else out
    return out.reshape(tuple(array.shape)) if len(array.shape) else out
