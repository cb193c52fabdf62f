"""Host time per attention call: ours beside torch's SDPA backends, in one run, on one GPU.

    . .device/bootstrap.sh && PYTHONUNBUFFERED=1 python3 scripts/host_overhead.py --out $OUT [--profile]

At small N a forward takes 40-250 us of GPU time, about what one call's Python and launch work takes on
the host: calls made back to back (a model's layers) then wait on the host, not on the GPU. This script
measures, for each entry point, the host's wall time per call on a tiny problem (the GPU idles, so the
figure is the host's alone) and the GPU time per call back to back at the issue's N = 1024 (one pair of
events around `--calls` calls: host-bound when the first figure exceeds the kernel's time). Entry points:

    sdpa-cudnn / sdpa-flash   torch.nn.functional.scaled_dot_product_attention under sdpa_kernel
    sy                        sy.attention.scaled_dot_product_attention (the public call, no autograd)
    sy-patch                  F.scaled_dot_product_attention inside sy.attention.patch()
    sy-lse                    sy.attention.cuda.attention_with_lse (the direct entry)
    *+bwd                     forward and backward under autograd (grad of q, k, v)

--profile prints cProfile's top functions (by own time) of `sy` and `sy+bwd`, where the host time goes.
Writes host_overhead.json (every figure, the machine) into --out.
"""
import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]
import sympathy as sy  # noqa: E402
from sympathy.attention import cuda  # noqa: E402

BACKENDS = {"sdpa-cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa-flash": SDPBackend.FLASH_ATTENTION}


def entry(name, causal):
    """fn(q, k, v) for an entry point, and the context it runs in."""
    if name in BACKENDS:
        return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)), sdpa_kernel(BACKENDS[name])
    if name == "sy":
        return (lambda q, k, v: sy.attention.scaled_dot_product_attention(q, k, v, is_causal=causal)), None
    if name == "sy-patch":
        return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)), sy.attention.patch()
    if name == "sy-lse":
        return (lambda q, k, v: cuda.attention_with_lse(q, k, v, is_causal=causal)[0]), None
    raise ValueError(name)


def per_call(fn, q, k, v, calls, backward):
    """(host us per call, GPU us per call back to back)."""
    grad = torch.randn_like(q) if backward else None

    def one():
        out = fn(q, k, v)
        if backward:
            out.backward(grad)

    for _ in range(3):
        one()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    t0 = time.perf_counter()
    for _ in range(calls):
        one()
    host = (time.perf_counter() - t0) / calls * 1e6
    end.record()
    torch.cuda.synchronize()
    return host, start.elapsed_time(end) / calls * 1e3


def inputs(B, H, n, d, backward):
    return [torch.randn(B, H, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=backward) for _ in range(3)]


def profile(fn, q, k, v, backward, calls=300, top=22):
    grad = torch.randn_like(q) if backward else None
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        out = fn(q, k, v)
        if backward:
            out.backward(grad)
    prof.disable()
    torch.cuda.synchronize()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
    return buf.getvalue()


def timeit(fn, calls=2000):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - t0) / calls * 1e6
    torch.cuda.synchronize()
    return host


def breakdown(d=128, causal=True):
    """Host us per call of the pieces of one forward (sy-lse's path), tiny inputs."""
    from sympathy.attention import cuda_build

    q, k, v = inputs(1, 16, 256, d, False)
    scale = d ** -0.5
    kernel = cuda._check_inputs(q, k, v, None, causal, None, False, "auto")
    out, lse = cuda._launch(q, k, v, None, causal, scale, kernel)
    captured = {}
    real = cuda_build.launch_on

    def capture(device, launcher, params):
        captured.update(launcher=launcher, params=params)
        return real(device, launcher, params)

    cuda_build.launch_on = capture
    try:
        cuda._launch(q, k, v, None, causal, scale, kernel, out, lse)   # params that write into out, lse (kept)
    finally:
        cuda_build.launch_on = real
    ffi = cuda_build._ffi
    stream = ffi.cast("void *", torch.cuda.current_stream().cuda_stream)
    pieces = {
        "check_inputs": lambda: cuda._check_inputs(q, k, v, None, causal, None, False, "auto"),
        "_launch (all)": lambda: cuda._launch(q, k, v, None, causal, scale, kernel, out, lse),
        "C launcher alone": lambda: captured["launcher"](captured["params"], stream),
        "launch_on": lambda: real(q.device, captured["launcher"], captured["params"]),
        "torch.empty x2": lambda: (torch.empty_like(q), torch.empty((1, 16, 256), device="cuda")),
        "ffi.new params": lambda: ffi.new("sy_attn_params *"),
        "public sy": lambda: sy.attention.scaled_dot_product_attention(q, k, v, is_causal=causal),
        "attention_with_lse": lambda: cuda.attention_with_lse(q, k, v, is_causal=causal),
    }
    print(f"\n== host us per call, pieces of one forward (d={d}, causal={causal}, kernel={kernel})")
    for name, fn in pieces.items():
        print(f"  {name:22} {timeit(fn):8.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".")
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--entries", nargs="+", default=["sdpa-cudnn", "sdpa-flash", "sy", "sy-patch", "sy-lse"])
    ap.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--repeat", type=int, default=2, help="passes over every entry, interleaved (best kept)")
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {sys.version.split()[0]}")
    print(f"{'case':34} {'entry':12} {'host us/call':>12} {'GPU us/call':>12}")
    cases = [("tiny", 1, 16, 256), ("N=1024", 16, None, 1024)]
    for backward in (False, True):
        for d in args.head_dims:
            for label, B, H, n in cases:
                for causal in (False, True):
                    heads = H or 2048 // d
                    q, k, v = inputs(B, heads, n, d, backward)
                    best = {}
                    for _ in range(args.repeat):
                        for name in args.entries:
                            if backward and name == "sy-lse":
                                continue
                            fn, ctx = entry(name, causal)
                            try:
                                if ctx is not None:
                                    with ctx:
                                        got = per_call(fn, q, k, v, args.calls, backward)
                                else:
                                    got = per_call(fn, q, k, v, args.calls, backward)
                            except RuntimeError as exc:   # a backend that refuses the shape
                                print(f"  {name}: {str(exc).splitlines()[0][:100]}")
                                continue
                            prev = best.get(name)
                            best[name] = got if prev is None else (min(prev[0], got[0]), min(prev[1], got[1]))
                    case = f"{label} d={d} {'causal' if causal else 'full'}{' +bwd' if backward else ''}"
                    for name, (host, gpu) in best.items():
                        print(f"{case:34} {name:12} {host:12.1f} {gpu:12.1f}")
                        rows.append(dict(case=case, entry=name, d=d, n=n, B=B, H=heads, causal=causal,
                                         backward=backward, host_us=host, gpu_us=gpu))
    breakdown()
    if args.profile:
        q, k, v = inputs(1, 16, 256, 128, False)
        print("\n== cProfile: sy, forward, 300 calls\n" + profile(entry("sy", True)[0], q, k, v, False))
        q, k, v = inputs(1, 16, 256, 128, True)
        print("\n== cProfile: sy, forward + backward, 300 calls\n" + profile(entry("sy", True)[0], q, k, v, True))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, python=sys.version.split()[0],
                time=time.strftime("%Y-%m-%dT%H:%M:%S"))
    (out / "host_overhead.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))


if __name__ == "__main__":
    main()
