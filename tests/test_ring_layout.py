"""The contiguous layout (issue 19: headers apart from the items) against the slots layout, and the
batched path's reused block (get_batch hands out slices of it: none may ever be overwritten while
alive). Same calls, same results; the survival and fault tests run it too (test_ring_survival.py,
tests/stress/test_ring_faults.py)."""
import multiprocessing as mp
import os
import queue
import threading
import uuid

import numpy as np
import pytest

import sympathy as sy
from sympathy.ring._core import ffi, lib

LAYOUTS = ["slots", "contiguous"]


def test_contiguous_items_are_one_plain_array():
    with sy.RingBuffer(16, np.int64, layout="contiguous") as rb:
        assert rb.layout == "contiguous" and "layout='contiguous'" in repr(rb)
        assert rb._slots.strides == (8,) and rb._slots.flags.c_contiguous
        info = ffi.new("sy_ring_info *")
        lib.sy_ring_get_info(rb._handle, info)
        assert info.layout == lib.SY_RING_LAYOUT_CONTIGUOUS and info.slot_stride == 8 and info.payload_offset == 0
    with sy.RingBuffer(16, np.int64) as rb:
        assert rb.layout == "slots" and rb._slots.strides == (16,)


def test_a_bad_layout_is_refused_before_anything_is_made():
    with pytest.raises(ValueError, match="layout must be one of"):
        sy.RingBuffer(16, np.int64, layout="packed")


def _script(rb: sy.RingBuffer, seed: int) -> list:
    """Every way in and out, in a random order of sizes; what each consumer saw."""
    rng = np.random.default_rng(seed)
    first = rb.consumer()
    after = rb.consumer(after=[first])
    poller = rb.poller(after=[first])
    seen, seen_after, polled, value = [], [], [], 0
    for _ in range(40):
        k = int(rng.integers(1, rb.capacity + 1))
        way = int(rng.integers(4))
        if way == 0:
            rb.publish_batch(np.arange(value, value + k, dtype=np.int64), timeout=5)
        elif way == 1:
            with rb.claim(k, timeout=5) as slots:
                slots[:] = np.arange(value, value + k)
        else:
            for v in range(value, value + k):
                rb.publish(v, timeout=5)
        value += k
        while len(seen) < value:
            if rng.integers(2):
                seen += rb_get_batch(first, int(rng.integers(1, 40)))
            else:
                with first.view_batch(int(rng.integers(1, 40)), timeout=5) as items:
                    seen += items.tolist()
        while len(seen_after) < value:
            seen_after.append(after.get(timeout=5))
        while len(polled) < value:
            poller.poll(lambda event, sequence, end: polled.append(int(event)))
    return [seen, seen_after, polled, value]


def rb_get_batch(consumer, n):
    return consumer.get_batch(n, timeout=5).tolist()


@pytest.mark.parametrize("producer", ["single", "multi"])
def test_both_layouts_deliver_the_same(producer):
    results = {}
    for layout in LAYOUTS:
        with sy.RingBuffer(32, np.int64, producer=producer, layout=layout) as rb:
            results[layout] = _script(rb, seed=19)
    seen, seen_after, polled, n = results["contiguous"]
    assert seen == seen_after == polled == list(range(n))
    assert results["slots"] == results["contiguous"]


def test_structured_items_wrap_the_ring_in_the_contiguous_layout():
    tick = np.dtype([("t", "<f8"), ("id", "<i4"), ("flag", "u1")])
    with sy.RingBuffer(8, tick, layout="contiguous") as rb:
        c = rb.consumer()
        got = []
        for start in range(0, 60, 5):  # batches of 5 in a ring of 8: every other one wraps
            batch = np.zeros(5, tick)
            batch["id"] = np.arange(start, start + 5)
            rb.publish_batch(batch)
            got += c.get_batch(8, timeout=5)["id"].tolist()
        assert got == list(range(60))


def _attached_producer(name, n, ready):
    rb = sy.RingBuffer.attach(name)
    ready.wait(30)
    for start in range(0, n, 100):
        rb.publish_batch(np.arange(start, start + 100, dtype=np.int64), timeout=30)
    rb.close()


