"""Same-run timings of dropout in the fused kernels, H100 (docs/notes-dropout.md).

    python3 scripts/dropout_check.py [--sizes 4096 16384] [--out DIR] [--variant NAME=prebuilt.so ...]

bf16, d = 128, H = 16, B = 65536 / N (4 at 4096, 1 at 16k), not causal and causal. Rows: our kernel
(kernel="auto": hopper on sm_90; mma with --kernel mma) without dropout and with dropout_p = 0.1, then
torch's SDPA with dropout_p = 0.1 on the flash, efficient and cuDNN backends (a backend that refuses
the call prints n/a). Every call goes through the public entries (sy.attention.scaled_dot_product_attention,
F.scaled_dot_product_attention): forward, and forward + backward (out.backward(dout)).
The target of issue #20: ours with dropout >= 0.85x ours without. --variant adds rows "ours p=0.1 [NAME]":
the same calls with sy_attn_hopper_bwd taken from another build of attention_hopper_bwd.cu (an earlier
version, built with `nvcc ... -gencode arch=compute_90a,code=sm_90a --shared`; scripts/bwd_device.py's
_HopperBwdFrom), timed in the same run.
Timings: triton.testing.do_bench medians; FLOPs 4 * B * H * pairs * d forward (pairs = N^2, or
N (N + 1) / 2 causal), 2.5x that backward.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

import sympathy as sy

BACKENDS = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
            "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION}


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")   # ms


VARIANTS = {}   # "ours [NAME]" -> the library with NAME's hopper backward (--variant)


def make_call(name, q, k, v, p, causal, kernel, train):
    dout = torch.randn_like(q)
    leaves = [t.detach().clone().requires_grad_(train) for t in (q, k, v)]

    def attend():
        if name.startswith("ours"):
            return sy.attention.scaled_dot_product_attention(*leaves, None, p, causal, kernel=kernel)
        with sdpa_kernel(BACKENDS[name]):
            return F.scaled_dot_product_attention(*leaves, None, p, causal)

    def run():
        out = attend()
        if train:
            out.backward(dout)
    if name not in VARIANTS:
        return run
    from sympathy.attention import cuda

    def with_variant(arch=cuda.device_arch()):
        main = cuda._libs[arch]
        cuda._libs[arch] = VARIANTS[name]
        try:
            run()
        finally:
            cuda._libs[arch] = main
    return with_variant


def table(sizes, kernel, heads=16, d=128, tokens=65536):
    rows = []
    print(f"\n## dropout 0.1 vs none, bf16, d = {d}, H = {heads}, B = {tokens} / N; kernel={kernel!r}")
    print("| N | causal | pass | variant | ms | TFLOP/s | vs ours without dropout |")
    print("|---|---|---|---|---|---|---|")
    for n in sizes:
        batch = max(1, tokens // n)
        g = torch.Generator(device="cuda").manual_seed(n)
        q, k, v = (torch.randn(batch, heads, n, d, generator=g, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        for causal in (False, True):
            pairs = n * (n + 1) // 2 if causal else n * n
            for train in (False, True):
                flops = 4 * batch * heads * pairs * d * (3.5 if train else 1.0)
                base = None
                variants = [("ours", 0.0), ("ours", 0.1)] + [(name, 0.1) for name in VARIANTS] + \
                    [(b, 0.1) for b in BACKENDS]
                for name, p in variants:
                    try:
                        ms = bench(make_call(name, q, k, v, p, causal, kernel, train))
                    except RuntimeError as exc:   # a backend that refuses the call
                        print(f"| {n} | {causal} | {'fwd+bwd' if train else 'fwd'} | {name} p={p} | n/a | | "
                              f"{str(exc).splitlines()[0][:60]} |")
                        continue
                    base = ms if (name, p) == ("ours", 0.0) else base
                    label = f"{name} p={p}"
                    ratio = base / ms if base else float("nan")
                    rows.append(dict(n=n, causal=causal, train=train, variant=label, ms=ms,
                                     tflops=flops / ms / 1e9, vs_ours_plain=ratio))
                    print(f"| {n} | {causal} | {'fwd+bwd' if train else 'fwd'} | {label} | {ms:.3f} | "
                          f"{flops / ms / 1e9:.0f} | {ratio:.2f}x |", flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--kernels", nargs="+", default=["auto"])
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=SO")
    args = parser.parse_args()
    if args.variant:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from bwd_device import _HopperBwdFrom

        from sympathy.attention import cuda

        ffi, main = cuda.library(cuda.device_arch())
        for spec in args.variant:
            name, path = spec.split("=", 1)
            VARIANTS[f"ours [{name}]"] = _HopperBwdFrom(main, ffi.dlopen(path))
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}")
    rows = {kernel: table(args.sizes, kernel) for kernel in args.kernels}
    with open(os.path.join(args.out, "dropout_check.json"), "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
