"""Timing that a number can be trusted with: warm-up, repeats, the median, the spread.

Wall-clock here, never in tests. A sample is one call of `fn` (or `inner` calls of it, for calls
too short to time alone); setup runs outside the timed region so every sample sees fresh inputs.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Timing:
    samples: tuple[float, ...]   # seconds per call, one per repeat

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def best(self) -> float:
        return min(self.samples)

    @property
    def spread(self) -> float:
        """(max - min) / median: how much the machine disturbed this measurement."""
        return (max(self.samples) - min(self.samples)) / self.median if self.median else 0.0


def time_call(fn: Callable[[], object], *, repeat: int = 5, warmup: int = 1, min_seconds: float = 0.05,
              setup: Callable[[], object] | None = None, max_inner: int = 1 << 20) -> Timing:
    """Median-able samples of fn(): `warmup` untimed calls, then `repeat` timed samples.

    Calls shorter than `min_seconds` are batched (`inner` calls per sample) so the clock's
    resolution and the loop overhead vanish; the per-call time is reported.
    """
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1; got {repeat}")
    for _ in range(warmup):
        if setup:
            setup()
        fn()
    inner = 1
    if setup is None:
        while inner < max_inner:
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            if time.perf_counter() - t0 >= min_seconds:
                break
            inner *= 2
    samples = []
    for _ in range(repeat):
        if setup:
            setup()
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - t0) / inner)
    return Timing(tuple(samples))
