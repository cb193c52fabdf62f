"""One device run for the tensor-core backwards (cuda_src/attention_mma_bwd.cu, and on sm_90
attention_hopper_bwd.cu after a `hopper` forward): correctness against float64 autograd for every
variant, bit-identical deterministic mode, then forward+backward TFLOP/s beside torch SDPA flash and
cudnn (bf16, B*N = 16384, H*d = 2048, the anchors' shapes).

    python3 scripts/bwd_device.py [--sizes 1024 4096] [--dims 64 128] [--dtype bf16|fp16] [--skip-check] [--sweep] [--out DIR]
    python3 scripts/bwd_device.py --table attention-gpu.json    # fwd+bwd rows of a bench run, markdown

--sweep also builds one library per dkdv tile variant (SY_MMA_BWD_DKDV_TRAITS_D*) and times the
backward alone (atomic and deterministic) at N = 4096. --fa4 adds FlashAttention-4's forward+backward
(scripts/fa4_anchor.py; on (B, N, H, d) copies of the inputs) where it is importable, and says why where not.
"""
import argparse
import math
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from sympathy.attention import cuda

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
import fa4_anchor  # noqa: E402


class SymbolFrom:
    """The loaded library with one entry (`symbol`) taken from another build (an earlier version)."""

    def __init__(self, main, variant, symbol):
        self._main, self._variant, self._symbol = main, variant, symbol

    def __getattr__(self, name):
        return getattr(self._variant if name == self._symbol else self._main, name)


def variant_libs(specs):
    """{"hopper-NAME": lib} for specs NAME=path/to/attention_hopper_bwd.cu[@-DMACRO=value,...] (built
    beside cuda_src, with those defines, all at once) or NAME=path/to/prebuilt.so (built elsewhere with
    `nvcc ... -gencode arch=compute_90a,code=sm_90a --shared`)."""
    import subprocess
    import tempfile
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    arch = cuda.device_arch()

    def build(spec):
        name, source = spec.split("=", 1)
        source, _, defines = source.partition("@")
        if source.endswith(".so"):
            return name, source
        out = Path(tempfile.mkdtemp()) / f"hopper_bwd_{name}.so"
        subprocess.run([cuda.find_nvcc(), *cuda.NVCC_FLAGS, *cuda._gencode(arch), f"-I{cuda.source_dir()}",
                        *filter(None, defines.split(",")), "--shared", str(Path(source).resolve()), "-o", str(out)],
                       check=True)
        return name, str(out)

    with ThreadPoolExecutor(max(1, len(specs))) as pool:
        built = list(pool.map(build, specs))
    ffi, main = cuda.library(arch)
    return {f"hopper-{name}": SymbolFrom(main, ffi.dlopen(path), "sy_attn_hopper_bwd") for name, path in built}


def reference_grads(q, k, v, dout, causal):
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    qd, kd, vd = leaves
    group = qd.shape[1] // kd.shape[1]
    kd, vd = kd.repeat_interleave(group, 1), vd.repeat_interleave(group, 1)
    s = qd @ kd.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), -math.inf)
    (torch.softmax(s, -1) @ vd).backward(dout.double())
    return [t.grad for t in leaves]


