"""Seed 001's slides: the unfused pipeline (mask as its own kernel), the softmax denominator problem's D/N recurrence.

  1. "What was happening so far": Matmul_op, Mask_op, Softmax_op (and the P·V product), each a
     separate kernel that reads its input from memory and writes its N x N result back; the bytes
     each moves, its time, and the fused kernel (sy.attention.cpu, causal) that writes no N x N array.
  2. "The softmax denominator problem": Q=[1], K=[1,2,3], V=[2,4,8]; O = N/D computed one element
     at a time with the slide's recurrence D_b, N_b, O = (D*O + N_b)/(D + D_b), next to
     FlashAttention's max-subtracted (m, l, acc) and our C kernel; and where the slide's form overflows.
  3. Memory linear in N (the slides' "Space: O(N*d)"): extra memory of the pipeline and of the
     fused kernel, each measured in a fresh process, at growing N.
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np

SLIDE_EXACT = (2 * math.e + 4 * math.e**2 + 8 * math.e**3) / (math.e + math.e**2 + math.e**3)


# ---- 1. the slide's three kernels, each a round trip through memory ------------------------------------
def matmul_op(q: np.ndarray, k: np.ndarray, scale: float) -> np.ndarray:
    """a. read Q, K; b. A = Q K^T; c. write A (N x N)."""
    return (q @ k.T) * np.float32(scale)


def mask_op(a: np.ndarray) -> np.ndarray:
    """a. read A; b. mask A into A' (causal: key j > query i gets -inf); c. write A'."""
    n = a.shape[0]
    return np.where(np.tri(n, a.shape[1], dtype=bool), a, np.float32(-np.inf))


def softmax_op(a_masked: np.ndarray) -> np.ndarray:
    """a. read A'; b. softmax A' into A''; c. write A''."""
    m = a_masked.max(axis=1, keepdims=True)
    e = np.exp(a_masked - m)
    return e / e.sum(axis=1, keepdims=True)


def unfused_pipeline(q, k, v, scale):
    """The four kernels in order; returns (output, [(kernel, seconds, bytes read, bytes written)])."""
    n, d = q.shape
    b = q.itemsize
    log = []
    t0 = time.perf_counter()
    a = matmul_op(q, k, scale)
    log.append(("Matmul_op A = Q K^T", time.perf_counter() - t0, 2 * n * d * b, n * n * b))
    t0 = time.perf_counter()
    a_masked = mask_op(a)
    log.append(("Mask_op A' = mask(A)", time.perf_counter() - t0, n * n * b, n * n * b))
    t0 = time.perf_counter()
    p = softmax_op(a_masked)
    log.append(("Softmax_op A'' = softmax(A')", time.perf_counter() - t0, n * n * b, n * n * b))
    t0 = time.perf_counter()
    out = p @ v
    log.append(("O = A'' V", time.perf_counter() - t0, n * n * b + n * d * b, n * d * b))
    return out, log


# ---- 2. the slide's recurrence, as written ----------------------------------------------------------------
def slide_recurrence(q, k, v) -> tuple[list[dict], float]:
    """D = 0, O = 0; for each element (a block of one): D_b = exp(Q·K[i]), N_b = V[i]·D_b,
    O = (D·O + N_b) / (D + D_b), D = D + D_b. No max is subtracted (the slide's form)."""
    D, O = 0.0, 0.0
    steps = []
    for i in range(len(k)):
        with np.errstate(over="ignore", invalid="ignore"):
            D_b = float(np.exp(np.float64(np.dot(q, k[i]))))
            N_b = float(v[i]) * D_b
            O_new = (D * O + N_b) / (D + D_b) if math.isfinite(D + D_b) else float("nan")
        steps.append({"i": i, "D_b": D_b, "N_b": N_b, "O": O_new, "D": D + D_b})
        D, O = D + D_b, O_new
    return steps, O


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def main(argv: list[str] | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    import sympathy as sy
    from sympathy.bench.suites.attention_cpu import measure_memory_in_child
    from sympathy.softmax import SLIDE_K, SLIDE_Q, SLIDE_V, online_attention_steps

    parser = argparse.ArgumentParser(prog="sympathy demo slides", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2048, help="sequence length of the pipeline (default 2048)")
    parser.add_argument("--d", type=int, default=64, help="head dimension (default 64)")
    parser.add_argument("--memory-n", type=int, nargs="+", default=[1024, 2048, 4096],
                        help="sequence lengths of the memory measurement (default 1024 2048 4096)")
    args = parser.parse_args(argv)
    if args.n < 1 or args.d < 1 or min(args.memory_n) < 1:
        parser.error("--n, --d and --memory-n must be >= 1")
    console = Console()

    # 1. the unfused pipeline
    n, d = args.n, args.d
    console.rule(f"1. Seed 001: the unfused pipeline, N={n}, d={d}, float32, one head, causal")
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((n, d), dtype=np.float32) for _ in range(3))
    scale = 1 / math.sqrt(d)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        unfused_pipeline(q[:64], k[:64], v[:64], scale)       # warm-up: BLAS buffers
        out, log = unfused_pipeline(q, k, v, scale)
        shape = (1, 1, n, d)
        sy.attention.cpu(q.reshape(shape), k.reshape(shape), v.reshape(shape), is_causal=True, threads=1)
        t0 = time.perf_counter()
        fused = sy.attention.cpu(q.reshape(shape), k.reshape(shape), v.reshape(shape), is_causal=True, threads=1)
        fused_s = time.perf_counter() - t0
    np.testing.assert_allclose(fused.reshape(n, d), out, atol=2e-5)
    t = Table(title="each kernel reads its input from memory and writes its result back (the slide's a/b/c)",
              title_justify="left")
    for heading in ("kernel", "time", "read", "written"):
        t.add_column(heading, justify="right")
    mib = 2.0**20
    for name, seconds, read, written in log:
        t.add_row(name, f"{seconds * 1e3:.1f} ms", f"{read / mib:.1f} MiB", f"{written / mib:.1f} MiB")
    total_s = sum(r[1] for r in log)
    total_b = sum(r[2] + r[3] for r in log)
    fused_b = 4 * n * d * 4
    t.add_row("[bold]unfused total", f"{total_s * 1e3:.1f} ms", f"{sum(r[2] for r in log) / mib:.1f} MiB",
              f"{sum(r[3] for r in log) / mib:.1f} MiB")
    t.add_row("[bold]fused: sy.attention.cpu", f"{fused_s * 1e3:.1f} ms", f"{3 * n * d * 4 / mib:.1f} MiB",
              f"{n * d * 4 / mib:.1f} MiB")
    console.print(t)
    console.print(f"Unfused moves {total_b / fused_b:.0f}x the bytes of the fused kernel (which writes no N x N "
                  f"array) and takes {total_s / fused_s:.1f}x its time, one thread each. Mask_op alone "
                  f"costs {log[1][1] / total_s:.0%} of the pipeline while computing nothing but a comparison.")

    # 2. the denominator problem
    console.rule("2. Seed 001: the softmax denominator problem, Q=[1], K=[1,2,3], V=[2,4,8]")
    steps, o = slide_recurrence(SLIDE_Q, SLIDE_K, SLIDE_V[:, 0])
    fa_steps, fa_out = online_attention_steps(SLIDE_Q, SLIDE_K, SLIDE_V, 1)
    t = Table(title="the slide's recurrence (left) and FlashAttention's (right), one key at a time",
              title_justify="left")
    for heading in ("i", "D_b = e^(q·k_i)", "N_b = v_i·D_b", "O = (D·O + N_b)/(D + D_b)", "D += D_b",
                    "m", "l", "acc", "acc / l"):
        t.add_column(heading, justify="right")
    for s, f in zip(steps, fa_steps):
        t.add_row(str(s["i"]), _fmt(s["D_b"]), _fmt(s["N_b"]), _fmt(s["O"]), _fmt(s["D"]), _fmt(f.m_new),
                  _fmt(f.l_new), _fmt(f.acc_new[0]), _fmt(f.acc_new[0] / f.l_new))
    console.print(t)
    qa, ka, va = (x.astype(np.float32) for x in (SLIDE_Q.reshape(1, 1, 1, 1), SLIDE_K.reshape(1, 1, 3, 1),
                                                 SLIDE_V.reshape(1, 1, 3, 1)))
    cpu = float(sy.attention.cpu(qa, ka, va, scale=1.0, block_k=1)[0, 0, 0, 0])
    console.print(f"the slide: O = N/D = (2e + 4e^2 + 8e^3)/(e + e^2 + e^3) = [bold]{SLIDE_EXACT:.6f}[/bold]; "
                  f"its recurrence: {o:.6f}; FlashAttention's (m, l, acc): {fa_out[0]:.6f}; "
                  f"the C kernel (float32): {cpu:.6f}")
    big_steps, big = slide_recurrence(SLIDE_Q, SLIDE_K * 400.0, SLIDE_V[:, 0])
    _, big_fa = online_attention_steps(SLIDE_Q, SLIDE_K * 400.0, SLIDE_V, 1)
    console.print(f"With scores 400, 800, 1200 (K x 400) the slide's D = e^1200 overflows: O = {big} "
                  f"(D = {big_steps[-1]['D']}); FlashAttention's running max keeps every exponent <= 0: "
                  f"O = {big_fa[0]:.6f} (the answer is 8).")

    # 3. memory linear in N
    console.rule("3. Memory: the unfused pipeline's N x N arrays vs the fused kernel (measured, fresh processes)")
    t = Table(title=f"peak extra memory of one call, one head, d={d}, float32, causal", title_justify="left")
    for heading in ("N", "unfused (NumPy naive)", "fused (sy.attention.cpu)", "N x N float32"):
        t.add_column(heading, justify="right")
    from tqdm.auto import tqdm

    for size in tqdm(args.memory_n, desc="memory probes", leave=False):
        shape = (1, 1, size, d)
        naive = measure_memory_in_child("numpy-naive", shape, True, 1)
        ours = measure_memory_in_child("sympathy-cpu", shape, True, 1)
        t.add_row(str(size), f"{naive / mib:.1f} MiB", f"{max(ours, 0.0) / mib:.2f} MiB", f"{size * size * 4 / mib:.1f} MiB")
    console.print(t)
    console.print("The slides quote FlashAttention's BERT-large training, 17.4 +- 1.4 min vs Nvidia MLPerf 1.1's "
                  "20.0 +- 1.5 min (quoted, not measured here: see docs/seeds.md).")


if __name__ == "__main__":
    main()
