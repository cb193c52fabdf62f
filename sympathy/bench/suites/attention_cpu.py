"""`sympathy bench attention-cpu`: FlashAttention's forward pass on the CPU, float32.

Three variants race in one run, at each head_dim and sequence length:
  torch-sdpa     torch.nn.functional.scaled_dot_product_attention on the CPU (the anchor: torch's
                 own flash-attention CPU kernel, blocked GEMMs)
  sympathy-cpu   sy.attention.cpu, the C kernel (c_src/attention.c)
  numpy-naive    the definition: the N×N scores materialised per head, softmax in place, P·V,
                 BLAS through NumPy limited to the same thread count

Figures: median time, GFLOP/s (4·B·H·N²·d forward, halved for causal, as FlashAttention counts),
and the peak extra memory, measured: the process's resident high-water mark (VmHWM, reset through
/proc/self/clear_refs) during one call, minus the resident size before it. Inputs and the output
buffer exist before the call (the C kernel and the naive path write into a given `out`; torch
allocates its own, whose size is subtracted), so the figure is the working memory of the algorithm.
"""
from __future__ import annotations

import argparse
import gc
import math
import os
from pathlib import Path

import numpy as np

from ..core import Results, Suite
from ..timing import time_call

QUICK_SIZES = (512, 2048, 4096)
FULL_SIZES = (512, 1024, 2048, 4096, 8192, 16384)


