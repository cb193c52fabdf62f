"""What every lab effect shares: the cache-line sizes, the compiled kernels, argument checks, pinning.

Each effect's module calls `_common._native()` and `_common._pinned_caller()` through this module, so
a test that replaces one of them here (monkeypatch) replaces it for every effect.
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator, Sequence

import numpy as np

from .._errors import SY_EOS, check

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
LINE = 64                 # SY_CACHE_LINE in c_src/platform.h
DESTRUCTIVE = 128         # SY_DESTRUCTIVE_SIZE: the adjacent-line prefetcher pairs lines
MAX_THREADS = 256         # SY_LAB_MAX_THREADS


def _native():
    """The compiled kernels (imported lazily, so `import sympathy` works before they are built)."""
    try:
        from .. import _lab
    except ImportError as exc:
        raise ImportError("sympathy._lab is not built: run `pip install .` or "
                          "`python sympathy/_build/lab_build.py` in the checkout") from exc
    return _lab.ffi, _lab.lib


def _check(status: int, what: str) -> None:
    ffi, _ = _native()
    check(status, what, os_errno=ffi.errno if status == SY_EOS else None)


def _int_in(name: str, value: object, lo: int, hi: int) -> int:
    """value as an int in [lo, hi], or a TypeError/ValueError naming the argument and the bound."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int; got {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}]; got {value}")
    return int(value)


def _cpus_for(threads: int, pin: bool | Sequence[int]) -> list[int] | None:
    """CPU of each thread: the usable CPUs round-robin (pin=True), the given list, or None (unpinned)."""
    usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    if pin is False or pin is None:
        return None
    if pin is True:
        return [usable[i % len(usable)] for i in range(threads)]
    cpus = [_int_in("pin[i]", c, 0, (os.cpu_count() or 1) - 1) for c in pin]
    if len(cpus) != threads:
        raise ValueError(f"pin must list one CPU per thread ({threads}); got {len(cpus)}")
    outside = sorted(set(cpus) - set(usable))
    if outside:
        raise ValueError(f"pin names CPUs {outside} this process may not run on (usable: {usable})")
    return cpus


@contextlib.contextmanager
def _pinned_caller(pin: bool, cpu: int | None = None) -> Iterator[None]:
    """Keep the calling thread on one CPU while it measures: a migration mid-walk would land on a
    core with cold caches and show up as a spike. Default: the last usable CPU (CPU 0 usually
    takes more of the kernel's housekeeping)."""
    if not pin or not hasattr(os, "sched_setaffinity"):
        yield
        return
    from ..affinity import pinned

    with pinned(sorted(os.sched_getaffinity(0))[-1] if cpu is None else cpu):
        yield


def _c_cpus(cpus: list[int] | None):
    ffi, _ = _native()
    return ffi.NULL if cpus is None else ffi.new("int[]", cpus)


def sysfs_cache_sizes() -> dict[str, int]:
    """Data-cache sizes by level from sympathy.topology (L1d, L2, L3 ...)."""
    from ..topology import topology

    return {f"L{c.level}": c.size_bytes for c in topology(with_gpu=False).caches if c.kind in ("Data", "Unified")}


# ---- sizes on the command line ------------------------------------------------------------------
_UNITS = {"": 1, "B": 1, "K": KiB, "KB": KiB, "KIB": KiB, "M": MiB, "MB": MiB, "MIB": MiB,
          "G": GiB, "GB": GiB, "GIB": GiB}


def parse_size(text: str) -> int:
    """"256MiB", "4k", "1.5GiB", "65536" → bytes (binary units: K = 1024)."""
    import re

    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(text))
    if not match or match.group(2).upper() not in _UNITS:
        raise ValueError(f"size must look like 4KiB, 256MiB or 1GiB; got {text!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def human_size(nbytes: float) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if nbytes >= scale:
            value = nbytes / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{nbytes:.0f} B"
