"""sympathy.Queue's zero-copy frames: put_array / get_array.

Allowed outcomes: a frame reaches exactly one consumer, intact, in order per producer; a view (the
producer's or a consumer's) shows its own frame for as long as it lives, and its buffer is not
handed out again before then; a dead holder's buffer is reclaimed. Forbidden: a view reading another
frame's pixels, a buffer lost for good, a hang (every wait here is bounded).
"""
import multiprocessing as mp
import os
import queue
import signal
import threading
import time

import numpy as np
import pytest

import sympathy as sy
from sympathy._ring import ffi, lib
from sympathy.ring.queue_frames import frame_record, read_frame_record

TIMEOUT = 30.0
SHAPE = (48, 64, 3)  # a small "frame": the same code paths as 1080p, in less memory
FRAME_BYTES = int(np.prod(SHAPE))


def frame_of(seq: int) -> np.ndarray:
    return np.full(SHAPE, seq % 251, np.uint8)


def states(q):
    out, got = ffi.new("int64_t[4]"), []
    for i in range(q._frame_store().count):
        lib.sy_frames_state(q._frame_store().handle, i, out)
        got.append((int(out[0]), int(out[3])))  # kind (0 free), pin
    return got


def test_a_frame_round_trip_is_a_view_of_the_same_memory():
    q = sy.Queue(frame_bytes=FRAME_BYTES, frame_count=4)
    with q.put_array(SHAPE, np.uint8) as frame:
        frame[...] = frame_of(7)
        address = frame.__array_interface__["data"][0]
    assert not frame.flags.writeable  # published: the producer may no longer change it
    with pytest.raises(ValueError):
        frame[0, 0, 0] = 1
    with q.get_array(timeout=TIMEOUT) as view:
        assert view.__array_interface__["data"][0] == address  # no copy in, none out
        assert address % 64 == 0 and view.shape == SHAPE and view.dtype == np.uint8
        assert np.array_equal(view, frame_of(7)) and not view.flags.writeable
        with pytest.raises(ValueError):
            view.flags.writeable = True  # read-only at the buffer: cannot be turned writeable
    del frame, view
    assert all(kind == 0 and pin == 0 for kind, pin in states(q))  # every buffer free again


def test_views_stay_valid_until_dropped_and_their_buffers_are_not_reused():
    """Two buffers: a consumer keeps a view past its block; the producer's next frames must not
    land in it, and once every buffer is held put_array times out with Full."""
    q = sy.Queue(frame_bytes=FRAME_BYTES, frame_count=2)
    for seq in (1, 2):
        with q.put_array(SHAPE, np.uint8) as frame:
            frame[...] = frame_of(seq)
    del frame
    with q.get_array(timeout=TIMEOUT) as kept:
        pass
    part = kept[10:20]  # an array made from the view keeps the buffer too
    del kept
    with q.get_array(timeout=TIMEOUT) as second:
        pass
    with pytest.raises(queue.Full):
        q.put_array(SHAPE, np.uint8, timeout=0.1)  # both buffers held by live views
    assert np.array_equal(part, frame_of(1)[10:20])
    del second  # one buffer back: the next frame may use it, never part's
    with q.put_array(SHAPE, np.uint8, timeout=TIMEOUT) as frame:
        frame[...] = frame_of(3)
    del frame
    assert np.array_equal(part, frame_of(1)[10:20])
    assert np.array_equal(q.get(timeout=TIMEOUT), frame_of(3))


def test_an_exception_in_the_block_puts_nothing():
    q = sy.Queue(frame_bytes=FRAME_BYTES, frame_count=2)
    with pytest.raises(RuntimeError):
        with q.put_array(SHAPE, np.uint8) as frame:
            raise RuntimeError("camera failed")
    del frame
    assert q.empty() and all(kind == 0 for kind, _ in states(q))


