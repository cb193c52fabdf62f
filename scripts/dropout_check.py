"""Same-run timings of dropout in the fused kernels, H100 (docs/notes-dropout.md).

    python3 scripts/dropout_check.py [--sizes 4096 16384] [--dims 128] [--out DIR]
    python3 scripts/dropout_check.py --sizes 4096 --dims 64 128 --skip-sdpa --rounds 2 \\
        --lib base=/path/a.so --lib ring=/path/b.so [--train-libs base ring]

bf16 (--dtype fp16: fp16), H * d = 2048 (H = 16 at d = 128, 32 at d = 64), B = 65536 / N (4 at 4096, 1 at 16k), not causal and
causal. Rows: our kernel (kernel="auto": hopper on sm_90; mma with --kernels mma) without dropout and with
dropout_p = 0.1, then torch's SDPA without dropout and with dropout_p = 0.1 on the flash, efficient and cuDNN
backends, so each backend's own p = 0.1 / p = 0 stands beside ours (a backend that refuses the call prints
n/a; --skip-sdpa leaves them out). Every call goes through the public entries
(sy.attention.scaled_dot_product_attention, F.scaled_dot_product_attention): forward, and forward + backward
(out.backward(dout); --fwd-only leaves it out).
--lib NAME=PATH (repeatable): A/B of builds of the CUDA library in one process. Each is dlopen'ed and put
in place of the loaded one (sympathy.attention.cuda_build._libs) before its rows; the libraries take
turns inside each of --rounds rounds and each row is the median over the rounds, so drift (clocks,
temperature) falls on all of them alike. Ratios: p=0.1 over the same build's p=0 (an SDPA row: over the same
backend's p=0), and over the first build's p=0. --train-libs / --train-dims: the builds and head dims timed
forward + backward too (default all).
The target of issue #20: ours with dropout >= 0.85x ours without.
--mask: instead, dropout beside an attn_mask (issue 20's mask + dropout), one table per --dims head dim at
--sizes: B = 65536 / N sequences with key lengths N, 3N/4, N/2, N/4 in turn (right padding, an additive
(B, 1, 1, N) mask in the input dtype, -inf past each length), not causal. Rows: ours masked without dropout,
ours masked with dropout 0.1, ours unmasked with dropout 0.1, torch's SDPA (efficient backend) with the
same mask and dropout 0.1; forward and forward + backward. TFLOP/s over the visible pairs (the unmasked
row: over all); ratios against ours masked without dropout.
    python3 scripts/dropout_check.py --mask --sizes 4096 --dims 128 --dtype bf16
--window W: instead, dropout with a causal sliding window of W keys (window=(W - 1, 0), session dropwin20), one
table per --dims head dim at --sizes (B = 65536 / N): ours windowed without dropout, ours windowed with dropout
0.1, ours causal (no window) with dropout 0.1, and torch's SDPA (efficient backend) with dropout 0.1 on the
window as a bool (1, 1, N, N) mask (what transformers' sliding-window mask ran on before: our fused dropout
refused windows); forward and forward + backward, TFLOP/s over the visible pairs, the route printed first.
    python3 scripts/dropout_check.py --window 1024 --sizes 4096 --dims 64 128 --dtype bf16
Timings: triton.testing.do_bench medians; FLOPs 4 * B * H * pairs * d forward (pairs = N^2, or
N (N + 1) / 2 causal), 2.5x that backward.
"""
import argparse
import json
import math
import os
import statistics

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

import sympathy as sy
from sympathy.attention import cuda_build
from sympathy.attention.torch_api import decide

BACKENDS = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
            "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION}


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")   # ms


def make_call(name, q, k, v, p, causal, kernel, train, mask=None, window=None):
    dout = torch.randn_like(q)
    leaves = [t.detach().clone().requires_grad_(train) for t in (q, k, v)]

    def attend():
        if name.startswith("ours"):
            return sy.attention.scaled_dot_product_attention(*leaves, mask, p, causal, kernel=kernel, window=window)
        with sdpa_kernel(BACKENDS[name]):
            return F.scaled_dot_product_attention(*leaves, mask, p, causal)

    def run():
        out = attend()
        if train:
            out.backward(dout)
    return run


_swapped = []


def use_library(path):
    """Put the library at `path` in place of the loaded sm_90/sm_80 one (None: the default build)."""
    arch = cuda_build.device_arch()
    ffi, _ = cuda_build.library(arch)
    if path is not None:
        cuda_build._libs[arch] = ffi.dlopen(path)
        _swapped.append(path)
    elif _swapped:   # back to the default build after another was swapped in
        cuda_build._libs.pop(arch, None)
        cuda_build.library(arch)
        _swapped.clear()


def random_qkv(batch, heads, n, d, dtype):
    """q, k, v of one cell, the same numbers in every table and run (seeded by the cell's n + d)."""
    g = torch.Generator(device="cuda").manual_seed(n + d)
    return tuple(torch.randn(batch, heads, n, d, generator=g, device="cuda", dtype=dtype) for _ in range(3))


