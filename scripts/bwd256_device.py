"""One device run for the d = 256 backward (issue 21; attention_mma_bwd.cu's MmaBwdDkdvTraitsD256): the GPU
tests of tests/test_attention_gpu_backward_d256.py, then forward+backward TFLOP/s and the backward's
extra memory beside torch SDPA flash and cudnn and beside today's fallback (the O(N^2) math backward),
bf16, d = 256, B*N = 16384, H = 8 (H*d = 2048), all in one run.

    python3 scripts/bwd256_device.py [--sizes 1024 2048 4096 8192] [--skip-tests] [--out DIR]
        [--variant NAME=prebuilt.so ...]   # another build's sy_attn_mma_bwd (nvcc --shared of
                                           # attention_mma_bwd.cu), checked and timed beside as `NAME`

Rows: `ours` = the hopper forward + the default d = 256 backward (the wgmma one, attention_hopper_bwd256.cu,
where cuda._d256_hopper_backward says), `ours-det` deterministic (the mma backward's dQ pass), `ours-mma`
the mma backward at its default dQ policy (the separate dQ pass for Nk <= cuda.SEPARATE_DQ_MAX_KEYS,
atomics above; cuda.D256_HOPPER_BWD = False), `ours-atomic` the mma backward's atomic dQ at every length,
`math` = the hopper forward + cuda._math_backward (the routing before session d256).
Before the timing: the default and the mma backward against float64, deterministic runs twice bit for
bit (check_routes), each in a child process with a timeout (a kernel that hangs costs that timeout, not the call). fwd+bwd TFLOP/s = 3.5 x forward FLOPs / time; bwd = 2.5 x forward FLOPs /
(fwd+bwd - fwd); extra MiB = peak allocation of one fwd+bwd step above its inputs.
"""
import argparse
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bwd_device import SymbolFrom, measure_step
from sympathy.attention import cuda

D, H_TOTAL = 256, 2048
NAMES = ["flash", "cudnn", "ours", "ours-det", "ours-mma", "ours-atomic", "math"]
VARIANTS = {}   # NAME -> the library with that build's sy_attn_mma_bwd


def with_lib(name, fn):
    """fn() with `name`'s library in place of the main one (the backward runs inside autograd)."""
    if name not in VARIANTS:
        return fn()
    arch = cuda.device_arch()
    main = cuda._libs[arch]
    cuda._libs[arch] = VARIANTS[name]
    try:
        return fn()
    finally:
        cuda._libs[arch] = main


def check_variants(log):
    """Each variant's gradients against float64 autograd (bf16, causal and not, GQA, ragged tiles)."""
    import math
    ok = True
    for name in VARIANTS:
        for causal in (False, True):
            gen = torch.Generator(device="cuda").manual_seed(5)
            q = torch.randn(1, 4, 333, D, device="cuda", dtype=torch.bfloat16, generator=gen)
            k, v = (torch.randn(1, 2, 517, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
            dout = torch.randn_like(q)
            leaves = [t.clone().requires_grad_() for t in (q, k, v)]
            grads = with_lib(name, lambda: torch.autograd.grad(cuda.scaled_dot_product_attention(
                *leaves, is_causal=causal, enable_gqa=True), leaves, dout))
            ref = [t.double().requires_grad_() for t in (q, k, v)]
            kk, vv = (t.repeat_interleave(2, 1) for t in ref[1:])
            s = ref[0] @ kk.transpose(-1, -2) / math.sqrt(D)
            if causal:
                s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device="cuda").triu(1), -math.inf)
            refs = torch.autograd.grad(torch.softmax(s, -1) @ vv, ref, dout.double())
            errs = [((g.double() - r).abs().max() / r.abs().max()).item() for g, r in zip(grads, refs)]
            ok = ok and max(errs) <= 3e-2
            log(f"variant {name} causal={causal}: err dq/dk/dv " + " ".join(f"{e:.1e}" for e in errs))
            print(f"variant {name} causal={causal}: err dq/dk/dv " + " ".join(f"{e:.1e}" for e in errs), flush=True)
    return ok


