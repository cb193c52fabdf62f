"""RingBuffer: the ring's handle, its producer side and its shared segment."""
from __future__ import annotations

import errno
import queue
import struct
import sys
import threading
import weakref
from typing import Sequence

import numpy as np

from .._errors import SY_ECLOSED, SY_EINVAL, SY_EOS, SY_ETIMEDOUT, SY_EUNSUPPORTED, ClosedError
from . import segment
from ._core import (
    LAYOUTS, MAX_CONSUMERS, PRODUCERS, WAITS, WAIT_SLICE_NS, _EBUSY, _GIL_WAITERS, _MAX_CAPACITY, _NOT_NOW, _SLICE,
    _describe, _rewait,
    _segment_version, _timeout_ns, _write_args_now, _write_i64, _write_many, _write_now, _write_one, ffi, lib,
)
from ._inplace import Claim
from .consumer import Consumer, EventPoller
from .segment import segment_name as _segment_name


class RingBuffer:
    """A bounded ring of fixed-size items with one or many producers and any consumer graph.

    capacity: slots, a power of two (>= 2). dtype: a NumPy dtype (plain or structured), or
    item_size: bytes per item for raw byte items. producer: "single" (one publishing thread in
    one process) or "multi" (any threads, any processes). wait: how a side waits when it has to:
    "busy_spin" (lowest latency, burns a core: only with a core per thread), "yield", "sleep"
    (backoff) or "blocking" (futex; the default, right whenever threads outnumber cores).
    name: create a named POSIX shared-memory segment (mode 0600) that other processes attach to.
    consumers: consumers to come (in this process or others): the producers wait for them from the
    first item, so a consumer made after publishing began still sees everything (see `consumer`).
    layout: where each slot's "published" header sits. "slots" (the default): before its item, so
    one cache line hands a consumer the signal and the item together (lowest per-item latency).
    "contiguous": the items back to back, the headers apart (and none written by a single producer:
    its cursor says what is published), so a batch is one memcpy each way and the ring's items are
    a plain contiguous array; a per-item handoff then moves two lines instead of one. For batches
    (publish_batch, get_batch, claim, view_batch): docs/ring.md, "The contiguous layout".
    """

    def __init__(self, capacity: int, dtype=None, *, item_size: int | None = None,
                 producer: str = "single", wait: str = "blocking", name: str | None = None,
                 consumers: int = 0, layout: str = "slots"):
        dtype, size = _item_layout(dtype, item_size)
        if isinstance(consumers, bool) or not isinstance(consumers, (int, np.integer)):
            raise TypeError(f"consumers must be an int; got {type(consumers).__name__}")
        if not 0 <= consumers <= MAX_CONSUMERS:
            raise ValueError(f"consumers must be in [0, {MAX_CONSUMERS}]; got {consumers}")
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)):
            raise TypeError(f"capacity must be an int; got {type(capacity).__name__}")
        capacity = int(capacity)
        if capacity < 2 or capacity & (capacity - 1) or capacity > _MAX_CAPACITY:
            raise ValueError(f"capacity must be a power of two in [2, 2**40]; got {capacity}")
        if producer not in PRODUCERS:
            raise ValueError(f"producer must be one of {sorted(PRODUCERS)}; got {producer!r}")
        if wait not in WAITS:
            raise ValueError(f"wait must be one of {sorted(WAITS)}; got {wait!r}")
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {sorted(LAYOUTS)}; got {layout!r}")
        item_type = ffi.new("char[]", segment.dtype_text(dtype))
        config = ffi.new("sy_ring_config *", {"capacity": capacity, "slot_size": size, "item_type": item_type,
                                              "producer_kind": PRODUCERS[producer], "wait": WAITS[wait],
                                              "layout": LAYOUTS[layout]})
        out = ffi.new("sy_ring **")
        if name is None:
            _describe(lib.sy_ring_create(config, ffi.NULL, out), "creating a ring")
        else:
            segment.create_named(config, name, out)
        self._setup(out[0], dtype, name, owner=True)
        if name is not None:
            self._inode = segment.remember_created(name, self._nonce)
        if consumers:  # before anything can be published: they gate from the first item
            _describe(lib.sy_ring_declare_consumers(self._handle, int(consumers)), "declaring consumers")

    @classmethod
    def attach(cls, name: str, dtype=None, *, item_size: int | None = None) -> "RingBuffer":
        """Map the named ring another process created; the header is validated before any use.

        The ring must be owned by this user with mode 0600 (PermissionError otherwise). Without
        dtype, the ring's own dtype is read from the segment (raw bytes for an item_size ring); a
        dtype given must be that one (ValueError otherwise). item_size=N reads the items as raw
        N-byte strings (N must be the ring's item size).
        """
        c_name = _segment_name(name)
        out = ffi.new("sy_ring **")
        status = lib.sy_ring_attach(c_name, out)
        if status != 0:
            err = ffi.errno
            if status == SY_EUNSUPPORTED:
                raise ValueError(f"ring {name!r} is not a valid sympathy ring for this version: its shared-memory "
                                 f"format is version {_segment_version(name)}, this sympathy reads version "
                                 f"{lib.sy_ring_format_version()} only; recreate the ring with this sympathy "
                                 f"(RingBuffer.cleanup({name!r}) removes the old one) or attach with the "
                                 f"sympathy that made it")
            if status == SY_EINVAL:
                raise ValueError(f"ring {name!r} is not a valid sympathy ring (bad magic, version, "
                                 f"checksum, file size or a header field out of range): refusing to attach")
            if err == errno.ENOENT:
                raise FileNotFoundError(err, f"no shared ring named {name!r}")
            if status == SY_EOS and err in (errno.EPERM, errno.EACCES):
                raise segment.foreign_segment_error(name, err)
            _describe(status, f"attaching to ring {name!r}")
        ring = cls.__new__(cls)
        info = ffi.new("sy_ring_info *")
        lib.sy_ring_get_info(out[0], info)
        try:
            given = None if dtype is None and item_size is None else _item_layout(dtype, item_size)
            dtype, size = segment.attach_layout(name, out[0], given, int(info.slot_size))
        except Exception:
            lib.sy_ring_free(out[0])
            raise
        ring._setup(out[0], dtype, name, owner=False)
        return ring

    @staticmethod
    def cleanup(name: str) -> bool:
        """Remove a named segment (a stale one left by a crashed process); True if one was there.

        Processes that still map it keep their mapping; a new ring of that name can be created.
        """
        status = lib.sy_ring_unlink(_segment_name(name))
        if status == 0:
            return True
        if ffi.errno == errno.ENOENT:
            return False
        _describe(status, f"removing ring {name!r}")
        return False

    def _setup(self, handle, dtype, name, owner: bool) -> None:
        self._handle = ffi.gc(handle, lib.sy_ring_free)
        info = ffi.new("sy_ring_info *")
        lib.sy_ring_get_info(handle, info)
        self.capacity = int(info.capacity)
        self.item_size = int(info.slot_size)
        self.dtype = dtype
        self.name = name
        self.producer_kind = "multi" if info.producer_kind == lib.SY_RING_MULTI_PRODUCER else "single"
        self.wait = next(k for k, v in WAITS.items() if v == info.wait)
        self.layout = next(k for k, v in LAYOUTS.items() if v == info.layout)
        self._owner = owner
        self._nonce = int(lib.sy_ring_nonce(handle))
        self._inode = None
        self._producer = None
        self._producer_lock = threading.Lock()
        self._consumers: weakref.WeakSet[Consumer] = weakref.WeakSet()
        self._closed = False
        lib.sy_ring_set_wait_slice(handle, WAIT_SLICE_NS)
        lib.sy_ring_refuse_concurrent_claims(handle, 1)  # one object, any thread: refuse, never duplicate
        # Two threads of this process on a ring hand the GIL over in C, never sleeping on it
        # (c_src/ring_wait.c, "The GIL handoff"; docs/pipeline.md, issue 19's third session).
        lib.sy_ring_set_gil_handoff(handle, _GIL_WAITERS)
        # In the slots layout each slot is an 8-byte "published" header followed by the item, so the
        # items sit one slot_stride apart: a strided (not contiguous) array over the ring, zero-copy
        # all the same; in the contiguous layout slot_stride is the item size.
        # Raw rings (item_size=) look like a (capacity, item_size) uint8 array, typed rings like 1-D.
        stride = int(info.slot_stride)
        # Every view (view_batch, claim, a poller's records) holds the mapping through this buffer:
        # one kept after close() reads stale items, never unmapped memory.
        holder = lib.sy_ring_retain(handle)
        base = ffi.gc(lib.sy_ring_slots(handle), lambda _, holder=holder: lib.sy_ring_free(holder))
        raw = ffi.buffer(base, (self.capacity - 1) * stride + self.item_size)
        self._slots = (np.ndarray((self.capacity,), dtype=dtype, buffer=raw, strides=(stride,)) if dtype is not None
                       else np.ndarray((self.capacity, self.item_size), np.uint8, buffer=raw, strides=(stride, 1)))
        self._row_shape, self._row_dtype = self._slots.shape[1:], self._slots.dtype
        self._slots_read_only = self._slots.view()  # view_batch's slices of it are read-only as made
        self._slots_read_only.flags.writeable = False
        self._pack, self._unpack = _scalar_codec(dtype)
        self._int64 = dtype is not None and dtype == np.dtype(np.int64)
        self._last_batch = _NO_BATCH  # publish_batch's last array: see there
        self._written_spare: list = []

    # ---- producer side -------------------------------------------------------------------------
    def _producer_handle(self):
        with self._producer_lock:  # two threads' first publish must open one handle, not two
            if self._producer is None:
                self._open_producer()
        return self._producer

    def _open_producer(self) -> None:
        self._check_open()
        out = ffi.new("sy_ring_producer **")
        status = lib.sy_ring_producer_open(self._handle, out)
        if status == SY_EINVAL and self.producer_kind == "multi":
            raise ValueError("every producer record of this ring (64) is held by a live producer, or by a dead "
                             "one whose claim a consumer has not passed yet")
        if status == SY_EINVAL:
            raise ValueError("this single-producer ring already has a producer; use producer='multi' "
                             "for several publishing threads or processes")
        _describe(status, "opening a producer")
        # The C handle holds a reference on the mapping, so finalisers may run in any order.
        self._producer = ffi.gc(out[0], lib.sy_ring_producer_close)

    def publish(self, item, timeout: float | None = None) -> None:
        """Copy one item into the next slot and publish it; queue.Full if no slot frees in time."""
        t = -1 if timeout is None else _timeout_ns(timeout)
        producer = self._producer
        if producer is None:
            producer = self._producer_handle()
        if self._int64 and type(item) is int:  # the per-item fast path: no bytes object at all
            try:
                status = _write_i64(producer, item, t)
            except OverflowError:
                raise ValueError(f"item {item!r} does not fit dtype int64") from None
            if status == _SLICE:
                status = _rewait(_write_i64, (producer, item), t)
        else:
            data = self._encode(item)
            status = _write_one(producer, data, t)
            if status == _SLICE:
                status = _rewait(_write_one, (producer, data), t)
        if status:
            producer = None  # a traceback must not keep a closed ring's producer open
            self._raise(status, "publishing an item", queue.Full)

    def publish_batch(self, items, timeout: float | None = None) -> None:
        """Publish a 1-D array of items with one C call (one claim per `capacity` items).

        Batches up to `capacity` items are claimed at once: all or nothing. Larger batches go in
        capacity-sized pieces; a timeout part-way raises queue.Full saying how many went out.
        """
        # The array published last time, unchanged (shape, dtype and strides can be reassigned in
        # place, so they are compared): its checks, its FFI pointer and the producer are kept, and
        # the common call is this one C call, made with the GIL kept (it never waits: room for
        # all of it now, single producer), or else the path below. Each step left out here costs
        # about what the C call spends moving 100 items (docs/pipeline.md, "The batched path").
        # One tuple, read and replaced whole: threads of a multi-producer ring share this object.
        last = self._last_batch
        if items is last[0] and timeout is None and items.dtype is last[1] and items.shape == last[2] \
                and items.strides == last[3] and not _write_args_now(last[7]):  # (producer, pointer, n) in one
            return
        t = -1 if timeout is None else _timeout_ns(timeout)
        keep = False
        if items is last[0] and items.dtype is last[1] and items.shape == last[2] and items.strides == last[3]:
            pointer, n = last[4], last[5]
        else:
            array = self._as_batch(items)
            n = len(array)
            if n == 0:
                return
            pointer = ffi.from_buffer(array)  # holds a buffer export: numpy refuses to resize it under us
            keep = array is items and self.dtype is not None
        producer = self._producer
        if producer is None:
            producer = self._producer_handle()
        if keep:  # the C arguments as one struct: one FFI argument, no argument tuple (cffi's METH_O)
            args = ffi.new("sy_ring_write_args *", {"producer": producer, "items": pointer, "n": n})
            self._last_batch = (items, items.dtype, items.shape, items.strides, pointer, n, producer, args)
        # First without waiting, the GIL kept (single producer, room for all of it now); only a
        # wait releases the GIL: each release hands the interpreter to any other Python thread.
        status = _write_now(producer, pointer, n)
        if status != _NOT_NOW:
            if status:
                producer = None
                self._raise(status, f"publishing a batch (0 of {n} items published)", queue.Full)
            return
        try:  # the out-parameter: one per concurrent call (a multi-producer ring has several threads)
            written = self._written_spare.pop()
        except IndexError:
            written = ffi.new("int64_t *")
        status = _write_many(producer, pointer, n, t, written)
        if status:
            done = written[0]
            while status == _SLICE:  # what went out stays out; the rest follows (signals run in between)
                t = max(t - WAIT_SLICE_NS, 0) if t > 0 else t
                status = _write_many(producer, pointer + done * self.item_size, n - done, t, written)
                done += written[0]
            if status:
                producer = None
                self._raise(status, f"publishing a batch ({done} of {n} items published)", queue.Full)
        self._written_spare.append(written)

    def claim(self, n: int, timeout: float | None = None) -> Claim:
        """`with rb.claim(n) as slots: slots[:] = ...`: write n items in place, published on exit.

        The array is a view into the ring when the n slots are contiguous, else a scratch array
        copied in at publish. Claimed slots are always published, even if the block raises (a
        claimed sequence that is never published would stall every consumer).
        """
        return Claim(self, n, timeout)

    def close_stream(self) -> None:
        """End of stream: producers can publish no more; consumers drain, then get ClosedError."""
        self._check_open()
        lib.sy_ring_close_stream(self._handle)

    # ---- consumers -----------------------------------------------------------------------------
    def consumer(self, after: Sequence["Consumer | int"] = ()) -> "Consumer":
        """A new consumer that sees every item published from now on, after the given consumers.

        after: consumers (or their `index`, for consumers of another process) this one runs behind:
        a pipeline is `c2 = rb.consumer(after=[c1])`, a diamond `c3 = rb.consumer(after=[c1, c2])`.
        Only consumers nothing runs after hold the producers back. A consumer made after publishing
        began starts at the items published from then on, and its `missed` says how many came
        before it; to miss nothing, declare the consumers when creating the ring
        (`RingBuffer(..., consumers=n)`): the first n consumers without `after` (in any process)
        then start at the first item, and the producers wait for them until they come.
        """
        self._check_open()
        indices = []
        for a in after:
            index = a.index if isinstance(a, (Consumer, EventPoller)) else a
            if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < MAX_CONSUMERS:
                raise ValueError(f"after must hold consumers or indices in [0, {MAX_CONSUMERS}); got {a!r}")
            indices.append(int(index))
        consumer = Consumer(self, indices)
        self._consumers.add(consumer)
        return consumer

    def poller(self, after: Sequence["Consumer | EventPoller | int"] = ()) -> "EventPoller":
        """A consumer you poll from your own loop instead of one that waits (LMAX's EventPoller).

        `poller.poll(handler)` hands every ready event to `handler(event, sequence, end_of_batch)`
        and returns at once with a PollState: PROCESSING (events were handled), GATING (more is
        on its way: claimed by a producer still writing, or not yet released by the consumers it
        runs after) or IDLE (nothing new). It never waits and never releases the GIL for long.
        """
        return EventPoller(self.consumer(after))

    # ---- introspection and lifetime --------------------------------------------------------------
    def peers(self) -> list[dict]:
        """Producer and consumer records: pid, heartbeat (CLOCK_MONOTONIC ns), alive, sequence."""
        self._check_open()
        out = ffi.new("sy_ring_peer[]", 128)
        n = lib.sy_ring_peers(self._handle, out, 128)
        return [{"kind": "consumer" if p.kind else "producer", "index": p.index, "pid": p.pid,
                 "heartbeat_ns": p.heartbeat_ns, "alive": bool(p.alive), "sequence": p.sequence,
                 "after": [i for i in range(MAX_CONSUMERS) if p.after_mask >> i & 1]} for p in out[0:n]]

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def cursor(self) -> int:
        """Single producer: the last published sequence; multi: the last claimed one."""
        self._check_open()
        info = ffi.new("sy_ring_info *")
        lib.sy_ring_get_info(self._handle, info)
        return int(info.cursor)

    def close(self, unlink: bool | None = None) -> None:
        """Close this process's producer and consumers and unmap the ring.

        A consumer that others run after is detached rather than closed: it stays registered,
        frozen at its last release (see Consumer._leave).

        unlink (named rings): remove the name too; by default only the creator does (and, if it
        never calls close, at interpreter exit). Only the segment this ring mapped is removed: a
        ring re-created under the name since is left alone.

        Safe while other threads are inside: their waits (get, get_batch, view_batch, publish on
        a full ring, claim) end with ClosedError, and each C handle is closed, and the ring
        unmapped, when the last call using it has returned (the handles are freed with their
        last reference). Views (view_batch, claim, a poller's records) keep the mapping alive.
        """
        if self._closed:
            return
        self._closed = True
        lib.sy_ring_shutdown(self._handle)  # every wait through this object ends at its next checkpoint
        for consumer in sorted(self._consumers, key=lambda c: -c.index):
            consumer._leave()
        self._producer = None  # its finaliser closes it: now, or when the last call inside returns
        self._last_batch = _NO_BATCH  # the caller's array is theirs to resize again
        self._slots = self._slots_read_only = None
        if self.name is not None and (self._owner if unlink is None else unlink):
            segment.unlink_own(self.name, self._nonce, self._inode)  # while mapped: it pins the inode
        elif self._owner:
            segment.forget_created(self._nonce)  # close(unlink=False): the creator means it to stay
        self._handle = None  # unmapped with its last reference (a call still inside holds one)

    def __enter__(self) -> "RingBuffer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        kind = f"dtype={self.dtype}" if self.dtype is not None else f"item_size={self.item_size}"
        where = f", name={self.name!r}" if self.name else ""
        layout = ", layout='contiguous'" if self.layout == "contiguous" else ""
        return (f"RingBuffer(capacity={self.capacity}, {kind}, producer={self.producer_kind!r}, "
                f"wait={self.wait!r}{where}{layout}{', closed' if self._closed else ''})")

    # ---- helpers ---------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("this RingBuffer was closed")

    def _raise(self, status: int, what: str, timeout_exc: type[Exception]) -> None:
        if status == SY_ETIMEDOUT:
            raise timeout_exc(f"{what}: timed out")
        if status == SY_ECLOSED and self._closed:
            raise ClosedError(f"{what}: this RingBuffer was closed (by another thread)")
        if status == _EBUSY:
            raise RuntimeError(f"{what}: another thread is publishing into this single-producer ring through "
                               f"the same RingBuffer at this moment (both would take the same slots); use "
                               f"producer='multi' for several publishing threads, or one thread per ring")
        if status == SY_ECLOSED:
            raise ClosedError(f"{what}: the stream was closed, or a peer process died (see peers())")
        _describe(status, what)

    def _encode(self, item):
        textual = isinstance(item, (bytes, bytearray, memoryview, str))
        if textual and self.dtype is not None and self.dtype.kind not in "SUV":
            # np.asarray(b"12345678", int64) would parse the digits: bytes are not this ring's items
            raise TypeError(f"this ring holds {self.dtype} items; got {type(item).__name__} "
                            f"(raw bytes go to a ring made with item_size=)")
        if self._pack is not None and not isinstance(item, np.ndarray):
            try:
                return self._pack(item)
            except struct.error as exc:
                raise ValueError(f"item {item!r} does not fit dtype {self.dtype}: {exc}") from None
        if self.dtype is None:
            # bytes(3) would be three zero bytes: a raw ring takes only what already is bytes
            if (not textual or isinstance(item, str)) and not (
                    isinstance(item, np.ndarray) and item.dtype == np.uint8 and item.ndim == 1):
                raise TypeError(f"a raw ring (item_size={self.item_size}) takes bytes, bytearray, memoryview "
                                f"or a 1-D uint8 array; got {type(item).__name__}")
            data = bytes(item) if not isinstance(item, (bytes, bytearray)) else item
            if len(data) > self.item_size:
                raise ValueError(f"item is {len(data)} bytes; this ring's items are at most "
                                 f"item_size={self.item_size} bytes")
            return bytes(data).ljust(self.item_size, b"\0")
        try:
            value = np.asarray(item, dtype=self.dtype)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"item {item!r} does not convert to dtype {self.dtype}: {exc}") from None
        if value.shape != ():
            raise ValueError(f"publish takes one item (shape ()); got shape {value.shape}: use publish_batch")
        return value.tobytes()

    def _as_batch(self, items) -> np.ndarray:
        if self.dtype is None:
            array = np.asarray(items)
            if array.dtype != np.uint8 or array.ndim != 2 or array.shape[1] != self.item_size:
                raise ValueError(f"a batch of raw items must be a uint8 array of shape (n, "
                                 f"{self.item_size}); got {array.dtype} {array.shape}")
            return np.ascontiguousarray(array)
        if type(items) is np.ndarray and items.dtype is self.dtype and items.ndim == 1 and items.flags.c_contiguous:
            return items  # the common case, checked in the fewest steps
        if not isinstance(items, np.ndarray):
            raise TypeError(f"items must be a NumPy array of dtype {self.dtype}; got {type(items).__name__}")
        if items.dtype != self.dtype:
            raise TypeError(f"items must have dtype {self.dtype}; got {items.dtype} "
                            f"(convert explicitly with .astype)")
        if items.ndim != 1:
            raise ValueError(f"items must be 1-D (one item per element); got shape {items.shape}")
        return np.ascontiguousarray(items)


