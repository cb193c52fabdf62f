"""Decode attention on the GPU in one run (issue #22): correctness against float64, then time and
K+V bytes/s of sy.attention.attention_with_kvcache beside torch SDPA's cuDNN and flash backends on the
issue's five shapes, a read-only streaming ceiling measured in the same run, the split-count sweep, the
paged cache against the contiguous one, and a chunked prefill. Prints markdown tables.

    python3 scripts/decode_check.py [--quick] [--sweep-only | --no-sweep | --chunks]

--chunks: only the chunked-prefill routing sweep (kvcache.HOPPER_MIN_QUERIES): chunks of Nq new
queries over N cached keys, bottom-right causal, on the `hopper` kernel (kvcache._chunk_on_hopper)
beside the decode kernel's mma.sync path and cuDNN with the mask, each checked against float64.

Timing: triton.testing.do_bench, median, L2 flushed before every call (do_bench's own flush), inputs
random normal; "graph" times replay the call captured in a CUDA graph (the GPU's time alone), "eager"
times call it directly (where the host's Python outlasts the flush, its excess shows). Bytes = the K and V rows each sequence reads (B x Hkv x N x d x 2 tensors x 2 bytes).
"""
import argparse
import math
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

import sympathy as sy
from sympathy.attention import kvcache
from sympathy.bench.suites.attention_decode import _triton_read_kernel
from sympathy.bench.suites.attention_decode import graphed as graphed_in_suite

SHAPES = [   # (B, Hkv, N): q (B, 32, 1, 128), bf16
    (1, 8, 8192), (8, 8, 8192), (1, 8, 131072), (32, 8, 4096), (8, 32, 16384)]
HQ, D = 32, 128
DT = torch.bfloat16


def bench(fn):
    if fn is None:
        return math.nan
    return do_bench(fn, warmup=10, rep=60, return_mode="median") * 1e-3   # seconds


def graphed(fn):
    """The bench suite's CUDA-graph capture (replays time the GPU's work alone), saying so when it fails."""
    replay = graphed_in_suite(torch, fn)
    if replay is None:
        print("  (graph capture failed: timed eagerly)")
    return replay


