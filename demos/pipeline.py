"""A video pipeline across processes: 1080p frames through N workers, sy.Queue against multiprocessing.Queue.

A producer process makes synthetic 1080p RGB frames (a moving gradient, stamped with their number),
N worker processes each take frames from one queue (work sharing: every frame to exactly one
worker) and transform them (a 1/8 thumbnail's mean colour and brightness), and this process
collects the results and keeps a live table of frames/s. The same pipeline runs three times (about
4 s each): on multiprocessing.Queue, on sympathy.Queue (frames pickled, arrays out of band: one copy
in, one out), and on sympathy.Queue's zero-copy frames (made in a shared buffer, read in place).
Ctrl-C ends it at once.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import signal
import time

import numpy as np
from rich.console import Console
from rich.live import Live
from rich.table import Table

import sympathy as sy
from sympathy.bench.core import positive_int

CTX = mp.get_context("fork")
STOP = None  # the end-of-stream item, one per worker


def synthetic_frame(i: int, base: np.ndarray) -> np.ndarray:
    """Frame i: the base gradient shifted by i columns (a pan), stamped with i in its first word."""
    frame = np.roll(base, i * 8, axis=1)  # a fresh array: the frame this process hands over
    frame.reshape(-1).view(np.int64)[0] = i
    return frame


def transform(frame: np.ndarray) -> tuple[int, float, tuple[float, float, float]]:
    """The workers' job: frame number, brightness and mean colour of a 1/8 thumbnail."""
    i = int(frame.reshape(-1).view(np.int64)[0])
    thumb = frame[::8, ::8].astype(np.float32)
    rgb = thumb.mean(axis=(0, 1))
    return i, float(rgb @ np.array([0.299, 0.587, 0.114], np.float32)), tuple(float(c) for c in rgb)


def _quiet_child(target, *args) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it ends the children
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    target(*args)


def producer(frames, stop, workers: int, width: int, height: int, in_place: bool) -> None:
    x = np.linspace(0, 255, width, dtype=np.float32)
    y = np.linspace(0, 255, height, dtype=np.float32)[:, None]
    base = np.stack([np.broadcast_to(x, (height, width)), np.broadcast_to(y, (height, width)),
                     (x + y) % 256], axis=-1).astype(np.uint8)
    i = 0
    while not stop.is_set():
        if in_place:  # the frame is made where the consumer will read it: no copy in, none out
            with frames.put_array(base.shape, np.uint8) as frame:
                shift = i * 8 % width
                frame[:, shift:] = base[:, :width - shift]
                frame[:, :shift] = base[:, width - shift:]
                frame.reshape(-1).view(np.int64)[0] = i
            del frame
        else:
            frames.put(synthetic_frame(i, base))
        i += 1
    for _ in range(workers):
        frames.put(STOP)


def worker(frames, results, in_place: bool) -> None:
    while True:
        if in_place:
            try:
                with frames.get_array() as frame:
                    result = transform(frame)
                del frame  # the buffer goes back to the producer once no view of it is left
            except TypeError as exc:  # an ordinary item, not a frame: the end of the stream
                if getattr(exc, "item", ...) is STOP:
                    results.put(STOP)
                    return
                raise
            results.put(result)
            continue
        frame = frames.get()
        if frame is STOP:
            results.put(STOP)
            return
        results.put(transform(frame))


class Pipeline:
    """One run: producer -> queue of frames -> N workers -> queue of results -> this process."""

    def __init__(self, label: str, make_queue, workers: int, width: int, height: int, in_place: bool = False):
        self.label, self.workers = label, workers
        self.frames, self.results = make_queue(), make_queue()
        self.stop = CTX.Event()
        self.children = [CTX.Process(target=_quiet_child, args=(producer, self.frames, self.stop, workers,
                                                                  width, height, in_place), daemon=True)]
        self.children += [CTX.Process(target=_quiet_child, args=(worker, self.frames, self.results, in_place),
                                      daemon=True) for _ in range(workers)]
        self.done, self.seen, self.started = 0, set(), None
        self.window: list[float] = []  # arrival times of the last second's results
        self.rate = self.recent = 0.0
        self.brightness = 0.0

    def start(self) -> None:
        # SIGINT blocked across the forks: a Ctrl-C between a fork and the child's SIG_IGN would give
        # the child a KeyboardInterrupt traceback of its own. Children unblock once they ignore it.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            for child in self.children:
                child.start()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        self.started = time.perf_counter()

    def collect(self, until: float) -> None:
        """Take results until `until` (perf_counter); frames/s overall and over the last second."""
        window = self.window
        while time.perf_counter() < until:
            try:
                item = self.results.get(timeout=0.05)
            except queue.Empty:
                continue
            i, self.brightness, _ = item
            self.seen.add(i)
            self.done += 1
            now = time.perf_counter()
            window.append(now)
            while window and window[0] < now - 1.0:
                window.pop(0)
            self.recent = len(window) / min(1.0, now - self.started)
        self.rate = self.done / (time.perf_counter() - self.started)

    def finish(self) -> None:
        """Stop the producer, drain until every worker has said it is done, then join everyone."""
        self.stop.set()
        ended, deadline = 0, time.monotonic() + 30
        while ended < self.workers and time.monotonic() < deadline:
            try:
                item = self.results.get(timeout=0.1)
            except queue.Empty:
                continue
            if item is STOP:
                ended += 1
            else:
                self.seen.add(item[0])
                self.done += 1
        self.kill()

    def kill(self) -> None:
        for child in self.children:
            if child.is_alive():
                child.kill()
            child.join(5)
        for q in (self.frames, self.results):
            q.close()
            if hasattr(q, "cancel_join_thread"):
                q.cancel_join_thread()  # nothing may wait on a pipe that nobody reads any more


