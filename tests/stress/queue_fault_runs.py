"""Fault injection for sympathy.Queue, the multiprocessing.Queue drop-in:
`python tests/stress/queue_fault_runs.py --runs N --seed S`.

One run: a Queue on a small ring (many laps; maxsize 0 or 20, chosen by the run's seed), two producer
processes putting 1 000 items each, (producer, sequence, payload) with payloads of 0 to 3 000 bytes
(records of one to many slots), and two consumer processes getting until None. Once the producers have
put a random share of their items, one random peer (a producer or a consumer) is killed with SIGKILL.
Once the producers are gone the parent puts one None per live consumer; each consumer records what it
got in shared memory as it goes.

Allowed: a killed consumer's record taken but not yet copied, counted in q.lost, and the one item it got
but had not recorded when it died (so at most q.lost + 1 items missing, and only in a run that killed a
consumer); a killed producer's items a prefix of its sequence, the rest of what it put counted in
q.abandoned (records spilled in its memory because the ring was full, as multiprocessing.Queue loses its
feeder's buffer, and the put in progress if it had claimed ring space). Forbidden: any other item lost; an item
duplicated, corrupted or out of its producer's order at a consumer; a peer dead of anything but our
SIGKILL; a consumer's get reaching its timeout; items left in the queue; anything still running at the
run's deadline.

--frames: items are int64 arrays and every third one a zero-copy frame (put_array into one of six
4 KiB buffers beside the ring, get_array's read-only view at the consumer), so a kill also lands on a
producer holding a staged buffer or a consumer holding a view: the next producer waiting for a buffer
must reclaim it, a frame's content must be its own.

Prints one JSON line: runs, kills by role, items verified, lost and abandoned records, failures (with
their seeds).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import random
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import numpy as np  # noqa: E402

import sympathy as sy  # noqa: E402

CTX = mp.get_context("fork")
ITEMS = 1000          # per producer
PRODUCERS = 2
CONSUMERS = 2
CAPACITY = 1 << 14    # 16 KiB of records: the payloads lap it many times
TIMEOUT = 20.0        # a consumer's get: reaching it is a failure
DEADLINE = 60.0       # the whole run
FRAME_BYTES, FRAME_COUNT, FRAME_EVERY = 4096, 6, 3   # --frames: 6 >= consumers + 2 buffers


def _size(p: int, i: int, sizes: int) -> int:
    """Item i of producer p's length, spread over [0, sizes) by (p, i)."""
    return (p * 7919 + i * 104729) % sizes


def _fill(p: int, i: int) -> int:
    """Item i of producer p's filler value, so that a torn or foreign record shows."""
    return (p * 31 + i) % 251


def payload(p: int, i: int) -> bytes:
    """Deterministic from (producer, sequence), so a consumer can tell a torn or foreign record."""
    return bytes([_fill(p, i)]) * _size(p, i, 3001)


def array_item(p: int, i: int) -> np.ndarray:
    """--frames: [p << 32 | i, then a pattern of (p, i)], 1 to 512 int64 (a frame's buffer holds 512)."""
    out = np.full(1 + _size(p, i, 512), _fill(p, i), np.int64)
    out[0] = p << 32 | i
    return out


def _produce(q, p: int, done, frames: bool) -> None:
    for i in range(ITEMS):
        if not frames:
            q.put((p, i, payload(p, i)))
        elif i % FRAME_EVERY:
            q.put(array_item(p, i))
        else:
            item = array_item(p, i)
            with q.put_array(item.shape, np.int64, timeout=TIMEOUT) as frame:
                frame[...] = item
        done.value = i + 1       # after put returned: the item is in the queue (or spilled)


def _consume(q, log, frames: bool) -> None:
    """log[0] counts the items recorded in log[1:], each p << 32 | i. Exit 3: a corrupted item."""
    while True:
        try:
            if frames:
                with q.get_array(timeout=TIMEOUT) as view:
                    if view[0] < 0:
                        return
                    p, i = int(view[0]) >> 32, int(view[0]) & 0xFFFFFFFF
                    if not np.array_equal(view, array_item(p, i)):
                        os._exit(3)
            else:
                item = q.get(timeout=TIMEOUT)
                if item is None:
                    return
                p, i, data = item
                if data != payload(p, i):
                    os._exit(3)
        except queue.Empty:
            os._exit(4)
        n = log[0]
        log[1 + n] = p << 32 | i
        log[0] = n + 1


