"""A Disruptor-style lock-free ring buffer for threads and processes (C core in c_src/ring_*.c).

    rb = sy.RingBuffer(1024, dtype=np.int64)          # private memory: threads of this process
    c = rb.consumer()                                 # create consumers before publishing
    rb.publish(7); rb.publish_batch(np.arange(100))
    c.get()            -> 7 (a Python scalar for plain dtypes)
    c.get_batch(64)    -> np.ndarray, a copy: yours to keep
    with c.view_batch(64) as view: ...                # zero-copy, valid only inside the block

    rb = sy.RingBuffer(1 << 16, dtype=np.int64, name="ticks")   # POSIX shared memory
    sy.RingBuffer.attach("ticks")                                # in another process: dtype from the segment

Timeouts follow the standard library's queue module: `timeout=None` waits as long as it takes,
`timeout=0` tries once, `publish*` raise `queue.Full` and `get*` raise `queue.Empty` when the time
runs out. A closed stream (after `close_stream()` and once drained), a dead upstream consumer or
a `close()` from another thread raises `sympathy.ClosedError`; dead producers and consumers are
reaped (see docs/ring.md, Liveness). Every wait happens in C with the GIL released, in slices of WAIT_SLICE_NS:
between slices the interpreter runs signal handlers, so Ctrl-C interrupts any wait.
"""
from __future__ import annotations

import contextlib
import enum
import errno
import queue
import struct
import sys
import threading
import weakref
from typing import Iterator, Sequence

import numpy as np

from ._errors import SY_ECLOSED, SY_EINVAL, SY_EOS, SY_ETIMEDOUT, SY_EUNSUPPORTED, ClosedError, check

try:
    from ._ring import ffi, lib
except ImportError as exc:  # pragma: no cover - only without a build
    raise ImportError("sympathy._ring is not built: run `pip install .` or "
                      "`python sympathy/_build/ring_build.py`") from exc

from . import ring_segment as segment  # noqa: E402  (after the build check above)
from .ring_segment import SHM_DIR, segment_name as _segment_name  # noqa: E402

__all__ = ["RingBuffer", "Consumer", "EventPoller", "PollState", "WAITS", "PRODUCERS"]

# Bound once: a module-global lookup is cheaper than `lib.name` on the per-item paths.
_write_one, _write_i64 = lib.sy_ring_write_one, lib.sy_ring_write_i64
_read_one, _read_ahead = lib.sy_ring_read_one, lib.sy_ring_read_ahead
_SLICE, _EBUSY = lib.SY_RING_WAIT_SLICE, lib.SY_RING_EBUSY
WAIT_SLICE_NS = 20_000_000  # a C wait comes back this often: Ctrl-C is seen within it (the target is 100 ms)
READ_AHEAD = 256  # items get() may take in one C call (plain numeric dtypes, no consumer after it)
SCRATCH_BYTES = 1 << 20  # get_batch lands in a kept buffer up to this size; larger asks allocate exactly

WAITS = {"busy_spin": lib.SY_WAIT_BUSY_SPIN, "yield": lib.SY_WAIT_YIELD, "sleep": lib.SY_WAIT_SLEEP,
         "blocking": lib.SY_WAIT_BLOCKING}
PRODUCERS = {"single": lib.SY_RING_SINGLE_PRODUCER, "multi": lib.SY_RING_MULTI_PRODUCER}
MAX_CONSUMERS = 64
_MAX_CAPACITY = 1 << 40


def _timeout_ns(timeout: float | None) -> int:
    if timeout is None:
        return -1
    if not isinstance(timeout, (int, float)) or timeout != timeout:
        raise TypeError(f"timeout must be a number of seconds or None; got {timeout!r}")
    if timeout < 0:
        raise ValueError(f"timeout must be >= 0 (or None to wait forever); got {timeout}")
    return int(timeout * 1e9) if timeout < 1e9 else -1  # beyond ~31 years: forever (fits int64)


def _rewait(call, before: tuple, t: int, after: tuple = ()) -> int:
    """Call `call(*before, t, *after)` again while it comes back for its wait slice (SY_RING_WAIT_SLICE:
    nothing was done, a whole slice passed), the timeout one slice shorter each time. Between the
    calls the interpreter runs signal handlers: Ctrl-C raises KeyboardInterrupt here, not after the
    wait. (Arguments, not a closure: a closure would cost the per-item fast paths cell objects.)"""
    while True:
        if t > 0:
            t = max(t - WAIT_SLICE_NS, 0)
        status = call(*before, t, *after)
        if status != _SLICE:
            return status


