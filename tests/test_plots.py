"""Every chart renders with units on its axes, its anchor marked, nothing cut and nothing overlapping.

Each suite's plot() runs on synthetic rows shaped like a real run's; every figure saved is checked
by sympathy.bench.plots.layout_problems before it is written, and matplotlib's layout warnings fail.
"""
import argparse
import warnings

import pytest
from matplotlib.figure import Figure

from sympathy.bench import Results
from sympathy.bench.core import available_suites
from sympathy.bench.plots import layout_problems

SUITES = available_suites()


@pytest.fixture
def checked_savefig(monkeypatch):
    """Figure.savefig that records the layout problems of each figure it writes."""
    problems = {}
    save = Figure.savefig

    def checking(fig, path, *args, **kwargs):
        problems[str(path)] = layout_problems(fig)
        return save(fig, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", checking)
    return problems


def _matmul(results):
    for n in (512, 2048):
        for i, variant in enumerate(["numpy", "ijk", "ikj", "jik", "jki", "kij", "kji", "tiled", "simd", "packed"]):
            results.add(f"n={n} float64 1T", variant, anchor=variant == "numpy", params={"n": n},
                        GFLOPS=0.4 * 1.9 ** i)


def _lab(results):
    for size in (4096 * 2 ** k for k in range(16)):
        for pattern, ns in (("random", 1.7 + size / 2**20), ("sequential", 1.7)):
            results.add(f"chase {size}", pattern, params={"experiment": "latency", "size": size, "pattern": pattern},
                        ns=ns)
    for kernel in ("copy", "scale", "add", "triad"):
        for variant, gbs in (("NumPy", 20.0), ("C, 1 thread", 21.0), ("C, 2 threads", 38.0)):
            results.add(f"STREAM {kernel}, 512 MiB x3", variant, anchor=variant == "NumPy",
                        params={"experiment": "bandwidth"}, ns=16 / gbs, **{"GB/s": gbs})
    for increment in ("rmw", "store"):
        for pinned in ("pinned", "unpinned"):
            for spacing, ns in (("8 B (one line)", 30.0), ("64 B (adjacent lines)", 6.0), ("128 B (line pair)", 6.0)):
                results.add(f"false sharing, {increment}, 2 threads, {pinned}", spacing, anchor="128" in spacing,
                            params={"experiment": "false-sharing"}, ns=ns)
    for kind, ns in (("register", 0.34), ("volatile", 0.34), ("atomic_relaxed", 6.1), ("atomic_seq_cst", 6.1),
                     ("store_release", 0.34), ("store_seq_cst", 10.4)):
        results.add("counter loop", kind, anchor=kind == "register", params={"experiment": "counter"}, ns=ns)
    for stride in (1, 2, 4, 8, 16, 32, 64, 128):
        results.add("strides, 1 GiB uint32", f"stride {stride}", anchor=stride == 1,
                    params={"experiment": "strides", "stride": stride}, ns=1e8 / max(1, stride // 16))


def _attention_cpu(results):
    for d in (64, 128):
        for causal in (False, True):
            for n in (512, 2048, 4096):
                for variant, gflops in (("torch-sdpa", 60.0), ("sympathy-cpu", 70.0), ("numpy-naive", 20.0)):
                    results.add(f"d={d} N={n}" + (" causal" if causal else ""), variant,
                                anchor=variant == "torch-sdpa", params={"d": d, "n": n, "causal": causal},
                                **{"GFLOP/s": gflops})


def _attention_gpu(results):
    for d in (64, 128):
        for causal in (False, True):
            for backward in (False, True):
                for n in (1024, 4096):
                    for variant in ("sdpa-flash", "sdpa-cudnn", "mma", "hopper"):
                        results.add(f"d={d} N={n}" + (" fwd+bwd" if backward else ""), variant,
                                    anchor=variant == "sdpa-flash",
                                    params={"d": d, "N": n, "causal": causal, "backward": backward},
                                    **{"TFLOP/s": 300.0})


def _attention_decode(results):
    for variant, tbps in (("read (triton kernel)", 3.1), ("read (torch.sum)", 3.0), ("copy (read + write)", 3.0)):
        results.add("streaming ceiling (read 4 GiB)", variant, params={"kind": "ceiling"}, **{"TB/s": tbps, "time_us": 1e3})
    for B, Hkv, N in ((1, 8, 8192), (8, 8, 8192), (1, 8, 131072), (32, 8, 4096), (8, 32, 16384)):
        for variant in ("sympathy", "sympathy paged (page 256, shuffled)", "sdpa-cudnn", "sdpa-flash"):
            results.add(f"decode B={B} Hkv={Hkv} N={N}", variant, anchor=variant == "sdpa-cudnn",
                        params={"kind": "decode", "B": B, "Hkv": Hkv, "N": N}, **{"TB/s": 2.8, "time_us": 100.0})
    for variant in ("sympathy", "sympathy, cache_seqlens a tensor (decode kernel)", "sdpa-cudnn",
                    "sdpa-flash (no mask: it takes none; a lower bound)"):
        results.add("chunk 512 queries over N=32768, causal", variant, anchor=variant == "sdpa-cudnn",
                    params={"kind": "chunk"}, **{"TFLOP/s": 400.0, "time_us": 700.0})


def _ring(results):
    # The groups of a full run, in order (the ping-pong group has no items/s and gets no panel).
    c_shape = ["mutex+condvar queue", "ring busy_spin", "ring yield", "ring blocking"]
    groups = [*((f"C {shape}", c_shape) for shape in ("unicast 1P-1C", "pipeline 1P-3C", "multicast 1P-3C",
                                                      "diamond 1P-3C", "3P-1C")),
              ("C false-sharing ablation (the ring, SPSC, per item)",
               ["packed 8 B apart (one line)", "64 B apart", "128 B apart (the ring's layout)"]),
              ("Python threads, per item", ["queue.Queue", "collections.deque (polling)", "sy.RingBuffer"]),
              ("Python threads, batches of 1024",
               ["queue.Queue (arrays)", "collections.deque (arrays, polling)", "sy.RingBuffer"]),
              ("Python ONE thread, batches of 1024 (no handoff: the cost of a batch)",
               ["queue.Queue put(fresh array) + get", "sy.RingBuffer publish_batch + get_batch"]),
              ("Python processes, per item",
               ["multiprocessing.Queue", "multiprocessing.Pipe", "faster-fifo", "sy.RingBuffer (shm)"]),
              ("Python processes, batches of 1024", ["multiprocessing.Queue (arrays)", "multiprocessing.Pipe (bytes)",
                                                     "faster-fifo (arrays)", "sy.RingBuffer (shm)"])]
    for group, variants in groups:
        for i, variant in enumerate(variants):
            results.add(group, variant, anchor=i == 0, **{"items/s": 1e6 * 10 ** i})


def _pipeline(results):
    results.add("objects: dict of 5 fields, 1 -> 1 process, items/s", "multiprocessing.Queue", anchor=True,
                **{"per s": 3.8e4})
    results.add("objects: dict of 5 fields, 1 -> 1 process, items/s", "faster-fifo: not installed (pip install "
                "sympathy[bench])")
    results.add("objects: dict of 5 fields, 1 -> 1 process, items/s", "sy.Queue", **{"per s": 1.2e5})
    frames = "frames: 1920x1080 RGB uint8 (6.2 MB), 1 -> 1 process, frames/s"
    for i, variant in enumerate(["single-thread memcpy into a 128 MB pool (no transport)", "multiprocessing.Queue",
                                 "shared_memory + Queue of names (zero-copy)", "sy.Queue",
                                 "sy.RingBuffer claim/view_batch (zero-copy)"]):
        results.add(frames, variant, anchor=i == 1, **{"per s": 20.0 * 3 ** (4 - i), "GB/s": 0.12 * 3 ** (4 - i)})
    for n in (1, 2, 4):
        group = f"workers: 1 producer -> {n} workers, 50 us tasks, tasks/s"
        for i, variant in enumerate(["ideal: min(N, 2 CPUs) x serial rate", "multiprocessing.Queue",
                                     "multiprocessing.Pool imap_unordered", "sy.Queue"]):
            results.add(group, variant, anchor=i == 1, **{"per s": 2e4 / (1 + i)})


ROWS = {"matmul": _matmul, "lab": _lab, "attention-cpu": _attention_cpu, "attention-gpu": _attention_gpu,
        "attention-decode": _attention_decode, "ring": _ring, "pipeline": _pipeline}


@pytest.mark.parametrize("name", sorted(SUITES))
def test_every_chart_of_every_suite_is_readable(name, tmp_path, checked_savefig):
    suite = SUITES[name]
    if name not in ROWS:
        pytest.fail(f"suite {name} has no synthetic rows in tests/test_plots.py: add them so its charts are checked")
    results = Results(suite, argparse.Namespace(), quiet=True)
    ROWS[name](results)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # matplotlib's "layout not applied" and friends
        paths = suite.plot(results, tmp_path)
    assert paths and all(p.is_file() for p in paths)
    assert {str(p) for p in paths} <= set(checked_savefig)
    bad = {path: found for path, found in checked_savefig.items() if found}
    assert not bad, bad


def test_the_checker_sees_a_legend_over_a_bar_and_a_missing_unit():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.bar([0, 1], [10, 10], label="a long legend entry that sits on the bars")
    ax.legend(loc="center")
    problems = layout_problems(fig)
    plt.close(fig)
    assert any("legend covers data" in p for p in problems)
    assert any("no label" in p for p in problems)


def test_the_checker_sees_a_title_cut_at_the_edge():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([1, 2], [1, 2])
    ax.set_ylabel("ns")
    ax.set_title("a title far too long for a figure two inches wide")
    problems = layout_problems(fig)
    plt.close(fig)
    assert any("cut at the figure's edge" in p for p in problems)
