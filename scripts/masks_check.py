"""Same-run timings of the band (causal_offset, window) in the hopper and mma kernels, H100 (docs/notes-masks.md).

    python3 scripts/masks_check.py [--base LIB.so] [--quick]

1. Sliding window 4096 at N = 32k (bf16, d = 128, B = 1, H = 16, causal, window (4095, 0)) against the
   window's share of full attention: share = t_full * pairs(window) / pairs(full), ratio = share / t_window
   (>= 0.9 is the target); full = causal and not causal; forward, and forward + backward.
2. Bottom-right causal (KV-cache prefill: 2048 queries over 32768 keys) against torch's SDPA on the same
   causal_lower_right bias (cuDNN / flash, whichever torch picks).
3. Packed variable-length batch (sy.attention.varlen_attention, one hopper launch): 16384 tokens in sequences
   of mixed lengths, causal, against cuDNN and flash on the same sequences padded to the longest (is_causal:
   padding at the end never reaches a real row).
4. No regression: the plain forward (not causal, causal) of this tree against --base, a library built from
   main's sources, interleaved in the same process (the band's fields come after everything the old
   library reads, so one parameter block serves both).
Timings: triton.testing.do_bench medians; FLOPs 4 * pairs * d (forward), 2.5x that for the backward.
"""
import argparse
import math

import torch
import triton

from sympathy.attention import band, cuda


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")   # ms


def pairs(n_q, n_kv, is_causal, offset=0, window=band.NO_WINDOW):
    return int(band.band_mask(n_q, n_kv, is_causal, offset, window, device="cuda").sum())


def forward(q, k, v, kernel, is_causal, offset=0, window=band.NO_WINDOW):
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    scale = 1.0 / math.sqrt(q.shape[-1])
    return lambda: cuda._launch(q, k, v, None, is_causal, scale, kernel, out=out, lse=lse, causal_offset=offset,
                                window=window)


def train_step(q, k, v, kernel, is_causal, window=band.NO_WINDOW):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    dout = torch.randn_like(q)

    def run():
        out = cuda.scaled_dot_product_attention(*leaves, is_causal=is_causal, kernel=kernel, window=window)
        out.backward(dout)
    return run


def window_table(kernels, n=32768, heads=16, d=128, w=4096, quick=False):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, heads, n, d, generator=g, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    window = (w - 1, 0)
    p_win, p_causal, p_full = pairs(n, n, True, 0, window), n * (n + 1) // 2, n * n
    print(f"\n## window {w} at N = {n} (B = 1, H = {heads}, d = {d}, bf16): pairs window/causal "
          f"{p_win / p_causal:.4f}, window/full {p_win / p_full:.4f}")
    print("| kernel | pass | window ms | causal ms | full ms | window TFLOP/s | vs causal share | vs full share |")
    print("|---|---|---|---|---|---|---|---|")
    for kernel in kernels:
        for name, make, mult in (("fwd", forward, 1.0), ("fwd+bwd", train_step, 3.5))[:1 if quick else 2]:
            t_w = bench(make(q, k, v, kernel, True, window=window) if make is train_step else
                        make(q, k, v, kernel, True, 0, window))
            t_c = bench(make(q, k, v, kernel, True))
            t_f = bench(make(q, k, v, kernel, False))
            tflops = mult * 4 * heads * p_win * d / t_w / 1e9
            print(f"| {kernel} | {name} | {t_w:.3f} | {t_c:.3f} | {t_f:.3f} | {tflops:.0f} | "
                  f"{t_c * p_win / p_causal / t_w:.2f}x | {t_f * p_win / p_full / t_w:.2f}x |")


def prefill_table(kernels, n_q=2048, n_kv=32768, heads=32, d=128):
    from torch.nn.attention.bias import causal_lower_right

    g = torch.Generator(device="cuda").manual_seed(1)
    q = torch.randn(1, heads, n_q, d, generator=g, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, heads, n_kv, d, generator=g, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    bias = causal_lower_right(n_q, n_kv)
    flops = 4 * heads * pairs(n_q, n_kv, True, n_kv - n_q) * d
    t_torch = bench(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias))
    print(f"\n## bottom-right causal, {n_q} queries over {n_kv} keys (H = {heads}, d = {d}, bf16)")
    print("| kernel | ms | TFLOP/s | torch SDPA (causal_lower_right) ms | ours / torch speed |")
    print("|---|---|---|---|---|")
    for kernel in kernels:
        t = bench(forward(q, k, v, kernel, True, n_kv - n_q))
        print(f"| {kernel} | {t:.3f} | {flops / t / 1e9:.0f} | {t_torch:.3f} | {t_torch / t:.2f}x |")


