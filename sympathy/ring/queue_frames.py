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
import weakref

import numpy as np

from .._errors import SY_ETIMEDOUT, check
from .._ring import ffi, lib
from . import segment
from ._queue_core import (_TAG_FRAME, _TAG_PICKLE, _get, _in_slices, _load_with_buffers, _loads,
                          _not_an_array, _Pieces, _raise, _timeout_ns)

_ITEM_TYPE = b"sympathy.Queue.frames"
DEFAULT_FRAME_COUNT = 4


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
        self._index, self._gen = ffi.new("int64_t *"), ffi.new("int64_t *")

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
        the C wait in slices (queue.Full when it times out)."""
        status = wait(lib.sy_frames_acquire, (self.handle,), (self._index, self._gen))
        if status:
            if status == SY_ETIMEDOUT:
                raise queue.Full
            check(status, "taking a frame buffer")
        return int(self._index[0]), int(self._gen[0])

    def array(self, index: int, shape, dtype, *, writeable: bool, on_gone) -> np.ndarray:
        """An array over buffer `index`; on_gone() runs once it and every array made from it are gone
        (they keep the root, made here, alive through .base)."""
        nbytes = math.prod(shape) * dtype.itemsize
        raw = ffi.buffer(lib.sy_frames_data(self.handle, index), nbytes)
        root = np.frombuffer(raw if writeable else memoryview(raw).toreadonly(), np.uint8)
        weakref.finalize(root, on_gone)
        return root.view(dtype).reshape(shape)


class FrameWriter:
    """What put_array returns: a context manager over a writeable array in a frame buffer; the end
    of the block puts the frame (publish() does the same outside a with)."""

    __slots__ = ("_queue", "_store", "_index", "_gen", "_array", "_done")

    def __init__(self, q, store: FrameStore, shape: tuple, dtype: np.dtype, wait):
        self._queue, self._store, self._done = q, store, False
        self._index, self._gen = store.acquire(wait)
        handle, index = store.handle, self._index
        self._array = store.array(index, shape, dtype, writeable=True,
                                  on_gone=lambda: lib.sy_frames_unpin(handle, index))

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
        a = self._array
        a.flags.writeable = False  # the producer's view must not change what a consumer reads
        record = pickle.dumps((self._index, self._gen, a.shape, a.dtype), 5)
        if self._queue._put_frame_record(record):
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


def take_frame(store: FrameStore, record: bytes) -> np.ndarray | None:
    """The read-only view a frame record names, its buffer held by this process until the view and
    every array made from it are gone; None for a stale record (its buffer was reclaimed)."""
    index, gen, shape, dtype = pickle.loads(record)
    if lib.sy_frames_take(store.handle, index, gen) != 0:
        return None
    handle = store.handle
    return store.array(index, shape, dtype, writeable=False,
                       on_gone=lambda: lib.sy_frames_release(handle, index, gen))


class FramesMixin:
    """sympathy.Queue's frame methods (the queue's own state is set up by Queue)."""

    def put_array(self, shape, dtype=float, block: bool = True, timeout: float | None = None) -> FrameWriter:
        """A writeable array of this shape and dtype in one of the queue's frame buffers, put into
        the queue when its `with` block ends (an exception discards it): no copy in or out.
        Waits for a free buffer (queue.Full when none comes in time)."""
        if self._closed:
            raise ValueError(f"Queue {self!r} is closed")
        dtype = np.dtype(dtype)
        try:
            shape = (operator.index(shape),) if not hasattr(shape, "__len__") else tuple(map(operator.index, shape))
        except (TypeError, ValueError):
            raise TypeError(f"shape must be an int or a sequence of ints; got {shape!r}") from None
        if any(n < 0 for n in shape):
            raise ValueError(f"shape must not be negative; got {shape}")
        if dtype.hasobject:
            raise TypeError(f"dtype {dtype} holds Python objects: a frame holds plain data only")
        store = self._frame_store()
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > store.frame_bytes:
            raise ValueError(f"an array of shape {shape} and dtype {dtype} takes {nbytes} bytes; this queue's "
                             f"frame buffers hold {store.frame_bytes} (frame_bytes=)")
        t = -1 if block and timeout is None else _timeout_ns(block, timeout)
        wait = lambda call, head, tail: _in_slices(self, call, head, tail, t)  # noqa: E731
        return FrameWriter(self, store, shape, dtype, wait)

    def get_array(self, block: bool = True, timeout: float | None = None) -> FrameView:
        """The next item as a read-only array (queue.Empty if none comes in time): a frame is a view
        of its buffer, no copy; use it as `with q.get_array() as view:`. The buffer goes back once
        the view and every array made from it are gone. An ordinary item that is an ndarray comes as
        it is (read-only); any other item raises TypeError, the item in its `.item`."""
        while True:
            kind, record = self._get_record(block, timeout)
            if kind == _TAG_FRAME:
                view = self._take_frame(record)
                if view is None:
                    continue
                return FrameView(view)
            item = _loads(record) if kind == _TAG_PICKLE else _load_with_buffers(record)
            if not isinstance(item, np.ndarray):
                raise _not_an_array(item)  # no local names the error: no frame-traceback cycle
            item.flags.writeable = False
            return FrameView(item)

    def _get_record(self, block: bool, timeout) -> tuple[int, bytearray]:
        """The next record's kind and bytes, copied out (get()'s path, without unpickling)."""
        if self._closed:
            raise ValueError(f"Queue {self!r} is closed")
        t = -1 if block and timeout is None else _timeout_ns(block, timeout)
        if not self._get_lock.acquire(True, -1 if t < 0 else t / 1e9):
            raise queue.Empty
        try:
            worker = self._worker or self._open_worker()
            status = _in_slices(self, _get, (worker, ffi.NULL, 0), (self._out, self._tag), t)
            if status != lib.SY_QUEUE_HELD:
                _raise(status, queue.Empty, "getting an item")
            record = bytearray(self._out[0])
            check(lib.sy_queue_copy_held(worker, ffi.from_buffer(record)), "copying an item out")
            return int(self._tag[0]), record
        finally:
            self._get_lock.release()

    def _frame_store(self) -> FrameStore:
        if self._frames is None:
            self._frames = FrameStore.attach(self._name)
        return self._frames

    def _take_frame(self, record):
        view = take_frame(self._frame_store(), record)
        if view is None:
            lib.sy_queue_note_abandoned(self._handle)
        return view

    def _put_frame_record(self, record: bytes) -> bool:
        return self._put_built(_Pieces([record], len(record), _TAG_FRAME), True, None)

