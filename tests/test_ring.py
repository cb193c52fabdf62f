"""RingBuffer correctness in one process: delivery, gating graphs, wrap-around, views, bad input."""
import os
import queue
import threading
import time
import uuid

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sympathy as sy
from sympathy.ring import WAITS
from sympathy._errors import SY_EINVAL
from sympathy._ring import ffi, lib


def unique_name() -> str:
    return f"sytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"


# ---- layout ----------------------------------------------------------------------------------------
def _layout(rb) -> dict:
    out = ffi.new("int64_t[]", 32)
    n = lib.sy_ring_layout_offsets(rb._handle, out, 32)
    names = ("cursor", "gating", "consumer0", "consumer1", "wake", "registry", "consumer_records",
             "producer_records", "consumer_rec", "producer_rec", "header", "slots", "slot_stride",
             "payload", "producer_cache", "consumer_cache")
    assert n == len(names)
    return dict(zip(names, list(out)[:n]))


def test_hot_fields_sit_on_their_own_128_byte_blocks():
    with sy.RingBuffer(8, np.int64) as rb:
        at = _layout(rb)
    assert [at["wake"], at["registry"], at["cursor"], at["consumer0"], at["consumer1"]] == [128, 256, 384, 512, 640]
    assert at["gating"] == 384 + 65 * 128  # multi-producer only: after the 64 consumer sequences
    assert at["consumer_records"] == 384 + 66 * 128 and at["consumer_rec"] == at["producer_rec"] == 128
    assert at["producer_records"] == at["consumer_records"] + 64 * 128
    assert at["header"] % 128 == 0 and at["slots"] == at["header"]
    # the cached copies of the other side's index sit beside the owner's own private index
    assert at["producer_cache"] == at["consumer_cache"] == 8


@pytest.mark.parametrize("stride", [8, 64, 128])
def test_sequence_stride_packs_the_same_ring(stride):
    """The false-sharing ablation's layouts are this ring with its hot sequences `stride` apart."""
    config = ffi.new("sy_ring_config *", {"capacity": 8, "slot_size": 8, "producer_kind": 0, "wait": 0,
                                          "sequence_stride": stride})
    out = ffi.new("sy_ring **")
    assert lib.sy_ring_create(config, ffi.NULL, out) == 0
    ring = ffi.gc(out[0], lib.sy_ring_free)
    offsets = ffi.new("int64_t[]", 32)
    lib.sy_ring_layout_offsets(ring, offsets, 32)
    cursor, gating, consumer0, consumer1 = list(offsets)[:4]
    assert [consumer0 - cursor, consumer1 - consumer0, gating - cursor] == [stride, stride, 65 * stride]


def test_sequence_stride_must_be_8_64_or_128():
    config = ffi.new("sy_ring_config *", {"capacity": 8, "slot_size": 8, "sequence_stride": 32})
    assert lib.sy_ring_create(config, ffi.NULL, ffi.new("sy_ring **")) == SY_EINVAL


@pytest.mark.parametrize("item_size, stride", [(1, 16), (8, 16), (9, 32), (24, 32), (56, 64), (57, 128),
                                               (120, 128), (121, 192)])
def test_a_slot_is_its_published_header_then_the_item(item_size, stride):
    """Items up to 56 B share one cache line with their header (power-of-two strides); larger ones
    start a line. The views stay zero-copy, just strided."""
    with sy.RingBuffer(8, item_size=item_size) as rb:
        at = _layout(rb)
        assert at["slot_stride"] == stride and at["payload"] == 8
        assert rb._slots.strides == (stride, 1)
        c = rb.consumer()
        rb.publish(bytes(range(1, min(item_size, 255) + 1)) if item_size < 255 else b"x")
        with c.view_batch(1) as view:
            assert np.shares_memory(view, rb._slots)
            assert bytes(view[0][:3]) == bytes(range(1, min(item_size, 3) + 1))


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


