"""Context-parallel attention: a sequence no single device can hold, its attention computed across the
ranks of a torch.distributed group (NCCL on GPUs, gloo on CPUs) by passing K/V blocks around a ring.

    import torch.distributed as dist, sympathy as sy
    dist.init_process_group("nccl")                       # torchrun sets rank and world size
    W, r = dist.get_world_size(), dist.get_rank()
    q_r, k_r, v_r = (sy.attention.shard_sequence(x, W, r) for x in (q, k, v))   # or build them sharded
    out_r = sy.attention.ring_attention(q_r, k_r, v_r, is_causal=True, enable_gqa=True)
    out_r.sum().backward()                                # dK/dV come back around the ring

Each rank holds its shard of q, k, v along the sequence (dim 2 of (B, H, N, d)) and gets its shard
of softmax(q kᵀ·scale) v over the WHOLE sequence. W steps: at step i a rank attends its queries to
the K/V block of rank (rank - i) mod W, with sympathy's kernels (CUDA hopper/mma, or the C kernel on
the CPU), which return each row's log-sum-exp; the partial outputs merge exactly by it in fp32
(ring_steps.py). While the kernel works on the block already here, the next block is on its way:
`batch_isend_irecv` to rank+1 and from rank-1, on a stream of its own on CUDA (the copy engines and
NVLink/IB move bytes while the SMs compute; on the CPU gloo's threads move them while the C kernel,
which releases the GIL, computes). The backward runs the same ring: dQ stays, and fp32 dK/dV
accumulators travel with the K/V block they belong to, one hop behind it, and arrive home after W hops.

Sharding: layout="zigzag" (the default: rank r holds chunks r and 2W-1-r of 2W, balancing causal
work exactly) or "contiguous" (rank r holds tokens [r·N/W, (r+1)·N/W)). The same layout must shard
the input (shard_sequence) and unshard the output (unshard_sequence). Every rank must pass shards of
one shape; each call first agrees on that with one small all_gather, so a bad shard makes every rank
raise the same ValueError instead of leaving its peers hanging in a receive.
"""
from __future__ import annotations

import math
from typing import Optional

from ._checks import MAX_HEAD_DIM, check_shapes
from .ring_steps import (LAYOUTS, Kernels, Merge, add_kv_grads, backward_step, check_sequence_length,
                         forward_step, ring_schedule)

_KV_TAG, _DKV_TAG = 23, 24        # gloo matches messages by (peer, tag): K/V and dK/dV never mix
_DTYPE_CODES = {"float32": 0, "float16": 1, "bfloat16": 2}
_FIELDS = ("batch", "heads_q", "heads_kv", "n", "head_dim", "value_dim", "dtype", "device", "is_causal",
           "layout", "scale")


# ---- the checks every rank agrees on ------------------------------------------------------------------------
def _describe(q, k, v, is_causal, scale, enable_gqa, layout) -> list:
    """This rank's call as numbers (for the agreement), after every check that needs no peer."""
    import torch

    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must have 4 dims (B, H, N_local, d); got shape {tuple(t.shape)}")
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be a bool; got {type(is_causal).__name__}")
    if not isinstance(enable_gqa, bool):
        raise TypeError(f"enable_gqa must be a bool; got {type(enable_gqa).__name__}")
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}; got {layout!r}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))
                              or not math.isfinite(scale)):
        raise ValueError(f"scale must be a finite number or None; got {scale!r}")
    if not (q.device == k.device == v.device) or q.device.type not in ("cpu", "cuda"):
        raise ValueError(f"q, k and v must be on one CPU or CUDA device; got {q.device}, {k.device}, {v.device}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must share one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    shape = check_shapes(tuple(q.shape), tuple(k.shape), tuple(v.shape), scale=scale, enable_gqa=enable_gqa,
                         max_head_dim=MAX_HEAD_DIM)
    if shape.n_q != shape.n_kv:
        raise ValueError(f"q, k and v must be shards of the same tokens: q holds {shape.n_q} and k/v "
                         f"{shape.n_kv} along dim 2")
    if q.device.type == "cuda":
        from . import cuda

        cuda._check_inputs(q, k, v, None, is_causal, scale, enable_gqa, "auto")
    else:
        if q.dtype != torch.float32:
            raise TypeError(f"CPU tensors run the C kernel, which is float32; got {q.dtype} (convert with .float())")
        for name, t in (("q", q), ("k", k), ("v", v)):
            if t.shape[-1] > 1 and t.stride(-1) != 1:
                raise ValueError(f"{name} must be contiguous in its last dim; got stride {t.stride(-1)}")
    return [shape.batch, shape.heads_q, shape.heads_kv, shape.n_q, shape.head_dim, shape.value_dim,
            _DTYPE_CODES[str(q.dtype).replace("torch.", "")], int(q.device.type == "cuda"), int(is_causal),
            LAYOUTS.index(layout), shape.scale]


