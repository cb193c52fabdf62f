"""What two threads cost on the ring's batched path (docs/pipeline.md, "The batched path, two threads").

    python scripts/ring_two_threads.py [--repeat 3] [--batch 1024] [--waits blocking yield sleep]

One producer thread publish_batch()es `batch` int64, one consumer thread get_batch()es everything
ready (the two-thread row of scripts/ring_batched.py, contiguous layout, ring of 16 384 items: a
cycle is 16 batches, the producer fills the ring and waits for space, the consumer drains it and
waits for data). For each wait strategy and thread placement (free: the scheduler's choice; apart:
pinned to two CPUs; together: both on one CPU) it shows, beside queue.Queue placed the same way:
the wall time a batch, get_batch calls a cycle (1: the consumer wakes once the ring is full; 2 or
more: it woke early, then waited for the GIL), each thread's voluntary context switches a cycle
(sleeps: on the ring's futex or on the GIL's condition variable) and involuntary ones (sched_yield
or preemption), the CPUs each thread ran on, and the two handoffs' medians: producer blocks (ring
full, GIL released) -> the consumer's get_batch returns, and consumer starts waiting -> the
producer's blocked publish_batch returns.
"""
import argparse
import os
import queue
import statistics
import threading
import time

import numpy as np

from sympathy.ring import RingBuffer
from sympathy.ring._core import ffi, lib

CAPACITY = 1 << 14
PLACEMENTS = ("free", "apart", "together")


def _thread_counters() -> tuple[int, int, int]:
    """(voluntary, involuntary context switches, the CPU it last ran on) of the calling thread."""
    tid = threading.get_native_id()
    with open(f"/proc/self/task/{tid}/status") as f:
        fields = dict(line.split(":", 1) for line in f if "ctxt_switches" in line)
    with open(f"/proc/self/task/{tid}/stat") as f:
        cpu = int(f.read().rsplit(")", 1)[1].split()[36])  # field 39, counted after the command name
    return int(fields["voluntary_ctxt_switches"]), int(fields["nonvoluntary_ctxt_switches"]), cpu


def _pin(cpu: int | None) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})  # pid 0: the calling thread only