def table(sizes, kernel, dims, libs, train_libs, train_dims, rounds, skip_sdpa, fwd_only, tokens=65536, dtype="bf16"):
    rows = []
    print(f"\n## dropout 0.1 vs none, {dtype}, H * d = 2048, B = {tokens} / N; kernel={kernel!r}; builds "
          f"{[name for name, _ in libs]}, median of {rounds} round(s)")
    print("| N | d | causal | pass | variant | ms | TFLOP/s | vs same build p=0 | vs first build p=0 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in sizes:
        batch = max(1, tokens // n)
        for d in dims:
            heads = 2048 // d
            q, k, v = random_qkv(batch, heads, n, d, torch.float16 if dtype == "fp16" else torch.bfloat16)
            for causal in (False, True):
                pairs = n * (n + 1) // 2 if causal else n * n
                for train in (False,) if fwd_only or d not in train_dims else (False, True):
                    flops = 4 * batch * heads * pairs * d * (3.5 if train else 1.0)
                    timed = {}
                    for _ in range(rounds):
                        for name, path in libs:
                            if train and name not in train_libs:
                                continue
                            use_library(path)
                            for p in (0.0, 0.1):
                                ms = bench(make_call("ours", q, k, v, p, causal, kernel, train))
                                timed.setdefault((name, p), []).append(ms)
                    use_library(libs[0][1])
                    if not skip_sdpa:
                        for b in BACKENDS:   # each backend's own price of dropout: its p = 0.1 over its p = 0
                            for p in (0.0, 0.1):
                                try:
                                    timed[(b, p)] = [bench(make_call(b, q, k, v, p, causal, kernel, train))]
                                except RuntimeError as exc:   # a backend that refuses the call
                                    print(f"| {n} | {d} | {causal} | {'fwd+bwd' if train else 'fwd'} | {b} p={p} | n/a | | "
                                          f"{str(exc).splitlines()[0][:60]} | |")
                    first = statistics.median(timed[(libs[0][0], 0.0)])
                    for (name, p), times in timed.items():
                        ms = statistics.median(times)
                        own = statistics.median(timed[(name, 0.0)]) if (name, 0.0) in timed else first
                        label = f"{name} p={p}"
                        rows.append(dict(n=n, d=d, causal=causal, train=train, variant=label, ms=ms, runs=times,
                                         tflops=flops / ms / 1e9, vs_same_p0=own / ms, vs_first_p0=first / ms))
                        print(f"| {n} | {d} | {causal} | {'fwd+bwd' if train else 'fwd'} | {label} | {ms:.3f} | "
                              f"{flops / ms / 1e9:.0f} | {own / ms:.2f}x | {first / ms:.2f}x |", flush=True)
    return rows


def mask_table(sizes, kernel, dims, fwd_only, tokens=65536, dtype="bf16"):
    """--mask: dropout beside a right-padding attn_mask, ours against torch's efficient backend."""
    rows = []
    torch_dtype = torch.float16 if dtype == "fp16" else torch.bfloat16
    print(f"\n## attn_mask (right padding, additive (B,1,1,N) {dtype}) with dropout, H * d = 2048, B = {tokens} / N; "
          f"kernel={kernel!r}")
    print("| N | d | pass | variant | ms | TFLOP/s (visible pairs) | vs ours masked p=0 |")
    print("|---|---|---|---|---|---|---|")
    for n in sizes:
        batch = max(1, tokens // n)
        lengths = [n * (4 - i % 4) // 4 for i in range(batch)]   # N, 3N/4, N/2, N/4, ...
        for d in dims:
            heads = 2048 // d
            q, k, v = random_qkv(batch, heads, n, d, torch_dtype)
            keys = torch.arange(n, device="cuda")[None, :] < torch.tensor(lengths, device="cuda")[:, None]
            mask = torch.zeros(batch, 1, 1, n, device="cuda", dtype=torch_dtype).masked_fill_(~keys[:, None, None], -math.inf)
            visible = n * sum(lengths)
            decision = decide(q, k, v, mask, 0.1, False, kernel=kernel)
            print(f"| {n} | {d} | route | ours masked p=0.1 | {decision.path or decision.reason} | | |")
            variants = [("ours masked p=0.0", "ours", mask, None, False, 0.0, visible),
                        ("ours masked p=0.1", "ours", mask, None, False, 0.1, visible),
                        ("ours unmasked p=0.1", "ours", None, None, False, 0.1, n * n * batch),
                        ("sdpa-efficient masked p=0.1", "sdpa-efficient", mask, None, False, 0.1, visible)]
            rows += time_variants(n, d, heads, q, k, v, kernel, variants, fwd_only, "vs_masked_p0")
    return rows


def time_variants(n, d, heads, q, k, v, kernel, variants, fwd_only, ratio):
    """--mask and --window rows: (label, name, mask, window, causal, p, pairs over the batch) each timed forward
    (and forward + backward), TFLOP/s over those pairs, `ratio` against the first variant."""
    rows = []
    for train in (False,) if fwd_only else (False, True):
        base = None
        for label, name, m, w, causal, p, pairs in variants:
            flops = 4 * heads * pairs * d * (3.5 if train else 1.0)
            step = "fwd+bwd" if train else "fwd"
            try:
                ms = bench(make_call(name, q, k, v, p, causal, kernel, train, mask=m, window=w))
            except RuntimeError as exc:   # a backend that refuses the call
                print(f"| {n} | {d} | {step} | {label} | n/a | | {str(exc).splitlines()[0][:60]} |")
                continue
            base = base or ms
            rows.append(dict(n=n, d=d, train=train, variant=label, ms=ms, tflops=flops / ms / 1e9, **{ratio: base / ms}))
            print(f"| {n} | {d} | {step} | {label} | {ms:.3f} | {flops / ms / 1e9:.0f} | {base / ms:.2f}x |", flush=True)
    return rows


def window_table(sizes, kernel, dims, width, fwd_only, tokens=65536, dtype="bf16"):
    """--window: dropout with a causal sliding window of `width` keys, ours against torch's efficient backend."""
    rows = []
    torch_dtype = torch.float16 if dtype == "fp16" else torch.bfloat16
    window = (width - 1, 0)
    print(f"\n## causal sliding window of {width} keys with dropout, {dtype}, H * d = 2048, B = {tokens} / N; "
          f"kernel={kernel!r}")
    print("| N | d | pass | variant | ms | TFLOP/s (visible pairs) | vs ours windowed p=0 |")
    print("|---|---|---|---|---|---|---|")
    for n in sizes:
        batch = max(1, tokens // n)
        band = torch.ones(n, n, dtype=torch.bool, device="cuda").tril().triu(-(width - 1))[None, None]
        visible = int(band.sum())
        for d in dims:
            heads = 2048 // d
            q, k, v = random_qkv(batch, heads, n, d, torch_dtype)
            decision = decide(q, k, v, None, 0.1, True, kernel=kernel, window=window)
            print(f"| {n} | {d} | route | ours windowed p=0.1 | {decision.path or decision.reason} | | |")
            # The mask row passes the band as attn_mask, so not is_causal (torch's ValueError beside a mask).
            variants = [("ours windowed p=0.0", "ours", None, window, True, 0.0, batch * visible),
                        ("ours windowed p=0.1", "ours", None, window, True, 0.1, batch * visible),
                        ("ours causal p=0.1", "ours", None, None, True, 0.1, batch * n * (n + 1) // 2),
                        ("sdpa-efficient window as mask p=0.1", "sdpa-efficient", band, None, False, 0.1, batch * visible)]
            rows += time_variants(n, d, heads, q, k, v, kernel, variants, fwd_only, "vs_windowed_p0")
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--dims", type=int, nargs="+", default=[128], choices=[64, 128])
    parser.add_argument("--kernels", nargs="+", default=["auto"])
    parser.add_argument("--lib", action="append", default=[], metavar="NAME=PATH",
                        help="a build of the CUDA library to time (repeatable); default: the loaded one")
    parser.add_argument("--train-libs", nargs="+", default=None, help="the --lib names timed forward + backward")
    parser.add_argument("--train-dims", type=int, nargs="+", default=[64, 128], help="the head dims timed forward + backward")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--skip-sdpa", action="store_true")
    parser.add_argument("--fwd-only", action="store_true")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    parser.add_argument("--mask", action="store_true", help="dropout beside an attn_mask (see the top)")
    parser.add_argument("--window", type=int, default=None, metavar="W",
                        help="dropout with a causal sliding window of W keys (see the top)")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)   # made before the timings: a missing folder must not lose them
    if args.mask:
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
        rows = {kernel: mask_table(args.sizes, kernel, args.dims, args.fwd_only, dtype=args.dtype) for kernel in args.kernels}
        with open(os.path.join(args.out, f"dropout_mask_check_{args.dtype}.json"), "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), f, indent=1)
        return
    if args.window is not None:
        if args.window < 1:
            parser.error(f"--window must be at least 1; got {args.window}")
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
        rows = {kernel: window_table(args.sizes, kernel, args.dims, args.window, args.fwd_only, dtype=args.dtype)
                for kernel in args.kernels}
        with open(os.path.join(args.out, f"dropout_window_check_{args.dtype}.json"), "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, window=args.window,
                           rows=rows), f, indent=1)
        return
    libs = [tuple(spec.split("=", 1)) for spec in args.lib] or [("ours", None)]
    train_libs = set(args.train_libs or [name for name, _ in libs])
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}")
    rows = {kernel: table(args.sizes, kernel, args.dims, libs, train_libs, args.train_dims, args.rounds, args.skip_sdpa,
                    args.fwd_only, dtype=args.dtype)
            for kernel in args.kernels}
    name = "dropout_check.json" if args.dtype == "bf16" else f"dropout_check_{args.dtype}.json"
    with open(os.path.join(args.out, name), "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, libs=libs, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