# ---- measuring memory ------------------------------------------------------------------------------
def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_high_water() -> bool:
    """Linux: writing 5 to clear_refs resets VmHWM to the current resident size."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_extra_bytes(fn) -> float:
    """Resident memory the call needed beyond what the process held before it (NaN off Linux)."""
    gc.collect()
    before = _status_kib("VmRSS")
    if before is None or not _reset_high_water():
        return math.nan
    fn()
    peak = _status_kib("VmHWM")
    return math.nan if peak is None else max(0, peak - before) * 1024.0


def _variant(name: str, q, k, v, out, is_causal: bool, threads: int):
    """The call a variant makes, and the bytes of any output it allocates itself."""
    if name == "torch-sdpa":
        import torch

        tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
        sdpa = torch.nn.functional.scaled_dot_product_attention
        return (lambda: sdpa(tq, tk, tv, is_causal=is_causal)), out.nbytes
    if name == "sympathy-cpu":
        from ... import attention

        return (lambda: attention.cpu(q, k, v, is_causal=is_causal, threads=threads, out=out)), 0
    if name == "numpy-naive":
        scale = 1.0 / math.sqrt(q.shape[-1])
        return (lambda: naive_attention(q, k, v, out, is_causal, scale)), 0
    raise ValueError(f"unknown variant {name!r}")


def measure_memory_in_child(name: str, shape: tuple[int, int, int, int], is_causal: bool, threads: int) -> float:
    """Peak extra memory of one call, measured in a fresh interpreter so that no allocator cache
    from earlier calls hides it. A tiny call first loads libraries and starts thread pools (BLAS
    buffers, OpenMP workers), which the measured call then does not pay for."""
    import json
    import subprocess
    import sys

    code = ("import json, sys; from sympathy.bench.suites.attention_cpu import _child_main; "
            "print(json.dumps(_child_main(*json.loads(sys.argv[1]))))")
    arg = json.dumps([name, list(shape), is_causal, threads])
    from ...config import package_parent

    done = subprocess.run([sys.executable, "-c", code, arg], capture_output=True, text=True, timeout=900,
                          cwd=package_parent())
    if done.returncode != 0:
        print(f"memory probe of {name} {shape} failed (exit {done.returncode}): {done.stderr[-500:]}",
              file=sys.stderr)
        return math.nan
    return float(json.loads(done.stdout.strip().splitlines()[-1]))


def _child_main(name: str, shape: list[int], is_causal: bool, threads: int) -> float:
    from threadpoolctl import threadpool_limits

    try:
        import torch

        torch.set_num_threads(threads)
    except ImportError:
        pass
    rng = np.random.default_rng(0)
    with threadpool_limits(threads):
        tiny = (1, 1, 16, shape[3])
        warm = [rng.standard_normal(tiny, dtype=np.float32) for _ in range(4)]
        fn, _ = _variant(name, *warm, is_causal, threads)
        fn()
        q, k, v = (rng.standard_normal(tuple(shape), dtype=np.float32) for _ in range(3))
        out = np.zeros(tuple(shape), dtype=np.float32)
        out.fill(0.0)            # resident before the call: writing it is not the call's extra memory
        fn, output_bytes = _variant(name, q, k, v, out, is_causal, threads)
        return peak_extra_bytes(fn) - output_bytes


# ---- the variants ------------------------------------------------------------------------------------
def naive_attention(q, k, v, out, is_causal: bool, scale: float) -> np.ndarray:
    """softmax(scale · q kᵀ) v with the N×N scores materialised, one (batch, head) at a time, in place
    wherever NumPy allows (so its memory is one N×N float32 matrix, not several)."""
    n_q, n_kv = q.shape[2], k.shape[2]
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            s = q[b, h] @ k[b, h].T                       # (Nq, Nk) float32: the O(N²) buffer
            s *= np.float32(scale)
            if is_causal:                                 # top-left: key j > query i is hidden
                for i0 in range(0, n_q, 1024):
                    rows = np.arange(i0, min(i0 + 1024, n_q))[:, None]
                    s[i0:i0 + 1024][np.arange(n_kv)[None, :] > rows] = -np.inf
            s -= s.max(axis=1, keepdims=True)
            np.exp(s, out=s)
            s /= s.sum(axis=1, keepdims=True)
            np.matmul(s, v[b, h], out=out[b, h])
    return out


class AttentionCpuSuite(Suite):
    title = "Attention forward on the CPU, float32: C kernel vs NumPy naive vs torch SDPA"
    primary = "GFLOP/s"
    higher_is_better = True
    columns = ("time_s", "GFLOP/s", "extra_MiB", "spread")
    ratio_label = "× torch"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        from ..core import causal_argument, positive_int

        parser.add_argument("--sizes", type=positive_int, nargs="+", default=None,
                            help=f"sequence lengths N (default: {' '.join(map(str, QUICK_SIZES))}; "
                                 f"--full: {' '.join(map(str, FULL_SIZES))})")
        parser.add_argument("--full", action="store_true", help="N from 512 to 16384")
        parser.add_argument("--head-dims", type=positive_int, nargs="+", default=[64, 128], help="head dims d")
        parser.add_argument("--threads", type=positive_int, default=2,
                            help="threads of every variant (torch, the C kernel, NumPy's BLAS), pinned")
        parser.add_argument("--batch", type=positive_int, default=1, help="batch size B")
        parser.add_argument("--heads", type=positive_int, default=4, help="heads H")
        causal_argument(parser, default="no")
        parser.add_argument("--repeat", type=positive_int, default=3, help="timed samples per figure (median)")
        parser.add_argument("--no-naive", action="store_true", help="skip the NumPy naive path")

    def run(self, args: argparse.Namespace, results: Results) -> None:
        from threadpoolctl import threadpool_limits

        from ...affinity import pinned

        try:
            import torch
        except ImportError:
            torch = None
            results.note("torch is not installed: no anchor, ratios are empty")
        if torch is not None:
            torch.set_num_threads(args.threads)
        sizes = args.sizes or (FULL_SIZES if args.full else QUICK_SIZES)
        usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(args.threads))
        cpus = usable[:args.threads]
        if len(cpus) < args.threads:
            results.note(f"{args.threads} threads asked for, {len(cpus)} CPUs usable: threads share cores")
        from ..core import CAUSAL_CHOICES

        rng = np.random.default_rng(0)
        cases = [(d, n, causal) for d in args.head_dims for n in sizes for causal in CAUSAL_CHOICES[args.causal]]
        with pinned(cpus), threadpool_limits(args.threads):
            for d, n, causal in results.progress(cases, desc="attention-cpu"):
                shape = (args.batch, args.heads, n, d)
                q, k, v = (rng.standard_normal(shape, dtype=np.float32) for _ in range(3))
                out = np.empty(shape, dtype=np.float32)
                # The FLOP count FlashAttention reports: QKᵀ and PV, 2·N²·d each per head; causal halves it.
                flops = 4.0 * args.batch * args.heads * n * n * d / (2 if causal else 1)
                group = f"d={d} N={n}" + (" causal" if causal else "")
                params = {"d": d, "n": n, "causal": causal, "threads": args.threads}
                names = (["torch-sdpa"] if torch is not None else []) + ["sympathy-cpu"] + \
                        ([] if args.no_naive else ["numpy-naive"])
                reference = None
                for name in names:
                    fn, _ = _variant(name, q, k, v, out, causal, args.threads)
                    result = fn()
                    result = result.numpy() if hasattr(result, "numpy") else np.array(result)
                    # verified outside the timing: every variant must agree with the first
                    if reference is None:
                        reference = result
                    elif not np.allclose(result, reference, atol=2e-4, rtol=1e-3):
                        results.note(f"{group}: {name} disagrees with {names[0]} "
                                     f"(max diff {np.abs(result - reference).max():.3g})")
                    timing = time_call(fn, repeat=args.repeat, warmup=0)
                    extra = measure_memory_in_child(name, shape, causal, args.threads)
                    results.add(group, name, anchor=name == "torch-sdpa", params=params, time_s=timing.median,
                                **{"GFLOP/s": flops / timing.median / 1e9,
                                   "extra_MiB": max(0.0, extra) / 2**20, "spread": timing.spread})
                del q, k, v, out, reference
        results.note("extra_MiB: measured in a fresh process per variant: resident high-water mark during "
                     "one call minus the resident size before it (inputs and output buffer already "
                     "allocated; torch's own output subtracted)")

    def plot(self, results: Results, outdir: Path) -> list[Path]:
        from .. import plots

        paths = []
        for d in sorted({r.params["d"] for r in results.rows}):
            series: dict[str, tuple[list[float], list[float]]] = {}
            for r in results.rows:
                if r.params["d"] != d:
                    continue
                xs, ys = series.setdefault(r.variant + (", causal" if r.params["causal"] else ""), ([], []))
                xs.append(r.params["n"])
                ys.append(r.metrics["GFLOP/s"])
            paths.append(plots.lines(series, outdir / f"{self.name}-d{d}.png",
                                     title=f"attention forward, float32, d={d}", xlabel="sequence length N",
                                     ylabel="GFLOP/s", logx=True))
        return paths


SUITE = AttentionCpuSuite()