def table(runs: list[Pipeline], width: int, height: int, workers: int) -> Table:
    t = Table(title=f"{width}x{height} RGB frames, 1 producer -> {workers} workers -> 1 collector "
                    f"(this machine: {len(os.sched_getaffinity(0))} CPUs)", title_justify="left",
              caption="frames/s now: the last second; frames/s: the whole run so far")
    for col in ("queue", "frames", "frames/s now", "frames/s", "GB/s", "x mp.Queue"):
        t.add_column(col, justify="left" if col == "queue" else "right", no_wrap=col == "queue")
    first = runs[0].rate if runs and runs[0].rate else None
    for run in runs:
        ratio = f"{run.rate / first:.2f}x" if first and run is not runs[0] and run.rate else ""
        t.add_row(run.label, f"{run.done:,}", f"{run.recent:,.0f}", f"{run.rate:,.0f}",
                  f"{run.rate * width * height * 3 / 1e9:.2f}", ratio)
    return t


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="sympathy demo pipeline", description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=positive_int, default=2, help="worker processes (default 2)")
    parser.add_argument("--seconds", type=float, default=4.0, help="how long each queue runs (default 4)")
    parser.add_argument("--width", type=positive_int, default=1920, help="frame width (default 1920)")
    parser.add_argument("--height", type=positive_int, default=1080, help="frame height (default 1080)")
    args = parser.parse_args(argv)
    if not args.seconds > 0:
        parser.error(f"--seconds must be > 0; got {args.seconds}")
    if args.width * args.height * 3 < 8:
        parser.error("a frame needs at least 8 bytes (its number is stamped in its first 8)")
    console = Console()
    frame_bytes = args.width * args.height * 3
    # Room for 8 frames in flight: the producer waits when the workers fall behind (mp.Queue's
    # feeder thread would buffer without bound, so it gets a maxsize of 8 too: the same back-pressure).
    candidates = [("multiprocessing.Queue", lambda: CTX.Queue(maxsize=8), False),
                  ("sympathy.Queue", lambda: sy.Queue(8, capacity_bytes=1 << (9 * frame_bytes).bit_length()), False),
                  # Frame buffers: 8 in flight, plus one stale binding a process (queue_frames.py).
                  ("sympathy.Queue zero-copy",
                   lambda: sy.Queue(frame_bytes=frame_bytes, frame_count=8 + args.workers + 1), True)]
    runs: list[Pipeline] = []
    current = None
    try:
        with Live(table(runs, args.width, args.height, args.workers), console=console,
                  refresh_per_second=4) as live:
            for label, make_queue, in_place in candidates:
                current = Pipeline(label, make_queue, args.workers, args.width, args.height, in_place)
                runs.append(current)
                current.start()
                end = time.perf_counter() + args.seconds
                while time.perf_counter() < end:
                    current.collect(min(end, time.perf_counter() + 0.25))
                    live.update(table(runs, args.width, args.height, args.workers))
                current.finish()
                current = None
    except KeyboardInterrupt:
        if current is not None:
            current.kill()
        console.print("[yellow]interrupted: every child process stopped[/yellow]")
        return
    # Every frame the producer made, 0..done-1, came back exactly once (the drain takes the tail).
    lost = [r.label for r in runs if r.seen != set(range(r.done))]
    console.print(f"Every result came once per frame: {'yes' if not lost else 'NO: ' + ', '.join(lost)}. "
                  "Full comparison with every anchor: `sympathy bench pipeline` (docs/pipeline.md).")


if __name__ == "__main__":
    main()
