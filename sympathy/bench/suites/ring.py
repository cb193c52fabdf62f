"""`sympathy bench ring`: the LMAX performance-test shapes in C, and Python pipelines, each raced
against its anchor (a C mutex + condvar bounded queue; queue.Queue; multiprocessing.Queue) in the
same run.

C rows: threads created and pinned in C (c_src/ring_bench.c); items are int64 values 1..N and
every consumer's sum is checked, outside the timing. Python rows: int64 items, one producer and
one consumer, per item (one call per item) and batched (one call per `--batch` items).
"""
from __future__ import annotations

import argparse
import collections
import os
import queue
import textwrap
import threading
import time
import uuid

import numpy as np

from ..core import Results, Suite, positive_int

SHAPES = {"unicast 1P-1C": 0, "pipeline 1P-3C": 1, "multicast 1P-3C": 2, "diamond 1P-3C": 3,
          "3P-1C": 4}
SHAPE_THREADS = {0: 2, 1: 4, 2: 4, 3: 4, 4: 4}


def _lib():
    from ..._ring import ffi, lib

    return ffi, lib


def _cpus(n_threads: int):
    """One CPU per thread, round-robin over the CPUs this process may use."""
    ffi, _ = _lib()
    usable = sorted(os.sched_getaffinity(0))
    return ffi.new("int[]", [usable[i % len(usable)] for i in range(n_threads)]), n_threads


# ---- C level ----------------------------------------------------------------------------------------
def c_ring(shape: int, wait: str, items: int, batch: int, capacity: int = 1 << 16, pin: bool = True) -> dict:
    """One run of a ring shape; items/s through the shape and the average batch the consumers read."""
    from ...ring import WAITS

    ffi, lib = _lib()
    cpus, n = _cpus(SHAPE_THREADS[shape]) if pin else (ffi.NULL, 0)
    out = ffi.new("sy_bench_result *")
    status = lib.sy_bench_ring(shape, WAITS[wait], items, batch, capacity, cpus, n, out)
    if status != 0 or not out.checksum_ok:
        raise RuntimeError(f"ring shape {shape} ({wait}) failed: status {status}, checksum_ok {out.checksum_ok}")
    leaves = 3 if shape == SHAPES["multicast 1P-3C"] else 1
    return {"items/s": out.items / out.seconds, "avg batch": out.items * leaves / max(out.batches, 1)}


def c_mutex_queue(shape: int, items: int, capacity: int = 1 << 16, pin: bool = True) -> dict:
    ffi, lib = _lib()
    cpus, n = _cpus(SHAPE_THREADS[shape]) if pin else (ffi.NULL, 0)
    out = ffi.new("sy_bench_result *")
    status = lib.sy_bench_mutex_queue(shape, items, capacity, cpus, n, out)
    if status != 0 or not out.checksum_ok:
        raise RuntimeError(f"mutex queue shape {shape} failed: status {status}")
    return {"items/s": out.items / out.seconds, "avg batch": 1.0}


