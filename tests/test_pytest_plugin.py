"""The pytest plugin: `cache_misses` counts the simulated cache misses of a test's own function.

Row-major against column-major traversal of one C-ordered array: the same elements, the same
number of NumPy calls; only the order in which memory is touched differs, and the counts show it.
"""
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from sympathy.config import package_parent

N = 1024   # float64 rows of 8 KiB: a column's 1024 lines all map to one set of any L1d up to 64 KiB


def sum_rows(a):
    """Touches each 64-byte line once, in order: about one D1 miss per 8 elements."""
    return sum(float(a[i, :].sum()) for i in range(a.shape[0]))


def sum_columns(a):
    """Steps 8 KiB between neighbours: lines evict each other before their next element is read."""
    return sum(float(a[:, j].sum()) for j in range(a.shape[1]))


def fails(x):
    return 1 / x


needs_valgrind = pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")


@pytest.mark.valgrind
@needs_valgrind
def test_column_major_traversal_misses_about_once_per_element(cache_misses):
    a = np.ones((N, N))
    rows, columns = cache_misses(sum_rows, a), cache_misses(sum_columns, a)
    lines = a.nbytes // 64
    # Rows: a miss per line plus the interpreter's own (~150 per NumPy call with a 32 KiB L1d).
    assert lines <= rows.d1_misses < 3 * lines, rows.as_dict()
    assert columns.d1_misses > 0.9 * a.size, columns.as_dict()          # a miss per element
    assert columns.d1_misses > 3 * rows.d1_misses
    assert rows.d_refs > a.size and columns.d_refs > a.size              # both read every element
    assert cache_misses.reports[0][0] == "sum_rows" and rows.as_dict()["D1_misses"] == rows.d1_misses


@pytest.mark.valgrind
@needs_valgrind
def test_an_exception_in_the_measured_function_is_raised_as_itself(cache_misses):
    with pytest.raises(ZeroDivisionError) as info:
        cache_misses(fails, 0)
    assert "in the child under valgrind" in str(info.value.__cause__)


@needs_valgrind
def test_a_lambda_is_refused_before_valgrind_starts(cache_misses):
    with pytest.raises(TypeError, match="module-level function"):
        cache_misses(lambda: None)


def _plugin_installed() -> bool:
    return any(ep.value == "sympathy.pytest_plugin" for ep in importlib.metadata.entry_points(group="pytest11"))


@pytest.mark.skipif(not _plugin_installed(), reason="sympathy is not installed (in-place build): no entry point")
def test_the_installed_entry_point_names_the_plugin_module():
    (ep,) = [ep for ep in importlib.metadata.entry_points(group="pytest11") if ep.name == "sympathy"]
    assert ep.load().cache_misses


@pytest.mark.valgrind
@needs_valgrind
def test_beside_benchmark_the_counts_land_in_the_saved_json(tmp_path):
    (tmp_path / "test_inner.py").write_text(textwrap.dedent("""
        import numpy as np

        def walk(a):
            return float(a.sum())

        def test_walk(benchmark, cache_misses):
            a = np.ones(1 << 16)
            counts = cache_misses(walk, a)
            assert counts.d1_misses >= a.nbytes // 64
            benchmark(walk, a)
    """))
    report = tmp_path / "bench.json"
    # Installed: the entry point loads the plugin by itself; an in-place build names it.
    plugin = [] if _plugin_installed() else ["-p", "sympathy.pytest_plugin"]
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin,
                           f"--benchmark-json={report}", "--benchmark-min-rounds=1", "--benchmark-max-time=0.01",
                           "test_inner.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env=os.environ | {"PYTHONPATH": str(package_parent())})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (bench,) = json.loads(report.read_text())["benchmarks"]
    counts = bench["extra_info"]["cache_misses"]["walk"]
    assert counts["D1_misses"] >= (1 << 16) * 8 // 64 and counts["D1_reads"] > 0
    assert bench["stats"]["median"] > 0
