"""Fault injection for the ring (issue 15): `python tests/stress/ring_fault_runs.py --wait W --runs N`.

One run: a named multi-producer ring; two consumer processes (one reads with get_batch, one is a
handler driven by EventPoller.poll); two producer processes publishing 1 500 items each through
publish, publish_batch and claim in random sizes. At a random moment one random peer (a producer,
the consumer or the handler) is killed with SIGKILL. Once the producers are gone the stream is
closed and each surviving reader reports what it got.

Allowed: the killed producer's items are a prefix of what it meant to publish (what it published
before dying) and its open claim is counted in `lost`. Forbidden: an item of a live producer lost,
duplicated or out of order; any reader getting queue.Empty (a waiter past its timeout); a peer
killed by anything but our SIGKILL; anything still running after the run's deadline.

Prints one JSON line: runs, kills by role, items verified, lost, failures (with their seeds).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import signal
import sys
import time
import uuid

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import sympathy as sy  # noqa: E402

CTX = mp.get_context("fork")
ITEMS = 1500          # per producer
CAPACITY = 64         # small: many laps, producers gated by the readers
TIMEOUT = 20.0        # every wait's timeout: reaching it is a failure
PRODUCERS = 2
SHIFT = 32            # an item is producer << SHIFT | sequence


def producer_main(name: str, k: int, seed: int, started) -> None:
    rng = np.random.default_rng(seed)
    rb = sy.RingBuffer.attach(name, np.int64)
    started.set()
    i = 0
    while i < ITEMS:
        n = min(int(rng.integers(1, 17)), ITEMS - i)
        values = (k << SHIFT) + np.arange(i, i + n, dtype=np.int64)
        mode = rng.integers(3)
        if mode == 0:
            for v in values.tolist():
                rb.publish(v, timeout=TIMEOUT)
        elif mode == 1:
            rb.publish_batch(values, timeout=TIMEOUT)
        else:
            with rb.claim(n, timeout=TIMEOUT) as slots:
                slots[:] = values
                if rng.random() < 0.2:
                    time.sleep(0.001)  # work inside the claim: a kill often lands on an open one
        i += n
        if rng.random() < 0.05:
            time.sleep(0.001)
    rb.close()


def reader_main(name: str, poller: bool, seed: int, ready, conn) -> None:
    rng = np.random.default_rng(seed)
    rb = sy.RingBuffer.attach(name, np.int64)
    c = rb.poller() if poller else rb.consumer()
    ready.set()
    got: list[int] = []
    status = "closed"
    deadline = time.monotonic() + 3 * TIMEOUT
    try:
        if poller:
            def handler(event, sequence, end_of_batch):
                got.append(event)
            while True:
                if c.poll(handler) != sy.PollState.PROCESSING:
                    if time.monotonic() > deadline:
                        status = "timeout"
                        break
                    time.sleep(0.0002)
        else:
            while True:
                got += c.get_batch(int(rng.integers(1, 65)), timeout=TIMEOUT).tolist()
    except sy.ClosedError:
        pass
    except queue.Empty:
        status = "timeout"
    lost = c.lost
    conn.send((status, np.array(got, np.int64).tobytes(), lost))
    conn.close()
    os._exit(0)


def one_run(wait: str, seed: int, layout: str = "slots") -> dict:
    rng = np.random.default_rng(seed)
    name = f"syfault-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    rb = sy.RingBuffer(CAPACITY, np.int64, name=name, producer="multi", wait=wait, layout=layout)
    readers, pipes = [], []
    try:
        for r in range(2):
            ready = CTX.Event()
            mine, theirs = CTX.Pipe(duplex=False)
            p = CTX.Process(target=reader_main, args=(name, r == 1, seed * 7 + r, ready, theirs), daemon=True)
            p.start()
            theirs.close()
            if not ready.wait(TIMEOUT):
                return {"failure": "reader never registered"}
            readers.append(p)
            pipes.append(mine)
        producers = []
        for k in range(PRODUCERS):
            started = CTX.Event()
            p = CTX.Process(target=producer_main, args=(name, k, seed * 11 + k, started), daemon=True)
            p.start()
            producers.append(p)
            started.wait(TIMEOUT)
        roles = [("producer", p) for p in producers] + [("consumer", readers[0]), ("handler", readers[1])]
        victim_role, victim = roles[int(rng.integers(len(roles)))]
        time.sleep(float(rng.uniform(0, 0.1)))
        killed = victim.is_alive()
        if killed:
            os.kill(victim.pid, signal.SIGKILL)
        for p in producers:
            p.join(3 * TIMEOUT)
            if p.is_alive():
                return {"failure": "producer still running after its deadline", "role": victim_role}
            if p.exitcode not in (0, -signal.SIGKILL) or (p.exitcode and p is not victim):
                return {"failure": f"producer exit status {p.exitcode}", "role": victim_role}
        rb.close_stream()
        results = []
        for p, pipe in zip(readers, pipes):
            if p is victim and killed:
                results.append(None)
                continue
            if not pipe.poll(3 * TIMEOUT):
                return {"failure": "reader still running after its deadline", "role": victim_role}
            status, data, lost = pipe.recv()
            p.join(TIMEOUT)
            if status != "closed":
                return {"failure": f"reader {status}", "role": victim_role}
            results.append((np.frombuffer(data, np.int64), lost))
        return verify(results, producers, victim if killed else None, victim_role)
    finally:
        for p in readers:
            if p.is_alive():
                p.kill()
        rb.close()


def verify(results, producers, victim, victim_role) -> dict:
    items = 0
    prefixes = []
    for result in results:
        if result is None:
            continue
        values, lost = result
        if len(np.unique(values)) != len(values):
            return {"failure": "duplicated items", "role": victim_role}
        lengths = []
        for k, p in enumerate(producers):
            mine = values[values >> SHIFT == k] & ((1 << SHIFT) - 1)
            if not np.array_equal(mine, np.arange(len(mine))):
                return {"failure": f"producer {k}: items missing or out of order", "role": victim_role}
            if p is not victim and len(mine) != ITEMS:
                return {"failure": f"live producer {k}: {len(mine)} of {ITEMS} delivered", "role": victim_role}
            lengths.append(len(mine))
        if (victim_role != "producer" or victim is None) and lost:
            return {"failure": f"{lost} lost without a dead producer", "role": victim_role}
        if lost > 16:
            return {"failure": f"{lost} lost: more than one open claim", "role": victim_role}
        prefixes.append(lengths)
        items += len(values)
    if any(p != prefixes[0] for p in prefixes):
        return {"failure": f"readers disagree on what was published: {prefixes}", "role": victim_role}
    lost = max((r[1] for r in results if r is not None), default=0)
    return {"items": items, "lost": lost, "role": victim_role if victim is not None else f"{victim_role} (done already)"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wait", choices=sorted(sy.ring.WAITS), required=True)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layout", choices=["slots", "contiguous"], default="slots")
    args = parser.parse_args()
    summary = {"wait": args.wait, "runs": 0, "kills": {}, "items": 0, "lost": 0, "failures": []}
    for run in range(args.runs):
        seed = args.seed + run
        outcome = one_run(args.wait, seed, args.layout)
        summary["runs"] += 1
        if "failure" in outcome:
            summary["failures"].append({"seed": seed, **outcome})
            continue
        summary["kills"][outcome["role"]] = summary["kills"].get(outcome["role"], 0) + 1
        summary["items"] += outcome["items"]
        summary["lost"] += outcome["lost"]
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
