"""Bench results kept per run, and two runs side by side.

    bench-results/matmul/2026-11-24T11-20-05Z/matmul.json   one folder per run: its JSON and plots
    bench-results/matmul/latest                             → the newest run folder

`sympathy bench compare A B` takes a run folder, its JSON file, a suite name (its latest run) or
NAME~K (K runs before the latest), and shows the rows of both runs matched by group and variant.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path

LATEST = "latest"


def new_run_dir(out: Path, suite: str, started: _dt.datetime | None = None) -> Path:
    """A fresh folder out/suite/<UTC time>/ (a suffix when two runs start in the same second)."""
    stamp = (started or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y-%m-%dT%H-%M-%SZ")
    base = out / suite
    base.mkdir(parents=True, exist_ok=True)
    for attempt in range(1000):
        path = base / (stamp if attempt == 0 else f"{stamp}-{attempt + 1}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free run folder under {base} for {stamp}")


def mark_latest(run_dir: Path) -> Path:
    """Point run_dir.parent/latest at run_dir: a relative symlink, or a text file holding its name
    where the file system has no symlinks. Replaced atomically."""
    link = run_dir.parent / LATEST
    partial = run_dir.parent / f".{LATEST}.{os.getpid()}"
    try:
        partial.symlink_to(run_dir.name, target_is_directory=True)
    except OSError:
        partial.write_text(run_dir.name + "\n")
    os.replace(partial, link)
    return link


def runs_of(out: Path, suite: str) -> list[Path]:
    """Run folders of a suite, oldest first (their names are UTC times)."""
    base = out / suite
    if not base.is_dir():
        return []
    return sorted(p for p in base.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith("."))


def resolve(reference: str, out: Path) -> Path:
    """The JSON file a run reference names; FileNotFoundError saying what exists otherwise."""
    path = Path(reference)
    if path.is_file():
        return path
    if path.is_dir():
        found = sorted(path.glob("*.json"))
        if len(found) == 1:
            return found[0]
        if (path / LATEST).exists():
            return resolve(str(path / LATEST), out)
        raise FileNotFoundError(f"{path} holds {len(found)} JSON files; name one, or a run folder")
    name, _, back = reference.partition("~")
    if back and not back.isdigit():
        raise FileNotFoundError(f"{reference!r}: write NAME~K with K a number of runs back, e.g. matmul~1")
    runs = runs_of(out, name)
    k = int(back or 0)
    if not runs:
        suites = sorted(p.name for p in out.iterdir() if p.is_dir()) if out.is_dir() else []
        raise FileNotFoundError(f"no run of {name!r} under {out}/ (runs there: {', '.join(suites) or 'none'}); "
                                "give a run folder or JSON file, a suite name, or NAME~K")
    if k >= len(runs):
        raise FileNotFoundError(f"{name}~{k}: only {len(runs)} run(s) of {name} under {out}/")
    return resolve(str(runs[-1 - k]), out)


def load(path: Path) -> dict:
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or "rows" not in data or "suite" not in data:
        raise ValueError(f"{path} is not a sympathy bench JSON file (no suite and rows)")
    return data


def compare_rows(a: dict, b: dict) -> list[dict]:
    """Rows of two runs matched by (group, variant), in A's order then B's new ones: the primary
    metric of each, B's change over A (>1: B is better, whichever way the metric points) and each
    run's ratio to its anchor."""
    primary, higher = a["primary_metric"], a.get("higher_is_better", False)
    rows_b = {(r["group"], r["variant"]): r for r in b["rows"]}
    keys = list(dict.fromkeys([(r["group"], r["variant"]) for r in a["rows"]] + list(rows_b)))
    rows_a = {(r["group"], r["variant"]): r for r in a["rows"]}
    out = []
    for key in keys:
        ra, rb = rows_a.get(key), rows_b.get(key)
        va = ra["metrics"].get(primary) if ra else None
        vb = rb["metrics"].get(primary) if rb else None
        change = None
        if va and vb:
            change = vb / va if higher else va / vb
        out.append({"group": key[0], "variant": key[1], "anchor": bool((ra or rb).get("anchor")),
                    "a": va, "b": vb, "change": change,
                    "a_ratio": ra.get("ratio") if ra else None, "b_ratio": rb.get("ratio") if rb else None})
    return out


def differences(a: dict, b: dict) -> list[str]:
    """What differs between the two runs besides the figures: suite, machine, versions, arguments."""
    notes = []
    if a["suite"] != b["suite"] or a["primary_metric"] != b["primary_metric"]:
        notes.append(f"different suites: {a['suite']} ({a['primary_metric']}) and {b['suite']} ({b['primary_metric']})")
    for key in ("cpu_model", "logical_cpus", "gpu"):
        va, vb = a.get("machine", {}).get(key), b.get("machine", {}).get(key)
        if va != vb:
            notes.append(f"machine {key}: {va} vs {vb}")
    for name in sorted(set(a.get("versions", {})) | set(b.get("versions", {}))):
        va, vb = a.get("versions", {}).get(name), b.get("versions", {}).get(name)
        if va != vb:
            notes.append(f"{name}: {va} vs {vb}")
    args_a, args_b = a.get("args", {}), b.get("args", {})
    for name in sorted(set(args_a) | set(args_b)):
        if name in ("out", "plot", "quiet"):
            continue
        if args_a.get(name) != args_b.get(name):
            notes.append(f"--{name.replace('_', '-')}: {args_a.get(name)} vs {args_b.get(name)}")
    return notes


def compare_table(a: dict, b: dict, label_a: str, label_b: str):
    """A rich table of compare_rows."""
    from rich.table import Table

    from .core import format_figure

    primary = a["primary_metric"]
    t = Table(title=f"{a['suite']}: {primary} ({'higher' if a.get('higher_is_better') else 'lower'} is better), "
                    f"A = {label_a}, B = {label_b}", title_justify="left")
    for col in ("group", "variant", f"A {primary}", f"B {primary}", "B vs A", "A × anchor", "B × anchor"):
        t.add_column(col, justify="left" if col in ("group", "variant") else "right")
    last = None
    for r in compare_rows(a, b):
        t.add_row(r["group"] if r["group"] != last else "", r["variant"] + (" (anchor)" if r["anchor"] else ""),
                  format_figure(r["a"]), format_figure(r["b"]),
                  "" if r["change"] is None else f"{r['change']:.2f}×",
                  "" if r["a_ratio"] is None else f"{r['a_ratio']:.2f}×",
                  "" if r["b_ratio"] is None else f"{r['b_ratio']:.2f}×")
        last = r["group"]
    t.caption = "B vs A > 1: B is better. Rows present in one run only have empty cells for the other."
    return t
