"""RingBuffer correctness in one process: delivery, gating graphs, wrap-around, views, bad input."""
import os
import queue
import threading
import uuid

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sympathy as sy
from sympathy.ring import WAITS
from sympathy._ring import ffi, lib


def unique_name() -> str:
    return f"sytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"


# ---- layout ----------------------------------------------------------------------------------------
def test_hot_fields_sit_on_their_own_128_byte_blocks():
    out = ffi.new("int64_t[]", 16)
    n = lib.sy_ring_layout_offsets(out, 16)
    cursor, gating, wake, registry, consumers, producers, consumer_rec, producer_rec, header = list(out)[:9]
    assert [cursor, gating, wake, registry, consumers] == [128, 256, 384, 512, 640]
    assert consumer_rec == 256 and producer_rec == 128
    assert producers == consumers + 64 * consumer_rec and header % 128 == 0
    assert n == 11


# ---- delivery ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("wait", sorted(WAITS))
@pytest.mark.parametrize("producer", ["single", "multi"])
def test_items_arrive_once_in_order_across_threads(wait, producer):
    n = 20_000
    with sy.RingBuffer(64, np.int64, producer=producer, wait=wait) as rb:
        c = rb.consumer()
        t = threading.Thread(target=lambda: [rb.publish_batch(np.arange(i, min(i + 100, n), dtype=np.int64))
                                             for i in range(0, n, 100)])
        t.start()
        got = []
        while len(got) < n:
            got.extend(c.get_batch(1000, timeout=10).tolist())
        t.join()
        assert got == list(range(n))


def test_get_returns_python_scalars_records_and_bytes():
    with sy.RingBuffer(4, np.float32) as rb:
        c = rb.consumer()
        rb.publish(1.5)
        assert c.get() == 1.5
    rec = np.dtype([("producer", np.int32), ("seq", np.int64)])
    with sy.RingBuffer(4, rec) as rb:
        c = rb.consumer()
        rb.publish((3, 9))
        item = c.get()
        assert item["producer"] == 3 and item["seq"] == 9
    with sy.RingBuffer(4, item_size=5) as rb:
        c = rb.consumer()
        rb.publish(b"abc")
        assert c.get() == b"abc\0\0"


@pytest.mark.parametrize("shape", ["multicast", "pipeline", "diamond"])
def test_consumer_graphs_see_everything_and_respect_order(shape):
    with sy.RingBuffer(16, np.int64) as rb:
        c1 = rb.consumer()
        if shape == "multicast":
            cs = [c1, rb.consumer(), rb.consumer()]
        elif shape == "pipeline":
            c2 = rb.consumer(after=[c1])
            cs = [c1, c2, rb.consumer(after=[c2])]
        else:
            c2 = rb.consumer()
            cs = [c1, c2, rb.consumer(after=[c1, c2])]
        n = 5000
        seen = {i: [] for i in range(3)}
        violations = []

        def run(i):
            c = cs[i]
            while len(seen[i]) < n:
                batch = c.get_batch(7, timeout=10)
                # a downstream consumer never runs ahead of the ones it follows: each upstream
                # had released (its shared sequence) at least what this batch holds
                for up in c.after:
                    upstream = next(x for x in cs if x.index == up)
                    if upstream.sequence < batch[-1]:
                        violations.append((i, up, int(batch[-1]), upstream.sequence))
                seen[i].extend(batch.tolist())

        threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for lo in range(0, n, 50):
            rb.publish_batch(np.arange(lo, lo + 50, dtype=np.int64))
        for t in threads:
            t.join()
        assert all(seen[i] == list(range(n)) for i in range(3))
        assert not violations


def test_only_leaf_consumers_gate_the_producer():
    with sy.RingBuffer(4, np.int64) as rb:
        c1 = rb.consumer()
        c2 = rb.consumer(after=[c1])
        rb.publish_batch(np.arange(4, dtype=np.int64))
        c1.get_batch(4)
        with pytest.raises(queue.Full):  # c1 is done, but c2 (the leaf) still holds every slot
            rb.publish(9, timeout=0.01)
        c2.get_batch(2)
        rb.publish_batch(np.array([4, 5], dtype=np.int64), timeout=0.01)
        with pytest.raises(queue.Full):
            rb.publish(6, timeout=0)
        assert rb.peers()[2]["after"] == [c1.index]