def c_pingpong(wait: str, rounds: int) -> dict:
    """Round trips through two 1P-1C rings on two pinned threads; exact percentiles of every RTT."""
    from ...ring import WAITS

    ffi, lib = _lib()
    rtt = np.zeros(rounds, np.int64)
    cpus, n = _cpus(2)
    status = lib.sy_bench_pingpong(WAITS[wait], rounds, cpus, n, ffi.cast("int64_t *", ffi.from_buffer(rtt)))
    if status != 0:
        raise RuntimeError(f"ping-pong ({wait}) failed: status {status}")
    rtt = rtt[rounds // 10:]  # the first tenth is warm-up (page faults, frequency ramp)
    p50, p99, p999 = np.percentile(rtt, [50, 99, 99.9])
    return {"p50 ns": p50, "p99 ns": p99, "p99.9 ns": p999, "max ns": float(rtt.max())}


def c_pingpong_flags(rounds: int) -> dict:
    """The floor under any handoff: the same round trips through two bare flags on two pinned
    threads (no ring); percentiles computed as for c_pingpong."""
    ffi, lib = _lib()
    rtt = np.zeros(rounds, np.int64)
    cpus, n = _cpus(2)
    status = lib.sy_bench_pingpong_flags(rounds, cpus, n, ffi.cast("int64_t *", ffi.from_buffer(rtt)))
    if status != 0:
        raise RuntimeError(f"bare ping-pong failed: status {status}")
    rtt = rtt[rounds // 10:]
    p50, p99, p999 = np.percentile(rtt, [50, 99, 99.9])
    return {"p50 ns": p50, "p99 ns": p99, "p99.9 ns": p999, "max ns": float(rtt.max())}


def c_mutex_pingpong(rounds: int) -> dict:
    """The same round trips through two mutex + condvar queues (ArrayBlockingQueue's design)."""
    ffi, lib = _lib()
    rtt = np.zeros(rounds, np.int64)
    cpus, n = _cpus(2)
    status = lib.sy_bench_mutex_pingpong(rounds, cpus, n, ffi.cast("int64_t *", ffi.from_buffer(rtt)))
    if status != 0:
        raise RuntimeError(f"mutex-queue ping-pong failed: status {status}")
    rtt = rtt[rounds // 10:]
    p50, p99, p999 = np.percentile(rtt, [50, 99, 99.9])
    return {"p50 ns": p50, "p99 ns": p99, "p99.9 ns": p999, "max ns": float(rtt.max())}


def c_false_sharing(padding: int, items: int) -> dict:
    """The ring itself (c_src/ring_*.c), SPSC, one int64 at a time, its hot sequences `padding` bytes apart
    (8: packed in one line, 64, or 128: the ring's own layout)."""
    ffi, lib = _lib()
    cpus, n = _cpus(2)
    out = ffi.new("sy_bench_result *")
    status = lib.sy_bench_false_sharing(padding, items, cpus, n, out)
    if status != 0 or not out.checksum_ok:
        raise RuntimeError(f"false-sharing ablation ({padding} B) failed: status {status}")
    return {"items/s": out.items / out.seconds, "avg batch": 1.0}


# ---- Python level, threads ------------------------------------------------------------------------------
def _time_threads(produce, consume) -> float:
    t = threading.Thread(target=produce)
    t0 = time.perf_counter()
    t.start()
    consume()
    t.join()
    return time.perf_counter() - t0


def py_threads_ring(n: int, batch: int, wait: str = "blocking", capacity: int = 1 << 14,
                    layout: str = "slots") -> float:
    """items/s, one producer thread and one consumer thread."""
    from ...ring import RingBuffer

    with RingBuffer(capacity, np.int64, wait=wait, layout=layout) as rb:
        c = rb.consumer()
        if batch == 1:
            def produce():
                publish = rb.publish
                for i in range(n):
                    publish(i)

            def consume():
                get = c.get
                total = 0
                for _ in range(n):
                    total += get()
                _verify(total, n)
        else:
            chunk = np.arange(batch, dtype=np.int64)

            def produce():
                for _ in range(n // batch):
                    rb.publish_batch(chunk)

            def consume():
                got = 0
                while got < n // batch * batch:
                    got += len(c.get_batch(capacity))
        return n // batch * batch / _time_threads(produce, consume)


def py_threads_queue(n: int, batch: int, capacity: int = 1 << 14) -> float:
    """Batched, each message is a fresh array (chunk.copy()): the ring copies the items too, and a
    producer that sent the same array object over and over would be moving no data at all."""
    q: queue.Queue = queue.Queue(maxsize=capacity)
    chunk = np.arange(batch, dtype=np.int64)

    def produce():
        put = q.put
        for i in range(n // batch):
            put(i if batch == 1 else chunk.copy())

    def consume():
        get = q.get
        for _ in range(n // batch):
            get()

    return n // batch * batch / _time_threads(produce, consume)


def py_one_thread_ring(n: int, batch: int, capacity: int = 1 << 14, layout: str = "slots") -> float:
    """items/s of publish_batch + get_batch alternating in ONE thread: the CPU cost of a batch with
    no second thread, so no GIL handoff and no wait. The baseline that explains the threads row."""
    from ...ring import RingBuffer

    with RingBuffer(capacity, np.int64, layout=layout) as rb:
        c = rb.consumer()
        chunk = np.arange(batch, dtype=np.int64)
        t0 = time.perf_counter()
        for _ in range(n // batch):
            rb.publish_batch(chunk)
            c.get_batch(capacity)
        return n // batch * batch / (time.perf_counter() - t0)


def py_one_thread_queue(n: int, batch: int) -> float:
    """The same for queue.Queue: put(a fresh array) + get in one thread."""
    q: queue.Queue = queue.Queue(maxsize=1 << 14)
    chunk = np.arange(batch, dtype=np.int64)
    t0 = time.perf_counter()
    for _ in range(n // batch):
        q.put(chunk.copy())
        q.get()
    return n // batch * batch / (time.perf_counter() - t0)


def py_threads_deque(n: int, batch: int) -> float:
    """collections.deque has no blocking get: the consumer polls (and the deque is unbounded).
    Batched messages are fresh arrays, as for queue.Queue."""
    d: collections.deque = collections.deque()
    chunk = np.arange(batch, dtype=np.int64)

    def produce():
        append = d.append
        for i in range(n // batch):
            append(i if batch == 1 else chunk.copy())

    def consume():
        popleft = d.popleft
        got = 0
        while got < n // batch:
            try:
                popleft()
                got += 1
            except IndexError:
                time.sleep(0)

    return n // batch * batch / _time_threads(produce, consume)


def _verify(total: int, n: int) -> None:
    if total != n * (n - 1) // 2:
        raise RuntimeError(f"lost or duplicated items: sum {total}, expected {n * (n - 1) // 2}")


# ---- Python level, processes ---------------------------------------------------------------------------
def _ctx():
    import multiprocessing as mp

    return mp.get_context("fork")


def _child(target, *args):
    """A daemon child that leaves Ctrl-C to its parent: the terminal sends SIGINT to both, and a
    child stuck at exit (multiprocessing.Queue's feeder thread flushing into a pipe nobody reads)
    made the parent's exit wait for it, so `sympathy demo ring` needed a second Ctrl-C. The parent
    raises KeyboardInterrupt and its exit terminates daemon children."""
    return _ctx().Process(target=_ignoring_sigint, args=(target, *args), daemon=True)


def _ignoring_sigint(target, *args) -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    target(*args)


def _ring_child(name: str, n: int, batch: int, go) -> None:
    from ...ring import RingBuffer

    rb = RingBuffer.attach(name, np.int64)
    go.wait()
    if batch == 1:
        publish = rb.publish
        for i in range(n):
            publish(i)
    else:
        chunk = np.arange(batch, dtype=np.int64)
        for _ in range(n // batch):
            rb.publish_batch(chunk)
    rb.close()


def py_processes_ring(n: int, batch: int, wait: str = "yield", capacity: int = 1 << 16) -> float:
    from ...ring import RingBuffer

    name = f"sybench-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    ctx = _ctx()
    go = ctx.Event()
    with RingBuffer(capacity, np.int64, name=name, wait=wait) as rb:
        c = rb.consumer()
        child = _child(_ring_child, name, n, batch, go)
        child.start()
        time.sleep(0.05)  # let the child attach before the clock starts
        t0 = time.perf_counter()
        go.set()
        if batch == 1:
            get = c.get
            total = 0
            for _ in range(n):
                total += get(timeout=60)
            _verify(total, n)
        else:
            got = 0
            while got < n // batch * batch:
                got += len(c.get_batch(1 << 16, timeout=60))
        seconds = time.perf_counter() - t0
        child.join()
    return n // batch * batch / seconds


def _mpqueue_child(q, n: int, batch: int, go) -> None:
    go.wait()
    chunk = np.arange(batch, dtype=np.int64)
    for i in range(n // batch):
        q.put(i if batch == 1 else chunk)


def py_processes_mpqueue(n: int, batch: int) -> float:
    ctx = _ctx()
    q, go = ctx.Queue(maxsize=1 << 14), ctx.Event()
    child = _child(_mpqueue_child, q, n, batch, go)
    child.start()
    t0 = time.perf_counter()
    go.set()
    for _ in range(n // batch):
        q.get()
    seconds = time.perf_counter() - t0
    child.join()
    return n // batch * batch / seconds


def _pipe_child(conn, n: int, batch: int, go) -> None:
    go.wait()
    if batch == 1:
        for i in range(n):
            conn.send(i)
    else:
        payload = np.arange(batch, dtype=np.int64).tobytes()
        for _ in range(n // batch):
            conn.send_bytes(payload)


def py_processes_pipe(n: int, batch: int) -> float:
    ctx = _ctx()
    receive, send = ctx.Pipe(duplex=False)
    go = ctx.Event()
    child = _child(_pipe_child, send, n, batch, go)
    child.start()
    t0 = time.perf_counter()
    go.set()
    if batch == 1:
        for _ in range(n):
            receive.recv()
    else:
        for _ in range(n // batch):
            np.frombuffer(receive.recv_bytes(), np.int64)
    seconds = time.perf_counter() - t0
    child.join()
    return n // batch * batch / seconds


def _fifo_child(q, n: int, batch: int, go) -> None:
    go.wait()
    chunk = np.arange(batch, dtype=np.int64)
    for i in range(n // batch):
        q.put(i if batch == 1 else chunk, timeout=60)


def py_processes_faster_fifo(n: int, batch: int) -> float:
    import faster_fifo  # the `bench` extra

    ctx = _ctx()
    q, go = faster_fifo.Queue(max_size_bytes=64 << 20), ctx.Event()
    child = _child(_fifo_child, q, n, batch, go)
    child.start()
    t0 = time.perf_counter()
    go.set()
    got = 0
    while got < n // batch:
        got += len(q.get_many(timeout=60))
    seconds = time.perf_counter() - t0
    child.join()
    return n // batch * batch / seconds



def _median(fn, repeat: int) -> float:
    return float(np.median([fn() for _ in range(repeat)]))


class RingSuite(Suite):
    title = "Disruptor ring buffer vs locked queues (items/s; higher is better)"
    primary = "items/s"
    higher_is_better = True
    columns = ("items/s", "avg batch", "p50 ns", "p99 ns", "p99.9 ns", "max ns")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--items", type=positive_int, default=20_000_000, help="items per C shape run")
        parser.add_argument("--queue-items", type=positive_int, default=1_000_000, help="items per mutex-queue run")
        parser.add_argument("--batch", type=positive_int, default=1024, help="producer claim size (C) / batch (Python)")
        parser.add_argument("--rounds", type=positive_int, default=200_000, help="ping-pong round trips")
        parser.add_argument("--py-items", type=positive_int, default=400_000, help="items per Python per-item run")
        parser.add_argument("--py-batched-items", type=positive_int, default=20_000_000,
                            help="items per Python batched run")
        parser.add_argument("--repeat", type=positive_int, default=3, help="runs per figure (median)")
        parser.add_argument("--only", choices=("c", "python"), default=None, help="run one half")

    def plot(self, results: Results, outdir):
        """One small panel per group (each has its own variants), horizontal bars of items/s on a
        log axis: the figures span five orders of magnitude. The anchor is hatched."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import NullFormatter

        groups = [g for g in dict.fromkeys(r.group for r in results.rows)
                  if any(self.primary in r.metrics for r in results.rows if r.group == g)]
        cols = 3
        rows = -(-len(groups) // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 2.4 * rows), squeeze=False)
        for ax, group in zip(axes.flat, groups):
            members = [r for r in results.rows if r.group == group and self.primary in r.metrics]
            bars = ax.barh([r.variant for r in members], [r.metrics[self.primary] for r in members],
                           color=["#bbbbbb" if r.anchor else "#3b75af" for r in members])
            for bar, r in zip(bars, members):
                bar.set_hatch("//" if r.anchor else "")
            ax.set_xscale("log")
            ax.set_xlim(left=min(r.metrics[self.primary] for r in members) / 10)  # bars start left of the smallest
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_title(textwrap.fill(group, 45), fontsize=9)   # the longest group names ran past the figure
            ax.set_xlabel(f"{self.primary}, log scale", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.invert_yaxis()
            ax.grid(axis="x", alpha=0.3)
        for ax in list(axes.flat)[len(groups):]:
            ax.axis("off")
        fig.suptitle(self.title, fontsize=10)
        fig.tight_layout()
        path = outdir / f"{self.name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return [path]

    def run(self, args: argparse.Namespace, results: Results) -> None:
        if args.only in (None, "c"):
            self.run_c(args, results)
        if args.only in (None, "python"):
            self.run_python(args, results)

    def run_c(self, args, results: Results) -> None:
        cores = len(os.sched_getaffinity(0))
        for label, shape in results.progress(SHAPES.items(), "C shapes"):
            threads = SHAPE_THREADS[shape]
            group = f"C {label}"
            params = {"shape": label, "threads": threads}
            queue_row = {k: float(np.median([c_mutex_queue(shape, args.queue_items)[k]
                                             for _ in range(args.repeat)])) for k in ("items/s", "avg batch")}
            results.add(group, "mutex+condvar queue", anchor=True, params=params, **queue_row)
            waits = ["busy_spin", "yield", "blocking"] if threads <= cores else ["yield", "blocking"]
            for wait in waits:
                runs = [c_ring(shape, wait, args.items, args.batch) for _ in range(args.repeat)]
                results.add(group, f"ring {wait}", params=params | {"wait": wait},
                            **{k: float(np.median([r[k] for r in runs])) for k in ("items/s", "avg batch")})
        if any(t > cores for t in SHAPE_THREADS.values()):
            results.note(f"{cores} usable CPUs: shapes with more threads than CPUs oversubscribe, so busy-spin "
                         "is left out there (a spinning waiter starves the thread it waits for); yield and "
                         "blocking waits are shown instead.")
        if cores < 2:
            results.note("one usable CPU: the ping-pong and the false-sharing ablation need two (their "
                         "threads spin-wait on each other); skipped")
            return
        # The bare two-flag ping-pong is the floor; it is re-measured between the ring runs because
        # on a VM the two vCPUs' placement (and so the floor) drifts from one minute to the next.
        group = "C ping-pong RTT (2 pinned threads)"
        runs: dict[str, list[dict]] = {}
        for _ in results.progress(range(args.repeat), "C ping-pong"):
            for wait in ("flags", "busy_spin", "yield", "blocking", "mutex"):
                runs.setdefault(wait, []).append(c_pingpong_flags(args.rounds) if wait == "flags"
                                                 else c_mutex_pingpong(args.rounds) if wait == "mutex"
                                                 else c_pingpong(wait, args.rounds))
        median = {w: {k: float(np.median([r[k] for r in rs])) for k in rs[0]} for w, rs in runs.items()}
        results.add(group, "two bare flags (the floor)", anchor=True, params={"wait": "busy_spin"}, **median["flags"])
        for wait in ("busy_spin", "yield", "blocking"):
            results.add(group, f"ring {wait}", params={"wait": wait}, **median[wait])
        results.add(group, "mutex+condvar queue", params={"wait": "condvar"}, **median["mutex"])
        floor = median["flags"]["p50 ns"]
        results.note("ping-pong p50 over the bare-flag floor measured in the same run: " + ", ".join(
            f"{w} {median[w]['p50 ns'] / floor:.2f}x" for w in ("busy_spin", "yield", "blocking")))
        for padding, label in results.progress([(8, "packed 8 B apart (one line)"), (64, "64 B apart"),
                                                (128, "128 B apart (the ring's layout)")], "false sharing"):
            r = [c_false_sharing(padding, args.items // 4)["items/s"] for _ in range(args.repeat)]
            results.add("C false-sharing ablation (the ring, SPSC, per item)", label, anchor=padding == 8,
                        params={"padding": padding}, **{"items/s": float(np.median(r))})

    def run_python(self, args, results: Results) -> None:
        n, nb, b, rep = args.py_items, args.py_batched_items, args.batch, args.repeat
        rows = [
            ("Python threads, per item", [("queue.Queue", True, lambda: py_threads_queue(n, 1)),
                                          ("collections.deque (polling)", False, lambda: py_threads_deque(n, 1)),
                                          ("sy.RingBuffer", False, lambda: py_threads_ring(n, 1))]),
            (f"Python threads, batches of {b}", [
                ("queue.Queue (arrays)", True, lambda: py_threads_queue(nb, b)),
                ("collections.deque (arrays, polling)", False, lambda: py_threads_deque(nb, b)),
                ("sy.RingBuffer", False, lambda: py_threads_ring(nb, b)),
                ("sy.RingBuffer layout='contiguous'", False, lambda: py_threads_ring(nb, b, layout="contiguous"))]),
            (f"Python ONE thread, batches of {b} (no handoff: the cost of a batch)", [
                ("queue.Queue put(fresh array) + get", True, lambda: py_one_thread_queue(nb // 4, b)),
                ("sy.RingBuffer publish_batch + get_batch", False, lambda: py_one_thread_ring(nb // 4, b)),
                ("sy.RingBuffer layout='contiguous'", False,
                 lambda: py_one_thread_ring(nb // 4, b, layout="contiguous"))]),
            ("Python processes, per item", [
                ("multiprocessing.Queue", True, lambda: py_processes_mpqueue(n // 4, 1)),
                ("multiprocessing.Pipe", False, lambda: py_processes_pipe(n, 1)),
                ("faster-fifo", False, lambda: py_processes_faster_fifo(n, 1)),
                ("sy.RingBuffer (shm)", False, lambda: py_processes_ring(n, 1))]),
            (f"Python processes, batches of {b}", [
                ("multiprocessing.Queue (arrays)", True, lambda: py_processes_mpqueue(nb, b)),
                ("multiprocessing.Pipe (bytes)", False, lambda: py_processes_pipe(nb, b)),
                ("faster-fifo (arrays)", False, lambda: py_processes_faster_fifo(nb, b)),
                ("sy.RingBuffer (shm)", False, lambda: py_processes_ring(nb, b))]),
        ]
        for group, variants in results.progress(rows, "Python"):
            for variant, anchor, fn in variants:
                try:
                    rate = _median(fn, rep)
                except ImportError:
                    results.note(f"{variant}: not installed (faster-fifo comes with the bench extra); skipped")
                    continue
                results.add(group, variant, anchor=anchor, params={"batch": 1 if "per item" in group else b},
                            **{"items/s": rate})


SUITE = RingSuite()