def test_close_stream_does_not_cut_off_a_downstream_consumer():
    """Closed means drained of what the PRODUCERS published: a consumer after another still gets
    what its upstream has yet to pass on (queue.Empty meanwhile, not ClosedError); the poller too."""
    with sy.RingBuffer(8, np.int64) as rb:
        c1 = rb.consumer()
        c2 = rb.consumer(after=[c1])
        poller = rb.poller(after=[c1])
        rb.publish_batch(np.arange(3, dtype=np.int64))
        rb.close_stream()
        with pytest.raises(queue.Empty):
            c2.get_batch(8, timeout=0.05)
        assert poller.poll(lambda *a: None) is sy.PollState.GATING
        assert c1.get_batch(8).tolist() == [0, 1, 2]
        assert c2.get_batch(8, timeout=1).tolist() == [0, 1, 2]
        assert poller.poll(lambda *a: None) is sy.PollState.PROCESSING
        for drained in (lambda: c2.get(timeout=1), lambda: poller.poll(lambda *a: None)):
            with pytest.raises(sy.ClosedError):
                drained()


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


def test_attach_refuses_a_version_1_segment_by_name():
    """Format 2 moved the published flags into the slots: a v1 segment must not be read as v2."""
    name = unique_name()
    rb = sy.RingBuffer(16, np.int64, name=name)
    try:
        with open(f"/dev/shm/{name}", "r+b") as f:
            f.seek(8)
            f.write((1).to_bytes(4, "little"))
        with pytest.raises(ValueError, match=rf"format is version 1, this sympathy reads version "
                                             rf"{lib.sy_ring_format_version()}"):
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


# ---- the event poller (LMAX EventPoller) --------------------------------------------------------
def test_poller_states_idle_processing_and_batches():
    with sy.RingBuffer(8, np.int64) as rb:
        poller = rb.poller()
        seen = []
        assert poller.poll(lambda *a: seen.append(a)) is sy.PollState.IDLE
        rb.publish_batch(np.arange(5, 10, dtype=np.int64))
        assert poller.poll(lambda *a: seen.append(a)) is sy.PollState.PROCESSING
        assert seen == [(5, 0, False), (6, 1, False), (7, 2, False), (8, 3, False), (9, 4, True)]
        assert poller.sequence == 4
        assert poller.poll(lambda *a: seen.append(a)) is sy.PollState.IDLE


def test_poller_handler_returning_false_stops_after_that_event():
    with sy.RingBuffer(8, np.int64) as rb:
        poller = rb.poller()
        rb.publish_batch(np.arange(4, dtype=np.int64))
        seen = []
        assert poller.poll(lambda e, s, end: seen.append(e) or e != 1) is sy.PollState.PROCESSING
        assert seen == [0, 1] and poller.sequence == 1
        poller.poll(lambda e, s, end: seen.append(e))  # None goes on
        assert seen == [0, 1, 2, 3]


def test_poller_exception_keeps_the_failing_event_for_the_next_poll():
    with sy.RingBuffer(8, np.int64) as rb:
        poller = rb.poller()
        rb.publish_batch(np.arange(3, dtype=np.int64))

        def fail_on_one(event, sequence, end):
            if event == 1:
                raise RuntimeError("boom")

        with pytest.raises(RuntimeError, match="boom"):
            poller.poll(fail_on_one)
        assert poller.sequence == 0
        seen = []
        poller.poll(lambda e, s, end: seen.append((e, s)))
        assert seen == [(1, 1), (2, 2)]


def test_poller_gating_while_the_consumer_it_runs_after_holds_events():
    with sy.RingBuffer(8, np.int64) as rb:
        first = rb.consumer()
        poller = rb.poller(after=[first])
        downstream = rb.consumer(after=[poller])
        rb.publish_batch(np.arange(3, dtype=np.int64))
        assert poller.poll(lambda *a: None) is sy.PollState.GATING  # published, not yet released by first
        assert first.get_batch(2).tolist() == [0, 1]
        seen = []
        assert poller.poll(lambda e, s, end: seen.append(e)) is sy.PollState.PROCESSING
        assert seen == [0, 1]
        assert downstream.get_batch(8).tolist() == [0, 1]  # released by the poller only once handled


