"""`sympathy bench matmul`: the matrix-multiplication ladder, MIT 6.172 style.

Each group (one size, dtype and thread count) races every rung of sy.matmul against NumPy's
matmul, which is OpenBLAS here (the anchor, measured in the same run, with its thread pool set to the
group's thread count through threadpoolctl). Columns: median time, GFLOPS (2·m·n·k per product: one
multiply and one add per term), speedup over ijk, the ratio to NumPy, the share of the machine's
peak (topology().peak_gflops: lanes × 2 FMA ports × 2 flops × nominal clock; turbo can exceed it) and,
with --cachegrind, the D1 miss rate from valgrind's simulator at a small size.

Quick defaults take about a minute. The issue's figures:
    sympathy bench matmul --n 1024 --kernels ijk ikj              # loop order
    sympathy bench matmul --n 2048 --dtype float64 float32 --threads 1 2 --kernels packed
"""
from __future__ import annotations

import argparse
import importlib
import math
import os
import time
from pathlib import Path
from typing import Callable

import numpy as np

from ..core import Results, Suite, positive_int
from ..timing import Timing

# The rungs that make every group slow at large n (ijk at n=2048 takes about a minute).
NAIVE = ("ijk", "ikj", "jik", "jki", "kij", "kji", "tiled")
# OpenBLAS's idle workers busy-wait for 2^OPENBLAS_THREAD_TIMEOUT cycles (default 2^28, ~0.1 s at
# 2-3 GHz) after each call before they sleep. A kernel timed right after NumPy would share its
# cores with them: with 2 threads on 2 cores, ours measured no faster than with one.
BLAS_SPIN_S = 0.3
# n x n matrices a group holds at once: a, b, NumPy's reference product, and the two products of the
# variant being timed and of the one timed before it (freed only when the next result replaces it).
MATRICES_PER_GROUP = 5


def _matmul_module():
    # The module, not the function sy.matmul that shadows it as an attribute of the package.
    return importlib.import_module("sympathy.matmul")


def gflops(m: int, n: int, k: int, seconds: float) -> float:
    """2·m·n·k floating-point operations: each of the m·n·k terms is one multiply and one add."""
    return 2.0 * m * n * k / seconds / 1e9


def race(variants: dict[str, Callable[[], object]], repeat: int, slow_s: float = 2.0,
         sample_s: float = 0.05) -> dict[str, Timing]:
    """Time the variants side by side: each round takes one sample of each, in turn, so a disturbance
    of the (shared) machine hits all of them alike instead of whichever ran during it.

    The first variant is NumPy: after each of its samples the round waits BLAS_SPIN_S for OpenBLAS's
    workers to stop spinning. The untimed first call of each variant is its warm-up; a variant whose
    first call took over `slow_s` (ijk at n=1024) keeps that call as its only sample. A sample of a
    fast variant is as many calls as fill `sample_s`, so the clock's resolution does not matter.
    """
    first = {}
    for name, fn in variants.items():
        t0 = time.perf_counter()
        fn()
        first[name] = time.perf_counter() - t0
    samples: dict[str, list[float]] = {name: [] for name in variants}
    racing = [name for name in variants if first[name] <= slow_s]
    for name in variants:
        if name not in racing:
            samples[name].append(first[name])
    inner = {name: max(1, math.ceil(sample_s / max(first[name], 1e-9))) for name in racing}
    for _ in range(repeat):
        for index, name in enumerate(racing):
            fn, calls = variants[name], inner[name]
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            samples[name].append((time.perf_counter() - t0) / calls)
            if index == 0:
                time.sleep(BLAS_SPIN_S)
    return {name: Timing(tuple(samples[name])) for name in variants}


def blas_description() -> str:
    """Which BLAS NumPy calls and which of its kernels runs (OpenBLAS picks one per CPU at load time)."""
    from threadpoolctl import threadpool_info

    found = [f"{i.get('internal_api')} {i.get('version')}, kernel {i.get('architecture')}"
             for i in threadpool_info() if i.get("user_api") == "blas"]
    env = {k: v for k, v in os.environ.items() if k.startswith(("OPENBLAS_", "GOTO", "OMP_", "MKL_"))}
    text = "; ".join(found) or "no BLAS found by threadpoolctl"
    if env:
        text += f" (environment: {', '.join(f'{k}={v}' for k, v in sorted(env.items()))})"
    return text