def run(kind: str, wait: str, cpus: tuple, items: int, batch: int, handoff: bool = True) -> dict:
    """One two-thread run; returns its figures. handoff=False: the ring without the GIL handoff
    (c_src/ring_wait.c), as before it, for the before/after in one run."""
    n = items // batch
    chunk = np.arange(batch, dtype=np.int64)
    pc = time.perf_counter_ns
    out: dict = {}
    if kind == "ring":
        rb = RingBuffer(CAPACITY, np.int64, wait=wait, layout="contiguous")
        if not handoff:
            lib.sy_ring_set_gil_handoff(rb._handle, ffi.NULL)
        c = rb.consumer()
        put, spans_p, spans_c = rb.publish_batch, [], []

        def produce():
            _pin(cpus[0])
            a = _thread_counters()
            for _ in range(n):
                t = pc()
                put(chunk)
                spans_p.append((t, pc()))
            out["p"] = a, _thread_counters()

        def consume():
            _pin(cpus[1])
            a = _thread_counters()
            got, get = 0, c.get_batch
            while got < n * batch:
                t = pc()
                got += len(get(CAPACITY))
                spans_c.append((t, pc()))
            out["c"] = a, _thread_counters()
    else:
        q: queue.Queue = queue.Queue(maxsize=CAPACITY)
        spans_p, spans_c = [], []

        def produce():
            _pin(cpus[0])
            a = _thread_counters()
            for _ in range(n):
                q.put(chunk.copy())
            out["p"] = a, _thread_counters()

        def consume():
            _pin(cpus[1])
            a = _thread_counters()
            for _ in range(n):
                q.get()
            out["c"] = a, _thread_counters()
    here = os.sched_getaffinity(0)
    t = threading.Thread(target=produce)
    t0 = pc()
    t.start()
    consume()
    t.join()
    seconds = (pc() - t0) / 1e9
    os.sched_setaffinity(0, here)
    if kind == "ring":
        rb.close()
    cycles = n * batch / CAPACITY
    res = {"us": seconds / n * 1e6, "calls": len(spans_c) / cycles if spans_c else float("nan")}
    for side in ("p", "c"):
        (v0, i0, _), (v1, i1, cpu) = out[side]
        res[side] = ((v1 - v0) / cycles, (i1 - i0) / cycles, cpu)
    if spans_p:
        blocked = [(s, e) for s, e in spans_p if e - s > 5_000]  # a publish that waited for space
        ge = np.array([e for _, e in spans_c])
        gs = np.array([s for s, _ in spans_c])
        ps = np.array([s for s, _ in blocked])
        pe = np.array([e for _, e in blocked])
        i = np.searchsorted(ge, ps)
        j = np.searchsorted(pe, gs)
        res["p_to_c"] = float(np.median(ge[i[i < len(ge)]] - ps[i < len(ge)]) / 1e3) if len(ps) else float("nan")
        res["c_to_p"] = float(np.median(pe[j[j < len(pe)]] - gs[j < len(pe)]) / 1e3) if len(pe) else float("nan")
    return res


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--items", type=int, default=2_000_000)
    parser.add_argument("--waits", nargs="+", default=["blocking", "yield", "sleep"])
    parser.add_argument("--placements", nargs="+", default=list(PLACEMENTS), choices=PLACEMENTS)
    args = parser.parse_args()
    mine = sorted(os.sched_getaffinity(0))
    if len(mine) < 2:
        raise SystemExit("needs at least 2 usable CPUs")
    where = {"free": (None, None), "apart": (mine[0], mine[len(mine) // 2]), "together": (mine[0], mine[0])}
    print(f"{len(mine)} CPUs; apart = CPUs {where['apart']}; {args.items:,} items, batch {args.batch}, "
          f"ring {CAPACITY} items ({CAPACITY // args.batch} batches a cycle); per cycle: get calls, "
          f"context switches vol/invol of producer and consumer; handoffs in us (median of {args.repeat})")
    print(f"{'placement':9s} {'row':24s} {'us/batch':>8s} {'x queue':>7s} {'gets':>5s} "
          f"{'prod v/i':>11s} {'cons v/i':>11s} {'cpus':>7s} {'full->got':>9s} {'wait->pub':>9s}")
    for placement in args.placements:
        cpus = where[placement]
        rows = {"queue.Queue": []}
        for w in args.waits:
            rows[f"ring {w}"], rows[f"ring {w} no handoff"] = [], []
        for _ in range(args.repeat):
            rows["queue.Queue"].append(run("queue", "", cpus, args.items, args.batch))
            for w in args.waits:
                rows[f"ring {w}"].append(run("ring", w, cpus, args.items, args.batch))
                rows[f"ring {w} no handoff"].append(run("ring", w, cpus, args.items, args.batch, handoff=False))
        q_us = statistics.median(r["us"] for r in rows["queue.Queue"])
        for label, runs in rows.items():
            med = {k: statistics.median(r[k] for r in runs) for k in ("us", "calls")}
            pv, pi = (statistics.median(r["p"][k] for r in runs) for k in (0, 1))
            cv, ci = (statistics.median(r["c"][k] for r in runs) for k in (0, 1))
            ratios = [q["us"] / r["us"] for q, r in zip(rows["queue.Queue"], runs)]
            handoff = (f"{statistics.median(r['p_to_c'] for r in runs):9.1f} "
                       f"{statistics.median(r['c_to_p'] for r in runs):9.1f}") if "p_to_c" in runs[0] else ""
            print(f"{placement:9s} {label:24s} {med['us']:8.2f} {statistics.median(ratios):6.2f}x "
                  f"{med['calls']:5.2f} {pv:5.2f}/{pi:5.2f} {cv:5.2f}/{ci:5.2f} "
                  f"{runs[-1]['p'][2]:3d},{runs[-1]['c'][2]:3d} {handoff}")
    print(f"(queue.Queue: {q_us:.2f} us a batch in the last placement; its 'per cycle' counts are per "
          f"{CAPACITY // args.batch} batches too)")


if __name__ == "__main__":
    main()
