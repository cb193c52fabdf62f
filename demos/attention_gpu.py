"""FlashAttention on the GPU: our ladder from naive to the Hopper kernel, beside torch's FlashAttention-2 and cuDNN.

Runs every rung of sympathy's ladder (cuda_src/attention_{naive,tiled,mma,hopper}.cu; hopper on
sm_90 only) on one bf16 problem beside the anchors torch has on this GPU: SDPA's flash backend
(FlashAttention-2) and cuDNN's fused attention (FlashAttention-3 class on Hopper). Each row: time,
TFLOP/s, the ratio to the strongest anchor measured, extra memory and the error against a float64
reference. Then a decode row: one new token per sequence against a KV cache
(sy.attention.attention_with_kvcache) beside the same anchors, in TB/s of K and V read. Without a
CUDA GPU (or torch) it says what is missing and exits cleanly.
"""
from __future__ import annotations

import argparse
import math

RUNGS = ("naive", "tiled", "mma", "hopper")          # the ladder, slowest first
ANCHORS = {"torch SDPA flash (FA2)": "FLASH_ATTENTION", "torch SDPA cuDNN": "CUDNN_ATTENTION"}


def rungs_for(d: int, hopper: bool) -> list[str]:
    """The rungs that run at head dim d on this GPU (hopper: compute capability 9.0)."""
    from sympathy.attention import cuda

    supported = {"naive": True, "tiled": d in cuda.TILED_HEAD_DIMS, "mma": d in cuda.MMA_HEAD_DIMS,
                 "hopper": hopper and d in cuda.HOPPER_HEAD_DIMS}
    return [rung for rung in RUNGS if supported[rung]]


def strongest_anchor(times_ms: dict[str, float]) -> str | None:
    """The fastest anchor that ran: every rung is compared with it."""
    measured = {name: ms for name, ms in times_ms.items() if name in ANCHORS}
    return min(measured, key=measured.get) if measured else None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="sympathy demo attention_gpu", description=__doc__.splitlines()[0],
                                     allow_abbrev=False)
    parser.add_argument("--n", type=int, default=2048, help="sequence length (default: 2048)")
    parser.add_argument("--d", type=int, default=64, choices=(64, 128), help="head dim (default: 64)")
    parser.add_argument("--causal", action="store_true", help="causal mask")
    args = parser.parse_args(argv)

    from rich.console import Console
    from rich.markup import escape

    console = Console()
    try:
        import torch
    except ImportError:
        console.print(escape('This demo needs torch with a CUDA GPU: torch is not installed (pip install torch, '
                             'or pip install ".[torch]" in the checkout).'))
        return
    if not torch.cuda.is_available():
        console.print("This demo needs a CUDA GPU, and torch sees none here. On a GPU machine it runs the "
                      "naive -> tiled -> mma -> hopper ladder beside torch's FlashAttention-2 and cuDNN, then a decode "
                      "row against a KV cache; "
                      "docs/attention-gpu.md has the figures measured on an H100.")
        return
    race(console, args, torch)


def race(console, args: argparse.Namespace, torch) -> None:
    """Every rung and every anchor on one problem, then one table against the strongest anchor."""
    from rich.markup import escape
    from rich.table import Table
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import sympathy as sy
    from sympathy.bench.suites.attention_gpu import attention_flops, median_ms, peak_extra_mib

    B, H, N, d = max(1, 16384 // args.n), 2048 // args.d, args.n, args.d
    q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    hopper = torch.cuda.get_device_capability() == (9, 0)
    console.print(f"[bold]{escape(torch.cuda.get_device_name())}[/]: B={B} H={H} N={N} d={d} bf16, "
                  f"{'causal' if args.causal else 'not causal'} (a first use compiles the kernels with nvcc)")
    # float64 reference on a slice of the heads: enough to judge the error, cheap to compute.
    qs, ks, vs = (t[:1, :2].double() for t in (q, k, v))
    scores = qs @ ks.transpose(-1, -2) / math.sqrt(d)
    if args.causal:
        scores = scores.masked_fill(torch.ones(N, N, dtype=torch.bool, device="cuda").triu(1), -math.inf)
    reference = torch.softmax(scores, -1) @ vs

    variants = {rung: (lambda rung=rung: sy.attention.scaled_dot_product_attention(
        q, k, v, is_causal=args.causal, kernel=rung)) for rung in rungs_for(d, hopper)}
    for name, backend in ANCHORS.items():
        def anchor(backend=getattr(SDPBackend, backend)):
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=args.causal)
        variants[name] = anchor

    flops = attention_flops(B, H, N, d, args.causal)
    measured, skipped = {}, []
    for name, fn in variants.items():
        try:
            out = fn()
        except (RuntimeError, ValueError, sy.NotSupportedError) as exc:   # not on this GPU / torch build
            skipped.append(f"{name}: {str(exc).splitlines()[0][:100]}")
            continue
        err = ((out[:1, :2].double() - reference).abs().max() / reference.abs().max()).item()
        measured[name] = (median_ms(fn), peak_extra_mib(fn), err)
    best = strongest_anchor({name: m[0] for name, m in measured.items()})

    table = Table(title="attention forward, one problem: our ladder, then torch's anchors", title_justify="left")
    for col in ("kernel", "time ms", "TFLOP/s", f"× {best or 'anchor'}", "extra memory MiB", "rel. error vs float64"):
        table.add_column(col, justify="left" if col == "kernel" else "right")
    for name, (ms, extra, err) in measured.items():
        ratio = f"{measured[best][0] / ms:.2f}×" if best else ""
        table.add_row(name + (" (strongest anchor)" if name == best else ""), f"{ms:.3f}",
                      f"{flops / ms / 1e9:.1f}", ratio, f"{extra:.0f}", f"{err:.1e}")
    console.print(table)
    for line in skipped:
        console.print(f"[dim]skipped {escape(line)}[/dim]")
    console.print("naive writes S and P (N x N floats per head) to HBM; the other rungs keep them on chip, "
                  "so their extra memory is the output and the log-sum-exp only.")
    decode_row(console, args, torch)


