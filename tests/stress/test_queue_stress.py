"""sympathy.Queue under load: 2 producer processes x 3 worker processes, 100 000 items of mixed sizes;
and 1 000 000 tiny ints through 2 producer processes x 2 worker processes (spilling when the ring fills).

Every item carries (producer, seq) and a body whose bytes derive from both. Allowed: items of
different producers interleave in any order, and spread over the workers in any proportion.
Forbidden: a lost item, one delivered twice (to one worker or two), a producer's items out of order
at a worker, a body torn or mixed with another record's (a record that spans slots, wraps the ring's
end, or was overwritten while read), a non-zero `lost`/`abandoned` count without a death.
"""
import multiprocessing as mp
import random

import numpy as np
import pytest

import sympathy as sy

pytestmark = pytest.mark.stress

CTX = mp.get_context("fork")
PRODUCERS, WORKERS, ITEMS = 2, 3, 100_000
TIMEOUT = 120.0


def body(producer: int, seq: int, size: int) -> bytes:
    return bytes([(producer * 31 + seq) % 251]) * size


def item_size(rng: random.Random) -> int:
    """Mostly small records (one slot), some spanning tens of slots, a few of up to 256 KiB."""
    roll = rng.random()
    if roll < 0.90:
        return rng.randrange(0, 90)
    if roll < 0.995:
        return rng.randrange(90, 8192)
    return rng.randrange(8192, 256 << 10)


def produce(q, producer: int, n: int) -> None:
    rng = random.Random(producer)
    for seq in range(n):
        q.put((producer, seq, body(producer, seq, item_size(rng))))
        if seq % 997 == 0:  # now and then an array out of band
            q.put((producer, -1, np.full(70_000, seq, np.int32)))


def work(q, results) -> None:
    seen, last, torn = [], {}, 0
    while (item := q.get(timeout=TIMEOUT)) is not None:
        producer, seq, payload = item
        if seq == -1:
            torn += not (isinstance(payload, np.ndarray) and payload.shape == (70_000,)
                         and (payload == payload[0]).all())
            continue
        torn += payload != body(producer, seq, len(payload))
        if seq <= last.get(producer, -1):
            torn += 1  # out of order for this producer: reported as a failure below
        last[producer] = seq
        seen.append(producer * ITEMS + seq)
    results.put((np.array(seen, np.int64), torn))


def test_two_producers_three_workers_exactly_once():
    q, results = sy.Queue(maxsize=4096, capacity_bytes=4 << 20), CTX.Queue()
    workers = [CTX.Process(target=work, args=(q, results)) for _ in range(WORKERS)]
    producers = [CTX.Process(target=produce, args=(q, p, ITEMS // PRODUCERS)) for p in range(PRODUCERS)]
    for proc in workers + producers:
        proc.start()
    for proc in producers:
        proc.join(TIMEOUT)
        assert proc.exitcode == 0
    for _ in workers:
        q.put(None)
    outcomes = [results.get(timeout=TIMEOUT) for _ in workers]
    for proc in workers:
        proc.join(TIMEOUT)
        assert proc.exitcode == 0
    assert sum(torn for _, torn in outcomes) == 0
    seen = np.sort(np.concatenate([s for s, _ in outcomes]))
    expected = np.sort(np.concatenate([p * ITEMS + np.arange(ITEMS // PRODUCERS) for p in range(PRODUCERS)]))
    assert len(seen) == len(expected) and np.array_equal(seen, expected)  # none lost, none twice
    assert q.lost == 0 and q.abandoned == 0 and q.qsize() == 0


MILLION = 1_000_000


def produce_ints(q, start: int, stop: int) -> None:
    for i in range(start, stop):
        q.put(i)


def collect_ints(q, results) -> None:
    got = []
    while (item := q.get(timeout=TIMEOUT)) is not None:
        got.append(item)
    results.put(np.array(got, np.int64))


def test_a_million_tiny_ints_reach_exactly_one_worker_each():
    """Issue 19's 1 M items: 2 producer processes (odd and even halves) x 2 worker processes.
    Forbidden: a loss, a duplicate, a producer's items out of order at a worker."""
    q, results = sy.Queue(), CTX.Queue()
    half = MILLION // 2
    workers = [CTX.Process(target=collect_ints, args=(q, results)) for _ in range(2)]
    producers = [CTX.Process(target=produce_ints, args=(q, p * half, (p + 1) * half)) for p in range(2)]
    for proc in workers + producers:
        proc.start()
    for proc in producers:
        proc.join(TIMEOUT)
        assert proc.exitcode == 0
    for _ in workers:
        q.put(None)
    got = [results.get(timeout=TIMEOUT) for _ in workers]
    for proc in workers:
        proc.join(TIMEOUT)
        assert proc.exitcode == 0
    for g in got:  # each producer's items in order at each worker
        for p in range(2):
            mine = g[(g >= p * half) & (g < (p + 1) * half)]
            assert np.all(np.diff(mine) > 0)
    assert np.array_equal(np.sort(np.concatenate(got)), np.arange(MILLION))
    assert q.lost == 0 and q.abandoned == 0 and q.qsize() == 0
