"""RingBuffer across processes: delivery, and kill -9 of a peer mid-claim / mid-batch.

Allowed outcomes when a peer dies: the survivor raises ClosedError (the dead peer is noticed well
before the generous timeout). Forbidden: hanging until the timeout (queue.Empty / queue.Full).
"""
import multiprocessing as mp
import os
import queue
import signal
import time
import uuid

import numpy as np
import pytest

import sympathy as sy

CTX = mp.get_context("fork")
GENEROUS_TIMEOUT = 60.0  # far longer than liveness detection needs; reaching it is the failure


def unique_name() -> str:
    return f"sytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _producer_then_hang_mid_claim(name, ready):
    rb = sy.RingBuffer.attach(name, np.int64)
    rb.publish_batch(np.arange(5, dtype=np.int64))
    with rb.claim(1) as slot:
        slot[0] = 99
        ready.set()
        time.sleep(600)  # killed here, holding claimed-but-unpublished sequence 5


def _consumer_then_hang_mid_batch(name, registered, holding):
    rb = sy.RingBuffer.attach(name, np.int64)
    c = rb.consumer()
    registered.set()
    with c.view_batch(4, timeout=GENEROUS_TIMEOUT):
        holding.set()
        time.sleep(600)  # killed here, holding 4 slots it never releases


def _wait_or_fail(event, what):
    if not event.wait(30):
        pytest.fail(f"child never reached: {what}")


def test_items_cross_processes_both_ways():
    name = unique_name()
    with sy.RingBuffer(64, np.int64, name=name, producer="multi") as rb:
        c = rb.consumer()
        children = [CTX.Process(target=_publish_range, args=(name, p * 1000, 1000)) for p in range(2)]
        for child in children:
            child.start()
        got = []
        while len(got) < 2000:
            got.extend(c.get_batch(256, timeout=GENEROUS_TIMEOUT).tolist())
        for child in children:
            child.join()
        assert sorted(got) == list(range(2000))
        for p in range(2):  # each producer's items in its own order
            mine = [x for x in got if p * 1000 <= x < (p + 1) * 1000]
            assert mine == sorted(mine)


def _publish_range(name, start, n):
    rb = sy.RingBuffer.attach(name, np.int64)
    for i in range(start, start + n):
        rb.publish(i)
    rb.close()


@pytest.mark.parametrize("wait", ["blocking", "yield", "busy_spin", "sleep"])
def test_kill_producer_mid_claim_skips_its_claim_and_delivers_the_live_producer(wait):
    """The dead producer's open claim (sequence 5) is skipped and counted as lost; the items a
    live producer published after it are delivered (before: ClosedError, and they never came)."""
    name = unique_name()
    rb = sy.RingBuffer(64, np.int64, name=name, producer="multi", wait=wait)
    c = rb.consumer()
    ready = CTX.Event()
    child = CTX.Process(target=_producer_then_hang_mid_claim, args=(name, ready))
    child.start()
    try:
        _wait_or_fail(ready, "holding a claim")
        assert c.get_batch(10, timeout=GENEROUS_TIMEOUT).tolist() == [0, 1, 2, 3, 4]
        os.kill(child.pid, signal.SIGKILL)  # not reaped yet: a zombie, which must count as dead
        rb.publish_batch(np.arange(100, 110, dtype=np.int64))  # this process: a live producer
        got = []
        while len(got) < 10:
            got += c.get_batch(16, timeout=GENEROUS_TIMEOUT).tolist()
        assert got == list(range(100, 110))
        assert c.lost == 1
        dead = [p for p in rb.peers() if p["pid"] == child.pid]
        assert dead and not dead[0]["alive"]
    finally:
        child.kill()
        child.join()
        rb.close(unlink=False)
    # a stale segment: cleanup, then a fresh ring of the same name
    assert sy.RingBuffer.cleanup(name)
    with sy.RingBuffer(64, np.int64, name=name) as fresh:
        c = fresh.consumer()
        fresh.publish(7)
        assert c.get(timeout=5) == 7


@pytest.mark.parametrize("wait", ["blocking", "sleep", "yield", "busy_spin"])
def test_kill_consumer_mid_batch_stops_it_gating_and_a_new_consumer_joins(wait):
    """A dead consumer is reaped: the producer blocked on the full ring goes on, and a consumer that
    joins later gets what is published after it (before: ClosedError forever, even after a join)."""
    name = unique_name()
    rb = sy.RingBuffer(8, np.int64, name=name, wait=wait)
    registered, holding = CTX.Event(), CTX.Event()
    child = CTX.Process(target=_consumer_then_hang_mid_batch, args=(name, registered, holding))
    child.start()
    try:
        _wait_or_fail(registered, "consumer registered")
        rb.publish_batch(np.arange(8, dtype=np.int64))
        _wait_or_fail(holding, "holding a batch")
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        rb.publish(8, timeout=GENEROUS_TIMEOUT)  # the full ring frees once the dead consumer is reaped
        assert not [p for p in rb.peers() if p["kind"] == "consumer"]
        fresh = rb.consumer()
        got = []
        for lap in range(3):  # laps: the new consumer gates, and frees, the producer
            rb.publish_batch(np.arange(lap * 8, lap * 8 + 8, dtype=np.int64), timeout=GENEROUS_TIMEOUT)
            got += fresh.get_batch(8, timeout=GENEROUS_TIMEOUT).tolist()
        assert got == list(range(24))
        with pytest.raises(queue.Full):
            rb.publish_batch(np.arange(9, dtype=np.int64), timeout=0.05)  # it gates: 9 > the 8 free
    finally:
        child.kill()
        child.join()
        rb.close(unlink=False)
    assert sy.RingBuffer.cleanup(name)
    sy.RingBuffer(8, np.int64, name=name).close()


def test_timeout_without_dead_peers_is_queue_empty():
    name = unique_name()
    with sy.RingBuffer(8, np.int64, name=name, producer="multi") as rb:
        rb.publish(0)  # this process is a live producer
        c = rb.consumer()
        with pytest.raises(queue.Empty):
            c.get(timeout=0.05)


def _upstream_consumer_then_hang(name, registered, ready):
    rb = sy.RingBuffer.attach(name, np.int64)
    c = rb.consumer()
    registered.put(c.index)
    ready.wait(30)
    c.get_batch(2, timeout=GENEROUS_TIMEOUT)
    time.sleep(600)  # killed here: the consumer after it can never get past item 1


def test_kill_upstream_consumer_wakes_the_downstream_consumer():
    name = unique_name()
    rb = sy.RingBuffer(16, np.int64, name=name, wait="blocking")
    registered, ready = CTX.Queue(), CTX.Event()
    child = CTX.Process(target=_upstream_consumer_then_hang, args=(name, registered, ready))
    child.start()
    try:
        downstream = rb.consumer(after=[registered.get(timeout=30)])
        rb.publish_batch(np.arange(4, dtype=np.int64))
        ready.set()
        assert downstream.get_batch(4, timeout=GENEROUS_TIMEOUT).tolist() == [0, 1]
        os.kill(child.pid, signal.SIGKILL)
        with pytest.raises(sy.ClosedError, match="peer process died"):
            downstream.get(timeout=GENEROUS_TIMEOUT)
    finally:
        child.kill()
        child.join()
        rb.close()
