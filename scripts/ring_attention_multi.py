"""Ring attention across the GPUs of one host (issue 23's multi-GPU run), launched by torchrun:

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \\
        torchrun --nproc-per-node 2 scripts/ring_attention_multi.py [--sizes 131072 262144 524288] [--out DIR]
    torchrun --nproc-per-node 2 scripts/ring_attention_multi.py --device cpu --sizes 1024 --check-n 512   # dry run

bf16, B = 1, 8 query heads over 2 KV heads, d = 128, causal, zigzag; every rank prints nothing but rank 0
the tables (its JSON, with every rank's figures, goes to --out):

1. correctness: sy.attention.ring_attention, forward and backward, against our unsharded kernel on the
   whole sequence (each rank checks its own shard of out, dq, dk, dv; N = --check-n);
2. throughput at each N: the ring's forward and forward+backward (wall time of every rank in step:
   barrier, CUDA sync, median of --reps) against the unsharded kernel on one GPU at the same N (each
   rank runs it alone, all at once: one GPU's throughput); scaling = one GPU's time / the ring's, and
   the peak memory of each per GPU;
3. PyTorch's context parallelism on the same GPUs and inputs (torch.distributed.tensor.experimental.
   context_parallel: its ring over SDPA, head-tail load balancing for causal), K/V repeated to the 8
   query heads because its SDPA dispatch takes no enable_gqa (so its ring moves 4x our K/V bytes);
4. overlap: a torch.profiler trace of one ring forward+backward on each rank (in --out); per NCCL kernel
   kind (SendRecv: the ring's K/V and dK/dV; AllGather: the call's agreement check, whose time is mostly
   one rank waiting for the other to arrive), the share of its time during which a compute kernel runs
   on the GPU (hidden), the rest exposed.

FLOPs as scripts/bwd_device.py counts them: forward 4 B H N^2 d / 2 (causal), forward+backward 3.5x.
"""
import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time

import torch
import torch._dynamo  # noqa: F401  before init_process_group: it holds the groups that exist when imported
import torch.distributed as dist
import torch.nn.functional as F

import sympathy as sy


def log0(*a):
    if dist.get_rank() == 0:
        print(*a, flush=True)


def rand(shape, dtype, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, device=device, generator=g)


def full_inputs(N, args, seed):
    """The whole sequence's q, k, v, dout, identical on every rank (same seeds)."""
    B, Hq, Hkv, d = 1, args.heads, args.kv_heads, 128
    return (rand((B, Hq, N, d), args.dtype, args.device, seed), rand((B, Hkv, N, d), args.dtype, args.device, seed + 1),
            rand((B, Hkv, N, d), args.dtype, args.device, seed + 2), rand((B, Hq, N, d), args.dtype, args.device, seed + 3))


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()
    dist.barrier()


def timed(fn, device, reps):
    """Median wall seconds of fn over reps, every rank in step (a barrier before, a sync after)."""
    fn()   # warm-up: first-call builds, NCCL communicators
    times = []
    for _ in range(reps):
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def peak_mib(device, fn):
    if device != "cuda":
        fn()
        return float("nan")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def shard(x, args):
    return sy.attention.shard_sequence(x, args.world, args.rank, layout="zigzag").contiguous()


def attention_step(attention, q, k, v, dout, backward):
    """attention(q, k, v) causal with GQA (ring_attention, or our SDPA on the whole sequence); with backward,
    the output and the gradients of q, k, v."""
    ins = [t.detach().requires_grad_(backward) for t in (q, k, v)]
    out = attention(*ins, is_causal=True, enable_gqa=True)
    if backward:
        out.backward(dout)
        return [out.detach()] + [t.grad for t in ins]
    return [out]


ring_step = functools.partial(attention_step, sy.attention.ring_attention)
single_step = functools.partial(attention_step, sy.attention.scaled_dot_product_attention)