CHECK = """
import math, sys, torch
from sympathy.attention import cuda
cuda.D256_HOPPER_BWD = sys.argv[1] == "wgmma"
worst = 0.0
for dtype in (torch.bfloat16, torch.float16):
    for b, nq, nk, hq, hkv, causal, offset in ((1, 333, 517, 4, 2, False, 0), (1, 333, 517, 4, 2, True, 0),
                                               (1, 200, 77, 2, 2, True, 0), (1, 1, 1, 2, 1, False, 0),
                                               (1, 150, 333, 4, 2, True, 183), (1, 1024, 1024, 2, 2, True, 0),
                                               (3, 130, 200, 4, 2, False, 0), (3, 130, 200, 4, 2, True, 0)):
        gen = torch.Generator(device="cuda").manual_seed(nq + nk)
        q = torch.randn(b, hq, nq, 256, device="cuda", dtype=dtype, generator=gen)
        k, v = (torch.randn(b, hkv, nk, 256, device="cuda", dtype=dtype, generator=gen) for _ in range(2))
        dout = torch.randn_like(q)
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]

        def grad(det):
            return torch.autograd.grad(cuda.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=True,
                                       causal_offset=offset, deterministic=det), leaves, dout)

        grads, det1, det2 = grad(False), grad(True), grad(True)
        same = all(torch.equal(a, b) for a, b in zip(det1, det2))
        ref = [t.double().requires_grad_() for t in (q, k, v)]
        kk, vv = (t.repeat_interleave(hq // hkv, 1) for t in ref[1:])
        s = ref[0] @ kk.transpose(-1, -2) / math.sqrt(256)
        if causal:
            s = s.masked_fill(torch.ones(nq, nk, dtype=torch.bool, device="cuda").triu(1 + offset), -math.inf)
        p = torch.softmax(s, -1).nan_to_num(0.0)
        refs = torch.autograd.grad(p @ vv, ref, dout.double())
        errs = [((g.double() - r).abs().max() / r.abs().max().clamp_min(1e-2)).item() for g, r in zip(grads + det1, refs * 2)]
        worst = max(worst, *errs) if same else float("inf")
        print(f"{sys.argv[1]} {str(dtype)[6:]} B={b} Nq={nq} Nk={nk} H={hq}/{hkv} causal={causal} offset={offset}: "
              "err dq/dk/dv " + " ".join(f"{e:.1e}" for e in errs[:3]) + ", deterministic " +
              " ".join(f"{e:.1e}" for e in errs[3:]) + f", bit-identical twice: {same}", flush=True)
print(f"{sys.argv[1]} worst {worst:.2e} {'ok' if worst <= 3e-2 else 'FAILED'}")
sys.exit(0 if worst <= 3e-2 else 1)
"""


def check_routes(log):
    """The wgmma and the mma backward against float64 (bf16 and fp16, GQA, ragged tiles, causal, a moved
    diagonal, N = 1), each in a child process with a timeout. True where the wgmma backward passed."""
    ok = {}
    for route in ("wgmma", "mma"):
        try:
            r = subprocess.run([sys.executable, "-c", CHECK, route], capture_output=True, text=True, timeout=90)
            out, ok[route] = r.stdout + r.stderr[-2000:], r.returncode == 0
        except subprocess.TimeoutExpired as exc:
            out, ok[route] = f"{route}: TIMEOUT after 90 s\n{exc.stdout or ''}", False
        log(out)
        print(out[-2500:], flush=True)
    return ok["wgmma"]


def step_fns(name, leaves, dout, causal):
    """(fwd, fwd+bwd) callables of one variant."""
    if name in ("flash", "cudnn"):
        backend = SDPBackend.FLASH_ATTENTION if name == "flash" else SDPBackend.CUDNN_ATTENTION

        def fwd():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(*leaves, is_causal=causal)

        return fwd, lambda: torch.autograd.grad(fwd(), leaves, dout)

    def fwd():
        return cuda.scaled_dot_product_attention(*leaves, is_causal=causal, kernel="hopper",
                                                 deterministic=name.endswith("-det"))

    if name in VARIANTS:
        return fwd, lambda: with_lib(name, lambda: torch.autograd.grad(fwd(), leaves, dout))

    def step():
        saved = cuda.SEPARATE_DQ_MAX_KEYS, cuda._d256_fused_backward, cuda.D256_HOPPER_BWD
        if name == "ours-atomic":
            cuda.SEPARATE_DQ_MAX_KEYS = 0
        if name in ("ours-mma", "ours-atomic"):
            cuda.D256_HOPPER_BWD = False
        if name == "math":
            cuda._d256_fused_backward = lambda *args: False
        try:
            return torch.autograd.grad(fwd(), leaves, dout)
        finally:
            cuda.SEPARATE_DQ_MAX_KEYS, cuda._d256_fused_backward, cuda.D256_HOPPER_BWD = saved

    return fwd, step