@settings(max_examples=25, deadline=None)
@given(log_capacity=st.integers(1, 8), batches=st.lists(st.integers(1, 300), min_size=1, max_size=30),
       max_n=st.integers(1, 64), producer=st.sampled_from(["single", "multi"]))
def test_wraps_around_many_times(log_capacity, batches, max_n, producer):
    capacity = 1 << log_capacity
    with sy.RingBuffer(capacity, np.int64, producer=producer) as rb:
        c = rb.consumer()
        total = sum(batches)
        got = []

        def consume():
            while len(got) < total:
                got.extend(c.get_batch(max_n, timeout=10).tolist())

        t = threading.Thread(target=consume)
        t.start()
        start = 0
        for b in batches:  # batches larger than the capacity go in capacity-sized pieces
            rb.publish_batch(np.arange(start, start + b, dtype=np.int64), timeout=10)
            start += b
        t.join()
        assert got == list(range(total))
        assert rb.cursor == total - 1


def test_view_batch_is_read_only_zero_copy_and_stops_at_the_ring_end():
    with sy.RingBuffer(8, np.int64) as rb:
        c = rb.consumer()
        rb.publish_batch(np.arange(6, dtype=np.int64))
        c.get_batch(6)
        rb.publish_batch(np.arange(10, 15, dtype=np.int64))  # slots 6, 7, 0, 1, 2
        with c.view_batch(100) as view:
            assert view.tolist() == [10, 11] and not view.flags.writeable
            assert np.shares_memory(view, rb._slots)
        with c.view_batch(100) as view:
            assert view.tolist() == [12, 13, 14]
        assert c.sequence == 10


def test_claim_writes_in_place_or_through_scratch_at_the_wrap():
    with sy.RingBuffer(8, np.int64) as rb:
        c = rb.consumer()
        with rb.claim(6) as slots:
            assert np.shares_memory(slots, rb._slots)
            slots[:] = np.arange(6)
        assert c.get_batch(6).tolist() == list(range(6))
        with rb.claim(4) as slots:  # slots 6, 7, 0, 1: not contiguous
            slots[:] = [6, 7, 8, 9]
        assert c.get_batch(8).tolist() == [6, 7, 8, 9]


def test_close_stream_drains_then_raises_closed():
    with sy.RingBuffer(8, np.int64) as rb:
        c = rb.consumer()
        rb.publish_batch(np.arange(3, dtype=np.int64))
        rb.close_stream()
        assert list(c) == [0, 1, 2]
        with pytest.raises(sy.ClosedError):
            c.get(timeout=1)
        with pytest.raises(sy.ClosedError):
            rb.publish(1)


def test_blocked_waiter_is_woken_by_close_stream():
    with sy.RingBuffer(8, np.int64, wait="blocking") as rb:
        c = rb.consumer()
        errors = []
        t = threading.Thread(target=lambda: errors.append(pytest.raises(sy.ClosedError, c.get)))
        t.start()
        threading.Event().wait(0.05)
        rb.close_stream()
        t.join(timeout=5)
        assert not t.is_alive() and errors


def test_timeouts_follow_the_queue_module():
    with sy.RingBuffer(2, np.int64) as rb:
        c = rb.consumer()
        with pytest.raises(queue.Empty):
            c.get(timeout=0)
        with pytest.raises(queue.Empty):
            c.get_batch(4, timeout=0.01)
        rb.publish_batch(np.arange(2, dtype=np.int64))
        with pytest.raises(queue.Full):
            rb.publish(3, timeout=0.001)


def test_single_producer_ring_refuses_a_second_producer_process_wide():
    name = unique_name()
    with sy.RingBuffer(8, np.int64, name=name) as rb:
        rb.publish(1)
        other = sy.RingBuffer.attach(name, np.int64)
        with pytest.raises(ValueError, match="single-producer"):
            other.publish(2)
        other.close()


