"""The harness every subject plugs into.

A suite runs its variants side by side in one process and hands back rows. Rows of one `group`
(one size, one dtype, one thread count ...) race each other; the row marked `anchor` (NumPy/OpenBLAS,
queue.Queue, torch SDPA ...) is the yardstick, and every row's ratio to it is computed here, from
figures measured in the same run. The harness prints a rich table, writes JSON (machine, versions,
arguments, every figure, the ratios) and, on request, PNG charts.

To add a suite: a module in sympathy/bench/suites/ defining `SUITE = YourSuite()` (a Suite subclass).
Its name is the module name with dashes ("attention_cpu" → "attention-cpu").
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import json
import math
import pkgutil
import platform
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")


@dataclass
class Row:
    group: str                      # rows of one group race each other ("n=1024 float64 1 thread")
    variant: str                    # what this row measures ("packed", "queue.Queue", "sdpa-flash")
    metrics: dict[str, float]       # figures, named with their unit ("time_s", "GFLOPS", "items/s")
    anchor: bool = False            # the yardstick of its group
    params: dict = field(default_factory=dict)  # plot coordinates ({"n": 1024, "dtype": "float64"})
    ratio: float | None = None      # filled by Results: this row's primary metric relative to the anchor


class Suite:
    """One benchmark suite. Subclasses set the class attributes and implement `run`."""

    name: str = ""
    title: str = ""
    primary: str = "time_s"         # the metric ratios are computed on
    higher_is_better: bool = False  # for `primary`
    columns: tuple[str, ...] = ()   # metrics shown in the table, in order (all of them when empty)
    ratio_label: str = "× anchor"   # column heading of the ratio

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Suite-specific command-line options (sizes, threads ...)."""

    def check_arguments(self, args: argparse.Namespace) -> None:
        """Refuse, before any work, arguments this machine cannot run (ValueError: `sympathy bench`
        prints it as a usage error). run() raises NotSupportedError when the machine lacks what the
        whole suite needs (a GPU, torch): one line, exit status 1, no JSON."""

    def run(self, args: argparse.Namespace, results: "Results") -> None:
        raise NotImplementedError

    def plot(self, results: "Results", outdir: Path) -> list[Path]:
        """PNG charts; by default one grouped bar chart of the primary metric."""
        from . import plots

        return [plots.grouped_bars(results, outdir / f"{self.name}.png",
                                   metric=self.primary, title=self.title or self.name)]


