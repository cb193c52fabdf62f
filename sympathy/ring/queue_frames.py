"""Zero-copy frames for sympathy.Queue: arrays written in place in shared memory, read in place.

    q = sy.Queue(frame_bytes=1920 * 1080 * 3, frame_count=8)     # eight 6 MB frame buffers
    with q.put_array((1080, 1920, 3), np.uint8) as frame:        # producer: a buffer of the queue's
        frame[...] = camera.read()                                # written in place; published on exit
    with q.get_array(timeout=None) as view:                      # consumer: a read-only view of it
        total += view.sum()                                       # no copy in, none out

The buffers live in a second shared segment beside the queue's ring (`<queue name>.frames`): each is
a contiguous, 64-byte-aligned block of `frame_bytes`. `put_array` takes a free buffer (waiting, or
queue.Full, when all are in use), the block writes it, and its end puts a small record naming the
buffer (index, generation, shape, dtype) through the queue itself: so frames keep the queue's rules,
each to exactly one consumer, in order per producer, mixed freely with ordinary items. An exception
inside the block discards the frame (nothing is put).

Lifetimes, the rule that keeps every view safe: a buffer is handed out again only once no view of
it is left in any process. The consumer's view (and every array made from it) keeps its buffer
held while it lives: leaving the `with` block drops the queue's reference, and the buffer goes back
when the last reference goes (in a loop, when the name is bound to the next view; `del view` to
return it sooner). A view used after the block therefore still shows its own frame, never a later
one. The producer's array is made read-only when its block ends (writing to it raises) and pins the
buffer the same way until it is gone. So with W consumers, and one stale binding on each side, up
to frame_count - W - 1 frames are in flight: give frame_count >= W + 2.

`get()` of a frame record returns a private copy (writeable, as for any array) and gives the buffer
back at once; `get_array()` of an ordinary item returns it as is when it is an ndarray (made
read-only) and raises TypeError (the item in `.item`) otherwise.

Dead processes: a producer killed before its frame's record is in the queue, or a consumer killed
holding a frame, has its buffer reclaimed by the next producer waiting for one (within 10 ms of its
wait). A record whose buffer was reclaimed meanwhile (its producer died just after putting it) is
recognised by its generation, skipped, and counted in `q.abandoned`.
"""
from __future__ import annotations

import errno
import math
import operator
import pickle
import queue
import struct

import numpy as np

from .._errors import SY_ETIMEDOUT, check
from .._ring import ffi, lib
from . import segment
from ._queue_core import (_TAG_FRAME, _TAG_PICKLE, _get, _get_small, _in_slices, _load_with_buffers, _loads,
                          _not_an_array, _Pieces, _put1, _raise, _timeout_ns)

_ITEM_TYPE = b"sympathy.Queue.frames"
DEFAULT_FRAME_COUNT = 4

# A frame record: the buffer's index and generation (two int64), then the pickled (shape, dtype).
# That tail is the same for every frame of a stream, so each side keeps it: the producer its bytes
# per (shape, dtype), the consumer the (shape, dtype) per bytes (pickling a dtype took ~3 us a frame,
# a third of a small frame's handover on the 2-core VM). Bounded: a stream of ever new shapes only
# refills them.
_HEAD = struct.Struct("<qq")
_TAILS: dict = {}    # (shape, dtype) -> pickled bytes (producer)
_LAYOUTS: dict = {}  # pickled bytes -> (shape, dtype) (consumer)
_CACHE_MAX = 64
_TRY_NOW, _HELD = lib.SY_QUEUE_TRY, lib.SY_QUEUE_HELD


def frame_record(index: int, gen: int, shape: tuple, dtype: np.dtype) -> bytes:
    """The record that names buffer `index` (generation `gen`) holding an array of shape, dtype."""
    key = (shape, dtype)
    tail = _TAILS.get(key)
    if tail is None:
        if len(_TAILS) >= _CACHE_MAX:
            _TAILS.clear()
        tail = _TAILS[key] = pickle.dumps(key, 5)
    return _HEAD.pack(index, gen) + tail


