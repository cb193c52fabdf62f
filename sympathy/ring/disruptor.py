"""The Disruptor DSL over sy.RingBuffer: event handlers on threads, wired as a dependency graph.

    d = sy.Disruptor(1024, dtype=np.int64)
    d.handle_events_with(journal, replicate).then(business_logic)   # a diamond
    d.start()
    d.publish_batch(np.arange(10_000))
    d.shutdown(timeout=5)        # drains, halts, joins; re-raises a handler's unhandled error

A handler is `handler(events, sequence, end_of_batch)`: `events` is a read-only NumPy view of the
ready items starting at `sequence`; it is valid only during the call (copy what you keep).
`end_of_batch` is True when nothing more was ready: the place to flush (LMAX's endOfBatch).
Each handler runs on its own thread (its BatchEventProcessor); it sees every event once, in order,
after all the handlers it was chained `.then()` behind have seen it.

Pinning (the seeds' core pinning, per handler): `handle_events_with(h, cpu=2)` / `.then(h, cpu=3)`
runs that handler's thread on CPU 2 only (sy.pin, set by the thread itself when it starts), so its
cache stays warm and the scheduler never moves it; cpu=(2, 3) gives one CPU per handler of the call,
None leaves a handler unpinned. A CPU outside this process's affinity mask is a ValueError when
wiring, before any thread starts.
"""
from __future__ import annotations

import os
import queue
import threading
import time
from typing import Callable, Sequence

import numpy as np

from .. import affinity
from .._errors import ClosedError
from .buffer import RingBuffer
from .consumer import Consumer

Handler = Callable[[np.ndarray, int, bool], None]
ExceptionHandler = Callable[[BaseException, int, np.ndarray], None]

_POLL_S = 0.05  # how often an idle processor looks at its halt flag


class EventHandlerGroup:
    """The handlers added by one call; `.then(...)` adds handlers that run after all of them."""

    def __init__(self, disruptor: "Disruptor", consumers: list[Consumer]):
        self._disruptor = disruptor
        self.consumers = consumers

    def then(self, *handlers: Handler, cpu: int | Sequence[int | None] | None = None) -> "EventHandlerGroup":
        return self._disruptor._add(handlers, after=self.consumers, cpu=cpu)

    handle_events_with = then


class _Processor:
    """One handler, one consumer, one thread: LMAX's BatchEventProcessor."""

    def __init__(self, disruptor: "Disruptor", handler: Handler, consumer: Consumer, cpu: int | None):
        self.disruptor = disruptor
        self.handler = handler
        self.consumer = consumer
        self.cpu = cpu
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        d, c = self.disruptor, self.consumer
        if self.cpu is not None:
            try:
                affinity.pin(self.cpu)  # this thread only: sched_setaffinity(0) acts on the caller
            except BaseException as exc:  # the mask changed since wiring: fail as a handler would
                self._fail(exc)
                return
        while not d._halted.is_set():
            try:
                with c.view_batch(d.batch_size, timeout=_POLL_S) as events:
                    sequence = c.sequence + 1
                    end_of_batch = sequence + len(events) - 1 == c._hi[0]
                    try:
                        self.handler(events, sequence, end_of_batch)
                    except Exception as exc:  # the exception handler decides: skip, or halt
                        if not self._handle(exc, sequence, events):
                            return
                    except BaseException as exc:  # KeyboardInterrupt, SystemExit: fatal, never lost
                        self._fail(exc)
                        return
            except queue.Empty:
                continue
            except ClosedError:
                return

    def _handle(self, exc: BaseException, sequence: int, events: np.ndarray) -> bool:
        handler = self.disruptor.exception_handler
        if handler is None:
            self._fail(exc)  # fatal by default
            return False
        try:
            handler(exc, sequence, events)
            return True
        except BaseException as fatal:
            self._fail(fatal)
            return False

    def _fail(self, exc: BaseException) -> None:
        """This processor stops; the Disruptor stops with it: its consumer would gate the ring for
        good, so a publisher would wait forever. The stream is closed: the other handlers drain
        what was published, publish*() raise ClosedError from `exc`, shutdown() re-raises it."""
        self.error = exc
        self.disruptor._failure = exc
        try:
            self.disruptor.ring.close_stream()
        except ClosedError:
            pass  # shutdown() closed the ring already


