"""pytest-benchmark suites for the cache-line lab; each variant races its anchor in the same test.

    pytest tests/bench/test_bench_lab.py --benchmark-only

The kernels time themselves in C; those figures (not the Python call around them) give the ratio
recorded in extra_info. Results are checked outside the timing. Sizes are small so the default
(untimed) run takes seconds; `sympathy bench lab` runs the full-size experiments.
"""
from __future__ import annotations

import numpy as np
import pytest

from sympathy import lab

ITERATIONS = 2_000_000


def _best(fn, seconds_of, rounds=3):
    return min(seconds_of(fn()) for _ in range(rounds))


@pytest.mark.parametrize("spacing", [8, 64, 128])
def test_bench_false_sharing(benchmark, spacing):
    anchor = _best(lambda: lab.false_sharing(2, spacing=128, iterations=ITERATIONS), lambda r: r.seconds)
    result = benchmark.pedantic(lab.false_sharing, args=(2,), kwargs={"spacing": spacing, "iterations": ITERATIONS},
                                rounds=3, warmup_rounds=1)
    assert result.counts == (ITERATIONS, ITERATIONS)
    mine = min(result.seconds, _best(lambda: lab.false_sharing(2, spacing=spacing, iterations=ITERATIONS),
                                     lambda r: r.seconds))
    benchmark.extra_info.update(ns_per_op=mine * 1e9 / ITERATIONS, anchor="128 B apart",
                                slowdown_vs_anchor=mine / anchor)


@pytest.mark.parametrize("kind", lab.COUNTER_KINDS)
def test_bench_counter(benchmark, kind):
    anchor = _best(lambda: lab.counter("register", ITERATIONS), lambda r: r.seconds)
    result = benchmark.pedantic(lab.counter, args=(kind, ITERATIONS), rounds=3, warmup_rounds=1)
    assert result.final_value == ITERATIONS
    mine = min(result.seconds, _best(lambda: lab.counter(kind, ITERATIONS), lambda r: r.seconds))
    benchmark.extra_info.update(ns_per_increment=mine * 1e9 / ITERATIONS, anchor="register",
                                slowdown_vs_anchor=mine / anchor)


@pytest.mark.parametrize("size", [32 * lab.KiB, 1 * lab.MiB, 16 * lab.MiB], ids=["32KiB", "1MiB", "16MiB"])
def test_bench_pointer_chase(benchmark, size):
    loads = 1 << 18
    random_walk, sequential = lab.build_chase(size, "random"), lab.build_chase(size, "sequential")
    assert lab.chase_cycle_length(random_walk) == size // lab.LINE
    anchor = min(lab.chase(sequential, loads)[0] for _ in range(3))
    ns, _ = benchmark.pedantic(lab.chase, args=(random_walk, loads), rounds=3, warmup_rounds=1)
    mine = min([ns] + [lab.chase(random_walk, loads)[0] for _ in range(2)])
    benchmark.extra_info.update(ns_per_load=mine, anchor="sequential walk", slowdown_vs_anchor=mine / anchor)


@pytest.mark.parametrize("threads", [1, None], ids=["1-thread", "all-threads"])
def test_bench_stream(benchmark, threads):
    """C and NumPy take turns on the same arrays inside one stream_race (validated as STREAM does)."""
    c, numpy = benchmark.pedantic(lab.stream_race, args=(16 * lab.MiB,), kwargs={"threads": (threads,), "repeat": 3},
                                  rounds=1, warmup_rounds=0)
    assert (c.implementation, numpy.implementation) == ("C", "NumPy")
    benchmark.extra_info.update(
        {f"{k}_GBs": v for k, v in c.best_gbs.items()} | {"anchor": "NumPy"} |
        {f"{k}_vs_numpy": c.best_gbs[k] / numpy.best_gbs[k] for k in lab.STREAM_KERNELS})


@pytest.mark.parametrize("stride", [1, 16, 64])
def test_bench_strides(benchmark, stride):
    array = np.zeros(16 * lab.MiB // 4, dtype=np.uint32)
    anchor = min(lab.touch_stride(array, 1) for _ in range(3))
    seconds = benchmark.pedantic(lab.touch_stride, args=(array, stride), rounds=3, warmup_rounds=1)
    mine = min([seconds] + [lab.touch_stride(array, stride) for _ in range(2)])
    # The anchor's 3 passes touched every element; the variant's passes only the multiples of stride.
    assert (array[::stride] == array[0]).all() and array[0] > 3
    if stride > 1:
        assert (np.delete(array, np.s_[::stride]) == 3).all()
    benchmark.extra_info.update(ms_per_pass=mine * 1e3, anchor="stride 1", speedup_vs_anchor=anchor / mine)
