"""`sympathy`: the command line. Subcommands: info, demo, bench, cachegrind, build-cuda."""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from pathlib import Path


def _console():
    """Rich output; piped to a file or a log, tables keep a readable width instead of 80 columns."""
    import shutil

    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console = Console(width=max(shutil.get_terminal_size((140, 24)).columns, 140))
    return console


# ---- info -----------------------------------------------------------------------------------------
def cmd_info(args: argparse.Namespace) -> int:
    from rich.table import Table

    from .topology import topology

    topo = topology(with_gpu=not args.no_gpu)
    console = _console()
    t = Table(title="This machine", show_header=False, title_justify="left")
    t.add_column("what", style="bold")
    t.add_column("value")
    t.add_row("CPU", topo.cpu_model)
    t.add_row("cores", f"{topo.physical_cores} physical, {topo.logical_cpus} logical "
                       f"(usable here: {', '.join(map(str, topo.usable_cpus))})")
    t.add_row("clock", f"{topo.mhz:.0f} MHz" if topo.mhz else "unknown")
    t.add_row("cache line", f"{topo.line_bytes} B")
    t.add_row("SIMD", " ".join(topo.simd) or "none detected")
    for dtype in ("float64", "float32"):
        peak = topo.peak_gflops(dtype)
        if peak:
            t.add_row(f"peak {dtype}", f"{peak:.0f} GFLOP/s per core (FMA width × 2 ports × clock)")
    t.add_row("GPU", topo.gpu or "none visible to torch (or torch not installed)")
    console.print(t)
    c = Table(title="Caches (sysfs, cpu0)", title_justify="left")
    for col in ("level", "type", "size", "line", "ways", "shared by"):
        c.add_column(col, justify="right")
    for cache in topo.caches:
        c.add_row(f"L{cache.level}", cache.kind, _human_bytes(cache.size_bytes), f"{cache.line_bytes} B",
                  str(cache.ways or "?"), f"{cache.shared_by} CPU" + ("s" if cache.shared_by > 1 else ""))
    console.print(c)
    return 0


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" or n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