# publish_batch's last array: (array, dtype, shape, strides, FFI pointer, n, producer, C arguments);
# the tuple keeps the array's buffer export and the producer alive for the raw pointers of the last
_NO_BATCH = (None,) * 8


def _item_layout(dtype, item_size) -> tuple[np.dtype | None, int]:
    if (dtype is None) == (item_size is None):
        raise ValueError("give exactly one of dtype= (a NumPy dtype) or item_size= (bytes per raw item)")
    if dtype is not None:
        try:
            dtype = np.dtype(dtype)
        except TypeError as exc:
            raise TypeError(f"dtype {dtype!r} is not a NumPy dtype: {exc}") from None
        if dtype.hasobject:
            raise TypeError(f"dtype {dtype} holds Python objects; a ring holds plain bytes")
        if dtype.itemsize < 1:
            raise ValueError(f"dtype {dtype} has itemsize 0; items need at least one byte")
        return dtype, dtype.itemsize
    if isinstance(item_size, bool) or not isinstance(item_size, (int, np.integer)):
        raise TypeError(f"item_size must be an int; got {type(item_size).__name__}")
    if not 1 <= item_size <= 1 << 30:
        raise ValueError(f"item_size must be in [1, 2**30] bytes; got {item_size}")
    return None, int(item_size)


def _scalar_codec(dtype):
    """struct pack/unpack for plain numeric dtypes: ~10x cheaper per item than NumPy scalars."""
    if dtype is None or dtype.fields is not None or dtype.shape or dtype.kind not in "biuf":
        return None, None
    if dtype.kind == "f" and dtype.itemsize == 2:
        fmt = "e"
    else:
        fmt = {("b", 1): "?", ("i", 1): "b", ("i", 2): "h", ("i", 4): "i", ("i", 8): "q",
               ("u", 1): "B", ("u", 2): "H", ("u", 4): "I", ("u", 8): "Q",
               ("f", 4): "f", ("f", 8): "d"}.get((dtype.kind, dtype.itemsize))
    if fmt is None:
        return None, None
    big = dtype.byteorder == ">" or (dtype.byteorder == "=" and sys.byteorder == "big")
    order = ">" if big else "<"
    codec = struct.Struct(order + fmt)
    return codec.pack, codec.unpack_from
