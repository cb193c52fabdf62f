"""pytest-benchmark suites for the ring buffer (`pytest tests/bench/test_bench_ring.py --benchmark-only`).

Each benchmark times the ring and measures its anchor (C mutex + condvar queue, queue.Queue,
multiprocessing.Queue) in the same test, recording items/s of both and the ratio in extra_info.
The default test run executes each once with small sizes (correctness of the benchmarked code).
`sympathy bench ring` is the full, larger version of these measurements.
"""
import os

import pytest

from sympathy.bench.suites import ring as R

# A spinning waiter needs a CPU of its own: with fewer CPUs than spinning threads each handoff waits
# for a scheduler tick, and a test that takes milliseconds takes minutes.
CPUS = len(os.sched_getaffinity(0))
needs_two_cpus = pytest.mark.skipif(CPUS < 2, reason="spin-waiting pairs need two CPUs")

C_ITEMS = 400_000
C_QUEUE_ITEMS = 50_000
PY_ITEMS = 20_000
PY_BATCHED_ITEMS = 400_000


def _record(benchmark, mine: float, anchor: float, anchor_name: str) -> None:
    benchmark.extra_info.update({"items/s": mine, f"{anchor_name} items/s": anchor,
                                 "ratio to anchor": mine / anchor})


@pytest.mark.parametrize("shape", list(R.SHAPES))
def test_c_shape_vs_mutex_queue(benchmark, shape):
    code = R.SHAPES[shape]
    wait = "busy_spin" if R.SHAPE_THREADS[code] <= CPUS else "yield"  # more threads than CPUs: never spin
    result = benchmark.pedantic(R.c_ring, args=(code, wait, C_ITEMS, 256), rounds=3, iterations=1)
    anchor = R.c_mutex_queue(code, C_QUEUE_ITEMS)
    _record(benchmark, result["items/s"], anchor["items/s"], "mutex queue")
    benchmark.extra_info["avg batch"] = result["avg batch"]


@needs_two_cpus
@pytest.mark.parametrize("padding", [8, 64, 128])
def test_c_false_sharing_ablation(benchmark, padding):
    """The ring itself with its hot sequences packed 8 B apart, 64 B apart, or 128 B apart."""
    result = benchmark.pedantic(R.c_false_sharing, args=(padding, C_ITEMS // 4), rounds=3, iterations=1)
    packed = R.c_false_sharing(8, C_ITEMS // 4)
    _record(benchmark, result["items/s"], packed["items/s"], "packed")


@needs_two_cpus
def test_c_pingpong_busy_spin(benchmark):
    """Ring round trips against the bare two-flag floor measured in the same test."""
    result = benchmark.pedantic(R.c_pingpong, args=("busy_spin", 20_000), rounds=1, iterations=1)
    floor = R.c_pingpong_flags(20_000)
    benchmark.extra_info.update({k: v for k, v in result.items() if k.endswith("ns")})
    benchmark.extra_info.update({"floor p50 ns": floor["p50 ns"], "p50 over floor": result["p50 ns"] / floor["p50 ns"]})


@pytest.mark.parametrize("batch", [1, 1024])
def test_python_threads_vs_queue_queue(benchmark, batch):
    n = PY_ITEMS if batch == 1 else PY_BATCHED_ITEMS
    rate = benchmark.pedantic(R.py_threads_ring, args=(n, batch), rounds=3, iterations=1)
    _record(benchmark, rate, R.py_threads_queue(n, batch), "queue.Queue")


@pytest.mark.parametrize("batch", [1, 1024])
def test_python_processes_vs_multiprocessing_queue(benchmark, batch):
    n = PY_ITEMS if batch == 1 else PY_BATCHED_ITEMS
    rate = benchmark.pedantic(R.py_processes_ring, args=(n, batch), rounds=3, iterations=1)
    _record(benchmark, rate, R.py_processes_mpqueue(n // 4 if batch == 1 else n, batch), "multiprocessing.Queue")
