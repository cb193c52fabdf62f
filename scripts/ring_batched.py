"""The ring's batched Python path against queue.Queue, side by side (docs/pipeline.md, "The batched path").

    python scripts/ring_batched.py [--repeat 7] [--batch 1024] [--json FILE]

ONE thread: publish_batch + get_batch of `batch` int64 against queue.Queue put(a fresh array) + get,
in CPU time (time.thread_time): the cost of a batch with no handoff, and no other tenant's
preemption counted. Two threads: the ring suite's own rows (wall time). Each row for the ring in
both layouts (slots, the default, and contiguous); the rows alternate within each repeat, so every
ratio is against a queue.Queue figure taken moments before. To compare two trees, run it with
PYTHONPATH set to each, alternately (an older tree has no layout: its rows say "slots" only).
"""
import argparse
import inspect
import json
import queue
import statistics
import time

import numpy as np

from sympathy.bench.suites.ring import py_threads_queue, py_threads_ring
from sympathy.ring import RingBuffer

LAYOUTS = ("slots", "contiguous") if "layout" in inspect.signature(RingBuffer).parameters else ("slots",)


def ring_cpu(batches: int, b: int, layout: str) -> float:
    kwargs = {"layout": layout} if len(LAYOUTS) > 1 else {}
    with RingBuffer(1 << 14, np.int64, **kwargs) as rb:
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


def threads_ring(n: int, b: int, layout: str) -> float:
    return py_threads_ring(n, b, layout=layout) if len(LAYOUTS) > 1 else py_threads_ring(n, b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    b = args.batch
    one = {layout: [] for layout in LAYOUTS}
    two = {layout: [] for layout in LAYOUTS}
    runs = []
    for _ in range(args.repeat):
        for layout in LAYOUTS:
            q, r = queue_cpu(3000, b), ring_cpu(3000, b, layout)
            tq, tr = py_threads_queue(2_000_000, b), threads_ring(2_000_000, b, layout)
            one[layout].append(q / r)
            two[layout].append(tr / tq)
            runs.append({"layout": layout, "one_ring_us": r * 1e6, "one_queue_us": q * 1e6,
                         "two_ring_us": b / tr * 1e6, "two_queue_us": b / tq * 1e6})
            print(f"{layout:10s} one thread: ring {r * 1e6:.2f} us, queue.Queue {q * 1e6:.2f} us a batch "
                  f"({q / r:.2f}x) | two threads: ring {b / tr * 1e6:.2f} us, queue.Queue {b / tq * 1e6:.2f} us "
                  f"({tr / tq:.2f}x)")
    for layout in LAYOUTS:
        print(f"median, {layout}: one thread {statistics.median(one[layout]):.2f}x "
              f"(min {min(one[layout]):.2f}x), two threads {statistics.median(two[layout]):.2f}x "
              f"(min {min(two[layout]):.2f}x) queue.Queue")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
