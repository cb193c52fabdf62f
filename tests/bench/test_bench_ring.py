"""pytest-benchmark suites for the ring buffer (`pytest tests/bench/test_bench_ring.py --benchmark-only`).

Each subject and its anchor (C mutex + condvar queue, the bare two-flag ping-pong, the packed
false-sharing layout, queue.Queue, multiprocessing.Queue) are separate benchmarks in ONE group, moving
the same number of items, as the matmul suite does: `--benchmark-compare` and `--benchmark-histogram`
show the race, and items/s sits in each one's extra_info. The default test run executes each once
with small sizes (correctness of the benchmarked code). `sympathy bench ring` is the larger version.
"""
import os

import pytest

from sympathy.bench.suites import ring as R

# A spinning waiter needs a CPU of its own: with fewer CPUs than spinning threads each handoff waits
# for a scheduler tick, and a test that takes milliseconds takes minutes.
CPUS = len(os.sched_getaffinity(0))
needs_two_cpus = pytest.mark.skipif(CPUS < 2, reason="spin-waiting pairs need two CPUs")

C_ITEMS = 100_000
PY_ITEMS = 20_000
PY_BATCHED_ITEMS = 400_000


def _items_per_second(benchmark, items: int) -> None:
    if benchmark.stats:
        benchmark.extra_info["items/s"] = items / benchmark.stats.stats.median


@pytest.mark.parametrize("variant", ["mutex+condvar queue (anchor)", "ring"])
@pytest.mark.parametrize("shape", list(R.SHAPES))
def test_c_shape(benchmark, shape, variant):
    code = R.SHAPES[shape]
    benchmark.group = f"ring C {shape}, {C_ITEMS} items"
    if variant == "ring":
        wait = "busy_spin" if R.SHAPE_THREADS[code] <= CPUS else "yield"  # more threads than CPUs: never spin
        result = benchmark.pedantic(R.c_ring, args=(code, wait, C_ITEMS, 256), rounds=3, iterations=1)
        benchmark.extra_info["avg batch"] = result["avg batch"]
    else:
        benchmark.pedantic(R.c_mutex_queue, args=(code, C_ITEMS), rounds=3, iterations=1)
    _items_per_second(benchmark, C_ITEMS)


@needs_two_cpus
@pytest.mark.parametrize("padding", [8, 64, 128])
def test_c_false_sharing_ablation(benchmark, padding):
    """The ring itself with its hot sequences packed 8 B apart (the anchor), 64 B apart, or 128 B apart."""
    benchmark.group = f"ring C false sharing, {C_ITEMS} items"
    benchmark.pedantic(R.c_false_sharing, args=(padding, C_ITEMS), rounds=3, iterations=1)
    _items_per_second(benchmark, C_ITEMS)


@needs_two_cpus
@pytest.mark.parametrize("variant", ["two bare flags (anchor)", "ring busy_spin"])
def test_c_pingpong(benchmark, variant):
    """20,000 round trips through the ring against the bare two-flag floor, one group."""
    benchmark.group = "ring C ping-pong, 20000 round trips"
    if variant == "ring busy_spin":
        result = benchmark.pedantic(R.c_pingpong, args=("busy_spin", 20_000), rounds=1, iterations=1)
    else:
        result = benchmark.pedantic(R.c_pingpong_flags, args=(20_000,), rounds=1, iterations=1)
    benchmark.extra_info.update(result)


@pytest.mark.parametrize("variant", ["queue.Queue (anchor)", "sy.RingBuffer"])
@pytest.mark.parametrize("batch", [1, 1024])
def test_python_threads(benchmark, batch, variant):
    n = PY_ITEMS if batch == 1 else PY_BATCHED_ITEMS
    benchmark.group = f"ring Python threads, batch {batch}, {n} items"
    fn = R.py_threads_ring if variant == "sy.RingBuffer" else R.py_threads_queue
    benchmark.pedantic(fn, args=(n, batch), rounds=3, iterations=1)
    _items_per_second(benchmark, n // batch * batch)


@pytest.mark.parametrize("variant", ["multiprocessing.Queue (anchor)", "sy.RingBuffer (shm)"])
@pytest.mark.parametrize("batch", [1, 1024])
def test_python_processes(benchmark, batch, variant):
    n = PY_ITEMS if batch == 1 else PY_BATCHED_ITEMS
    benchmark.group = f"ring Python processes, batch {batch}, {n} items"
    fn = R.py_processes_ring if variant == "sy.RingBuffer (shm)" else R.py_processes_mpqueue
    benchmark.pedantic(fn, args=(n, batch), rounds=3, iterations=1)
    _items_per_second(benchmark, n // batch * batch)
