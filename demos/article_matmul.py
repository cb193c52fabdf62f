"""Seed 000's matmul experiment as written: its pure-Python ijk/ikj under cachegrind, and its C claim.

  1. The article's program, verbatim (module-level loops, lists, tqdm), as two scripts, each run
     whole under `valgrind --tool=cachegrind` exactly as the article did, then a third run with the
     loop removed, so the loop's own share can be told from the interpreter's start-up. Small n by
     default (valgrind slows Python ~50x); `--n 500` is the article's size (~15-30 min per run).
     I1 misses (instruction locality) are printed next to the data side, as the article's table has them.
  2. "Implementing matmul of 4096x4096 in C and changing loop order provides 461% improvement in
     GFLOPS": our C ijk and ikj kernels (sy.matmul, -O3, one thread, float64) at `--c-n`, timed with
     a progress bar over row blocks. `--c-n 4096` is the article's size (minutes on a small machine).
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# The article's program, character for character except `n` (a placeholder) and which loop is
# commented out. Module-level loops on purpose: that is how the article ran it, and it is why its
# two orders take the same time (every name is a dict lookup in the module's globals).
ARTICLE_PROGRAM = '''import sys, random
from tqdm import tqdm
from time import *

n = {n}

A = [[random.random()
      for row in range(n)]
      for col in range(n)]

B = [[random.random()
      for row in range(n)]
      for col in range(n)]

C = [[0 for row in range(n)]
     for col in range(n)]

print("calculating ... \\n")

start = time()
{loops}
end = time()

print("%0.6f"%(end-start))
'''
INEFFICIENT = '''# inefficient
for i in tqdm(range(n)):
    for j in range(n):
        for k in range(n):
            C[i][j] += A[i][k] * B[k][j]'''
EFFICIENT = '''# efficient
for i in tqdm(range(n)):
    for k in range(n):
        for j in range(n):
            C[i][j] += A[i][k] * B[k][j]'''
NO_LOOP = "# (no loop: the start-up and set-up the two runs share)"

# The article's figures (n = 500, Valgrind 3.18.1, its Ubuntu workstation), from its two summaries.
ARTICLE = {
    "matmul_inefficient.py": {"seconds": 873.798730, "I refs": 314_734_342_652, "I1 misses": 5_738_193,
                              "D refs": 150_606_141_341, "D1 misses": 622_837_260, "LLd misses": 2_065_607,
                              "D1 miss rate": 0.4},
    "matmul_efficient.py": {"seconds": 871.885507, "I refs": 318_987_466_754, "I1 misses": 4_224_884,
                            "D refs": 151_347_143_927, "D1 misses": 218_499_487, "LLd misses": 2_111_315,
                            "D1 miss rate": 0.1},
}
ARTICLE_C_CLAIM = 461.0   # "% improvement in GFLOPS utilization", C, 4096 x 4096, loop order changed


def article_program(n: int, loops: str) -> str:
    return ARTICLE_PROGRAM.format(n=n, loops=loops)


_SUMMARY = {"I refs": r"I\s+refs:\s+([\d,]+)", "I1 misses": r"I1\s+misses:\s+([\d,]+)",
            "LLi misses": r"LLi misses:\s+([\d,]+)", "D refs": r"D\s+refs:\s+([\d,]+)",
            "D1 misses": r"D1\s+misses:\s+([\d,]+)", "LLd misses": r"LLd misses:\s+([\d,]+)"}


def parse_cachegrind_summary(text: str) -> dict[str, int]:
    """The counts of valgrind's closing summary (the lines the article pasted)."""
    found = {}
    for key, pattern in _SUMMARY.items():
        match = re.search(pattern, text)
        if not match:
            raise RuntimeError(f"no {key!r} line in cachegrind's summary:\n{text[-2000:]}")
        found[key] = int(match.group(1).replace(",", ""))
    return found