def host_us(fn, n=200):
    """Host time per call, the GPU kept busy (calls queue faster than they run or the host is the limit)."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / n * 1e6


def kv_bytes(B, Hkv, N, d=D):
    return 2 * B * Hkv * N * d * 2


def caches(B, Hkv, N, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, 1, HQ, D, device="cuda", dtype=DT, generator=g)
    kc = torch.randn(B, N, Hkv, D, device="cuda", dtype=DT, generator=g)
    vc = torch.randn(B, N, Hkv, D, device="cuda", dtype=DT, generator=g)
    return q, kc, vc


def reference(q, kc, vc):
    """float64 decode (Nq = 1, whole cache): (B, 1, Hq, d)."""
    B, _, Hq, d = q.shape
    g = Hq // kc.shape[2]
    qf = q.double().view(B, kc.shape[2], g, d)                      # heads of a group together
    s = torch.einsum("bhgd,bnhd->bhgn", qf, kc.double()) / math.sqrt(d)
    p = torch.softmax(s, -1)
    return torch.einsum("bhgn,bnhd->bhgd", p, vc.double()).reshape(B, 1, Hq, d)


def sdpa_fn(backend, q, kc, vc):
    """SDPA on its own (B, H, N, d) copies: GQA by enable_gqa where the backend takes it, else an
    expanded (stride-0, no copy) view. Returns (fn, how) or (None, why)."""
    qs = q.transpose(1, 2).contiguous()
    ks, vs = (t.transpose(1, 2).contiguous() for t in (kc, vc))
    g = HQ // ks.shape[1]
    tries = [("enable_gqa", lambda: F.scaled_dot_product_attention(qs, ks, vs, enable_gqa=True))]
    if g > 1:
        ke, ve = (t[:, :, None].expand(-1, -1, g, -1, -1).reshape(t.shape[0], HQ, t.shape[2], D) for t in (ks, vs))
        tries.append(("repeat_interleave copy", lambda: F.scaled_dot_product_attention(qs, ke, ve)))
    errors = []
    for how, call in tries:
        try:
            with sdpa_kernel([backend]):
                call()
                torch.cuda.synchronize()

            def fn(call=call):
                with sdpa_kernel([backend]):
                    return call()
            return fn, how
        except RuntimeError as exc:
            errors.append(f"{how}: {str(exc).splitlines()[0][:60]}")
    return None, "; ".join(errors)


def streaming_ceiling():
    """Read-only bandwidth: a triton kernel summing 4 GiB in 16 KiB tiles (one store per tile), and
    torch's sum; the larger, in bytes/s; plus device-to-device copy (read + write bytes)."""
    read_kernel = _triton_read_kernel()   # the bench suite's: one kernel for both ceilings

    n = 1 << 31   # bf16 elements: 4 GiB
    x = torch.randn(n // 1024, 1024, device="cuda", dtype=DT).view(-1)
    BLOCK, TILES = 8192, 8
    out = torch.empty(n // (BLOCK * TILES), device="cuda")
    grid = (n // (BLOCK * TILES),)
    read_kernel[grid](x, out, BLOCK=BLOCK, TILES=TILES)
    t_triton = bench(lambda: read_kernel[grid](x, out, BLOCK=BLOCK, TILES=TILES))
    t_sum = bench(lambda: x.sum())
    y = torch.empty(n // 4, device="cuda", dtype=DT)
    src = x[: n // 4]
    t_copy = bench(lambda: y.copy_(src))
    del x, y
    torch.cuda.empty_cache()
    return {"read (triton)": 2 * n / t_triton, "read (torch.sum)": 2 * n / t_sum, "copy (r+w)": 2 * 2 * (n // 4) / t_copy}


def check_correct(out, want, what, tol=1.6e-2):
    err = ((out.double() - want).abs().max() / want.abs().max()).item()
    status = "ok" if err <= tol else "FAIL"
    print(f"  {what}: max err / max |ref| = {err:.2e} {status}", flush=True)
    return err <= tol


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer sweep points")
    ap.add_argument("--sweep-only", action="store_true")
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--chunks", action="store_true", help="only the chunked-prefill routing sweep")
    args = ap.parse_args()
    props = torch.cuda.get_device_properties(0)
    print(f"# {props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}, "
          f"cuDNN {torch.backends.cudnn.version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n", flush=True)
    ok = True
    if args.chunks:
        ok = chunk_sweep()
        print("\nALL CORRECT" if ok else "\nSOME CHECK FAILED")
        return 0 if ok else 1

    ceil = streaming_ceiling()
    print("## streaming ceilings (same run)\n\n| what | TB/s |\n|---|---|")
    for k, v in ceil.items():
        print(f"| {k} | {v / 1e12:.2f} |")
    read_ceiling = max(ceil["read (triton)"], ceil["read (torch.sum)"])
    print(flush=True)

    if not args.sweep_only:
        print("## correctness (float64 reference) and time, bf16, d=128, q (B, 32, 1, 128)\n")
        rows = []
        for B, Hkv, N in SHAPES:
            q, kc, vc = caches(B, Hkv, N)
            out = sy.attention.attention_with_kvcache(q, kc, vc)
            ok &= check_correct(out, reference(q, kc, vc), f"B={B} Hkv={Hkv} N={N}")
            nbytes = kv_bytes(B, Hkv, N)
            blocks = B * Hkv
            splits = kvcache.num_splits_heuristic(blocks, -(-N // 64), props.multi_processor_count)
            ours = lambda: sy.attention.attention_with_kvcache(q, kc, vc)  # noqa: E731
            res = {"ours": (bench(ours), bench(graphed(ours)), host_us(ours))}
            for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
                fn, how = sdpa_fn(backend, q, kc, vc)
                g = graphed(fn) if fn else None
                res[name] = (bench(fn), bench(g) if g else None, host_us(fn)) if fn else (None, None, None)
                res[name + "_how"] = how
            # The same cache stored head-major, (B, H, N, d) as SDPA's inputs, passed as a (B, N, H, d) view:
            # each head's keys contiguous (32 KiB per tile) instead of 256-byte rows 2 KiB apart.
            khm, vhm = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (kc, vc))
            hm = lambda: sy.attention.attention_with_kvcache(q, khm, vhm)  # noqa: E731
            ok &= check_correct(hm(), reference(q, kc, vc), f"head-major cache B={B} Hkv={Hkv} N={N}")
            res["ours_hm"] = (bench(hm), bench(graphed(hm)), None)
            del khm, vhm
            rows.append((B, Hkv, N, splits, nbytes, res))
            del q, kc, vc
            torch.cuda.empty_cache()
        for mode, col, what in (("graph", 1, "CUDA-graph replay: GPU time of the kernels alone"),
                                ("eager", 0, "direct calls: the host's Python and launch time shows where it "
                                             "exceeds do_bench's L2 flush")):
            print(f"\n### {mode} ({what})\n")
            print("| B, KV heads, keys | splits | ours | cuDNN | flash | ours ÷ cuDNN (speed) | ours ÷ flash | "
                  "ours ÷ read ceiling | ours, head-major cache | its ÷ cuDNN |")
            print("|---|---|---|---|---|---|---|---|---|---|")
            for B, Hkv, N, splits, nbytes, r in rows:
                t = {k: r[k][col] for k in ("ours", "cudnn", "flash", "ours_hm")}

                def cell(x):
                    return f"{x * 1e6:.1f} µs, {nbytes / x / 1e12:.2f} TB/s" if x else "n/a"

                def ratio(other):
                    return f"{t[other] / t['ours']:.2f}×" if t[other] else "n/a"
                print(f"| {B}, {Hkv}, {N} | {splits} | {cell(t['ours'])} | {cell(t['cudnn'])} | {cell(t['flash'])} | "
                      f"{ratio('cudnn')} | {ratio('flash')} | {nbytes / t['ours'] / read_ceiling * 100:.0f} % | "
                      f"{cell(t['ours_hm'])} | {t['cudnn'] / t['ours_hm']:.2f}× |")
        print("\nhost µs per call (ours / cuDNN / flash): " + "; ".join(
            f"B={B},{Hkv},{N}: {r['ours'][2]:.0f} / {r['cudnn'][2] or 0:.0f} / {r['flash'][2] or 0:.0f}"
            for B, Hkv, N, _, _, r in rows))
        print("SDPA GQA: " + "; ".join(f"cudnn {r['cudnn_how']}, flash {r['flash_how']}" for *_, r in rows[:1]), flush=True)

        print("\n## paged (page 256, pages shuffled) vs contiguous, same shapes, CUDA-graph replay\n")
        print("| B, KV heads, keys | contiguous | paged | paged ÷ contiguous (time) |\n|---|---|---|---|")
        for B, Hkv, N in SHAPES:
            q, kc, vc = caches(B, Hkv, N)
            page = 256
            per = N // page
            order = torch.randperm(B * per, device="cuda")
            table = order.view(B, per).to(torch.int32)
            pk = torch.empty(B * per, page, Hkv, D, device="cuda", dtype=DT)
            pv = torch.empty_like(pk)
            pk[order] = kc.view(B * per, page, Hkv, D)
            pv[order] = vc.view(B * per, page, Hkv, D)
            seqlens = torch.full((B,), N, dtype=torch.int32, device="cuda")
            out = sy.attention.attention_with_kvcache(q, pk, pv, cache_seqlens=seqlens, block_table=table)
            ok &= check_correct(out, reference(q, kc, vc), f"paged B={B} Hkv={Hkv} N={N}")
            t_c = bench(graphed(lambda: sy.attention.attention_with_kvcache(q, kc, vc, cache_seqlens=seqlens)))
            t_p = bench(graphed(lambda: sy.attention.attention_with_kvcache(q, pk, pv, cache_seqlens=seqlens,
                                                                           block_table=table)))
            print(f"| {B}, {Hkv}, {N} | {t_c * 1e6:.1f} µs | {t_p * 1e6:.1f} µs | {t_p / t_c:.3f} |", flush=True)
            del q, kc, vc, pk, pv
            torch.cuda.empty_cache()

        print("\n## chunked prefill: 512 new queries (Hq 32, Hkv 8) over a 32k cache, bottom-right causal\n")
        g = torch.Generator(device="cuda").manual_seed(3)
        N, nq = 32768, 512
        q = torch.randn(1, nq, HQ, D, device="cuda", dtype=DT, generator=g)
        kc = torch.randn(1, N, 8, D, device="cuda", dtype=DT, generator=g)
        vc = torch.randn(1, N, 8, D, device="cuda", dtype=DT, generator=g)
        out = sy.attention.attention_with_kvcache(q, kc, vc, causal=True)
        qs, ks, vs = q.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2)
        mask = torch.ones(nq, N, dtype=torch.bool, device="cuda").tril(N - nq)
        want = F.scaled_dot_product_attention(qs.float(), ks.float(), vs.float(), mask, enable_gqa=True).transpose(1, 2)
        ok &= check_correct(out, want.double(), "chunk 512 x 32k (fp32 SDPA reference)")
        t_ours = bench(graphed(lambda: sy.attention.attention_with_kvcache(q, kc, vc, causal=True)))
        qc, kcc, vcc = (t.contiguous() for t in (qs, ks, vs))
        ke, ve = (t.repeat_interleave(4, 1) for t in (kcc, vcc))
        res = {}
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            for how, call in (("bool mask", lambda: F.scaled_dot_product_attention(qc, ke, ve, mask)),
                              ("no mask (a lower bound: 0.8 % more keys)", lambda: F.scaled_dot_product_attention(qc, ke, ve))):
                try:
                    with sdpa_kernel([backend]):
                        call()
                    res[name] = (bench(graphed(lambda call=call, backend=backend: _with(backend, call))), how)
                    break
                except RuntimeError:
                    continue
        flops = 4 * HQ * D * (nq * N - nq * (nq - 1) / 2)
        print(f"| who | time | TFLOP/s |\n|---|---|---|\n| ours | {t_ours * 1e6:.0f} µs | {flops / t_ours / 1e12:.0f} |")
        for name, (t, how) in res.items():
            print(f"| {name} ({how}) | {t * 1e6:.0f} µs | {flops / t / 1e12:.0f} |")
        del q, kc, vc, ke, ve
        torch.cuda.empty_cache()

    if args.no_sweep:
        print("\nALL CORRECT" if ok else "\nSOME CHECK FAILED")
        return 0 if ok else 1
    print("\n## split-count sweep: time (µs, CUDA-graph replay) of attention_with_kvcache(num_splits=s), bf16, "
          "q (B, 32, 1, 128)\n")
    splits_list = [1, 2, 4, 8, 16, 32, 64] if not args.quick else [1, 4, 16, 64]
    batch_list = [1, 2, 4, 8, 16, 32]
    n_list = [2048, 8192, 32768, 131072] if not args.quick else [8192, 131072]
    print("| B | Hkv | N | " + " | ".join(f"s={s}" for s in splits_list) + " | best | heuristic | heuristic ÷ best (time) |")
    print("|---" * (len(splits_list) + 6) + "|")
    for Hkv in (8, 32):
        for B in (batch_list if Hkv == 8 else [1, 2, 8]):
            for N in n_list:
                if kv_bytes(B, Hkv, N) > 16e9 or (Hkv == 32 and N > 32768):
                    continue
                q, kc, vc = caches(B, Hkv, N, seed=B + N)
                times = {s: bench(graphed(lambda s=s: sy.attention.attention_with_kvcache(q, kc, vc, num_splits=s)))
                         for s in splits_list}
                h = kvcache.num_splits_heuristic(B * Hkv, -(-N // 64), props.multi_processor_count)
                t_h = times[h] if h in times else bench(graphed(lambda: sy.attention.attention_with_kvcache(q, kc, vc)))
                best = min(times, key=times.get)
                print(f"| {B} | {Hkv} | {N} | " + " | ".join(f"{times[s] * 1e6:.1f}" for s in splits_list) +
                      f" | {best} | {h} | {t_h / times[best]:.2f} |", flush=True)
                del q, kc, vc
                torch.cuda.empty_cache()
    print("\nALL CORRECT" if ok else "\nSOME CHECK FAILED")
    return 0 if ok else 1


def chunk_sweep():
    """Time (CUDA-graph replay) of a bottom-right causal chunk, Hq 32 / Hkv 8, d = 128, on each path;
    the hopper path's output checked against float64 on the first KV head's group."""
    from sympathy.bench.suites.attention_decode import chunk_flops, float64_reference

    ok = True
    print("## chunked prefill: hopper route (kvcache._chunk_on_hopper) vs the decode kernel vs cuDNN (bool mask, "
          "K/V repeated per head), bf16, Hq 32, Hkv 8, d = 128, CUDA-graph times\n")
    print("| Nq | N | hopper route | decode kernel | cuDNN | hopper ÷ decode (speed) | hopper ÷ cuDNN (speed) | "
          "hopper TFLOP/s | err (hopper) |\n|---|---|---|---|---|---|---|---|---|")
    for N in (4096, 32768):
        for nq in (16, 32, 64, 128, 256, 512, 1024):
            g = torch.Generator(device="cuda").manual_seed(nq + N)
            q = torch.randn(1, nq, HQ, D, device="cuda", dtype=DT, generator=g)
            kc = torch.randn(1, N, 8, D, device="cuda", dtype=DT, generator=g)
            vc = torch.randn(1, N, 8, D, device="cuda", dtype=DT, generator=g)
            lens = torch.full((1,), N, dtype=torch.int32, device="cuda")
            scale = 1 / math.sqrt(D)
            hop = lambda: kvcache._chunk_on_hopper(torch, q, kc, vc, N, True, scale)[0]  # noqa: E731
            dec = lambda: sy.attention.attention_with_kvcache(q, kc, vc, cache_seqlens=lens, causal=True)  # noqa: E731
            want = float64_reference(torch, q[:, :, :4], kc[:, :, :1], vc[:, :, :1], causal=True)
            err = ((hop()[:, :, :4].double() - want).abs().max() / want.abs().max()).item()
            err_dec = ((dec()[:, :, :4].double() - want).abs().max() / want.abs().max()).item()
            ok &= err <= 1.6e-2 and err_dec <= 1.6e-2
            qs = q.transpose(1, 2).contiguous()
            ke, ve = (t.transpose(1, 2).repeat_interleave(4, 1).contiguous() for t in (kc, vc))
            mask = torch.ones(nq, N, dtype=torch.bool, device="cuda").tril(N - nq)
            cud = lambda: _with(SDPBackend.CUDNN_ATTENTION, lambda: F.scaled_dot_product_attention(qs, ke, ve, mask))  # noqa: E731
            t = {}
            for name, fn in (("hopper", hop), ("decode", dec), ("cudnn", cud)):
                try:
                    fn()
                    t[name] = bench(graphed(fn))
                except RuntimeError as exc:
                    print(f"  ({name} failed: {str(exc).splitlines()[0][:80]})")
                    t[name] = math.nan
            print(f"| {nq} | {N} | {t['hopper'] * 1e6:.1f} µs | {t['decode'] * 1e6:.1f} µs | {t['cudnn'] * 1e6:.1f} µs | "
                  f"{t['decode'] / t['hopper']:.2f}× | {t['cudnn'] / t['hopper']:.2f}× | "
                  f"{chunk_flops(HQ, D, nq, N) / t['hopper'] / 1e12:.0f} | {err:.1e} (decode {err_dec:.1e}) |", flush=True)
            del q, kc, vc, ke, ve, qs, mask
            torch.cuda.empty_cache()
    return ok


def _with(backend, call):
    with sdpa_kernel([backend]):
        return call()


if __name__ == "__main__":
    sys.exit(main())
