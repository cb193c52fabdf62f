"""FlashAttention on the GPU: the naive, tiled and tensor-core kernels climb to torch's FlashAttention-2.

Runs the ladder (cuda_src/attention_{naive,tiled,mma}.cu) on one bf16 problem beside torch SDPA's
flash backend: time, TFLOP/s, extra memory and the error against a float64 reference. Without a
CUDA GPU (or torch) it says what is missing and exits cleanly.
"""
from __future__ import annotations

import argparse
import math


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="sympathy demo attention_gpu", description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2048, help="sequence length")
    parser.add_argument("--d", type=int, default=64, choices=(64, 128), help="head dim")
    parser.add_argument("--causal", action="store_true")
    args = parser.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    console = Console()
    try:
        import torch
    except ImportError:
        console.print("This demo needs torch with a CUDA GPU: torch is not installed (pip install sympathy[torch]).")
        return
    if not torch.cuda.is_available():
        console.print("This demo needs a CUDA GPU, and torch sees none here. On a GPU machine it runs the "
                      "naive -> tiled -> mma ladder beside torch's FlashAttention-2; docs/attention-gpu.md "
                      "has the figures measured on an H100.")
        return

    import sympathy as sy
    from sympathy.bench.suites.attention_gpu import median_ms, peak_extra_mib, attention_flops

    B, H, N, d = max(1, 16384 // args.n), 2048 // args.d, args.n, args.d
    q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    console.print(f"[bold]{torch.cuda.get_device_name()}[/]: B={B} H={H} N={N} d={d} bf16, "
                  f"{'causal' if args.causal else 'not causal'} (first use compiles the kernels with nvcc)")
    # float64 reference on a slice of the heads: enough to judge the error, cheap to compute.
    qs, ks, vs = (t[:1, :2].double() for t in (q, k, v))
    scores = qs @ ks.transpose(-1, -2) / math.sqrt(d)
    if args.causal:
        scores = scores.masked_fill(torch.ones(N, N, dtype=torch.bool, device="cuda").triu(1), -math.inf)
    reference = torch.softmax(scores, -1) @ vs

    from torch.nn.attention import SDPBackend, sdpa_kernel

    def sdpa_flash():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=args.causal)

    ladder = {f"{name}": (lambda name=name: sy.attention.scaled_dot_product_attention(
        q, k, v, is_causal=args.causal, kernel=name)) for name in ("naive", "tiled", "mma")}
    ladder["torch SDPA flash (FA2)"] = sdpa_flash

    table = Table(title="attention forward, one problem, every rung", title_justify="left")
    for col in ("kernel", "time ms", "TFLOP/s", "extra memory MiB", "rel. error vs float64"):
        table.add_column(col, justify="left" if col == "kernel" else "right")
    flops = attention_flops(B, H, N, d, args.causal)
    for name, fn in ladder.items():
        out = fn()
        err = ((out[:1, :2].double() - reference).abs().max() / reference.abs().max()).item()
        ms = median_ms(fn)
        table.add_row(name, f"{ms:.3f}", f"{flops / ms / 1e9:.1f}", f"{peak_extra_mib(fn):.0f}", f"{err:.1e}")
    console.print(table)
    console.print("naive writes S and P (N x N floats per head) to HBM; tiled and mma keep them on chip, "
                  "so their extra memory is the output and the log-sum-exp only.")


if __name__ == "__main__":
    main()
