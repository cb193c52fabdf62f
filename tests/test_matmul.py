"""sy.matmul: every rung against numpy.matmul, at odd sizes, odd strides and both dtypes.

Tolerances follow the accumulation error, not a fixed epsilon: a k-term dot product in a dtype with
unit round-off u is off by at most about k·u·(|A|·|B|) elementwise (Higham, γ_k), whatever order
the kernel sums in. The reference is the float64 product of the same inputs, so float32 results
are judged by their own k-scaled bound. A wrong element misses that bound by orders of magnitude.
"""
from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sympathy as sy
from sympathy import topology

# The module, not the function sy.matmul that shadows it as an attribute of the package.
mm = importlib.import_module("sympathy.matmul")

DTYPES = (np.float64, np.float32)
LAYOUTS = ("c", "transposed", "sliced", "reversed")


def available_isas() -> list[str]:
    simd = topology(with_gpu=False).simd
    isas = ["scalar"]
    if "avx2" in simd and "fma" in simd:
        isas.append("avx2")
    if "avx512f" in simd:
        isas.append("avx512")
    return isas


ISAS = available_isas()


def operand(rng: np.random.Generator, shape: tuple[int, int], dtype, layout: str) -> np.ndarray:
    """A (rows, cols) array laid out as asked: row-major, a transposed view, a strided slice of a
    bigger array, or a view with both strides negative. Values ~N(0,1), so sums cancel."""
    rows, cols = shape
    if layout == "c":
        return rng.standard_normal(shape).astype(dtype)
    if layout == "transposed":
        return rng.standard_normal((cols, rows)).astype(dtype).T
    if layout == "sliced":
        return rng.standard_normal((2 * rows + 1, 3 * cols + 2)).astype(dtype)[1::2, 2::3][:rows, :cols]
    if layout == "reversed":
        return rng.standard_normal(shape).astype(dtype)[::-1, ::-1]
    raise AssertionError(layout)


def assert_matches_reference(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    assert c.shape == (a.shape[0], b.shape[1])
    assert c.dtype == a.dtype
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    reference = a64 @ b64
    k = a.shape[1]
    bound = (k + 2) * np.finfo(a.dtype).eps * (np.abs(a64) @ np.abs(b64)) + np.finfo(a.dtype).tiny
    excess = np.abs(c.astype(np.float64) - reference) - bound
    assert (excess <= 0).all(), f"worst element off by {excess.max():.3g} beyond the k·eps bound"


dims = st.one_of(st.integers(1, 40), st.sampled_from([13, 14, 15, 16, 17, 31, 32, 33, 47, 64, 65]))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("kernel", mm.MATMUL_KERNELS)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=dims, k=dims, n=dims, layout_a=st.sampled_from(LAYOUTS), layout_b=st.sampled_from(LAYOUTS),
       isa=st.sampled_from(ISAS), seed=st.integers(0, 2**32 - 1))
def test_every_kernel_matches_numpy(kernel, dtype, m, k, n, layout_a, layout_b, isa, seed):
    rng = np.random.default_rng(seed)
    a = operand(rng, (m, k), dtype, layout_a)
    b = operand(rng, (k, n), dtype, layout_b)
    assert_matches_reference(sy.matmul(a, b, kernel=kernel, isa=isa), a, b)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 90), k=st.integers(1, 90), n=st.integers(1, 90),
       mc=st.integers(1, 60), kc=st.integers(1, 40), nc=st.integers(1, 80), threads=st.integers(1, 3),
       layout_a=st.sampled_from(LAYOUTS), layout_b=st.sampled_from(LAYOUTS), isa=st.sampled_from(ISAS),
       seed=st.integers(0, 2**32 - 1))
def test_packed_blocks_straddled(dtype, m, k, n, mc, kc, nc, threads, layout_a, layout_b, isa, seed):
    """Tiny MC/KC/NC so small matrices cross every block edge of all five loops, on 1-3 threads."""
    rng = np.random.default_rng(seed)
    a = operand(rng, (m, k), dtype, layout_a)
    b = operand(rng, (k, n), dtype, layout_b)
    c = sy.matmul(a, b, kernel="packed", threads=threads, isa=isa, blocking={"mc": mc, "kc": kc, "nc": nc})
    assert_matches_reference(c, a, b)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_default_blocking_edges(dtype, threads):
    """Shapes one either side of the real MR, NR, KC and MC, with the blocking the machine picks."""
    p = mm.plan(dtype)
    rng = np.random.default_rng(1)
    shapes = [(p["mr"] - 1, p["kc"] + 1, p["nr"] + 1), (p["mr"] + 1, p["kc"] - 1, 2 * p["nr"] - 1),
              (p["mc"] + 1, 2 * p["kc"] + 3, p["nr"] - 1), (p["mc"] - 1, 7, 3 * p["nr"] + 5)]
    for m, k, n in shapes:
        a, b = operand(rng, (m, k), dtype, "c"), operand(rng, (k, n), dtype, "transposed")
        assert_matches_reference(sy.matmul(a, b, kernel="packed", threads=threads), a, b)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("kernel", ["tiled", "simd"])