# ---- demo -----------------------------------------------------------------------------------------
def available_demos() -> dict[str, str]:
    """Demo name → its one-line summary (the module docstring's first line)."""
    from . import demos

    found = {}
    for info in pkgutil.iter_modules(demos.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{demos.__name__}.{info.name}")
        if callable(getattr(module, "main", None)):
            found[info.name] = (module.__doc__ or "").strip().splitlines()[0] if module.__doc__ else ""
    return dict(sorted(found.items(), key=lambda kv: (DEMO_ORDER.get(kv[0], 99), kv[0])))


# The tour's order: from the article's first example to the GPU.
DEMO_ORDER = {"info": 0, "matmul": 1, "lab": 2, "ring": 3, "softmax": 4, "attention": 5, "attention_gpu": 6}


def cmd_demo(args: argparse.Namespace) -> int:
    console = _console()
    demos = available_demos()
    if args.list:
        from rich.table import Table

        t = Table(title="Demos (sympathy demo NAME; no NAME, or all, runs the tour)", title_justify="left")
        t.add_column("name", style="bold")
        t.add_column("what it shows")
        for name, summary in demos.items():
            t.add_row(name, summary)
        console.print(t)
        return 0
    names = list(demos) if args.name in (None, "all") else [args.name.replace("-", "_")]
    for name in names:
        if name not in demos:
            console.print(f"[red]no demo named {args.name!r}[/red]; choose from: {', '.join(demos)}, or all")
            return 2
    for name in names:
        console.rule(f"[bold]sympathy demo {name}")
        module = importlib.import_module(f"sympathy.demos.{name}")
        module.main(list(args.demo_args))
    return 0


# ---- bench ----------------------------------------------------------------------------------------
def cmd_bench(args: argparse.Namespace) -> int:
    from .bench.core import run_suite

    suite = args.suite_obj
    console = _console()
    results = run_suite(suite, args, quiet=args.quiet)
    console.print(results.table())
    for note in results.notes:
        console.print(f"[dim]• {note}[/dim]")
    out = Path(args.out)
    path = results.write_json(out / f"{suite.name}.json")
    console.print(f"JSON: {path}")
    if args.plot:
        for png in suite.plot(results, out):
            console.print(f"plot: {png}")
    return 0


def _add_bench_parsers(sub: argparse._SubParsersAction) -> None:
    from .bench.core import available_suites

    bench = sub.add_parser("bench", help="run a benchmark suite: a table, JSON and (--plot) charts",
                           description="Race every variant of a subject against its anchor in one run.")
    suites = bench.add_subparsers(dest="suite", metavar="SUITE", required=True)
    for name, suite in available_suites().items():
        p = suites.add_parser(name, help=suite.title, description=suite.title)
        p.add_argument("--out", default="bench-results", help="folder for the JSON and PNG files")
        p.add_argument("--plot", action="store_true", help="also write PNG charts")
        p.add_argument("--quiet", action="store_true", help="no progress bars")
        suite.add_arguments(p)
        p.set_defaults(func=cmd_bench, suite_obj=suite)


# ---- cachegrind -----------------------------------------------------------------------------------
def _add_cachegrind_parsers(sub: argparse._SubParsersAction) -> None:
    from .cache import CACHEGRIND_SUBJECTS

    cg = sub.add_parser("cachegrind", help="cache misses of a kernel under valgrind's cache simulator",
                        description="Run kernels under valgrind (callgrind --cache-sim=yes) and report "
                                    "I refs, D refs, D1 and LL misses of the kernel region only.")
    subjects = cg.add_subparsers(dest="subject", metavar="SUBJECT", required=True)
    for name, module_name in CACHEGRIND_SUBJECTS.items():
        module = importlib.import_module(module_name)
        p = subjects.add_parser(name, help=module.cachegrind_help)
        module.cachegrind_arguments(p)
        p.set_defaults(func=cmd_cachegrind, cachegrind_module=module)


def cmd_cachegrind(args: argparse.Namespace) -> int:
    from .cache import cachegrind, report_table

    cases = args.cachegrind_module.cachegrind_cases(args)
    reports = []
    from tqdm.auto import tqdm

    for label, kwargs in tqdm(cases, desc="valgrind", file=sys.stderr, leave=False):
        reports.append((label, cachegrind(**kwargs)))
    _console().print(report_table(reports, title=f"Simulated caches: {args.subject}"))
    return 0


# ---- build-cuda -----------------------------------------------------------------------------------
def cmd_build_cuda(args: argparse.Namespace) -> int:
    from ._errors import NotSupportedError
    from .attention import cuda

    try:
        paths = cuda.build_all(archs=args.arch, force=args.force)
    except NotSupportedError as exc:   # no nvcc, no GPU, no torch: one line, not a traceback
        _console().print(f"sympathy build-cuda: {exc}")
        return 1
    for path in paths:
        _console().print(f"built {path}")
    return 0


# ---- main -----------------------------------------------------------------------------------------
def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; suites and cachegrind subjects are imported only when their command is used."""
    words = [w for w in (sys.argv[1:] if argv is None else argv) if not w.startswith("-")]
    command = words[0] if words else None
    parser = argparse.ArgumentParser(
        prog="sympathy",
        description="Mechanical sympathy, measured: matmul loop order, a Disruptor ring buffer, "
                    "the cache-line lab and FlashAttention.")
    from . import __version__

    parser.add_argument("--version", action="version", version=f"sympathy {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    info = sub.add_parser("info", help="this machine: cores, caches, line size, SIMD, GPU")
    info.add_argument("--no-gpu", action="store_true", help="do not import torch to look for a GPU")
    info.set_defaults(func=cmd_info)

    demo = sub.add_parser("demo", help="run the tour, or one demo by name (--list shows them)")
    demo.add_argument("name", nargs="?", help="demo name, or all (the default: the whole tour)")
    demo.add_argument("--list", action="store_true", help="list the demos and what each shows")
    demo.add_argument("demo_args", nargs=argparse.REMAINDER, help="passed to the demo")
    demo.set_defaults(func=cmd_demo)

    if command == "bench":
        _add_bench_parsers(sub)
    else:
        sub.add_parser("bench", help="run a benchmark suite: a table, JSON and (--plot) charts "
                                     "(`sympathy bench --help` lists the suites)")
    if command == "cachegrind":
        _add_cachegrind_parsers(sub)
    else:
        sub.add_parser("cachegrind", help="cache misses of a kernel under valgrind's cache simulator "
                                          "(`sympathy cachegrind --help` lists the subjects)")

    build = sub.add_parser("build-cuda", help="compile the CUDA kernels ahead of time (needs nvcc)")
    build.add_argument("--arch", nargs="+", default=None, help="e.g. sm_80 sm_90a (default: this GPU's)")
    build.add_argument("--force", action="store_true", help="rebuild even if cached")
    build.set_defaults(func=cmd_build_cuda)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser(argv).parse_args(argv)
    try:
        return args.func(args) or 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
