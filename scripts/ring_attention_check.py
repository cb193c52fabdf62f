"""Ring attention on ONE GPU (issue 23's fallback when no multi-GPU machine is lent): the ring's steps
for W virtual ranks run in this process (sy.attention.simulate_ring: the same schedule, kernels, LSE
merge and dK/dV accumulation as sy.attention.ring_attention), merged and compared with the unsharded
result, forward and backward; then each step's kernel time beside the full problem's.

    python3 scripts/ring_attention_check.py [--sizes 32768 131072 262144] [--worlds 2 4 8] [--out DIR]
    python3 scripts/ring_attention_check.py --device cpu --sizes 512 --check-n 256   # a dry run here

What it measures, and what it cannot: with one GPU there is no link between ranks, so no transfer
is timed and no overlap is shown. "crit" is the compute critical path of a real ring, the sum over
steps of the slowest rank's kernel time at that step (ranks run in parallel, steps in sequence);
eff = (full / W) / crit is the scaling efficiency the ring would reach if every transfer hid behind
compute. The last lines run sy.attention.ring_attention itself in a one-rank NCCL group (its checks,
autograd and drivers on CUDA; with one rank nothing moves).
"""
import argparse
import json
import math
import os
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

import sympathy as sy
from sympathy.attention.ring_steps import Kernels

T0 = time.time()


class TimedKernels(Kernels):
    """Kernels that put CUDA events around every kernel call, filed under the (kind, rank, step)
    that the simulation's timer hook says is running."""

    def __init__(self, q):
        super().__init__(q)
        self.where, self.events = None, []

    def _timed(self, fn, *args):
        if not self.cuda:
            t = time.perf_counter()
            result = fn(*args)
            self.events.append((self.where, time.perf_counter() - t))
            return result
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        result = fn(*args)
        end.record()
        self.events.append((self.where, (start, end)))
        return result

    def forward(self, *args):
        return self._timed(super().forward, *args)

    def backward(self, *args):
        return self._timed(super().backward, *args)

    def times_ms(self):
        """{(kind, rank, step): ms}"""
        if self.cuda:
            torch.cuda.synchronize()
            return {w: s.elapsed_time(e) for w, (s, e) in self.events}
        return {w: 1e3 * t for w, t in self.events}


def timer_for(kernels):
    def timer(kind, rank, step, fn):
        kernels.where = (kind, rank, step)
        return fn()
    return timer


def inputs(N, device, dtype, seed, B=1, Hq=8, Hkv=2, d=128):
    g = torch.Generator(device=device).manual_seed(seed)
    mk = lambda h: torch.randn(B, h, N, d, device=device, dtype=dtype, generator=g)   # noqa: E731
    return mk(Hq), mk(Hkv), mk(Hkv), mk(Hq)


def unsharded(q, k, v, dout, causal):
    """Our kernels on the whole problem (the result the ring must reproduce)."""
    ins = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = sy.attention.scaled_dot_product_attention(*ins, is_causal=causal, enable_gqa=True)
    out.backward(dout)
    return [out.detach()] + [t.grad for t in ins]


def exact(q, k, v, dout, causal):
    ins = [t.detach().double().requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*ins, is_causal=causal, enable_gqa=True)
    out.backward(dout.double())
    return [out.detach()] + [t.grad for t in ins]


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def check(args, device, dtype, log):
    """Ring vs unsharded, both against float64, at a length where float64 attention fits."""
    N = args.check_n
    q, k, v, dout = inputs(N, device, dtype, seed=1)
    print(f"\n== correctness, N = {N} ({dtype}, B=1, 8 q heads over 2 kv heads, d=128): relative L2 error "
          "vs float64, ring / unsharded kernel, for out dq dk dv")
    worst = 0.0
    for causal in (True, False):
        ref = exact(q, k, v, dout, causal)
        single = unsharded(q, k, v, dout, causal)
        base = [rel(s, r) for s, r in zip(single, ref)]
        for W in args.worlds:
            for layout in ("zigzag", "contiguous"):
                got = sy.attention.simulate_ring(q, k, v, W, is_causal=causal, enable_gqa=True, layout=layout,
                                                 dout=dout)
                errs = [rel(g, r) for g, r in zip(got, ref)]
                ratio = max(e / b for e, b in zip(errs, base))
                worst = max(worst, ratio)
                cells = "  ".join(f"{e:.2e}/{b:.2e}" for e, b in zip(errs, base))
                print(f"causal={causal!s:5} W={W} {layout:10} {cells}  (worst ratio {ratio:.2f})")
                log.append(dict(kind="check", N=N, W=W, layout=layout, causal=causal, ring=errs, unsharded=base))
    print(f"worst ring/unsharded error ratio: {worst:.2f} (pass: <= 2)")
    return worst <= 2.0


