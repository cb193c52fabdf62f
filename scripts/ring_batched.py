"""The ring's batched Python path against queue.Queue, side by side (docs/pipeline.md, "The batched path").

    python scripts/ring_batched.py [--repeat 7] [--batch 1024]

ONE thread: publish_batch + get_batch of `batch` int64 against queue.Queue put(a fresh array) + get,
in CPU time (time.thread_time): the cost of a batch with no handoff, and no other tenant's
preemption counted. Two threads: the ring suite's own rows (wall time). To compare two trees, run it
with PYTHONPATH set to each, alternately.
"""
import argparse
import queue
import statistics
import time

import numpy as np

from sympathy.bench.suites.ring import py_threads_queue, py_threads_ring
from sympathy.ring import RingBuffer


def ring_cpu(batches: int, b: int) -> float:
    with RingBuffer(1 << 14, np.int64) as rb:
        c, chunk = rb.consumer(), np.arange(b, dtype=np.int64)
        for _ in range(100):
            rb.publish_batch(chunk)
            c.get_batch(1 << 14)
        t0 = time.thread_time()
        for _ in range(batches):
            rb.publish_batch(chunk)
            c.get_batch(1 << 14)
        return (time.thread_time() - t0) / batches


def queue_cpu(batches: int, b: int) -> float:
    q, chunk = queue.Queue(maxsize=1 << 14), np.arange(b, dtype=np.int64)
    for _ in range(100):
        q.put(chunk.copy())
        q.get()
    t0 = time.thread_time()
    for _ in range(batches):
        q.put(chunk.copy())
        q.get()
    return (time.thread_time() - t0) / batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--batch", type=int, default=1024)
    args = parser.parse_args()
    b, one, two = args.batch, [], []
    for _ in range(args.repeat):
        r, q = ring_cpu(3000, b), queue_cpu(3000, b)
        tr, tq = py_threads_ring(2_000_000, b), py_threads_queue(2_000_000, b)
        one.append(q / r)
        two.append(tr / tq)
        print(f"one thread: ring {r * 1e6:.2f} us, queue.Queue {q * 1e6:.2f} us a batch ({q / r:.2f}x) | "
              f"two threads: ring {b / tr * 1e6:.2f} us, queue.Queue {b / tq * 1e6:.2f} us ({tr / tq:.2f}x)")
    print(f"median: one thread {statistics.median(one):.2f}x, two threads {statistics.median(two):.2f}x queue.Queue")


if __name__ == "__main__":
    main()
