"""The seed documents' examples (see docs/seeds.md): the numbers our code reproduces exactly, and the
cache effect of the article's own Python loops asserted with cachegrind's (deterministic) counts."""
import math
import shutil

import numpy as np
import pytest

import sympathy as sy
from sympathy.demos import article_matmul, slides
from sympathy.softmax import SLIDE_K, SLIDE_Q, SLIDE_V

# The closing summary the article pasted for matmul_inefficient.py (seed 000), trimmed.
ARTICLE_SUMMARY = """==253768== I   refs:      314,734,342,652
==253768== I1  misses:          5,738,193
==253768== LLi misses:            870,629
==253768== I1  miss rate:            0.00%
==253768== D   refs:      150,606,141,341  (105,453,303,262 rd   + 45,152,838,079 wr)
==253768== D1  misses:        622,837,260  (    616,546,831 rd   +      6,290,429 wr)
==253768== LLd misses:          2,065,607  (      1,493,478 rd   +        572,129 wr)
==253768== D1  miss rate:             0.4% (            0.6%     +            0.0%  )
"""


def test_summary_parser_reads_the_articles_table():
    got = article_matmul.parse_cachegrind_summary(ARTICLE_SUMMARY)
    want = article_matmul.ARTICLE["matmul_inefficient.py"]
    for key in ("I refs", "I1 misses", "D refs", "D1 misses", "LLd misses"):
        assert got[key] == want[key]
    # the article's rounded rates follow from its counts
    assert round(100 * got["D1 misses"] / got["D refs"], 1) == 0.4
    eff = article_matmul.ARTICLE["matmul_efficient.py"]
    assert round(100 * eff["D1 misses"] / eff["D refs"], 1) == 0.1


def test_article_program_is_the_articles_text():
    text = article_matmul.article_program(500, article_matmul.INEFFICIENT)
    assert "n = 500\n" in text and "C = [[0 for row in range(n)]" in text
    assert "for i in tqdm(range(n)):\n    for j in range(n):\n        for k in range(n):\n" \
           "            C[i][j] += A[i][k] * B[k][j]" in text
    compile(text, "matmul_inefficient.py", "exec")
    compile(article_matmul.article_program(500, article_matmul.EFFICIENT), "matmul_efficient.py", "exec")


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind not installed")
def test_article_loops_under_cachegrind_ijk_misses_more(tmp_path):
    """The article's two scripts, whole process, n=100: ijk's column walk of B misses D1 more often
    (the article, n=500: 622.8 M vs 218.5 M). Same start-up in both, so the difference is the loop's.
    The simulated caches are fixed (a 32 KiB 8-way D1, the commonest): the host's own differ between
    machines (at n=80 a 48 KiB D1 held enough of B's column walk to shrink the difference below the bound)."""
    caches = ("--I1=32768,8,64", "--D1=32768,8,64", "--LL=8388608,16,64")
    runs = {}
    for name, loops in (("ijk", article_matmul.INEFFICIENT), ("ikj", article_matmul.EFFICIENT)):
        script = tmp_path / f"matmul_{name}.py"
        script.write_text(article_matmul.article_program(100, loops))
        runs[name] = article_matmul.run_under_cachegrind(script, tmp_path, caches)
    extra = runs["ijk"]["D1 misses"] - runs["ikj"]["D1 misses"]
    assert extra > 0.2 * runs["ikj"]["D1 misses"]
    # same arithmetic, so about the same instructions (tqdm's clock-driven redraws and the garbage
    # collector add a few percent either way under valgrind's slow clock)
    assert 0.8 < runs["ijk"]["I refs"] / runs["ikj"]["I refs"] < 1.25


def test_slide_recurrence_as_written():
    steps, o = slides.slide_recurrence(SLIDE_Q, SLIDE_K, SLIDE_V[:, 0])
    e1, e2, e3 = math.exp(1), math.exp(2), math.exp(3)
    assert o == pytest.approx((2 * e1 + 4 * e2 + 8 * e3) / (e1 + e2 + e3), rel=1e-15)
    assert round(o, 4) == 6.4809
    assert [s["D_b"] for s in steps] == pytest.approx([e1, e2, e3], rel=1e-15)
    assert [s["N_b"] for s in steps] == pytest.approx([2 * e1, 4 * e2, 8 * e3], rel=1e-15)
    assert steps[-1]["D"] == pytest.approx(e1 + e2 + e3, rel=1e-15)
    # the slide's form has no running max: large scores overflow where FlashAttention's does not
    _, big = slides.slide_recurrence(SLIDE_Q, SLIDE_K * 400.0, SLIDE_V[:, 0])
    assert math.isnan(big)