def _agree(q, k, v, is_causal, scale, enable_gqa, layout, group, world: int) -> None:
    """Check this rank's call, then compare every rank's: the same error on every rank, or none."""
    import torch
    import torch.distributed as dist

    backend = str(dist.get_backend(group))
    error = None
    try:
        mine = _describe(q, k, v, is_causal, scale, enable_gqa, layout)
        want = "nccl" if q.device.type == "cuda" else "gloo"
        if want not in backend:   # e.g. "nccl", "gloo" or "cpu:gloo,cuda:nccl"
            raise ValueError(f"{q.device.type.upper()} tensors move between ranks with {want}; this group's "
                             f"backend is {backend!r} (init_process_group('{want}'), or 'cpu:gloo,cuda:nccl')")
    except (TypeError, ValueError) as exc:
        error, mine = exc, [math.nan] * len(_FIELDS)
    on_cuda = "nccl" in backend and torch.cuda.is_available()
    device = torch.device("cuda", torch.cuda.current_device()) if on_cuda else torch.device("cpu")
    if isinstance(q, torch.Tensor) and q.device.type == "cuda":
        device = q.device
    # float64 holds every field exactly (sizes < 2^53, the scale itself)
    table = torch.empty(world * len(_FIELDS), dtype=torch.float64, device=device)   # flat: gloo's rule
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor   # the new name, torch >= 2.13
    gather(table, torch.tensor(mine, dtype=torch.float64, device=device), group=group)
    rows = table.view(world, len(_FIELDS)).cpu().tolist()
    if error is not None:
        try:
            raise error
        finally:   # the traceback holds this frame: a local naming the exception would make a cycle that
            del error   # keeps the caller's frames, tensors included, alive until the cyclic collector runs
    refused = [r for r, row in enumerate(rows) if any(math.isnan(x) for x in row)]
    if refused:
        raise ValueError(f"ring_attention: rank(s) {refused} refused their input (their own error says why); "
                         "no rank ran")
    for field, values in zip(_FIELDS, zip(*rows)):
        if len(set(values)) > 1:
            per_rank = ", ".join(f"rank {r}: {x:g}" for r, x in enumerate(values))
            what = "shards of unequal length (uneven shards)" if field == "n" else f"different {field}"
            raise ValueError(f"ring_attention: every rank must pass the same call; got {what}: {per_rank}")
    check_sequence_length(int(rows[0][3]) * world, world, layout, f"the sequence ({world} shards)")


# ---- the ring ------------------------------------------------------------------------------------------------
_streams: dict = {}


class _P2PRing:
    """Sends a tensor to the next rank while receiving the same-sized one from the previous rank."""

    def __init__(self, group, device):
        import torch
        import torch.distributed as dist

        # None stays None (the default group, looked up at each send): a ring kept alive by an autograd
        # graph must not keep the world's ProcessGroup, and gloo's threads, alive past
        # destroy_process_group(); they would be torn down during interpreter exit instead.
        self.group = group
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        global_rank = (lambda r: r) if group is None else (lambda r: dist.get_global_rank(group, r))
        self.next, self.prev = global_rank((self.rank + 1) % self.world), global_rank((self.rank - 1) % self.world)
        self.stream = None
        if device.type == "cuda":   # one communication stream per device, kept across calls
            if device not in _streams:
                _streams[device] = torch.cuda.Stream(device)
            self.stream = _streams[device]

    def start(self, send, tag: int):
        import torch
        import torch.distributed as dist

        recv = torch.empty_like(send)
        ops = [dist.P2POp(dist.isend, send, self.next, self.group, tag),
               dist.P2POp(dist.irecv, recv, self.prev, self.group, tag)]
        if self.stream is None:
            return dist.batch_isend_irecv(ops), send, recv
        # The copy may start only when `send` is written and `recv`'s memory is done with: everything
        # queued on the compute stream so far. Then it runs beside the kernels queued after this.
        self.stream.wait_stream(torch.cuda.current_stream(send.device))
        with torch.cuda.stream(self.stream):
            return dist.batch_isend_irecv(ops), send, recv

    def finish(self, pending):
        """The received tensor, safe to use on the current stream. `send` stays referenced until
        here, so the allocator cannot hand its memory out while the copy may still read it."""
        import torch

        reqs, _send, recv = pending
        if self.stream is None:
            for req in reqs:
                req.wait()
            return recv
        with torch.cuda.stream(self.stream):
            for req in reqs:
                req.wait()
        torch.cuda.current_stream(recv.device).wait_stream(self.stream)
        return recv


def _pack(*tensors):
    """One flat buffer (one message per step instead of two)."""
    import torch

    return torch.cat([t.reshape(-1) for t in tensors])


