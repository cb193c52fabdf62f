"""What one sympathy.Queue get() of a small item costs, with and without a timeout (the bench's
worker calls get(timeout=...)), in one thread and in a forked worker process running 50 us tasks
between its gets (docs/pipeline.md, "Issue 19, fourth session").

    python scripts/queue_get_cost.py [--items 200000] [--rounds 3]

Prints ns a get; run it with PYTHONPATH on two trees, alternately, to compare them.
"""
import argparse
import multiprocessing as mp
import time

import sympathy as sy
from sympathy.bench.suites import _pipeline_transports as tr


def one_thread(n: int, kwargs: dict) -> float:
    q = sy.Queue()
    for i in range(n):
        q.put(i)
    get = q.get
    t0 = time.perf_counter_ns()
    for _ in range(n):
        get(**kwargs)
    ns = (time.perf_counter_ns() - t0) / n
    q.close()
    return ns


def _worker(q, loops, out):
    clock, spent, n = time.perf_counter_ns, 0, 0
    get = q.get
    while True:
        t0 = clock()
        i = get(timeout=60)
        spent += clock() - t0
        if i is None:
            break
        for _ in range(loops):
            pass
        n += 1
    out[0], out[1] = spent, n


def in_worker(n: int, loops: int) -> float:
    ctx = mp.get_context("fork")
    q = sy.Queue()
    for i in range(n):
        q.put(i)
    q.put(None)
    out = ctx.RawArray("q", 2)
    p = ctx.Process(target=_worker, args=(q, loops, out))
    p.start()
    p.join(120)
    q.close()
    if p.exitcode != 0 or out[1] != n:
        raise RuntimeError(f"worker failed ({p.exitcode}) or took {out[1]} of {n}")
    return out[0] / n  # with the two perf_counter_ns reads (~60-90 ns here)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    loops = tr.busy_loop_count(50e-6)
    for _ in range(args.rounds):
        print(f"get() {one_thread(args.items, {}):.0f} ns | get(timeout=60) {one_thread(args.items, {'timeout': 60}):.0f} ns"
              f" | in a worker of 50 us tasks, get(timeout=60) {in_worker(5000, loops):.0f} ns (with two clock reads)")


if __name__ == "__main__":
    main()
