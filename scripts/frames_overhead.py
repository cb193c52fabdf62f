"""Per-frame CPU time of each side of a zero-copy frame handover, on small frames, where the
transport's own work per frame is what is measured (docs/pipeline.md, "Issue 19, fourth session").

    python scripts/frames_overhead.py [FRAMES] [TRANSPORT ...]   # default 5000; Iceoryx2 SyRingFrames SyQueueFrames

Runs the bench's frames shape (its transports, its warm-up, its stamp checks) with 64x48 RGB frames,
three rounds, and prints frames/s and each side's CPU time a frame (time.thread_time: other
tenants' preemption is not counted). The producer's figure includes the bench's making of the
frame (a 9 KB copy and two stamps, ~1.5 us on the 2-core VM), the consumer's its stamp check.
"""
import multiprocessing as mp
import sys
import time

import numpy as np

from sympathy.bench.suites import _pipeline_transports as tr
from sympathy.bench.suites import pipeline as pl

N = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
W, H = 64, 48


def prod(t, n, src, ready, go, done, res):
    ready.wait(60)
    tx = t.sender()
    ready.wait(60)
    tx.started()
    for i in range(pl.WARM_FRAMES):
        tx.put_frame(src, i)
    go.wait(60)
    c0 = time.thread_time_ns()
    for i in range(pl.WARM_FRAMES, pl.WARM_FRAMES + n):
        tx.put_frame(src, i)
    res[0] = time.thread_time_ns() - c0
    done.wait(60)
    tx.close()


def run(T):
    t, ctx = T(), mp.get_context(T.start_method)
    src = np.random.default_rng(7).integers(0, 255, (H, W, 3), dtype=np.uint8)
    t.prepare("frames", src.nbytes, 1)
    ready, go, done = ctx.Barrier(2), ctx.Event(), ctx.Event()
    res = ctx.RawArray("q", 1) if T.start_method == "fork" else ctx.Array("q", 1, lock=False)
    p = ctx.Process(target=prod, args=(t, N, src, ready, go, done, res))
    p.start()
    rx = pl._open_parent_end(t, t.receiver, ready)
    for i in range(pl.WARM_FRAMES):
        if rx.get_frame() != i:
            raise RuntimeError(f"{T.label}: warm-up frame {i} lost")
    c0, t0 = time.thread_time_ns(), time.perf_counter()
    go.set()
    for i in range(pl.WARM_FRAMES, pl.WARM_FRAMES + N):
        if rx.get_frame() != i:
            raise RuntimeError(f"{T.label}: frame {i} lost")
    wall, cc = time.perf_counter() - t0, time.thread_time_ns() - c0
    done.set()
    p.join(60)
    t.close()
    if p.exitcode != 0:
        raise RuntimeError(f"{T.label}: the producer failed ({p.exitcode})")
    return N / wall, res[0] / N / 1e3, cc / N / 1e3



if __name__ == "__main__":
    Ts = [getattr(tr, n) for n in (sys.argv[2:] or ["Iceoryx2", "SyRingFrames", "SyQueueFrames"])]
    for rep in range(3):
        for T in Ts:
            r, pc, cc = run(T)
            print(f"{T.label:40s} {r:8.0f} frames/s  producer CPU {pc:6.1f} us  consumer CPU {cc:6.1f} us")
