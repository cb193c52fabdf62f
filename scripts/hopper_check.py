"""One device run for the `hopper` kernel: correctness against float64, then timings beside SDPA.

    . .device/bootstrap.sh && PYTHONUNBUFFERED=1 python3 scripts/hopper_check.py --out $OUT

Correctness: every kernel variant (d 64/128, bf16/fp16, causal or not, GQA, Nq != Nk, odd N, the
(B, N, H, d) strided layout) on NaN-poisoned outputs against a float64 reference, relative error
max|out - ref| / max|ref| and the log-sum-exp. Timings: bf16, B*N = 16384 tokens, H*d = 2048 (the
attention-gpu suite's setting), triton.testing.do_bench median over inputs rotated among two sets,
sdpa-flash, sdpa-cudnn, mma and hopper side by side; a short table printed last.

Variants: --variant NAME:-DMACRO=value,... builds attention_hopper.cu with those defines (or
NAME:source=FILE, an earlier version of the file, or NAME:so=FILE, a library built elsewhere with
`nvcc ... -gencode arch=compute_90a,code=sm_90a --shared attention_hopper.cu`, which saves the device
its compile) and times it beside the default build. --repeat N
times every kernel N times, interleaved, keeping the best (the same binary spreads 3-7 % within a run
otherwise); --clocks samples SM clock and power with nvidia-smi during the timings (the H100 runs
these kernels at its 700 W cap, so the clock is part of every figure).

Kernel "hopper-op" is hopper called through torch.ops.sympathy.attention_fwd, as every forward was
before calls that need no autograd and no tracing skipped the dispatcher (sympathy/attention/eager.py).
--fa4 adds FlashAttention-4 (scripts/fa4_anchor.py) to every timed cell where it is importable (a
line says why where not); --kernels picks the columns. --gaps also times each kernel over 50 calls
back to back (one pair of events: the GPU never waits for the host when a call's host work is shorter
than its kernel) and the host's time per call, beside do_bench's median (which clears L2 before each
call, so the GPU can wait there for the host's launch): where the two differ, launch cost is in the figure.
"""
import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from sympathy._errors import NotSupportedError  # noqa: E402
from sympathy.attention import cuda  # noqa: E402
from test_attention_gpu import make_inputs, reference, relative_error, run_poisoned  # noqa: E402
import fa4_anchor  # noqa: E402


class _HopperFrom:
    """The loaded library with sy_attn_hopper_fwd taken from another build (a tile-sweep variant)."""

    def __init__(self, main, variant):
        self._main, self._variant = main, variant

    def __getattr__(self, name):
        return getattr(self._variant if name == "sy_attn_hopper_fwd" else self._main, name)


def variant_libs(specs, log):
    """{name: lib} for specs 'name:-DMACRO=value,-DMACRO=value'; '' is the default build."""
    arch = cuda.device_arch()
    ffi, main = cuda.library(arch)
    libs = {"": main}
    for spec in specs:
        name, defines = spec.split(":", 1)
        if defines == "no-tile-counter":   # the default build with one block per tile (no persistent grid)
            def one_block_per_tile(p, stream):
                p.tile_counter = ffi.NULL
                return main.sy_attn_hopper_fwd(p, stream)
            libs[name] = _HopperFrom(main, type("NoCounter", (), {"sy_attn_hopper_fwd": staticmethod(one_block_per_tile)}))
            log(f"variant {name}: {defines}")
            continue
        if defines.startswith("so="):   # prebuilt (nvcc ... --shared attention_hopper.cu)
            libs[name] = _HopperFrom(main, ffi.dlopen(str(Path(defines[len("so="):]).resolve())))
            log(f"variant {name}: {defines}")
            continue
        out = Path(tempfile.mkdtemp()) / f"hopper_{name}.so"
        source = cuda.source_dir() / "attention_hopper.cu"
        if defines.startswith("source="):   # an earlier version of the file, for a same-run comparison
            source, defines = Path(defines[len("source="):]).resolve(), f"-I{cuda.source_dir()}"
        cmd = [cuda.find_nvcc(), *cuda.NVCC_FLAGS, *cuda._gencode(arch), *defines.split(","), "--shared",
               str(source), "-o", str(out)]
        subprocess.run(cmd, check=True)
        libs[name] = _HopperFrom(main, ffi.dlopen(str(out)))
        log(f"variant {name}: {defines}")
    return libs


