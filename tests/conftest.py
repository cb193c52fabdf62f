"""Shared test configuration.

The default `pytest` run quick-runs the pytest-benchmark suites in tests/bench/ once each
(correctness of the benchmarked code, no timing); `pytest tests/bench --benchmark-only` times them.
"""
import signal

import pytest


def pytest_configure(config):
    # Benchmarks are timed only when asked for; otherwise each benchmarked function runs once.
    if not (config.getoption("benchmark_only", False) or config.getoption("benchmark_enable", False)):
        config.option.benchmark_disable = True
    # The Ctrl-C tests press Ctrl-C as a user at a terminal does. A shell without job control starts background
    # commands (`pytest &`, nohup) with SIGINT ignored; Python then installs no KeyboardInterrupt handler, and every
    # child (forked, or exec'ed: an ignored signal stays ignored across exec) would ignore the press too. Give this
    # process the handler a terminal's Python has, so its children start from it.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


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