def test_a_named_contiguous_ring_across_processes():
    name = f"sytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    ctx = mp.get_context("fork")
    with sy.RingBuffer(256, np.int64, name=name, layout="contiguous") as rb:
        c = rb.consumer()
        ready = ctx.Event()
        child = ctx.Process(target=_attached_producer, args=(name, 20_000, ready))
        child.start()
        ready.set()
        got = []
        while len(got) < 20_000:
            got += c.get_batch(512, timeout=30).tolist()
        child.join(30)
        assert child.exitcode == 0 and got == list(range(20_000))
        other = sy.RingBuffer.attach(name)
        assert other.layout == "contiguous"
        other.close()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_two_threads_batching_into_one_single_producer_never_duplicate_or_lose(layout):
    """publish_batch's first try (no wait, GIL kept) takes the single-producer guard as a claim does:
    a second thread inside is refused, never given the same slots."""
    rb = sy.RingBuffer(64, np.int64, wait="yield", layout=layout)
    c = rb.consumer()
    published, refused = [[], []], [0, 0]

    def produce(k):
        for start in range(k * 1_000_000, k * 1_000_000 + 40_000, 8):
            try:
                rb.publish_batch(np.arange(start, start + 8, dtype=np.int64), timeout=30)
                published[k] += range(start, start + 8)
            except RuntimeError:
                refused[k] += 1

    threads = [threading.Thread(target=produce, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    got = []
    while True:
        done = not any(t.is_alive() for t in threads)
        try:
            got += c.get_batch(1024, timeout=0.5).tolist()
        except queue.Empty:
            if done:
                break
    for t in threads:
        t.join()
    assert len(got) == len(set(got)), "duplicated items"
    assert sorted(got) == sorted(published[0] + published[1])
    rb.close()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_batches_kept_are_never_overwritten(layout):
    """get_batch's arrays are slices of one reused block: what a caller still holds (the array, a
    view of it, a memoryview of it) must keep its items whatever comes after."""
    with sy.RingBuffer(1024, np.int64, layout=layout) as rb:
        c = rb.consumer()
        kept, views = [], []
        for i in range(600):  # past several blocks' worth (1 MiB = 131 072 items)
            rb.publish_batch(np.full(500, i, np.int64))
            batch = c.get_batch(1024)
            if i % 7 == 0:
                kept.append((i, batch))
            elif i % 7 == 1:
                views.append((i, batch[100:200]))  # the batch itself dropped, a view of it kept
            elif i % 7 == 2:
                views.append((i, np.asarray(memoryview(batch))))
            del batch
        for i, batch in kept + views:
            assert (batch == i).all(), f"batch {i} was overwritten"


def test_a_dropped_batch_makes_room_again():
    """When the caller drops each batch, the next lands where it was (the block does not grow)."""
    with sy.RingBuffer(1024, np.int64, layout="contiguous") as rb:
        c = rb.consumer()
        rb.publish_batch(np.arange(100, dtype=np.int64))
        first = c.get_batch(1024)
        where = first.__array_interface__["data"][0]  # the address only: holding the block would keep it
        del first
        for i in range(5000):
            rb.publish_batch(np.full(100, i, np.int64))
            batch = c.get_batch(1024)
            assert (batch == i).all() and batch.__array_interface__["data"][0] == where
            del batch
        assert c._arena_at == 100


@pytest.mark.parametrize("layout", LAYOUTS)
def test_get_batch_never_overtakes_what_get_read_ahead(layout):
    """get() takes up to READ_AHEAD items in one C call; if it is interrupted before storing them
    (the count is in C-written memory), get_batch's first try (read_now, which no longer checks
    that count in Python) must still hand those out first: read_now refuses while they are held."""
    with sy.RingBuffer(1024, np.int64, layout=layout) as rb:
        c = rb.consumer()
        rb.publish_batch(np.arange(600, dtype=np.int64))
        assert c.get(timeout=5) == 0  # takes 256, hands out 1
        assert c.get_batch(10).tolist() == list(range(1, 11))  # the held-back ones first
        assert c.get_batch(1024).tolist() == list(range(11, 256))
        assert c.get_batch(1024).tolist() == list(range(256, 600))
        rb.publish_batch(np.arange(600, 1000, dtype=np.int64))
        # the interrupted window: the C call took the items, Python never stored them
        assert lib.sy_ring_read_ahead(c._handle, c._ahead_ptr, 256, -1, c._ahead_n) == 0
        assert c._ahead_n[0] == 256 and not c._ahead
        assert c.get_batch(1024).tolist() == list(range(600, 856))
        assert c.get_batch(1024).tolist() == list(range(856, 1000))
