"""Ring attention (issue 23): sy.attention.ring_attention across processes with gloo on the C kernel,
against the single-process result, forward and backward; the layouts, the schedule and the merge in
one process; bad calls refused on every rank.

The distributed cases run W worker processes (this file run as a script, rank, world size and a
FileStore path on the command line, gloo on the loopback interface only). The test asserts every
worker's exit status and the cases it reported; a worker still running after HANG seconds is a
failure (the workers are killed), never a hung test run. Tolerances: the ring's error against float64
must stay within a small multiple of the unsharded C kernel's own error (plus one fp32 ulp-scale floor).
"""
import gc
import importlib
import os
import re
import subprocess
import sys
import traceback
import weakref

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import sympathy as sy  # noqa: E402
from sympathy.attention.ring_steps import ring_schedule  # noqa: E402

HANG = 180   # seconds for one group of workers: ~15 s idle, 128 s seen with the 2-core VM at load 9
SY_PATH = os.path.dirname(os.path.dirname(os.path.abspath(sy.__file__)))   # the sympathy this test imports
CASES = [(layout, causal, gqa) for layout in ("zigzag", "contiguous") for causal in (False, True)
         for gqa in (False, True)]


def make_inputs(W, gqa, seed, chunk=5, d=16):
    """Full-sequence q, k, v, dout (float32, CPU): N = 2W chunks; GQA: 4 query heads over 2, dv != d."""
    g = torch.Generator().manual_seed(seed)
    Hq, Hkv, dv = (4, 2, 24) if gqa else (2, 2, d)
    N = 2 * W * chunk
    q, k = torch.randn(2, Hq, N, d, generator=g), torch.randn(2, Hkv, N, d, generator=g)
    v, dout = torch.randn(2, Hkv, N, dv, generator=g), torch.randn(2, Hq, N, dv, generator=g)
    return q, k, v, dout


def grads(fn, q, k, v, dout):
    ins = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = fn(*ins)
    out.backward(dout)
    return [out.detach()] + [t.grad for t in ins]


def check_against_single(got, q, k, v, dout, causal, gqa, what):
    """got = (out, dq, dk, dv) on the full sequence; compared with float64 and with the unsharded C kernel."""
    exact = grads(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=causal, enable_gqa=gqa),
                  *(t.double() for t in (q, k, v, dout)))
    single = grads(lambda a, b, c: sy.attention.scaled_dot_product_attention(a, b, c, is_causal=causal, enable_gqa=gqa),
                   q, k, v, dout)
    for name, x, s, e in zip(("out", "dq", "dk", "dv"), got, single, exact):
        own = (s.double() - e).abs().max().item()
        err = (x.double() - e).abs().max().item()
        assert err <= 4 * own + 1e-6, f"{what}: {name} error {err:.2e} vs the unsharded kernel's {own:.2e}"


# ---- one process -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
@pytest.mark.parametrize("W", [1, 2, 3, 5])
def test_shard_unshard_round_trip(layout, W):
    x = torch.arange(2 * 3 * 20 * W).reshape(2, 3, 20 * W).unsqueeze(-1).expand(2, 3, 20 * W, 4)
    shards = [sy.attention.shard_sequence(x, W, r, layout=layout) for r in range(W)]
    assert all(s.shape == (2, 3, 20, 4) for s in shards)
    assert torch.equal(sy.attention.unshard_sequence(shards, layout=layout), x)
    for r, s in enumerate(shards):   # positions say which tokens a rank holds
        assert torch.equal(s[0, 0, :, 0], sy.attention.shard_positions(20 * W, W, r, layout=layout))
    if layout == "zigzag" and W > 1:   # rank 0 holds the first and the last chunk
        assert shards[0][0, 0, 0, 0] == 0 and shards[0][0, 0, -1, 0] == 20 * W - 1


def test_shard_refuses_bad_calls():
    x = torch.zeros(1, 2, 12, 4)
    with pytest.raises(ValueError, match="do not split evenly into 8 chunks"):
        sy.attention.shard_sequence(x, 4, 0)                      # zigzag: 2 x 4 chunks of 12 tokens
    assert sy.attention.shard_sequence(x, 4, 3, layout="contiguous").shape[2] == 3
    with pytest.raises(ValueError, match="layout must be one of"):
        sy.attention.shard_sequence(x, 2, 0, layout="striped")
    with pytest.raises(ValueError, match="rank must be"):
        sy.attention.shard_sequence(x, 2, 2)
    with pytest.raises(ValueError, match="same number of tokens"):
        sy.attention.unshard_sequence([x, x[:, :, :6]])


