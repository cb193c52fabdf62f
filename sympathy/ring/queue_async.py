"""asyncio for sympathy.Queue: `await q.get_async()` and `await q.put_async(obj)`.

The event loop never blocks: each attempt is the non-blocking `get_nowait` / `put_nowait`, and
between attempts a worker thread of the loop's default executor waits in C for something to try
again for (a record at the head, room below maxsize), one 50 ms slice at a time. That thread takes
and holds nothing, so a coroutine cancelled while it waits loses no item (a waiting thread simply
finishes its slice); the take itself always happens on the event loop. Several coroutines and
processes may wait on one queue: a wake-up lets each try, and whoever loses the race waits again.
"""
from __future__ import annotations

import queue
import time

from .._ring import lib
from ._queue_core import _SLICE_NS, WAIT_SLICE_S, _timeout_ns


class AsyncMixin:
    """sympathy.Queue's coroutine methods (the queue's own state is set up by Queue)."""

    async def get_async(self, timeout: float | None = None):
        """Remove and return an item without blocking the event loop; queue.Empty after `timeout`
        seconds (None: wait for ever)."""
        deadline = _deadline(timeout)
        while True:
            try:
                return self.get_nowait()
            except queue.Empty:
                pass
            await self._wait_in_thread(lib.sy_queue_wait_item, deadline, queue.Empty)

    async def put_async(self, obj, timeout: float | None = None) -> None:
        """Put obj without blocking the event loop: at once, unless maxsize is reached (then
        queue.Full after `timeout` seconds; None: wait for ever). Ring space is never waited for
        (put spills, as put() does)."""
        deadline = _deadline(timeout)
        while True:
            try:
                return self.put_nowait(obj)
            except queue.Full:
                pass
            await self._wait_in_thread(lib.sy_queue_wait_room, deadline, queue.Full)

    async def _wait_in_thread(self, wait, deadline: float | None, timeout_exc: type) -> None:
        if self._closed:
            raise ValueError(f"Queue {self!r} is closed")
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise timeout_exc
        slice_ns = _SLICE_NS if left is None or left > WAIT_SLICE_S else max(0, int(left * 1e9))
        import asyncio  # here, not at the top: `import sympathy` should not pay for asyncio

        await asyncio.get_running_loop().run_in_executor(None, wait, self._handle, slice_ns)


def _deadline(timeout) -> float | None:
    t = _timeout_ns(True, timeout)  # the same checks as get/put: a TypeError for a bad timeout
    return None if t < 0 else time.monotonic() + t / 1e9
