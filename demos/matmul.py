"""Matrix multiplication, from the pure-Python triple loop to a packed kernel next to OpenBLAS.

The article's story in about 15 seconds:
  1. Pure Python, ijk against ikj: the same arithmetic, the loops swapped (a tqdm bar each).
  2. The C ladder at n=512: six loop orders, tiled, SIMD, packed, and NumPy (OpenBLAS) beside them,
     in one table: time, GFLOPS, speedup over ijk, share of NumPy. A bar chart is saved as PNG.
"""
from __future__ import annotations

import argparse
import importlib
import time
from pathlib import Path

import numpy as np

OUTPUT = Path("sympathy-demo-output")


def best_of(fn, repeat: int) -> float:
    """Best wall-clock of `repeat` calls (the least disturbed one); slow calls run once."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if times[-1] > 0.5:
            break
    return min(times)


def python_loops(n: int, console) -> None:
    import sympathy as sy

    rng = np.random.default_rng(0)
    a, b = rng.random((n, n)).tolist(), rng.random((n, n)).tolist()
    console.rule(f"[bold]1. Pure Python, n={n}: the same triple loop, two orders")
    times = {}
    for order in ("ijk", "ikj"):
        t0 = time.perf_counter()
        sy.matmul_python(a, b, order=order, progress=True)
        times[order] = time.perf_counter() - t0
        console.print(f"  {order}: {times[order]:.2f} s  ({2 * n**3 / times[order] / 1e6:.1f} MFLOPS)")
    console.print(f"  ikj / ijk speed: {times['ijk'] / times['ikj']:.2f}× — in Python the interpreter, "
                  "not the cache, dominates; in C the order is everything:\n")


def c_ladder(n: int, console) -> list[tuple[str, float]]:
    from rich.table import Table
    from threadpoolctl import threadpool_limits
    from tqdm.auto import tqdm

    mm = importlib.import_module("sympathy.matmul")
    rng = np.random.default_rng(1)
    a, b = rng.random((n, n)), rng.random((n, n))
    expected = a @ b
    flops = 2.0 * n**3  # one multiply and one add for each of the n³ terms
    with threadpool_limits(limits=1, user_api="blas"):  # one thread, like every rung here
        a @ b  # warm-up: OpenBLAS sets up its buffers on the first call
        numpy_time = best_of(lambda: a @ b, 5)
    rows = []
    for kernel in tqdm(mm.MATMUL_KERNELS, desc=f"C ladder n={n}", leave=False):
        seconds = best_of(lambda: mm.matmul(a, b, kernel=kernel), 3)
        np.testing.assert_allclose(mm.matmul(a, b, kernel=kernel), expected, rtol=1e-9)
        rows.append((kernel, seconds))
    rows.append(("numpy (OpenBLAS)", numpy_time))
    ijk = rows[0][1]
    table = Table(title=f"2. The C ladder, n={n}, float64, one thread", title_justify="left")
    for heading in ("kernel", "time", "GFLOPS", "× ijk", "% of NumPy"):
        table.add_column(heading, justify="left" if heading == "kernel" else "right")
    for kernel, seconds in rows:
        table.add_row(kernel, f"{seconds * 1e3:.1f} ms", f"{flops / seconds / 1e9:.2f}",
                      f"{ijk / seconds:.1f}×", f"{100 * numpy_time / seconds:.1f}%")
    console.print(table)
    return rows


def bar_chart(rows: list[tuple[str, float]], n: int) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r[0] for r in rows]
    gflops = [2.0 * n**3 / r[1] / 1e9 for r in rows]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    bars = ax.bar(names, gflops, color=["#888"] * 6 + ["#4a90d9", "#2a70b9", "#d9534f", "#333"])
    ax.bar_label(bars, fmt="%.1f", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("GFLOPS (log scale)")
    ax.set_title(f"sy.matmul ladder, n={n}, float64, one thread")
    ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    OUTPUT.mkdir(exist_ok=True)
    path = OUTPUT / "matmul.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> None:
    from rich.console import Console

    parser = argparse.ArgumentParser(prog="sympathy demo matmul", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python-n", type=int, default=100, help="size of the pure-Python product (default 100)")
    parser.add_argument("--n", type=int, default=512, help="size of the C ladder (default 512)")
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG chart")
    args = parser.parse_args(argv)
    for name in ("python_n", "n"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    console = Console()
    python_loops(args.python_n, console)
    rows = c_ladder(args.n, console)
    if not args.no_plot:
        console.print(f"chart: {bar_chart(rows, args.n)}")


if __name__ == "__main__":
    main()
