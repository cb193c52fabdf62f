"""Two threads on one multi-producer object beside a dying producer (issue 15, second pass):
`python tests/stress/ring_shared_lane_runs.py --wait W --runs N`.

A producer record has two lanes (c_src/ring_sequencer.c, owner_claims): the first thread that
claims through a handle writes the owner lane with plain stores, every other thread counts its
claims in the shared lane. One run: a named multi-producer ring of 64 slots read by this process;
one producer process whose two threads publish 2 000 items each through ONE RingBuffer object
(publish, publish_batch and claim in random sizes), and one producer process that dies inside a
claim at a random moment (os._exit). Every item of both live threads must arrive exactly once and
in order, the dying producer's items a prefix; no thread may time out (a publish past its timeout
raises in that thread and the process reports it). Prints one JSON line: runs, items, lost, failures.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import random
import sys
import threading
import time
import uuid

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import sympathy as sy  # noqa: E402

CTX = mp.get_context("fork")
ITEMS = 2000          # per live thread
TIMEOUT = 20.0        # every wait's timeout: reaching it is a failure
SHIFT = 32            # an item is tag << SHIFT | index; tags 1 and 2 live threads, 3 the dying producer


def sharer_main(name: str, seed: int) -> None:
    rb = sy.RingBuffer.attach(name, np.int64)
    failed = []

    def publish_all(tag: int) -> None:
        rnd = random.Random(seed * 10 + tag)
        i = 0
        try:
            while i < ITEMS:
                k = min(rnd.choice([1, 1, 2, 3, 5]), ITEMS - i)
                values = [(tag << SHIFT) | (i + j) for j in range(k)]
                mode = rnd.random()
                if mode < 0.4:
                    rb.publish(values[0], timeout=TIMEOUT)
                    k = 1
                elif mode < 0.7:
                    with rb.claim(k, timeout=TIMEOUT) as slots:
                        slots[:] = values
                else:
                    rb.publish_batch(np.array(values, np.int64), timeout=TIMEOUT)
                i += k
                if rnd.random() < 0.01:
                    time.sleep(0.001)
        except BaseException as exc:  # a timeout here is the failure this run looks for
            failed.append(f"thread {tag}: {exc!r}")

    threads = [threading.Thread(target=publish_all, args=(tag,)) for tag in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    os._exit(3 if failed else 0)


def dier_main(name: str, seed: int) -> None:
    rb = sy.RingBuffer.attach(name, np.int64)
    rnd = random.Random(seed)
    i = 0
    while True:
        k = rnd.choice([1, 2, 4])
        with rb.claim(k, timeout=TIMEOUT) as slots:
            slots[:] = [(3 << SHIFT) | (i + j) for j in range(k)]
            if rnd.random() < 0.003:
                os._exit(0)  # inside the claim: k sequences nobody will publish
        i += k


def one_run(wait: str, seed: int) -> dict:
    name = f"sylane-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    rb = sy.RingBuffer(64, np.int64, name=name, producer="multi", wait=wait)
    try:
        c = rb.consumer()
        sharer = CTX.Process(target=sharer_main, args=(name, seed))
        dier = CTX.Process(target=dier_main, args=(name, seed))
        sharer.start()
        dier.start()
        got: list[int] = []
        deadline = time.monotonic() + 3 * TIMEOUT
        while sharer.is_alive() or dier.is_alive():
            try:
                got += c.get_batch(256, timeout=0.05).tolist()
            except queue.Empty:
                pass
            if time.monotonic() > deadline:
                sharer.kill()
                dier.kill()
                return {"failure": "still running at the run's deadline"}
        sharer.join()
        dier.join()
        rb.close_stream()
        try:
            while True:
                got += c.get_batch(256, timeout=TIMEOUT).tolist()
        except sy.ClosedError:
            pass
        except queue.Empty:
            return {"failure": "the reader timed out after the stream was closed"}
        by_tag: dict[int, list[int]] = {1: [], 2: [], 3: []}
        for v in got:
            by_tag[v >> SHIFT].append(v & ((1 << SHIFT) - 1))
        if sharer.exitcode != 0 or dier.exitcode != 0:
            return {"failure": f"exit status: sharer {sharer.exitcode} (3: a publish timed out), dier {dier.exitcode}"}
        for tag in (1, 2):
            if by_tag[tag] != list(range(ITEMS)):
                return {"failure": f"live thread {tag}: {len(by_tag[tag])} of {ITEMS} items, or out of order"}
        if by_tag[3] != list(range(len(by_tag[3]))):
            return {"failure": "the dying producer's items are not a prefix"}
        return {"items": len(got), "lost": c.lost}
    finally:
        rb.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wait", choices=sorted(sy.ring.WAITS), required=True)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    summary = {"wait": args.wait, "runs": 0, "items": 0, "lost": 0, "failures": []}
    for run in range(args.runs):
        seed = args.seed + run
        outcome = one_run(args.wait, seed)
        summary["runs"] += 1
        if "failure" in outcome:
            summary["failures"].append({"seed": seed, **outcome})
            continue
        summary["items"] += outcome["items"]
        summary["lost"] += outcome["lost"]
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
