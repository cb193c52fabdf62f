"""Where a worker's time goes, 1 producer -> N workers of busy tasks (docs/pipeline.md, "Workers").

    python scripts/workers_profile.py [--workers 1 4 14] [--tasks 20000] [--task-us 50] [--json FILE]

For each N, two runs of the same tasks: the no-transport ceiling (each worker makes its own share
of the task ids) and sympathy.Queue (the parent puts every id). Each worker times, per task, the
task's wall time and CPU time (time.thread_time) and the wall time of its get(); the table shows
their means beside the serial task (one process, no transport). A task that takes longer in a
worker than serially, in CPU time too, ran on a slower CPU (frequency under load, a busy
hyperthread sibling); in wall time only, the worker was preempted; a long get() is the transport.
"""
import argparse
import json
import multiprocessing as mp
import os
import statistics
import time

from sympathy.bench.suites import _pipeline_transports as tr

CTX = mp.get_context("fork")
FIELDS = 6  # per worker: tasks, task wall ns, task cpu ns, get wall ns, first start ns, last end ns


def _task(loops: int) -> None:
    for _ in range(loops):
        pass


def _worker(w, q, stats, loops, share, ready, go):
    ready.wait(60)
    go.wait(60)
    clock, cpu = time.perf_counter_ns, time.thread_time_ns
    done = task_wall = task_cpu = get_wall = 0
    first = clock()
    while True:
        g0 = clock()
        if q is None:
            i = share[done] if done < len(share) else None
        else:
            i = q.get(timeout=60)
        t0, c0 = clock(), cpu()
        get_wall += t0 - g0
        if i is None:
            break
        _task(loops)
        task_cpu += cpu() - c0
        task_wall += clock() - t0
        done += 1
    base = w * FIELDS
    stats[base:base + FIELDS] = [done, task_wall, task_cpu, get_wall, first, clock()]


def run(n: int, tasks: int, loops: int, transport: bool) -> dict:
    import sympathy as sy

    q = sy.Queue() if transport else None
    stats = CTX.RawArray("q", FIELDS * n)
    ready, go = CTX.Barrier(n + 1), CTX.Event()
    shares = [list(range(w, tasks, n)) for w in range(n)]
    kids = [CTX.Process(target=_worker, args=(w, q, stats, loops, shares[w], ready, go)) for w in range(n)]
    for k in kids:
        k.start()
    ready.wait(60)
    t0 = time.perf_counter()
    go.set()
    put_s = 0.0
    if q is not None:
        p0 = time.perf_counter()
        for i in range(tasks):
            q.put(i)
        put_s = time.perf_counter() - p0
        for _ in range(n):
            q.put(None)
    for k in kids:
        k.join(120)
    seconds = time.perf_counter() - t0
    if q is not None:
        q.close()
    rows = [stats[w * FIELDS:(w + 1) * FIELDS] for w in range(n)]
    done = sum(r[0] for r in rows)
    assert done == tasks, f"{done} of {tasks} tasks done"
    return {"workers": n, "transport": "sy.Queue" if transport else "none (ceiling)", "rate": tasks / seconds,
            "task_wall_us": sum(r[1] for r in rows) / done / 1e3, "task_cpu_us": sum(r[2] for r in rows) / done / 1e3,
            "get_us": sum(r[3] for r in rows) / done / 1e3, "put_total_s": put_s,
            "busy_share": statistics.mean((r[1] + r[3]) / max(1, r[5] - r[4]) for r in rows),
            # the slowest worker's span over the mean span: a fixed share per worker (the ceiling)
            # ends with its slowest worker, shared work evens out
            "imbalance": max(r[5] - r[4] for r in rows) / statistics.mean(r[5] - r[4] for r in rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4, 14])
    parser.add_argument("--tasks", type=int, default=20000)
    parser.add_argument("--task-us", type=float, default=50)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    loops = tr.busy_loop_count(args.task_us * 1e-6)
    c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
    for _ in range(2000):
        _task(loops)
    serial = {"task_wall_us": (time.perf_counter_ns() - t0) / 2000 / 1e3,
              "task_cpu_us": (time.thread_time_ns() - c0) / 2000 / 1e3}
    print(f"cpus {len(os.sched_getaffinity(0))}, serial task: {serial['task_wall_us']:.1f} us wall, "
          f"{serial['task_cpu_us']:.1f} us CPU")
    out = {"serial": serial, "runs": []}
    print("workers | transport       | tasks/s | x N*serial | task wall us | task CPU us | get us | put s | busy | imbalance")
    for n in args.workers:
        for transport in (False, True):
            r = run(n, args.tasks, loops, transport)
            out["runs"].append(r)
            print(f"{n:7d} | {r['transport']:15s} | {r['rate']:7.0f} | "
                  f"{r['rate'] * serial['task_wall_us'] / 1e6 / n:10.2f} | {r['task_wall_us']:12.1f} | "
                  f"{r['task_cpu_us']:11.1f} | {r['get_us']:6.2f} | {r['put_total_s']:5.3f} | {r['busy_share']:.2f} | "
                  f"{r['imbalance']:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
