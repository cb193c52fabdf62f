"""The cache-line lab: false sharing, the price of "volatile", a hoisted load, latency, bandwidth, strides.

Small sizes so the whole tour runs in well under a minute; `sympathy bench lab --plot` runs the
full-size experiments (DRAM-sized arrays, a 1 GiB latency sweep) and writes every chart.
"""
from __future__ import annotations


def main(argv: list[str] | None = None) -> None:
    import argparse
    from pathlib import Path

    from rich.console import Console
    from rich.table import Table

    import sympathy as sy
    from sympathy.bench import plots
    from sympathy.bench.suites.lab import SPACING_LABEL, describe_match

    lab = sy.lab
    parser = argparse.ArgumentParser(prog="sympathy demo lab", description=__doc__)
    parser.add_argument("--max-size", type=lab.parse_size, default=lab.parse_size("64MiB"),
                        help="largest pointer-chase working set (default 64MiB)")
    parser.add_argument("--array-size", type=lab.parse_size, default=lab.parse_size("128MiB"),
                        help="STREAM bytes per array (default 128MiB; the bench uses 4x the LLC)")
    parser.add_argument("--stride-array-size", type=lab.parse_size, default=lab.parse_size("64MiB"),
                        help="bytes of the strides experiment's uint32 array (default 64MiB)")
    parser.add_argument("--iterations", type=int, default=10_000_000,
                        help="increments per false-sharing thread (default 1e7; the counter loop does 2x)")
    parser.add_argument("--out", default="sympathy-demo-output", help="folder for the PNG")
    args = parser.parse_args(argv)
    console = Console()
    topo = sy.topology(with_gpu=False)
    console.print(f"[bold]{topo.cpu_model}[/bold], {len(topo.usable_cpus)} usable CPUs, caches: " +
                  ", ".join(f"L{c.level}{c.kind[0].lower() if c.level == 1 else ''} {lab.human_size(c.size_bytes)}"
                            for c in topo.caches if c.kind != "Instruction"))

    # ---- false sharing ------------------------------------------------------------------------
    t = Table(title="1. False sharing: 2 threads, each increments its own counter", title_justify="left")
    for col in ("increment", "placement", "spacing", "ns / increment", "slowdown vs 128 B", "concurrency"):
        t.add_column(col, justify="left" if col in ("increment", "placement", "spacing") else "right")
    with console.status("false sharing ..."):
        rows = lab.false_sharing_sweep(threads=2, increments=("rmw", "store"), iterations=args.iterations, repeat=3)
    for r, slowdown in rows:
        t.add_row(r.increment, "pinned" if r.pinned else "unpinned", SPACING_LABEL[r.spacing],
                  f"{r.ns_per_op:.2f}", f"{slowdown:.2f}×", f"{r.concurrency:.2f}",
                  end_section=r.spacing == lab.DESTRUCTIVE)
    console.print(t)
    console.print(f"[dim]Every counter reached exactly {args.iterations:,}. concurrency = the least CPU time any thread got / "
                  "wall time: near 1 the threads really ran side by side; well below 1 they took turns (a busy "
                  "machine, or unpinned threads the scheduler put on one CPU) and there was nothing to share.[/dim]\n")

    # ---- counter kinds ------------------------------------------------------------------------
    t = Table(title="2. The counter loop: what each kind of \"volatile\" costs", title_justify="left")
    t.add_column("kind")
    t.add_column("ns / increment", justify="right")
    t.add_column("× register", justify="right")
    with console.status("counter loop ..."):
        results = {k: min((lab.counter(k, 2 * args.iterations) for _ in range(2)), key=lambda r: r.seconds)
                   for k in lab.COUNTER_KINDS}
    base = results["register"].ns_per_increment
    for kind, r in results.items():
        t.add_row(kind, f"{r.ns_per_increment:.2f}", f"{r.ns_per_increment / base:.1f}×")
    console.print(t)

    # ---- visibility ---------------------------------------------------------------------------
    console.print("\n[bold]3. Visibility: a reader spins on a flag another thread sets after 50 ms[/bold]")
    with console.status("visibility (the plain reader runs in a child that is killed after 1 s) ..."):
        seen = [lab.visibility(reader, timeout=1.0) for reader in lab.READERS]
    for r in seen:
        console.print(f"  {r.describe()}")
    try:
        loop = lab.spin_loop_disassembly("plain")
        console.print(f"  the plain reader as compiled ({loop.function}; "
                      f"{'the load is hoisted: a jmp to itself' if loop.spins_in_place else 'the load stays in the loop'}):")
        console.print(loop.text, markup=False, highlight=False)
    except sy.NotSupportedError as exc:
        console.print(f"  [dim](cannot show the machine code: {exc})[/dim]")

    # ---- latency ------------------------------------------------------------------------------
    console.print()
    sizes = lab.default_sizes(args.max_size)
    with console.status(f"pointer chase 4 KiB .. {lab.human_size(args.max_size)} ..."):
        random_walk = lab.latency_curve(sizes, loads=1 << 19, repeat=3)
        sequential = lab.latency_curve(sizes, pattern="sequential", loads=1 << 19, repeat=3)
    t = Table(title="4. Latency against working-set size (ns per dependent load)", title_justify="left")
    for col in ("working set", "random", "sequential"):
        t.add_column(col, justify="right")
    for size, rnd, seq in zip(sizes, random_walk.ns_per_load, sequential.ns_per_load):
        t.add_row(lab.human_size(size), f"{rnd:.1f}", f"{seq:.1f}")
    console.print(t)
    for m in random_walk.levels():
        console.print(f"  {describe_match(m).removeprefix('latency: ')}")
    out = Path(args.out)
    png = plots.lines({"random": (sizes, random_walk.ns_per_load), "sequential": (sizes, sequential.ns_per_load)},
                      out / "lab-latency.png", title="Latency against working-set size",
                      xlabel="working set (bytes)", ylabel="ns per dependent load", logx=True, logy=True,
                      vlines={f"{k} {lab.human_size(v)}": v for k, v in lab.sysfs_cache_sizes().items()
                              if v <= args.max_size})
    console.print(f"  plot: {png}")

    # ---- bandwidth ----------------------------------------------------------------------------
    with console.status(f"STREAM, 3 arrays of {lab.human_size(args.array_size)} ..."):
        runs = lab.stream_race(args.array_size, threads=(1, None), repeat=3)
    t = Table(title=f"\n5. Bandwidth: STREAM, 3 arrays of {lab.human_size(args.array_size)} (GB/s, best of 3, "
                    "C and NumPy taking turns)",
              title_justify="left")
    t.add_column("implementation")
    for kernel in lab.STREAM_KERNELS:
        t.add_column(kernel, justify="right")
    for r in runs:
        label = "NumPy (1 thread)" if r.implementation == "NumPy" else f"C, {r.threads} thread{'s' * (r.threads > 1)}"
        t.add_row(label, *(f"{r.best_gbs[k]:.1f}" for k in lab.STREAM_KERNELS))
    console.print(t)
    for note in runs[-1].notes:
        console.print(f"  [dim]{note}[/dim]")

    # ---- strides ------------------------------------------------------------------------------
    with console.status("strides ..."):
        curve = lab.strides(array_bytes=args.stride_array_size, repeat=3)
    t = Table(title=f"\n6. Cache lines: a[::stride] += 1 over {lab.human_size(curve.array_bytes)} of uint32 (one pass)",
              title_justify="left")
    for col in ("stride", "elements touched", "ms", "ns per element"):
        t.add_column(col, justify="right")
    for stride, seconds, touched, ns in zip(curve.strides, curve.seconds, curve.touched, curve.ns_per_touch):
        t.add_row(str(stride), f"{touched:,}", f"{seconds * 1e3:.2f}", f"{ns:.2f}")
    console.print(t)
    console.print("[dim]Up to a stride of 16 (one 64-byte line) every line is fetched anyway: the memory traffic "
                  "is the same (`sympathy cachegrind lab` shows equal D1 misses). Past it each doubling halves the "
                  "lines and the time follows. Below 16 the time still falls somewhat here: one core's scalar loop "
                  "costs about as much per line as the memory does.[/dim]")


if __name__ == "__main__":
    main()
