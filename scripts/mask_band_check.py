"""attn_mask together with a sliding window on the GPU, one device call: ours (mask and band tile by tile)
against the route such calls took before (`naive` on the merged mask), ours without the mask (the band
alone) and torch's SDPA backends on the same mask materialised with the band folded in, as a table.

    python3 scripts/mask_band_check.py [--n 8192] [--window 1024] [--skip-naive]

A padded batch: B = 4 sequences of N keys, lengths N, 3N/4, N/2, N/4 (right padding, an additive (B,1,1,N)
float32 mask), a causal sliding window of `window` keys (window=(window - 1, 0)), bf16, H = 16, d = 128.
TFLOP/s over the visible (query, key) pairs of the merged mask (forward 4 d per pair; forward + backward
3.5x that); "vs band alone": the same kernel on the window without the mask, over its own pairs. Times:
triton's do_bench medians.
"""
import argparse
import math
import warnings

import torch


def bench(fn):
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=200)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--window", type=int, default=1024)
    ap.add_argument("--skip-naive", action="store_true", help="leave out the naive rows (O(N^2) workspace)")
    args = ap.parse_args()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from sympathy.attention import band, cuda

    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    B, H, N, d = 4, 16, args.n, 128
    window = (args.window - 1, 0)
    lens = torch.tensor([N, 3 * N // 4, N // 2, N // 4])
    q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    keep = (torch.arange(N)[None, :] < lens[:, None]).cuda()
    additive = torch.zeros(B, 1, 1, N, device="cuda").masked_fill(~keep[:, None, None, :], -math.inf)
    band_keep = band.band_mask(N, N, False, 0, window, device="cuda")
    merged_bool = (keep[:, None, None, :] & band_keep).contiguous()             # (B, 1, N, N)
    merged_bf16 = torch.zeros(merged_bool.shape, device="cuda", dtype=torch.bfloat16).masked_fill_(~merged_bool, -math.inf)
    vis = 4 * d * H * int(merged_bool.sum())
    band_vis = 4 * d * B * H * int(band_keep.sum())
    ours = cuda.scaled_dot_product_attention
    sdpa = torch.nn.functional.scaled_dot_product_attention
    rows = []

    def row(name, fn, flops, base=None):
        try:
            ms = bench(fn)
        except Exception as exc:   # a backend or kernel that does not take this call
            rows.append((name, None, None, None, str(exc).splitlines()[0][:70]))
            return None
        tf = flops / ms / 1e9
        rows.append((name, ms, tf, tf / base if base else None, ""))
        return tf

    def fwd_bwd(f, leaves, dout):
        def run():
            for t in leaves:
                t.grad = None
            f().backward(dout)
        return run

    for kernel in ("hopper", "mma"):
        base = row(f"ours {kernel}, window alone", lambda: ours(q, k, v, kernel=kernel, window=window), band_vis)
        row(f"ours {kernel}, padding mask + window", lambda: ours(q, k, v, additive, kernel=kernel, window=window), vis, base)
        row(f"ours {kernel}, merged bool (B,1,N,N) mask, no band", lambda: ours(q, k, v, merged_bool, kernel=kernel), vis, base)
    if not args.skip_naive:
        row("ours naive, padding mask + window (the previous route)",
            lambda: ours(q, k, v, additive, kernel="naive", window=window), vis)
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        with sdpa_kernel([backend]):
            row(f"SDPA {name}, merged bf16 (B,1,N,N) mask", lambda: sdpa(q, k, v, merged_bf16), vis)
    qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
    dout, leaves = torch.randn_like(q), (qg, kg, vg)
    for kernel in ("hopper", "mma"):
        base = row(f"fwd+bwd ours {kernel}, window alone",
                   fwd_bwd(lambda: ours(qg, kg, vg, kernel=kernel, window=window), leaves, dout), 3.5 * band_vis)
        row(f"fwd+bwd ours {kernel}, padding mask + window",
            fwd_bwd(lambda: ours(qg, kg, vg, additive, kernel=kernel, window=window), leaves, dout), 3.5 * vis, base)
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        with sdpa_kernel([backend]):
            row(f"fwd+bwd SDPA {name}, merged bf16 (B,1,N,N) mask",
                fwd_bwd(lambda: sdpa(qg, kg, vg, merged_bf16), leaves, dout), 3.5 * vis)

    ref = sdpa(q[:, :2].double(), k[:, :2].double(), v[:, :2].double(), merged_bool)
    errors = []
    for kernel in ("hopper", "mma"):
        got = ours(q[:, :2], k[:, :2], v[:, :2], additive, kernel=kernel, window=window)
        errors.append(f"{kernel} max rel error vs float64: {((got.double() - ref).abs().max() / ref.abs().max()).item():.2e}")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; B={B} H={H} N={N} d={d} bf16, lengths "
          f"{lens.tolist()}, window {window}; visible pairs {int(merged_bool.sum()) / (B * N * N):.4f} of all")
    print("| variant | ms | TFLOP/s (visible) | vs band alone | note |\n|---|---|---|---|---|")
    for name, ms, tf, ratio, note in rows:
        cells = [f"{ms:.3f}" if ms else "", f"{tf:.0f}" if tf else "", f"{ratio:.2f}x" if ratio else ""]
        print(f"| {name} | {' | '.join(cells)} | {note} |")
    print("\n".join(errors))


if __name__ == "__main__":
    main()