class MatmulSuite(Suite):
    title = "matmul: the ladder against NumPy/OpenBLAS (GFLOPS, higher is better)"
    primary = "GFLOPS"
    higher_is_better = True
    columns = ("time_s", "GFLOPS", "x_ijk", "pct_peak", "D1_miss_pct", "D1_misses")
    ratio_label = "× NumPy"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        mm = _matmul_module()
        parser.add_argument("--n", type=positive_int, nargs="+", default=[512, 2048], help="square sizes")
        parser.add_argument("--dtype", nargs="+", choices=("float64", "float32"), default=["float64"],
                            help="element types")
        parser.add_argument("--threads", type=positive_int, nargs="+", default=[1],
                            help="thread counts; above 1 only packed races NumPy")
        # --kernel too: the spelling of `sympathy cachegrind matmul`.
        parser.add_argument("--kernels", "--kernel", dest="kernels", nargs="+", choices=mm.MATMUL_KERNELS,
                            metavar="KERNEL", default=list(mm.MATMUL_KERNELS),
                            help=f"rungs of the ladder to race, from: {' '.join(mm.MATMUL_KERNELS)}")
        parser.add_argument("--naive-max", type=positive_int, default=1024,
                            help="largest n for the loop orders and tiled (ijk at 2048 takes about a minute)")
        parser.add_argument("--repeat", type=positive_int, default=5, help="timed samples per figure (median)")
        parser.add_argument("--cachegrind", action="store_true",
                            help="add the D1 miss rate from valgrind's cache simulator (slow: ~10 s a kernel)")
        parser.add_argument("--cachegrind-n", type=positive_int, default=128, help="size simulated")

    def check_arguments(self, args: argparse.Namespace) -> None:
        """The largest group must fit in the memory available now (not a MemoryError minutes in)."""
        import psutil

        n, itemsize = max(args.n), max(np.dtype(d).itemsize for d in args.dtype)
        need = MATRICES_PER_GROUP * n * n * itemsize
        available = psutil.virtual_memory().available
        if need > available:
            fits = int(math.sqrt(available / (MATRICES_PER_GROUP * itemsize)))
            raise ValueError(f"argument --n: n={n} needs {need / 2**30:,.1f} GiB ({MATRICES_PER_GROUP} matrices of "
                             f"{n}x{n} at {itemsize} bytes), but {available / 2**30:.1f} GiB of memory is "
                             f"available; the largest n that fits now is about {fits}")

    def run(self, args: argparse.Namespace, results: Results) -> None:
        from threadpoolctl import threadpool_limits

        from ... import affinity
        from ...topology import topology

        mm = _matmul_module()
        topo = topology(with_gpu=False)
        usable = sorted(topo.usable_cpus)
        results.note(f"NumPy BLAS: {blas_description()}")
        results.note(f"machine: {topo.cpu_model}, {topo.physical_cores} cores, nominal {topo.mhz:.0f} MHz; "
                     "pct_peak uses the nominal clock, so turbo can push it past 100")
        miss = self._miss_rates(args, results) if args.cachegrind else {}
        plans = {d: mm.plan(d) for d in args.dtype}
        for d, p in plans.items():
            results.note(f"packed {d}: {p['isa']} micro-kernel {p['mr']}×{p['nr']}, "
                         f"MC={p['mc']} KC={p['kc']} NC={p['nc']}; tiled/simd tile {p['tile']}")
        work = [(n, d, t) for t in args.threads for d in args.dtype for n in args.n]
        rng = np.random.default_rng(0)
        for n, dtype, threads in results.progress(work, desc="matmul"):
            if threads > len(usable):
                results.note(f"threads={threads} skipped: only {len(usable)} usable CPUs")
                continue
            group = f"n={n} {dtype} {threads}T"
            params = {"n": n, "dtype": dtype, "threads": threads}
            a = rng.random((n, n)).astype(dtype)
            b = rng.random((n, n)).astype(dtype)
            peak = topo.peak_gflops(dtype, threads)
            kernels = [k for k in args.kernels
                       if (threads == 1 or k == "packed") and not (k in NAIVE and n > args.naive_max)]
            variants = {"numpy": lambda: a @ b}
            for kernel in kernels:
                variants[kernel] = lambda kernel=kernel: mm.matmul(a, b, kernel=kernel, threads=threads)
            # Our threads inherit the caller's affinity: pin it to as many CPUs as the group uses.
            with affinity.pinned(usable[:threads]), threadpool_limits(limits=threads, user_api="blas"):
                expected = a @ b
                timings = race(variants, args.repeat)
                for kernel in kernels:
                    self._verify(results, group, kernel, variants[kernel](), expected, n)
            ijk_time = timings["ijk"].median if "ijk" in timings else None
            for variant, timing in timings.items():
                self._add(results, group, variant, params, n, timing, peak, ijk_time,
                          miss.get((variant, dtype)), anchor=variant == "numpy")
        if any(n > args.naive_max for n in args.n):
            results.note(f"loop orders and tiled run only at n <= {args.naive_max} (--naive-max)")

    @staticmethod
    def _add(results, group, variant, params, n, timing, peak, ijk_time, miss, anchor=False):
        metrics = {"time_s": timing.median, "GFLOPS": gflops(n, n, n, timing.median)}
        if ijk_time is not None:
            metrics["x_ijk"] = ijk_time / timing.median
        if peak:
            metrics["pct_peak"] = 100.0 * metrics["GFLOPS"] / peak
        if miss is not None:
            metrics["D1_miss_pct"] = 100.0 * miss.d1_miss_rate
            metrics["D1_misses"] = miss.d1_misses
        results.add(group, variant, anchor=anchor, params=params | {"spread": timing.spread}, **metrics)

    @staticmethod
    def _verify(results, group, kernel, got, expected, n):
        """Outside the timing: the figure counts only if the product is right (k-scaled tolerance)."""
        eps = np.finfo(got.dtype).eps
        bound = (n + 2) * eps * np.abs(expected).max()
        if not np.allclose(got, expected, rtol=0, atol=bound):
            results.note(f"WRONG RESULT: {kernel} in {group} differs from NumPy by "
                         f"{np.abs(got - expected).max():.3g}")

    @staticmethod
    def _miss_rates(args, results) -> dict:
        """CacheReport of each kernel (and NumPy's matmul) at --cachegrind-n, under valgrind."""
        from ...cache import cachegrind

        mm = _matmul_module()
        rates = {}
        n = args.cachegrind_n
        jobs = [(kernel, d) for d in args.dtype for kernel in ["numpy", *args.kernels]]
        for kernel, dtype in results.progress(jobs, desc="cachegrind"):
            setup = mm.cachegrind_setup(n, dtype)
            if kernel == "numpy":
                # OpenBLAS's own symbols: its level-3 driver and kernels.
                report = cachegrind(call="a @ b", setup=setup, functions=["*gemm*"])
            else:
                report = cachegrind(call=f"sy.matmul(a, b, kernel={kernel!r})", setup=setup,
                                    functions=["sy_matmul*"])
            rates[(kernel, dtype)] = report
        results.note(f"D1_miss_pct, D1_misses: valgrind cache simulation at n={n}, one thread (a miss rate "
                     "divides by the data references, which register blocking cuts: compare the counts too); "
                     "valgrind has no AVX-512, so the packed kernel and OpenBLAS run their AVX2 code there")
        return rates

    def plot(self, results: Results, outdir: Path) -> list[Path]:
        from .. import plots

        return [plots.grouped_bars(results, outdir / "matmul.png", metric="GFLOPS",
                                   title="matmul ladder: GFLOPS (log scale)", log=True)]


SUITE = MatmulSuite()
