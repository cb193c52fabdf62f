"""The GIL handoff (c_src/ring_wait.c, "The GIL handoff"): a satisfied wait whose peer is a thread
of this process waits on, GIL released, until another thread of the process is inside a ring wait
too, at most 50 us. It must change nothing a caller sees: every item once and in order, whatever
the layout, wait strategy and call mix; a peer that never waits in a ring delays a wait by a
bounded time, never for good; two threads playing ping-pong over two rings (each waits on the ring
the other does not) go on; a process killed while its threads hand over leaves nothing that stops
the next owner of its records. Each scenario runs in a child process, so a hang is a failed test
(the child's exit status), never a hung run."""
import multiprocessing as mp
import os
import signal
import threading
import time
import uuid

import numpy as np
import pytest

import sympathy as sy
from sympathy.ring._core import ffi, lib

CTX = mp.get_context("fork")
JOIN_S = 60


def _in_child(target, *args) -> int:
    """Runs target(*args) in a forked child; its exit code (0: it returned; -9: hung and killed)."""
    child = CTX.Process(target=_child_main, args=(target, *args))
    child.start()
    child.join(JOIN_S)
    if child.is_alive():
        child.kill()
        child.join()
    return child.exitcode


def _child_main(target, *args):
    target(*args)  # an exception exits 1


def _two_threads(layout, wait, handoff, sizes, n):
    """A producer thread publishes 0..n-1 in batches of the given sizes (cycled), a consumer thread
    takes them with get_batch and get alternately; the consumer checks the exact sequence."""
    rb = sy.RingBuffer(256, np.int64, wait=wait, layout=layout)
    if not handoff:
        lib.sy_ring_set_gil_handoff(rb._handle, ffi.NULL)
    c = rb.consumer()
    errors = []

    def produce():
        start, k = 0, 0
        while start < n:
            size = min(sizes[k % len(sizes)], n - start)
            rb.publish_batch(np.arange(start, start + size, dtype=np.int64), timeout=30)
            start, k = start + size, k + 1

    def consume():
        expect, k = 0, 0
        while expect < n:
            got = c.get_batch(97, timeout=30).tolist() if k % 3 else [c.get(timeout=30)]
            if got != list(range(expect, expect + len(got))):
                errors.append(f"expected {expect}.., got {got[:4]}..")
                return
            expect, k = expect + len(got), k + 1

    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rb.close()
    if errors:
        raise SystemExit(errors[0])


@pytest.mark.parametrize("layout", ["slots", "contiguous"])
@pytest.mark.parametrize("wait", ["blocking", "yield", "sleep"])
@pytest.mark.parametrize("handoff", [True, False], ids=["handoff", "no_handoff"])
def test_two_threads_deliver_every_item_once_in_order(layout, wait, handoff):
    # batch sizes below, at and above the ring's 256 slots (a batch larger than the ring goes in pieces)
    assert _in_child(_two_threads, layout, wait, handoff, (1, 100, 256, 300, 7), 60_000) == 0


def _peer_never_waits_for_space():
    """The producer publishes one batch and then waits on an Event (Python, not the ring): the
    consumer's wait finds the batch, its peer never enters a wait, and it must return anyway."""
    with sy.RingBuffer(64, np.int64) as rb:
        c = rb.consumer()
        taken = threading.Event()
        got = []

        def consume():
            got.append(c.get_batch(64, timeout=30).tolist())
            taken.set()

        t = threading.Thread(target=consume)
        t.start()
        time.sleep(0.05)  # the consumer is inside its wait (not needed for correctness)
        rb.publish_batch(np.arange(5, dtype=np.int64))
        ok = taken.wait(30)
        t.join(30)
        if not ok or got != [[0, 1, 2, 3, 4]]:
            raise SystemExit(f"consumer did not get the batch while its producer waited elsewhere: {got}")


def _peer_never_waits_for_data():
    """The mirror image: the ring is full, the producer waits for space; the consumer reads one
    batch and then waits on an Event, never in the ring: the producer's wait must return."""
    with sy.RingBuffer(64, np.int64) as rb:
        c = rb.consumer()
        rb.publish_batch(np.arange(64, dtype=np.int64))
        published = threading.Event()

        def produce():
            rb.publish_batch(np.arange(64, 96, dtype=np.int64), timeout=30)
            published.set()

        t = threading.Thread(target=produce)
        t.start()
        time.sleep(0.05)  # the producer is inside its wait for space
        first = c.get_batch(32).tolist()
        ok = published.wait(30)
        t.join(30)
        rest = c.get_batch(64, timeout=1).tolist() + c.get_batch(64, timeout=1).tolist()
        if not ok or first + rest != list(range(96)):
            raise SystemExit(f"producer did not publish while its consumer waited elsewhere: {ok}, {len(rest)}")


@pytest.mark.parametrize("scenario", [_peer_never_waits_for_space, _peer_never_waits_for_data],
                         ids=["consumer_waits", "producer_waits"])
def test_a_peer_that_never_waits_delays_a_wait_only_boundedly(scenario):
    assert _in_child(scenario) == 0


def _ping_pong(rounds):
    """Two threads, two rings: each waits on the ring the other publishes to, so the peer a wait
    hands over to is waiting on the other ring. Every round trip must come back with its number."""
    a, b = sy.RingBuffer(64, np.int64), sy.RingBuffer(64, np.int64)
    ca, cb = a.consumer(), b.consumer()

    def echo():
        for _ in range(rounds):
            b.publish(ca.get(timeout=30) + 1)

    t = threading.Thread(target=echo)
    t.start()
    for i in range(rounds):
        a.publish(i)
        if cb.get(timeout=30) != i + 1:
            raise SystemExit(f"round {i}: wrong reply")
    t.join(30)
    a.close()
    b.close()


def test_ping_pong_over_two_rings_goes_on():
    assert _in_child(_ping_pong, 5_000) == 0


def _victim(name, running):
    """Producer and consumer threads of a named ring, forever, until killed (likely inside a
    handoff when SIGKILL lands)."""
    rb = sy.RingBuffer.attach(name)
    c = rb.consumer()
    chunk = np.arange(50, dtype=np.int64)

    def consume():
        while True:
            c.get_batch(64, timeout=30)

    threading.Thread(target=consume, daemon=True).start()
    running.set()
    while True:
        rb.publish_batch(chunk, timeout=30)


def _after_the_victim(name, n):
    """A new producer and consumer (the victim's records, reused) hand n items over, all once."""
    rb = sy.RingBuffer.attach(name)
    c = rb.consumer()
    got = []

    def consume():
        while len(got) < n:
            got.extend(c.get_batch(64, timeout=30).tolist())

    t = threading.Thread(target=consume)
    t.start()
    for start in range(0, n, 40):
        rb.publish_batch(np.arange(start, start + 40, dtype=np.int64), timeout=30)
    t.join(30)
    rb.close()
    if got != list(range(n)):
        raise SystemExit(f"after the victim: {len(got)} items, first wrong at "
                         f"{next((i for i, v in enumerate(got) if v != i), None)}")


def test_a_process_killed_inside_a_handoff_leaves_its_records_usable():
    name = f"sytest-handoff-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    with sy.RingBuffer(128, np.int64, name=name) as rb:
        running = CTX.Event()
        victim = CTX.Process(target=_victim, args=(name, running))
        victim.start()
        assert running.wait(30)
        time.sleep(0.1)  # mid-stream
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(30)
        assert victim.exitcode == -signal.SIGKILL
        assert _in_child(_after_the_victim, name, 20_000) == 0
        del rb
