"""pytest plugin (entry point `pytest11: sympathy`): the `cache_misses` fixture.

    def test_traversal(benchmark, cache_misses):
        counts = cache_misses(walk_rows, grid)     # walk_rows(grid) under valgrind's cache simulator
        assert counts.d1_misses < ...               # a sympathy.cache.CacheReport
        benchmark(walk_rows, grid)                  # time and misses land in one JSON record

`cache_misses(fn, *args, **kwargs)` runs fn(*args, **kwargs) once in a child Python under
`valgrind --tool=callgrind --cache-sim=yes`, counting only that call (geometry: this machine's L1d
and last level, from sysfs), and returns its I1/D1/LL reads and misses. fn must be a module-level
function (it travels to the child by pickle). Beside pytest-benchmark's `benchmark` fixture the
counts are also stored in `benchmark.extra_info["cache_misses"][fn's name]`, so `--benchmark-json`
files carry time and misses together. Without valgrind the test is skipped, saying why.
Disable the plugin with `-p no:sympathy`.
"""
from __future__ import annotations

import shutil
from typing import Callable

import pytest


class CacheMisses:
    """The `cache_misses` fixture's value: call it with a function and its arguments."""

    def __init__(self, extra_info: dict | None = None):
        self.extra_info = extra_info   # a benchmark's extra_info, when the test uses `benchmark`
        self.reports: list = []        # every (name, CacheReport) measured in this test

    def __call__(self, fn: Callable[..., object], /, *args, **kwargs):
        from .cache import cachegrind_function

        report = cachegrind_function(fn, args, kwargs)
        name = getattr(fn, "__qualname__", repr(fn))
        self.reports.append((name, report))
        if self.extra_info is not None:
            self.extra_info.setdefault("cache_misses", {})[name] = report.as_dict()
        return report


@pytest.fixture
def cache_misses(request) -> CacheMisses:
    """Simulated cache reads and misses of one call: `cache_misses(fn, *args, **kwargs)` (valgrind)."""
    if shutil.which("valgrind") is None:
        pytest.skip("cache_misses needs valgrind on PATH (Debian/Ubuntu: apt-get install valgrind)")
    extra_info = None
    if "benchmark" in request.fixturenames:
        extra_info = request.getfixturevalue("benchmark").extra_info
    return CacheMisses(extra_info)