def test_get_copies_a_frame_and_get_array_takes_plain_arrays():
    q = sy.Queue(frame_bytes=FRAME_BYTES, frame_count=2)
    with q.put_array(SHAPE, np.uint8) as frame:
        frame[...] = frame_of(5)
    del frame
    copy = q.get(timeout=TIMEOUT)  # get() of a frame: a private, writeable copy; the buffer back at once
    assert copy.flags.writeable and np.array_equal(copy, frame_of(5))
    assert all(kind == 0 and pin == 0 for kind, pin in states(q))
    q.put(np.arange(5))
    with q.get_array(timeout=TIMEOUT) as view:
        assert np.array_equal(view, np.arange(5)) and not view.flags.writeable
    q.put({"not": "an array"})
    with pytest.raises(TypeError) as info:
        q.get_array(timeout=TIMEOUT)
    assert info.value.item == {"not": "an array"}
    with pytest.raises(queue.Empty):
        q.get_array(timeout=0.05)


def test_bad_frame_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="no frame buffers"):
        sy.Queue().put_array(SHAPE, np.uint8)
    q = sy.Queue(frame_bytes=FRAME_BYTES, frame_count=2)
    with pytest.raises(ValueError, match="frame_bytes"):
        q.put_array((FRAME_BYTES + 64,), np.uint8)  # the buffers hold frame_bytes rounded up to a line
    with pytest.raises(TypeError, match="shape"):
        q.put_array("big", np.uint8)
    with pytest.raises(ValueError, match="negative"):
        q.put_array((-1, 3), np.uint8)
    with pytest.raises(TypeError, match="Python objects"):
        q.put_array((3,), object)
    with pytest.raises(ValueError, match="frame_count"):
        sy.Queue(frame_bytes=100, frame_count=1)
    with pytest.raises(TypeError, match="frame_bytes"):
        sy.Queue(frame_bytes=1.5)
    assert all(kind == 0 and pin == 0 for kind, pin in states(q))  # nothing taken by the refusals


def test_a_stale_frame_record_is_skipped_and_counted():
    """A record whose buffer was reclaimed (its producer died just after putting it) names an old
    generation: get() skips it, counts it in `abandoned`, and returns the next item."""
    q = sy.Queue(frame_bytes=FRAME_BYTES, frame_count=2)
    q._put_frame_record(frame_record(0, 12345, SHAPE, np.dtype(np.uint8)))
    q.put("next")
    assert q.get(timeout=TIMEOUT) == "next" and q.abandoned == 1


# ---- across processes ---------------------------------------------------------------------------------------
def _produce_frames(q, producer, n):
    for seq in range(n):
        with q.put_array(SHAPE, np.uint8, timeout=TIMEOUT) as frame:
            frame[...] = frame_of(seq)
            frame[0, 0, 0] = producer
    for _ in range(2):
        q.put(None)


def _consume_until_none(q, results):
    seen, torn = [], 0
    while True:
        try:
            with q.get_array(timeout=TIMEOUT) as view:
                seq = int(view[0, 0, 1])
                torn += not np.array_equal(view[1:], frame_of(seq)[1:])
                seen.append(seq)
        except TypeError as stop:  # the None that ends the stream
            assert stop.item is None
            break
    results.put((seen, torn))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_frames_reach_exactly_one_of_two_workers_intact_under(method):
    ctx = mp.get_context(method)
    n = 300  # frames seq % 251: seq < 251 keeps each frame's value its own
    q, results = sy.Queue(frame_bytes=FRAME_BYTES, frame_count=6), ctx.Queue()
    workers = [ctx.Process(target=_consume_until_none, args=(q, results)) for _ in range(2)]
    producer = ctx.Process(target=_produce_frames, args=(q, 0, n))
    for proc in workers + [producer]:
        proc.start()
    outcomes = [results.get(timeout=TIMEOUT) for _ in workers]
    for proc in workers + [producer]:
        proc.join(TIMEOUT)
        assert proc.exitcode == 0
    assert sum(torn for _, torn in outcomes) == 0
    seen = sorted(s for got, _ in outcomes for s in got)
    assert seen == sorted(i % 251 for i in range(n))  # none lost, none twice
    for got, _ in outcomes:  # in order per producer, at each worker
        assert all((b - a) % 251 < 251 for a, b in zip(got, got[1:]))
    assert q.empty() and q.lost == 0 and q.abandoned == 0
    assert all(kind == 0 and pin == 0 for kind, pin in states(q))


