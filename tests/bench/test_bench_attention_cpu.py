"""pytest-benchmark: the attention forward pass on the CPU, float32, 2 threads, against torch's SDPA.

`pytest tests/bench/test_bench_attention_cpu.py --benchmark-only` times them; the default run calls
each once (correctness). Each timed variant stores its ratio to torch (the anchor), measured in the
same test, in extra_info. The figures the docs quote come from `sympathy bench attention-cpu`.
"""
import math

import numpy as np
import pytest

import sympathy as sy
from sympathy.bench.suites.attention_cpu import _variant
from sympathy.bench.timing import time_call

THREADS = 2
SHAPE = (1, 4, 512, 64)     # small enough that the default (untimed) run takes a moment


def fresh_inputs(seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal(SHAPE, dtype=np.float32) for _ in range(3))
    return q, k, v, np.zeros(SHAPE, dtype=np.float32)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("variant", ["torch-sdpa", "sympathy-cpu", "numpy-naive"])
def test_attention_forward(benchmark, variant, causal):
    if variant == "torch-sdpa":
        torch = pytest.importorskip("torch")
        torch.set_num_threads(THREADS)
    from threadpoolctl import threadpool_limits

    q, k, v, out = fresh_inputs()
    fn, _ = _variant(variant, q, k, v, out, causal, THREADS)
    with threadpool_limits(THREADS):
        result = benchmark.pedantic(fn, rounds=5, warmup_rounds=1)
        got = result.numpy() if hasattr(result, "numpy") else result
        # verified outside the timing, against the float64 reference
        ref = sy.attention.reference(q, k, v, is_causal=causal)
        assert np.abs(got - ref).max() < 1e-4
        # FLOPs as FlashAttention counts them: 4·B·H·N²·d, halved for causal
        flops = 4.0 * math.prod(SHAPE[:2]) * SHAPE[2] ** 2 * SHAPE[3] / (2 if causal else 1)
        benchmark.extra_info.update({"shape": SHAPE, "causal": causal, "threads": THREADS, "flops": flops})
        if not benchmark.disabled:
            try:
                anchor, _ = _variant("torch-sdpa", q, k, v, out, causal, THREADS)
                anchor_s = time_call(anchor, repeat=5).median
                benchmark.extra_info["ratio_vs_torch_sdpa"] = anchor_s / benchmark.stats.stats.median
            except ImportError:
                benchmark.extra_info["ratio_vs_torch_sdpa"] = None
