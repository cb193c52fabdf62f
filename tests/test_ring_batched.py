"""The batched path's shortcuts (docs/pipeline.md, "The batched path") change nothing a caller sees:
publish_batch's kept array is re-checked when it changes in place and is never confused between
threads; get_batch's one-call path returns what the general path returns."""
import threading

import numpy as np
import pytest

import sympathy as sy


def test_the_same_array_again_publishes_its_new_contents():
    with sy.RingBuffer(64, np.int64) as rb:
        c = rb.consumer()
        chunk = np.arange(8, dtype=np.int64)
        rb.publish_batch(chunk)
        chunk[:] = 100 + np.arange(8)
        rb.publish_batch(chunk)
        assert c.get_batch(64).tolist() == list(range(8)) + list(range(100, 108))


def test_an_array_changed_in_place_is_checked_again():
    with sy.RingBuffer(64, np.int64) as rb:
        c = rb.consumer()
        chunk = np.arange(8, dtype=np.int64)
        rb.publish_batch(chunk)
        chunk.shape = (2, 4)
        with pytest.raises(ValueError, match="1-D"):
            rb.publish_batch(chunk)
        chunk.shape = (8,)
        chunk.dtype = np.float64  # same bytes, another dtype: not this ring's items
        with pytest.raises(TypeError, match="dtype int64"):
            rb.publish_batch(chunk)
        chunk.dtype = np.int64
        rb.publish_batch(chunk[::2])  # a strided view: another object, copied contiguous first
        assert c.get_batch(64).tolist() == list(range(8)) + [0, 2, 4, 6]


def test_arrays_of_several_threads_are_never_mixed_up():
    """Two threads publish their own arrays (same shape) into one multi-producer RingBuffer object:
    every batch arrives with its own thread's items, never the other's pointer."""
    rounds, n = 3000, 16
    with sy.RingBuffer(1024, np.int64, producer="multi") as rb:
        c = rb.consumer()
        got = []

        def read():
            total = 0
            while total < 2 * rounds * n:
                got.append(c.get_batch(1024, timeout=30))
                total += len(got[-1])

        reader = threading.Thread(target=read)
        reader.start()

        def publish(value):
            mine = np.full(n, value, np.int64)
            for _ in range(rounds):
                rb.publish_batch(mine, timeout=30)

        threads = [threading.Thread(target=publish, args=(v,)) for v in (1, 2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        reader.join(60)
        items = np.concatenate(got)
        assert len(items) == 2 * rounds * n
        assert (items == 1).sum() == rounds * n and (items == 2).sum() == rounds * n


@pytest.mark.parametrize("max_n", [1, 5, np.int64(5), 64, 1000])
def test_get_batch_paths_agree(max_n):
    with sy.RingBuffer(64, np.int64) as rb:
        c = rb.consumer()
        rb.publish_batch(np.arange(20, dtype=np.int64))
        k = min(int(max_n), 20)
        first = c.get_batch(max_n)
        assert first.tolist() == list(range(k))
        assert first.flags.writeable and not np.shares_memory(first, rb._slots)  # a copy, the caller's to keep
        rb.publish(99)
        if k == 20:
            assert c.get(timeout=1) == 99
            return
        assert c.get(timeout=1) == k  # get() reads ahead (the rest of the batch it knows of) ...
        assert c.get_batch(64).tolist() == list(range(k + 1, 20))  # ... and get_batch hands that out first
        assert c.get_batch(64).tolist() == [99]