def test_poller_gating_while_a_multi_producer_claim_is_unpublished():
    with sy.RingBuffer(8, np.int64, producer="multi") as rb:
        poller = rb.poller()
        with rb.claim(2) as slots:
            slots[:] = [4, 5]
            assert poller.poll(lambda *a: None) is sy.PollState.GATING
        seen = []
        assert poller.poll(lambda e, s, end: seen.append(e)) is sy.PollState.PROCESSING
        assert seen == [4, 5]


def test_poller_wraps_and_hands_out_records_and_bytes():
    rec = np.dtype([("id", np.int32), ("x", np.float64)])
    with sy.RingBuffer(4, rec) as rb:
        poller = rb.poller()
        got = []
        for round_ in range(3):  # 9 events through 4 slots
            rb.publish_batch(np.array([(round_ * 3 + i, 0.5) for i in range(3)], dtype=rec))
            poller.poll(lambda e, s, end: got.append((int(e["id"]), s)))
        assert got == [(i, i) for i in range(9)]
    with sy.RingBuffer(4, item_size=3) as rb:
        poller = rb.poller()
        rb.publish(b"ab")
        got = []
        poller.poll(lambda e, s, end: got.append(e))
        assert got == [b"ab\0"]


def test_poller_raises_closed_once_the_stream_is_drained():
    with sy.RingBuffer(8, np.int64) as rb:
        poller = rb.poller()
        rb.publish(1)
        rb.close_stream()
        assert poller.poll(lambda *a: None) is sy.PollState.PROCESSING
        with pytest.raises(sy.ClosedError):
            poller.poll(lambda *a: None)


def test_c_poll_calls_a_c_handler_in_order_and_releases_what_it_saw():
    """sy_ring_poll itself, with a C-callable handler: stops where the handler says."""
    with sy.RingBuffer(16, np.int64) as rb:
        c = rb.consumer()
        rb.publish_batch(np.arange(10, 16, dtype=np.int64))
        seen = []

        @ffi.callback("int(void *, const void *, int64_t, int)")
        def handler(ctx, event, sequence, end_of_batch):
            seen.append((ffi.cast("int64_t *", event)[0], sequence, end_of_batch))
            return 0 if sequence == 3 else 1

        assert lib.sy_ring_poll(c._handle, handler, ffi.NULL) == lib.SY_POLL_PROCESSING
        assert seen == [(10, 0, 0), (11, 1, 0), (12, 2, 0), (13, 3, 0)] and c.sequence == 3
        assert lib.sy_ring_poll(c._handle, handler, ffi.NULL) == lib.SY_POLL_PROCESSING
        assert seen[-1] == (15, 5, 1) and c.sequence == 5
        assert lib.sy_ring_poll(c._handle, handler, ffi.NULL) == lib.SY_POLL_IDLE


def test_poller_across_threads_delivers_everything_once():
    n = 50_000
    with sy.RingBuffer(64, np.int64, producer="multi") as rb:
        poller = rb.poller()
        t = threading.Thread(target=lambda: [rb.publish_batch(np.arange(i, i + 50, dtype=np.int64))
                                             for i in range(0, n, 50)])
        t.start()
        got = []
        while len(got) < n:
            if poller.poll(lambda e, s, end: got.append(e)) is not sy.PollState.PROCESSING:
                time.sleep(0)
        t.join()
        assert got == list(range(n))


@pytest.mark.parametrize("item_size", [8, 300_000])
def test_get_batch_returns_copies_sized_to_what_was_ready(item_size):
    """Small items land in the consumer's kept scratch buffer, large ones in an exact allocation:
    either way the caller gets its own contiguous copy that later reads never overwrite."""
    with sy.RingBuffer(8, item_size=item_size) as rb:
        c = rb.consumer()
        rb.publish_batch(np.full((3, item_size), 1, np.uint8))
        first = c.get_batch(8)
        rb.publish_batch(np.full((2, item_size), 2, np.uint8))
        second = c.get_batch(8)
        assert first.shape == (3, item_size) and second.shape == (2, item_size)
        assert first.flags.c_contiguous and (first == 1).all() and (second == 2).all()