def _hold_a_frame(q, ready):
    view = q.get_array(timeout=TIMEOUT).array  # held by this process while it lives
    ready.set()
    time.sleep(600)  # killed here
    print(view)


def test_a_consumer_killed_holding_a_frame_gives_its_buffer_back():
    """Allowed: the dead consumer's frame is gone (it was delivered to it); its buffer comes back
    to the producers within one liveness period of their wait. Forbidden: Full for ever."""
    ctx = mp.get_context("fork")
    q = sy.Queue(frame_bytes=FRAME_BYTES, frame_count=2)
    with q.put_array(SHAPE, np.uint8) as frame:
        frame[...] = frame_of(1)
    del frame
    ready = ctx.Event()
    victim = ctx.Process(target=_hold_a_frame, args=(q, ready))
    victim.start()
    assert ready.wait(TIMEOUT)
    held = q.put_array(SHAPE, np.uint8, timeout=TIMEOUT)  # the other buffer
    with pytest.raises(queue.Full):
        q.put_array(SHAPE, np.uint8, timeout=0.1)
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(TIMEOUT)
    with q.put_array(SHAPE, np.uint8, timeout=TIMEOUT) as frame:  # the dead one's, reclaimed
        frame[...] = frame_of(2)
    held.discard()
    assert np.array_equal(q.get(timeout=TIMEOUT), frame_of(2))


# ---- the per-frame fast paths (issue 19, fourth session) ----------------------------------------------------
def _stage_a_frame_and_hang(q, ready):
    writer = q.put_array(SHAPE, np.uint8, timeout=TIMEOUT)  # STAGED and pinned by this process
    writer.array[...] = frame_of(9)
    ready.set()
    time.sleep(600)  # killed here


def test_a_forked_producer_killed_holding_a_buffer_gives_it_back():
    """The parent used the frames first, so its pid is cached in the C library the child inherits:
    the child's buffer must still name the child (the cache is forgotten at fork), or the parent
    would wait on a live owner for ever. Allowed: the dead child's staged frame never arrives;
    every buffer comes back to the producers within one liveness period of their wait."""
    ctx = mp.get_context("fork")
    q = sy.Queue(frame_bytes=FRAME_BYTES, frame_count=2)
    with q.put_array(SHAPE, np.uint8) as frame:  # this process's pid now cached
        frame[...] = frame_of(1)
    del frame
    assert np.array_equal(q.get(timeout=TIMEOUT), frame_of(1))
    ready = ctx.Event()
    victim = ctx.Process(target=_stage_a_frame_and_hang, args=(q, ready))
    victim.start()
    assert ready.wait(TIMEOUT)
    kinds = [kind for kind, _ in states(q)]
    assert kinds.count(1) == 1  # one buffer STAGED (by the child)
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(TIMEOUT)
    assert victim.exitcode == -signal.SIGKILL
    for seq in (2, 3):  # both buffers, the dead child's reclaimed by the wait
        with q.put_array(SHAPE, np.uint8, timeout=TIMEOUT) as frame:
            frame[...] = frame_of(seq)
    del frame
    assert [int(q.get(timeout=TIMEOUT)[0, 0, 0]) for _ in range(2)] == [2, 3]
    assert q.empty() and all(kind == 0 and pin == 0 for kind, pin in states(q))


