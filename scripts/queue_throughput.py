"""Items per second through a queue, producer and consumer in separate processes (fork), one run for
every queue so the ratios are side by side: sympathy.Queue, multiprocessing.Queue,
multiprocessing.SimpleQueue and, when installed (benchmark-only extra), faster-fifo.

    python scripts/queue_throughput.py [--items 200000] [--repeat 3] [--item dict|int]

The item is a dict of five fields (issue 19's small-object row) or a small int. Each run times
from the moment both processes are ready until the consumer has taken the last item (it checks
every item's sequence: the check is part of consuming). The queues run in interleaved rounds (every
queue once per round, the order rotating), so a change in the machine's load falls on all of them;
each figure is the median over the rounds, and each ratio the median of the per-round ratios.
"""
import argparse
import multiprocessing as mp
import statistics
import time

import sympathy as sy

CTX = mp.get_context("fork")


def make_item(kind: str, i: int):
    if kind == "int":
        return i
    return {"id": i, "name": "sensor-7", "value": i * 0.5, "ok": True, "tags": ("a", "b")}


def _producer(q, n, kind, ready, go):
    items = [make_item(kind, i) for i in range(n)]  # built before the clock starts
    ready.wait()
    go.wait()
    for item in items:
        q.put(item)


def _consumer(q, n, kind, ready, done):
    ready.wait()
    for i in range(n):
        item = q.get()
        if (item if kind == "int" else item["id"]) != i:
            raise SystemExit(f"item {i} came as {item!r}")
    done.set()


def run_once(make_queue, n: int, kind: str) -> float:
    q = make_queue()
    ready, go, done = CTX.Barrier(3), CTX.Event(), CTX.Event()
    procs = [CTX.Process(target=_producer, args=(q, n, kind, ready, go)),
             CTX.Process(target=_consumer, args=(q, n, kind, ready, done))]
    for p in procs:
        p.start()
    ready.wait()
    start = time.perf_counter()
    go.set()
    if not done.wait(300):
        raise SystemExit("timed out")
    elapsed = time.perf_counter() - start
    for p in procs:
        p.join()
        if p.exitcode:
            raise SystemExit(f"a child failed ({p.exitcode})")
    return n / elapsed


def queues():
    rows = [("sympathy.Queue", lambda: sy.Queue()),
            ("multiprocessing.Queue", lambda: CTX.Queue()),
            ("multiprocessing.SimpleQueue", lambda: CTX.SimpleQueue())]
    try:
        import faster_fifo
        import faster_fifo_reduction  # noqa: F401  (lets the queue pass to a Process)
        rows.append(("faster-fifo", lambda: faster_fifo.Queue(max_size_bytes=16 << 20)))
    except ImportError:
        print("faster-fifo not installed: its row is left out")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--item", choices=["dict", "int"], default="dict")
    args = parser.parse_args()
    rows = queues()
    rates: dict[str, list[float]] = {name: [] for name, _ in rows}
    for round_ in range(args.repeat):
        shift = round_ % len(rows)
        for name, make in rows[shift:] + rows[:shift]:
            rates[name].append(run_once(make, args.items, args.item))
    ours = rates["sympathy.Queue"]
    print(f"| queue ({args.item}, {args.items} items, {args.repeat} interleaved rounds) | M items/s, median "
          f"| sympathy.Queue is (median of per-round ratios) | per round |")
    print("|---|---:|---:|---|")
    for name, values in rates.items():
        ratios = [a / b for a, b in zip(ours, values)]
        print(f"| {name} | {statistics.median(values) / 1e6:.3f} | {statistics.median(ratios):.2f}x "
              f"| {', '.join(f'{r:.2f}' for r in ratios)} |")


if __name__ == "__main__":
    main()
