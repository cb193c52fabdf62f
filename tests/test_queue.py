"""sympathy.Queue: multiprocessing.Queue's interface, records of any size, work sharing, dead peers.

The interface is checked behaviour by behaviour against multiprocessing.Queue called the same way,
in this process and in children started by fork and by spawn. Delivery: every item reaches exactly
one consumer, in order per producer. Fault tests run the scenario in child processes with
timeouts; allowed outcomes are listed with each. A hang is a failure (each wait is bounded).
"""
import multiprocessing as mp
import os
import pickle
import queue
import random
import signal
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import sympathy as sy
from sympathy.ring.queue import SCRATCH_BYTES

TIMEOUT = 30.0  # far beyond what any step needs; reaching it is the failure
METHODS = ["fork", "spawn"]


# ---- the interface, compared with multiprocessing.Queue -----------------------------------------------
def _settle(q):
    time.sleep(0.05)  # multiprocessing.Queue's feeder thread flushes puts in the background


# (call text, step): each step's outcome (returned value or exception type) must match.
SCRIPT = [
    ("empty()", lambda q: q.empty()),
    ("qsize()", lambda q: q.qsize()),
    ("full()", lambda q: q.full()),
    ("get(timeout=-1)", lambda q: q.get(timeout=-1)),
    ("get(True, 0)", lambda q: q.get(True, 0)),
    ("get(False)", lambda q: q.get(False)),
    ("get(False, 5)", lambda q: q.get(False, 5)),
    ("get_nowait()", lambda q: q.get_nowait()),
    ("get(timeout=0.05)", lambda q: q.get(timeout=0.05)),
    ("get(timeout='x')", lambda q: q.get(timeout="x")),
    ("put(1, timeout=-1)", lambda q: q.put(1, timeout=-1)),
    ("put({'a': [1, 2]})", lambda q: q.put({"a": [1, 2]})),
    ("settle", _settle),
    ("full()", lambda q: q.full()),
    ("qsize()", lambda q: q.qsize()),
    ("empty()", lambda q: q.empty()),
    ("put(3, timeout=-1)", lambda q: q.put(3, timeout=-1)),
    ("put(3, True, 0)", lambda q: q.put(3, True, 0)),
    ("put(3, False)", lambda q: q.put(3, False)),
    ("put_nowait(3)", lambda q: q.put_nowait(3)),
    ("put(3, timeout=0.05)", lambda q: q.put(3, timeout=0.05)),
    ("get()", lambda q: q.get()),
    ("get(timeout=-1)", lambda q: q.get(timeout=-1)),
    ("put(None, False)", lambda q: q.put(None, False)),
    ("put_nowait(b'')", lambda q: q.put_nowait(b"")),
    ("settle", _settle),
    ("full()", lambda q: q.full()),
    ("get(True, 1)", lambda q: q.get(True, 1)),
    ("get_nowait()", lambda q: q.get_nowait()),
    ("empty()", lambda q: q.empty()),
    ("put(lambda: 0)", lambda q: q.put(lambda: 0) if isinstance(q, sy.Queue) else pickle.dumps(lambda: 0)),
    ("put(7)", lambda q: q.put(7)),
    ("join_thread()", lambda q: q.join_thread()),
    ("cancel_join_thread()", lambda q: q.cancel_join_thread()),
    ("settle", _settle),
    ("close()", lambda q: q.close()),
    ("put(1)", lambda q: q.put(1)),
    ("put_nowait(1)", lambda q: q.put_nowait(1)),
    ("get()", lambda q: q.get()),
    ("get_nowait()", lambda q: q.get_nowait()),
    ("qsize()", lambda q: q.qsize()),
    ("empty()", lambda q: q.empty()),
    ("full()", lambda q: q.full()),
    ("close()", lambda q: q.close()),
    ("join_thread()", lambda q: q.join_thread()),
    ("cancel_join_thread()", lambda q: q.cancel_join_thread()),
]


def _run_script(q) -> list:
    outcomes = []
    for text, step in SCRIPT:
        try:
            value = step(q)
            outcomes.append((text, "returned", None if text == "settle" else value))
        except Exception as exc:  # the exception's type is the behaviour compared
            outcomes.append((text, "raised", type(exc).__name__))
    return outcomes


