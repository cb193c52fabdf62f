"""sympathy.Queue's put never waits for ring space, as multiprocessing.Queue's (its feeder thread):
a record the ring cannot hold now is spilled in the process and a feeder thread puts it.

Checked against multiprocessing.Queue called the same way where both apply. Allowed: spilled
records arriving later than a put returned, in the producer's order; at a producer's death its
spilled records counted in `abandoned`, their counts given back. Forbidden: put blocking on a full
ring (maxsize=0), an item overtaking an earlier spilled one, a count left held for ever.
"""
import multiprocessing as mp
import os
import queue
import signal
import threading

import pytest

import sympathy as sy

TIMEOUT = 30.0
METHODS = ["fork", "spawn"]


BIG = b"q" * 1000  # 9 slots: 200 of them are three times the 64 KiB ring below


def _overfill_then_drain(q, n):
    """One thread puts more than the ring holds, then gets it all back: mp.Queue's feeder buffers."""
    for i in range(n):
        q.put((i, BIG))
    return [q.get(timeout=TIMEOUT)[0] for _ in range(n)]


def _overfill_in_child(q, n, results):
    results.put(_overfill_then_drain(q, n))


@pytest.mark.parametrize("method", [None] + METHODS)
def test_put_never_waits_for_ring_space_as_multiprocessing_queue(method):
    """Called the same way (here, or in a fork / spawn child), both queues give every item back in
    order; ours held 3x its ring in its spill, its qsize counting them all the while."""
    ctx = mp.get_context(method or "fork")
    n, outcomes = 200, {}
    for kind, make in (("ours", lambda: sy.Queue(capacity_bytes=1 << 16)), ("theirs", ctx.Queue)):
        q = make()
        if method is None:
            outcomes[kind] = _overfill_then_drain(q, n)
        else:
            results = ctx.Queue()
            child = ctx.Process(target=_overfill_in_child, args=(q, n, results))
            child.start()
            outcomes[kind] = results.get(timeout=TIMEOUT)
            child.join(TIMEOUT)
            assert child.exitcode == 0
    assert outcomes["ours"] == outcomes["theirs"] == list(range(n))


def test_spilled_records_count_in_qsize_and_keep_order_with_later_puts():
    q = sy.Queue(capacity_bytes=1 << 16)
    for i in range(100):
        q.put((i, BIG))
    assert q.qsize() == 100 and len(q._spill) > 0  # some wait in this process, counted all the same
    q.put_nowait("small")  # goes behind the spilled ones, though it would fit the ring now
    got = [q.get(timeout=TIMEOUT) for _ in range(101)]
    assert [g[0] for g in got[:100]] == list(range(100)) and got[100] == "small"
    # The feeder drops a record from its deque just after the record is in the ring, and the put
    # between releases the GIL: a get may take the last record first. It ends once the deque is empty.
    feeder = q._feeder
    if feeder is not None:
        feeder.join(TIMEOUT)
    assert q.empty() and not q._spill


def _put_then_exit(q, n, cancel):
    for i in range(n):
        q.put((i, BIG))
    if cancel:
        q.cancel_join_thread()
    # returning ends the process: multiprocessing's exit waits for the feeder unless cancelled


@pytest.mark.parametrize("method", METHODS)
def test_a_process_exits_only_once_its_spilled_records_are_put(method):
    """The child puts 3x the ring and exits at once; its exit waits for its feeder (join_thread's
    rule at exit), so the parent, getting only after the child is gone, receives all 200."""
    ctx = mp.get_context(method)
    q, n = sy.Queue(capacity_bytes=1 << 16), 200
    child = ctx.Process(target=_put_then_exit, args=(q, n, False))
    child.start()
    got = [q.get(timeout=TIMEOUT)[0] for _ in range(n)]  # the child cannot end before we take these
    child.join(TIMEOUT)
    assert child.exitcode == 0 and got == list(range(n))
    assert q.empty() and q.abandoned == 0


def test_cancel_join_thread_lets_the_process_exit_without_its_spill():
    """Allowed: the child exits with records still spilled; those are dropped and counted in
    `abandoned` (the counts they held given back), the rest arrive in order. Forbidden: the child
    waiting for a consumer, a count left held (qsize wrong for ever)."""
    ctx = mp.get_context("fork")
    q, n = sy.Queue(capacity_bytes=1 << 16), 200
    child = ctx.Process(target=_put_then_exit, args=(q, n, True))
    child.start()
    child.join(TIMEOUT)
    assert child.exitcode == 0  # nobody got anything: it did not wait
    got = []
    while True:
        try:
            got.append(q.get(timeout=0.2)[0])
        except queue.Empty:
            break
    assert 0 < len(got) < n and got == list(range(len(got)))
    assert q.abandoned == n - len(got) and q.qsize() == 0


def test_close_then_join_thread_waits_for_the_spill():
    q, n = sy.Queue(capacity_bytes=1 << 16), 200
    for i in range(n):
        q.put((i, BIG))
    q.close()
    reader = sy.Queue._attach(q.name)  # another handle takes them while join_thread waits
    got = []
    thread = threading.Thread(target=lambda: got.extend(reader.get(timeout=TIMEOUT)[0] for _ in range(n)))
    thread.start()
    q.join_thread()
    assert not q._spill and q._feeder is None
    thread.join(TIMEOUT)
    assert got == list(range(n))


def test_with_maxsize_put_waits_and_raises_full_as_multiprocessing():
    for q in (sy.Queue(maxsize=3, capacity_bytes=1 << 12), mp.Queue(3)):  # ours: 3 x 1000 B > 4 KiB ring
        for i in range(3):
            q.put((i, BIG), timeout=TIMEOUT)
        with pytest.raises(queue.Full):
            q.put("one too many", timeout=0.05)
        with pytest.raises(queue.Full):
            q.put_nowait("one too many")
        assert [q.get(timeout=TIMEOUT)[0] for _ in range(3)] == [0, 1, 2]
        q.put("room again", timeout=TIMEOUT)
        assert q.get(timeout=TIMEOUT) == "room again"


def _overfill_and_wait(q, n, ready):
    for i in range(n):
        q.put((i, BIG))
    ready.set()
    threading.Event().wait(600)  # killed here, its feeder waiting for room that never comes


def test_a_producer_killed_with_records_spilled_gives_their_counts_back():
    """Allowed: what reached the ring arrives, in order; the spilled rest is counted in
    `abandoned`. Forbidden: a lost count (qsize() > 0 for ever), a duplicate, a stall."""
    ctx = mp.get_context("fork")
    q, n = sy.Queue(capacity_bytes=1 << 16), 200
    ready = ctx.Event()
    victim = ctx.Process(target=_overfill_and_wait, args=(q, n, ready))
    victim.start()
    assert ready.wait(TIMEOUT)
    assert q.qsize() == n  # in the ring or spilled, all counted
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(TIMEOUT)
    got = []
    while True:
        try:
            got.append(q.get(timeout=0.2)[0])
        except queue.Empty:
            break
    assert 0 < len(got) < n and got == list(range(len(got)))
    assert q.abandoned == n - len(got) and q.qsize() == 0
