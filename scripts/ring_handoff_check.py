"""The GIL handoff on and off in one run (c_src/ring_wait.c, "The GIL handoff"; docs/ring.md).

    python scripts/ring_handoff_check.py [--repeat 5]

Three two-thread rows of one process, each with the handoff (the default) and without it
(sy_ring_set_gil_handoff(handle, NULL)), alternating: per-item publish/get (200 000 int64, M
items/s), a ping-pong over two rings (3 000 round trips, median us; each thread's peer waits on the
ring it does not wait on), and the batched row (1 024 int64 a batch, contiguous, us a batch).
"""
import argparse
import threading
import time

import numpy as np

import sympathy.ring.buffer as buffer
from sympathy.bench.suites.ring import py_threads_ring
from sympathy.ring._core import ffi, lib

_init = buffer.RingBuffer.__init__
HANDOFF = {"on": True}


def _init_maybe_without(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    if not HANDOFF["on"]:
        lib.sy_ring_set_gil_handoff(self._handle, ffi.NULL)


buffer.RingBuffer.__init__ = _init_maybe_without


def ping_pong(rounds: int = 3000) -> float:
    a, b = buffer.RingBuffer(64, np.int64), buffer.RingBuffer(64, np.int64)
    ca, cb = a.consumer(), b.consumer()

    def echo():
        for _ in range(rounds):
            b.publish(ca.get(timeout=30))

    t = threading.Thread(target=echo)
    t.start()
    took = []
    for i in range(rounds):
        t0 = time.perf_counter_ns()
        a.publish(i)
        if cb.get(timeout=30) != i:
            raise RuntimeError("ping-pong: wrong reply")
        took.append(time.perf_counter_ns() - t0)
    t.join()
    a.close()
    b.close()
    return float(np.median(took)) / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for _ in range(args.repeat):
        row = []
        for on in (True, False):
            HANDOFF["on"] = on
            per_item = py_threads_ring(200_000, 1, wait="blocking")
            pp = ping_pong()
            batched = py_threads_ring(2_000_000, 1024, layout="contiguous")
            row.append(f"handoff {'on ' if on else 'off'}: per-item {per_item / 1e6:.2f} M/s, ping-pong p50 "
                       f"{pp:5.1f} us, batched {1024 / batched * 1e6:5.2f} us")
        print(" | ".join(row))


if __name__ == "__main__":
    main()