def test_tiled_rungs_cross_tile_edges(kernel, dtype):
    tile = mm.plan(dtype, kernel)["tile"]
    rng = np.random.default_rng(2)
    for m, k, n in [(3, tile + 1, tile - 1), (tile + 2, 5, tile + 1)]:
        a, b = operand(rng, (m, k), dtype, "sliced"), operand(rng, (k, n), dtype, "c")
        assert_matches_reference(sy.matmul(a, b, kernel=kernel), a, b)
    # A tile smaller than every dimension: many edges in all three loops.
    a, b = operand(rng, (29, 31), dtype, "c"), operand(rng, (31, 23), dtype, "transposed")
    assert_matches_reference(sy.matmul(a, b, kernel=kernel, blocking={"tile": 8}), a, b)


@pytest.mark.parametrize("kernel", mm.MATMUL_KERNELS)
@pytest.mark.parametrize("shape", [(0, 4, 3), (4, 0, 3), (4, 3, 0), (0, 0, 0), (1, 1, 1), (1, 50, 1),
                                   (50, 1, 50), (1, 1, 70)])
def test_empty_and_one_sized_dims(kernel, shape):
    m, k, n = shape
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    c = sy.matmul(a, b, kernel=kernel)
    assert c.shape == (m, n)
    assert_matches_reference(c, a, b)
    if k == 0:
        assert (c == 0).all()


def test_default_kernel_and_threads_and_output_layout():
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((70, 50)), rng.standard_normal((50, 90))
    c = sy.matmul(a, b)
    assert c.flags.c_contiguous and c.flags.owndata
    assert_matches_reference(c, a, b)
    assert np.array_equal(sy.matmul(a, b, threads=2), sy.matmul(a, b, threads=1))


def test_concurrent_calls_are_independent():
    """Reentrancy: each call owns its packing buffers and threads (cffi drops the GIL, so these
    four Python threads really run C at the same time, each with a team of two)."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(7)
    pairs = [(rng.standard_normal((150 + i, 90)), rng.standard_normal((90, 70 + 3 * i))) for i in range(4)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda ab: sy.matmul(*ab, threads=2, blocking={"mc": 28, "kc": 32}), pairs * 3))
    for (a, b), c in zip(pairs * 3, results):
        assert_matches_reference(c, a, b)


def test_inputs_no_pointer_describes_are_copied_not_misread():
    """Big-endian data and strides that are not whole elements (a field of a structured array)."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((20, 30)).astype(">f8")
    record = np.zeros((30, 25), dtype=[("x", "f8"), ("pad", "i1")])
    record["x"] = rng.standard_normal((30, 25))
    b = record["x"]
    assert b.strides[1] % 8 != 0
    c = sy.matmul(a, b)
    assert_matches_reference(c, a.astype(np.float64), np.ascontiguousarray(b))


def test_plan_rounds_blocks_to_whole_panels():
    p = mm.plan(np.float64, blocking={"mc": 15, "nc": 17, "kc": 3})
    assert p["mc"] % p["mr"] == 0 and p["mc"] >= 15
    assert p["nc"] % p["nr"] == 0 and p["nc"] >= 17
    assert p["kc"] == 3
    assert mm.plan(np.float64, isa="scalar")["isa"] == "scalar"


@pytest.mark.skipif("avx512f" in topology(with_gpu=False).simd, reason="this CPU has AVX-512")
def test_missing_isa_is_reported():
    with pytest.raises(sy.NotSupportedError):
        sy.matmul(np.ones((2, 2)), np.ones((2, 2)), isa="avx512")


# ---- the article's pure-Python loops ---------------------------------------------------------
@pytest.mark.parametrize("order", ["ijk", "ikj"])
def test_matmul_python_matches_numpy(order):
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((7, 5)), rng.standard_normal((5, 9))
    from_arrays = sy.matmul_python(a, b, order=order, progress=False)
    from_lists = sy.matmul_python(a.tolist(), b.tolist(), order=order, progress=False)
    assert isinstance(from_arrays, list) and isinstance(from_arrays[0], list)
    assert from_arrays == from_lists
    np.testing.assert_allclose(np.array(from_arrays), a @ b, rtol=1e-12, atol=1e-12)


def test_matmul_python_orders_agree_on_integers():
    a, b = [[1, 2, 3], [4, 5, 6]], [[7, 8], [9, 10], [11, 12]]
    assert sy.matmul_python(a, b, "ijk", False) == sy.matmul_python(a, b, "ikj", False) == \
        [[58.0, 64.0], [139.0, 154.0]]


@pytest.mark.parametrize("bad, error, match", [
    (dict(order="kji"), ValueError, "order must be one of"),
    (dict(b=[[1.0, 2.0]]), ValueError, "columns but b has 1 rows"),
    (dict(a=[[1.0, 2.0], [3.0]]), ValueError, "rectangular"),
    (dict(a=[["x", 2.0], [3.0, 4.0]]), TypeError, "must hold numbers"),
    (dict(a=np.ones(4)), ValueError, "2-D"),
])
def test_matmul_python_rejects_bad_input(bad, error, match):
    args = dict(a=[[1.0, 2.0], [3.0, 4.0]], b=[[1.0], [2.0]], order="ijk") | bad
    with pytest.raises(error, match=match):
        sy.matmul_python(args["a"], args["b"], order=args["order"], progress=False)


