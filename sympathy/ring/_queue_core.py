"""What sympathy.Queue's modules share (queue.py, queue_frames.py, queue_async.py): how records are
framed, how (block, timeout) is read, and the C waits run in slices."""
from __future__ import annotations

import pickle
import struct

from .._errors import SY_ETIMEDOUT, check
from .._ring import ffi, lib

WAIT_SLICE_S = 0.05       # C waits in slices so that Ctrl-C (signal handlers) runs between them
_SLICE_NS = int(WAIT_SLICE_S * 1e9)
_TAG_PICKLE, _TAG_BUFFERS, _TAG_FRAME = 0, 1, 2  # how a record's bytes are framed

_put1, _get = lib.sy_queue_put1, lib.sy_queue_get
# never wait, copy at most SMALL_BYTES: called with the GIL kept (sympathy/_build/ring_build.py)
_put_small, _get_small = lib.sy_queue_put_small, lib.sy_queue_get_small
SMALL_BYTES = lib.SY_QUEUE_SMALL_BYTES
_loads = pickle.loads


def _timeout_ns(block: bool, timeout) -> int:
    """multiprocessing.Queue's reading of (block, timeout): block=False ignores timeout; a negative
    timeout tries once (no ValueError, unlike queue.Queue); None waits forever."""
    if not block:
        return 0
    if timeout is None:
        return -1
    if (type(timeout) is float or type(timeout) is int) and 0 <= timeout < 1e9:  # the common call (not nan)
        return int(timeout * 1e9)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds or None; got {type(timeout).__name__}")
    if timeout != timeout:
        raise ValueError("timeout must be a number of seconds or None; got nan")
    return max(0, int(timeout * 1e9)) if timeout < 1e9 else -1


def _in_slices(q, call, head: tuple, tail: tuple, t: int) -> int:
    """call(*head, slice_ns, *tail) until it is not a slice's timeout or t (ns, < 0 forever) runs
    out: the C wait holds no GIL and Python runs signal handlers (Ctrl-C) only between the calls; a
    close() from another thread ends the wait at the next slice. (No lambda: a closure would make
    put's and get's locals cells on every call, fast path included.)"""
    while True:
        status = call(*head, _SLICE_NS if t < 0 or t > _SLICE_NS else t, *tail)
        if status != SY_ETIMEDOUT or 0 <= t <= _SLICE_NS:
            return status
        if q._closed:
            raise ValueError(f"Queue {q!r} is closed")
        if t > 0:
            t -= _SLICE_NS


def _raise(status: int, timeout_exc: type, what: str) -> None:
    if status == SY_ETIMEDOUT:
        raise timeout_exc
    check(status, what)


class _Pieces:
    """A record gathered from several buffers (the pickle and its out-of-band buffers)."""

    __slots__ = ("parts", "nbytes", "tag")

    def __init__(self, parts: list, nbytes: int, tag: int):
        self.parts, self.nbytes, self.tag = parts, nbytes, tag

    def owned(self) -> "_Pieces":
        return _Pieces([b"".join(self.parts)], self.nbytes, self.tag)


def _put_record(producer, record, mode: int) -> int:
    if type(record) is bytes:
        return _put1(producer, record, len(record), _TAG_PICKLE, mode)
    keep = [ffi.from_buffer(p) for p in record.parts]  # alive until the C call returns
    return lib.sy_queue_put(producer, ffi.new("void *[]", keep), ffi.new("int64_t[]", [len(k) for k in keep]),
                            len(keep), record.tag, mode)


def _not_an_array(item) -> TypeError:
    error = TypeError(f"get_array() took an item that is not an array: {type(item).__name__} (in .item)")
    error.item = item
    return error


def _load_with_buffers(record: bytearray):
    view = memoryview(record)
    n = struct.unpack_from("<q", view)[0]
    sizes = struct.unpack_from(f"<{n + 1}q", view, 8)
    at = 8 * (n + 2)
    data = view[at:at + sizes[0]]
    at += sizes[0]
    buffers = []
    for size in sizes[1:]:
        buffers.append(view[at:at + size])
        at += size
    return pickle.loads(data, buffers=buffers)