def test_a_frame_record_behind_spilled_items_keeps_its_place():
    """A ring too small for what is put: items spill to the feeder, and a frame record put after
    them must wait its turn behind them (not jump the spill), then arrive once."""
    q = sy.Queue(capacity_bytes=1024, frame_bytes=FRAME_BYTES, frame_count=2)  # 8 slots of 128 bytes
    items = [bytes(300) + bytes([i]) for i in range(6)]  # 3 slots each: most of them spill
    for item in items:
        q.put(item)
    with q.put_array(SHAPE, np.uint8, timeout=TIMEOUT) as frame:
        frame[...] = frame_of(4)
    del frame
    q.put("after")
    got = [q.get(timeout=TIMEOUT) for _ in items]
    assert got == items
    with q.get_array(timeout=TIMEOUT) as view:
        assert np.array_equal(view, frame_of(4))
    del view
    assert q.get(timeout=TIMEOUT) == "after" and q.empty()
    assert all(kind == 0 and pin == 0 for kind, pin in states(q))


def test_threads_sharing_one_handle_take_each_frame_once():
    """get_array reads a frame's record in the handle's kept buffer, under its lock: two consumer
    threads of one handle, a producer thread, every frame to exactly one of them, intact."""
    q, n = sy.Queue(frame_bytes=FRAME_BYTES, frame_count=6), 240
    got = [[], []]

    def consume(mine):
        while True:
            try:
                with q.get_array(timeout=TIMEOUT) as view:
                    seq = int(view[0, 0, 0])
                    assert np.array_equal(view, frame_of(seq))
                    mine.append(seq)
            except TypeError:  # the None that ends it
                return

    threads = [threading.Thread(target=consume, args=(got[i],)) for i in range(2)]
    for thread in threads:
        thread.start()
    for seq in range(n):
        with q.put_array(SHAPE, np.uint8, timeout=TIMEOUT) as frame:
            frame[...] = frame_of(seq)
        del frame
    q.put(None)
    q.put(None)
    for thread in threads:
        thread.join(TIMEOUT)
        assert not thread.is_alive()
    assert sorted(got[0] + got[1]) == list(range(n))
    assert all(kind == 0 and pin == 0 for kind, pin in states(q))


def test_a_frame_record_reads_back_what_was_written():
    for shape, dtype in [((1080, 1920, 3), np.uint8), ((7,), np.float64), ((), np.int32), ((2, 0, 5), np.uint16),
                         ((3, 4), np.dtype([("a", "<i4"), ("b", "<f8")]))]:
        dtype = np.dtype(dtype)
        record = frame_record(5, 123, shape, dtype)
        assert read_frame_record(record) == (5, 123, shape, dtype)
        assert read_frame_record(bytearray(record)) == (5, 123, shape, dtype)


def test_producer_threads_sharing_one_handle_never_write_the_same_buffer():
    """Two producer threads of one handle, each frame filled with its own value while the other
    thread fills another: each frame arrives once and whole (two threads handed one buffer would
    tear frames or lose one)."""
    q, per_thread = sy.Queue(frame_bytes=FRAME_BYTES, frame_count=6), 120
    errors = []

    def produce(first):
        try:
            for seq in range(first, first + per_thread):
                with q.put_array(SHAPE, np.uint8, timeout=TIMEOUT) as frame:
                    frame[...] = frame_of(seq)
                    time.sleep(0)  # let the other thread take a buffer meanwhile
                    frame[1:] = frame_of(seq)[1:]
                del frame
        except BaseException as exc:  # reported below: an assertion in a thread would be lost
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(first,)) for first in (0, per_thread)]
    for thread in threads:
        thread.start()
    seen = []
    for _ in range(2 * per_thread):
        with q.get_array(timeout=TIMEOUT) as view:
            seq = int(view[0, 0, 0])
            assert np.array_equal(view, frame_of(seq))
            seen.append(seq)
        del view
    for thread in threads:
        thread.join(TIMEOUT)
        assert not thread.is_alive()
    assert not errors
    assert sorted(seen) == list(range(2 * per_thread))  # 2 * 120 < 251: every value its own
    assert all(kind == 0 and pin == 0 for kind, pin in states(q))