def timing(sizes, log):
    rows = []
    for n in sizes:
        B, H = max(1, 16384 // n), H_TOTAL // D
        q, k, v = (torch.randn(B, H, n, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        leaves = [t.requires_grad_() for t in (q, k, v)]
        dout = torch.randn_like(q)
        for causal in (False, True):
            flops = 4 * B * H * n * n * D / (2 if causal else 1)
            res = {}
            for name in NAMES:
                fwd, step = step_fns(name, leaves, dout, causal)
                try:
                    res[name] = measure_step(step, fwd, flops)
                except Exception as exc:  # noqa: BLE001 - a backend that does not run this shape
                    res[name] = None
                    log(f"{name} N={n} causal={causal}: {type(exc).__name__}: {str(exc)[:200]}")
                torch.cuda.empty_cache()
            rows.append((n, causal, res))
            log(f"N={n} causal={causal} " + " ".join(f"{k}={v[0]:.1f}/{v[1]:.1f}/{v[2]:.0f}MiB" if v else f"{k}=-"
                                                     for k, v in res.items()))
        del q, k, v, leaves, dout
        torch.cuda.empty_cache()
    return rows


def print_table(rows):
    print(f"\nd = {D}, bf16: fwd+bwd TFLOP/s | bwd-only TFLOP/s | extra MiB of one fwd+bwd step")
    print(f"{'N':>5} {'causal':>6} | " + " | ".join(f"{k:>19}" for k in NAMES) + " | ours/cudnn ours-det/cudnn ours-mma/cudnn" + "".join(f" {k}/cudnn" for k in VARIANTS))
    for n, causal, res in rows:
        cells = [f"{v[0]:5.1f} {v[1]:5.1f} {v[2]:6.0f}" if v else f"{'-':>19}" for v in res.values()]
        ratios = [res[k][0] / res["cudnn"][0] if res.get(k) and res.get("cudnn") else float("nan")
                  for k in ("ours", "ours-det", "ours-mma") + tuple(VARIANTS)]
        print(f"{n:>5} {str(causal):>6} | " + " | ".join(f"{c:>19}" for c in cells) + " | "
              + " ".join(f"{r:.2f}x" for r in ratios), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--tests-timeout", type=int, default=240)
    ap.add_argument("--tests", nargs="*", default=["tests/test_attention_gpu_backward_d256.py"])
    ap.add_argument("--out", default=".")
    ap.add_argument("--variant", action="append", default=[], help="NAME=path/to/prebuilt.so")
    ap.add_argument("--skip", nargs="*", default=[], help="columns not to time (e.g. math, ours-atomic)")
    args = ap.parse_args()
    for name in args.skip:
        NAMES.remove(name)
    logf = open(f"{args.out}/bwd256_device.log", "w")

    def log(s):
        logf.write(s + "\n")
        logf.flush()

    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, cudnn {torch.backends.cudnn.version()}",
          flush=True)
    t0 = time.time()
    cuda.library(cuda.device_arch())
    print(f"build+load {time.time() - t0:.0f}s", flush=True)
    ffi, main = cuda.library(cuda.device_arch())
    for spec in args.variant:
        name, path = spec.split("=", 1)
        VARIANTS[name] = SymbolFrom(main, ffi.dlopen(path), "sy_attn_mma_bwd")
        NAMES.insert(3, name)
    if VARIANTS:
        print(f"variants {'passed' if check_variants(log) else 'FAILED'}", flush=True)
    if not args.skip_check and not check_routes(log):
        # A wrong or hanging wgmma backward is not timed (it could hang the timing), and the call ends here.
        print("wgmma backward failed its check: no tests, no timing", flush=True)
        return 1
    if not args.skip_tests:
        try:
            r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", *args.tests],
                               capture_output=True, text=True, timeout=args.tests_timeout)
            out, rc = r.stdout[-3000:] + r.stderr[-1500:], r.returncode
        except subprocess.TimeoutExpired as exc:
            out, rc = f"TIMEOUT\n{exc.stdout or ''}", "timeout"
        log(out)
        print(out, f"tests rc={rc} {time.time() - t0:.0f}s", flush=True)
    print_table(timing(args.sizes, log))
    print(f"total {time.time() - t0:.0f}s")


if __name__ == "__main__":
    sys.exit(main())
