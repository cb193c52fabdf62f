"""Latency against working-set size: a load that misses one cache level waits for the next, slower one.

A dependent pointer chase (lmbench lat_mem_rd, Drepper §3.3). One node per line, linked in one
random cycle (Sattolo), so every load waits for the previous one and misses wherever the working set
no longer fits. Knob: the working-set size; pattern "sequential" shows the prefetcher hiding the
same latency. The curve's plateaus are read against the sysfs cache sizes (match_cache_levels).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Sequence, get_args

import numpy as np

from . import _common
from ._common import LINE, GiB, KiB, MiB, _check, _int_in, sysfs_cache_sizes

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
    ffi, lib = _common._native()
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
    ffi, lib = _common._native()
    return int(lib.sy_lab_chase_cycle_length(ffi.from_buffer(chase_.buffer), chase_.nodes, chase_.node_bytes))


def chase(chase_: Chase, loads: int) -> tuple[float, int]:
    """(ns per load, byte offset where the walk ended) for `loads` dependent loads from node 0."""
    chase_ = _checked_chase(chase_)
    loads = _int_in("loads", loads, 1, 10**11)
    ffi, lib = _common._native()
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
    with _common._pinned_caller(pin):
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
