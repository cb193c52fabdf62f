"""FlashAttention on the CPU: measured HBM traffic of Algorithm 1, then the C kernel against torch."""
from __future__ import annotations

from pathlib import Path


def _mib(n: float) -> str:
    return f"{n / 2**20:,.2f} MiB"


def main(argv: list[str] | None = None) -> None:
    import argparse
    import math

    import numpy as np
    from rich.console import Console
    from rich.table import Table

    import sympathy as sy
    from sympathy.attention.cpu import plan
    from sympathy.bench.suites.attention_cpu import _variant, measure_memory_in_child
    from sympathy.bench.timing import time_call

    parser = argparse.ArgumentParser(prog="sympathy demo attention", description=__doc__)
    parser.add_argument("--d", type=int, default=64, help="head dimension")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    console = Console()
    rng = np.random.default_rng(0)
    d = args.d

    # 1. Algorithm 1's traffic, counted, next to the paper's orders of growth
    console.rule("1. HBM traffic of FlashAttention's Algorithm 1 (NumPy model, float64, one head)")
    sram = 192 * 1024
    t = Table(title=f"d={d}, SRAM M = {sram // 1024} KiB; traffic = bytes between the big arrays and the tiles",
              title_justify="left")
    for col in ("N", "Br × Bc", "measured (tiled)", "standard: 4Nd + 4N² elements", "N²d²/M",
                "measured / N²d²/M", "max |tiled - reference|"):
        t.add_column(col, justify="right")
    sizes = [256, 512, 1024, 2048]
    measured, standard = [], []
    for n in sizes:
        q, k, v = (rng.standard_normal((1, 1, n, d)) for _ in range(3))
        out, traffic = sy.attention.tiled(q, k, v, sram_bytes=sram, return_traffic=True)
        err = np.abs(out - sy.attention.reference(q, k, v)).max()
        measured.append(traffic.total_bytes)
        standard.append(traffic.standard_bytes())
        t.add_row(str(n), f"{traffic.block_q} × {traffic.block_k}", _mib(traffic.total_bytes),
                  _mib(traffic.standard_bytes()), _mib(traffic.flash_order_bytes()),
                  f"{traffic.total_bytes / traffic.flash_order_bytes():.2f}", f"{err:.1e}")
    console.print(t)
    console.print(f"Doubling N multiplies the measured traffic by {measured[-1] / measured[-2]:.2f} "
                  f"(Θ(N²d²/M) predicts 4). At N={sizes[-1]} it is {measured[-1] / standard[-1]:.2f}× standard "
                  f"attention's. The constant: Q and O are read and O written once per K/V block, "
                  f"3·N·d·(N/Bc) = 12·N²d²/M elements, so Algorithm 1 wins once M > 3d² "
                  f"(here M = {sram // 8} float64s, 3d² = {3 * d * d}); a GPU's M in fp16 is 4× more elements.")
    t = Table(title=f"N=1024, d={d}: more SRAM, less traffic (Θ(1/M))", title_justify="left")
    for col in ("M", "Br × Bc", "measured", "× of M=48 KiB"):
        t.add_column(col, justify="right")
    q, k, v = (rng.standard_normal((1, 1, 1024, d)) for _ in range(3))
    first = None
    for m in (48, 96, 192, 384):
        _, traffic = sy.attention.tiled(q, k, v, sram_bytes=m * 1024, return_traffic=True)
        first = first or traffic.total_bytes
        t.add_row(f"{m} KiB", f"{traffic.block_q} × {traffic.block_k}", _mib(traffic.total_bytes),
                  f"{traffic.total_bytes / first:.2f}")
    console.print(t)

    # 2. the C kernel: its plan, then a race against torch and the naive path
    console.rule("2. The C kernel (c_src/attention.c) against torch's SDPA and NumPy naive")
    n, heads = 2048, 4
    shape = (1, heads, n, d)
    p = plan(shape, shape, shape, threads=args.threads)
    console.print(f"plan for {shape}: isa={p['isa']}, panel={p['panel']} queries, block_q={p['block_q']}, "
                  f"block_k={p['block_k']}, threads={p['threads']}, scratch {p['scratch_bytes_per_thread'] / 1024:.0f} "
                  f"KiB per thread (tiles from L1d/L2: {sy.topology(with_gpu=False).cache(1).size_bytes // 1024} KiB / "
                  f"{sy.topology(with_gpu=False).cache(2).size_bytes // 1024} KiB)")
    q, k, v = (rng.standard_normal(shape, dtype=np.float32) for _ in range(3))
    out = np.zeros(shape, dtype=np.float32)
    try:
        import torch

        torch.set_num_threads(args.threads)
        names = ["torch-sdpa", "sympathy-cpu", "numpy-naive"]
    except ImportError:
        names = ["sympathy-cpu", "numpy-naive"]
        console.print("[dim]torch is not installed: no anchor, so no × torch column "
                      "(pip install torch, or pip install \".\\[torch]\" in the checkout)[/dim]")
    from threadpoolctl import threadpool_limits

    flops = 4.0 * heads * n * n * d
    t = Table(title=f"B=1, H={heads}, N={n}, d={d}, float32, {args.threads} threads (machine may be shared)",
              title_justify="left")
    with_anchor = "torch-sdpa" in names          # the ratio column is against torch, or absent
    for col in ("variant", "time", "GFLOP/s", "extra memory (measured)") + (("× torch",) if with_anchor else ()):
        t.add_column(col, justify="right")
    anchor = None
    ref = sy.attention.reference(q[:, :1], k[:, :1], v[:, :1])
    with threadpool_limits(args.threads):
        for name in names:
            fn, _ = _variant(name, q, k, v, out, False, args.threads)
            got = fn()
            got = got.numpy() if hasattr(got, "numpy") else got
            assert np.abs(got[:, :1] - ref).max() < 1e-4, name
            seconds = time_call(fn, repeat=3, warmup=1).median
            extra = measure_memory_in_child(name, shape, False, args.threads)
            anchor = seconds if name == "torch-sdpa" else anchor
            t.add_row(name, f"{seconds * 1e3:.1f} ms", f"{flops / seconds / 1e9:.1f}",
                      "n/a" if math.isnan(extra) else _mib(max(0.0, extra)),
                      *((f"{anchor / seconds:.2f}×",) if with_anchor else ()))
    console.print(t)
    console.print(f"The naive path's extra memory is the {n}×{n} float32 score matrix per head "
                  f"({_mib(n * n * 4)}); the kernel's is one block of Q and acc per thread.")

    if not args.no_plot:
        from sympathy.bench import plots

        outdir = Path("sympathy-demo-output")
        path = plots.lines({"FlashAttention (measured)": (sizes, [b / 2**20 for b in measured]),
                            "standard attention": (sizes, [b / 2**20 for b in standard])},
                           outdir / "attention-traffic.png", title=f"HBM traffic, d={d}, M={sram // 1024} KiB",
                           xlabel="N", ylabel="MiB moved", logx=True, logy=True)
        console.print(f"plot: {path}")


if __name__ == "__main__":
    main()