def _unpack(buf, *like):
    views, at = [], 0
    for t in like:
        views.append(buf[at:at + t.numel()].view(t.shape))
        at += t.numel()
    return views


def _ring_forward(q, k, v, is_causal, scale, layout, ring: _P2PRing, kernels: Kernels):
    plan = ring_schedule(ring.rank, ring.world, q.shape[2], layout=layout, is_causal=is_causal)
    merge = Merge(q, v.shape[-1])
    kv = _pack(k, v)
    for i, step in enumerate(plan):
        pending = ring.start(kv, _KV_TAG) if i + 1 < ring.world else None
        if step is not None:
            forward_step(kernels, q, *_unpack(kv, k, v), step, scale, merge)
        if pending is not None:
            kv = ring.finish(pending)
    return merge.out.to(q.dtype), merge.lse


def _ring_backward(dout, q, k, v, out, lse, is_causal, scale, layout, ring: _P2PRing, kernels: Kernels):
    """dQ accumulates here; the fp32 dK/dV of the block held at step i leave for the next rank after
    this rank's share is added, overlapping step i+1's kernel, and after W hops reach their owner."""
    import torch

    plan = ring_schedule(ring.rank, ring.world, q.shape[2], layout=layout, is_causal=is_causal)
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    kv = _pack(k, v)
    saved = (q, out, dout, lse)
    pending_dkv = None
    for i, step in enumerate(plan):
        pending_kv = ring.start(kv, _KV_TAG) if i + 1 < ring.world else None
        # The kernel is queued before waiting for the accumulator of the block it works on: the
        # previous step's dK/dV transfer runs beside this step's kernel, off the critical path.
        grads = backward_step(kernels, saved, *_unpack(kv, k, v), step, scale, dq) if step is not None else None
        dkv = (torch.zeros(kv.shape, dtype=torch.float32, device=q.device) if pending_dkv is None
               else ring.finish(pending_dkv))
        if grads is not None:
            add_kv_grads(step, *_unpack(dkv, k, v), *grads)
        pending_dkv = ring.start(dkv, _DKV_TAG) if ring.world > 1 else None
        if pending_kv is not None:
            kv = ring.finish(pending_kv)
    dkv = ring.finish(pending_dkv) if pending_dkv is not None else dkv
    dk, dv = _unpack(dkv, k, v)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


_fn = None


def _function():
    """The torch.autograd.Function (defined on first use: torch is an optional import)."""
    global _fn
    if _fn is not None:
        return _fn
    import torch
    from torch.autograd.function import once_differentiable

    class RingAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, is_causal, scale, layout, group):
            ring = _P2PRing(group, q.device)
            kernels = Kernels(q, deterministic=torch.are_deterministic_algorithms_enabled())
            out, lse = _ring_forward(q, k, v, is_causal, scale, layout, ring, kernels)
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.args = (is_causal, scale, layout, ring, kernels)
            return out

        @staticmethod
        @once_differentiable
        def backward(ctx, dout):
            q, k, v, out, lse = ctx.saved_tensors
            dq, dk, dv = _ring_backward(dout.contiguous(), q, k, v, out, lse, *ctx.args)
            return dq, dk, dv, None, None, None, None

    _fn = RingAttention
    return _fn


def ring_attention(q, k, v, *, is_causal: bool = False, scale: Optional[float] = None, enable_gqa: bool = False,
                   group=None, layout: str = "zigzag"):
    """This rank's shard of scaled_dot_product_attention(q, k, v) over the whole sequence.

    q (B, Hq, n, d), k (B, Hkv, n, d), v (B, Hkv, n, dv): this rank's n tokens of the sequence
    (N = n·W over the W ranks of `group`, default the world), sharded by `layout` ("zigzag" or
    "contiguous", as shard_sequence does). Returns (B, Hq, n, dv) in q's dtype, differentiable in q,
    k and v. is_causal, scale and enable_gqa mean what they mean in torch's SDPA over the full
    sequence (causal top-left: token i sees tokens j <= i of the whole sequence).

    Every rank of the group must call it with shards of the same shape (ValueError on every rank
    otherwise: uneven shards, a zigzag shard of odd length, a different is_causal or layout).
    CUDA: float16/bfloat16 on the hopper/mma kernels (head dim 64 or 128; float32 and other head
    dims on the slower kernels cuda.py picks, and their backward materialises each step's score
    block: keep shards short there), an NCCL group. CPU: float32 on the C kernel (its backward is
    torch math, one step's score block at a time), a gloo group.
    """
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("ring_attention needs torch.distributed initialised: call "
                           "torch.distributed.init_process_group('nccl' or 'gloo') first (torchrun sets "
                           "the rank and world size)")
    world = dist.get_world_size(group)
    _agree(q, k, v, is_causal, scale, enable_gqa, layout, group, world)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    return _function().apply(q, k, v, is_causal, float(scale), layout, group)
