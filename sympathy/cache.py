"""Measuring cache behaviour: valgrind's cache simulator for one region, hardware counters for real.

`cachegrind` runs a snippet in a child Python under `valgrind --tool=callgrind --cache-sim=yes` with
instrumentation off until the region starts (so the interpreter's start-up costs nothing), and, when
`functions` is given, collects only inside those C functions: the counts are the kernel's alone.
Simulated counts are deterministic, which is why tests assert cache effects with them, never with time.

`counters` reads real hardware events with perf_event_open where the machine exposes a PMU; in most
VMs and containers it does not, and the call says so instead of returning zeros.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from ._errors import NotSupportedError

# Subjects whose modules provide `cachegrind_help`, `cachegrind_arguments(parser)` and
# `cachegrind_cases(args)` for `sympathy cachegrind SUBJECT ...`.
CACHEGRIND_SUBJECTS = {"matmul": "sympathy.matmul", "lab": "sympathy.lab"}


@dataclass(frozen=True)
class CacheGeometry:
    size_bytes: int
    ways: int
    line_bytes: int

    def valgrind_arg(self) -> str:
        return f"{self.size_bytes},{self.ways},{self.line_bytes}"

    def __str__(self) -> str:
        return f"{self.size_bytes // 1024} KiB {self.ways}-way {self.line_bytes} B lines"


@dataclass(frozen=True)
class CacheReport:
    """The article's table for one region: references, misses and miss rates (data side)."""

    i_refs: int
    d_refs: int          # reads + writes
    d1_misses: int       # D1 read + write misses
    ll_misses: int       # last-level data misses (read + write)
    i1_misses: int
    d1: CacheGeometry
    ll: CacheGeometry
    # callgrind's own totals: Ir Dr Dw (references), I1mr D1mr D1mw (L1 misses), ILmr DLmr DLmw (LL)
    events: dict = field(default_factory=dict, compare=False)

    def as_dict(self) -> dict[str, int]:
        """Reads and misses by cache, named for a JSON record (pytest-benchmark's extra_info)."""
        e = self.events
        return {"I1_reads": e.get("Ir", self.i_refs), "I1_misses": self.i1_misses, "LLi_misses": e.get("ILmr", 0),
                "D1_reads": e.get("Dr", 0), "D1_writes": e.get("Dw", 0), "D1_read_misses": e.get("D1mr", 0),
                "D1_write_misses": e.get("D1mw", 0), "D1_misses": self.d1_misses,
                "LL_read_misses": e.get("DLmr", 0), "LL_write_misses": e.get("DLmw", 0), "LL_misses": self.ll_misses}

    @property
    def d1_miss_rate(self) -> float:
        return self.d1_misses / self.d_refs if self.d_refs else 0.0

    @property
    def ll_miss_rate(self) -> float:
        return self.ll_misses / self.d_refs if self.d_refs else 0.0


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def simulated_geometry() -> tuple[CacheGeometry, CacheGeometry]:
    """D1 and LL for the simulator, from sysfs: L1d, and the largest level valgrind can model.

    valgrind needs a power-of-two set count; server L3s (20-way, 260 MiB here) often lack one, so
    the last level falls back to the next level down, and the report says which geometry was used.
    """
    from .topology import topology

    caches = topology(with_gpu=False).caches
    l1 = next((c for c in caches if c.level == 1 and c.kind == "Data"), None)
    d1 = CacheGeometry(l1.size_bytes, l1.ways or 8, l1.line_bytes) if l1 else CacheGeometry(32768, 8, 64)
    ll = CacheGeometry(1 << 21, 16, d1.line_bytes)
    for c in sorted((c for c in caches if c.level >= 2 and c.kind != "Instruction"), key=lambda c: -c.level):
        if c.ways and _power_of_two(c.size_bytes // (c.ways * c.line_bytes)):
            ll = CacheGeometry(c.size_bytes, c.ways, c.line_bytes)
            break
    return d1, ll


# The child under valgrind: the caller's sys.path (the same sympathy, the caller's own modules), then
# the region. Instrumentation starts at sy_cache_region_begin, so imports and setup cost nothing.
_CHILD = """\
import sys
sys.path[:0] = {paths!r}
from sympathy._cache import lib
from sympathy.cache import _child_main
_child_main(lib, {job!r}, {error_path!r})
"""


def _child_main(lib, job: dict, error_path: str) -> None:
    """Runs in the child: the job's setup, then its call between region begin and end. An exception
    is pickled to error_path for the parent to raise (valgrind's summary would bury the traceback)."""
    import pickle
    import traceback

    try:
        if "payload" in job:
            with open(job["payload"], "rb") as f:
                fn, args, kwargs = pickle.load(f)
            lib.sy_cache_region_begin()
            try:
                fn(*args, **kwargs)
            finally:
                lib.sy_cache_region_end()
        else:
            namespace = {"__name__": "__sympathy_cachegrind__"}
            exec(compile(job["setup"], "<setup>", "exec"), namespace)
            call = compile(job["call"], "<call>", "exec")
            lib.sy_cache_region_begin()
            try:
                exec(call, namespace)
            finally:
                lib.sy_cache_region_end()
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the caller, SystemExit too
        text = traceback.format_exc()
        try:
            blob = pickle.dumps((exc, text))
        except Exception:
            blob = pickle.dumps((None, text))
        with open(error_path, "wb") as f:
            f.write(blob)
        sys.exit(1)


class ChildTraceback(Exception):
    """The traceback of an exception raised by the code measured under valgrind (its child process)."""


def cachegrind(call: str, setup: str = "", *, functions: Sequence[str] | None = None,
               d1: CacheGeometry | None = None, ll: CacheGeometry | None = None,
               timeout: float = 900.0) -> CacheReport:
    """Simulated cache counts of `call` (Python source) after `setup`, in a child under valgrind.

    functions: C symbol patterns (callgrind --toggle-collect, `*` allowed, e.g. "sy_matmul*"): only
    costs inside them count. Without it the whole region between begin and end counts, including the
    few thousand instructions of Python glue around the call. An exception raised by setup or call
    is raised here, with the child's traceback as its cause.
    """
    if not isinstance(call, str) or not call.strip():
        raise ValueError("call must be Python source that runs the region to measure, e.g. \"sy.matmul(a, b)\"")
    if not isinstance(setup, str):
        raise TypeError(f"setup must be Python source (a str); got {type(setup).__name__}")
    return _run({"setup": textwrap.dedent(setup), "call": textwrap.dedent(call)}, functions, d1, ll, timeout)


def cachegrind_function(fn: Callable[..., object], args: Sequence = (), kwargs: dict | None = None, *,
                        functions: Sequence[str] | None = None, d1: CacheGeometry | None = None,
                        ll: CacheGeometry | None = None, timeout: float = 900.0) -> CacheReport:
    """Simulated cache counts of fn(*args, **kwargs), run in a child under valgrind.

    fn and its arguments travel by pickle: fn must be importable by name (a module-level function,
    not a lambda or a nested function); arrays are copied into the child before the region starts.
    """
    import pickle

    if not callable(fn):
        raise TypeError(f"fn must be callable; got {type(fn).__name__}")
    try:
        blob = pickle.dumps((fn, tuple(args), dict(kwargs or {})))
    except Exception as exc:
        raise TypeError(f"{getattr(fn, '__qualname__', fn)!r} cannot be sent to the valgrind child: it must "
                        f"be a module-level function and its arguments picklable ({exc})") from None
    with tempfile.NamedTemporaryFile(prefix="sympathy-cg-", suffix=".pickle", delete=False) as f:
        f.write(blob)
    try:
        return _run({"payload": f.name}, functions, d1, ll, timeout)
    finally:
        os.unlink(f.name)


def _run(job: dict, functions, d1, ll, timeout: float) -> CacheReport:
    import pickle

    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise NotSupportedError("sy.cachegrind needs valgrind on PATH (Debian/Ubuntu: apt-get install valgrind)")
    default_d1, default_ll = simulated_geometry()
    d1, ll = d1 or default_d1, ll or default_ll
    from .config import package_parent

    with tempfile.TemporaryDirectory(prefix="sympathy-cg-") as tmp:
        out, error_path = Path(tmp) / "callgrind.out", Path(tmp) / "error.pickle"
        paths = [str(package_parent())] + [p for p in sys.path if p]
        script = _CHILD.format(paths=paths, job=job, error_path=str(error_path))
        cmd = [valgrind, "--tool=callgrind", "--cache-sim=yes", "--instr-atstart=no",
               f"--D1={d1.valgrind_arg()}", f"--LL={ll.valgrind_arg()}",
               f"--callgrind-out-file={out}", "--dump-instr=no", "--compress-strings=no"]
        if functions:
            cmd.append("--collect-atstart=no")
            cmd += [f"--toggle-collect={f}" for f in functions]
        cmd += [sys.executable, "-c", script]
        # One BLAS thread: under valgrind every thread is serialised anyway, and an idle pool only
        # adds start-up time. The kernel's own threads are whatever the call asks for.
        env = os.environ | {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        if error_path.exists() and error_path.stat().st_size:
            exc, text = pickle.loads(error_path.read_bytes())
            cause = ChildTraceback("in the child under valgrind:\n" + text)
            if isinstance(exc, BaseException):
                raise exc from cause
            raise RuntimeError("the code measured under valgrind failed") from cause
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
            raise RuntimeError(f"valgrind run failed (exit {proc.returncode}):\n{tail}")
        totals = parse_callgrind(out.read_text())
    if functions and totals.get("Ir", 0) == 0:
        raise RuntimeError(f"no cost collected inside {list(functions)}: does the call reach those C functions?")
    return CacheReport(
        i_refs=totals.get("Ir", 0),
        d_refs=totals.get("Dr", 0) + totals.get("Dw", 0),
        d1_misses=totals.get("D1mr", 0) + totals.get("D1mw", 0),
        ll_misses=totals.get("DLmr", 0) + totals.get("DLmw", 0),
        i1_misses=totals.get("I1mr", 0),
        d1=d1, ll=ll, events=totals,
    )


def parse_callgrind(text: str) -> dict[str, int]:
    """Event totals of a callgrind output file (the `events:` names against the `totals:` line)."""
    events: list[str] = []
    totals: list[int] = []
    for line in text.splitlines():
        if line.startswith("events:"):
            events = line.split(":", 1)[1].split()
        elif line.startswith(("totals:", "summary:")):
            totals = [int(x) for x in line.split(":", 1)[1].split()]
    if not events:
        raise RuntimeError("callgrind output has no events: line (was --cache-sim=yes passed?)")
    totals += [0] * (len(events) - len(totals))
    return dict(zip(events, totals))


def report_table(reports: Sequence[tuple[str, CacheReport]], title: str = "Simulated caches"):
    """A rich table in cachegrind's own vocabulary, one row per labelled report."""
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for col in ("kernel", "I refs", "D refs", "D1 misses", "D1 miss rate", "LLd misses", "LLd miss rate"):
        t.add_column(col, justify="right" if col != "kernel" else "left")
    for label, r in reports:
        t.add_row(label, f"{r.i_refs:,}", f"{r.d_refs:,}", f"{r.d1_misses:,}", f"{100 * r.d1_miss_rate:.2f}%",
                  f"{r.ll_misses:,}", f"{100 * r.ll_miss_rate:.2f}%")
    if reports:
        r = reports[0][1]
        t.caption = f"D1: {r.d1}; LL: {r.ll} (valgrind callgrind --cache-sim=yes, kernel region only)"
    return t


# ---- hardware counters ---------------------------------------------------------------------------
PERF_TYPE_HARDWARE = 0
PERF_TYPE_HW_CACHE = 3
_L1D, _LL = 0, 2
_OP_READ, _RESULT_MISS = 0, 1

# Event name → (perf type, config): the generic events every PMU driver maps to its own.
HARDWARE_EVENTS = {
    "cycles": (PERF_TYPE_HARDWARE, 0),
    "instructions": (PERF_TYPE_HARDWARE, 1),
    "cache-references": (PERF_TYPE_HARDWARE, 2),
    "cache-misses": (PERF_TYPE_HARDWARE, 3),
    "L1-dcache-load-misses": (PERF_TYPE_HW_CACHE, _L1D | (_OP_READ << 8) | (_RESULT_MISS << 16)),
    "LLC-load-misses": (PERF_TYPE_HW_CACHE, _LL | (_OP_READ << 8) | (_RESULT_MISS << 16)),
}
DEFAULT_EVENTS = ("cycles", "instructions", "L1-dcache-load-misses", "LLC-load-misses")


def counters(fn: Callable[[], object], events: Sequence[str] = DEFAULT_EVENTS) -> dict[str, float]:
    """Count hardware events while fn() runs on this thread (user space only).

    Raises NotSupportedError, saying why, where the kernel or the (virtual) machine has no PMU or
    forbids access. Counts are scaled when the kernel multiplexed the group.
    """
    from ._cache import ffi, lib

    unknown = [e for e in events if e not in HARDWARE_EVENTS]
    if unknown or not events:
        raise ValueError(f"events must be a non-empty subset of {sorted(HARDWARE_EVENTS)}; got {list(events)}")
    fds: list[int] = []
    try:
        for name in events:
            kind, config = HARDWARE_EVENTS[name]
            fd = lib.sy_perf_open(kind, config, fds[0] if fds else -1)
            if fd < 0:
                raise NotSupportedError(_perf_refusal(name, -fd))
            fds.append(fd)
        _perf_check(lib.sy_perf_enable(fds[0]), "enable")
        try:
            fn()
        finally:
            _perf_check(lib.sy_perf_disable(fds[0]), "disable")
        values = ffi.new("uint64_t[]", len(fds))
        enabled, running = ffi.new("uint64_t *"), ffi.new("uint64_t *")
        _perf_check(lib.sy_perf_read_group(fds[0], len(fds), values, enabled, running), "read")
        scale = enabled[0] / running[0] if running[0] else 0.0
        return {name: values[i] * scale for i, name in enumerate(events)}
    finally:
        for fd in fds:
            lib.sy_perf_close(fd)


def _perf_check(status: int, what: str) -> None:
    if status < 0:
        raise OSError(-status, f"perf_event {what}: {os.strerror(-status)}")


def _perf_refusal(event: str, errno_: int) -> str:
    paranoid = Path("/proc/sys/kernel/perf_event_paranoid")
    level = paranoid.read_text().strip() if paranoid.exists() else "?"
    why = {
        2: "the kernel has no PMU driver for it (typical in a VM without a virtual PMU)",
        95: "the machine's PMU does not support it (typical in a VM or container)",
        19: "no PMU device (typical in a VM or container)",
        13: f"access denied (kernel.perf_event_paranoid = {level}; lower it or run with CAP_PERFMON)",
        1: f"not permitted (kernel.perf_event_paranoid = {level}; lower it or run with CAP_PERFMON)",
        38: "this kernel was built without perf_event_open",
    }.get(errno_, os.strerror(errno_))
    return f"hardware counter {event!r} unavailable: {why} [errno {errno_}]"
