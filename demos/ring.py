"""Disruptor ring buffer: a handler diamond in Python, then the ring raced against locked queues.

Three short acts (about 15 s on a 2-core machine):
1. the Disruptor DSL: journal and replicate in parallel, then business logic after both;
2. C threads, pinned: one producer, one consumer, ring vs a mutex + condvar queue;
3. Python across processes: per item and batched, ring in shared memory vs multiprocessing.Queue.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
from rich.console import Console
from rich.table import Table

import sympathy as sy
from sympathy.bench.suites import ring as bench


def act_disruptor(console: Console, n: int) -> None:
    journal_bytes = [0]
    replicated = [0]
    totals = {"sum": 0, "flushes": 0}

    def journal(events, sequence, end_of_batch):
        journal_bytes[0] += events.nbytes

    def replicate(events, sequence, end_of_batch):
        replicated[0] += len(events)

    def business_logic(events, sequence, end_of_batch):
        totals["sum"] += int(events["price"].sum())
        totals["flushes"] += end_of_batch  # where a real handler would flush its output

    tick = np.dtype([("instrument", np.int32), ("price", np.int64)])
    d = sy.Disruptor(1 << 14, tick, batch_size=4096)
    d.handle_events_with(journal, replicate).then(business_logic)
    d.start()
    ticks = np.zeros(4096, tick)
    ticks["instrument"] = np.arange(4096) % 7
    ticks["price"] = 1
    t0 = time.perf_counter()
    for _ in range(n // len(ticks)):
        d.publish_batch(ticks)
    d.shutdown(timeout=30)
    seconds = time.perf_counter() - t0
    published = n // len(ticks) * len(ticks)
    console.print(f"[bold]1. Disruptor DSL[/bold]: journal + replicate -> business logic, {published:,} ticks "
                  f"in {seconds:.2f} s ({published / seconds / 1e6:.1f} M ticks/s through the diamond); "
                  f"logic summed {totals['sum']:,} (expected {published:,}), "
                  f"{totals['flushes']} end-of-batch flushes, journal saw {journal_bytes[0]:,} bytes.")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="sympathy demo ring", description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every size (1.0 takes a few seconds)")
    args = parser.parse_args(argv)
    console = Console()
    s = args.scale
    # Spinning needs a CPU per spinning thread; with one CPU every handoff would wait for a tick.
    spin = "busy_spin" if len(os.sched_getaffinity(0)) >= 2 else "yield"
    act_disruptor(console, int(2_000_000 * s))

    table = Table(title="2-3. The ring against locked queues (items/s, same run, this machine)",
                  title_justify="left")
    for col in ("what", "anchor", "anchor items/s", "sy ring items/s", "ratio"):
        table.add_column(col, justify="right" if "items" in col or col == "ratio" else "left")

    def race(what, anchor_name, anchor_fn, ring_fn):
        anchor, ring = anchor_fn(), ring_fn()
        table.add_row(what, anchor_name, f"{anchor / 1e6:.2f} M", f"{ring / 1e6:.2f} M", f"{ring / anchor:.1f}x")

    race(f"C threads, pinned, 1P-1C, batched, {spin}", "mutex+condvar queue",
         lambda: bench.c_mutex_queue(0, int(1_000_000 * s))["items/s"],
         lambda: bench.c_ring(0, spin, int(20_000_000 * s), 1024)["items/s"])
    race("Python processes, per item", "multiprocessing.Queue",
         lambda: bench.py_processes_mpqueue(int(50_000 * s), 1),
         lambda: bench.py_processes_ring(int(500_000 * s), 1))
    race("Python processes, int64 batches of 1024", "multiprocessing.Queue (arrays)",
         lambda: bench.py_processes_mpqueue(int(10_000_000 * s), 1024),
         lambda: bench.py_processes_ring(int(20_000_000 * s), 1024))
    rtt = bench.c_pingpong(spin, int(100_000 * s))
    console.print(table)
    console.print(f"C ping-pong round trip, {spin}, two pinned threads: p50 {rtt['p50 ns']:.0f} ns, "
                  f"p99 {rtt['p99 ns']:.0f} ns, p99.9 {rtt['p99.9 ns']:.0f} ns, max {rtt['max ns'] / 1e3:.0f} us.")
    console.print("[dim]Full suite: `sympathy bench ring`. Figures on a shared machine vary run to run.[/dim]")


if __name__ == "__main__":
    main()
