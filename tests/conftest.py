"""Shared test configuration.

The default `pytest` run quick-runs the pytest-benchmark suites in tests/bench/ once each
(correctness of the benchmarked code, no timing); `pytest tests/bench --benchmark-only` times them.
"""
import pytest


def pytest_configure(config):
    # Benchmarks are timed only when asked for; otherwise each benchmarked function runs once.
    if not (config.getoption("benchmark_only", False) or config.getoption("benchmark_enable", False)):
        config.option.benchmark_disable = True


def _has_cuda() -> bool:
    try:
        import torch
    except Exception:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU and torch")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# The plugin's fixture for this suite's own tests, whether or not sympathy is installed (an in-place
# build registers no entry point); an installed plugin's fixture is the same function.
from sympathy.pytest_plugin import cache_misses  # noqa: E402, F401
