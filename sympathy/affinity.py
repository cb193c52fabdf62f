"""Core pinning for the calling thread.

`os.sched_setaffinity(0, cpus)` acts on the calling *thread* on Linux (pid 0 is the caller's TID),
so each Python thread pins itself; C threads are pinned in C (sy_pin_thread in platform.h).
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterable, Iterator


def _usable() -> set[int]:
    return set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))


def _as_set(cpus: int | Iterable[int]) -> set[int]:
    wanted = {cpus} if isinstance(cpus, int) else set(cpus)
    if not wanted:
        raise ValueError("cpus must name at least one CPU")
    for cpu in wanted:
        if not isinstance(cpu, int) or cpu < 0 or cpu >= (os.cpu_count() or 1):
            raise ValueError(f"cpu {cpu!r} out of range: this machine has CPUs 0..{(os.cpu_count() or 1) - 1}")
    return wanted


def pin(cpus: int | Iterable[int]) -> set[int]:
    """Pin the calling thread to cpus; returns the affinity it had before."""
    if not hasattr(os, "sched_setaffinity"):
        from ._errors import NotSupportedError

        raise NotSupportedError("thread pinning needs os.sched_setaffinity (Linux)")
    wanted = _as_set(cpus)
    before = set(os.sched_getaffinity(0))
    os.sched_setaffinity(0, wanted)
    return before


@contextlib.contextmanager
def pinned(cpus: int | Iterable[int]) -> Iterator[set[int]]:
    """`with sy.pinned(1): ...` runs the block on those CPUs and restores the old affinity after."""
    before = pin(cpus)
    try:
        yield set(os.sched_getaffinity(0))
    finally:
        os.sched_setaffinity(0, before)