def test_closing_an_upstream_consumer_first_is_refused():
    with sy.RingBuffer(8, np.int64) as rb:
        c1 = rb.consumer()
        c2 = rb.consumer(after=[c1])
        with pytest.raises(ValueError, match="close them first"):
            c1.close()
        c2.close()
        c1.close()


# ---- shared memory -----------------------------------------------------------------------------------
def test_named_ring_is_0600_and_attachable():
    name = unique_name()
    with sy.RingBuffer(16, np.int64, name=name, producer="multi") as rb:
        assert oct(os.stat(f"/dev/shm/{name}").st_mode & 0o777) == "0o600"
        other = sy.RingBuffer.attach(name, np.int64)
        c = other.consumer()
        rb.publish(42)
        assert c.get(timeout=5) == 42
        assert other.capacity == 16 and other.producer_kind == "multi"
        other.close()
    assert not os.path.exists(f"/dev/shm/{name}")  # the creator unlinks on close


def test_cleanup_then_recreate():
    name = unique_name()
    rb = sy.RingBuffer(8, np.int64, name=name)
    with pytest.raises(FileExistsError):
        sy.RingBuffer(8, np.int64, name=name)
    assert sy.RingBuffer.cleanup(name) is True
    assert sy.RingBuffer.cleanup(name) is False
    sy.RingBuffer(8, np.int64, name=name).close()
    rb.close(unlink=False)


# ---- bad input: clear errors, nothing written ----------------------------------------------------------
@pytest.mark.parametrize("capacity", [0, -4, 3, 1000, 1])
def test_capacity_must_be_a_power_of_two(capacity):
    with pytest.raises(ValueError, match="capacity must be a power of two"):
        sy.RingBuffer(capacity, np.int64)


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(), ValueError, "exactly one of dtype"),
    (dict(dtype=np.int64, item_size=8), ValueError, "exactly one of dtype"),
    (dict(dtype=object), TypeError, "Python objects"),
    (dict(item_size=0), ValueError, "item_size must be in"),
    (dict(dtype=np.int64, producer="many"), ValueError, "producer must be one of"),
    (dict(dtype=np.int64, wait="spin"), ValueError, "wait must be one of"),
    (dict(dtype=np.int64, name="bad/name"), ValueError, "name must be"),
])
def test_bad_constructor_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        sy.RingBuffer(8, **kwargs)


def test_bad_batches_and_items_write_nothing():
    with sy.RingBuffer(8, np.int64) as rb:
        c = rb.consumer()
        with pytest.raises(TypeError, match="dtype int64"):
            rb.publish_batch(np.arange(3, dtype=np.int32))
        with pytest.raises(ValueError, match="1-D"):
            rb.publish_batch(np.zeros((2, 2), dtype=np.int64))
        with pytest.raises(TypeError, match="NumPy array"):
            rb.publish_batch([1, 2, 3])
        with pytest.raises(ValueError, match="publish_batch"):
            rb.publish(np.arange(2))
        with pytest.raises(ValueError, match="does not fit"):
            rb.publish(2 ** 70)
        with pytest.raises(ValueError, match="timeout must be >= 0"):
            rb.publish(1, timeout=-1)
        with pytest.raises(ValueError, match="max_n"):
            c.get_batch(0)
        with pytest.raises(ValueError, match=r"n must be an int in \[1, capacity=8\]"):
            with rb.claim(9):
                pass
        assert rb.cursor == -1
        with pytest.raises(queue.Empty):
            c.get(timeout=0)
    with sy.RingBuffer(8, item_size=4) as rb:
        c = rb.consumer()
        with pytest.raises(ValueError, match="at most item_size=4"):
            rb.publish(b"12345")
        with pytest.raises(ValueError, match=r"shape \(n, 4\)"):
            rb.publish_batch(np.zeros((2, 5), dtype=np.uint8))
        assert rb.cursor == -1


def test_bad_consumer_dependencies():
    with sy.RingBuffer(8, np.int64) as rb:
        with pytest.raises(ValueError, match="live consumer"):
            rb.consumer(after=[5])
        with pytest.raises(ValueError, match="after must hold"):
            rb.consumer(after=[-1])


def test_attach_to_missing_segment():
    with pytest.raises(FileNotFoundError, match="no shared ring"):
        sy.RingBuffer.attach(unique_name(), np.int64)


