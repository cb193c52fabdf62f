"""`sympathy bench lab`: the cache-line lab's five experiments, each raced against its yardstick.

    false sharing   counters 8 / 64 / 128 B apart, pinned and unpinned; anchor: 128 B (no sharing)
    counter         six ways to increment; anchor: the register loop
    latency         pointer chase, random and sequential, 4 KiB .. --max-size; plateaus vs sysfs
    bandwidth       STREAM copy/scale/add/triad, C on 1 and all threads; anchor: NumPy
    strides         one pass of a[::stride] += 1; anchor: stride 1

The primary metric "ns" is per increment (false sharing, counter), per load (latency), per array
element (STREAM) and per pass (strides); every ratio compares rows of one experiment only.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from types import SimpleNamespace

from ..core import Results, Suite

EXPERIMENTS = ("false-sharing", "counter", "latency", "bandwidth", "strides")


class LabSuite(Suite):
    title = "The cache-line lab: false sharing, barriers, latency, bandwidth, strides"
    primary = "ns"
    higher_is_better = False
    columns = ("ns", "GB/s", "slowdown", "concurrency")
    ratio_label = "× anchor (speed)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        from ...lab import parse_size
        from ..core import positive_int

        parser.add_argument("--only", nargs="+", choices=EXPERIMENTS, metavar="EXPERIMENT",
                            default=list(EXPERIMENTS), help=f"run only these experiments (default: all), from: {' '.join(EXPERIMENTS)}")
        parser.add_argument("--threads", type=positive_int, default=2, help="false-sharing threads")
        parser.add_argument("--iterations", type=positive_int, default=20_000_000,
                            help="increments per thread / per counter kind")
        parser.add_argument("--repeat", type=positive_int, default=3, help="best of this many runs")
        parser.add_argument("--max-size", type=parse_size, default=parse_size("1GiB"),
                            help="largest pointer-chase working set (default 1GiB: past the L3 of most "
                                 "machines; a VM may see DRAM latency well below the L3 size sysfs reports, "
                                 "when the host gives it only a share of the L3)")
        parser.add_argument("--array-size", type=parse_size, default=None,
                            help="STREAM bytes per array (default: 4x the last-level cache, "
                                 "capped by available memory)")
        parser.add_argument("--stride-array-size", type=parse_size, default=parse_size("1GiB"),
                            help="bytes of the strides experiment's uint32 array (default 1GiB)")

    def run(self, args: argparse.Namespace, results: Results) -> None:
        for name in EXPERIMENTS:
            if name in args.only:
                getattr(self, "_" + name.replace("-", "_"))(args, results)

    # ---- experiments ----------------------------------------------------------------------------
    def _false_sharing(self, args, results: Results) -> None:
        from ... import lab

        rows = lab.false_sharing_sweep(args.threads, increments=("rmw", "store"), iterations=args.iterations,
                                       repeat=args.repeat)
        for r, slowdown in results.progress(rows, "false sharing"):
            group = f"false sharing, {r.increment}, {r.threads} threads, {'pinned' if r.pinned else 'unpinned'}"
            results.add(group, SPACING_LABEL.get(r.spacing, f"{r.spacing} B"), anchor=r.spacing == lab.DESTRUCTIVE,
                        params={"experiment": "false-sharing", "spacing": r.spacing, "pinned": r.pinned,
                                "increment": r.increment},
                        ns=r.ns_per_op, slowdown=slowdown, concurrency=r.concurrency)
        shaky = sorted({r.spacing for r, _ in rows if r.pinned and r.concurrency < 0.9})
        if shaky:
            results.note("false sharing: in some pinned cases no sample ran its threads side by side for 90% of "
                         "the time (concurrency column; other work on the CPUs, or preemption): read those rows "
                         "with care, the threads partly took turns")
        if args.threads > len(os.sched_getaffinity(0)):
            results.note(f"false sharing: {args.threads} threads on {len(os.sched_getaffinity(0))} CPUs "
                         "time-share cores, which hides part of the effect")

    def _counter(self, args, results: Results) -> None:
        from ... import lab

        for kind in results.progress(lab.COUNTER_KINDS, "counter kinds"):
            best = min((lab.counter(kind, args.iterations) for _ in range(args.repeat)), key=lambda r: r.seconds)
            results.add("counter loop", kind, anchor=kind == "register",
                        params={"experiment": "counter", "kind": kind}, ns=best.ns_per_increment)

    def _latency(self, args, results: Results) -> None:
        from ... import lab

        sizes = lab.default_sizes(args.max_size)
        curves = {pattern: lab.latency_curve(sizes, pattern=pattern,
                                             progress=lambda s, p=pattern: results.progress(s, f"chase {p}"))
                  for pattern in lab.PATTERNS}
        for i, size in enumerate(sizes):
            for pattern, curve in curves.items():
                results.add(f"chase {lab.human_size(size)}", pattern,
                            params={"experiment": "latency", "size": size, "pattern": pattern},
                            ns=curve.ns_per_load[i])
        for m in curves["random"].levels():
            results.note(describe_match(m))

    def _bandwidth(self, args, results: Results) -> None:
        from ... import lab

        array_bytes, notes = (args.array_size, []) if args.array_size else lab.default_array_bytes()
        everyone = len(os.sched_getaffinity(0))
        runs = lab.stream_race(array_bytes, threads=sorted({1, everyone}))
        for kernel in lab.STREAM_KERNELS:
            group = f"STREAM {kernel}, {lab.human_size(array_bytes)} x3"
            for r in runs:
                variant = "NumPy" if r.implementation == "NumPy" else f"C, {r.threads} thread{'s' * (r.threads > 1)}"
                gbs = r.best_gbs[kernel]
                results.add(group, variant, anchor=r.implementation == "NumPy",
                            params={"experiment": "bandwidth", "kernel": kernel, "threads": r.threads,
                                    "implementation": r.implementation},
                            ns=lab.STREAM_BYTES_PER_ELEMENT[kernel] / gbs, **{"GB/s": gbs})
        for note in notes + runs[-1].notes:
            results.note(f"STREAM: {note}")
        results.note("STREAM counts bytes the STREAM way (write-allocate traffic not counted); best of 5 "
                     "rounds after a warm-up round, C and NumPy taking turns on the same arrays; NumPy's "
                     "triad is two passes (it cannot fuse b + q*c)")

    def _strides(self, args, results: Results) -> None:
        from ... import lab

        curve = lab.strides(array_bytes=args.stride_array_size)
        group = f"strides, {lab.human_size(curve.array_bytes)} uint32"
        for stride, seconds, touched in zip(curve.strides, curve.seconds, curve.touched):
            results.add(group, f"stride {stride}", anchor=stride == 1,
                        params={"experiment": "strides", "stride": stride, "touched": touched},
                        ns=seconds * 1e9)

    # ---- charts ---------------------------------------------------------------------------------
    def plot(self, results: Results, outdir: Path) -> list[Path]:
        from ... import lab
        from .. import plots

        def rows(experiment):
            return [r for r in results.rows if r.params.get("experiment") == experiment]

        out = []
        chase = rows("latency")
        if chase:
            series = {p: ([r.params["size"] for r in chase if r.params["pattern"] == p],
                          [r.metrics["ns"] for r in chase if r.params["pattern"] == p]) for p in lab.PATTERNS}
            vlines = {f"{k} {lab.human_size(v)}": v for k, v in lab.sysfs_cache_sizes().items()
                      if v <= max(r.params["size"] for r in chase)}
            out.append(plots.lines(series, outdir / "lab-latency.png", title="Latency against working-set size",
                                   xlabel="working set (bytes)", ylabel="ns per dependent load", logx=True,
                                   logy=True, vlines=vlines))
        for experiment, metric, title, log in (
                ("bandwidth", "GB/s", "STREAM bandwidth (GB/s, higher is better)", False),
                ("false-sharing", "ns", "False sharing: ns per increment per thread", False),
                ("counter", "ns", "The counter loop: ns per increment", True)):
            subset = rows(experiment)
            if subset:
                out.append(plots.grouped_bars(SimpleNamespace(rows=subset), outdir / f"lab-{experiment}.png",
                                              metric=metric, title=title, log=log))
        strided = rows("strides")
        if strided:
            series = {"ms per pass": ([r.params["stride"] for r in strided], [r.metrics["ns"] / 1e6 for r in strided])}
            out.append(plots.lines(series, outdir / "lab-strides.png", title="a[::stride] += 1, one pass",
                                   xlabel="stride (uint32 elements)", ylabel="ms per pass", logx=True,
                                   vlines={"one line (16)": 16}))
        return out


SPACING_LABEL = {8: "8 B (one line)", 64: "64 B (adjacent lines)", 128: "128 B (line pair)"}


def describe_match(m) -> str:
    """One sentence per cache level: what sysfs says, what the curve shows."""
    from ... import lab

    if m.sysfs_bytes is None:
        if m.plateau is None:
            return "latency: DRAM: no plateau after the last cache level within this sweep (raise --max-size)"
        return (f"latency: DRAM: plateau from {lab.human_size(m.plateau.first_bytes)} at {m.plateau.ns:.0f} ns")
    head = f"latency: {m.level} (sysfs {lab.human_size(m.sysfs_bytes)}): "
    if m.plateau is None:
        return head + "no plateau in its range"
    p = m.plateau
    verdict = "agrees" if m.agrees else "does NOT agree"
    return (head + f"plateau {lab.human_size(p.first_bytes)}..{lab.human_size(p.last_bytes)} at {p.ns:.1f} ns, "
            f"capacity {lab.human_size(m.capacity_bytes)} = {m.ratio:.2f}x sysfs ({verdict}, within {m.factor:g}x)")


SUITE = LabSuite()