def _segment_version(name: str) -> str:
    """The format version word of a named segment (offset 8 in every version), for error messages."""
    try:
        with open(f"{SHM_DIR}/{name}", "rb") as f:
            f.seek(8)
            return str(int.from_bytes(f.read(4), sys.byteorder))
    except OSError:
        return "unknown"


def _describe(status: int, what: str) -> None:
    """check(), with the errno of a failed OS call attached."""
    check(status, what, os_errno=ffi.errno or None)


class RingBuffer:
    """A bounded ring of fixed-size items with one or many producers and any consumer graph.

    capacity: slots, a power of two (>= 2). dtype: a NumPy dtype (plain or structured), or
    item_size: bytes per item for raw byte items. producer: "single" (one publishing thread in
    one process) or "multi" (any threads, any processes). wait: how a side waits when it has to:
    "busy_spin" (lowest latency, burns a core: only with a core per thread), "yield", "sleep"
    (backoff) or "blocking" (futex; the default, right whenever threads outnumber cores).
    name: create a named POSIX shared-memory segment (mode 0600) that other processes attach to.
    """

    def __init__(self, capacity: int, dtype=None, *, item_size: int | None = None,
                 producer: str = "single", wait: str = "blocking", name: str | None = None):
        dtype, size = _item_layout(dtype, item_size)
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)):
            raise TypeError(f"capacity must be an int; got {type(capacity).__name__}")
        capacity = int(capacity)
        if capacity < 2 or capacity & (capacity - 1) or capacity > _MAX_CAPACITY:
            raise ValueError(f"capacity must be a power of two in [2, 2**40]; got {capacity}")
        if producer not in PRODUCERS:
            raise ValueError(f"producer must be one of {sorted(PRODUCERS)}; got {producer!r}")
        if wait not in WAITS:
            raise ValueError(f"wait must be one of {sorted(WAITS)}; got {wait!r}")
        item_type = ffi.new("char[]", segment.dtype_text(dtype))
        config = ffi.new("sy_ring_config *", {"capacity": capacity, "slot_size": size, "item_type": item_type,
                                              "producer_kind": PRODUCERS[producer], "wait": WAITS[wait]})
        out = ffi.new("sy_ring **")
        if name is None:
            _describe(lib.sy_ring_create(config, ffi.NULL, out), "creating a ring")
        else:
            segment.create_named(config, name, out)
        self._setup(out[0], dtype, name, owner=True)
        if name is not None:
            self._inode = segment.remember_created(name, self._nonce)

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
        self._owner = owner
        self._nonce = int(lib.sy_ring_nonce(handle))
        self._inode = None
        self._producer = None
        self._producer_lock = threading.Lock()
        self._consumers: weakref.WeakSet[Consumer] = weakref.WeakSet()
        self._closed = False
        lib.sy_ring_set_wait_slice(handle, WAIT_SLICE_NS)
        lib.sy_ring_refuse_concurrent_claims(handle, 1)  # one object, any thread: refuse, never duplicate
        # Each slot is an 8-byte "published" header followed by the item, so the items sit one
        # slot_stride apart: a strided (not contiguous) array over the ring, zero-copy all the same.
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
        self._pack, self._unpack = _scalar_codec(dtype)
        self._int64 = dtype is not None and dtype == np.dtype(np.int64)

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
        t = -1 if timeout is None else _timeout_ns(timeout)
        array = self._as_batch(items)
        n = len(array)
        if n == 0:
            return
        producer = self._producer
        if producer is None:
            producer = self._producer_handle()
        written = ffi.new("int64_t *")  # per call: several threads may publish to a multi-producer ring
        status = lib.sy_ring_write(producer, ffi.from_buffer(array), n, t, written)
        if status:
            done = written[0]
            while status == _SLICE:  # what went out stays out; the rest follows (signals run in between)
                t = max(t - WAIT_SLICE_NS, 0) if t > 0 else t
                status = lib.sy_ring_write(producer, ffi.from_buffer(array[done:]), n - done, t, written)
                done += written[0]
            if status:
                producer = None
                self._raise(status, f"publishing a batch ({done} of {n} items published)", queue.Full)

    @contextlib.contextmanager
    def claim(self, n: int, timeout: float | None = None) -> Iterator[np.ndarray]:
        """`with rb.claim(n) as slots: slots[:] = ...`: write n items in place, published on exit.

        The array is a view into the ring when the n slots are contiguous, else a scratch array
        copied in at publish. Claimed slots are always published, even if the block raises (a
        claimed sequence that is never published would stall every consumer).
        """
        t = _timeout_ns(timeout)
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= self.capacity:
            raise ValueError(f"n must be an int in [1, capacity={self.capacity}]; got {n!r}")
        producer, slots, n = self._producer_handle(), self._slots, int(n)
        hi = ffi.new("int64_t *", -1)  # stays -1 unless the claim succeeds: then it must be published
        view, contiguous = None, True
        try:
            status = lib.sy_ring_claim(producer, n, t, hi)
            if status == _SLICE:
                status = _rewait(lib.sy_ring_claim, (producer, n), t, (hi,))
            if status:
                self._raise(status, f"claiming {n} slots", queue.Full)
            start = (hi[0] - n + 1) & (self.capacity - 1)
            contiguous = start + n <= self.capacity
            view = slots[start:start + n] if contiguous else np.zeros((n, *self._row_shape), slots.dtype)
            yield view
        finally:
            if hi[0] >= 0:  # even on Ctrl-C: a claim never published would stall every consumer
                if view is not None and not contiguous:
                    head = self.capacity - start
                    slots[start:] = view[:head]
                    slots[:n - head] = view[head:]
                lib.sy_ring_publish(producer, hi[0] - n + 1, hi[0])

    def close_stream(self) -> None:
        """End of stream: producers can publish no more; consumers drain, then get ClosedError."""
        self._check_open()
        lib.sy_ring_close_stream(self._handle)

    # ---- consumers -----------------------------------------------------------------------------
    def consumer(self, after: Sequence["Consumer | int"] = ()) -> "Consumer":
        """A new consumer that sees every item published from now on, after the given consumers.

        after: consumers (or their `index`, for consumers of another process) this one runs behind:
        a pipeline is `c2 = rb.consumer(after=[c1])`, a diamond `c3 = rb.consumer(after=[c1, c2])`.
        Only consumers nothing runs after hold the producers back. Create consumers before
        publishing: with no consumer the producers never wait and items are overwritten unseen.
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
        self._slots = None
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
        return (f"RingBuffer(capacity={self.capacity}, {kind}, producer={self.producer_kind!r}, "
                f"wait={self.wait!r}{where}{', closed' if self._closed else ''})")

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


class Consumer:
    """One reader of the ring: sees every item once, in order. Use it from one thread at a time."""

    def __init__(self, ring: RingBuffer, after: list[int]):
        self._ring = ring
        out = ffi.new("sy_ring_consumer **")
        after_c = ffi.new("int[]", after) if after else ffi.NULL
        status = lib.sy_ring_consumer_open(ring._handle, after_c, len(after), out)
        if status == SY_EINVAL:
            raise ValueError(f"after={after}: every index must name a live consumer of this ring, and a "
                             f"ring has at most {MAX_CONSUMERS} consumers")
        _describe(status, "opening a consumer")
        # The C handle holds a reference on the mapping, so finalisers may run in any order; a
        # consumer that others still run after is detached by it rather than closed.
        self._handle = ffi.gc(out[0], lib.sy_ring_consumer_leave)
        self.index = int(lib.sy_ring_consumer_index(out[0]))
        self.after = list(after)
        self._n = ffi.new("int64_t *")
        self._hi = ffi.new("int64_t *")
        self._closed = False
        self._lost = 0  # `lost` once closed
        self._ahead: list = []  # taken by get() ahead of time, last item first
        self._scratch = self._scratch_ptr = None  # get_batch's landing buffer
        if ring._unpack is not None:
            self._ahead_array = np.empty(READ_AHEAD, dtype=ring.dtype)
            self._ahead_buf = memoryview(self._ahead_array).cast("B")
            self._ahead_ptr = ffi.from_buffer(self._ahead_array)

    @property
    def sequence(self) -> int:
        """The last sequence this consumer released (-1 before the first)."""
        handle = self._open_handle()
        return int(lib.sy_ring_consumer_sequence(handle))

    @property
    def lost(self) -> int:
        """Sequences skipped because the producer that claimed them died before publishing
        (multi-producer rings): they were never published, so no item of a live producer is in it."""
        handle = self._handle
        return self._lost if handle is None else int(lib.sy_ring_consumer_lost(handle))

    def get(self, timeout: float | None = None):
        """The next item: a Python scalar for plain numeric dtypes, a NumPy record (copy) for
        structured ones, bytes for raw items. queue.Empty if nothing arrives in time.

        For plain numeric dtypes, when no other consumer runs after this one, get() takes every
        ready item (up to READ_AHEAD) in one C call and hands them out one by one: `sequence`
        then runs ahead of what get() has returned. With consumers after it, it takes one at a
        time, so they never see an item before get() has returned it here.
        """
        ahead = self._ahead
        if ahead:
            return ahead.pop()
        t = -1 if timeout is None else _timeout_ns(timeout)
        handle = self._handle  # a local: a close() from another thread cannot free it under the call
        if handle is None:
            self._check_open()
        ring = self._ring
        if ring._unpack is not None:
            status = _read_ahead(handle, self._ahead_ptr, READ_AHEAD, t, self._n)
            if status:
                if status == _SLICE:
                    status = _rewait(_read_ahead, (handle, self._ahead_ptr, READ_AHEAD), t, (self._n,))
                if status:
                    handle = None
                    ring._raise(status, "waiting for an item", queue.Empty)
            n = self._n[0]
            if n == 1:
                return ring._unpack(self._ahead_buf)[0]
            items = self._ahead_array[:n].tolist()
            items.reverse()
            self._ahead = items
            return items.pop()
        item = bytearray(ring.item_size)  # per call: the caller keeps what get() returns
        status = _read_one(handle, ffi.from_buffer(item), t)
        if status == _SLICE:
            status = _rewait(_read_one, (handle, ffi.from_buffer(item)), t)
        if status:
            handle = None
            ring._raise(status, "waiting for an item", queue.Empty)
        if ring.dtype is None:
            return bytes(item)
        return np.frombuffer(item, dtype=ring.dtype)[0]

    def _take_ahead(self, max_n: int) -> np.ndarray:
        """Items get() took but has not handed out yet, in order, as an array (a copy)."""
        k = min(len(self._ahead), max_n)
        taken = self._ahead[-k:]
        del self._ahead[-k:]
        taken.reverse()
        return np.array(taken, dtype=self._ring._row_dtype)

    def get_batch(self, max_n: int, timeout: float | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """Up to max_n items that are ready (at least one): a copy, yours to keep.

        Waits only for the first item; returns at once with whatever else is already published.
        Without `out`, the array is sized to what is ready (not to max_n); with `out` (a
        contiguous array of the ring's dtype and at least max_n items) the items land there and
        `out[:n]` comes back, with no allocation.
        """
        t = -1 if timeout is None else _timeout_ns(timeout)
        if isinstance(max_n, bool) or not isinstance(max_n, (int, np.integer)) or max_n < 1:
            raise ValueError(f"max_n must be an int >= 1; got {max_n!r}")
        max_n = int(max_n)
        handle = self._handle  # a local: a close() from another thread cannot free it under the call
        if handle is None:
            self._check_open()
        if self._ahead:
            return self._take_ahead(max_n)
        ring = self._ring
        if out is not None:
            if not isinstance(out, np.ndarray) or out.dtype != ring._row_dtype \
                    or out.shape[1:] != ring._row_shape or not out.flags.c_contiguous \
                    or not out.flags.writeable or len(out) < max_n:
                raise ValueError(f"out must be a writeable contiguous array of dtype {ring._row_dtype}, "
                                 f"item shape {ring._row_shape} and at least max_n={max_n} items")
            self._read(handle, ffi.from_buffer(out), max_n, t)
            return out[:self._n[0]]
        max_n = min(max_n, ring.capacity)  # never more is ready
        if max_n * ring.item_size <= SCRATCH_BYTES:
            # One C call (wait + copy + release) into a scratch buffer kept for the next call, then
            # a NumPy copy sized to what came: every C call releases the GIL, and with another
            # Python thread running each release costs a GIL handoff (docs/ring.md, threads batched).
            scratch, pointer = self._scratch_for(max_n)
            status = lib.sy_ring_read(handle, pointer, max_n, t, self._n)  # per batch: no extra call
            if status:
                self._read(handle, pointer, max_n, t, status)
            return scratch[:self._n[0]].copy()
        # Large items: wait, then allocate exactly what is ready (no max_n-sized scratch to keep).
        self._wait(handle, t)
        n = min(self._hi[0] - lib.sy_ring_consumer_sequence(handle), max_n)
        batch = np.empty((n, *ring._row_shape), dtype=ring._row_dtype)
        self._read(handle, ffi.from_buffer(batch), n, 0)  # ready a moment ago, and only we consume them
        return batch

    def _read(self, handle, pointer, max_n: int, t: int, status: int | None = None) -> None:
        """sy_ring_read into pointer (self._n[0] items), in wait slices; raises what a failure means.
        status: what the caller's own first call returned, if it made one."""
        if status is None:
            status = lib.sy_ring_read(handle, pointer, max_n, t, self._n)
        if status == _SLICE:
            status = _rewait(lib.sy_ring_read, (handle, pointer, max_n), t, (self._n,))
        if status:
            handle = None
            self._ring._raise(status, "waiting for a batch", queue.Empty)

    def _wait(self, handle, t: int) -> None:
        """sy_ring_wait_for (the last readable sequence in self._hi[0]), in wait slices."""
        status = lib.sy_ring_wait_for(handle, t, self._hi)
        if status == _SLICE:
            status = _rewait(lib.sy_ring_wait_for, (handle,), t, (self._hi,))
        if status:
            handle = None
            self._ring._raise(status, "waiting for a batch", queue.Empty)

    def _scratch_for(self, n: int):
        """A buffer of at least n items (grown, never shrunk; at most the ring's capacity)."""
        if self._scratch is None or len(self._scratch) < n:
            ring = self._ring
            self._scratch = np.empty((n, *ring._row_shape), dtype=ring._row_dtype)
            self._scratch_ptr = ffi.from_buffer(self._scratch)
        return self._scratch, self._scratch_ptr

    @contextlib.contextmanager
    def view_batch(self, max_n: int, timeout: float | None = None) -> Iterator[np.ndarray]:
        """`with c.view_batch(n) as items:` a read-only zero-copy view of up to n ready items.

        The view aliases ring slots: it is valid only inside the block; the slots are released to
        the producers when the block exits, after which they are overwritten. Copy what you keep.
        A batch never wraps around the ring's end, so it may be shorter than what is ready.
        """
        t = _timeout_ns(timeout)
        if isinstance(max_n, bool) or not isinstance(max_n, (int, np.integer)) or max_n < 1:
            raise ValueError(f"max_n must be an int >= 1; got {max_n!r}")
        handle = self._open_handle()
        if self._ahead:  # what get() already took comes first (already released: a copy)
            taken = self._take_ahead(int(max_n))
            taken.flags.writeable = False
            yield taken
            return
        ring, slots = self._ring, self._ring._slots
        self._wait(handle, t)
        lo = lib.sy_ring_consumer_sequence(handle) + 1
        start = lo & (ring.capacity - 1)
        n = min(self._hi[0] - lo + 1, int(max_n), ring.capacity - start)
        view = slots[start:start + n]  # holds the mapping: kept past close(), it reads stale items
        view.flags.writeable = False
        try:
            yield view
        finally:
            lib.sy_ring_release(handle, lo + n - 1)

    def __iter__(self) -> Iterator:
        """Items until the stream is closed and drained."""
        while True:
            try:
                yield self.get()
            except ClosedError:
                return

    def close(self) -> None:
        """Leave the ring; consumers that run after this one must be closed first."""
        if self._closed:
            return
        handle = self._handle
        self._lost = int(lib.sy_ring_consumer_lost(handle))
        status = lib.sy_ring_consumer_close(handle)
        if status == SY_EINVAL:
            raise ValueError(f"consumer {self.index} still has consumers running after it: close them first")
        _describe(status, "closing a consumer")
        ffi.gc(handle, None)
        self._handle = None
        self._closed = True

    def _leave(self) -> None:
        """The ring's close(): drop the handle. Its finaliser closes it (or, when consumers of other
        processes run after this one, detaches it: registered, its sequence frozen so they drain up
        to it), now or, if another thread is inside a call on it, when that call returns."""
        if self._closed:
            return
        self._lost = int(lib.sy_ring_consumer_lost(self._handle))
        self._closed = True
        self._handle = None

    def _open_handle(self):
        """The C handle, in a local of the caller: a close() from another thread cannot free it
        while the caller's call is inside."""
        handle = self._handle
        if handle is None or self._ring._closed:
            raise ClosedError("this consumer (or its ring) was closed")
        return handle

    def _check_open(self) -> None:
        self._open_handle()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Consumer(index={self.index}, after={self.after})"


class PollState(enum.IntEnum):
    """What EventPoller.poll found (LMAX's PollState); the values are the C enum's."""
    PROCESSING = lib.SY_POLL_PROCESSING
    GATING = lib.SY_POLL_GATING
    IDLE = lib.SY_POLL_IDLE


class EventPoller:
    """LMAX's EventPoller: a consumer driven by your loop, `poll(handler)` -> PollState.

    Make one with `rb.poller(after=[...])`. Other consumers may run after it (`after=[poller]`).
    The handler gets `(event, sequence, end_of_batch)`: a Python scalar for plain numeric dtypes,
    a read-only record (np.void, a view valid during the call) for structured ones, bytes for raw
    items. Returning False stops the batch after that event (any other value goes on). Events are
    released once handled, so consumers after this one see them only then. If the handler raises,
    the events before it stay handled and the one that raised comes again on the next poll (as in
    the Disruptor); the exception propagates. After close_stream() and once drained, poll raises
    ClosedError. A dead producer's open claim is skipped and counted in `lost`.
    """

    def __init__(self, consumer: Consumer):
        self._consumer = consumer
        self.index = consumer.index
        self.after = consumer.after
        ring = consumer._ring
        self._mask = ring.capacity - 1
        self._plain = ring._unpack is not None
        self._raw = ring.dtype is None

    @property
    def sequence(self) -> int:
        """The last sequence handled (and released)."""
        return self._consumer.sequence

    @property
    def lost(self) -> int:
        """Sequences skipped because their producer died before publishing (Consumer.lost)."""
        return self._consumer.lost

    def poll(self, handler) -> PollState:
        c = self._consumer
        handle, slots = c._open_handle(), c._ring._slots
        status = lib.sy_ring_poll_ready(handle, c._hi)
        if status < 0:
            handle = None
            c._ring._raise(status, "polling", queue.Empty)
        if status != lib.SY_POLL_PROCESSING:
            return PollState(status)
        lo, hi = lib.sy_ring_consumer_sequence(handle) + 1, c._hi[0]
        handled = lo - 1
        try:
            for sequence, event in self._events(slots, lo, hi):
                go_on = handler(event, sequence, sequence == hi)
                handled = sequence
                if go_on is False:
                    break
        finally:
            if handled >= lo:
                lib.sy_ring_release(handle, handled)
        return PollState.PROCESSING

    def _events(self, slots: np.ndarray, lo: int, hi: int) -> Iterator[tuple[int, object]]:
        """(sequence, event) for lo..hi, read from the ring in at most two pieces (the wrap)."""
        capacity = self._mask + 1
        s = lo
        while s <= hi:
            start = s & self._mask
            n = min(hi - s + 1, capacity - start)
            piece = slots[start:start + n]
            piece.flags.writeable = False
            if self._plain:
                events = piece.tolist()
            elif self._raw:
                events = [bytes(row) for row in piece]
            else:
                events = piece
            for i in range(n):
                yield s + i, events[i]
            s += n

    def close(self) -> None:
        """Leave the ring; consumers that run after this poller must be closed first."""
        self._consumer.close()

    def __enter__(self) -> "EventPoller":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EventPoller(index={self.index}, after={self.after})"


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


# The DSL lives in its own module (sympathy/disruptor.py) but belongs to this subject: re-exported
# here, after everything it imports from this module exists, so one import line registers both.
from .disruptor import Disruptor, EventHandlerGroup  # noqa: E402

__all__ += ["Disruptor", "EventHandlerGroup"]
