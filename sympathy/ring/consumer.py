"""Consumer and EventPoller: the ring's consumer side (waiting reads, zero-copy views, polling)."""
from __future__ import annotations

import enum
import queue
import sys
from typing import TYPE_CHECKING, Iterator

import numpy as np

from .._errors import SY_EINVAL, ClosedError
from ._core import (
    ARENA_BYTES, MAX_CONSUMERS, NOW_BYTES, READ_AHEAD, _NOT_NOW, _SLICE, _describe, _read_ahead,
    _read_now, _read_one, _rewait, _timeout_ns, ffi, lib,
)
from ._inplace import ViewBatch

_refcount = sys.getrefcount

if TYPE_CHECKING:  # the buffer imports this module, not the other way round
    from .buffer import RingBuffer


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
        # Items published (claimed) before this consumer joined, which it will never see: 0 for a
        # consumer declared at the ring's creation (RingBuffer(..., consumers=n)).
        self.missed = int(lib.sy_ring_consumer_sequence(out[0])) + 1
        self.after = list(after)
        self._n = ffi.new("int64_t *")
        self._hi = ffi.new("int64_t *")
        self._closed = False
        self._lost = 0  # `lost` once closed
        self._ahead: list = []  # taken by get() ahead of time, last item first
        # Items get()'s C call took (and released) into _ahead_array and not yet moved into _ahead:
        # the C call writes the count itself, so a Ctrl-C that lands before Python stored the items
        # leaves them here for the next call instead of losing them (_keep_ahead).
        self._ahead_n = ffi.new("int64_t *")
        # get_batch copies straight into a block and returns a slice of it: no allocation and no
        # second copy per batch. A part of the block that an array still alive shows is never
        # written again (see _arena_free); a new block replaces a full one, and goes when the last
        # array sliced from it goes. Until the first get_batch, an empty one.
        self._arena = np.empty((0, *ring._row_shape), dtype=ring._row_dtype)
        self._arena_ptr = None
        self._arena_at = self._arena_n = 0  # items handed out of it, and its length
        self._view = self._arena[0:0]  # the last slice handed out (kept: handed out again once dropped)
        self._view_n = 0
        arena = self._arena
        self._arena_unused = _refcount(arena)  # its reference count (through a local) when only _view holds a slice
        del arena
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
        if self._ahead_n[0]:  # a KeyboardInterrupt came right after the C call below: its items
            return self._keep_ahead().pop()
        t = -1 if timeout is None else _timeout_ns(timeout)
        handle = self._handle  # a local: a close() from another thread cannot free it under the call
        if handle is None:
            self._check_open()
        ring = self._ring
        if ring._unpack is not None:
            # The items land in _ahead_array, their count in _ahead_n: both written by C before
            # the call returns, so a KeyboardInterrupt raised as it returns loses none of them.
            status = _read_ahead(handle, self._ahead_ptr, READ_AHEAD, t, self._ahead_n)
            if status:
                if status == _SLICE:
                    status = _rewait(_read_ahead, (handle, self._ahead_ptr, READ_AHEAD), t, (self._ahead_n,))
                if status:
                    handle = None
                    ring._raise(status, "waiting for an item", queue.Empty)
            if self._ahead_n[0] == 1:
                item = ring._unpack(self._ahead_buf)[0]  # interrupted here: still counted, not lost
                self._ahead_n[0] = 0
                return item
            return self._keep_ahead().pop()
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

    def _keep_ahead(self) -> list:
        """Moves the _ahead_n[0] items get()'s C call took from _ahead_array into _ahead. Nothing
        is moved before the last two lines, plain stores where the interpreter does not run signal
        handlers: a KeyboardInterrupt at one of the calls before them leaves the items counted."""
        items = self._ahead_array[:self._ahead_n[0]].tolist()
        items.reverse()
        self._ahead = items
        self._ahead_n[0] = 0
        return items

    def _take_ahead(self, max_n: int) -> np.ndarray:
        """Items get() took but has not handed out yet, in order, as an array (a copy)."""
        if self._ahead_n[0]:
            self._keep_ahead()
        k = min(len(self._ahead), max_n)
        taken = self._ahead[-k:]
        del self._ahead[-k:]
        taken.reverse()
        return np.array(taken, dtype=self._ring._row_dtype)

    def get_batch(self, max_n: int, timeout: float | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """Up to max_n items that are ready (at least one): a copy, yours to keep.

        Waits only for the first item; returns at once with whatever else is already published.
        Without `out`, the array is sized to what is ready (not to max_n): a slice of a 1 MiB block
        that this consumer fills batch after batch and never writes twice (the block is freed with
        the last array sliced from it; `.copy()` one you keep for long); with `out` (a
        contiguous array of the ring's dtype and at least max_n items) the items land there and
        `out[:n]` comes back, with no allocation.
        """
        handle, arena, view = self._handle, self._arena, self._view  # locals: see _arena_free
        if type(max_n) is int and out is None and timeout is None and handle is not None and not self._ahead:
            # The common call, in the fewest steps: what is ready now, copied straight into the
            # block with the GIL kept (no wait, so no GIL handoff to another thread). When no slice
            # of the block is alive any more but the last one handed out, and nobody holds that one
            # (their reference counts say so: a batch dropped as it came), the block starts over:
            # the batch lands where the last one did, in lines still in L1, and that same array
            # object comes back when the count matches, as an allocator hands back a freed block.
            free = _refcount(view) == 3 and _refcount(arena) == self._arena_unused  # 3: view, _view, the call
            at = 0 if free else self._arena_at
            if 0 < max_n <= self._arena_n - at:  # read_now itself refuses while get()'s read-ahead is held
                n = _read_now(handle, self._arena_ptr, at, max_n)
                if n > 0:
                    self._arena_at = at + n
                    if free and n == self._view_n:
                        return view
                    view = self._view = arena[at:at + n]
                    self._view_n = n
                    return view
        del arena, view
        t = -1 if timeout is None else _timeout_ns(timeout)
        if isinstance(max_n, bool) or not isinstance(max_n, (int, np.integer)) or max_n < 1:
            raise ValueError(f"max_n must be an int >= 1; got {max_n!r}")
        max_n = int(max_n)
        if handle is None:
            self._check_open()
        if self._ahead or self._ahead_n[0]:
            return self._take_ahead(max_n)
        lib.sy_ring_ahead_taken(handle)  # nothing get() took is held back now: read_now may read on
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
        if max_n * ring.item_size <= NOW_BYTES:
            # The block (from its start if no slice of it is alive, a new one if it has no room for
            # max_n items), and what is ready copied into it: now with the GIL kept, else waiting
            # without it.
            self._new_arena(max_n)
            at = self._arena_at
            n = _read_now(handle, self._arena_ptr, at, max_n)
            if n == _NOT_NOW:
                self._read(handle, self._arena_ptr + at * ring.item_size, max_n, t)
                n = self._n[0]
            elif n < 0:
                handle = None
                ring._raise(n, "reading a batch", queue.Empty)
            self._arena_at = at + n
            view = self._view = self._arena[at:at + n]
            self._view_n = n
            return view
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

    def _arena_free(self) -> bool:
        """Whether no array sliced from the block is alive but the last one handed out (kept in
        _view), and nobody else holds that one: then nothing anyone can see is in the block. Each
        slice holds a reference to the block (NumPy makes the block every slice's base, views of
        views included), and a memoryview or an FFI pointer of a slice holds the slice."""
        arena, view = self._arena, self._view
        return _refcount(view) == 3 and _refcount(arena) == self._arena_unused

    def _new_arena(self, n: int) -> None:
        """A block for get_batch with room for n items from _arena_at: this one if it has room
        left, or from its start when nothing in it is seen any more (_arena_free), else a new one,
        the old left to the arrays still using it. Reusing it matters: a fresh 1 MiB block is 256
        pages to fault in, which cost more than the copies of the batches it holds (0.5-0.8 us a
        1 024-item batch, 2-core VM)."""
        if self._arena_n - self._arena_at >= n:
            return
        if self._arena_n >= n and self._arena_free():
            self._arena_at = 0
            return
        ring = self._ring
        items = max(n, ARENA_BYTES // ring.item_size)
        arena = np.empty((items, *ring._row_shape), dtype=ring._row_dtype)
        self._arena, self._arena_ptr = arena, ffi.from_buffer(arena)  # the pointer holds a reference too
        self._view, self._view_n = arena[0:0], 0
        # Its count when only _view holds a slice, as _arena_free and get_batch see it (through a local)
        self._arena_unused = _refcount(arena)
        self._arena_at, self._arena_n = 0, items

    def view_batch(self, max_n: int, timeout: float | None = None) -> ViewBatch:
        """`with c.view_batch(n) as items:` a read-only zero-copy view of up to n ready items.

        The view aliases ring slots: it is valid only inside the block; the slots are released to
        the producers when the block exits, after which they are overwritten. Copy what you keep.
        A batch never wraps around the ring's end, so it may be shorter than what is ready.
        """
        return ViewBatch(self, max_n, timeout)

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
        self.missed = consumer.missed  # items published before it joined (Consumer.missed)
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