def test_interface_matches_multiprocessing_queue_call_by_call():
    ours, theirs = _run_script(sy.Queue(2)), _run_script(mp.Queue(2))
    assert ours == theirs


def _script_in_child(q, results):
    results.put(_run_script(q))


@pytest.mark.parametrize("method", METHODS)
def test_interface_matches_in_a_child_under(method):
    """The same script on a queue handed to a child process (fork / spawn) by Process(args=...)."""
    ctx = mp.get_context(method)
    outcomes = {}
    for kind, make in (("ours", lambda: sy.Queue(2)), ("theirs", lambda: ctx.Queue(2))):
        q, results = make(), ctx.Queue()
        child = ctx.Process(target=_script_in_child, args=(q, results))
        child.start()
        outcomes[kind] = results.get(timeout=TIMEOUT)
        child.join(TIMEOUT)
        assert child.exitcode == 0
    assert outcomes["ours"] == outcomes["theirs"]


def _put_one(q):
    q.put("from the child")


def test_a_queue_only_the_spawned_child_holds_still_arrives():
    """Process(args=(sy.Queue(),)).start() drops its reference before the child attaches by name."""
    ctx = mp.get_context("spawn")
    child = ctx.Process(target=_put_one, args=(sy.Queue(),))
    child.start()
    child.join(TIMEOUT)
    assert child.exitcode == 0


def test_a_queue_never_pickled_is_removed_when_collected():
    q = sy.Queue()
    path = f"/dev/shm/{q.name}"
    assert os.path.exists(path)
    del q
    assert not os.path.exists(path)


def test_maxsize_reads_as_multiprocessing_does():
    for maxsize in (0, -3):
        q = sy.Queue(maxsize)
        for i in range(1000):
            q.put_nowait(i)  # unbounded: never Full
        assert not q.full() and q.qsize() == 1000
    with pytest.raises(TypeError):
        sy.Queue(1.5)
    with pytest.raises(TypeError):
        mp.Queue(1.5)


def test_joinable_queue_matches_multiprocessing():
    for q in (sy.JoinableQueue(), mp.JoinableQueue()):
        with pytest.raises(ValueError, match="task_done\\(\\) called too many times"):
            q.task_done()
        q.put("a")
        q.put("b")
        assert q.get(timeout=TIMEOUT) == "a"
        q.task_done()
        assert q.get(timeout=TIMEOUT) == "b"
        q.task_done()
        q.join()  # returns: every item done
        with pytest.raises(ValueError):
            q.task_done()


def test_attach_refuses_another_kind_of_queue():
    q = sy.Queue()
    with pytest.raises(ValueError, match="not a sympathy.JoinableQueue"):
        sy.JoinableQueue._attach(q.name)
    rb = sy.RingBuffer(8, np.int64, name=f"sytest-q-{os.getpid()}-plain", producer="multi")
    try:
        with pytest.raises(ValueError, match="not a sympathy.Queue"):
            sy.Queue._attach(rb.name)
    finally:
        rb.close()


def _signal_when_ready(target, q, sig, settle=0.0):
    """Start target(q, ready) in a forked child, wait until it sets ready, then (after `settle`
    seconds, for a child about to block) send it sig; returns the child, joined (killed first if sig left it running)."""
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    child = ctx.Process(target=target, args=(q, ready))
    child.start()
    assert ready.wait(TIMEOUT), "the child never got ready"
    time.sleep(settle)
    os.kill(child.pid, sig)
    child.join(TIMEOUT)
    if child.is_alive():   # the signal did not end it: kill it, or pytest's exit would wait for it (multiprocessing joins it)
        child.kill()
        child.join()
    return child


def test_close_from_another_thread_ends_a_blocked_get():
    q, errors = sy.Queue(), []

    def blocked():
        try:
            q.get()
        except ValueError as exc:
            errors.append(exc)

    thread = threading.Thread(target=blocked)
    thread.start()
    time.sleep(0.2)
    q.close()
    thread.join(TIMEOUT)
    assert not thread.is_alive() and "closed" in str(errors[0])


