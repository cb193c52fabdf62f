"""Memory bandwidth (STREAM): once the arrays outgrow the last-level cache, every byte comes from DRAM.

STREAM (McCalpin): copy, scale, add, triad over arrays several times the last-level cache. Bytes are
counted the STREAM way (reads + writes of the named arrays; the write-allocate read of the
destination is not counted). Knob: threads. NumPy runs the same kernels on the same arrays.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Literal, Sequence, get_args

import numpy as np

from . import _common
from ._common import (MAX_THREADS, GiB, KiB, MiB, _c_cpus, _check, _cpus_for, _int_in, human_size,
                      sysfs_cache_sizes)

StreamKernel = Literal["copy", "scale", "add", "triad"]
STREAM_KERNELS: tuple[StreamKernel, ...] = get_args(StreamKernel)
STREAM_BYTES_PER_ELEMENT = {"copy": 16, "scale": 16, "add": 24, "triad": 24}
STREAM_SCALAR = 3.0
STREAM_MAX_REPEAT = 100
STREAM_MAX_PASSES = 200   # the values grow ~15x per pass: 15^200 stays far below DBL_MAX


@dataclass
class StreamResult:
    implementation: str                  # "C" or "NumPy"
    threads: int
    array_bytes: int                     # per array; three arrays
    best_gbs: dict[str, float]           # STREAM reports the best rate ...
    median_gbs: dict[str, float]         # ... and we keep the median beside it
    notes: list[str] = field(default_factory=list)


def default_array_bytes(multiple_of_llc: int = 4, memory_fraction: float = 0.5) -> tuple[int, list[str]]:
    """STREAM's rule (each array ≥ 4× the last-level cache), capped so three arrays use at most
    `memory_fraction` of the available memory; the notes say when the cap bit."""
    import psutil

    caches = sysfs_cache_sizes()
    llc = max(caches.values(), default=32 * MiB)
    wanted = multiple_of_llc * llc
    limit = int(psutil.virtual_memory().available * memory_fraction / 3)
    notes = []
    if wanted > limit:
        notes.append(f"arrays capped at {limit / MiB:.0f} MiB each (available memory); STREAM wants "
                     f"{wanted / MiB:.0f} MiB (4× the {llc / MiB:.0f} MiB LLC)")
    return min(wanted, limit) // 8 * 8, notes


def _stream_arrays(array_bytes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = array_bytes // 8
    return np.full(n, 1.0), np.full(n, 2.0), np.zeros(n)


def _expected_stream(passes: int, q: float = STREAM_SCALAR) -> tuple[float, float, float]:
    """What every element of a, b, c holds after `passes` rounds of copy, scale, add, triad."""
    a, b, c = 1.0, 2.0, 0.0
    for _ in range(passes):
        c = a
        b = q * c
        c = a + b
        a = b + q * c
    return a, b, c


def check_stream(a: np.ndarray, b: np.ndarray, c: np.ndarray, passes: int) -> None:
    """STREAM's validation: the mean relative error of each array is below 1e-13 (double)."""
    for name, array, expected in zip("abc", (a, b, c), _expected_stream(passes)):
        error = float(np.mean(np.abs(array - expected))) / abs(expected)
        if not error <= 1e-13:
            raise RuntimeError(f"STREAM validation failed: array {name} is off by {error:.3g} (relative)")


def _stream_rates(times: dict[str, list[float]], n: int) -> tuple[dict[str, float], dict[str, float]]:
    best = {k: STREAM_BYTES_PER_ELEMENT[k] * n / min(t) / 1e9 for k, t in times.items()}
    median = {k: STREAM_BYTES_PER_ELEMENT[k] * n / float(np.median(t)) / 1e9 for k, t in times.items()}
    return best, median