def one_run(seed: int, frames: bool = False) -> tuple[dict, list[str]]:
    rng = random.Random(seed)
    q = sy.Queue(maxsize=rng.choice([0, 20]), capacity_bytes=CAPACITY,
                 **({"frame_bytes": FRAME_BYTES, "frame_count": FRAME_COUNT} if frames else {}))
    done = [CTX.RawValue("q", 0) for _ in range(PRODUCERS)]
    logs = [CTX.RawArray("q", 1 + PRODUCERS * ITEMS) for _ in range(CONSUMERS)]
    producers = [CTX.Process(target=_produce, args=(q, p, done[p], frames)) for p in range(PRODUCERS)]
    consumers = [CTX.Process(target=_consume, args=(q, logs[c], frames)) for c in range(CONSUMERS)]
    for proc in consumers + producers:
        proc.start()
    start = time.monotonic()
    # The kill lands at a random point of the stream whatever the machine's speed: once the producers
    # have put a random share of their items, then up to 2 ms later (inside some put or get).
    threshold = rng.randrange(1, PRODUCERS * ITEMS)
    while sum(d.value for d in done) < threshold and any(p.is_alive() for p in producers):
        time.sleep(0.0002)
    time.sleep(rng.uniform(0.0, 0.002))
    role = rng.choice(["producer", "consumer"])
    index = rng.randrange(PRODUCERS if role == "producer" else CONSUMERS)
    victim = (producers if role == "producer" else consumers)[index]
    killed = victim.is_alive()
    if killed:
        os.kill(victim.pid, signal.SIGKILL)
    failures = []

    def late() -> float:
        return max(0.1, DEADLINE - (time.monotonic() - start))

    for proc in producers:
        proc.join(late())
    live_consumers = [c for c in consumers if not (killed and c is victim)]
    try:
        for _ in live_consumers:
            q.put(np.full(1, -1, np.int64) if frames else None, timeout=late())
    except queue.Full:
        failures.append(f"seed {seed}: the queue stayed full until the deadline ({DEADLINE} s)")
    for proc in consumers:
        proc.join(late())
    for proc in producers + consumers:
        if proc.is_alive():
            failures.append(f"seed {seed}: a peer still running at the deadline ({DEADLINE} s): killed")
            proc.kill()
            proc.join()
        elif proc.exitcode != 0 and not (killed and proc is victim and proc.exitcode == -signal.SIGKILL):
            why = {3: "a corrupted item", 4: "a get timed out"}.get(proc.exitcode, "unexpected")
            failures.append(f"seed {seed}: a peer's exit status {proc.exitcode} ({why})")
    got = [[int(x) for x in log[1:1 + log[0]]] for log in logs]
    seen = [x for g in got for x in g]
    if len(seen) != len(set(seen)):
        failures.append(f"seed {seed}: {len(seen) - len(set(seen))} items delivered twice")
    for c, g in enumerate(got):
        for p in range(PRODUCERS):
            mine = [x & 0xFFFFFFFF for x in g if x >> 32 == p]
            if mine != sorted(mine):
                failures.append(f"seed {seed}: consumer {c} got producer {p}'s items out of order")
    consumer_died = killed and role == "consumer"
    producer_died = killed and role == "producer"
    budget = q.lost + 1 if consumer_died else 0
    missing = 0
    every_item = set(range(ITEMS))
    for p in range(PRODUCERS):
        mine = {x & 0xFFFFFFFF for x in seen if x >> 32 == p}
        if producer_died and p == index:
            # What it put reached the queue in order up to some m; the rest of what it put was spilled in
            # the dead process or half-written (abandoned counts both). done may lag its last put by one,
            # and its put in progress may have claimed space: abandoned is done - m plus at most 2.
            m, n = len(mine), done[p].value
            if mine != set(range(m)) or m > n + 1:
                failures.append(f"seed {seed}: dead producer {p}: delivered {m} items, not its first {m} "
                                f"(put returned {n} times)")
            elif not max(0, n - m) <= q.abandoned <= max(0, n - m) + 2:
                failures.append(f"seed {seed}: dead producer {p}: {n - m} of its returned puts undelivered, "
                                f"q.abandoned = {q.abandoned}")
            continue
        extra = mine - every_item
        if extra:
            failures.append(f"seed {seed}: producer {p}: {len(extra)} items delivered that were never put")
        missing += ITEMS - len(mine & every_item)
    if missing > budget:
        failures.append(f"seed {seed}: {missing} items of live producers lost (allowed {budget}: q.lost "
                        f"{q.lost}, {'a consumer' if consumer_died else 'no consumer'} killed)")
    if q.lost and not consumer_died or q.lost > 1:
        failures.append(f"seed {seed}: q.lost = {q.lost} ({'a consumer' if consumer_died else 'no consumer'} killed)")
    if q.abandoned and not producer_died:
        failures.append(f"seed {seed}: q.abandoned = {q.abandoned} (no producer killed)")
    if q.qsize() != 0:
        failures.append(f"seed {seed}: {q.qsize()} items left in the queue")
    stats = {"kill": role if killed else None, "items": len(seen), "lost": q.lost, "abandoned": q.abandoned}
    q.close()
    return stats, failures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0, help="run r uses seed + r")
    ap.add_argument("--frames", action="store_true", help="int64 arrays, every third a zero-copy frame")
    args = ap.parse_args(argv)
    kills: dict = {}
    items = lost = abandoned = 0
    failures: list = []
    for r in range(args.runs):
        stats, bad = one_run(args.seed + r, args.frames)
        if stats["kill"]:
            kills[stats["kill"]] = kills.get(stats["kill"], 0) + 1
        items, lost, abandoned = items + stats["items"], lost + stats["lost"], abandoned + stats["abandoned"]
        failures += bad
    print(json.dumps({"runs": args.runs, "kills": kills, "items": items, "lost": lost, "abandoned": abandoned,
                      "failures": failures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
