"""`sympathy bench attention-gpu`: the CUDA attention kernels beside torch's SDPA backends.

At each head dim, sequence length and causal flag (bf16, B*N = 16384 tokens, H*d = 2048, the
FlashAttention-2 paper's setting) these race in one run:
  sdpa-flash      torch SDPA's FlashAttention-2 backend (the anchor)
  sdpa-cudnn      cuDNN's fused attention (FlashAttention-3 class on Hopper)
  sdpa-efficient  xFormers' memory-efficient kernel
  sdpa-math       the definition in torch ops, N x N materialised
  naive, tiled, mma   sympathy's ladder (cuda_src/attention_{naive,tiled,mma}.cu)
  hopper          sympathy's FlashAttention-3 class kernel (cuda_src/attention_hopper.cu; sm_90 only,
                  skipped with a note elsewhere)

Figures: TFLOP/s (4*B*H*N^2*d forward, halved when causal: the masked half is never computed),
the median time (triton.testing.do_bench when triton is there, else CUDA events), and the peak extra
memory: torch.cuda.max_memory_allocated during one call minus the memory held before it (inputs
exist before; the output is part of the figure). Each variant's output is checked against
sdpa-flash's outside the timing (max relative error, `err`). Variants whose N x N buffers would not
fit (naive, sdpa-math) or that would take minutes (tiled at large N) are skipped with a note.
Without torch or a CUDA GPU the suite says so in one line, exits with status 1 and writes no JSON.

Forward + backward (groups "... fwd+bwd", unless --no-backward): sdpa-flash (anchor), sdpa-cudnn,
sympathy's `mma` forward with the mma.sync backward cuda_src/attention_mma_bwd.cu (`mma-det`: its
deterministic mode) and, on sm_90, the `hopper` forward with the wgmma backward
cuda_src/attention_hopper_bwd.cu. One call is out = attention(q, k, v) then
torch.autograd.grad(out, (q, k, v), dout); TFLOP/s counts 3.5x the forward FLOPs (FlashAttention's
convention: the backward does 2.5x the forward's GEMM work); extra_MiB is the peak extra memory of
that training step of attention alone; err compares dq with sdpa-flash's.
"""
import argparse
from pathlib import Path

from ..core import Results, Suite

QUICK_SIZES = (1024, 4096)
FULL_SIZES = (512, 1024, 2048, 4096, 8192, 16384)
SDPA_BACKENDS = ("flash", "cudnn", "efficient", "math")
OURS = ("naive", "tiled", "mma", "hopper")
BACKWARD_VARIANTS = ("sdpa-flash", "sdpa-cudnn", "mma", "mma-det", "hopper")   # ours: forward kernel (-det)
BACKWARD_FLOP_FACTOR = 3.5   # forward + backward: 2 + 5 N x N x d GEMMs over the forward's 2


def attention_flops(B: int, H: int, N: int, d: int, causal: bool) -> float:
    """Forward FLOPs as FlashAttention counts them: two N x N x d GEMMs of 2 FLOPs per multiply-add
    each (4*B*H*N^2*d), halved under the causal mask because that half is skipped, not computed."""
    return 4.0 * B * H * N * N * d / (2 if causal else 1)


