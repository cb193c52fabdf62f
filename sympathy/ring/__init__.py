"""A Disruptor-style lock-free ring buffer for threads and processes (C core in c_src/ring_*.c).

The subject's modules: buffer (RingBuffer: the handle and its producer side), consumer (Consumer,
EventPoller), segment (the named shared-memory segment), disruptor (the DSL); _core holds what they
share. Each imports only those before it, so there is no import circle.

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
from ._core import PRODUCERS, WAIT_SLICE_NS, WAITS
from .buffer import RingBuffer
from .consumer import Consumer, EventPoller, PollState
from .disruptor import Disruptor, EventHandlerGroup
from .queue import JoinableQueue, Queue

__all__ = ["RingBuffer", "Consumer", "EventPoller", "PollState", "WAITS", "PRODUCERS", "WAIT_SLICE_NS",
           "Disruptor", "EventHandlerGroup", "Queue", "JoinableQueue"]