def run_under_cachegrind(script: Path, workdir: Path, caches: tuple = ()) -> dict[str, float]:
    """`valgrind --tool=cachegrind python SCRIPT`, the whole process, as in the article. The
    program's tqdm bar goes to our terminal (its stderr is ours); valgrind's own messages go to a
    log file, from which the summary is parsed. caches: cachegrind's --I1/--D1/--LL options; none
    simulates this machine's caches (as the article did its own), so counts differ between machines."""
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind); it is what the article ran")
    log = workdir / (script.stem + ".log")
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=yes", *caches, f"--log-file={log}",
           f"--cachegrind-out-file={workdir / (script.stem + '.out')}", sys.executable, str(script)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    summary = log.read_text() if log.exists() else ""
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{summary[-2000:]}")
    counts: dict[str, float] = dict(parse_cachegrind_summary(summary))
    printed = proc.stdout.strip().splitlines()
    counts["seconds"] = float(printed[-1]) if printed and printed[-1] != "calculating ..." else float("nan")
    counts["wall under valgrind"] = wall
    counts["D1 miss rate"] = 100.0 * counts["D1 misses"] / counts["D refs"]
    counts["I1 miss rate"] = 100.0 * counts["I1 misses"] / counts["I refs"]
    desc = (workdir / (script.stem + ".out")).read_text().splitlines()
    counts["caches"] = "; ".join(" ".join(line[len("desc: "):].split()) for line in desc if line.startswith("desc: "))
    return counts


def python_under_cachegrind(n: int, console) -> dict[str, dict[str, float]]:
    from rich.markup import escape
    from rich.table import Table
    from tqdm.auto import tqdm

    console.rule(f"[bold]1. The article's Python program, n={n}, whole process under cachegrind")
    runs = {}
    with tempfile.TemporaryDirectory(prefix="sympathy-article-") as tmp:
        work = Path(tmp)
        scripts = {"matmul_inefficient.py": INEFFICIENT, "matmul_efficient.py": EFFICIENT,
                   "no loop (baseline)": NO_LOOP}
        for name, loops in tqdm(scripts.items(), desc="valgrind runs", unit="run"):
            path = work / (name if name.endswith(".py") else "matmul_noloop.py")
            path.write_text(article_program(n, loops))
            runs[name] = run_under_cachegrind(path, work)
    base = runs["no loop (baseline)"]
    table = Table(title=f"valgrind --tool=cachegrind python SCRIPT (n={n}); article: n=500", title_justify="left")
    for heading in ("figure", "ijk ours", "ikj ours", "ijk loop only", "ikj loop only",
                    "ijk article", "ikj article"):
        table.add_column(heading, justify="right")
    ours = [runs["matmul_inefficient.py"], runs["matmul_efficient.py"]]
    theirs = [ARTICLE["matmul_inefficient.py"], ARTICLE["matmul_efficient.py"]]
    for key in ("seconds", "I refs", "I1 misses", "D refs", "D1 misses", "LLd misses", "D1 miss rate"):
        row = [key]
        row += [_fmt(key, r[key]) for r in ours]
        if key in ("D1 miss rate", "seconds"):
            loop = [100.0 * (r["D1 misses"] - base["D1 misses"]) / (r["D refs"] - base["D refs"])
                    if key == "D1 miss rate" else r[key] for r in ours]
        else:
            loop = [r[key] - base[key] for r in ours]
        row += [_fmt(key, v) for v in loop]
        row += [_fmt(key, t[key]) for t in theirs]
        table.add_row(*row)
    console.print(table)
    ijk, ikj = ours
    loop_i = {k: r["I refs"] - base["I refs"] for k, r in zip(("ijk", "ikj"), ours)}
    loop_i1 = {k: r["I1 misses"] - base["I1 misses"] for k, r in zip(("ijk", "ikj"), ours)}
    console.print(
        f"  caches simulated: {runs['matmul_inefficient.py']['caches']}\n"
        f"  time in the loop (the program's own clock, under valgrind): ijk {ijk['seconds']:.2f} s, ikj "
        f"{ikj['seconds']:.2f} s -> ikj/ijk speed {ijk['seconds'] / ikj['seconds']:.2f}x "
        "(article: 873.80 / 871.89 = 1.00x).\n"
        f"  D1 misses in the loop: ijk {ijk['D1 misses'] - base['D1 misses']:,} vs ikj "
        f"{ikj['D1 misses'] - base['D1 misses']:,} (article, whole process: 622.8 M vs 218.5 M, 2.85x).\n"
        f"  Instruction locality: {loop_i['ijk'] / n**3:,.0f} x86 instructions per iteration (article: "
        f"{ARTICLE['matmul_inefficient.py']['I refs'] / 500**3:,.0f}); the loop's I1 miss rate "
        f"{100 * loop_i1['ijk'] / loop_i['ijk']:.3f}% / {100 * loop_i1['ikj'] / loop_i['ikj']:.3f}% "
        "(article, whole process: 0.00%): the interpreter's hot path stays in I1.")
    console.print(escape(
        "  Why the two orders cost the same here: each `C[i][j] += A[i][k] * B[k][j]` at module level is "
        "~25 bytecodes and thousands of instructions with a dozen dict lookups, so a D1 miss more or less per "
        "iteration is noise. Lists hold pointers to float objects scattered on the heap, so even ikj does not "
        "walk memory sequentially. The D1 gap needs n large enough that B's rows (n pointers + n float objects "
        "each) overflow D1: at n=40 the orders do not differ, at n=80 the loop's rates are ~0.4% vs ~0.15%. "
        "Our C kernels (section 2, `sympathy demo matmul`) do ~2 instructions per multiply-add on contiguous "
        "doubles, so there the loop order is everything: 10x and more."))
    return runs