def _get_until_interrupted(q, waiting):
    waiting.set()
    try:
        q.get()
    except KeyboardInterrupt:
        raise SystemExit(7)


def test_ctrl_c_interrupts_a_blocked_get():
    assert _signal_when_ready(_get_until_interrupted, sy.Queue(), signal.SIGINT, settle=0.2).exitcode == 7


# ---- records: any size, any picklable object -----------------------------------------------------------
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(0, 1 << 20), min_size=1, max_size=6))
def test_records_of_any_size_round_trip(sizes):
    """Records up to 1 MiB spanning many slots, wrapping the ring's end (a 4 MiB ring, sizes mixed)."""
    # One thread puts a round before it gets any: what the ring cannot hold is spilled, and the
    # feeder puts it as the gets make room.
    q = sy.Queue(capacity_bytes=4 << 20)
    for round_ in range(3):  # three rounds move the records across the ring's end
        items = [bytes([(round_ + i) % 251]) * n + n.to_bytes(4, "little") for i, n in enumerate(sizes)]
        for item in items:
            q.put(item)
        assert [q.get(timeout=TIMEOUT) for _ in items] == items
    assert q.empty()


def test_numpy_arrays_travel_out_of_band_and_come_back_writeable():
    q = sy.Queue(capacity_bytes=1 << 24)
    arrays = [np.arange(300_000, dtype=np.float64), np.ones((512, 512), np.uint8).T,  # F-order: out of band
              np.arange(10, dtype=np.int32), np.arange(100_000)[::3]]  # small, and non-contiguous: in band
    q.put({"frames": arrays, "id": 7})
    got = q.get(timeout=TIMEOUT)
    assert got["id"] == 7
    for a, b in zip(arrays, got["frames"]):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
        assert b.flags.writeable  # as multiprocessing.Queue gives
    b = got["frames"][0]
    b[0] = -1  # the array owns memory of its own (a copy out of the ring), not the ring's slots
    q.put(np.zeros(SCRATCH_BYTES * 2, np.uint8))
    assert np.array_equal(q.get(timeout=TIMEOUT), np.zeros(SCRATCH_BYTES * 2, np.uint8))


def test_a_record_larger_than_the_ring_is_a_clear_error():
    q = sy.Queue(capacity_bytes=1 << 16)
    with pytest.raises(ValueError, match="capacity_bytes"):
        q.put(b"x" * (1 << 17))
    with pytest.raises(ValueError, match="capacity_bytes"):
        q.put(np.zeros(1 << 17, np.uint8))
    q.put("still works")
    assert q.get(timeout=TIMEOUT) == "still works"


# ---- work sharing across processes -------------------------------------------------------------------------
def _produce(q, producer, n):
    for i in range(n):
        q.put((producer, i))


def _consume_until_none(q, results):
    got = []
    while (item := q.get(timeout=TIMEOUT)) is not None:
        got.append(item)
    results.put(got)


def _check_exactly_once(per_worker, producers, n):
    seen = [item for got in per_worker for item in got]
    assert sorted(seen) == [(p, i) for p in range(producers) for i in range(n)]  # none lost, none twice
    for got in per_worker:  # each worker sees each producer's items in the order they were put
        for p in range(producers):
            mine = [i for q, i in got if q == p]
            assert mine == sorted(mine)


@pytest.mark.parametrize("method", METHODS)
def test_each_item_reaches_exactly_one_worker_under(method):
    ctx = mp.get_context(method)
    producers, workers, n = 2, 3, 3000
    q, results = sy.Queue(maxsize=50, capacity_bytes=1 << 14), ctx.Queue()
    procs = [ctx.Process(target=_consume_until_none, args=(q, results)) for _ in range(workers)]
    procs += [ctx.Process(target=_produce, args=(q, p, n)) for p in range(producers)]
    for proc in procs:
        proc.start()
    for proc in procs[workers:]:
        proc.join(TIMEOUT)
    for _ in range(workers):
        q.put(None)
    per_worker = [results.get(timeout=TIMEOUT) for _ in range(workers)]
    for proc in procs:
        proc.join(TIMEOUT)
        assert proc.exitcode == 0
    _check_exactly_once(per_worker, producers, n)
    assert q.lost == 0 and q.abandoned == 0 and q.empty()


