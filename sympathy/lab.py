"""The cache-line lab: each hardware effect as a small C kernel you can run and measure.

    import sympathy as sy
    sy.lab.false_sharing(threads=2, padded=False)   # counters in one line vs one per line pair
    sy.lab.counter(kind="atomic_seq_cst")           # what each kind of "volatile" costs
    sy.lab.visibility(reader="plain")               # the hoisted load that never sees the store
    sy.lab.latency_curve()                          # ns per dependent load vs working-set size
    sy.lab.bandwidth()                              # STREAM copy/scale/add/triad, GB/s
    sy.lab.strides()                                # every element vs every 16th

Kernels live in c_src/lab.c and time themselves (no Python inside a measurement). Arguments are
checked here, before any C runs; messages name the argument and the bound. Each section below is
one effect: its mechanism, its knob, and the function that measures it (docs/lab.md has the figures).
"""
from __future__ import annotations

import contextlib
import math
import os
import select
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Iterator, Literal, Sequence, get_args

import numpy as np

from ._errors import SY_EOS, SY_ETIMEDOUT, NotSupportedError, check

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
LINE = 64                 # SY_CACHE_LINE in c_src/platform.h
DESTRUCTIVE = 128         # SY_DESTRUCTIVE_SIZE: the adjacent-line prefetcher pairs lines
MAX_THREADS = 256         # SY_LAB_MAX_THREADS


def _native():
    """The compiled kernels (imported lazily, so `import sympathy` works before they are built)."""
    try:
        from . import _lab
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
    from .affinity import pinned

    with pinned(sorted(os.sched_getaffinity(0))[-1] if cpu is None else cpu):
        yield


def _c_cpus(cpus: list[int] | None):
    ffi, _ = _native()
    return ffi.NULL if cpus is None else ffi.new("int[]", cpus)


# =================================================================================================
# False sharing — the coherence protocol moves whole lines, so two threads writing neighbouring
# words bounce one line between their cores. Knob: `spacing` (8 B: same line; 64 B: adjacent lines,
# which Intel's spatial prefetcher still pairs; 128 B: independent).
# =================================================================================================
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
    ffi, lib = _native()
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


# =================================================================================================
# Memory barriers ("volatile") — the article's counter loop. A register add is one cycle; volatile
# is a load and a store through memory; a lock-prefixed RMW or a StoreLoad fence drains the store
# buffer (~20 cycles); a store-release is a plain store on x86 (TSO). Knob: `kind`.
# =================================================================================================
CounterKind = Literal["register", "volatile", "atomic_relaxed", "atomic_seq_cst", "store_release", "store_seq_cst"]
COUNTER_KINDS: tuple[CounterKind, ...] = get_args(CounterKind)
_COUNTER_ALIASES = {"atomic": "atomic_seq_cst"}   # DESIGN.md's short name: C11's default order


@dataclass(frozen=True)
class CounterResult:
    kind: str
    iterations: int
    final_value: int          # == iterations, exactly
    seconds: float

    @property
    def ns_per_increment(self) -> float:
        return self.seconds * 1e9 / self.iterations


def counter(kind: CounterKind = "register", iterations: int = 50_000_000, *, pin: bool = True) -> CounterResult:
    """Increment one counter `iterations` times the way `kind` says (see COUNTER_KINDS), on the
    calling thread (pinned to one CPU for the call unless pin=False)."""
    name = _COUNTER_ALIASES.get(kind, kind)
    if name not in COUNTER_KINDS:
        raise ValueError(f"kind must be one of {COUNTER_KINDS} (or 'atomic'); got {kind!r}")
    iterations = _int_in("iterations", iterations, 1, 10**11)
    ffi, lib = _native()
    final, elapsed = ffi.new("uint64_t *"), ffi.new("uint64_t *")
    with _pinned_caller(pin):
        status = lib.sy_lab_counter(COUNTER_KINDS.index(name), iterations, final, elapsed)
    _check(status, f"counter({name!r})")
    return CounterResult(name, iterations, final[0], elapsed[0] * 1e-9)


# ---- visibility: the hoisted load ---------------------------------------------------------------
Reader = Literal["plain", "acquire"]
READERS: tuple[Reader, ...] = get_args(Reader)


