"""No silent loss for late consumers (issue 19): a RingBuffer's consumers declared at creation gate
the producers before they attach; a consumer that was not declared and joins late is told how many
items it missed.

Allowed: a declared consumer sees every item from the first, however late it attaches (the
producer waits for it); an undeclared late consumer sees exactly the items after its `missed`.
Forbidden: an item overwritten before a declared consumer read it; `missed` + received != total.
"""
import multiprocessing as mp
import os
import threading

import numpy as np
import pytest

import sympathy as sy

TIMEOUT = 30.0
N = 100_000  # the newcomer's pipeline: 149 of these were lost when its consumer registered late


def _publish(rb, n, done):
    for i in range(n):
        rb.publish(i)
    done.set()


def _collect(c, n):
    got = []
    while len(got) < n:
        got.extend(c.get_batch(4096, timeout=TIMEOUT).tolist())
    return got


def test_a_declared_consumer_attaching_late_misses_nothing():
    rb = sy.RingBuffer(1024, np.int64, consumers=1)
    done = threading.Event()
    producer = threading.Thread(target=_publish, args=(rb, N, done))
    producer.start()
    assert not done.wait(0.3)  # 1 024 published, then it waits for the declared consumer
    c = rb.consumer()
    assert c.missed == 0
    assert _collect(c, N) == list(range(N))
    producer.join(TIMEOUT)
    assert done.is_set()


def _consume_declared(name, n, results):
    rb = sy.RingBuffer.attach(name)
    c = rb.consumer()
    got = _collect(c, n)
    results.put((c.missed, len(got), got == list(range(n))))
    rb.close()


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_declared_consumers_in_other_processes_miss_nothing_under(method):
    """Two declared consumers attach from child processes started after the producer ran ahead:
    each sees all N (multicast), in order."""
    ctx = mp.get_context(method)
    name = f"sytest-late-{os.getpid()}-{method}"
    rb = sy.RingBuffer(256, np.int64, name=name, consumers=2)
    done = threading.Event()
    producer = threading.Thread(target=_publish, args=(rb, N, done))
    producer.start()
    assert not done.wait(0.2)
    results = ctx.Queue()
    children = [ctx.Process(target=_consume_declared, args=(name, N, results)) for _ in range(2)]
    for child in children:
        child.start()
    outcomes = [results.get(timeout=TIMEOUT) for _ in children]
    for child in children:
        child.join(TIMEOUT)
        assert child.exitcode == 0
    producer.join(TIMEOUT)
    assert outcomes == [(0, N, True), (0, N, True)]
    rb.close()


def test_an_undeclared_late_consumer_is_told_what_it_missed():
    rb = sy.RingBuffer(1024, np.int64)
    early = rb.consumer()
    for i in range(700):
        rb.publish(i)
    late = rb.consumer()  # not declared: starts at what is published from now on
    assert late.missed == 700 and early.missed == 0
    for i in range(700, 1000):
        rb.publish(i)
    got = _collect(late, 300)
    assert got == list(range(late.missed, 1000))  # missed + received == everything published
    assert _collect(early, 1000) == list(range(1000))


def test_declared_records_go_first_then_the_rest_are_plain():
    rb = sy.RingBuffer(64, np.int64, consumers=1)
    for i in range(10):
        rb.publish(i)
    first = rb.consumer()  # the declared one: from the first item
    second = rb.consumer()  # declared none left: a late joiner
    assert (first.missed, second.missed) == (0, 10)
    downstream = rb.consumer(after=[first])  # after=[...] never takes a declared record
    assert downstream.missed == 0  # it starts where its upstream stands (nothing read yet)
    assert _collect(first, 10) == list(range(10))


def test_bad_consumers_argument():
    with pytest.raises(TypeError):
        sy.RingBuffer(8, np.int64, consumers=1.5)
    with pytest.raises(ValueError, match="consumers"):
        sy.RingBuffer(8, np.int64, consumers=65)