class Results:
    """The rows of one suite run, with the ratios to each group's anchor."""

    def __init__(self, suite: Suite, args: argparse.Namespace | None = None, quiet: bool = False):
        self.suite = suite
        self.args = args
        self.rows: list[Row] = []
        self.notes: list[str] = []
        self.quiet = quiet
        self.started = _dt.datetime.now(_dt.timezone.utc)

    def add(self, group: str, variant: str, anchor: bool = False, params: dict | None = None,
            **metrics: float) -> Row:
        row = Row(group=group, variant=variant, metrics={k: float(v) for k, v in metrics.items()},
                  anchor=anchor, params=dict(params or {}))
        self.rows.append(row)
        self._update_ratios(group)
        return row

    def note(self, text: str) -> None:
        """A sentence printed under the table and stored in the JSON (a skipped variant, a caveat)."""
        self.notes.append(text)

    def progress(self, items: Iterable[T], desc: str, total: int | None = None) -> Iterator[T]:
        """A tqdm bar over the suite's work (on stderr, so tables on stdout stay clean)."""
        from tqdm.auto import tqdm

        return iter(tqdm(items, desc=desc, total=total, disable=self.quiet, leave=False, file=sys.stderr))

    def _update_ratios(self, group: str) -> None:
        rows = [r for r in self.rows if r.group == group]
        anchor = next((r for r in rows if r.anchor), None)
        key = self.suite.primary
        for r in rows:
            if anchor is None or key not in r.metrics or key not in anchor.metrics:
                r.ratio = None
                continue
            mine, theirs = r.metrics[key], anchor.metrics[key]
            if self.suite.higher_is_better:
                r.ratio = mine / theirs if theirs else math.nan
            else:
                r.ratio = theirs / mine if mine else math.nan

    # ---- output -------------------------------------------------------------------------------
    def metric_names(self) -> list[str]:
        if self.suite.columns:
            return list(self.suite.columns)
        names: list[str] = []
        for r in self.rows:
            names += [k for k in r.metrics if k not in names]
        return names

    def table(self):
        from rich.table import Table

        t = Table(title=self.suite.title or self.suite.name, title_justify="left")
        t.add_column("group")
        t.add_column("variant")
        # Only columns some row fills (no D1_misses without --cachegrind, no ratio without an anchor).
        names = [n for n in self.metric_names() if any(n in r.metrics for r in self.rows)]
        with_ratio = any(r.ratio is not None for r in self.rows)
        for n in names:
            t.add_column(n, justify="right")
        if with_ratio:
            t.add_column(self.suite.ratio_label, justify="right")
        last_group = None
        for r in self.rows:
            label = r.variant + (" (anchor)" if r.anchor else "")
            ratio = "" if r.ratio is None else f"{r.ratio:.2f}×"
            t.add_row(r.group if r.group != last_group else "", label,
                      *[format_figure(r.metrics.get(n)) for n in names], *([ratio] if with_ratio else []),
                      end_section=False)
            last_group = r.group
        return t

    def as_json(self) -> dict:
        from .. import __version__
        from ..topology import topology

        return {
            "suite": self.suite.name,
            "started": self.started.isoformat(),
            "machine": topology().as_dict() | {"platform": platform.platform()},
            "versions": versions() | {"sympathy": __version__},
            "primary_metric": self.suite.primary,
            "higher_is_better": self.suite.higher_is_better,
            "args": {k: v for k, v in vars(self.args or argparse.Namespace()).items()
                     if isinstance(v, (int, float, str, bool, list, tuple, type(None)))},
            "rows": [asdict(r) for r in self.rows],
            "notes": self.notes,
        }

    def write_json(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.as_json(), indent=2, default=str))
        return path


# ---- shared by the suites' command lines ---------------------------------------------------------------
CAUSAL_CHOICES = {"no": (False,), "yes": (True,), "both": (False, True)}


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1, or a usage error that says so."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1; got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1; got {value}")
    return value


def causal_argument(parser: argparse.ArgumentParser, default: str) -> None:
    """--causal {no,yes,both}, the same in every attention suite; a bare --causal means yes."""
    parser.add_argument("--causal", nargs="?", const="yes", choices=tuple(CAUSAL_CHOICES), default=default,
                        help="causal mask: no, yes (a bare --causal) or both; causal halves the FLOPs")


def format_figure(value: float | None) -> str:
    if value is None:
        return ""
    if value == 0 or math.isnan(value):
        return f"{value:g}"
    magnitude = abs(value)
    if magnitude >= 1e9:
        return f"{value / 1e9:.2f} G"
    if magnitude >= 1e6:
        return f"{value / 1e6:.2f} M"
    if magnitude >= 1e4:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.1f}"
    if magnitude >= 0.01:
        return f"{value:.3f}"
    return f"{value:.3g}"


def versions() -> dict[str, str]:
    """Versions of everything a figure depends on (torch only when it is already imported)."""
    import numpy

    out = {"python": platform.python_version(), "numpy": numpy.__version__}
    try:
        from threadpoolctl import threadpool_info

        blas = [f"{i.get('internal_api')} {i.get('version')} ({i.get('architecture')})"
                for i in threadpool_info() if i.get("user_api") == "blas"]
        if blas:
            out["blas"] = "; ".join(blas)
    except ImportError:
        pass
    if "torch" in sys.modules:
        out["torch"] = sys.modules["torch"].__version__
    return out


def available_suites() -> dict[str, Suite]:
    """Every suite in sympathy/bench/suites/, by its dashed name."""
    from . import suites

    found = {}
    for info in pkgutil.iter_modules(suites.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{suites.__name__}.{info.name}")
        suite = getattr(module, "SUITE", None)
        if isinstance(suite, Suite):
            suite.name = suite.name or info.name.replace("_", "-")
            found[suite.name] = suite
    return dict(sorted(found.items()))


def run_suite(suite: Suite, args: argparse.Namespace, quiet: bool = False) -> Results:
    results = Results(suite, args, quiet=quiet)
    suite.run(args, results)
    return results