DECODE_SHAPE = (8, 4, 8192)   # batch, query heads per KV head (GQA), cached keys


def decode_row(console, args: argparse.Namespace, torch) -> None:
    """Inference's other half: one new token per sequence against a KV cache (flash-attn's
    attention_with_kvcache), bandwidth-bound, beside the same two anchors; each call replayed from a
    CUDA graph so the table shows GPU time, not the host's Python."""
    from rich.markup import escape
    from rich.table import Table
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import sympathy as sy
    from sympathy.bench.suites.attention_decode import float64_reference, graphed, kv_bytes
    from sympathy.bench.suites.attention_gpu import median_ms

    (B, group, N), d = DECODE_SHAPE, args.d
    Hq = 2048 // d
    Hkv = Hq // group
    q = torch.randn(B, 1, Hq, d, device="cuda", dtype=torch.bfloat16)
    kc, vc = (torch.randn(B, N, Hkv, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    reference = float64_reference(torch, q[:1], kc[:1], vc[:1], causal=False)
    qs, ks, vs = (t.transpose(1, 2).contiguous() for t in (q, kc, vc))
    variants = {"sympathy attention_with_kvcache": lambda: sy.attention.attention_with_kvcache(q, kc, vc)}
    for name, backend in ANCHORS.items():
        def anchor(backend=getattr(SDPBackend, backend)):
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, enable_gqa=True).transpose(1, 2)
        variants[name] = anchor
    measured, skipped = {}, []
    for name, fn in variants.items():
        try:
            out = fn()
        except (RuntimeError, ValueError, sy.NotSupportedError) as exc:
            skipped.append(f"{name}: {str(exc).splitlines()[0][:100]}")
            continue
        err = ((out[:1].double() - reference).abs().max() / reference.abs().max()).item()
        replay = graphed(torch, fn)
        measured[name] = (median_ms(replay or fn), err)
    best = strongest_anchor({name: m[0] for name, m in measured.items()})
    nbytes = kv_bytes(B, Hkv, N, d)
    table = Table(title=f"decode: one new token per sequence against a KV cache, B={B} Hq={Hq} Hkv={Hkv} (GQA) "
                        f"N={N} d={d} bf16 (GPU time, CUDA graph)", title_justify="left")
    for col in ("kernel", "time µs", "TB/s of K+V", f"× {best or 'anchor'}", "rel. error vs float64"):
        table.add_column(col, justify="left" if col == "kernel" else "right")
    for name, (ms, err) in measured.items():
        ratio = f"{measured[best][0] / ms:.2f}×" if best else ""
        table.add_row(name + (" (strongest anchor)" if name == best else ""), f"{ms * 1e3:.1f}",
                      f"{nbytes / ms / 1e9:.2f}", ratio, f"{err:.1e}")
    console.print(table)
    for line in skipped:
        console.print(f"[dim]skipped {escape(line)}[/dim]")
    console.print("decode reads every cached key and value once for ~1 FLOP per byte: HBM bandwidth is its limit, "
                  "and the query heads sharing a KV head read it once (`sympathy bench attention-decode` has "
                  "the issue's shapes, paged caches and a chunked prefill).")


if __name__ == "__main__":
    main()
