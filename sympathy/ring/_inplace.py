"""What `RingBuffer.claim` and `Consumer.view_batch` return: context managers over slots written
or read in place (the zero-copy frames' path: docs/pipeline.md, "Frames without the Python per
frame").

Classes with __enter__/__exit__ rather than @contextlib.contextmanager generators: a generator
context manager costs a generator, a wrapper object and two resumptions a block (~1.5 us on the
2-core VM, a quarter of a small frame's whole handover). The semantics are the generators' they
replace: arguments are checked when the block is entered, claimed slots are always published
(even when the block raises, or an exception lands between the claim and the block), and the
slots a view shows go back to the producers when its block exits.
"""
from __future__ import annotations

import queue

import numpy as np

from ._core import _NOT_NOW, _SLICE, _rewait, _timeout_ns, ffi, lib

_claim_now, _claim, _publish = lib.sy_ring_claim_now, lib.sy_ring_claim, lib.sy_ring_publish
_release = lib.sy_ring_release


class Claim:
    """`with rb.claim(n) as slots:` n slots to write in place, published when the block ends."""

    __slots__ = ("_ring", "_n", "_timeout", "_producer", "_hi", "_lo", "_start", "_view")

    def __init__(self, ring, n, timeout):
        self._ring, self._n, self._timeout, self._hi = ring, n, timeout, None

    def __enter__(self) -> np.ndarray:
        ring, n, timeout = self._ring, self._n, self._timeout
        t = -1 if timeout is None else _timeout_ns(timeout)
        capacity = ring.capacity
        if type(n) is not int and (isinstance(n, bool) or not isinstance(n, (int, np.integer))) or not 1 <= n <= capacity:
            raise ValueError(f"n must be an int in [1, capacity={capacity}]; got {n!r}")
        n = self._n = int(n)
        producer = self._producer = ring._producer or ring._producer_handle()
        hi = self._hi = ffi.new("int64_t *", -1)  # stays -1 unless the claim succeeds: then it must be published
        try:
            status = _claim_now(producer, n, hi)  # no wait: the GIL kept (sympathy/_build/ring_build.py)
            if status == _NOT_NOW:
                status = _claim(producer, n, t, hi)
                if status == _SLICE:
                    status = _rewait(_claim, (producer, n), t, (hi,))
            if status:
                ring._raise(status, f"claiming {n} slots", queue.Full)
            lo = self._lo = hi[0] - n + 1
            start = self._start = lo & (capacity - 1)
            slots = ring._slots
            if start + n <= capacity:
                self._view = None
                return slots[start:start + n]
            view = self._view = np.zeros((n, *ring._row_shape), slots.dtype)  # copied in at publish
            return view
        except BaseException:
            self._publish()  # a claim never published would stall every consumer
            raise

    def __exit__(self, exc_type, exc, tb) -> None:
        self._publish()  # even when the block raised: a claimed sequence must be published

    def _publish(self) -> None:
        hi = self._hi
        if hi is None or hi[0] < 0:
            return
        view, last = self._view, hi[0]
        hi[0] = -1  # once
        if view is not None:
            slots, start, head = self._ring._slots, self._start, self._ring.capacity - self._start
            slots[start:] = view[:head]
            slots[:self._n - head] = view[head:]
        _publish(self._producer, last - self._n + 1, last)


class ViewBatch:
    """`with c.view_batch(n) as items:` a read-only view of up to n ready items, released on exit."""

    __slots__ = ("_consumer", "_max_n", "_timeout", "_handle", "_upto")

    def __init__(self, consumer, max_n, timeout):
        self._consumer, self._max_n, self._timeout, self._upto = consumer, max_n, timeout, None

    def __enter__(self) -> np.ndarray:
        c, max_n, timeout = self._consumer, self._max_n, self._timeout
        t = -1 if timeout is None else _timeout_ns(timeout)
        if type(max_n) is not int and (isinstance(max_n, bool) or not isinstance(max_n, (int, np.integer))) \
                or max_n < 1:
            raise ValueError(f"max_n must be an int >= 1; got {max_n!r}")
        handle = self._handle = c._open_handle()
        if c._ahead or c._ahead_n[0]:  # what get() already took comes first (released: a copy)
            taken = c._take_ahead(int(max_n))
            taken.flags.writeable = False
            return taken
        ring = c._ring
        c._wait(handle, t)
        lo = lib.sy_ring_consumer_sequence(handle) + 1
        capacity = ring.capacity
        start = lo & (capacity - 1)
        n = min(c._hi[0] - lo + 1, int(max_n), capacity - start)
        view = ring._slots_read_only[start:start + n]  # holds the mapping: kept past close(), it reads stale items
        self._upto = lo + n - 1
        return view

    def __exit__(self, exc_type, exc, tb) -> None:
        upto, self._upto = self._upto, None
        if upto is not None:
            _release(self._handle, upto)