def _stage(inbox, outbox, factor):
    while (item := inbox.get(timeout=TIMEOUT)) is not None:
        outbox.put((item[0], item[1] * factor))
    outbox.put(None)  # one end per worker: the next stage has as many workers as this one


def test_a_three_stage_pipeline():
    """source -> 2 workers (x2) -> 2 workers (x3) -> sink: every item exactly once, transformed.
    Records are taken in the order they were put, so a stage's last end comes after all its items."""
    ctx = mp.get_context("fork")
    a, b, c = sy.Queue(), sy.Queue(maxsize=8), sy.JoinableQueue()
    stages = [ctx.Process(target=_stage, args=(a, b, 2)) for _ in range(2)]
    stages += [ctx.Process(target=_stage, args=(b, c, 3)) for _ in range(2)]
    for proc in stages:
        proc.start()
    n = 2000
    for i in range(n):
        a.put((i, i))
    for _ in range(2):
        a.put(None)
    got, ends = [], 0
    while ends < 2:
        item = c.get(timeout=TIMEOUT)
        c.task_done()
        if item is None:
            ends += 1
        else:
            got.append(item)
    c.join()
    for proc in stages:
        proc.join(TIMEOUT)
        assert proc.exitcode == 0
    assert sorted(got) == [(i, 6 * i) for i in range(n)]
    assert a.empty() and b.empty() and c.empty()


# ---- dead peers --------------------------------------------------------------------------------------------
def _take_one_and_hang(q, holding):
    q._take_and_hold(timeout=TIMEOUT)  # the record is taken (its header names this worker), not copied
    holding.set()
    time.sleep(600)  # killed here


def test_a_worker_killed_holding_a_record_is_counted_lost_and_stalls_nothing():
    """Allowed: the held record is counted in q.lost (exactly 1); every other item is delivered once.
    Forbidden: the producers stalling behind the dead worker's gate (Full), a duplicate, a second loss."""
    ctx = mp.get_context("fork")
    q, results = sy.Queue(capacity_bytes=1 << 12), ctx.Queue()  # 32 slots: the gate would stall a lap
    q.put(("victim", 0))
    _signal_when_ready(_take_one_and_hang, q, signal.SIGKILL)
    survivor = ctx.Process(target=_consume_until_none, args=(q, results))
    survivor.start()
    n = 500  # 15 laps of the ring
    for i in range(n):
        q.put((0, i), timeout=TIMEOUT)
    q.put(None, timeout=TIMEOUT)
    _check_exactly_once([results.get(timeout=TIMEOUT)], 1, n)
    survivor.join(TIMEOUT)
    assert survivor.exitcode == 0
    assert q.lost == 1 and q.qsize() == 0


def test_joinable_join_does_not_wait_for_a_lost_item():
    ctx = mp.get_context("fork")
    q = sy.JoinableQueue()
    q.put("doomed")
    _signal_when_ready(_take_one_and_hang, q, signal.SIGKILL)
    joiner = ctx.Process(target=q.join)
    joiner.start()
    joiner.join(TIMEOUT)
    assert joiner.exitcode == 0 and q.lost == 1


def test_join_timeout_is_keyword_only_and_read_as_get_reads_one():
    q = sy.JoinableQueue()
    q.join(timeout=0)            # nothing put: done at once, with any timeout
    q.put("a")
    with pytest.raises(TimeoutError, match=r"^join\(timeout=0.2\) ran out with 1 item\(s\) not yet task_done\(\)$"):
        q.join(timeout=0.2)
    with pytest.raises(TimeoutError):
        q.join(timeout=-1)       # negative: one look, as get's
    with pytest.raises(TypeError):
        q.join(0.2)              # multiprocessing's join takes no argument: ours are keyword-only
    with pytest.raises(TypeError, match="timeout must be a number"):
        q.join(timeout="1")
    with pytest.raises(ValueError, match="nan"):
        q.join(timeout=float("nan"))
    assert q.get(timeout=TIMEOUT) == "a"
    q.task_done()
    q.join(timeout=TIMEOUT)