def varlen_table(heads=16, d=128):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import sympathy as sy

    lens = [4096, 3000, 2048, 2048, 1500, 1024, 1024, 700, 512, 256, 100, 68, 4]   # 16376 tokens
    g = torch.Generator(device="cuda").manual_seed(2)
    total, longest = sum(lens), max(lens)
    q, k, v = (torch.randn(total, heads, d, generator=g, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
    flops = 4 * heads * d * sum(n * (n + 1) // 2 for n in lens)
    t_ours = bench(lambda: sy.attention.varlen_attention(q, k, v, cu, cu, longest, longest, causal=True))
    padded = [torch.zeros(len(lens), heads, longest, d, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    for b, (s, n) in enumerate(zip(cu.tolist(), lens)):
        for dst, src in zip(padded, (q, k, v)):
            dst[b, :, :n] = src[s:s + n].transpose(0, 1)
    print(f"\n## packed varlen, {len(lens)} sequences, {total} tokens, longest {longest} (H = {heads}, d = {d}, bf16, causal)")
    print("| variant | ms | TFLOP/s (real tokens) | cuDNN padded / variant |")
    print("|---|---|---|---|")
    times = {"ours varlen (hopper)": t_ours}
    for name, backend in (("sdpa cudnn padded", SDPBackend.CUDNN_ATTENTION), ("sdpa flash padded", SDPBackend.FLASH_ATTENTION)):
        with sdpa_kernel(backend):
            times[name] = bench(lambda: torch.nn.functional.scaled_dot_product_attention(*padded, is_causal=True))
    for name, t in times.items():
        print(f"| {name} | {t:.3f} | {flops / t / 1e9:.0f} | {times['sdpa cudnn padded'] / t:.2f}x |")
    # forward + backward (FLOPs 3.5x the forward's): ours packed, cuDNN on the padded batch
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    padded_leaves = [t.detach().clone().requires_grad_() for t in padded]
    dout, dout_padded = torch.randn_like(q), torch.randn_like(padded[0])

    def ours():
        sy.attention.varlen_attention(*leaves, cu, cu, longest, longest, causal=True).backward(dout)

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            torch.nn.functional.scaled_dot_product_attention(*padded_leaves, is_causal=True).backward(dout_padded)
    t_o, t_c = bench(ours), bench(cudnn)
    print(f"| ours varlen fwd+bwd | {t_o:.3f} | {3.5 * flops / t_o / 1e9:.0f} | {t_c / t_o:.2f}x |")
    print(f"| sdpa cudnn padded fwd+bwd | {t_c:.3f} | {3.5 * flops / t_c / 1e9:.0f} | 1.00x |")


def regression_table(base_path, kernels, quick=False):
    arch = cuda.device_arch()
    ffi, new = cuda.library(arch)
    old = ffi.dlopen(base_path)
    print("\n## plain forward, this tree vs main (bf16, B*N = 16384, H*d = 2048; best of 3 interleaved medians)")
    print("| kernel | d | N | causal | main TFLOP/s | this TFLOP/s | this / main |")
    print("|---|---|---|---|---|---|---|")
    for kernel in kernels:
        for d in (64, 128):
            for n in (8192,) if quick else (2048, 8192):
                heads, batch = 2048 // d, 16384 // n
                g = torch.Generator(device="cuda").manual_seed(n + d)
                q, k, v = (torch.randn(batch, heads, n, d, generator=g, device="cuda", dtype=torch.bfloat16)
                           for _ in range(3))
                for causal in (False, True):
                    fn = forward(q, k, v, kernel, causal)
                    times = {"main": [], "this": []}
                    for _ in range(3):
                        for name, lib in (("main", old), ("this", new)):
                            cuda._libs[arch] = lib
                            times[name].append(bench(fn))
                    cuda._libs[arch] = new
                    flops = 4 * batch * heads * (n * (n + 1) // 2 if causal else n * n) * d
                    t_old, t_new = min(times["main"]), min(times["this"])
                    print(f"| {kernel} | {d} | {n} | {'yes' if causal else 'no'} | {flops / t_old / 1e9:.0f} | "
                          f"{flops / t_new / 1e9:.0f} | {t_old / t_new:.3f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", help="main's library (built from its cuda_src) for the regression table")
    ap.add_argument("--kernels", nargs="+", default=["hopper", "mma"])
    ap.add_argument("--quick", action="store_true", help="forward only, N = 8192 only in the regression table")
    args = ap.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__)
    window_table(args.kernels, quick=args.quick)
    prefill_table(args.kernels)
    if "hopper" in args.kernels:
        varlen_table()
    if args.base:
        regression_table(args.base, args.kernels, quick=args.quick)


if __name__ == "__main__":
    main()
