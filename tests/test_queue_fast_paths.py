"""sympathy.Queue's per-item fast paths (issue 19, fourth session): get()'s try of an uncontended
lock before any timeout arithmetic, and the cheap reading of a plain number of seconds.

Allowed outcomes: every item reaches exactly one getter, whichever path its get took (the
uncontended try, or the blocking acquire with or without a timeout when another thread holds the
lock); a timeout means what multiprocessing.Queue's means. Forbidden: an item lost or taken twice,
a bad timeout accepted because an item happened to be ready.
"""
import math
import multiprocessing as mp
import queue
import threading

import numpy as np
import pytest

import sympathy as sy
from sympathy.ring._queue_core import _timeout_ns

TIMEOUT = 30.0


@pytest.mark.parametrize("timeout", [None, TIMEOUT, 30])
def test_threads_contending_for_get_each_take_every_item_once(timeout):
    """Four getter threads on one handle: most gets find the lock free, some find it held (and
    then wait for it, with the timeout or without); a producer thread puts meanwhile."""
    q, n, getters = sy.Queue(), 40_000, 4
    got = [[] for _ in range(getters)]

    def getter(mine):
        while True:
            item = q.get(True, timeout)
            if item is None:
                return
            mine.append(item)

    threads = [threading.Thread(target=getter, args=(got[g],)) for g in range(getters)]
    for thread in threads:
        thread.start()
    for i in range(n):
        q.put(i)
    for _ in range(getters):
        q.put(None)
    for thread in threads:
        thread.join(TIMEOUT)
        assert not thread.is_alive()
    every = np.sort(np.concatenate([np.array(g, np.int64) for g in got]))
    assert np.array_equal(every, np.arange(n))  # none lost, none twice
    for mine in got:  # one producer: each getter sees its items in put order
        assert mine == sorted(mine)
    assert q.empty()


def test_a_held_lock_with_a_timeout_raises_empty_in_time():
    """The lock held by another thread (a get waiting in C): a get with a timeout cannot take the
    lock and raises queue.Empty, as multiprocessing.Queue's get does when its reader lock is busy."""
    q = sy.Queue()
    q._get_lock.acquire()
    try:
        with pytest.raises(queue.Empty):
            q.get(timeout=0.05)
        with pytest.raises(queue.Empty):
            q.get(block=False)
    finally:
        q._get_lock.release()
    q.put("x")
    assert q.get(timeout=TIMEOUT) == "x"


@pytest.mark.parametrize("bad, error", [(float("nan"), ValueError), ("1", TypeError), (True, TypeError),
                                        ([1], TypeError)])
def test_a_bad_timeout_is_refused_even_with_an_item_ready(bad, error):
    q = sy.Queue()
    q.put(1)
    with pytest.raises(error):
        q.get(True, bad)
    with pytest.raises(error):
        q.put(2, True, bad)
    assert q.get(timeout=TIMEOUT) == 1 and q.empty()  # the refused calls took and put nothing


@pytest.mark.parametrize("value, expected", [
    (0, 0), (0.0, 0), (1, 1_000_000_000), (0.25, 250_000_000), (-1, 0), (-0.5, 0), (1e9, -1), (math.inf, -1),
    (np.float64(0.5), 500_000_000),
])
def test_timeout_reading_matches_multiprocessing_queue(value, expected):
    """A negative timeout tries once (multiprocessing.Queue's reading), a huge one waits forever;
    a NumPy float (a float subclass) takes the general path and reads the same."""
    assert _timeout_ns(True, value) == expected
    assert _timeout_ns(False, value) == 0


def _get_with_timeouts(q, results, n):
    got = []
    while len(got) < n:
        try:
            got.append(q.get(timeout=0.5))
        except queue.Empty:
            continue
    results.put(got)


def test_worker_processes_with_timeouts_take_every_item_once():
    """The bench's worker shape: processes calling get(timeout=...) on one queue."""
    ctx = mp.get_context("fork")
    q, results, n, workers = sy.Queue(), ctx.Queue(), 20_000, 3
    for i in range(n):
        q.put(i)
    share = [n // workers + (w < n % workers) for w in range(workers)]
    procs = [ctx.Process(target=_get_with_timeouts, args=(q, results, share[w])) for w in range(workers)]
    for proc in procs:
        proc.start()
    got = [results.get(timeout=TIMEOUT) for _ in procs]
    for proc in procs:
        proc.join(TIMEOUT)
        assert proc.exitcode == 0
    assert sorted(x for g in got for x in g) == list(range(n))
    assert q.empty() and q.lost == 0
