"""`sympathy bench pipeline`: multiprocessing pipelines, sympathy's queue and ring against every
anchor in the same run (docs/pipeline.md says how to read the table).

Three shapes, producer and consumers in separate processes (fork):
  objects  a dict of 5 fields, 1 producer -> 1 consumer, items/s;
  frames   1080p RGB uint8 frames (6.2 MB), 1 -> 1, frames/s and GB/s beside single-thread memcpy
           bandwidth measured in the same run;
  workers  1 producer -> N workers running 50 us busy tasks, tasks/s against the ideal speed-up:
           ideal = min(N, C) x the serial rate of the same tasks, C = the CPUs this process may use,
           and the ceiling: N processes running their own share of the tasks with no transport.
Anchors: multiprocessing.Queue (the ratio column), multiprocessing.SimpleQueue, faster-fifo, pyzmq
PUSH/PULL over ipc://, shared_memory + a Queue of names by hand (frames), iceoryx2 (objects, frames),
multiprocessing.Pool (workers). A missing optional anchor is a row saying so.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import statistics
import time

import numpy as np

from ..core import Results, Suite, positive_int
from . import _pipeline_transports as tr

CTX = mp.get_context("fork")
WORD = 8  # frames are stamped in 8-byte words at both ends
# Frames sent before the clock starts: every buffer of every pool (at most 6) is touched once, so a
# first write's page faults (about 1 500 a 6 MB frame, each a trap into the kernel) are not timed.
WARM_FRAMES = 8
SHAPES = ("objects", "frames", "workers")


def frame_size(text: str) -> tuple[int, int]:
    """argparse type: WIDTHxHEIGHT of an RGB uint8 frame, a whole number of 8-byte words."""
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be WIDTHxHEIGHT, e.g. 1920x1080; got {text!r}") from None
    if width < 1 or height < 1:
        raise argparse.ArgumentTypeError(f"width and height must be >= 1; got {text!r}")
    if width * height * 3 % WORD:
        raise argparse.ArgumentTypeError(f"width*height*3 must be a multiple of {WORD} bytes; got {text!r}")
    return width, height


def make_item(i: int) -> dict:
    return {"id": i, "name": "sensor-7", "value": i * 0.5, "ok": True, "tags": ("a", "b")}


# ---- the child processes ------------------------------------------------------------------------------
def _fork(target, *args, ctx=CTX):
    """A daemon child that leaves Ctrl-C to the parent (the terminal signals the whole group; the
    parent's KeyboardInterrupt then ends the run and its exit ends daemon children)."""
    return ctx.Process(target=_child_main, args=(target, *args), daemon=True)


def _child_main(target, *args) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    target(*args)


def _object_producer(t, n: int, ready, go, done) -> None:
    items = [make_item(i) for i in range(n)]  # made before the clock starts
    ready.wait(tr.TIMEOUT_S)  # the parent's end is open (it binds, or creates the service) ...
    tx = t.sender()
    ready.wait(tr.TIMEOUT_S)  # ... and now every end
    go.wait(tr.TIMEOUT_S)
    tx.started()
    put = tx.put
    for item in items:
        put(item)
    done.wait(tr.TIMEOUT_S)  # the sender's end must outlive its items (iceoryx2's live in its segment)
    tx.close()


def _frame_producer(t, n: int, src: np.ndarray, ready, go, done) -> None:
    ready.wait(tr.TIMEOUT_S)
    tx = t.sender()
    ready.wait(tr.TIMEOUT_S)
    tx.started()
    for i in range(WARM_FRAMES):
        tx.put_frame(src, i)
    go.wait(tr.TIMEOUT_S)
    for i in range(WARM_FRAMES, WARM_FRAMES + n):
        tx.put_frame(src, i)
    done.wait(tr.TIMEOUT_S)
    tx.close()


def _worker(t, w: int, counters, loops: int, ready, go) -> None:
    ready.wait(tr.TIMEOUT_S)
    rx = t.receiver()
    ready.wait(tr.TIMEOUT_S)
    go.wait(tr.TIMEOUT_S)
    base = w * 8  # each worker's two counters on their own 64-byte line: no false sharing between workers
    get = rx.get
    while True:
        i = get()
        if i is None:
            break
        for _ in range(loops):  # the task: busy work, no I/O
            pass
        counters[base + 1] += i
        counters[base] += 1
    rx.close()


def _own_tasks(w: int, counters, loops: int, share: range, ready, go) -> None:
    """The no-transport ceiling's worker: the same task body and counters as _worker, on task ids
    it makes itself (its share of them), so what it measures is what the host gives N busy
    processes at once (frequency under load, siblings, scheduling), with nothing handed over."""
    ready.wait(tr.TIMEOUT_S)
    ready.wait(tr.TIMEOUT_S)
    go.wait(tr.TIMEOUT_S)
    base = w * 8
    for i in share:
        for _ in range(loops):
            pass
        counters[base + 1] += i
        counters[base] += 1


def _pool_task(args):
    i, loops = args
    for _ in range(loops):
        pass
    return i


def _open_parent_end(t, opener, ready):
    """The parent's end, opened before the children open theirs (parent_first: it binds, or makes
    the service) or after; the second meeting is the last one before the clock starts."""
    end = opener() if t.parent_first else None
    ready.wait(tr.TIMEOUT_S)
    ready.wait(tr.TIMEOUT_S)
    return end if end is not None else opener()


def _finish(children, t) -> None:
    deadline = time.monotonic() + tr.TIMEOUT_S  # one deadline for all: not TIMEOUT_S per child
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
    t.close()
    failed = [c.exitcode for c in children if c.exitcode]
    if any(c.is_alive() for c in children) or failed:
        for c in children:
            c.kill()
        raise RuntimeError(f"{t.label}: a child process failed (exit codes {failed}) or hung")


# ---- one run of each shape -----------------------------------------------------------------------------
def objects_rate(transport: type, n: int) -> float:
    """items/s from the producer's first put to the consumer's last get; every item's id is checked."""
    t, ctx = transport(), mp.get_context(transport.start_method)
    t.prepare("objects", 0, 1)
    ready, go, done = ctx.Barrier(2), ctx.Event(), ctx.Event()
    child = _fork(_object_producer, t, n, ready, go, done, ctx=ctx)
    child.start()
    try:
        rx = _open_parent_end(t, t.receiver, ready)
        t0 = time.perf_counter()
        go.set()
        get = rx.get
        for i in range(n):
            if get()["id"] != i:
                raise RuntimeError(f"{t.label}: item {i} out of order or lost")
        seconds = time.perf_counter() - t0
        done.set()
    except BaseException:
        child.kill()
        t.close()
        raise
    _finish([child], t)
    return n / seconds


def frames_rate(transport: type, n: int, src: np.ndarray) -> float:
    """frames/s: each frame made (src copied in, stamped), handed over and its stamp checked; after
    WARM_FRAMES untimed ones."""
    t, ctx = transport(), mp.get_context(transport.start_method)
    t.prepare("frames", src.nbytes, 1)
    ready, go, done = ctx.Barrier(2), ctx.Event(), ctx.Event()
    child = _fork(_frame_producer, t, n, src, ready, go, done, ctx=ctx)
    child.start()
    try:
        rx = _open_parent_end(t, t.receiver, ready)
        for i in range(WARM_FRAMES):
            if rx.get_frame() != i:
                raise RuntimeError(f"{t.label}: warm-up frame {i} out of order or lost")
        t0 = time.perf_counter()
        go.set()
        for i in range(WARM_FRAMES, WARM_FRAMES + n):
            if rx.get_frame() != i:
                raise RuntimeError(f"{t.label}: frame {i} out of order or lost")
        seconds = time.perf_counter() - t0
        done.set()
    except BaseException:
        child.kill()
        t.close()
        raise
    _finish([child], t)
    return n / seconds


def workers_rate(transport: type, workers: int, tasks: int, loops: int) -> float:
    """tasks/s from the first put until the workers have finished every task; each task id is
    counted once (the ids' sum and count are checked: exactly-once delivery)."""
    t = transport()
    t.prepare("workers", 0, workers)
    counters = CTX.RawArray("q", 8 * workers)
    ready, go = CTX.Barrier(workers + 1), CTX.Event()
    children = [_fork(_worker, t, w, counters, loops, ready, go) for w in range(workers)]
    for child in children:
        child.start()
    try:
        tx = _open_parent_end(t, t.sender, ready)
        t0 = time.perf_counter()
        go.set()
        tx.started()
        put = tx.put
        for i in range(tasks):
            put(i)
        _wait_for_tasks(counters, workers, tasks, f"{t.label}: workers did not finish")
        seconds = time.perf_counter() - t0
        t.finish()
        for _ in range(workers):
            put(None)
    except BaseException:
        for child in children:
            child.kill()
        t.close()
        raise
    _finish(children, t)
    count = sum(counters[w * 8] for w in range(workers))
    total = sum(counters[w * 8 + 1] for w in range(workers))
    if count != tasks or total != tasks * (tasks - 1) // 2:
        raise RuntimeError(f"{t.label}: {count} tasks done (of {tasks}), id sum {total}: lost or duplicated")
    return tasks / seconds


def _wait_for_tasks(counters, workers: int, tasks: int, what: str) -> None:
    """Poll the workers' done counters (slot w * 8: one cache line each) until they add up to `tasks`;
    TimeoutError with `what` after tr.TIMEOUT_S."""
    deadline = time.monotonic() + tr.TIMEOUT_S
    while sum(counters[w * 8] for w in range(workers)) < tasks:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: {tasks} tasks in {tr.TIMEOUT_S} s")
        time.sleep(0.0002)


def ceiling_rate(workers: int, tasks: int, loops: int) -> float:
    """tasks/s of `workers` processes each running its share of the tasks with no transport at all
    (ids made in place, the same task body and counters as the workers shape, the clock run the
    same way): the most any transport can reach on this host with that many workers."""
    counters = CTX.RawArray("q", 8 * workers)
    ready, go = CTX.Barrier(workers + 1), CTX.Event()
    children = [_fork(_own_tasks, w, counters, loops, range(w, tasks, workers), ready, go) for w in range(workers)]
    for child in children:
        child.start()
    try:
        ready.wait(tr.TIMEOUT_S)
        ready.wait(tr.TIMEOUT_S)
        t0 = time.perf_counter()
        go.set()
        _wait_for_tasks(counters, workers, tasks, "no-transport ceiling: not done")
        seconds = time.perf_counter() - t0
    finally:
        for child in children:
            child.join(tr.TIMEOUT_S)
            if child.is_alive():
                child.kill()
    total = sum(counters[w * 8 + 1] for w in range(workers))
    if total != tasks * (tasks - 1) // 2:
        raise RuntimeError(f"no-transport ceiling: id sum {total}: a task ran twice or not at all")
    return tasks / seconds


def pool_rate(workers: int, tasks: int, loops: int) -> float:
    """multiprocessing.Pool.imap_unordered, one task per message (chunksize=1, as the queues);
    the pool is started and warm before the clock."""
    with CTX.Pool(workers, initializer=signal.signal, initargs=(signal.SIGINT, signal.SIG_IGN)) as pool:
        pool.map(_pool_task, [(0, 1)] * workers * 2)
        t0 = time.perf_counter()
        total = sum(pool.imap_unordered(_pool_task, ((i, loops) for i in range(tasks)), chunksize=1))
        seconds = time.perf_counter() - t0
    if total != tasks * (tasks - 1) // 2:
        raise RuntimeError(f"multiprocessing.Pool: id sum {total}: lost or duplicated tasks")
    return tasks / seconds


def serial_rate(tasks: int, loops: int) -> float:
    """The same tasks in this one process with no transport: the rate one CPU gives."""
    t0 = time.perf_counter()
    for _ in range(tasks):
        for _ in range(loops):
            pass
    return tasks / (time.perf_counter() - t0)


def memcpy_bandwidth(nbytes: int, spread: int = 128 << 20) -> float:
    """Single-thread copy bandwidth (GB/s): one source frame copied into consecutive frame-sized
    slices of a `spread`-byte buffer (already touched), as a producer fills a pool of slots. The
    spread is several times any last-level cache, so the copy goes to DRAM: the same frame copied
    into one destination over and over stays in cache and measured 41 GB/s on this VM (an EPYC
    with 32 MiB of L3), a figure no handover between cores can approach."""
    src = np.random.default_rng(1).integers(0, 255, nbytes, dtype=np.uint8)
    slots = max(4, spread // nbytes)
    pool = np.empty(slots * nbytes, np.uint8)
    pool.fill(1)  # page faults now, not in the timing
    t0 = time.perf_counter()
    for k in range(slots):
        np.copyto(pool[k * nbytes:(k + 1) * nbytes], src)
    return slots * nbytes / (time.perf_counter() - t0) / 1e9


# ---- the suite ----------------------------------------------------------------------------------------
QUICK = {"items": 5_000, "frames": 10, "tasks": 400, "repeat": 1}
FULL = {"items": 20_000, "frames": 24, "tasks": 2_000, "repeat": 3}
OBJECTS = (tr.MpQueue, tr.SimpleQueue, tr.FasterFifo, tr.Zmq, tr.Iceoryx2, tr.SyQueue)
FRAMES = (tr.MpQueue, tr.SimpleQueue, tr.FasterFifo, tr.Zmq, tr.SharedMemoryByHand, tr.Iceoryx2, tr.SyQueue,
          tr.SyQueueFrames, tr.SyRingFrames, tr.SyRingFramesYield)
WORKERS = (tr.MpQueue, tr.SimpleQueue, tr.FasterFifo, tr.Zmq, tr.SyQueue)
OURS = ("sy.",)
CEILING = "no transport: N processes, own tasks (ceiling)"
NOT_TRANSPORTS = ("ideal", "single-thread", "no transport")  # the ceilings rows are read against


def usable_cpus() -> int:
    return len(os.sched_getaffinity(0))


class PipelineSuite(Suite):
    title = "Multiprocessing pipelines: sympathy vs every anchor (per second; higher is better)"
    primary = "per s"
    higher_is_better = True
    columns = ("per s", "GB/s", "% memcpy", "speed-up", "x ideal", "x ceiling")
    ratio_label = "x mp.Queue"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--only", nargs="+", choices=SHAPES, default=list(SHAPES), metavar="SHAPE",
                            help=f"shapes to run, of {', '.join(SHAPES)} (default: all)")
        parser.add_argument("--quick", action="store_true",
                            help="small counts, one run each: a smoke run, not figures to quote "
                                 f"({', '.join(f'{k} {v}' for k, v in QUICK.items())})")
        parser.add_argument("--items", type=positive_int, default=None,
                            help=f"objects per run (default {FULL['items']:,})")
        parser.add_argument("--frames", type=positive_int, default=None,
                            help=f"frames per run (default {FULL['frames']})")
        parser.add_argument("--frame", type=frame_size, default=(1920, 1080), metavar="WIDTHxHEIGHT",
                            help="frame size, RGB uint8 (default 1920x1080: 6.2 MB)")
        parser.add_argument("--tasks", type=positive_int, default=None,
                            help=f"tasks per worker-pool run (default {FULL['tasks']:,})")
        parser.add_argument("--task-us", type=positive_int, default=50, help="busy work per task, microseconds")
        parser.add_argument("--workers", type=positive_int, nargs="+", default=[1, 2, 4], metavar="N",
                            help="worker counts (default 1 2 4; the 16-core host: 1 2 4 8 14)")
        parser.add_argument("--repeat", type=positive_int, default=None,
                            help=f"runs per figure, the median is shown (default {FULL['repeat']})")

    def check_arguments(self, args: argparse.Namespace) -> None:
        sizes = QUICK if args.quick else FULL
        for key, value in sizes.items():
            if getattr(args, key) is None:
                setattr(args, key, value)
        most = max(64, 4 * usable_cpus())
        if max(args.workers) > most:
            raise ValueError(f"--workers: at most {most} worker processes here ({usable_cpus()} CPUs); "
                             f"got {max(args.workers)}")
        width, height = args.frame
        need = 10 * width * height * 3  # the largest pool of frames in flight (sy.Queue's ring: 8)
        stat = os.statvfs("/dev/shm") if os.path.isdir("/dev/shm") else None
        if "frames" in args.only and stat is not None and need > stat.f_bavail * stat.f_frsize:
            raise ValueError(f"--frame {width}x{height}: the frame rows need about {need / 1e6:.0f} MB of "
                             f"/dev/shm, {stat.f_bavail * stat.f_frsize / 1e6:.0f} MB free")

    def plot(self, results: Results, outdir):
        """One panel per group, horizontal bars (a log axis where they span more than 50x: frames):
        sympathy's rows blue, anchors grey (multiprocessing.Queue hatched), the ceilings (memcpy,
        ideal) white with a black edge."""
        from .. import plots

        plt = plots._pyplot()
        groups = [g for g in dict.fromkeys(r.group for r in results.rows)
                  if any(self.primary in r.metrics for r in results.rows if r.group == g)]
        cols = min(2, len(groups)) or 1
        rows = -(-len(groups) // cols) or 1
        fig, axes = plt.subplots(rows, cols, figsize=(7.0 * cols, 0.32 * 10 * rows + 1.0), squeeze=False,
                                 layout="constrained")
        for ax, group in zip(axes.flat, groups):
            members = [r for r in results.rows if r.group == group and self.primary in r.metrics]
            ceiling = [r.variant.startswith(NOT_TRANSPORTS) for r in members]
            ours = [r.variant.startswith(OURS) for r in members]
            bars = ax.barh([r.variant for r in members], [r.metrics[self.primary] for r in members],
                           color=["white" if c else "#3b75af" if o else "#bbbbbb" for c, o in zip(ceiling, ours)],
                           edgecolor=["black" if c else "none" for c in ceiling])
            for bar, r in zip(bars, members):
                bar.set_hatch("//" if r.anchor else "")
            values = [r.metrics[self.primary] for r in members]
            log = max(values) > 50 * min(values)  # frames span four decades; the other shapes one
            if log:
                ax.set_xscale("log")
                ax.set_xlim(min(values) / 3, max(values) * 1.5)  # every bar starts well left of the smallest
            ax.set_title(group, fontsize=8)
            ax.set_xlabel(group.rsplit(", ", 1)[-1] + (", log scale" if log else ""), fontsize=8)
            ax.tick_params(labelsize=7)
            ax.invert_yaxis()
            ax.grid(axis="x", alpha=0.3)
        for ax in list(axes.flat)[len(groups):]:
            ax.axis("off")
        fig.suptitle(self.title, fontsize=10)
        return [plots._save(fig, outdir / f"{self.name}.png")]

    def run(self, args: argparse.Namespace, results: Results) -> None:
        if "objects" in args.only:
            self.run_objects(args, results)
        if "frames" in args.only:
            self.run_frames(args, results)
        if "workers" in args.only:
            self.run_workers(args, results)
        self.note_ratios(results)

    @staticmethod
    def measure(results: Results, group: str, transport: type, fn, repeat: int, params: dict) -> float | None:
        """The median of `repeat` runs of fn(), or a row saying why there is none."""
        label = transport.label + (" (zero-copy)" if transport.zero_copy else "")
        anchor = transport is tr.MpQueue
        try:
            rate = statistics.median(fn() for _ in range(repeat))
        except ImportError:
            results.add(group, f"{label}: {tr.INSTALL_HINT}", anchor=anchor, params=params)
            return None
        except Exception as exc:  # an anchor that cannot run here says why, in its row and a note
            results.add(group, f"{label}: failed ({type(exc).__name__})", anchor=anchor, params=params)
            results.note(f"{transport.label} ({group.split(':')[0]}): {type(exc).__name__}: {exc}")
            return None
        results.add(group, label, anchor=anchor, params=params, **{"per s": rate})
        return rate

    def run_objects(self, args, results: Results) -> None:
        group = "objects: dict of 5 fields, 1 -> 1 process, items/s"
        for transport in results.progress(OBJECTS, "objects"):
            self.measure(results, group, transport, lambda: objects_rate(transport, args.items), args.repeat,
                         {"shape": "objects"})

    def run_frames(self, args, results: Results) -> None:
        width, height = args.frame
        src = np.random.default_rng(7).integers(0, 255, (height, width, 3), dtype=np.uint8)  # never zeros
        group = f"frames: {width}x{height} RGB uint8 ({src.nbytes / 1e6:.1f} MB), 1 -> 1 process, frames/s"
        params = {"shape": "frames", "bytes": src.nbytes}
        copy = statistics.median(memcpy_bandwidth(src.nbytes) for _ in range(3))
        results.add(group, "single-thread memcpy into a 128 MB pool (no transport)", params=params,
                    **{"per s": copy * 1e9 / src.nbytes, "GB/s": copy, "% memcpy": 100.0})
        for transport in results.progress(FRAMES, "frames"):
            rate = self.measure(results, group, transport, lambda: frames_rate(transport, args.frames, src),
                                args.repeat, params)
            if rate is not None:
                row = results.rows[-1]
                row.metrics["GB/s"] = rate * src.nbytes / 1e9
                row.metrics["% memcpy"] = 100 * row.metrics["GB/s"] / copy
        results.note("frames: each frame is made by copying a source frame into where the transport wants it "
                     "(a fresh array for copying transports, the loaned slot for zero-copy ones) and stamped; "
                     "the consumer checks the stamp at both ends. memcpy is that copy alone, into frame-sized "
                     "slots of a buffer larger than the last-level cache, with no handover.")

    def run_workers(self, args, results: Results) -> None:
        cpus = usable_cpus()
        loops = tr.busy_loop_count(args.task_us * 1e-6)
        serial = statistics.median(serial_rate(max(args.tasks // 4, 50), loops) for _ in range(3))
        for n in results.progress(args.workers, "workers"):
            group = f"workers: 1 producer -> {n} worker{'s' * (n > 1)}, {args.task_us} us tasks, tasks/s"
            params = {"shape": "workers", "workers": n}
            ideal = min(n, cpus)
            results.add(group, f"ideal: min(N, {cpus} CPUs) x serial rate", params=params,
                        **{"per s": ideal * serial, "speed-up": float(ideal), "x ideal": 1.0})
            # The ceiling is run between the transports, once before each and once after the last, and
            # its median taken: this host's per-task speed drifts with what else runs on it (the same
            # task took 55-95 us on the 16-core host from one run to the next), so a ceiling taken
            # once, before the rest, would be read against runs made under other conditions.
            ceilings = []
            for transport in WORKERS:
                ceilings.append(ceiling_rate(n, args.tasks, loops))
                self.measure(results, group, transport, lambda: workers_rate(transport, n, args.tasks, loops),
                             args.repeat, params)
                if transport is tr.MpQueue:
                    rate = statistics.median(pool_rate(n, args.tasks, loops) for _ in range(args.repeat))
                    results.add(group, "multiprocessing.Pool imap_unordered", params=params, **{"per s": rate})
            ceilings.append(ceiling_rate(n, args.tasks, loops))
            ceiling = statistics.median(ceilings)
            results.add(group, CEILING, params=params, **{"per s": ceiling, "speed-up": ceiling / serial,
                                                          "x ideal": ceiling / (ideal * serial), "x ceiling": 1.0})
            for row in results.rows:
                if row.group == group and "per s" in row.metrics and "speed-up" not in row.metrics:
                    row.metrics["speed-up"] = row.metrics["per s"] / serial
                    row.metrics["x ideal"] = row.metrics["per s"] / (ideal * serial)
                    row.metrics["x ceiling"] = row.metrics["per s"] / ceiling
        results.note(f"workers: ideal = min(N, C) x the serial rate of the same tasks in one process "
                     f"({serial:,.0f} tasks/s here), C = {cpus} usable CPUs; the producer's own work counts "
                     f"against the transport. The ceiling row is N processes running their own share of "
                     f"the tasks with no transport (same body, counters and clock), run between the transports "
                     f"(median of {len(WORKERS) + 1}): what the host gives N busy processes; x ceiling is a "
                     f"row over it. iceoryx2 has no row: publish-subscribe gives every sample to "
                     f"every subscriber, it does not share work.")

    @staticmethod
    def note_ratios(results: Results) -> None:
        """Each of sympathy's rows against every anchor of its group that has a figure."""
        for group in dict.fromkeys(r.group for r in results.rows):
            rows = [r for r in results.rows if r.group == group and "per s" in r.metrics]
            anchors = [r for r in rows if not r.variant.startswith(OURS) and not r.variant.startswith(
                NOT_TRANSPORTS)]
            for ours in (r for r in rows if r.variant.startswith(OURS)):
                ratios = ", ".join(f"{ours.metrics['per s'] / a.metrics['per s']:.2f}x {a.variant}" for a in anchors)
                results.note(f"{group.split(',')[0]}: {ours.variant} = {ratios}")


SUITE = PipelineSuite()