@dataclass(frozen=True)
class VisibilityResult:
    reader: str
    saw_store: bool
    timed_out: bool                   # the child was still spinning at the deadline and was killed
    store_to_seen_ns: int | None      # writer's store to reader's exit (None when it never exited)
    timeout: float

    def describe(self) -> str:
        if self.timed_out:
            return f"{self.reader}: still spinning {self.timeout:g} s after the store — killed"
        if not self.saw_store:
            return f"{self.reader}: left the loop {-self.store_to_seen_ns} ns before the store (loop deleted)"
        return f"{self.reader}: saw the store after {self.store_to_seen_ns / 1e3:.1f} µs"


_VISIBILITY_CHILD = """\
import importlib.util, sys
spec = importlib.util.spec_from_file_location("sympathy._lab", sys.argv[1])
lab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lab)
out = lab.ffi.new("int64_t *")
print("spinning", flush=True)
status = lab.lib.sy_lab_visibility(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), out)
print(status, out[0], flush=True)
"""


def visibility(reader: Reader = "acquire", *, timeout: float = 1.0, delay: float = 0.05) -> VisibilityResult:
    """Does a reader spinning on a flag see another thread's store to it?

    A writer thread sleeps `delay` seconds and sets the flag; the reader spins. The "plain" reader
    loads a plain int, so the compiler may load it once and spin forever on the register (C calls
    that a data race: undefined behaviour). It therefore runs in a child process that is killed
    `timeout` seconds after the store. The "acquire" reader uses an atomic acquire load and sees it.
    """
    if reader not in READERS:
        raise ValueError(f"reader must be one of {READERS}; got {reader!r}")
    if not 0 < timeout <= 60:
        raise ValueError(f"timeout must be in (0, 60] seconds; got {timeout}")
    if not 0 <= delay <= 10:
        raise ValueError(f"delay must be in [0, 10] seconds; got {delay}")
    _native()                 # the clear "not built" error, before a child is started
    from . import _lab

    args = [sys.executable, "-c", _VISIBILITY_CHILD, _lab.__file__, str(READERS.index(reader)),
            str(int(delay * 1e9)), str(int(timeout * 1e9))]
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
        try:
            _read_line(child, deadline=time.monotonic() + 30, expect="spinning")
            child.wait(timeout=delay + timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            return VisibilityResult(reader, saw_store=False, timed_out=True, store_to_seen_ns=None, timeout=timeout)
        status_text, seen_text = (child.stdout.read().split() + ["", ""])[:2]
        if child.returncode != 0 or not status_text:
            raise RuntimeError(f"visibility child failed (exit {child.returncode}): {child.stderr.read().strip()}")
    status, seen = int(status_text), int(seen_text)
    if status == SY_ETIMEDOUT:   # the acquire reader's own deadline (only if the writer never ran)
        return VisibilityResult(reader, saw_store=False, timed_out=True, store_to_seen_ns=None, timeout=timeout)
    _check(status, f"visibility(reader={reader!r})")
    return VisibilityResult(reader, saw_store=seen >= 0, timed_out=False, store_to_seen_ns=seen, timeout=timeout)


def _read_line(child: subprocess.Popen, deadline: float, expect: str) -> None:
    """Wait for the child's `expect` line (it has loaded the kernels and is about to spin)."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            child.kill()
            raise RuntimeError("visibility child did not start within 30 s")
        ready, _, _ = select.select([child.stdout], [], [], left)
        if ready:
            line = child.stdout.readline()
            if line.strip() == expect:
                return
            if not line:
                raise RuntimeError(f"visibility child exited early: {child.stderr.read().strip()}")


@dataclass(frozen=True)
class Disassembly:
    function: str
    text: str                 # objdump's listing of the function
    spins_in_place: bool      # a jmp whose target is itself: the load was hoisted out of the loop


def spin_loop_disassembly(reader: Reader = "plain") -> Disassembly:
    """The machine code of the reader's spin loop, as it was compiled into sympathy._lab (objdump).

    No compiler is needed at run time: this disassembles the very function that `visibility` ran.
    """
    if reader not in READERS:
        raise ValueError(f"reader must be one of {READERS}; got {reader!r}")
    objdump = shutil.which("objdump")
    if objdump is None:
        raise NotSupportedError("showing the spin loop needs objdump (binutils) on PATH")
    _native()
    from . import _lab

    function = f"sy_lab_spin_{reader}"
    proc = subprocess.run([objdump, "-d", "--no-show-raw-insn", f"--disassemble={function}", _lab.__file__],
                          capture_output=True, text=True, timeout=60)
    body = proc.stdout.split(f"<{function}>:", 1)
    if proc.returncode != 0 or len(body) < 2:
        raise NotSupportedError(f"objdump could not disassemble {function} (binutils >= 2.32 needed for "
                                f"--disassemble=SYMBOL): {proc.stderr.strip()[:200]}")
    lines = []
    for line in body[1].splitlines()[1:]:
        if not line.strip():
            break
        lines.append(line.rstrip())
    return Disassembly(function, "\n".join(lines), any(_jumps_to_itself(line) for line in lines))


def _jumps_to_itself(line: str) -> bool:
    """`  2c16:\tjmp    2c16 <...>`: an unconditional jump to its own address."""
    address, _, rest = line.strip().partition(":")
    parts = rest.split()
    return len(parts) >= 2 and parts[0] == "jmp" and parts[1] == address.strip()


# =================================================================================================
# Latency against working-set size — a dependent pointer chase (lmbench lat_mem_rd, Drepper §3.3).
# One node per line, linked in one random cycle (Sattolo), so every load waits for the previous one
# and misses wherever the working set no longer fits. Knob: the working-set size; pattern
# "sequential" shows the prefetcher hiding the same latency.
# =================================================================================================
Pattern = Literal["random", "sequential"]
PATTERNS: tuple[Pattern, ...] = get_args(Pattern)
MIN_WORKING_SET = 4 * KiB
MAX_WORKING_SET = 16 * GiB


def default_sizes(max_bytes: int = 256 * MiB, min_bytes: int = 4 * KiB) -> list[int]:
    """Two points per octave (2^k and 1.5·2^k) from min_bytes to max_bytes, line multiples."""
    _int_in("max_bytes", max_bytes, MIN_WORKING_SET, MAX_WORKING_SET)
    _int_in("min_bytes", min_bytes, MIN_WORKING_SET, max_bytes)
    sizes, power = [], 1 << (min_bytes - 1).bit_length()
    while power <= max_bytes:
        sizes += [s for s in (power, power * 3 // 2) if min_bytes <= s <= max_bytes]
        power *= 2
    return sizes


@dataclass
class LatencyCurve:
    pattern: str
    sizes: list[int]
    ns_per_load: list[float]
    node_bytes: int = LINE
    huge_pages: bool = True

    def plateaus(self, rel_tol: float = 0.3) -> list["Plateau"]:
        return detect_plateaus(self.sizes, self.ns_per_load, rel_tol=rel_tol)

    def levels(self, rel_tol: float = 0.3) -> list["LevelMatch"]:
        """The curve's steps against this machine's sysfs cache sizes (match_cache_levels)."""
        return match_cache_levels(self.sizes, self.ns_per_load, sysfs_cache_sizes(), rel_tol=rel_tol)


def _aligned_bytes(nbytes: int, align: int = 4096) -> np.ndarray:
    """A NumPy byte buffer starting on an `align` boundary (large ones get NumPy's huge-page hint)."""
    raw = np.empty(nbytes + align, dtype=np.uint8)
    offset = (-raw.ctypes.data) % align
    return raw[offset:offset + nbytes]


HUGE_PAGE = 2 * MiB


def _huge_page_bytes(nbytes: int) -> np.ndarray:
    """A byte buffer on a 2 MiB boundary with the kernel asked for transparent huge pages, so a
    random walk over up to gigabytes stays within the TLB's reach: the curve then shows the caches,
    not page walks. Without THP (or off Linux) the hint is a no-op and 4 KiB pages remain."""
    import mmap

    length = -(-nbytes // HUGE_PAGE) * HUGE_PAGE + HUGE_PAGE
    region = mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    raw = np.frombuffer(region, dtype=np.uint8)   # keeps `region` alive as long as the array
    offset = (-raw.ctypes.data) % HUGE_PAGE
    if hasattr(mmap, "MADV_HUGEPAGE"):
        region.madvise(mmap.MADV_HUGEPAGE, offset, length - offset)
    return raw[offset:offset + nbytes]


@dataclass(frozen=True)
class Chase:
    """A pointer-chase buffer from build_chase. Its bytes are addresses that the walk follows
    blindly, so the array is read-only and chase() accepts nothing else: do not write to it."""
    buffer: np.ndarray
    node_bytes: int
    pattern: str

    @property
    def nodes(self) -> int:
        return self.buffer.nbytes // self.node_bytes


def build_chase(nbytes: int, pattern: Pattern = "random", node_bytes: int = LINE, seed: int = 1, *,
                huge_pages: bool = True) -> Chase:
    """nbytes // node_bytes nodes linked into one cycle (the first 8 bytes of each node hold the
    next node's address). huge_pages=False keeps 4 KiB pages: TLB misses join the curve."""
    if pattern not in PATTERNS:
        raise ValueError(f"pattern must be one of {PATTERNS}; got {pattern!r}")
    node_bytes = _valid_node_bytes(node_bytes)
    nbytes = _int_in("nbytes", nbytes, node_bytes, MAX_WORKING_SET)
    nodes = nbytes // node_bytes
    buffer = _huge_page_bytes(nodes * node_bytes) if huge_pages else _aligned_bytes(nodes * node_bytes)
    ffi, lib = _native()
    _check(lib.sy_lab_chase_build(ffi.from_buffer(buffer), nodes, node_bytes, PATTERNS.index(pattern),
                                  seed & (2**64 - 1)), f"build_chase({nbytes}, {pattern!r})")
    buffer.flags.writeable = False
    return Chase(buffer, node_bytes, pattern)


def _valid_node_bytes(node_bytes: object) -> int:
    node_bytes = _int_in("node_bytes", node_bytes, 8, 64 * KiB)
    if node_bytes % 8:
        raise ValueError(f"node_bytes must be a multiple of 8 (one pointer); got {node_bytes}")
    return node_bytes


def _checked_chase(chase_: object) -> Chase:
    if not isinstance(chase_, Chase):
        raise TypeError(f"expected a Chase from build_chase; got {type(chase_).__name__}")
    return chase_


def chase_cycle_length(chase_: Chase) -> int:
    """Steps from the first node back to it: the node count when the cycle visits every node, 0
    when a link leaves the buffer (checked before it is followed) or never returns."""
    chase_ = _checked_chase(chase_)
    ffi, lib = _native()
    return int(lib.sy_lab_chase_cycle_length(ffi.from_buffer(chase_.buffer), chase_.nodes, chase_.node_bytes))


def chase(chase_: Chase, loads: int) -> tuple[float, int]:
    """(ns per load, byte offset where the walk ended) for `loads` dependent loads from node 0."""
    chase_ = _checked_chase(chase_)
    loads = _int_in("loads", loads, 1, 10**11)
    ffi, lib = _native()
    elapsed, end = ffi.new("uint64_t *"), ffi.new("size_t *")
    _check(lib.sy_lab_chase_walk(ffi.from_buffer(chase_.buffer), loads, elapsed, end), "chase")
    return elapsed[0] / loads, int(end[0])


def latency_curve(sizes: Sequence[int] | None = None, *, pattern: Pattern = "random", max_bytes: int = 256 * MiB,
                  loads: int = 1 << 20, repeat: int = 5, node_bytes: int = LINE, seed: int = 1,
                  huge_pages: bool = True, pin: bool = True, progress=None) -> LatencyCurve:
    """ns per dependent load at each working-set size (bytes; default: default_sizes(max_bytes)).

    Each size is walked once untimed (filling the caches it fits in), then `repeat` timed walks of
    `loads` loads; the fastest is kept, as lmbench does: a walk can only be slowed down (by another
    process taking the CPU mid-walk), never sped up. huge_pages: see build_chase. pin: keep the
    calling thread on one CPU throughout. progress: an optional wrapper (tqdm) for the sizes.
    """
    if pattern not in PATTERNS:
        raise ValueError(f"pattern must be one of {PATTERNS}; got {pattern!r}")
    sizes = default_sizes(max_bytes) if sizes is None else list(sizes)
    if not sizes:
        raise ValueError("sizes must name at least one working-set size")
    for s in sizes:
        _int_in("sizes[i]", s, MIN_WORKING_SET, MAX_WORKING_SET)
    loads = _int_in("loads", loads, 1, 10**11)
    _int_in("repeat", repeat, 1, 1000)
    _valid_node_bytes(node_bytes)
    ns = []
    with _pinned_caller(pin):
        for size in (progress(sizes) if progress else sizes):
            walk = build_chase(size, pattern, node_bytes, seed, huge_pages=huge_pages)
            chase(walk, min(walk.nodes, 1 << 24))                           # warm: fill the caches
            ns.append(min(chase(walk, loads)[0] for _ in range(repeat)))
            del walk
    return LatencyCurve(pattern, list(sizes), ns, node_bytes, huge_pages)


# ---- plateau detection (pure: unit-tested on synthetic curves) -----------------------------------
@dataclass(frozen=True)
class Plateau:
    first_bytes: int          # smallest working set on the plateau
    last_bytes: int           # largest working set still on it: the capacity estimate
    ns: float                 # median latency on the plateau
    points: int


def detect_plateaus(sizes: Sequence[int], ns: Sequence[float], *, rel_tol: float = 0.3,
                    min_points: int = 2) -> list[Plateau]:
    """Flat runs of a latency curve, in order of size.

    Walking up in size, a point joins the current run while its latency stays within (1 + rel_tol)
    of the run's lowest latency; otherwise the run closes and a new one starts. Runs shorter than
    min_points are the transitions between levels (or a disturbed sample) and are dropped; then
    neighbouring runs within rel_tol of each other are one plateau that a spike had split.
    """
    if len(sizes) != len(ns):
        raise ValueError(f"sizes and ns must have the same length; got {len(sizes)} and {len(ns)}")
    if not rel_tol > 0:
        raise ValueError(f"rel_tol must be > 0; got {rel_tol}")
    if min_points < 1:
        raise ValueError(f"min_points must be >= 1; got {min_points}")
    order = sorted(range(len(sizes)), key=lambda i: sizes[i])
    runs: list[list[int]] = []
    for i in order:
        if runs and ns[i] <= min(ns[j] for j in runs[-1]) * (1 + rel_tol):
            runs[-1].append(i)
        else:
            runs.append([i])
    merged: list[list[int]] = []
    for run in (r for r in runs if len(r) >= min_points):
        if merged and _level(ns, run) <= _level(ns, merged[-1]) * (1 + rel_tol):
            merged[-1] += run
        else:
            merged.append(run)
    return [Plateau(sizes[run[0]], sizes[run[-1]], _level(ns, run), len(run)) for run in merged]


def _level(ns: Sequence[float], run: list[int]) -> float:
    return float(np.median([ns[j] for j in run]))


@dataclass(frozen=True)
class LevelMatch:
    level: str                  # "L1", "L2", "L3", or "DRAM"
    sysfs_bytes: int | None     # what the kernel says (None for DRAM)
    plateau: Plateau | None     # the curve's plateau for this level, if the curve has one
    capacity_bytes: int | None  # the largest working set still half-way or less up the next step
    factor: float = 2.0

    @property
    def ratio(self) -> float | None:
        """detected capacity / sysfs size (the sweep's 2 points per octave limit it to ±1.5×)."""
        if self.capacity_bytes is None or not self.sysfs_bytes:
            return None
        return self.capacity_bytes / self.sysfs_bytes

    @property
    def agrees(self) -> bool:
        """The curve's capacity is within `factor` of sysfs (DRAM: a plateau exists)."""
        if self.sysfs_bytes is None:
            return self.plateau is not None
        return self.ratio is not None and 1 / self.factor <= self.ratio <= self.factor


# A new level at least doubles the latency (L1 -> L2 -> L3 -> DRAM: 3-5x each on current cores);
# the smaller steps inside one level are TLB reach (4 KiB pages: 64 L1 dTLB entries cover 256 KiB).
MIN_LEVEL_STEP = 2.0


def match_cache_levels(sizes: Sequence[int], ns: Sequence[float], cache_sizes: dict[str, int], *,
                       rel_tol: float = 0.3, factor: float = 2.0) -> list[LevelMatch]:
    """Read a latency curve the way a person does: find the big steps.

    The curve's plateaus (detect_plateaus) are cut into levels at its largest latency jumps of at
    least MIN_LEVEL_STEP, one cut per sysfs level (cache_sizes: name → sysfs bytes, e.g.
    {"L1": 49152, "L2": 2097152}); smaller steps (TLB reach) stay inside their level. The k-th
    level is the k-th cache by size, the one after the last cache is DRAM; steps beyond DRAM's first
    plateau (TLB reach, far memory) are not levels. A level's capacity is the largest working set
    whose latency is still at most half-way up the next level's step on a log scale (the geometric
    mean of the two latencies); the last level's capacity is its last size.
    """
    if factor < 1:
        raise ValueError(f"factor must be >= 1; got {factor}")
    groups = _level_groups(detect_plateaus(sizes, ns, rel_tol=rel_tol), len(cache_sizes) + 1)
    # A cache level spans its sub-steps at the latency of its first plateau.
    spans = [Plateau(g[0].first_bytes, g[-1].last_bytes, g[0].ns, sum(p.points for p in g)) for g in groups]
    levels = sorted(cache_sizes.items(), key=lambda kv: kv[1])
    matches = []
    for k, (level, size) in enumerate(levels):
        plateau = spans[k] if k < len(spans) else None
        following = groups[k + 1][0] if k + 1 < len(groups) else None
        capacity = _step_capacity(sizes, ns, plateau, following) if plateau else None
        matches.append(LevelMatch(level, size, plateau, capacity, factor))
    dram = groups[len(levels)][0] if len(groups) > len(levels) else None
    matches.append(LevelMatch("DRAM", None, dram, None, factor))
    return matches


def _level_groups(plateaus: list[Plateau], levels: int) -> list[list[Plateau]]:
    """The plateaus cut at the (levels - 1) largest jumps of at least MIN_LEVEL_STEP, in order."""
    jumps = [(plateaus[i + 1].ns / plateaus[i].ns, i + 1) for i in range(len(plateaus) - 1)
             if plateaus[i].ns > 0 and plateaus[i + 1].ns / plateaus[i].ns >= MIN_LEVEL_STEP]
    cuts = sorted(i for _, i in sorted(jumps, reverse=True)[:levels - 1])
    return [plateaus[a:b] for a, b in zip([0, *cuts], [*cuts, len(plateaus)])] if plateaus else []


def _step_capacity(sizes: Sequence[int], ns: Sequence[float], plateau: Plateau, following: Plateau | None) -> int:
    if following is None:
        return plateau.last_bytes
    half_way = math.sqrt(plateau.ns * following.ns)
    capacity = plateau.last_bytes
    for size, latency in sorted(zip(sizes, ns)):
        if plateau.last_bytes < size < following.first_bytes:
            if latency > half_way:
                break
            capacity = size
    return capacity


def sysfs_cache_sizes() -> dict[str, int]:
    """Data-cache sizes by level from sympathy.topology (L1d, L2, L3 ...)."""
    from .topology import topology

    return {f"L{c.level}": c.size_bytes for c in topology(with_gpu=False).caches if c.kind in ("Data", "Unified")}


# =================================================================================================
# Bandwidth — STREAM (McCalpin): copy, scale, add, triad over arrays several times the last-level
# cache, so every byte comes from DRAM. Bytes are counted the STREAM way (reads + writes of the
# named arrays; the write-allocate read of the destination is not counted). Knob: threads.
# =================================================================================================
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
    with _pinned_caller(numpy and first_cpu is not None, first_cpu):
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
    ffi, lib = _native()
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


# =================================================================================================
# Cache lines and strides — memory moves in 64-byte lines, so touching every 16th uint32 fetches
# as many lines as touching all of them: the time stays flat up to a stride of one line, then
# halves with each doubling. Knob: the stride.
# =================================================================================================
@dataclass
class StrideCurve:
    array_bytes: int
    strides: list[int]                 # in uint32 elements
    seconds: list[float]               # median time of one pass
    touched: list[int]                 # elements touched per pass

    @property
    def ns_per_touch(self) -> list[float]:
        return [s * 1e9 / t for s, t in zip(self.seconds, self.touched)]


def touch_stride(array: np.ndarray, stride: int) -> float:
    """array[::stride] += 1 in C, one pass; seconds."""
    if not isinstance(array, np.ndarray) or array.dtype != np.uint32 or not array.flags.c_contiguous:
        raise TypeError("array must be a C-contiguous NumPy uint32 array")
    if array.size == 0:
        raise ValueError("array must not be empty")
    stride = _int_in("stride", stride, 1, array.size)
    ffi, lib = _native()
    elapsed = ffi.new("uint64_t *")
    _check(lib.sy_lab_touch_stride(ffi.from_buffer("uint32_t[]", array), array.size, stride, elapsed), "touch_stride")
    return elapsed[0] * 1e-9


def strides(strides: Sequence[int] = tuple(2**k for k in range(11)), *, array_bytes: int = 64 * MiB,
            repeat: int = 5, pin: bool = True) -> StrideCurve:
    """Time one pass of array[::stride] += 1 over a uint32 array of array_bytes, per stride (median
    of `repeat` after a warm-up pass; the calling thread pinned to one CPU unless pin=False)."""
    array_bytes = _int_in("array_bytes", array_bytes, 4 * KiB, 16 * GiB)
    repeat = _int_in("repeat", repeat, 1, 1000)
    n = array_bytes // 4
    if not strides:
        raise ValueError("strides must name at least one stride")
    strides = [_int_in("strides[i]", s, 1, n) for s in strides]
    array = np.zeros(n, dtype=np.uint32)
    seconds, touched, passes_of_1 = [], [], 0
    with _pinned_caller(pin):
        for stride in strides:
            touch_stride(array, stride)                               # warm-up pass
            seconds.append(float(np.median([touch_stride(array, stride) for _ in range(repeat)])))
            touched.append(-(-n // stride))
            passes_of_1 += (repeat + 1) if stride == 1 else 0
    # Every pass touches element 0; element 1 only the stride-1 passes: both counts must add up.
    if int(array[0]) != len(strides) * (repeat + 1) or (n > 1 and int(array[1]) != passes_of_1):
        raise RuntimeError("touch_stride result is wrong: the increments do not add up")
    return StrideCurve(n * 4, strides, seconds, touched)


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


# ---- cachegrind: the strides experiment in simulated misses (deterministic) ------------------------
cachegrind_help = "D1/LL misses of one a[::stride] += 1 pass per stride: flat up to one line"


def cachegrind_arguments(parser) -> None:
    parser.add_argument("--strides", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64, 128],
                        help="strides in uint32 elements (default 1 2 4 ... 128)")
    parser.add_argument("--array-size", type=parse_size, default=4 * MiB,
                        help="bytes of the uint32 array (default 4MiB: twice the simulated L2)")


def cachegrind_cases(args) -> list[tuple[str, dict]]:
    """(label, keyword arguments of sy.cachegrind) per stride: one pass, only sy_lab_touch_stride counted."""
    n = _int_in("array_size", args.array_size, 4 * KiB, 1 * GiB) // 4
    setup = f"import numpy as np\nfrom sympathy import lab\na = np.zeros({n}, dtype=np.uint32)"
    return [(f"stride {s} ({4 * s} B apart)",
             dict(setup=setup, call=f"lab.touch_stride(a, {_int_in('stride', s, 1, n)})",
                  functions=["sy_lab_touch_stride"]))
            for s in args.strides]


def strides_cachegrind(strides: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128), *, array_bytes: int = 4 * MiB):
    """[(stride, CacheReport)]: valgrind's simulated D1 and LL misses of one pass per stride."""
    from argparse import Namespace

    from .cache import cachegrind

    cases = cachegrind_cases(Namespace(strides=list(strides), array_size=array_bytes))
    return [(s, cachegrind(**kwargs)) for s, (_, kwargs) in zip(strides, cases)]