def _fmt(key: str, value: float) -> str:
    if key == "seconds":
        return f"{value:.3f}"
    if "rate" in key:
        return f"{value:.2f}%"
    return f"{int(value):,}"


def c_loop_order(n: int, console, rows_per_step: int | None = None) -> dict[str, float]:
    """GFLOPS of our C ijk and ikj kernels at n, one thread, float64, computed one row block at a time
    (each block runs the same loop nest, so the access pattern is the full product's) under a bar."""
    from rich.table import Table
    from tqdm.auto import tqdm

    import sympathy as sy

    console.rule(f"[bold]2. The article's C claim: loop order at n={n} (\"461% improvement in GFLOPS\")")
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n)), rng.random((n, n))
    step = rows_per_step or max(1, min(n, (1 << 26) // (n * n)))   # ~64 M multiply-adds per step
    results: dict[str, float] = {}
    for kernel in ("ijk", "ikj"):
        c = np.empty((n, n))
        seconds = 0.0
        with tqdm(total=n, desc=f"C {kernel} n={n}", unit="row") as bar:
            for start in range(0, n, step):
                stop = min(n, start + step)
                t0 = time.perf_counter()
                c[start:stop] = sy.matmul(a[start:stop], b, kernel=kernel)
                seconds += time.perf_counter() - t0
                bar.update(stop - start)
        check_rows = rng.integers(0, n, 8)
        np.testing.assert_allclose(c[check_rows], a[check_rows] @ b, rtol=1e-9)
        results[kernel] = 2.0 * n**3 / seconds / 1e9
        results[f"{kernel} seconds"] = seconds
    improvement = 100.0 * (results["ikj"] / results["ijk"] - 1.0)
    results["improvement %"] = improvement
    table = Table(title=f"C loop order, n={n}, float64, one thread", title_justify="left")
    for heading in ("kernel", "seconds", "GFLOPS"):
        table.add_column(heading, justify="right")
    for kernel in ("ijk", "ikj"):
        table.add_row(kernel, f"{results[f'{kernel} seconds']:.1f}", f"{results[kernel]:.3f}")
    console.print(table)
    console.print(f"  ikj over ijk: {results['ikj'] / results['ijk']:.2f}x the GFLOPS, a {improvement:.0f}% improvement "
                  f"(article: {ARTICLE_C_CLAIM:.0f}%, machine and compiler not stated).")
    return results


def main(argv: list[str] | None = None) -> None:
    from rich.console import Console

    parser = argparse.ArgumentParser(prog="sympathy demo article_matmul", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=80, help="pure-Python size under valgrind (default 80; the article: 500)")
    parser.add_argument("--c-n", type=int, default=1024, help="C loop-order size (default 1024; the article: 4096)")
    parser.add_argument("--skip-python", action="store_true", help="only the C loop-order part")
    parser.add_argument("--skip-c", action="store_true", help="only the valgrind part")
    args = parser.parse_args(argv)
    for name in ("n", "c_n"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1; got {getattr(args, name)}")
    console = Console()
    if not args.skip_python:
        python_under_cachegrind(args.n, console)
    if not args.skip_c:
        c_loop_order(args.c_n, console)


if __name__ == "__main__":
    main()