@pytest.mark.parametrize("damage", ["magic", "version", "capacity", "truncated", "empty"])
def test_attach_refuses_corrupt_segments(damage):
    name = unique_name()
    rb = sy.RingBuffer(16, np.int64, name=name)
    path = f"/dev/shm/{name}"
    try:
        with open(path, "r+b") as f:
            if damage == "magic":
                f.write(b"NOTARING")
            elif damage == "version":
                f.seek(8)
                f.write((99).to_bytes(4, "little"))
            elif damage == "capacity":
                f.seek(16)
                f.write((32).to_bytes(8, "little"))  # checksum no longer matches
            elif damage == "truncated":
                f.truncate(4096)
            else:
                f.truncate(0)
        with pytest.raises(ValueError, match="not a valid sympathy ring"):
            sy.RingBuffer.attach(name, np.int64)
    finally:
        rb.close()


def test_attach_with_the_wrong_item_size():
    name = unique_name()
    with sy.RingBuffer(16, np.int64, name=name):
        with pytest.raises(ValueError, match="8-byte items"):
            sy.RingBuffer.attach(name, np.int32)


# ---- get() read-ahead -------------------------------------------------------------------------------
def test_get_reads_ahead_only_when_no_consumer_runs_after():
    with sy.RingBuffer(16, np.int64) as rb:
        c1 = rb.consumer()
        c2 = rb.consumer(after=[c1])
        rb.publish_batch(np.arange(10, dtype=np.int64))
        assert c1.get() == 0
        assert c1.sequence == 0  # one at a time: c2 follows c1
        assert c2.get_batch(10).tolist() == [0]
        c2.close()
        assert c1.get() == 1
        assert c1.sequence == 9  # nobody follows any more: everything ready was taken at once
        assert [c1.get() for _ in range(3)] == [2, 3, 4]


@settings(max_examples=30, deadline=None)
@given(calls=st.lists(st.tuples(st.sampled_from(["get", "get_batch", "view_batch"]), st.integers(1, 9)),
                      min_size=1, max_size=40))
def test_mixing_get_get_batch_and_view_batch_keeps_order(calls):
    with sy.RingBuffer(32, np.int64) as rb:
        c = rb.consumer()
        published = 0
        got = []
        for kind, n in calls:
            if published - len(got) < 10:
                rb.publish_batch(np.arange(published, published + 10, dtype=np.int64))
                published += 10
            if kind == "get":
                got.append(c.get(timeout=1))
            elif kind == "get_batch":
                got.extend(c.get_batch(n, timeout=1).tolist())
            else:
                with c.view_batch(n, timeout=1) as view:
                    got.extend(view.tolist())
        assert got == list(range(len(got)))


@pytest.mark.parametrize("dtype", [">i4", "<i4", "i2", "u8", "i1", "f4", ">f8", "f2", "?"])
def test_plain_dtypes_round_trip_in_either_byte_order(dtype):
    with sy.RingBuffer(4, np.dtype(dtype)) as rb:
        c = rb.consumer()
        value = True if dtype == "?" else 3
        rb.publish(value)
        rb.publish_batch(np.array([value], dtype))
        assert c.get() == value
        batch = c.get_batch(4)
        assert batch.dtype == np.dtype(dtype) and batch.tolist() == [value]


def test_raw_rings_batch_as_uint8_rows_both_ways():
    with sy.RingBuffer(8, item_size=3) as rb:
        c = rb.consumer()
        rows = np.arange(12, dtype=np.uint8).reshape(4, 3)
        rb.publish_batch(rows)
        got = c.get_batch(10)
        assert got.dtype == np.uint8 and got.shape == (4, 3) and (got == rows).all()
        rb.publish_batch(rows)
        out = np.zeros((8, 3), np.uint8)
        assert (c.get_batch(8, out=out) == rows).all()
        with pytest.raises(ValueError, match="item shape"):
            c.get_batch(2, out=np.zeros(8, np.uint8))
        with rb.claim(6) as slots:  # wraps: scratch rows copied in at publish
            slots[:] = 7
        assert (c.get_batch(8) == 7).all()