# ---- bad input: a clear exception before any C runs ------------------------------------------
@pytest.fixture
def no_c(monkeypatch):
    """Fail loudly if validation lets a call reach the C library."""
    def reached():
        raise AssertionError("bad input reached the C library")
    monkeypatch.setattr(mm, "_lib", reached)


F64 = np.ones((3, 4))
B64 = np.ones((4, 2))


@pytest.mark.parametrize("args, kwargs, error, match", [
    ((np.ones(3), B64), {}, ValueError, "a must be 2-D; got 1-D"),
    ((F64, np.ones((4, 2, 1))), {}, ValueError, "b must be 2-D; got 3-D"),
    ((F64, np.ones((3, 2))), {}, ValueError, r"do not line up: a has 4 columns, b has 3 rows"),
    ((F64.astype(np.int64), B64), {}, TypeError, "a must be float32 or float64; got int64"),
    ((F64, B64.astype(np.float16)), {}, TypeError, "b must be float32 or float64; got float16"),
    ((F64, B64.astype(np.complex128)), {}, TypeError, "b must be float32 or float64"),
    ((F64, B64.astype(np.float32)), {}, TypeError, "share a dtype; got float64 and float32"),
    ((F64, B64), dict(kernel="blas"), ValueError, "kernel must be one of"),
    ((F64, B64), dict(threads=0), ValueError, r"threads must be in \[1, 256\]; got 0"),
    ((F64, B64), dict(threads=257), ValueError, r"threads must be in \[1, 256\]; got 257"),
    ((F64, B64), dict(threads=1.5), TypeError, "threads must be an int or None; got float"),
    ((F64, B64), dict(threads=True), TypeError, "threads must be an int or None; got bool"),
    ((F64, B64), dict(kernel="ijk", threads=2), ValueError, "threads > 1 needs kernel='packed'"),
    ((F64, B64), dict(isa="neon"), ValueError, "isa must be one of"),
    ((F64, B64), dict(blocking={"mr": 4}), ValueError, "blocking keys must be among"),
    ((F64, B64), dict(blocking={"kc": 0}), ValueError, r"blocking\['kc'\] must be an int in \[1, 65536\]"),
    ((F64, B64), dict(blocking={"mc": 1 << 17}), ValueError, r"blocking\['mc'\] must be an int"),
])
def test_bad_input_raises_before_c(no_c, args, kwargs, error, match):
    with pytest.raises(error, match=match):
        sy.matmul(*args, **kwargs)


# ---- the tooling around the kernels: cachegrind cases, the bench suite, the demo ---------------
def test_cachegrind_cases_name_each_kernel_and_collect_only_in_c():
    import argparse

    parser = argparse.ArgumentParser()
    mm.cachegrind_arguments(parser)
    args = parser.parse_args(["--kernel", "ijk", "packed", "--n", "64", "--dtype", "float32", "--threads", "2"])
    cases = mm.cachegrind_cases(args)
    assert [label for label, _ in cases] == ["ijk n=64 float32", "packed n=64 float32 2 threads"]
    for _, kwargs in cases:
        assert kwargs["functions"] == ["sy_matmul*"]
        namespace: dict = {}
        exec(kwargs["setup"], namespace)  # the setup really makes the operands the call uses
        result = eval(kwargs["call"], namespace)
        assert_matches_reference(result, namespace["a"], namespace["b"])
    with pytest.raises(SystemExit):
        parser.parse_args(["--n", "0"])


def test_bench_suite_races_every_rung_against_numpy():
    import argparse

    from sympathy.bench.core import run_suite
    from sympathy.bench.suites.matmul import SUITE

    parser = argparse.ArgumentParser()
    SUITE.add_arguments(parser)
    args = parser.parse_args(["--n", "40", "--threads", "1", "2", "--repeat", "1"])
    results = run_suite(SUITE, args, quiet=True)
    one = [r for r in results.rows if r.group == "n=40 float64 1T"]
    assert [r.variant for r in one] == ["numpy", *mm.MATMUL_KERNELS]
    assert [r.variant for r in results.rows if r.group == "n=40 float64 2T"] == ["numpy", "packed"]
    assert all(r.ratio and r.ratio > 0 and r.metrics["GFLOPS"] > 0 for r in results.rows)
    assert one[1].metrics["x_ijk"] == pytest.approx(1.0)
    assert not any("WRONG" in note for note in results.notes)


def test_demo_runs_small(tmp_path, monkeypatch, capsys):
    demo = importlib.import_module("sympathy.demos.matmul")
    monkeypatch.chdir(tmp_path)
    demo.main(["--python-n", "6", "--n", "24"])
    out = capsys.readouterr().out
    assert "packed" in out and "numpy (OpenBLAS)" in out
    assert (tmp_path / "sympathy-demo-output" / "matmul.png").read_bytes()[:4] == b"\x89PNG"