def full_kernel_ms(q, k, v, dout, causal, reps):
    """The unsharded problem's forward kernel and backward kernel, timed alone (CUDA events)."""
    kern = TimedKernels(q)
    scale = 1.0 / math.sqrt(q.shape[-1])
    fwd, bwd = [], []
    for _ in range(reps):
        kern.events = []
        kern.where = ("forward", 0, 0)
        out, lse = kern.forward(q, k, v, causal, scale)
        kern.where = ("backward", 0, 0)
        kern.backward(dout, q, k, v, out, lse, causal, scale)
        t = kern.times_ms()
        fwd.append(t[("forward", 0, 0)])
        bwd.append(t[("backward", 0, 0)])
    return sorted(fwd)[reps // 2], sorted(bwd)[reps // 2]


def timing(args, device, dtype, log):
    print("\n== step kernel times (ms, CUDA events, median of the repeats); crit = sum over steps of the slowest "
          "rank; eff = (full/W)/crit: the ring's scaling efficiency if every transfer hides behind compute "
          "(no transfer measured: one GPU)")
    print(f"{'N':>7} {'causal':>6} {'layout':>10} {'W':>2} | {'fwd full':>8} {'crit':>7} {'eff':>5} | "
          f"{'bwd full':>8} {'crit':>7} {'eff':>5} | {'max |ring-full| out':>9}  KV bytes/step")
    for N in args.sizes:
        if time.time() - T0 > args.budget:
            print(f"(stopped before N = {N}: the run's {args.budget} s budget is spent)")
            break
        q, k, v, dout = inputs(N, device, dtype, seed=2)
        for causal in (True, False) if N <= args.noncausal_max else (True,):
            full_f, full_b = full_kernel_ms(q, k, v, dout, causal, args.reps)
            full_out = sy.attention.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
            for W in args.worlds:
                for layout in ("zigzag", "contiguous") if causal else ("zigzag",):
                    if time.time() - T0 > args.budget:
                        break
                    per = {}
                    for _ in range(args.reps):
                        kern = TimedKernels(q)
                        got = sy.attention.simulate_ring(q, k, v, W, is_causal=causal, enable_gqa=True, layout=layout,
                                                         dout=dout, timer=timer_for(kern), kernels=kern)
                        for key, ms in kern.times_ms().items():
                            per.setdefault(key, []).append(ms)
                    med = {key: sorted(x)[len(x) // 2] for key, x in per.items()}
                    crit = {kind: sum(max((med.get((kind, r, i), 0.0) for r in range(W)), default=0.0)
                                      for i in range(W)) for kind in ("forward", "backward")}
                    eff_f, eff_b = full_f / W / crit["forward"], full_b / W / crit["backward"]
                    diff = (got[0].float() - full_out.float()).abs().max().item()
                    kv_bytes = 2 * k.numel() // W * k.element_size()
                    print(f"{N:>7} {causal!s:>6} {layout:>10} {W:>2} | {full_f:8.2f} {crit['forward']:7.2f} {eff_f:5.2f} | "
                          f"{full_b:8.2f} {crit['backward']:7.2f} {eff_b:5.2f} | {diff:9.2e}  {kv_bytes / 2**20:.1f} MiB",
                          flush=True)
                    log.append(dict(kind="timing", N=N, W=W, layout=layout, causal=causal, full_fwd_ms=full_f,
                                    full_bwd_ms=full_b, crit_fwd_ms=crit["forward"], crit_bwd_ms=crit["backward"],
                                    steps={f"{kk}/{r}/{i}": ms for (kk, r, i), ms in med.items()},
                                    max_abs_diff_out=diff))
                    if (N, W, causal) == (args.sizes[0], max(args.worlds), True):   # who waits for whom
                        for kind in ("forward", "backward"):
                            rows = [" ".join(f"{med.get((kind, r, i), 0.0):6.2f}" for i in range(W)) for r in range(W)]
                            print(f"    {kind} ms, rank x step:\n      " + "\n      ".join(rows))
        del q, k, v, dout


def one_rank_group(device, dtype):
    """sy.attention.ring_attention itself on CUDA: a one-rank NCCL group (nothing to send)."""
    import torch.distributed as dist

    store = os.path.join(tempfile.mkdtemp(), "store")
    dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method=f"file://{store}", rank=0,
                            world_size=1)
    q, k, v, dout = inputs(4096, device, dtype, seed=3)
    ins = [t.clone().requires_grad_() for t in (q, k, v)]
    out = sy.attention.ring_attention(*ins, is_causal=True, enable_gqa=True)
    out.backward(dout)
    ref = unsharded(q, k, v, dout, True)
    errs = [rel(a, b) for a, b in zip([out.detach()] + [t.grad for t in ins], ref)]
    dist.destroy_process_group()
    print(f"\nring_attention, one-rank {'NCCL' if device == 'cuda' else 'gloo'} group, N=4096 causal: relative "
          f"difference to the unsharded kernel out/dq/dk/dv " + " ".join(f"{e:.1e}" for e in errs))
    return max(errs) < 1e-2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[32768, 131072, 262144])
    ap.add_argument("--worlds", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--check-n", type=int, default=4096)
    ap.add_argument("--noncausal-max", type=int, default=32768, help="time non-causal up to this N")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--budget", type=float, default=150.0, help="seconds: start no new size after this")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    device = args.device
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    if device == "cuda":
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
        t = time.time()
        sy.attention.cuda.build_all()
        print(f"kernels ready in {time.time() - t:.0f} s", flush=True)
    log = []
    ok = check(args, device, dtype, log)
    try:
        ok = one_rank_group(device, dtype) and ok
    except Exception as exc:   # reported, not fatal: the timing below still runs
        print(f"one-rank group: {type(exc).__name__}: {exc}")
        ok = False
    timing(args, device, dtype, log)
    with open(os.path.join(args.out, "ring_attention_check.json"), "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name() if device == "cuda" else "cpu",
                       torch=torch.__version__, results=log), f, indent=1)
    print(f"\n{'PASS' if ok else 'FAIL'} ({time.time() - T0:.0f} s)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