class Disruptor:
    """A ring buffer plus handler threads. Wire with handle_events_with/then, then start()."""

    def __init__(self, capacity: int, dtype=None, *, item_size: int | None = None, producer: str = "single",
                 wait: str = "blocking", batch_size: int = 1024,
                 exception_handler: ExceptionHandler | None = None):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1; got {batch_size!r}")
        self.ring = RingBuffer(capacity, dtype, item_size=item_size, producer=producer, wait=wait)
        self.batch_size = batch_size
        self.exception_handler = exception_handler
        self._processors: list[_Processor] = []
        self._halted = threading.Event()
        self._started = False
        self._failure: BaseException | None = None  # a handler's fatal error: the Disruptor stopped

    def handle_events_with(self, *handlers: Handler,
                           cpu: int | Sequence[int | None] | None = None) -> EventHandlerGroup:
        """Handlers that follow the producers directly (in parallel with each other). cpu: pin each
        handler's thread to this CPU, or one entry per handler (an int, or None for unpinned)."""
        return self._add(handlers, after=[], cpu=cpu)

    def _add(self, handlers, after: list[Consumer], cpu=None) -> EventHandlerGroup:
        if self._started:
            raise RuntimeError("add handlers before start()")
        if not handlers:
            raise ValueError("give at least one handler")
        for h in handlers:
            if not callable(h):
                raise TypeError(f"a handler must be callable as handler(events, sequence, end_of_batch); got {h!r}")
        cpus = _cpus_for(handlers, cpu)
        consumers = [self.ring.consumer(after=after) for _ in handlers]
        self._processors += [_Processor(self, h, c, k) for h, c, k in zip(handlers, consumers, cpus)]
        return EventHandlerGroup(self, consumers)

    # ---- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> "Disruptor":
        if self._started:
            raise RuntimeError("this Disruptor was already started")
        if not self._processors:
            raise RuntimeError("no handlers: call handle_events_with(...) first")
        self._started = True
        for i, p in enumerate(self._processors):
            p.thread = threading.Thread(target=p.run, name=f"disruptor-handler-{i}", daemon=True)
            p.thread.start()
        return self

    def publish(self, item, timeout: float | None = None) -> None:
        try:
            self.ring.publish(item, timeout)
        except ClosedError as exc:
            self._raise_failure(exc)

    def publish_batch(self, items, timeout: float | None = None) -> None:
        try:
            self.ring.publish_batch(items, timeout)
        except ClosedError as exc:
            self._raise_failure(exc)

    def _raise_failure(self, closed: ClosedError) -> None:
        if self._failure is None:
            raise closed
        raise ClosedError(f"the Disruptor stopped: a handler raised {self._failure!r} "
                          f"(no exception_handler, or it re-raised)") from self._failure

    def halt(self) -> None:
        """Stop the handler threads at their next batch boundary, processed or not."""
        self._halted.set()
        for p in self._processors:
            if p.thread is not None:
                p.thread.join()

    def shutdown(self, timeout: float | None = None) -> None:
        """Wait until every handler has seen everything published, then halt and close the ring.

        TimeoutError if the handlers have not caught up within `timeout` seconds (they are halted
        anyway); a handler's unhandled exception is re-raised here.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        drained = False
        while self._started:
            target = self.ring.cursor
            if all(p.consumer.sequence >= target or p.error or not p.thread.is_alive() for p in self._processors):
                drained = True
                break
            if deadline is not None and time.monotonic() > deadline:
                break
            time.sleep(0.001)
        # Halt, joining each thread only until the deadline: a handler stuck inside its call is
        # left running (a daemon thread); closing the ring ends its next wait, and the view it
        # holds keeps the mapping alive.
        self._halted.set()
        for p in self._processors:
            if p.thread is not None:
                p.thread.join(None if deadline is None else max(deadline - time.monotonic(), 0))
        stuck = sum(p.thread is not None and p.thread.is_alive() for p in self._processors)
        errors = [p.error for p in self._processors if p.error is not None]
        self.ring.close()
        if errors:
            raise errors[0]
        if self._started and not drained:
            raise TimeoutError(f"handlers did not catch up within {timeout} s; halted anyway"
                               + (f" ({stuck} still inside a handler call, left to finish it)" if stuck else ""))

    def __enter__(self) -> "Disruptor":
        return self

    def __exit__(self, *exc) -> None:
        if not self.ring.closed:
            self.shutdown()


def _cpus_for(handlers: tuple, cpu) -> list[int | None]:
    """One CPU (or None) per handler, each checked against this process's affinity mask."""
    if cpu is None or isinstance(cpu, (int, np.integer)) and not isinstance(cpu, bool):
        cpus = [cpu] * len(handlers)
    elif isinstance(cpu, (list, tuple)):
        if len(cpu) != len(handlers):
            raise ValueError(f"cpu has {len(cpu)} entries for {len(handlers)} handlers: give one CPU (or None) "
                             f"per handler, or a single int for all of them")
        cpus = list(cpu)
    else:
        raise TypeError(f"cpu must be an int, None, or a list/tuple of one per handler; got {type(cpu).__name__}")
    usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    for c in cpus:
        if c is None:
            continue
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)):
            raise TypeError(f"a handler's cpu must be an int or None; got {c!r}")
        if usable is not None and int(c) not in usable:
            raise ValueError(f"cpu {c} is not in this process's affinity mask {usable}: a handler can be "
                             f"pinned only to a CPU the process may run on (see taskset / sy.pin)")
    return [None if c is None else int(c) for c in cpus]