def median_ms(fn) -> float:
    try:
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))
    except ImportError:
        import torch

        fn()
        times = []
        for _ in range(20):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return sorted(times)[len(times) // 2]


def peak_extra_mib(fn) -> float:
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    del out
    return (torch.cuda.max_memory_allocated() - before) / 2**20



def cuda_torch(notes: str):
    """torch, where it is installed and sees a CUDA GPU; else NotSupportedError naming what is missing
    and the notes file that holds the figures measured on an H100."""
    from ..._errors import NotSupportedError

    try:
        import torch
    except ImportError:
        raise NotSupportedError('needs torch with CUDA, and torch is not installed (pip install torch, '
                                'or pip install ".[torch]" in the checkout): nothing measured') from None
    if not torch.cuda.is_available():
        raise NotSupportedError(f"needs a CUDA GPU, and torch sees none here: nothing measured "
                                f"({notes} has the figures measured on an H100)")
    return torch

class AttentionGpuSuite(Suite):
    title = "FlashAttention on the GPU (bf16), forward and forward+backward: sympathy's kernels vs torch SDPA backends"
    primary = "TFLOP/s"
    higher_is_better = True
    columns = ("TFLOP/s", "time_ms", "extra_MiB", "err")
    ratio_label = "× sdpa-flash"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        from ..core import causal_argument, positive_int

        parser.add_argument("--sizes", type=positive_int, nargs="+", default=None,
                            help=f"sequence lengths (default: {' '.join(map(str, QUICK_SIZES))}; "
                                 f"--full: {' '.join(map(str, FULL_SIZES))})")
        parser.add_argument("--full", action="store_true", help="every size from 512 to 16384")
        parser.add_argument("--head-dims", type=positive_int, nargs="+", default=[64, 128], help="head dims d")
        parser.add_argument("--tokens", type=positive_int, default=16384, help="B*N, tokens per batch")
        parser.add_argument("--width", type=positive_int, default=2048, help="H*d, the model width")
        causal_argument(parser, default="both")
        parser.add_argument("--variants", nargs="+", default=None,
                            help=f"a subset of: {' '.join(tuple('sdpa-' + b for b in SDPA_BACKENDS) + OURS)} "
                                 "(default: all)")
        parser.add_argument("--max-nn-gib", type=float, default=20.0,
                            help="skip naive / sdpa-math when their N x N buffers exceed this many GiB")
        parser.add_argument("--max-tiled-n", type=positive_int, default=4096,
                            help="skip the fp32 tiled kernel above this N")
        parser.add_argument("--no-backward", action="store_true", help="forward only (no fwd+bwd groups)")

    def run(self, args: argparse.Namespace, results: Results) -> None:
        torch = cuda_torch("docs/attention-gpu.md")
        from torch.nn.attention import SDPBackend, sdpa_kernel

        from ...attention import cuda

        backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                    "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
        variants = args.variants or [f"sdpa-{b}" for b in SDPA_BACKENDS] + list(OURS)
        sizes = args.sizes or (FULL_SIZES if args.full else QUICK_SIZES)
        from ..core import CAUSAL_CHOICES

        causals = CAUSAL_CHOICES[args.causal]
        results.note(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
        work = [(d, n, c) for d in args.head_dims for n in sizes for c in causals]
        skipped = set()
        for d, n, causal in results.progress(work, "attention-gpu"):
            B, H = max(1, args.tokens // n), max(1, args.width // d)
            gen = torch.Generator(device="cuda").manual_seed(n * d)
            q, k, v = (torch.randn(B, H, n, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
            group = f"d={d} N={n} {'causal' if causal else 'full'}"
            params = {"d": d, "N": n, "causal": causal, "B": B, "H": H}
            flops = attention_flops(B, H, n, d, causal)
            nn_gib = B * H * n * n * 4 / 2**30
            with sdpa_kernel(backends["flash"]):
                expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal).float()
            for variant in variants:
                if variant in ("naive", "sdpa-math") and nn_gib > args.max_nn_gib:
                    skipped.add(f"{variant} above {args.max_nn_gib:g} GiB of N x N scores")
                    continue
                if variant == "tiled" and n > args.max_tiled_n:
                    skipped.add(f"tiled above N={args.max_tiled_n}")
                    continue
                if variant.startswith("sdpa-"):
                    backend = backends[variant[5:]]

                    def fn(backend=backend):
                        with sdpa_kernel(backend):
                            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
                else:
                    def fn(variant=variant):
                        return cuda.scaled_dot_product_attention(q, k, v, is_causal=causal, kernel=variant)
                try:
                    out = fn()
                # A backend that does not run this shape on this GPU (RuntimeError), or one of ours
                # that has no such head dim (ValueError: --head-dims 256 has no mma).
                except (RuntimeError, ValueError) as exc:
                    skipped.add(f"{variant} at {group}: {str(exc).splitlines()[0][:80]}")
                    continue
                err = ((out.float() - expected).abs().max() / expected.abs().max()).item()
                del out
                extra = peak_extra_mib(fn)
                ms = median_ms(fn)
                results.add(group, variant, anchor=variant == "sdpa-flash", params=params,
                            **{"TFLOP/s": flops / ms / 1e9, "time_ms": ms, "extra_MiB": extra, "err": err})
            del expected
            if not args.no_backward:
                self._race_backward(q, k, v, causal, group, params, flops, backends, results, skipped)
            del q, k, v
            torch.cuda.empty_cache()
        for s in sorted(skipped):
            results.note(f"skipped: {s}")

    def _race_backward(self, q, k, v, causal, group, params, flops, backends, results, skipped) -> None:
        """One training step of attention (forward + backward) per variant, in the group `group fwd+bwd`."""
        import torch
        from torch.nn.attention import sdpa_kernel

        from ...attention import cuda

        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        dout = torch.randn_like(q)
        expected = None
        for variant in BACKWARD_VARIANTS:
            if not variant.startswith("sdpa-") and variant.removesuffix("-det") not in cuda.KERNELS:
                continue
            if variant.startswith("sdpa-"):
                def fn(backend=backends[variant[5:]]):
                    with sdpa_kernel(backend):
                        out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal)
                    return torch.autograd.grad(out, leaves, dout)
            else:
                def fn(kernel=variant.removesuffix("-det"), deterministic=variant.endswith("-det")):
                    out = cuda.scaled_dot_product_attention(*leaves, is_causal=causal, kernel=kernel,
                                                            deterministic=deterministic)
                    return torch.autograd.grad(out, leaves, dout)
            try:
                dq = fn()[0].float()
            except (RuntimeError, ValueError) as exc:
                skipped.add(f"{variant} fwd+bwd at {group}: {str(exc).splitlines()[0][:80]}")
                continue
            if expected is None:
                expected = dq
            err = ((dq - expected).abs().max() / expected.abs().max()).item()
            del dq
            extra = peak_extra_mib(fn)
            ms = median_ms(fn)
            results.add(f"{group} fwd+bwd", variant, anchor=variant == "sdpa-flash", params={**params, "backward": True},
                        **{"TFLOP/s": BACKWARD_FLOP_FACTOR * flops / ms / 1e9, "time_ms": ms, "extra_MiB": extra,
                           "err": err})

    def plot(self, results: Results, outdir: Path) -> list:
        from .. import plots

        paths = []
        for d in sorted({r.params["d"] for r in results.rows}):
            for causal, backward in ((c, b) for b in (False, True) for c in (False, True)):
                rows = [r for r in results.rows if r.params["d"] == d and r.params["causal"] == causal
                        and bool(r.params.get("backward")) == backward]
                if not rows:
                    continue
                series = {}
                for r in sorted(rows, key=lambda r: r.params["N"]):
                    xs, ys = series.setdefault(r.variant, ([], []))
                    xs.append(r.params["N"])
                    ys.append(r.metrics["TFLOP/s"])
                name = f"attention-gpu-{'fwdbwd-' if backward else ''}d{d}-{'causal' if causal else 'full'}.png"
                paths.append(plots.lines(series, outdir / name, title=f"bf16 {'forward+backward' if backward else 'forward'}, "
                                         f"d={d}, {'causal' if causal else 'not causal'}", xlabel="N (sequence length)",
                                         ylabel="TFLOP/s", logx=True))
        return paths


SUITE = AttentionGpuSuite()