def stream_race(array_bytes: int | None = None, *, threads: Sequence[int | None] = (1, None),
                numpy: bool = True, repeat: int = 5, pin: bool | Sequence[int] = True) -> list[StreamResult]:
    """STREAM in C on each thread count in `threads` (None: all usable CPUs) and, with numpy=True, the
    same four kernels in NumPy, all on the same three arrays: a warm-up round, then `repeat` timed
    rounds, the implementations taking turns within each round (their order rotating), so page
    faults, memory compaction or a neighbour's burst fall on all of them alike. GB/s per kernel; the
    arrays are validated afterwards as STREAM does. array_bytes: per array (default_array_bytes())."""
    notes: list[str] = []
    if array_bytes is None:
        array_bytes, notes = default_array_bytes()
    array_bytes = _int_in("array_bytes", array_bytes, 64 * KiB, 64 * GiB)
    repeat = _int_in("repeat", repeat, 1, STREAM_MAX_REPEAT)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    counts = [usable if t is None else _int_in("threads", t, 1, MAX_THREADS) for t in threads]
    if not counts and not numpy:
        raise ValueError("stream_race needs at least one implementation: threads or numpy=True")
    passes = (repeat + 1) * (len(counts) + numpy)
    if passes > STREAM_MAX_PASSES:
        raise ValueError(f"repeat must keep rounds x implementations <= {STREAM_MAX_PASSES} (the values grow "
                         f"~15x per pass); got {repeat + 1} x {len(counts) + numpy}")
    llc = max(sysfs_cache_sizes().values(), default=0)
    if 3 * array_bytes < 4 * llc:
        notes.append(f"3 arrays of {human_size(array_bytes)} are < 4× the {human_size(llc)} last-level cache: "
                     "part of this is cache bandwidth, not DRAM")
    a, b, c = _stream_arrays(array_bytes)
    runners = [(f"C{t}", t, _c_stream_runner(a, b, c, t, _cpus_for(t, pin))) for t in counts]
    if numpy:
        runners.append(("NumPy", 1, _numpy_stream_runner(a, b, c)))
    times = {name: {k: [] for k in STREAM_KERNELS} for name, _, _ in runners}
    first_cpu = (_cpus_for(1, pin) or [None])[0]        # NumPy runs where the 1-thread C run does
    with _common._pinned_caller(numpy and first_cpu is not None, first_cpu):
        for round_ in range(repeat + 1):                # round 0 is STREAM's untimed warm-up
            turn = round_ % len(runners)
            for name, _, run in runners[turn:] + runners[:turn]:
                for index, kernel in enumerate(STREAM_KERNELS):
                    seconds = run(index)
                    if round_:
                        times[name][kernel].append(seconds)
    check_stream(a, b, c, passes)
    results = []
    for name, t, _ in runners:
        best, median = _stream_rates(times[name], a.size)
        results.append(StreamResult("NumPy" if name == "NumPy" else "C", t, a.size * 8, best, median, list(notes)))
    return results


def _c_stream_runner(a, b, c, threads: int, cpus: list[int] | None):
    ffi, lib = _common._native()
    pa, pb, pc = (ffi.from_buffer("double[]", x) for x in (a, b, c))
    c_cpus, elapsed = _c_cpus(cpus), ffi.new("uint64_t *")

    def run(kernel: int) -> float:
        _check(lib.sy_lab_stream(kernel, pa, pb, pc, a.size, STREAM_SCALAR, threads, c_cpus, elapsed),
               f"stream {STREAM_KERNELS[kernel]}")
        return elapsed[0] * 1e-9
    return run


def _numpy_stream_runner(a, b, c):
    """NumPy runs one thread; its triad is two passes (NumPy cannot fuse b + q*c), so its
    STREAM-counted triad rate is lower by design: that is the point of the comparison."""
    q = STREAM_SCALAR
    ops = (lambda: np.copyto(c, a), lambda: np.multiply(c, q, out=b), lambda: np.add(a, b, out=c),
           lambda: (np.multiply(c, q, out=a), np.add(a, b, out=a)))

    def run(kernel: int) -> float:
        t0 = time.perf_counter()
        ops[kernel]()
        return time.perf_counter() - t0
    return run


def bandwidth(array_bytes: int | None = None, *, threads: int | None = 1, repeat: int = 5,
              pin: bool | Sequence[int] = True) -> StreamResult:
    """STREAM in C alone on `threads` threads (None: all usable CPUs); see stream_race."""
    return stream_race(array_bytes, threads=(threads,), numpy=False, repeat=repeat, pin=pin)[0]


def bandwidth_numpy(array_bytes: int | None = None, *, repeat: int = 5) -> StreamResult:
    """The four STREAM kernels in NumPy alone (one thread); see stream_race."""
    return stream_race(array_bytes, threads=(), numpy=True, repeat=repeat)[0]