def _get_one_and_hang(q, got):
    q.get(timeout=TIMEOUT)       # delivered: this process has the item, and dies before task_done
    got.set()
    time.sleep(600)  # killed here


def test_join_with_a_timeout_ends_where_a_consumer_died_between_get_and_task_done():
    """The item was delivered, so it is not lost (q.lost stays 0), and nobody can tell whether it
    was done: join() would wait for ever, as multiprocessing's does. join(timeout=) ends instead."""
    q = sy.JoinableQueue()
    q.put("delivered")
    child = _signal_when_ready(_get_one_and_hang, q, signal.SIGKILL)
    assert child.exitcode == -signal.SIGKILL
    with pytest.raises(TimeoutError, match="with 1 item"):
        q.join(timeout=0.3)
    assert q.lost == 0 and q.qsize() == 0
    q.task_done()                # whoever knows it was done may still say so
    q.join(timeout=TIMEOUT)


def _use_once_and_vanish(q, role):
    if role == "put":
        q.put(os.getpid())
    else:
        q.get(timeout=TIMEOUT)
    os._exit(0)  # no finaliser runs: the producer or consumer record stays, its pid dead


def test_records_of_vanished_processes_are_reused():
    """66 producers and 66 consumers, each exiting without closing: the 64 records of each kind are
    freed for newcomers once their owners are dead (and nothing they held is counted lost)."""
    ctx = mp.get_context("fork")
    q = sy.Queue()
    for role in ("put", "get"):
        for _ in range(66):
            child = ctx.Process(target=_use_once_and_vanish, args=(q, role))
            child.start()
            child.join(TIMEOUT)
            assert child.exitcode == 0
    assert q.qsize() == 0 and q.lost == 0 and q.abandoned == 0
    q.put("still works")
    assert q.get(timeout=TIMEOUT) == "still works"


def _put_big_records_forever(q, ready):
    blob = b"\xab" * (4 << 20)
    q.put(blob)
    ready.set()
    while True:  # 15 records fill the 64 MiB ring: the kill comes within the first few
        q.put(blob)


def test_a_producer_killed_mid_put_is_skipped_and_the_live_ones_all_arrive():
    """Allowed: the dead producer's half-written record is skipped (q.abandoned counts it) and never
    delivered; its complete records arrive intact. Forbidden: a stall behind its hole, a torn record,
    a live producer's item lost or doubled."""
    ctx = mp.get_context("fork")
    q, results = sy.Queue(capacity_bytes=64 << 20), ctx.Queue()
    rng = random.Random(19)
    for attempt in range(30):  # most of a put of 4 MiB is its copy into the ring: most kills land there
        ready = ctx.Event()
        victim = ctx.Process(target=_put_big_records_forever, args=(q, ready))
        victim.start()
        assert ready.wait(TIMEOUT)
        time.sleep(rng.uniform(0, 0.01))
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(TIMEOUT)
        while True:  # drain what it completed: intact, or an error here
            try:
                assert q.get(timeout=0.2) == b"\xab" * (4 << 20)
            except queue.Empty:
                break
        if q.abandoned:
            break
    assert q.abandoned >= 1, "no kill landed between a claim and its publish in 30 tries"
    live = ctx.Process(target=_produce, args=(q, 0, 2000))
    worker = ctx.Process(target=_consume_until_none, args=(q, results))
    live.start()
    worker.start()
    live.join(TIMEOUT)
    q.put(None)
    _check_exactly_once([results.get(timeout=TIMEOUT)], 1, 2000)
    worker.join(TIMEOUT)
    assert worker.exitcode == 0 and q.qsize() == 0 and q.lost == 0


def _block_on_a_full_queue(q, started):
    started.set()
    q.put("never fits")  # blocks: maxsize reached


def test_a_producer_killed_while_blocked_gives_back_its_count():
    q = sy.Queue(maxsize=1)
    q.put("first")
    _signal_when_ready(_block_on_a_full_queue, q, signal.SIGKILL, settle=0.2)
    assert q.get(timeout=TIMEOUT) == "first"
    q.put("second", timeout=TIMEOUT)  # its reservation is given back: room for one
    assert q.qsize() == 1 and q.get(timeout=TIMEOUT) == "second" and q.empty()
