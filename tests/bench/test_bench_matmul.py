"""pytest-benchmark: matmul rungs racing NumPy (OpenBLAS) in the same test, same thread count.

`pytest tests/bench/test_bench_matmul.py --benchmark-only` times them; the default run calls each
benchmarked function once (correctness of what is timed, no timing). Each kernel's test also times
NumPy beside it (time_call, median) and stores `ratio_to_numpy` (NumPy's time / ours, higher is
better) in extra_info, so a saved run carries the comparison and not only the absolute figure.
"""
from __future__ import annotations

import importlib
import time

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import sympathy as sy
from sympathy.bench.suites.matmul import BLAS_SPIN_S
from sympathy.bench.timing import time_call

mm = importlib.import_module("sympathy.matmul")

CASES = [("ikj", 256, 1), ("simd", 256, 1), ("packed", 512, 1), ("packed", 512, 2)]


def flops(n: int) -> float:
    return 2.0 * n**3  # one multiply and one add per term of each of the n² dot products of length n


def operands(n: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(n)
    return rng.random((n, n)).astype(dtype), rng.random((n, n)).astype(dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("n, threads", [(256, 1), (512, 1), (512, 2)])
def test_numpy_anchor(benchmark, n, threads, dtype):
    a, b = operands(n, dtype)
    benchmark.group = f"matmul n={n} {dtype} {threads}T"
    with threadpool_limits(limits=threads, user_api="blas"):
        benchmark(np.matmul, a, b)
    benchmark.extra_info["GFLOPS"] = flops(n) / benchmark.stats.stats.median / 1e9 if benchmark.stats else None


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kernel, n, threads", CASES)
def test_kernel_against_numpy(benchmark, kernel, n, threads, dtype):
    a, b = operands(n, dtype)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    benchmark.group = f"matmul n={n} {dtype} {threads}T"
    if not benchmark.disabled:
        time.sleep(BLAS_SPIN_S)  # let OpenBLAS's workers from the previous test stop spinning
    result = benchmark(sy.matmul, a, b, kernel=kernel, threads=threads)
    # Checked outside the timing: a fast wrong answer is not a figure.
    bound = (n + 2) * np.finfo(dtype).eps * np.abs(expected).max()
    np.testing.assert_allclose(result, expected, rtol=0, atol=bound)
    if benchmark.stats:  # timed run: race the anchor now, on the same inputs and thread count
        with threadpool_limits(limits=threads, user_api="blas"):
            numpy_time = time_call(lambda: a @ b, repeat=5).median
        ours = benchmark.stats.stats.median
        benchmark.extra_info["ratio_to_numpy"] = numpy_time / ours
        benchmark.extra_info["GFLOPS"] = flops(n) / ours / 1e9
        benchmark.extra_info["plan"] = mm.plan(dtype, kernel, threads)