@pytest.mark.parametrize("W", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
def test_schedule_covers_the_causal_triangle_once(W, layout):
    """Every (query, key) pair with key <= query is computed by exactly one rank at one step, none other;
    zigzag gives every rank the same work at every step after the first."""
    n = 2 * 3
    N = n * W
    count = torch.zeros(N, N, dtype=torch.int64)
    work = torch.zeros(W, W, dtype=torch.int64)
    pos = [sy.attention.shard_positions(N, W, r, layout=layout) for r in range(W)]
    for r in range(W):
        for i, step in enumerate(ring_schedule(r, W, n, layout=layout, is_causal=True)):
            if step is None:
                continue
            qp, kp = pos[r][step.q_rows], pos[step.source][step.kv_rows]
            seen = kp[None, :] <= qp[:, None] if step.causal else torch.ones(len(qp), len(kp), dtype=torch.bool)
            count[qp[:, None].expand_as(seen)[seen], kp[None, :].expand_as(seen)[seen]] += 1
            work[r, i] = step.pairs(n)
    assert torch.equal(count, torch.ones(N, N, dtype=torch.int64).tril())
    if layout == "zigzag" and W > 1:
        assert (work[:, 1:] == work[0, 1]).all() and work[0, 1] == (n // 2) * n


@pytest.mark.parametrize("W", [1, 2, 3, 5])
@pytest.mark.parametrize("layout, causal, gqa", CASES)
def test_simulated_ring_matches_single_process(W, layout, causal, gqa):
    q, k, v, dout = make_inputs(W, gqa, seed=W)
    got = sy.attention.simulate_ring(q, k, v, W, is_causal=causal, enable_gqa=gqa, layout=layout, dout=dout)
    check_against_single(got, q, k, v, dout, causal, gqa, f"simulated W={W} {layout} causal={causal}")


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
@pytest.mark.parametrize("causal", [False, True])
def test_simulated_ring_on_cuda(layout, causal):
    """bf16 on the hopper/mma kernels: the ring's error against float64 within twice the unsharded
    kernel's (its partial outputs and dK/dV are bf16 per step, merged in fp32)."""
    g = torch.Generator(device="cuda").manual_seed(0)
    q, dout = (torch.randn(1, 8, 1024, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    k, v = (torch.randn(1, 2, 1024, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    exact = grads(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=causal, enable_gqa=True),
                  *(t.double() for t in (q, k, v, dout)))
    single = grads(lambda a, b, c: sy.attention.scaled_dot_product_attention(a, b, c, is_causal=causal, enable_gqa=True),
                   q, k, v, dout)
    rel = lambda a, b: ((a.double() - b).norm() / b.norm()).item()   # noqa: E731
    for W in (2, 4):
        got = sy.attention.simulate_ring(q, k, v, W, is_causal=causal, enable_gqa=True, layout=layout, dout=dout)
        for name, x, s, e in zip(("out", "dq", "dk", "dv"), got, single, exact):
            assert rel(x, e) <= 2 * rel(s, e), f"W={W} {name}: {rel(x, e):.2e} vs unsharded {rel(s, e):.2e}"


def test_needs_an_initialised_group():
    if torch.distributed.is_initialized():
        pytest.skip("a process group exists in this test process")
    q = torch.zeros(1, 1, 4, 8)
    with pytest.raises(RuntimeError, match="init_process_group"):
        sy.attention.ring_attention(q, q, q)


# ---- W processes over gloo ------------------------------------------------------------------------------------
def launch(W, tmp_path):
    env = dict(os.environ, PYTHONPATH=SY_PATH, PYTHONFAULTHANDLER="1", GLOO_SOCKET_IFNAME="lo",
               OMP_NUM_THREADS="1")
    store = tmp_path / "store"
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), str(r), str(W), str(store)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(W)]
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=HANG)[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        tails = "\n".join(f"-- rank {r}:\n{p.communicate()[0][-3000:]}" for r, p in enumerate(procs))
        pytest.fail(f"ring_attention workers (W={W}) still running after {HANG} s: hung; killed\n{tails}")
    finally:
        for p in procs:
            p.wait()
    return procs, outputs


@pytest.mark.parametrize("W", [2, 3, 4])   # W = 1 (no transfer) runs in scripts/ring_attention_check.py
def test_ring_attention_across_processes(W, tmp_path):
    procs, outputs = launch(W, tmp_path)
    for r, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f"rank {r} of {W} exited with {p.returncode}:\n{out}"
        lines = set(out.split("\n"))
        for layout, causal, gqa in CASES:
            assert f"ok {layout} causal={causal} gqa={gqa}" in lines, f"rank {r}: case missing:\n{out}"
        cases = ("bad layout", "foreign dtype", "after refusals", "torn down")
        cases += ("uneven", "odd zigzag") if W > 1 else ()
        for case in cases:
            assert any(line.startswith(f"ok {case}") for line in lines), f"rank {r}: {case} missing:\n{out}"


def test_context_parallel_demo_matches_one_process():
    """The demo's training step over 2 gloo processes: the loss and gradients of one process."""
    env = dict(os.environ, PYTHONPATH=SY_PATH, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    code = ("from sympathy.demos.context_parallel import main; "
            "main(['--seq', '256', '--d-model', '32', '--layers', '1', '--steps', '1'])")
    try:
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=HANG)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the demo hung for {HANG} s: {exc.stdout!r} {exc.stderr!r}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("one process"))
    single, ring = (float(x) for x in re.findall(r"loss (\d+\.\d+)", line.replace("(ring", "loss")))
    assert single == ring and float(line.rsplit(" ", 1)[1]) < 1e-4, line


def _worker(rank, W, store):
    """One rank: every case against the single-process result on the full sequence, then the refusals."""
    import faulthandler

    import torch.distributed as dist

    faulthandler.dump_traceback_later(HANG - 10, exit=True)   # a hung rank says where, before the test kills it
    torch.set_num_threads(1)
    # torch._dynamo (imported by the first call of a torch custom op, sympathy's too) keeps references to the
    # groups that exist when it is imported: imported after init, the group outlives destroy_process_group() and
    # gloo's teardown runs during interpreter exit, where it can abort (SIGABRT, seen once in CI).
    importlib.import_module("torch._dynamo")
    threads = lambda: len(os.listdir("/proc/self/task"))   # noqa: E731
    before = threads()
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=W)

    def run(q, k, v, causal, gqa, layout, dout=None):
        shard = lambda t: sy.attention.shard_sequence(t, W, rank, layout=layout)   # noqa: E731
        ins = [shard(t).clone().requires_grad_() for t in (q, k, v)]
        out = sy.attention.ring_attention(*ins, is_causal=causal, enable_gqa=gqa, layout=layout)
        if dout is not None:
            out.backward(shard(dout))
        return out, ins

    for layout, causal, gqa in CASES:
        q, k, v, dout = make_inputs(W, gqa, seed=CASES.index((layout, causal, gqa)))   # same seed on every rank
        out, ins = run(q, k, v, causal, gqa, layout, dout)
        # Gather every rank's shards, unshard, and compare the full tensors with the single process.
        full = []
        for t in [out.detach()] + [x.grad for x in ins]:
            parts = [torch.empty_like(t) for _ in range(W)]
            dist.all_gather(parts, t.contiguous())
            full.append(sy.attention.unshard_sequence(parts, layout=layout))
        if rank == 0:   # every rank holds the same full tensors now: one check is enough (2 cores)
            check_against_single(full, q, k, v, dout, causal, gqa, f"W={W} {layout} causal={causal}")
        print(f"ok {layout} causal={causal} gqa={gqa}", flush=True)

    def call(case, exc_type, match, caller_tensor, q, k, v, **kw):   # caller_tensor: a local of this frame
        try:
            sy.attention.ring_attention(q, k, v, **kw)
        except exc_type as exc:
            assert match in str(exc), f"{case}: {exc}"
            return str(exc)
        raise AssertionError(f"{case}: not refused")

    def refused(case, exc_type, match, q, k, v, **kw):
        # The caller's frame must go when it returns: a refusal whose traceback sits in a reference cycle
        # keeps every frame on it (and their tensors) alive until the cyclic collector happens to run.
        caller_tensor = torch.empty(0)
        alive = weakref.ref(caller_tensor)
        gc.disable()
        try:
            message = call(case, exc_type, match, caller_tensor, q, k, v, **kw)
            del caller_tensor
            assert alive() is None, f"{case}: the refused call's frames outlived it (a reference cycle)"
        finally:
            gc.enable()
        print(f"ok {case}: {message}", flush=True)

    x = torch.randn(1, 2, 6, 8)
    if W > 1:
        mine = x if rank else torch.randn(1, 2, 8, 8)     # rank 0 holds 8 tokens, the others 6
        refused("uneven", ValueError, "uneven shards", mine, mine, mine)
        odd = torch.randn(1, 2, 5, 8)                      # 5 x W tokens cannot make 2W chunks
        refused("odd zigzag", ValueError, "do not split evenly", odd, odd, odd, is_causal=True)
    refused("bad layout", ValueError, "layout must be one of", x, x, x, layout="stripe")
    if rank == W - 1:
        refused("foreign dtype", TypeError, "float32", x.double(), x.double(), x.double())
    else:
        refused("foreign dtype", ValueError, f"rank(s) [{W - 1}] refused", x, x, x)
    q, k, v, _ = make_inputs(W, False, seed=5)
    out, _ = run(q, k, v, True, False, "zigzag")   # the group still works: nothing left in flight
    exact = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert (out - sy.attention.shard_sequence(exact, W, rank)).abs().max() < 1e-4
    print("ok after refusals", flush=True)
    dist.barrier()   # no rank tears its connections down while a peer still uses them
    dist.destroy_process_group()
    # `out` is alive and its graph holds the ring: gloo's threads must be gone all the same.
    assert threads() == before, f"{threads()} threads after destroy_process_group, {before} before init"
    print("ok torn down", flush=True)


if __name__ == "__main__":
    try:
        _worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        os._exit(1)   # no atexit/teardown that could wait on a peer