def test_unfused_pipeline_equals_fused_kernel():
    rng = np.random.default_rng(3)
    n, d = 96, 16
    q, k, v = (rng.standard_normal((n, d), dtype=np.float32) for _ in range(3))
    out, log = slides.unfused_pipeline(q, k, v, 1 / math.sqrt(d))
    assert [name.split()[0] for name, *_ in log] == ["Matmul_op", "Mask_op", "Softmax_op", "O"]
    # every N x N intermediate is written once and read once: 3 writes, 3 reads of n*n*4 bytes
    assert sum(w for *_, w in log) == 3 * n * n * 4 + n * d * 4
    fused = sy.attention.cpu(*(x.reshape(1, 1, n, d) for x in (q, k, v)), is_causal=True, threads=1)
    np.testing.assert_allclose(fused.reshape(n, d), out, atol=2e-5)
    ref = sy.attention.reference(*(x.reshape(1, 1, n, d).astype(np.float64) for x in (q, k, v)), is_causal=True)
    np.testing.assert_allclose(out, ref.reshape(n, d), atol=2e-5)


@pytest.mark.skipif(shutil.which("valgrind") is None or shutil.which("cc") is None, reason="needs valgrind and cc")
def test_instruction_locality_i1_misses(tmp_path):
    """Same calls, same instructions: code spread over more than I1 misses on every call, hot code never."""
    from sympathy.demos import locality

    binary = locality.build(tmp_path, 2048)
    calls = 50_000
    hot = locality.cachegrind_counts(binary, 1, calls, tmp_path)
    spread = locality.cachegrind_counts(binary, 2048, calls, tmp_path)
    assert abs(hot["I refs"] - spread["I refs"]) < 0.05 * hot["I refs"]
    assert hot["I1 misses"] / calls < 0.05
    assert spread["I1 misses"] / calls > 2.0


def test_latency_benches_fill_every_sample():
    """The C latency modes (ring and mutex queue, ping-pong and one-way) time every item; values are
    checked in C (a wrong echo is an error status)."""
    import os

    from sympathy.demos import latency

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("spin-waiting pairs need two CPUs")
    for kind in ("ring busy_spin", "ring blocking", "mutex queue"):
        rtt = latency.pingpong(kind, 2_000)
        assert rtt.shape == (1_800,) and (rtt > 0).all()
        one = latency.oneway(kind, 2_000, 1_000)
        assert one.shape == (1_800,) and (one >= 0).all()
        p = latency.percentiles(rtt)
        assert p["p50"] <= p["p99"] <= p["p99.9"] <= p["max"]


def test_latency_bench_refuses_bad_counts():
    from sympathy._ring import ffi, lib

    out = np.zeros(4, np.int64)
    ptr = ffi.cast("int64_t *", ffi.from_buffer(out))
    assert lib.sy_bench_mutex_pingpong(0, ffi.NULL, 0, ptr) != 0
    assert lib.sy_bench_oneway(1, 0, 0, 0, ffi.NULL, 0, ptr) != 0
    assert lib.sy_bench_oneway(0, 0, 4, -1, ffi.NULL, 0, ptr) != 0


def test_pinning_demo_counts_context_switches_and_names_root_needs(capsys):
    import os

    from sympathy.demos import pinning

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("spin-waiting pairs need two CPUs")
    r = pinning.measure(20_000, pin=True)
    assert r["items/s"] > 0 and r["voluntary"] >= 0 and r["involuntary"] >= 0
    rows = {tool: needs for tool, _, _, needs in pinning.commands_for_this_machine([0, 1, 2, 3])}
    assert rows["isolcpus="] == "root and a reboot" and rows["cset shield"].startswith("root")
    assert "isolcpus=2,3" in pinning.commands_for_this_machine([0, 1, 2, 3])[0][2]
    pinning.main(["--items", "20000", "--repeat", "1"])
    out = capsys.readouterr().out
    assert "busy process on CPU" in out and "involuntary" in out


@pytest.mark.parametrize("demo, argv", [
    ("softmax", []),
    ("slides", ["--n", "128", "--memory-n", "128"]),
    ("locality", ["--calls", "2000", "--native-calls", "2000"]),
    ("latency", ["--rounds", "200", "--items", "200", "--interval-ns", "1000", "--no-plot"]),
    ("flash_claims", ["--sizes", "64", "--threads", "1"]),
    ("article_matmul", ["--n", "8", "--c-n", "32"]),
])
def test_seed_demos_run_with_small_sizes(capsys, demo, argv):
    """Every seed demo runs end to end (small sizes) and prints the seed's own figure beside ours."""
    import importlib
    import os

    if demo in ("locality", "article_matmul") and shutil.which("valgrind") is None:
        pytest.skip("needs valgrind")
    if demo == "latency" and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("spin-waiting pairs need two CPUs")
    if demo == "flash_claims":
        pytest.importorskip("torch")
    importlib.import_module(f"sympathy.demos.{demo}").main(argv)
    out = capsys.readouterr().out
    seed_figure = {"softmax": "0.8176, 0.1824", "slides": "6.480903", "locality": "I1 misses",
                   "latency": "99%", "flash_claims": "17.4", "article_matmul": "461%"}[demo]
    assert seed_figure in out