def use(libs, name):
    cuda._libs[cuda.device_arch()] = libs[name]


def check(log) -> bool:
    cases = [  # B, Hkv, group, Nq, Nk, d, dtype, layout, causal
        (2, 2, 1, 1024, 1024, 128, torch.bfloat16, "bhnd", False),
        (2, 2, 1, 1024, 1024, 128, torch.bfloat16, "bhnd", True),
        (2, 2, 1, 1024, 1024, 64, torch.bfloat16, "bhnd", False),
        (2, 2, 1, 1024, 1024, 64, torch.float16, "bhnd", True),
        (1, 2, 3, 333, 333, 128, torch.float16, "bnhd", True),
        (1, 2, 2, 200, 777, 64, torch.bfloat16, "bnhd", False),
        (1, 1, 2, 777, 200, 128, torch.bfloat16, "bhnd", True),
        (3, 1, 1, 1, 1, 64, torch.bfloat16, "bhnd", False),
        (1, 2, 1, 4099, 4099, 128, torch.bfloat16, "bhnd", True),
        (1, 2, 1, 2048, 2048, 64, torch.float16, "bnhd", False),
        (1, 2, 1, 333, 333, 64, torch.bfloat16, "bhnd", True),
        (1, 1, 2, 200, 777, 64, torch.float16, "bhnd", True),
        (1, 1, 2, 777, 200, 64, torch.bfloat16, "bnhd", True),
        (1, 2, 1, 4099, 4099, 64, torch.bfloat16, "bhnd", True),
        (2, 2, 1, 1024, 1024, 256, torch.bfloat16, "bhnd", False),
        (1, 2, 2, 777, 777, 256, torch.float16, "bnhd", True),
        (1, 1, 1, 333, 1000, 256, torch.bfloat16, "bhnd", True),
    ]
    ok = True
    for B, Hkv, group, Nq, Nk, d, dtype, layout, causal in cases:
        q, k, v = make_inputs(B, Hkv, group, Nq, Nk, d, dtype, layout, seed=Nq * 7 + Nk + d)
        ref_out, ref_lse = reference(q, k, v, is_causal=causal)
        for kernel in ("mma", "hopper") if d in cuda.MMA_HEAD_DIMS else ("hopper",):
            try:
                out, lse = run_poisoned(q, k, v, kernel, is_causal=causal)
            except NotSupportedError as exc:   # an earlier version (--variant NAME:source=...) without this d
                log(f"skip {kernel} d={d}: {exc}")
                continue
            nan = bool(torch.isnan(out).any() or torch.isnan(lse).any())
            err = relative_error(out, ref_out)
            finite = torch.isfinite(ref_lse)
            lse_err = (lse.double()[finite] - ref_lse[finite]).abs().max().item()
            good = not nan and err <= (1.6e-2 if dtype == torch.bfloat16 else 4e-3) and lse_err <= 2e-3
            ok &= good
            log(f"{'ok  ' if good else 'FAIL'} {kernel:6s} B={B} Hkv={Hkv} g={group} Nq={Nq} Nk={Nk} d={d} "
                f"{str(dtype)[6:]} {layout} causal={causal}: err {err:.2e} lse {lse_err:.2e} nan={nan}")
    return ok


def median_ms(fn) -> float:
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


