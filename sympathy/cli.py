"""`sympathy`: the command line. Subcommands: info, demo, bench, cachegrind, build-cuda."""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from pathlib import Path


class HelpFormatter(argparse.HelpFormatter):
    """Every option's default in its help, written as it is typed (`512 2048`, not `[512, 2048]`)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (not action.option_strings or default in (None, False, argparse.SUPPRESS) or "default" in text.lower()
                or isinstance(action, (argparse._StoreTrueAction, argparse._VersionAction, argparse._HelpAction))):
            return text
        shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
        return f"{text} (default: {shown.replace('%', '%%')})".strip()


def parser_options(**extra) -> dict:
    """Keyword arguments of every parser here: our help formatter, and no silent abbreviations
    (`--kernel` must not quietly mean `--kernels-something`)."""
    return {"formatter_class": HelpFormatter, "allow_abbrev": False, **extra}


def _say(console, text: str, style: str = "") -> None:
    """Print text that may hold brackets (`pip install ".[torch]"`) without rich reading them as markup."""
    from rich.markup import escape

    console.print(f"[{style}]{escape(text)}[/{style}]" if style else escape(text))


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
# Each seed example sits beside the demo of its subject (docs/seeds.md).
DEMO_ORDER = {name: i for i, name in enumerate([
    "info", "matmul", "article_matmul", "lab", "locality", "ring", "pipeline", "latency", "pinning",
    "softmax", "slides", "attention", "flash_claims", "attention_gpu", "attention_train", "context_parallel"])}


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
            _say(console, f"no demo named {args.name!r}; choose from: {', '.join(demos)}, or all", "red")
            return 2
    for name in names:
        console.rule(f"[bold]sympathy demo {name}")
        module = importlib.import_module(f"sympathy.demos.{name}")
        module.main(list(args.demo_args))
    return 0


# ---- bench ----------------------------------------------------------------------------------------
def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import runs
    from .bench.core import run_suite

    suite = args.suite_obj
    console = _console()
    try:
        suite.check_arguments(args)
    except ValueError as exc:          # a size this machine cannot hold ...: a usage error, before any work
        args.leaf_parser.error(str(exc))
    results = run_suite(suite, args, quiet=args.quiet)
    console.print(results.table())
    for note in results.notes:
        _say(console, f"• {note}", "dim")
    run_dir = runs.new_run_dir(Path(args.out), suite.name, results.started)
    path = results.write_json(run_dir / f"{suite.name}.json")
    _say(console, f"JSON: {path}")
    if args.plot:
        for png in suite.plot(results, run_dir):
            _say(console, f"plot: {png}")
    runs.mark_latest(run_dir)
    _say(console, f"this run: {run_dir} (also {run_dir.parent / runs.LATEST}); "
                  f"`sympathy bench compare {suite.name}~1 {suite.name}` compares it with the previous one")
    return 0


def cmd_bench_compare(args: argparse.Namespace) -> int:
    from .bench import runs

    console = _console()
    out = Path(args.out)
    try:
        paths = [runs.resolve(ref, out) for ref in (args.a, args.b)]
        a, b = (runs.load(p) for p in paths)
    except (FileNotFoundError, ValueError) as exc:
        args.leaf_parser.error(str(exc))
    console.print(runs.compare_table(a, b, str(paths[0]), str(paths[1])))
    for note in runs.differences(a, b):
        _say(console, f"• {note}", "dim")
    return 0


def _add_bench_parsers(sub: argparse._SubParsersAction) -> None:
    from .bench.core import available_suites

    bench = sub.add_parser("bench", help="run a benchmark suite: a table, JSON and (--plot) charts",
                           description="Race every variant of a subject against its anchor in one run. Each "
                                       "run is kept in OUT/SUITE/<UTC time>/, with OUT/SUITE/latest "
                                       "pointing at the newest.", **parser_options())
    suites = bench.add_subparsers(dest="suite", metavar="SUITE", required=True)
    for name, suite in available_suites().items():
        p = suites.add_parser(name, help=suite.title, description=suite.title, **parser_options())
        p.add_argument("--out", default="bench-results", help="folder for the run folders (JSON and PNG)")
        p.add_argument("--plot", action="store_true", help="also write PNG charts")
        p.add_argument("--quiet", action="store_true", help="no progress bars")
        suite.add_arguments(p)
        p.set_defaults(func=cmd_bench, suite_obj=suite, leaf_parser=p)
    compare = suites.add_parser(
        "compare", help="two runs side by side", **parser_options(
            description="Two runs side by side, rows matched by group and variant. A run is a run folder, "
                        "its JSON file, a suite name (its latest run) or NAME~K (K runs before the latest): "
                        "`sympathy bench compare matmul~1 matmul`."))
    compare.add_argument("a", metavar="A", help="the run to compare against")
    compare.add_argument("b", metavar="B", help="the run compared")
    compare.add_argument("--out", default="bench-results", help="folder holding the run folders")
    compare.set_defaults(func=cmd_bench_compare, leaf_parser=compare)


# ---- cachegrind -----------------------------------------------------------------------------------
def _add_cachegrind_parsers(sub: argparse._SubParsersAction) -> None:
    from .cache import CACHEGRIND_SUBJECTS

    cg = sub.add_parser("cachegrind", help="cache misses of a kernel under valgrind's cache simulator",
                        description="Run kernels under valgrind (callgrind --cache-sim=yes) and report "
                                    "I refs, D refs, D1 and LL misses of the kernel region only.",
                        **parser_options())
    subjects = cg.add_subparsers(dest="subject", metavar="SUBJECT", required=True)
    for name, module_name in CACHEGRIND_SUBJECTS.items():
        module = importlib.import_module(module_name)
        p = subjects.add_parser(name, help=module.cachegrind_help, description=module.cachegrind_help,
                                **parser_options())
        module.cachegrind_arguments(p)
        p.set_defaults(func=cmd_cachegrind, cachegrind_module=module, leaf_parser=p)


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
    from .attention import cuda

    for path in cuda.build_all(archs=args.arch, force=args.force):   # no nvcc, GPU or torch: see main()
        _say(_console(), f"built {path}")
    return 0


# ---- main -----------------------------------------------------------------------------------------
def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; suites and cachegrind subjects are imported only when their command is used."""
    words = [w for w in (sys.argv[1:] if argv is None else argv) if not w.startswith("-")]
    command = words[0] if words else None
    parser = argparse.ArgumentParser(
        prog="sympathy",
        description="Mechanical sympathy, measured: matmul loop order, a Disruptor ring buffer, "
                    "the cache-line lab and FlashAttention.", **parser_options())
    from . import __version__

    parser.add_argument("--version", action="version", version=f"sympathy {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    info = sub.add_parser("info", help="this machine: cores, caches, line size, SIMD, GPU", **parser_options())
    info.add_argument("--no-gpu", action="store_true", help="do not import torch to look for a GPU")
    info.set_defaults(func=cmd_info, leaf_parser=info)

    demo = sub.add_parser("demo", help="run the tour, or one demo by name (--list shows them)", **parser_options())
    demo.add_argument("name", nargs="?", help="demo name, or all (the default: the whole tour)")
    demo.add_argument("--list", action="store_true", help="list the demos and what each shows")
    demo.add_argument("demo_args", nargs=argparse.REMAINDER, help="passed to the demo")
    demo.set_defaults(func=cmd_demo, leaf_parser=demo)

    if command == "bench":
        _add_bench_parsers(sub)
    else:
        sub.add_parser("bench", help="run a benchmark suite: a table, JSON and (--plot) charts "
                                     "(`sympathy bench --help` lists the suites)", **parser_options())
    if command == "cachegrind":
        _add_cachegrind_parsers(sub)
    else:
        sub.add_parser("cachegrind", help="cache misses of a kernel under valgrind's cache simulator "
                                          "(`sympathy cachegrind --help` lists the subjects)", **parser_options())

    build = sub.add_parser("build-cuda", help="compile the CUDA kernels ahead of time (needs nvcc)",
                           **parser_options())
    build.add_argument("--arch", nargs="+", default=None, help="e.g. sm_80 sm_90a (default: this GPU's)")
    build.add_argument("--force", action="store_true", help="rebuild even if cached")
    build.set_defaults(func=cmd_build_cuda, leaf_parser=build)
    return parser


def main(argv: list[str] | None = None) -> int:
    from ._errors import NotSupportedError

    parser = build_parser(argv)
    args, unknown = parser.parse_known_args(argv)
    if unknown:   # the usage of the command they were typed after, not the top-level one
        getattr(args, "leaf_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return args.func(args) or 0
    except NotSupportedError as exc:   # no valgrind, nvcc, GPU or torch: one line, not a traceback
        _say(_console(), f"sympathy {args.command}: {exc}")
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