def read_frame_record(record) -> tuple[int, int, tuple, np.dtype]:
    """(index, gen, shape, dtype) of a frame record (bytes-like, exactly the record)."""
    index, gen = _HEAD.unpack_from(record)
    tail = bytes(record[16:])
    layout = _LAYOUTS.get(tail)
    if layout is None:
        if len(_LAYOUTS) >= _CACHE_MAX:
            _LAYOUTS.clear()
        layout = _LAYOUTS[tail] = pickle.loads(tail)
    return index, gen, layout[0], layout[1]


def frames_name(queue_name: str) -> str:
    return queue_name + ".frames"


def check_frame_args(frame_bytes, frame_count) -> None:
    for arg, value in (("frame_bytes", frame_bytes), ("frame_count", frame_count)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{arg} must be an int; got {type(value).__name__}")
    if frame_bytes < 0 or lib.sy_frames_slot_size(max(frame_bytes, 1)) < 0:
        raise ValueError(f"frame_bytes must be in [0, 2**30 - 64] (0: no frame buffers); got {frame_bytes}")
    if frame_bytes and not 2 <= frame_count <= 4096:
        raise ValueError(f"frame_count must be in [2, 4096]; got {frame_count}")


class FrameStore:
    """This process's handle on a queue's frame buffers (created by the queue's creator)."""

    def __init__(self, handle, name: str):
        self.handle, self.name = handle, name
        self.count = int(lib.sy_frames_capacity(handle))
        self.frame_bytes = int(lib.sy_frames_bytes(handle))
        unpin, release = lib.sy_frames_unpin, lib.sy_frames_release
        # What runs when the last array over a buffer goes (see array()); each keeps the handle,
        # so the mapping outlives every view of it.
        self.unpin_when_gone = lambda index: lambda _ptr: unpin(handle, index)
        self.release_when_gone = lambda index, gen: lambda _ptr: release(handle, index, gen)

    @classmethod
    def create(cls, queue_name: str, frame_bytes: int, frame_count: int):
        """The store and its (name, nonce, inode) for the creator's cleanup."""
        name = frames_name(queue_name)
        handle, nonce = segment.create_multi_producer(name, 1 << (frame_count - 1).bit_length(),
                                                      lib.sy_frames_slot_size(frame_bytes), _ITEM_TYPE)
        return cls(handle, name), (name, nonce, segment.remember_created(name, nonce))

    @classmethod
    def attach(cls, queue_name: str):
        name = frames_name(queue_name)
        out = ffi.new("sy_ring **")
        if lib.sy_ring_attach(segment.segment_name(name), out) != 0:
            if ffi.errno == errno.ENOENT:
                raise ValueError(f"queue {queue_name!r} has no frame buffers: make it with "
                                 f"sy.Queue(frame_bytes=..., frame_count=...) to use put_array/get_array")
            check(-4, f"attaching to the frame buffers of queue {queue_name!r}", os_errno=ffi.errno or None)
        handle = ffi.gc(out[0], lib.sy_ring_free)
        text = ffi.new("char[]", 64)
        lib.sy_ring_item_type(handle, text, 64)
        if ffi.string(text) != _ITEM_TYPE:
            raise ValueError(f"segment {name!r} is not the frame buffers of a sympathy.Queue")
        return cls(handle, name)

    # ---- producer ----
    def acquire(self, wait) -> tuple[int, int]:
        """A free buffer, pinned to this process: (index, generation). wait(call, head, tail) runs
        the C wait in slices (queue.Full when it times out); a first look does not wait."""
        got = lib.sy_frames_acquire_now(self.handle)  # gen << 32 | index: no shared out-parameters
        if got >= 0:
            return got & 0xFFFFFFFF, got >> 32
        out = ffi.new("int64_t[2]")  # per call: two producer threads of one handle never share it
        status = wait(lib.sy_frames_acquire, (self.handle,), (out, out + 1))
        if status:
            if status == SY_ETIMEDOUT:
                raise queue.Full
            check(status, "taking a frame buffer")
        return out[0], out[1]

    def array(self, index: int, shape, dtype, nbytes: int, *, writeable: bool, on_gone) -> np.ndarray:
        """An array over buffer `index`; on_gone(pointer) runs once it and every array made from it
        are gone: they keep the root alive through .base, the root its buffer (read-only for a consumer's), the buffer the
        pointer, and cffi calls a pointer's destructor when it goes (in C, at the last reference:
        no weakref.finalize object, registry and atexit entry per frame)."""
        raw = ffi.buffer(ffi.gc(lib.sy_frames_data(self.handle, index), on_gone), nbytes)
        if writeable:
            return np.ndarray(shape, dtype, raw)
        # frombuffer, not ndarray(buffer=): only its array refuses `flags.writeable = True` over a
        # read-only buffer
        return np.frombuffer(memoryview(raw).toreadonly(), dtype).reshape(shape)


class FrameWriter:
    """What put_array returns: a context manager over a writeable array in a frame buffer; the end
    of the block puts the frame (publish() does the same outside a with)."""

    __slots__ = ("_queue", "_store", "_index", "_gen", "_array", "_done", "_layout")

    def __init__(self, q, store: FrameStore, shape: tuple, dtype: np.dtype, nbytes: int, wait):
        self._queue, self._store, self._done, self._layout = q, store, False, (shape, dtype)
        index, gen = store.acquire(wait)
        self._index, self._gen = index, gen
        self._array = store.array(index, shape, dtype, nbytes, writeable=True, on_gone=store.unpin_when_gone(index))

    @property
    def array(self) -> np.ndarray:
        return self._array

    def __enter__(self) -> np.ndarray:
        return self._array

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.publish()
        else:
            self.discard()

    def publish(self) -> None:
        """Put the frame into the queue (once); the array turns read-only."""
        if self._done:
            raise ValueError("this frame was already put or discarded")
        self._done = True
        self._array.flags.writeable = False  # the producer's view must not change what a consumer reads
        shape, dtype = self._layout
        if self._queue._put_frame_record(frame_record(self._index, self._gen, shape, dtype)):
            lib.sy_frames_queued(self._store.handle, self._index, self._gen)

    def discard(self) -> None:
        """Give the buffer back without putting it (what an exception in the block does)."""
        if not self._done:
            self._done = True
            self._array.flags.writeable = False
            lib.sy_frames_release(self._store.handle, self._index, self._gen)


class FrameView:
    """What get_array returns: a context manager over a read-only view of a frame; see the module
    docstring for when its buffer goes back to the producers."""

    __slots__ = ("_array", "__weakref__")

    def __init__(self, array: np.ndarray):
        self._array = array

    @property
    def array(self) -> np.ndarray:
        if self._array is None:
            raise ValueError("this frame view was released")
        return self._array

    def __enter__(self) -> np.ndarray:
        return self.array

    def __exit__(self, exc_type, exc, tb) -> None:
        self.release()

    def release(self) -> None:
        """Drop the queue's reference: the buffer goes back once no other view of it is left."""
        self._array = None


def take_frame(store: FrameStore, record) -> np.ndarray | None:
    """The read-only view a frame record names, its buffer held by this process until the view and
    every array made from it are gone; None for a stale record (its buffer was reclaimed)."""
    index, gen, shape, dtype = read_frame_record(record)
    if lib.sy_frames_take(store.handle, index, gen) != 0:
        return None
    return store.array(index, shape, dtype, math.prod(shape) * dtype.itemsize, writeable=False,
                       on_gone=store.release_when_gone(index, gen))


class FramesMixin:
    """sympathy.Queue's frame methods (the queue's own state is set up by Queue)."""

    def put_array(self, shape, dtype=float, block: bool = True, timeout: float | None = None) -> FrameWriter:
        """A writeable array of this shape and dtype in one of the queue's frame buffers, put into
        the queue when its `with` block ends (an exception discards it): no copy in or out.
        Waits for a free buffer (queue.Full when none comes in time)."""
        if self._closed:
            raise ValueError(f"Queue {self!r} is closed")
        if type(dtype) is not np.dtype:
            dtype = np.dtype(dtype)
        if type(shape) is tuple:  # the common call: a tuple of plain non-negative ints, taken as given
            for n in shape:
                if type(n) is not int or n < 0:
                    shape = _frame_shape(shape)
                    break
        else:
            shape = _frame_shape(shape)
        if dtype.hasobject:
            raise TypeError(f"dtype {dtype} holds Python objects: a frame holds plain data only")
        store = self._frames or self._frame_store()
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > store.frame_bytes:
            raise ValueError(f"an array of shape {shape} and dtype {dtype} takes {nbytes} bytes; this queue's "
                             f"frame buffers hold {store.frame_bytes} (frame_bytes=)")
        t = -1 if block and timeout is None else _timeout_ns(block, timeout)
        wait = lambda call, head, tail: _in_slices(self, call, head, tail, t)  # noqa: E731
        return FrameWriter(self, store, shape, dtype, nbytes, wait)

    def get_array(self, block: bool = True, timeout: float | None = None) -> FrameView:
        """The next item as a read-only array (queue.Empty if none comes in time): a frame is a view
        of its buffer, no copy; use it as `with q.get_array() as view:`. The buffer goes back once
        the view and every array made from it are gone. An ordinary item that is an ndarray comes as
        it is (read-only); any other item raises TypeError, the item in its `.item`."""
        while True:
            kind, got = self._get_record(block, timeout)
            if kind == _TAG_FRAME:
                if got is None:  # a stale record, skipped and counted
                    continue
                return FrameView(got)
            item = got if kind == _TAG_PICKLE else _load_with_buffers(got)
            if not isinstance(item, np.ndarray):
                raise _not_an_array(item)  # no local names the error: no frame-traceback cycle
            item.flags.writeable = False
            return FrameView(item)

    def _get_record(self, block: bool, timeout) -> tuple[int, object]:
        """The next item for get_array, by kind: a frame's view (None: stale), a plain item
        unpickled, or the bytes of a record with out-of-band buffers. As get(): one look with the
        GIL kept (into the kept scratch buffer, read under the lock), then the wait in slices."""
        if self._closed:
            raise ValueError(f"Queue {self!r} is closed")
        lock = self._get_lock
        if block and timeout is None:
            t = -1
            lock.acquire()
        else:
            t = _timeout_ns(block, timeout)
            if not lock.acquire(False) and not lock.acquire(True, -1 if t < 0 else t / 1e9):  # a try first
                raise queue.Empty
        try:
            worker = self._worker or self._open_worker()
            out, tag, scratch = self._out, self._tag, self._scratch_ptr
            status = _get_small(worker, scratch, len(self._scratch), out, tag)
            if status == SY_ETIMEDOUT and t != 0:
                status = _in_slices(self, _get, (worker, scratch, len(self._scratch)), (out, tag), t)
            if status == 0:
                return _TAG_PICKLE, _loads(self._scratch)
            if status != _HELD:
                _raise(status, queue.Empty, "getting an item")
            kind, n = tag[0], out[0]
            if kind == _TAG_FRAME and n <= len(self._scratch):  # read here, under the lock
                check(lib.sy_queue_copy_held(worker, scratch), "copying an item out")
                return kind, self._take_frame(memoryview(self._scratch)[:n])
            record = bytearray(n)  # its own buffer: out-of-band arrays are views of it
            check(lib.sy_queue_copy_held(worker, ffi.from_buffer(record)), "copying an item out")
        finally:
            lock.release()
        return kind, (self._take_frame(record) if kind == _TAG_FRAME else record)

    def _frame_store(self) -> FrameStore:
        if self._frames is None:
            self._frames = FrameStore.attach(self._name)
        return self._frames

    def _take_frame(self, record):
        view = take_frame(self._frames or self._frame_store(), record)
        if view is None:
            lib.sy_queue_note_abandoned(self._handle)
        return view

    def _put_frame_record(self, record: bytes) -> bool:
        """True when the record went straight into the ring (False: spilled, the feeder puts it).
        As put(): one try under the put lock, the rest on put's slow path."""
        status = None
        with self._put_lock:
            if not self._spill and self._producer is not None:
                status = _put1(self._producer, record, len(record), _TAG_FRAME, _TRY_NOW)
                if status == 0:
                    return True
                if status == lib.SY_QUEUE_SPILLED:
                    self._keep(_Pieces([record], len(record), _TAG_FRAME))
                    return False
        return self._put_built(_Pieces([record], len(record), _TAG_FRAME), True, None, status)


def _frame_shape(shape) -> tuple:
    try:
        shape = (operator.index(shape),) if not hasattr(shape, "__len__") else tuple(map(operator.index, shape))
    except (TypeError, ValueError):
        raise TypeError(f"shape must be an int or a sequence of ints; got {shape!r}") from None
    if any(n < 0 for n in shape):
        raise ValueError(f"shape must not be negative; got {shape}")
    return shape