def our_grads(q, k, v, dout, causal, deterministic, kernel="mma"):
    """deterministic=False: the atomic dQ path at every length (not only above SEPARATE_DQ_MAX_KEYS)."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    threshold = cuda.SEPARATE_DQ_MAX_KEYS
    cuda.SEPARATE_DQ_MAX_KEYS = threshold if deterministic else 0
    try:
        out = cuda.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=True, kernel=kernel,
                                                deterministic=deterministic)
        out.backward(dout)
    finally:
        cuda.SEPARATE_DQ_MAX_KEYS = threshold
    return [t.grad for t in leaves]


def check(log, kernels, variants=None):
    """kernels: (forward kernel, deterministic) pairs; `hopper` runs the hopper backward unless deterministic;
    a name of `variants` ({"hopper-NAME": lib}) runs `hopper` with that library's backward."""
    variants = variants or {}
    arch = cuda.device_arch()
    main_lib = cuda.library(arch)[1]
    worst = 0.0
    cases = []
    for d in (64, 128):
        for dtype in (torch.bfloat16, torch.float16):
            for (B, Hkv, group, Nq, Nk) in ((2, 2, 1, 256, 256), (1, 2, 2, 127, 129), (1, 1, 4, 1000, 37),
                                            (1, 2, 1, 37, 1000), (2, 1, 2, 513, 513), (1, 1, 1, 1, 1)):
                for causal in (False, True):
                    for kernel, det in kernels:
                        cases.append((kernel, d, dtype, B, Hkv, group, Nq, Nk, causal, det))
    fails = 0
    for (kernel, d, dtype, B, Hkv, group, Nq, Nk, causal, det) in cases:
        gen = torch.Generator(device="cuda").manual_seed(Nq * 7 + Nk)
        q = torch.randn(B, Hkv * group, Nq, d, device="cuda", dtype=dtype, generator=gen)
        k, v = (torch.randn(B, Hkv, Nk, d, device="cuda", dtype=dtype, generator=gen) for _ in range(2))
        dout = torch.randn_like(q)
        refs = reference_grads(q, k, v, dout, causal)
        if kernel in variants:
            cuda._libs[arch] = variants[kernel]
            try:
                grads = our_grads(q, k, v, dout, causal, det, "hopper")
            finally:
                cuda._libs[arch] = main_lib
        else:
            grads = our_grads(q, k, v, dout, causal, det, kernel)
        errs = [((g.double() - r).abs().max() / r.abs().max().clamp_min(1e-3)).item() for g, r in zip(grads, refs)]
        finite = all(torch.isfinite(g).all().item() for g in grads)
        tol = 3e-2 if dtype == torch.bfloat16 else 5e-3
        ok = finite and max(errs) <= tol
        fails += not ok
        worst = max(worst, max(errs) / tol)
        line = (f"{'ok ' if ok else 'BAD'} {kernel:12} d={d} {str(dtype)[6:]:8} B={B} Hkv={Hkv} g={group} Nq={Nq} Nk={Nk} "
                f"causal={causal:d} det={det:d} err dq/dk/dv {errs[0]:.1e} {errs[1]:.1e} {errs[2]:.1e}")
        log(line)
        if not ok:
            print(line, flush=True)
    # deterministic: bit-identical across runs
    same = True
    if any(det for _, det in kernels):
        q, k, v = (torch.randn(2, 4, 777, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        dout = torch.randn_like(q)
        for kernel in sorted({kernel for kernel, det in kernels if det}):
            a = our_grads(q, k, v, dout, True, True, kernel)
            b = our_grads(q, k, v, dout, True, True, kernel)
            same = same and all(torch.equal(x, y) for x, y in zip(a, b))
    print(f"correctness: {len(cases) - fails}/{len(cases)} cases within tolerance (worst {worst:.2f} of tol); "
          f"deterministic bit-identical: {same}", flush=True)
    return fails == 0 and same


def median_ms(fn):
    import triton.testing
    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def measure_step(step, fwd, flops):
    """(fwd+bwd TFLOP/s, bwd-only TFLOP/s, extra MiB) of one training step: step() runs forward+backward,
    fwd() the forward alone; flops = forward FLOPs (backward 2.5x). Extra MiB: the peak allocation of one
    step above what was allocated before it (after a warm-up step)."""
    step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    g = step()
    torch.cuda.synchronize()
    extra = (torch.cuda.max_memory_allocated() - before) / 2**20
    del g
    t_fb, t_f = median_ms(step), median_ms(fwd)
    return 3.5 * flops / t_fb / 1e9, 2.5 * flops / (t_fb - t_f) / 1e9, extra


def timing(sizes, log, ours, variants=None, fa4=None, dims=(64, 128), dtype=torch.bfloat16):
    """variants: {"hopper-NAME": lib}, timed as `hopper` with that library's backward."""
    variants = variants or {}
    arch = cuda.device_arch()
    main_lib = cuda.library(arch)[1]
    rows = []
    for d in dims:
        for n in sizes:
            B, H = max(1, 16384 // n), max(1, 2048 // d)
            q, k, v = (torch.randn(B, H, n, d, device="cuda", dtype=dtype) for _ in range(3))
            leaves = [t.requires_grad_() for t in (q, k, v)]
            dout = torch.randn_like(q)
            bnhd = [fa4_anchor.to_bnhd(t) for t in leaves] if fa4 else None
            dout_bnhd = dout.transpose(1, 2).contiguous() if fa4 else None
            for causal in (False, True):
                flops = 4 * B * H * n * n * d / (2 if causal else 1)
                res = {}
                for name in ("flash", "cudnn") + ours + (("fa4",) if fa4 else ()):
                    if name == "fa4":
                        def fwd():
                            return fa4_anchor.forward(fa4, *bnhd, causal)
                    elif name in ("flash", "cudnn"):
                        backend = SDPBackend.FLASH_ATTENTION if name == "flash" else SDPBackend.CUDNN_ATTENTION

                        def fwd(backend=backend):
                            with sdpa_kernel(backend):
                                return F.scaled_dot_product_attention(*leaves, is_causal=causal)
                    else:
                        def fwd(det=name.endswith("det"), kernel=name.split("-")[0]):
                            return cuda.scaled_dot_product_attention(*leaves, is_causal=causal, kernel=kernel,
                                                                     deterministic=det)

                    if name in variants:
                        def fwd():
                            return cuda.scaled_dot_product_attention(*leaves, is_causal=causal, kernel="hopper")

                        def step(fwd=fwd, lib=variants[name]):
                            cuda._libs[arch] = lib   # the backward runs inside autograd.grad
                            try:
                                return torch.autograd.grad(fwd(), leaves, dout)
                            finally:
                                cuda._libs[arch] = main_lib
                    elif name == "fa4":
                        def step(fwd=fwd):
                            return torch.autograd.grad(fwd(), bnhd, dout_bnhd)
                    else:
                        def step(fwd=fwd):
                            return torch.autograd.grad(fwd(), leaves, dout)
                    try:
                        res[name] = measure_step(step, fwd, flops)
                    except Exception as exc:  # noqa: BLE001 - a backend that does not run this shape
                        res[name] = None
                        log(f"{name} d={d} N={n} causal={causal}: {type(exc).__name__}: {str(exc)[:100]}")
                rows.append((d, n, causal, res))
                log(f"d={d} N={n} causal={causal} " + " ".join(
                    f"{k}={v[0]:.1f}/{v[1]:.1f}/{v[2]:.0f}MiB" if v else f"{k}=-" for k, v in res.items()))
            del q, k, v, leaves, dout, bnhd, dout_bnhd
            torch.cuda.empty_cache()
    return rows


def profile(log, variants, n=4096, causal=False):
    """Per-kernel GPU time of one forward+backward (bf16) for cuDNN (torch SDPA), `hopper` and each variant:
    where the backward's time goes (preprocess, memset, the kernel, the dQ conversion), beside the anchor's."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile
    arch = cuda.device_arch()
    main_lib = cuda.library(arch)[1]
    lines = []
    for d in (64, 128):
        B, H = 16384 // n, 2048 // d
        leaves = [torch.randn(B, H, n, d, device="cuda", dtype=torch.bfloat16).requires_grad_() for _ in range(3)]
        dout = torch.randn_like(leaves[0])
        for name in ("cudnn", "hopper") + tuple(variants):
            cuda._libs[arch] = variants.get(name, main_lib)

            def attend():
                if name == "cudnn":   # the anchor's kernels beside ours
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        return F.scaled_dot_product_attention(*leaves, is_causal=causal)
                return cuda.scaled_dot_product_attention(*leaves, kernel="hopper", is_causal=causal)
            try:
                for _ in range(2):
                    torch.autograd.grad(attend(), leaves, dout)
                torch.cuda.synchronize()
                with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(3):
                        torch.autograd.grad(attend(), leaves, dout)
                    torch.cuda.synchronize()
            finally:
                cuda._libs[arch] = main_lib
            times = {}
            for ev in prof.key_averages():
                if ev.device_type.name == "CUDA" or getattr(ev, "self_device_time_total", 0):
                    # "void sy_attn::(anonymous namespace)::hopper_bwd_kernel<...>(...)": the function's own name
                    key = ev.key.replace("(anonymous namespace)::", "").split("<")[0].split("(")[0][-40:]
                    times[key] = times.get(key, 0) + ev.self_device_time_total / 3
            line = f"profile d={d} N={n} causal={causal:d} {name}: " + ", ".join(f"{k} {v:.0f}us" for k, v in
                                                               sorted(times.items(), key=lambda kv: -kv[1]) if v > 1)
            lines.append(line)
            log(line)
    return lines


SWEEP = {64: ["64, 64, 64, 4, 1, 2", "64, 64, 128, 8, 1, 1", "64, 64, 128, 8, 2, 1"],
         128: ["128, 64, 64, 4, 2, 2", "128, 64, 128, 8, 2, 1", "128, 64, 128, 8, 4, 1"]}


def sweep(log):
    import os
    import subprocess
    from concurrent.futures import ThreadPoolExecutor
    src, nvcc = cuda.source_dir(), cuda.find_nvcc()
    arch = cuda.device_arch()

    def build(job):
        d, traits, i = job
        w = f"/tmp/bwd_sweep_{d}_{i}.cu"
        with open(w, "w") as f:
            f.write(f"#define SY_MMA_BWD_DKDV_TRAITS_D{d} MmaBwdTraits<{traits}>\n"   # expanded inside sy_attn
                    f"#include \"{src}/attention_mma_bwd.cu\"\n")
        so = f"/tmp/bwd_sweep_{d}_{i}.so"
        r = subprocess.run([nvcc, *cuda.NVCC_FLAGS, *cuda._gencode(arch), "--shared", w, str(src / "attention_mma.cu"),
                            str(src / "attention_naive.cu"), str(src / "attention_bwd.cu"), "-o", so],
                           capture_output=True, text=True)
        if r.returncode:
            print(r.stderr[-1500:])
            return None
        return so

    jobs = [(d, t, i) for d in SWEEP for i, t in enumerate(SWEEP[d])]
    with ThreadPoolExecutor(os.cpu_count()) as pool:
        libs = list(pool.map(build, jobs))
    ffi, default = cuda.library(arch)
    lines = []
    for (d, traits, i), so in zip(jobs, libs):
        if so is None:
            continue
        cuda._libs[arch] = ffi.dlopen(so)
        cells = []
        n = 4096
        B, H = 16384 // n, 2048 // d
        q, k, v, dout = (torch.randn(B, H, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        for causal in (False, True):
            flops = 2.5 * 4 * B * H * n * n * d / (2 if causal else 1)
            out, lse = cuda._launch(q, k, v, None, causal, 1 / math.sqrt(d), "mma")
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                ref = torch.autograd.grad(F.scaled_dot_product_attention(*leaves, is_causal=causal), leaves, dout)
            for det in (False, True):
                fn = lambda: cuda._launch_bwd(dout, q, k, v, out, lse, None, causal, 1 / math.sqrt(d), det)  # noqa: E731
                grads = fn()
                err = max(((g.float() - r.float()).abs().max() / r.float().abs().max()).item()
                          for g, r in zip(grads, ref))
                cells.append(f"{flops / median_ms(fn) / 1e9:6.1f}{'' if err < 3e-2 else '!ERR'}")
        lines.append(f"d={d:<4} dkdv traits <{traits}>: bwd TFLOP/s full atomic/det, causal atomic/det: " + " ".join(cells))
        log(lines[-1])
    cuda._libs[arch] = default
    return lines


def table(path):
    import json
    data = json.load(open(path))
    groups = {}
    for r in data["rows"]:
        if r["params"].get("backward"):
            groups.setdefault(r["group"], {})[r["variant"]] = r
    names = ("sdpa-flash", "sdpa-cudnn", "mma", "mma-det", "hopper")
    print("| d | N | causal | " + " | ".join(names) + " | mma / flash | hopper / flash | extra MiB flash / mma / mma-det |")
    print("|---|---|---|" + "---|" * (len(names) + 3))
    for rs in groups.values():
        p = next(iter(rs.values()))["params"]
        cells = [f"{rs[v]['metrics']['TFLOP/s']:.0f}" if v in rs else "-" for v in names]
        ratios = [f"{rs[v]['ratio']:.2f}x" if v in rs else "-" for v in ("mma", "hopper")]
        mem = " / ".join(f"{rs[v]['metrics']['extra_MiB']:.0f}" for v in ("sdpa-flash", "mma", "mma-det") if v in rs)
        print(f"| {p['d']} | {p['N']} | {'yes' if p['causal'] else 'no'} | " + " | ".join(cells) + " | "
              + " | ".join(ratios) + f" | {mem} |")
    errs = [r["metrics"]["err"] for rs in groups.values() for r in rs.values()]
    print(f"max dq err vs sdpa-flash: {max(errs):.3g}; {data['notes']}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--table", default=None, help="print the fwd+bwd rows of a bench JSON and exit")
    ap.add_argument("--out", default=".")
    ap.add_argument("--only-hopper", action="store_true", help="time and check hopper (and variants) only, not mma")
    ap.add_argument("--profile", action="store_true", help="per-kernel times of one fwd+bwd per variant")
    ap.add_argument("--profile-n", type=int, default=4096)
    ap.add_argument("--profile-causal", action="store_true")
    ap.add_argument("--repeat", type=int, default=1, help="time every cell this many times (tables one after another)")
    ap.add_argument("--fa4", action="store_true", help="time FlashAttention-4 beside (where importable)")
    ap.add_argument("--dims", type=int, nargs="+", default=[64, 128], choices=[64, 128], help="head dims timed")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"], help="element type timed (the check runs both)")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=path/to/attention_hopper_bwd.cu: another version of the hopper backward, timed beside")
    args = ap.parse_args()
    if args.table:
        return table(args.table)
    logf = open(f"{args.out}/bwd_device.log", "w")

    def log(s):
        logf.write(s + "\n")
        logf.flush()

    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    t0 = time.time()
    torch.zeros(1, device="cuda")
    cuda.library(cuda.device_arch())
    print(f"build+load {time.time() - t0:.0f}s", flush=True)
    hopper = torch.cuda.get_device_capability() == (9, 0)
    variants = variant_libs(args.variant) if hopper else {}
    print(f"variants built {time.time() - t0:.0f}s", flush=True)
    mma = () if args.only_hopper else ("mma", "mma-det")
    if not args.skip_check:
        ok = check(log, ([] if args.only_hopper else [("mma", False), ("mma", True)])
                   + ([("hopper", False), ("hopper", True)] + [(name, False) for name in variants] if hopper else []),
                   variants)
        print(f"check {'passed' if ok else 'FAILED'} {time.time() - t0:.0f}s", flush=True)
    sweep_lines = sweep(log) if args.sweep else []
    profile_lines = profile(log, variants, args.profile_n, args.profile_causal) if args.profile and hopper else []
    ours = mma + (("hopper", "hopper-det") + tuple(variants) if hopper else ())
    fa4 = None
    if args.fa4:
        fa4, why = fa4_anchor.load()
        print(f"fa4: {fa4_anchor.version()}" if fa4 else f"fa4: not importable ({why}): its rows are skipped", flush=True)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    tables = [timing(args.sizes, log, ours, variants, fa4, args.dims, dtype) for _ in range(args.repeat)]
    for line in sweep_lines + profile_lines:
        print(line)
    for rows in tables:
        print_table(rows, ours, ("fa4",) if fa4 else ())


def print_table(rows, ours, anchors=()):
    print("\nfwd+bwd TFLOP/s (3.5x fwd FLOPs) | bwd-only TFLOP/s (2.5x, fwd+bwd time minus fwd time) | extra MiB")
    print(f"{'d':>4} {'N':>6} {'causal':>6} | " + " | ".join(f"{k:>20}" for k in ("flash", "cudnn") + ours + anchors)
          + " | " + " ".join(f"{k}/cudnn" for k in ours))
    for d, n, causal, res in rows:
        cells = [f"{v[0]:6.1f} {v[1]:6.1f} {v[2]:6.0f}" if v else f"{'-':>20}" for v in res.values()]
        ratios = [res[k][0] / res["cudnn"][0] if res.get(k) and res.get("cudnn") else float("nan") for k in ours]
        print(f"{d:>4} {n:>6} {str(causal):>6} | " + " | ".join(f"{c:>20}" for c in cells) + " | "
              + " ".join(f"{r:.2f}x" for r in ratios))


if __name__ == "__main__":
    sys.exit(main())
