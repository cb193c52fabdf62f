"""Linearisable delivery under stress: several producers x several consumers, threads and processes.

Every slot carries (producer, seq, checksum). Allowed: items of different producers interleave in
any order. Forbidden: a lost item, a duplicate, a producer's items out of order, a torn slot (a
checksum that does not match its producer and seq), a downstream consumer ahead of its upstream.
Producers publish random-sized batches with random pauses; consumers read random-sized batches.
"""
import multiprocessing as mp
import os
import threading
import time
import uuid

import numpy as np
import pytest

import sympathy as sy

pytestmark = pytest.mark.stress

ITEM = np.dtype([("producer", np.int64), ("seq", np.int64), ("checksum", np.uint64)])
TOTAL_ITEMS = 1_200_000        # >= 10^6, split across the producers
CTX = mp.get_context("fork")
TIMEOUT = 60.0


def checksum(producer: np.ndarray, seq: np.ndarray) -> np.ndarray:
    """A mix of both fields: a slot torn between two writes fails it."""
    with np.errstate(over="ignore"):
        return (producer.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ \
               (seq.astype(np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F) + np.uint64(1))


def produce(rb: sy.RingBuffer, producer: int, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    seq = 0
    while seq < n:
        size = min(int(rng.integers(1, 512)), n - seq)
        batch = np.empty(size, ITEM)
        batch["producer"] = producer
        batch["seq"] = np.arange(seq, seq + size)
        batch["checksum"] = checksum(batch["producer"], batch["seq"])
        if rng.random() < 0.5:
            rb.publish_batch(batch, timeout=TIMEOUT)
        else:
            with rb.claim(size, timeout=TIMEOUT) as slots:  # zero-copy path, wrap included
                slots[:] = batch
        seq += size
        if rng.random() < 0.01:
            time.sleep(float(rng.random()) * 1e-3)


class Checker:
    """Consumes every item of every producer; records each forbidden outcome and keeps draining
    after one (a consumer that stopped would block the producers and turn a finding into a hang)."""

    def __init__(self, producers: int, per_producer: int):
        self.next_seq = np.zeros(producers, np.int64)
        self.per_producer = per_producer
        self.expected_total = producers * per_producer
        self.received = 0
        self.errors: list[str] = []
        self.batches = 0

    def done(self) -> bool:
        return self.received >= self.expected_total

    def complete(self) -> bool:
        """Every producer's items, all of them, each once."""
        return self.received == self.expected_total and bool((self.next_seq == self.per_producer).all())

    def error(self, text: str) -> None:
        if len(self.errors) < 5:
            self.errors.append(text)

    def check(self, batch: np.ndarray) -> None:
        self.batches += 1
        self.received += len(batch)
        torn = batch["checksum"] != checksum(batch["producer"], batch["seq"])
        if torn.any():
            self.error(f"torn slot: {batch[torn][:3]}")
        for p in range(len(self.next_seq)):
            seqs = batch["seq"][batch["producer"] == p]
            expected = np.arange(self.next_seq[p], self.next_seq[p] + len(seqs))
            if not np.array_equal(seqs, expected):
                self.error(f"producer {p}: expected {expected[:3]}..., got {seqs[:3]}...")
            if len(seqs):
                self.next_seq[p] = seqs[-1] + 1

    def consume(self, consumer: sy.Consumer, upstream: list[sy.Consumer], seed: int) -> None:
        rng = np.random.default_rng(seed)
        while not self.done():
            if rng.random() < 0.5:
                batch = consumer.get_batch(int(rng.integers(1, 700)), timeout=TIMEOUT)
            else:
                with consumer.view_batch(int(rng.integers(1, 700)), timeout=TIMEOUT) as view:
                    batch = view.copy()
            last = consumer.sequence  # released up to here; upstream must be at least as far
            for up in upstream:
                if up.sequence < last:
                    self.error(f"consumer ran ahead of its upstream: {last} > {up.sequence}")
            self.check(batch)
            if rng.random() < 0.01:
                time.sleep(float(rng.random()) * 1e-3)


@pytest.mark.parametrize("wait", ["blocking", "yield"])
def test_threads_three_producers_diamond_of_consumers(wait):
    producers, per = 3, TOTAL_ITEMS // 3
    with sy.RingBuffer(1024, ITEM, producer="multi", wait=wait) as rb:
        c1, c2 = rb.consumer(), rb.consumer()
        c3 = rb.consumer(after=[c1, c2])
        checkers = [Checker(producers, per) for _ in range(3)]
        ups = [[], [], [c1, c2]]
        threads = [threading.Thread(target=checkers[i].consume, args=(c, ups[i], i))
                   for i, c in enumerate((c1, c2, c3))]
        threads += [threading.Thread(target=produce, args=(rb, p, per, 100 + p)) for p in range(producers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for checker in checkers:
            assert checker.errors == []
            assert checker.complete()


def _process_producer(name, producer, per, seed):
    rb = sy.RingBuffer.attach(name, ITEM)
    produce(rb, producer, per, seed)
    rb.close()


def _process_consumer(name, after, producers, per, seed, registered, results):
    rb = sy.RingBuffer.attach(name, ITEM)
    c = rb.consumer(after=after)
    registered.put(c.index)
    # upstream consumers live in other processes: check their shared sequences through peers()
    checker = Checker(producers, per)
    checker.consume(c, [], seed)
    results.put((c.index, checker.errors, checker.complete(), checker.batches))
    rb.close()  # an upstream stage with live downstream stages is detached, not closed


def test_processes_three_producers_three_consumers_pipeline():
    producers, per = 3, TOTAL_ITEMS // 3
    name = f"systress-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    with sy.RingBuffer(4096, ITEM, name=name, producer="multi", wait="blocking"):
        registered, results = CTX.Queue(), CTX.Queue()
        consumers = []
        after = []
        for i in range(3):  # P -> C0 -> C1 -> C2, each in its own process
            p = CTX.Process(target=_process_consumer, args=(name, after, producers, per, i, registered, results))
            p.start()
            consumers.append(p)
            after = [registered.get(timeout=30)]
        workers = [CTX.Process(target=_process_producer, args=(name, p, per, 200 + p)) for p in range(producers)]
        for w in workers:
            w.start()
        outcome = [results.get(timeout=120) for _ in consumers]
        for w in workers + consumers:
            w.join(timeout=30)
        for index, errors, done, batches in outcome:
            assert errors == [], f"consumer {index}"
            assert done and batches > 0
        assert [w.exitcode for w in workers + consumers] == [0] * 6


@pytest.mark.parametrize("capacity", [2, 4, 16])
def test_tiny_rings_many_laps_multi_producer(capacity):
    """Capacity 2..16 with three producers: every slot changes hands tens of thousands of times, so
    a lap flag read one lap early or late (a stale availability flag) would show up at once."""
    producers, per = 3, 20_000
    with sy.RingBuffer(capacity, ITEM, producer="multi", wait="yield") as rb:
        c = rb.consumer()
        checker = Checker(producers, per)

        def tiny_producer(p):
            rng = np.random.default_rng(p)
            seq = 0
            while seq < per:
                size = min(int(rng.integers(1, capacity + 1)), per - seq)
                batch = np.empty(size, ITEM)
                batch["producer"], batch["seq"] = p, np.arange(seq, seq + size)
                batch["checksum"] = checksum(batch["producer"], batch["seq"])
                if rng.random() < 0.5:
                    rb.publish_batch(batch, timeout=TIMEOUT)
                else:  # a claim held across Python code: a wide window for a premature read
                    with rb.claim(size, timeout=TIMEOUT) as slots:
                        slots[:] = batch
                seq += size

        threads = [threading.Thread(target=tiny_producer, args=(p,)) for p in range(producers)]
        for t in threads:
            t.start()
        checker.consume(c, [], seed=capacity)
        for t in threads:
            t.join()
        assert checker.errors == []
        assert checker.complete()
