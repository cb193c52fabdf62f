"""Cache effects of the matmul ladder, asserted with valgrind's simulated counts (deterministic).

Five runs under callgrind's cache simulator (D1 and LL from this machine's sysfs), each ~7 s of CPU,
most of it valgrind starting Python, two at a time: about 20-25 s for the module on two idle cores. Costs are collected only inside the C
entry points (`sy_matmul*`), so Python and NumPy around the call count for nothing.

Valgrind 3.19 does not model AVX-512 and hides it from CPUID, so under it the packed kernel runs its
AVX2 micro-kernel (6×8 for float64): the counts below are that kernel's.
"""
from __future__ import annotations

import importlib
import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest

import sympathy as sy

mm = importlib.import_module("sympathy.matmul")

pytestmark = [
    pytest.mark.valgrind,
    pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind"),
]

N = 256


@pytest.fixture(scope="module")
def reports() -> dict[str, sy.CacheReport]:
    setup = mm.cachegrind_setup(N, "float64")
    cases = {kernel: f"sy.matmul(a, b, kernel={kernel!r})" for kernel in ("ijk", "ikj", "tiled", "packed")}
    cases["packed 2 threads"] = "sy.matmul(a, b, kernel='packed', threads=2)"
    # Each run is its own valgrind process: two at a time use both cores of a CI runner.
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(sy.cachegrind, call=call, setup=setup, functions=["sy_matmul*"])
                   for name, call in cases.items()}
        return {name: future.result() for name, future in futures.items()}


def test_ijk_misses_d1_several_times_more_than_ikj(reports):
    # ijk's inner loop walks B down a column: each step lands on a new 64-byte line (8 doubles of
    # which it uses one), and with 256 rows 2 KiB apart the column's lines do not survive in L1
    # until the next j. ikj walks a B row and a C row: 8 uses per line fetched.
    ijk, ikj = reports["ijk"], reports["ikj"]
    assert ijk.d1_misses >= 3 * ikj.d1_misses, (ijk, ikj)


def test_packed_misses_d1_less_than_tiled(reports):
    # n=256: the whole of B (512 KiB) fits the tiled rung's L2-sized tile, so tiled is ikj here and
    # streams a 2 KiB B row from L2 for every (i, p): ~n³/8 D1 misses. The packed kernel keeps one
    # KC×NR micro-panel of B in L1 for every MR-row panel of A in the MC block, holds the C tile in
    # registers across KC steps, and reads each A panel once per NR columns: several times fewer
    # misses at this size, and the gap widens with n.
    tiled, packed = reports["tiled"], reports["packed"]
    assert packed.d1_misses * 3 <= tiled.d1_misses, (packed, tiled)


def test_counts_cover_the_kernel_only(reports):
    # ikj compiled for the baseline ISA (SSE2: 2 doubles a vector) loads B and C and stores C once
    # per 2 elements: ~1.5·n³ data references. Python's start-up leaking into the region would add
    # ~10⁸, far above the upper bound; collecting nothing would fall below the lower one.
    ikj = reports["ikj"]
    assert N**3 / 4 <= ikj.d_refs <= 3 * N**3, ikj


def test_worker_threads_are_counted(reports):
    # The team's second thread starts in sy_matmul_worker, which the "sy_matmul*" pattern matches:
    # the same work split over two threads makes about the same number of data references (only
    # the packing of the shared B block is split differently), not half of them.
    one, two = reports["packed"], reports["packed 2 threads"]
    assert 0.9 * one.d_refs <= two.d_refs <= 1.1 * one.d_refs, (one, two)