class ClockLog:
    """nvidia-smi sampling the SM clock and board power every 50 ms while the timings run: an H100 at
    full tensor load runs into its power cap and lowers its clock, so a kernel's TFLOP/s is read
    beside the clock it ran at (per-clock efficiency against energy per FLOP)."""

    def __init__(self, path: Path):
        self.path = path
        self.proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw", "--format=csv,noheader,nounits", "-lms", "50"],
            stdout=open(path, "w"), stderr=subprocess.DEVNULL)

    def stop(self):
        self.proc.terminate()
        self.proc.wait()

    def samples(self):
        out = []
        for line in self.path.read_text().splitlines():
            try:
                stamp, mhz, watts = (x.strip() for x in line.split(","))
                out.append((datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f").timestamp(), float(mhz), float(watts)))
            except ValueError:
                continue
        return out


def annotate_clocks(rows, samples):
    for r in rows:
        inside = [(mhz, w) for t, mhz, w in samples if r["t0"] <= t <= r["t1"]]
        if inside:
            r["sm_mhz"] = sum(m for m, _ in inside) / len(inside)
            r["watts"] = sum(w for _, w in inside) / len(inside)


def gaps(fn, calls=50):
    """(ms per call over `calls` calls back to back, host us per call): one pair of events around them."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - t0) / calls * 1e6
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls, host


def bench(sizes, head_dims, log, libs, variant_sizes, repeat, kernels, fa4=None, with_gaps=False):
    rows = []
    backends = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION}
    for d in head_dims:
        for n in sizes:
            for causal in (False, True):
                B, H = max(1, 16384 // n), 2048 // d
                sets = [[torch.randn(B, H, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3)] for _ in range(2)]
                flops = 4.0 * B * H * n * n * d / (2 if causal else 1)
                # float64 reference on one head of the first set (the whole tensor would be slow)
                q0, k0, v0 = (t[:1, :1] for t in sets[0])
                ref = reference(q0, k0, v0, is_causal=causal)[0]
                turn = [0]
                sets_bnhd = [[fa4_anchor.to_bnhd(t) for t in qkv] for qkv in sets] if fa4 else None

                def runner(name):
                    def call():
                        qkv = sets[turn[0] % 2]
                        turn[0] += 1
                        if name == "fa4":   # (B, N, H, d) copies; the output back as a (B, H, N, d) view
                            return fa4_anchor.forward(fa4, *sets_bnhd[(turn[0] - 1) % 2], causal).transpose(1, 2)
                        if name == "hopper-op":   # through torch.ops.sympathy.attention_fwd (the dispatcher), as before
                            return cuda._attention_op()(*qkv, None, causal, 1.0 / math.sqrt(d), "hopper", False)[0]
                        if name.startswith("sdpa-"):
                            with sdpa_kernel(backends[name]):
                                return torch.nn.functional.scaled_dot_product_attention(*qkv, is_causal=causal)
                        return cuda.scaled_dot_product_attention(*qkv, is_causal=causal, kernel=name)
                    return call

                names = list(kernels) + (["fa4"] if fa4 else [])
                if n in variant_sizes:
                    names += [f"hopper:{v}" for v in libs if v]
                # Every variant is timed `repeat` times, interleaved (A B C A B C): clock and power drift
                # then reach each alike; the best time of each is kept.
                for name in names * repeat:
                    use(libs, name.split(":")[1] if ":" in name else "")
                    fn = runner(name.split(":")[0])
                    try:
                        turn[0] = 0
                        out = fn()
                    except Exception as exc:  # noqa: BLE001 - e.g. mma has no d = 256, or FA4 refuses or fails
                        log(f"skip {name} d={d} N={n} causal={causal}: {str(exc).splitlines()[0][:100]}")
                        continue
                    err = relative_error(out[:1, :1], ref)
                    t0 = time.time()
                    ms = median_ms(fn)
                    row = dict(d=d, N=n, causal=causal, variant=name, ms=ms, tflops=flops / ms / 1e9, err=err,
                               t0=t0, t1=time.time())
                    extra = ""
                    if with_gaps:
                        row["b2b_ms"], row["host_us"] = gaps(fn)
                        extra = f" | back to back {flops / row['b2b_ms'] / 1e9:7.1f} TFLOP/s, host {row['host_us']:5.1f} us/call"
                    rows.append(row)
                    log(f"d={d} N={n} causal={causal} {name:10s} {flops / ms / 1e9:7.1f} TFLOP/s {ms:8.3f} ms err {err:.1e}"
                        + extra)
                del sets, sets_bnhd
                torch.cuda.empty_cache()
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    parser.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--no-check", action="store_true")
    parser.add_argument("--variant", action="append", default=[],
                        help="NAME:-DSY_HOPPER_D128_BLOCK_N=176,-D...: also time (and check) this tile build")
    parser.add_argument("--variant-sizes", type=int, nargs="+", default=[2048, 4096])
    parser.add_argument("--repeat", type=int, default=1, help="time every kernel this many times, interleaved; keep the best")
    parser.add_argument("--clocks", action="store_true", help="sample SM clock and power with nvidia-smi during the timings")
    parser.add_argument("--kernels", nargs="+", default=["sdpa-flash", "sdpa-cudnn", "mma", "hopper"])
    parser.add_argument("--fa4", action="store_true", help="time FlashAttention-4 beside (where importable)")
    parser.add_argument("--gaps", action="store_true", help="also time 50 calls back to back and the host's time per call")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    logf = open(args.out / "hopper_check.log", "w")

    def log(text):
        print(text)
        logf.write(text + "\n")
        logf.flush()

    log(f"{torch.cuda.get_device_name()} torch {torch.__version__} arch {cuda.device_arch()}")
    libs = variant_libs(args.variant, log)
    fa4 = None
    if args.fa4:
        fa4, why = fa4_anchor.load()
        log(f"fa4: {fa4_anchor.version()}" if fa4 else f"fa4: not importable ({why}): its rows are skipped")
    for name in libs:
        use(libs, name)
        if not args.no_check and not check(log):
            log(f"CORRECTNESS FAILED ({name or 'default'}): timings still follow, for the record")
    use(libs, "")
    clocks = ClockLog(args.out / "smi.csv") if args.clocks else None
    rows = bench(args.sizes, args.head_dims, log, libs, set(args.variant_sizes), args.repeat, args.kernels, fa4, args.gaps)
    if clocks:
        clocks.stop()
        annotate_clocks(rows, clocks.samples())
        for r in rows:
            if "sm_mhz" in r:
                log(f"d={r['d']} N={r['N']} causal={r['causal']} {r['variant']:12s} {r['tflops']:6.1f} TFLOP/s "
                    f"at {r['sm_mhz']:5.0f} MHz {r['watts']:4.0f} W: {r['tflops'] / r['sm_mhz'] * 1000:5.1f} TFLOP/s per GHz")
    (args.out / "hopper_bench.json").write_text(json.dumps(rows, indent=1))
    cols = [k for k in ("sdpa-flash", "sdpa-cudnn", "mma", "hopper-op", "hopper", "fa4") if any(r["variant"] == k for r in rows)]
    print("\n| d | N | causal | " + " | ".join(cols) + " | hopper / cudnn | hopper / fa4 | variants |")
    print("|---" * (len(cols) + 6) + "|")
    keys = sorted({(r["d"], r["N"], r["causal"]) for r in rows})
    for key in keys:
        got = {}
        for r in rows:
            if (r["d"], r["N"], r["causal"]) == key:
                got[r["variant"]] = max(got.get(r["variant"], 0.0), r["tflops"])
        ratio = got.get("hopper", math.nan) / got.get("sdpa-cudnn", math.nan)
        ratio_fa4 = got.get("hopper", math.nan) / got.get("fa4", math.nan)
        cells = " | ".join(f"{got.get(v, math.nan):.0f}" for v in cols)
        extra = " ".join(f"{v}={t:.0f}" for v, t in got.items() if ":" in v)
        print(f"| {key[0]} | {key[1]} | {'yes' if key[2] else 'no'} | {cells} | {ratio:.2f} | {ratio_fa4:.2f} | {extra} |")
    if args.gaps:   # do_bench against back to back, and the host's time per call, per kernel (best of the repeats)
        print("\n| d | N | causal | kernel | do_bench TFLOP/s | back to back TFLOP/s | host us/call |")
        print("|---|---|---|---|---|---|---|")
        best = {}
        for r in rows:
            k = (r["d"], r["N"], r["causal"], r["variant"])
            if k not in best or r["ms"] < best[k]["ms"]:
                best[k] = r
        for (d, n, causal, name), r in sorted(best.items(), key=lambda kv: kv[0][:3]):
            b2b = r["tflops"] * r["ms"] / r["b2b_ms"]
            print(f"| {d} | {n} | {'yes' if causal else 'no'} | {name} | {r['tflops']:.0f} | {b2b:.0f} | {r['host_us']:.0f} |")


if __name__ == "__main__":
    main()
