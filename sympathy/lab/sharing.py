"""False sharing: coherence moves whole lines, so two cores writing neighbouring words bounce one line between them.

Knob: `spacing` (8 B: same line; 64 B: adjacent lines, which Intel's spatial prefetcher still pairs;
128 B: independent). The counter that proves it: ns per increment against the 128 B spacing, with
`concurrency` saying whether the threads really ran side by side.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence, get_args

from . import _common
from ._common import DESTRUCTIVE, LINE, MAX_THREADS, MiB, _c_cpus, _check, _cpus_for, _int_in

Increment = Literal["store", "rmw"]
INCREMENTS: tuple[Increment, ...] = get_args(Increment)


@dataclass(frozen=True)
class FalseSharingResult:
    threads: int
    spacing: int              # bytes between neighbouring counters
    increment: str            # "store" (load + store) or "rmw" (fetch_add)
    pinned: bool
    iterations: int           # increments per thread
    counts: tuple[int, ...]   # each counter's final value (== iterations, exactly)
    seconds: float            # common start to last thread's end
    on_cpu: tuple[float, ...] = ()     # each thread's CPU time in its loop, seconds
    finished: tuple[float, ...] = ()   # each thread's wall time, common start to its own end

    @property
    def ns_per_op(self) -> float:
        """Nanoseconds per increment, per thread (threads run in parallel)."""
        return self.seconds * 1e9 / self.iterations

    @property
    def concurrency(self) -> float:
        """min over threads of (CPU time / its own wall time): ~1.0 when every thread was on a CPU
        for all of its run (a sample that measured sharing); well below 1 when one was preempted or
        they took turns on one CPU (a sample that measured the scheduler). A thread that finishes
        early because it won the line more often does not lower it."""
        pairs = [(c, w) for c, w in zip(self.on_cpu, self.finished) if w > 0]
        return min(min(c / w, 1.0) for c, w in pairs) if pairs else 0.0


def false_sharing(threads: int = 2, padded: bool = False, *, spacing: int | None = None,
                  increment: Increment = "rmw", iterations: int = 20_000_000,
                  pin: bool | Sequence[int] = True) -> FalseSharingResult:
    """Each of `threads` C threads increments its own counter `iterations` times.

    spacing: bytes between counters (a multiple of 8, 8..1 MiB); default 8 (all in one line) or,
    with padded=True, 128 (one line pair each). increment: "rmw" is atomic fetch_add (relaxed), a
    locked read-modify-write that needs the line in its own cache for every increment: the classic
    false-sharing slowdown. "store" is a relaxed load and store (exact too: one writer per counter),
    which the store buffer mostly hides: stores queue while the line is away and drain in a burst.
    pin: True spreads threads over the usable CPUs, False leaves placement to the scheduler, a list
    names each thread's CPU.
    """
    threads = _int_in("threads", threads, 1, MAX_THREADS)
    iterations = _int_in("iterations", iterations, 1, 10**11)
    if padded and spacing is not None:
        raise ValueError(f"give padded=True or spacing, not both (padded means spacing={DESTRUCTIVE})")
    spacing = _valid_spacing(DESTRUCTIVE if padded else 8 if spacing is None else spacing)
    _valid_increment(increment)
    cpus = _cpus_for(threads, pin)
    ffi, lib = _common._native()
    counts, on_cpu, finished = (ffi.new("uint64_t[]", threads) for _ in range(3))
    elapsed = ffi.new("uint64_t *")
    _check(lib.sy_lab_false_sharing(threads, spacing, INCREMENTS.index(increment), iterations, _c_cpus(cpus),
                                    counts, on_cpu, finished, elapsed),
           f"false_sharing(threads={threads}, spacing={spacing})")
    return FalseSharingResult(threads, spacing, increment, cpus is not None, iterations, tuple(counts),
                              elapsed[0] * 1e-9, tuple(t * 1e-9 for t in on_cpu), tuple(t * 1e-9 for t in finished))


def _valid_spacing(spacing: object) -> int:
    spacing = _int_in("spacing", spacing, 8, MiB)
    if spacing % 8:
        raise ValueError(f"spacing must be a multiple of 8 (one uint64 counter); got {spacing}")
    return spacing


def _valid_increment(increment: object) -> str:
    if increment not in INCREMENTS:
        raise ValueError(f"increment must be one of {INCREMENTS}; got {increment!r}")
    return increment


def false_sharing_sweep(threads: int = 2, spacings: Sequence[int] = (8, LINE, DESTRUCTIVE),
                        pins: Sequence[bool] = (True, False), increments: Sequence[Increment] = INCREMENTS,
                        iterations: int = 20_000_000, repeat: int = 5,
                        min_concurrency: float = 0.9) -> list[tuple[FalseSharingResult, float]]:
    """(best result, slowdown vs the widest spacing with the same increment and pinning) per case.

    The cases take turns (round-robin, not one case's repeats in a row), so a burst of outside load
    slows one sample of every case rather than every sample of one. "Best" is the fastest sample
    whose threads really ran side by side (concurrency >= min_concurrency); a case with no such
    sample keeps its fastest and shows its concurrency, so a reader can discard it. Unpinned cases
    are never filtered: whether the scheduler runs the threads side by side is what they show.
    """
    _int_in("repeat", repeat, 1, 1000)
    if not spacings or not pins or not increments:
        raise ValueError("spacings, pins and increments must each name at least one case")
    if not 0 <= min_concurrency <= 1:
        raise ValueError(f"min_concurrency must be in [0, 1]; got {min_concurrency}")
    _int_in("threads", threads, 1, MAX_THREADS)
    _int_in("iterations", iterations, 1, 10**11)
    spacings = [_valid_spacing(s) for s in spacings]
    increments = [_valid_increment(op) for op in increments]
    cases = [(op, pin, s) for op in increments for pin in pins for s in spacings]
    samples: dict[tuple, list[FalseSharingResult]] = {c: [] for c in cases}
    for _ in range(repeat):
        for op, pin, s in cases:
            samples[op, pin, s].append(false_sharing(threads, spacing=s, increment=op, iterations=iterations, pin=pin))
    best = {}
    for case, runs in samples.items():
        trusted = [r for r in runs if r.concurrency >= min_concurrency or not case[1]]
        best[case] = min(trusted or runs, key=lambda r: r.seconds)
    widest = max(spacings)
    return [(best[c], best[c].ns_per_op / best[c[0], c[1], widest].ns_per_op) for c in cases]
