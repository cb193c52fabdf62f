"""attn_mask tile by tile on the GPU, one device call: the GPU tests of the mask kernels, then the
issue's speed target beside torch's SDPA backends in the same process, as a table.

    python3 scripts/mask_attn_check.py [--out DIR] [--skip-tests] [--d64]

Target (issue 20): an additive padding mask >= 0.8x our unmasked speed on the visible tokens, bf16, d = 128.
A padded batch of B = 4 sequences of N = 8192 keys, lengths 8192, 6144, 4096, 2048 (right padding of the
keys; every query row computed): visible (query, key) pairs = H * N * sum(lengths); TFLOP/s = 4 * d * pairs /
time (the unmasked run: all B * H * N * N pairs). Times: triton's do_bench medians.
Forward + backward: masked `hopper` calls run the hopper backward tile by tile; the rows "previous route"
run the same calls with the mma backward (what masked calls ran before), in the same process. d = 64
rows: H = 32 (H * d the same). --d64 times only d = 64, forward and forward + backward, each masked hopper call
also on its previous route (the mma forward, then the hopper backward), in the same process.
"""
import argparse
import math
import os
import subprocess
import sys
import time

import torch


def bench(fn):
    from triton.testing import do_bench

    return do_bench(fn, warmup=50, rep=300)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--d64", action="store_true", help="only d = 64, masked hopper calls also on the mma forward")
    args = ap.parse_args()
    lines = []
    if not args.skip_tests:
        t0 = time.time()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
                               "tests/test_attention_mask_tiles.py"], capture_output=True, text=True)
        with open(os.path.join(args.out, "mask_tests.log"), "w") as f:
            f.write(done.stdout + done.stderr)
        lines.append(f"tests: {done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-500:]}"
                     f" ({time.time() - t0:.0f} s)")

    import warnings

    from sympathy.attention import cuda, mask_tiles

    warnings.simplefilter("ignore")   # torch's "kernel not used because" notes for the backends that refuse
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    B, H, N, d = 4, 16, 8192, 128
    lens = torch.tensor([8192, 6144, 4096, 2048])
    q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    keep = (torch.arange(N)[None, :] < lens[:, None]).cuda()                     # (B, N)
    additive = torch.zeros(B, 1, 1, N, device="cuda").masked_fill(~keep[:, None, None, :], -math.inf)
    additive_bf16 = additive.to(torch.bfloat16)
    boolean = keep[:, None, None, :].expand(B, 1, N, N).contiguous()              # transformers' 4-D layout
    full_flops = 4 * d * B * H * N * N
    vis_flops = 4 * d * H * N * int(lens.sum())
    rows = []

    def row(name, fn, flops, base=None):
        try:
            ms = bench(fn)
        except Exception as exc:   # a backend that does not take this call
            rows.append((name, None, None, None, str(exc).splitlines()[0][:60]))
            return None
        tf = flops / ms / 1e9
        rows.append((name, ms, tf, tf / base if base else None, ""))
        return tf

    sdpa = torch.nn.functional.scaled_dot_product_attention
    ours = cuda.scaled_dot_product_attention
    def mma_forward(fn):
        """fn with d = 64 masked hopper forwards on the mma forward (their route before HopperTraitsD64Short took
        masks); the backward stays the hopper one (the autograd context keeps "hopper")."""
        def routed():
            real = cuda._launch

            def launch(q_, k_, v_, attn_mask, is_causal, scale, kernel, *a, **kw):
                if kernel == "hopper" and attn_mask is not None and q_.shape[-1] == 64:
                    kernel = "mma"
                return real(q_, k_, v_, attn_mask, is_causal, scale, kernel, *a, **kw)
            cuda._launch = launch
            try:
                return fn()
            finally:
                cuda._launch = real
        return routed

    if args.d64:   # d = 64 (H = 32: H * d as at d = 128), masked hopper calls on both forwards
        q64, k64, v64 = (torch.randn(B, 2 * H, N, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        full64, vis64 = 4 * 64 * B * 2 * H * N * N, 4 * 64 * 2 * H * N * int(lens.sum())
        base = {kernel: row(f"d=64 ours {kernel}, no mask (all pairs)", lambda kernel=kernel: ours(q64, k64, v64, kernel=kernel),
                            full64) for kernel in ("hopper", "mma")}
        for kernel in ("hopper", "mma"):
            for name, m in (("additive (B,1,1,N) f32", additive), ("bool (B,1,N,N)", boolean)):
                run = lambda m=m, kernel=kernel: ours(q64, k64, v64, m, kernel=kernel)
                row(f"d=64 ours {kernel}, {name}", run, vis64, base[kernel])
                if kernel == "hopper":
                    row(f"d=64 ours {kernel}, {name}, previous route (mma forward)", mma_forward(run), vis64, base[kernel])
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            b0 = row("d=64 SDPA cudnn, no mask", lambda: sdpa(q64, k64, v64), full64)
            row("d=64 SDPA cudnn, additive (B,1,1,N) bf16", lambda: sdpa(q64, k64, v64, additive_bf16), vis64, b0)
        ref64 = torch.nn.functional.scaled_dot_product_attention(q64[:, :2].double(), k64[:, :2].double(),
                                                                 v64[:, :2].double(), additive.double())
        for kernel in ("hopper", "mma"):
            got = ours(q64[:, :2], k64[:, :2], v64[:, :2], additive, kernel=kernel)
            lines.append(f"d=64 {kernel} additive-mask max rel error vs float64: "
                         f"{((got.double() - ref64).abs().max() / ref64.abs().max()).item():.2e}")
        del q64, k64, v64
    if not args.d64:
        base = {}
        for kernel in ("hopper", "mma"):
            base[kernel] = row(f"ours {kernel}, no mask (all pairs)", lambda: ours(q, k, v, kernel=kernel), full_flops)
        for kernel in ("hopper", "mma"):
            row(f"ours {kernel}, additive (B,1,1,N) f32", lambda: ours(q, k, v, additive, kernel=kernel), vis_flops,
                base[kernel])
            row(f"ours {kernel}, additive (B,1,1,N) bf16", lambda: ours(q, k, v, additive_bf16, kernel=kernel), vis_flops,
                base[kernel])
            row(f"ours {kernel}, bool (B,1,N,N)", lambda: ours(q, k, v, boolean, kernel=kernel), vis_flops, base[kernel])

            def cold():
                mask_tiles._cache.clear()
                return ours(q, k, v, boolean, kernel=kernel)
            row(f"ours {kernel}, bool (B,1,N,N), pre-pass each call", cold, vis_flops, base[kernel])
        mask_tiles._cache.clear()
        row("pre-pass alone, bool (B,1,N,N)", lambda: (mask_tiles._cache.clear(),
                                                        mask_tiles.prepare(boolean, (B, H, N, N), "hopper", 128)), vis_flops)
        row("pre-pass alone, additive (B,1,1,N)", lambda: (mask_tiles._cache.clear(),
                                                            mask_tiles.prepare(additive, (B, H, N, N), "hopper", 128)), vis_flops)
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
                              ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
            with sdpa_kernel([backend]):
                b0 = row(f"SDPA {name}, no mask", lambda: sdpa(q, k, v), full_flops)
                row(f"SDPA {name}, additive (B,1,1,N) bf16", lambda: sdpa(q, k, v, additive_bf16), vis_flops, b0)
                row(f"SDPA {name}, bool (B,1,N,N)", lambda: sdpa(q, k, v, boolean), vis_flops, b0)

    # forward + backward (FLOPs 3.5x the forward's: the backward 2.5x). Masked calls: the forward above,
    # the backward tile by tile (mask_tiles.py): hopper's after `hopper`, mma's after `mma`.
    def fwd_bwd(f, leaves, dout):
        def run():
            for t in leaves:
                t.grad = None
            f().backward(dout)
        return run

    def previous_route(run):
        """run with every backward on the mma backward (the route masked calls took before)."""
        def routed():
            real = cuda._launch_bwd
            cuda._launch_bwd = lambda *a, **kw: real(*a[:10], "mma", **kw)
            try:
                run()
            finally:
                cuda._launch_bwd = real
        return routed

    for d_, h_ in ((64, 2 * H),) if args.d64 else ((128, H), (64, 2 * H)):
        if d_ == 128:
            qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
        else:
            qg, kg, vg = (torch.randn(B, h_, N, d_, device="cuda", dtype=torch.bfloat16).requires_grad_() for _ in range(3))
        dout, leaves, sfx = torch.randn_like(qg), (qg, kg, vg), "" if d_ == 128 else f" d={d_}"
        fb = {}
        for kernel in ("hopper", "mma"):
            fb[kernel] = row(f"fwd+bwd ours {kernel}{sfx}, no mask",
                             fwd_bwd(lambda: ours(qg, kg, vg, kernel=kernel), leaves, dout), 3.5 * full_flops)
            additive_run = fwd_bwd(lambda: ours(qg, kg, vg, additive, kernel=kernel), leaves, dout)
            row(f"fwd+bwd ours {kernel}{sfx}, additive (B,1,1,N) f32", additive_run, 3.5 * vis_flops, fb[kernel])
            if kernel == "hopper" and not args.d64:
                row(f"fwd+bwd ours {kernel}{sfx}, additive (B,1,1,N) f32, previous route (mma backward)",
                    previous_route(additive_run), 3.5 * vis_flops, fb[kernel])
            if kernel == "hopper" and d_ == 64:
                row(f"fwd+bwd ours {kernel}{sfx}, additive (B,1,1,N) f32, previous route (mma forward)",
                    mma_forward(additive_run), 3.5 * vis_flops, fb[kernel])
            row(f"fwd+bwd ours {kernel}{sfx}, bool (B,1,N,N)",
                fwd_bwd(lambda: ours(qg, kg, vg, boolean, kernel=kernel), leaves, dout), 3.5 * vis_flops, fb[kernel])
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
            if name == "efficient" and (d_ == 64 or args.d64):
                continue
            with sdpa_kernel([backend]):
                b0 = row(f"fwd+bwd SDPA {name}{sfx}, no mask", fwd_bwd(lambda: sdpa(qg, kg, vg), leaves, dout),
                         3.5 * full_flops)
                row(f"fwd+bwd SDPA {name}{sfx}, additive (B,1,1,N) bf16",
                    fwd_bwd(lambda: sdpa(qg, kg, vg, additive_bf16), leaves, dout), 3.5 * vis_flops, b0)
                row(f"fwd+bwd SDPA {name}{sfx}, bool (B,1,N,N)",
                    fwd_bwd(lambda: sdpa(qg, kg, vg, boolean), leaves, dout), 3.5 * vis_flops, b0)

    # error of the masked run against float64 on two heads
    ref = torch.nn.functional.scaled_dot_product_attention(q[:, :2].double(), k[:, :2].double(), v[:, :2].double(),
                                                           additive.double())
    for kernel in ("hopper", "mma") if not args.d64 else ():
        got = ours(q[:, :2], k[:, :2], v[:, :2], additive, kernel=kernel)
        lines.append(f"{kernel} additive-mask max rel error vs float64: "
                     f"{((got.double() - ref).abs().max() / ref.abs().max()).item():.2e}")


    table = [f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, B={B} "
             f"{'H=32 N=' + str(N) + ' d=64' if args.d64 else f'H={H} N={N} d={d}'} bf16, "
             f"key lengths {lens.tolist()} (visible pairs {vis_flops / full_flops:.3f} of all)",
             "| variant | ms | TFLOP/s (visible pairs) | vs same kernel unmasked | note |", "|---|---|---|---|---|"]
    for name, ms, tf, ratio, note in rows:
        table.append(f"| {name} | {'' if ms is None else f'{ms:.3f}'} | {'' if tf is None else f'{tf:.0f}'} | "
                     f"{'' if ratio is None else f'{ratio:.2f}x'} | {note} |")
    text = "\n".join(lines + table)
    with open(os.path.join(args.out, "mask_table.md"), "w") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