def check(args, result):
    q, k, v, dout = full_inputs(args.check_n, args, seed=10)
    whole = single_step(q, k, v, dout, True)
    mine = ring_step(*(shard(t, args) for t in (q, k, v, dout)), True)
    errs = [rel(m, shard(w, args)) for m, w in zip(mine, whole)]
    gathered = [None] * args.world
    dist.all_gather_object(gathered, errs)
    worst = max(max(e) for e in gathered)
    log0(f"\n== correctness, N = {args.check_n}: ring_attention's shard against the unsharded kernel's, "
         "relative L2 error of out dq dk dv, by rank")
    for r, e in enumerate(gathered):
        log0(f"rank {r}: " + "  ".join(f"{x:.2e}" for x in e))
    ok = worst < (2e-2 if args.dtype != torch.float32 else 1e-4)
    log0(f"worst {worst:.2e}: {'ok' if ok else 'FAIL'}")
    result["check"] = dict(N=args.check_n, errors=gathered, ok=ok)
    return ok


def pytorch_cp(args, q, k, v, dout, backward):
    """torch's context_parallel on the full inputs (it shards them in place inside the context)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel

    rep = args.heads // args.kv_heads
    buffers = [q.clone(), k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), dout.clone()]   # full, every rank
    mesh = init_device_mesh(args.device, (args.world,))

    def step():   # the context shards the buffers in place and restores them after: two copies, ~1 % of a step
        with context_parallel(mesh, buffers=buffers, buffer_seq_dims=[2, 2, 2, 2]):
            qq, kk, vv = (t.detach().requires_grad_(backward) for t in buffers[:3])
            out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True)
            if backward:
                out.backward(buffers[3])
    return step


def overlap(trace_path):
    """From a chrome trace, by NCCL kernel kind (SendRecv: the ring's K/V and dK/dV; AllGather: the call's
    agreement check): {kind: [kernels, ms, ms during which a compute kernel ran]}."""
    events = json.load(open(trace_path))["traceEvents"]
    kernels = [(e["ts"], e["ts"] + e["dur"], e["name"]) for e in events if e.get("cat") == "kernel" and "dur" in e]
    merged = []
    for s, t, _ in sorted(k for k in kernels if "nccl" not in k[2].lower()):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], t)
        else:
            merged.append([s, t])
    kinds = {}
    for s, t, name in kernels:
        if "nccl" in name.lower():
            kind = name.split("(")[0].removeprefix("ncclDevKernel_").split("_")[0]
            row = kinds.setdefault(kind, [0, 0.0, 0.0])
            row[0] += 1
            row[1] += (t - s) / 1e3
            row[2] += sum(max(0.0, min(t, b) - max(s, a)) for a, b in merged) / 1e3
    return kinds


def trace_overlap(args, N, result):
    """Rank 0's profiler trace of one ring forward+backward at N, and how much of its NCCL time is hidden."""
    mine = [shard(t, args) for t in full_inputs(N, args, seed=N)]
    ring_step(*mine, True)
    sync(args.device)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        ring_step(*mine, True)
        torch.cuda.synchronize()
    trace = os.path.join(args.out, f"ring_trace_rank{args.rank}_N{N}.json")
    prof.export_chrome_trace(trace)
    kinds = overlap(trace)
    result["overlap"] = dict(N=N, rank=args.rank, by_kind=kinds)
    log0(f"\n== overlap, one ring forward+backward at N = {N} (rank 0's trace {trace}), NCCL kernels by kind: "
         + "; ".join(f"{kind} x{n}: {ms:.2f} ms, {hid:.2f} hidden ({hid / max(ms, 1e-9):.0%}), {ms - hid:.2f} exposed"
                     for kind, (n, ms, hid) in kinds.items()) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[131072, 262144, 524288])
    ap.add_argument("--check-n", type=int, default=16384)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--skip-pytorch", action="store_true", help="no torch context_parallel anchor")
    ap.add_argument("--budget", type=float, default=1e9, help="seconds: no new size starts past it")
    ap.add_argument("--out", default=os.environ.get("OUT", tempfile.gettempdir()))
    args = ap.parse_args()
    t0 = time.time()
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    args.world, args.rank = dist.get_world_size(), dist.get_rank()
    args.dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    result = dict(world=args.world, device=torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                  torch=torch.__version__, rows=[])
    ok = check(args, result)
    log0(f"\n== throughput, causal zigzag, W = {args.world} (TFLOP/s of the whole problem; ms; MiB peak per GPU)")
    log0(f"{'N':>7} | {'ring fwd':>9} {'1 GPU fwd':>9} {'scale':>5} | {'ring f+b':>9} {'1 GPU f+b':>9} {'scale':>5} | "
         f"{'torch CP f+b':>12} {'ours/CP':>7} | {'MiB ring':>8} {'MiB 1 GPU':>9}")
    for N in args.sizes:
        if time.time() - t0 > args.budget:
            log0(f"(stopped before N = {N}: the {args.budget:.0f} s budget is spent)")
            break
        q, k, v, dout = full_inputs(N, args, seed=N)
        mine = [shard(t, args) for t in (q, k, v, dout)]
        flops = 4 * args.heads * N * N * 128 / 2
        row = dict(N=N)
        row["ring_fwd_s"] = timed(lambda: ring_step(*mine, False), args.device, args.reps)
        row["ring_fb_s"] = timed(lambda: ring_step(*mine, True), args.device, args.reps)
        row["one_fwd_s"] = timed(lambda: single_step(q, k, v, dout, False), args.device, args.reps)
        row["one_fb_s"] = timed(lambda: single_step(q, k, v, dout, True), args.device, args.reps)
        row["ring_mib"] = peak_mib(args.device, lambda: ring_step(*mine, True))
        row["one_mib"] = peak_mib(args.device, lambda: single_step(q, k, v, dout, True))
        row["cp_fb_s"] = float("nan")
        if not args.skip_pytorch:
            try:
                row["cp_fb_s"] = timed(pytorch_cp(args, q, k, v, dout, True), args.device, args.reps)
            except Exception as e:   # a prototype API: report, keep measuring ours
                row["cp_error"] = f"{type(e).__name__}: {e}"[:300]
                log0(f"torch context_parallel failed at N = {N}: {row['cp_error']}")
        tf = lambda s, mult=1.0: mult * flops / s / 1e12   # noqa: E731
        log0(f"{N:>7} | {tf(row['ring_fwd_s']):9.1f} {tf(row['one_fwd_s']):9.1f} {row['one_fwd_s'] / row['ring_fwd_s']:5.2f} | "
             f"{tf(row['ring_fb_s'], 3.5):9.1f} {tf(row['one_fb_s'], 3.5):9.1f} {row['one_fb_s'] / row['ring_fb_s']:5.2f} | "
             f"{tf(row['cp_fb_s'], 3.5):12.1f} {row['cp_fb_s'] / row['ring_fb_s']:7.2f} | {row['ring_mib']:8.0f} {row['one_mib']:9.0f}")
        log0(f"{'':>7}   ms: ring fwd {1e3 * row['ring_fwd_s']:.1f}, 1 GPU fwd {1e3 * row['one_fwd_s']:.1f}, "
             f"ring f+b {1e3 * row['ring_fb_s']:.1f}, 1 GPU f+b {1e3 * row['one_fb_s']:.1f}, torch CP f+b {1e3 * row['cp_fb_s']:.1f}")
        result["rows"].append(row)
        del q, k, v, dout, mine
        if args.device == "cuda" and "overlap" not in result:
            trace_overlap(args, N, result)
    if args.rank == 0:
        path = os.path.join(args.out, f"ring_multi_W{args.world}.json")
        with open(path, "w") as f:
            json.dump(result, f, indent=1, default=str)
        print(f"\nJSON: {path}")
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
