"""The pieces of ring attention that do not talk to other processes: how a sequence is sharded, which
block of work each ring step does, the kernels that do it (with their log-sum-exp), the exact merge of
partial outputs, and a one-process driver that runs the W ranks' steps one after another.

    x_r = shard_sequence(x, world_size, rank, layout="zigzag")     # this rank's tokens (dim 2 of (B, H, N, d))
    x = unshard_sequence([x_0, ..., x_{W-1}], layout="zigzag")     # and back
    pos = shard_positions(N, world_size, rank, layout="zigzag")    # the token positions a rank holds (RoPE ids)
    out = simulate_ring(q, k, v, world_size, is_causal=True)       # the ring's arithmetic in one process

Layouts. "contiguous": rank r holds tokens [r·N/W, (r+1)·N/W). "zigzag": the sequence is cut into 2W
chunks and rank r holds chunks r and 2W-1-r, so under a causal mask every rank does the same work at
every step (with contiguous blocks rank 0 would idle while rank W-1 sees every key).

The merge. A block of keys gives each query row a partial output o_b and the log-sum-exp l_b of its
scores; two partials combine exactly as l = log(e^l1 + e^l2), o = o1·e^(l1-l) + o2·e^(l2-l). It runs
in fp32 whatever the inputs are: the bf16 partials would otherwise lose a bit per step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

LAYOUTS = ("zigzag", "contiguous")


# ---- layouts -------------------------------------------------------------------------------------------
def _check_layout(layout) -> str:
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}; got {layout!r}")
    return layout


def _check_world(world_size, rank=None) -> None:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1; got {world_size!r}")
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size):
        raise ValueError(f"rank must be an int in [0, {world_size}); got {rank!r}")


def chunks_per_rank(layout: str) -> int:
    """How many equal chunks of the sequence each rank holds: 2 for zigzag, 1 for contiguous."""
    return 2 if _check_layout(layout) == "zigzag" else 1


def check_sequence_length(seq_len: int, world_size: int, layout: str, what: str = "the sequence") -> int:
    """The length of one rank's shard; ValueError unless the sequence splits evenly."""
    parts = world_size * chunks_per_rank(layout)
    if seq_len % parts:
        raise ValueError(f"{what} has {seq_len} tokens, which do not split evenly into {parts} chunks "
                         f"(world_size {world_size} x {chunks_per_rank(layout)} for layout={layout!r}); "
                         f"pad it to a multiple of {parts}")
    return seq_len // world_size


def shard_positions(seq_len: int, world_size: int, rank: int, *, layout: str = "zigzag"):
    """The positions (0..seq_len-1) of the tokens rank `rank` holds, in its order: a LongTensor."""
    import torch

    _check_world(world_size, rank)
    check_sequence_length(seq_len, world_size, layout)
    if layout == "contiguous":
        per = seq_len // world_size
        return torch.arange(rank * per, (rank + 1) * per)
    c = seq_len // (2 * world_size)
    return torch.cat([torch.arange(rank * c, (rank + 1) * c),
                      torch.arange((2 * world_size - 1 - rank) * c, (2 * world_size - rank) * c)])


def shard_sequence(x, world_size: int, rank: int, *, layout: str = "zigzag", dim: int = 2):
    """Rank `rank`'s shard of the full sequence x along `dim` (2 for (B, H, N, d)).

    contiguous: a view; zigzag: a new tensor (its two chunks joined). ValueError unless the length
    splits into world_size (contiguous) or 2 x world_size (zigzag) equal chunks."""
    import torch

    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor; got {type(x).__name__}")
    _check_world(world_size, rank)
    _check_layout(layout)
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim must be in [{-x.dim()}, {x.dim()}) for a {x.dim()}-D tensor; got {dim}")
    n = x.shape[dim]
    per = check_sequence_length(n, world_size, layout, f"x's dim {dim}")
    if layout == "contiguous":
        return x.narrow(dim, rank * per, per)
    c = per // 2
    return torch.cat([x.narrow(dim, rank * c, c), x.narrow(dim, (2 * world_size - 1 - rank) * c, c)], dim=dim)


def unshard_sequence(shards: Sequence, *, layout: str = "zigzag", dim: int = 2):
    """The full sequence from every rank's shard, in rank order (the inverse of shard_sequence)."""
    import torch

    _check_layout(layout)
    shards = list(shards)
    if not shards or not all(isinstance(s, torch.Tensor) for s in shards):
        raise TypeError("shards must be a non-empty sequence of torch.Tensors, one per rank in rank order")
    lengths = {s.shape[dim] for s in shards}
    if len(lengths) != 1:
        raise ValueError(f"every shard must hold the same number of tokens along dim {dim}; got "
                         f"{[s.shape[dim] for s in shards]}")
    if layout == "contiguous":
        return torch.cat(shards, dim=dim)
    n = lengths.pop()
    if n % 2:
        raise ValueError(f"a zigzag shard holds two equal chunks; got {n} tokens along dim {dim}")
    W = len(shards)
    chunks = [None] * (2 * W)
    for r, s in enumerate(shards):
        chunks[r], chunks[2 * W - 1 - r] = s.split(n // 2, dim=dim)
    return torch.cat(chunks, dim=dim)


# ---- the schedule ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    """One ring step of one rank: attend q[q_rows] to the K/V block of rank `source`, rows kv_rows."""
    source: int
    q_rows: slice
    kv_rows: slice
    causal: bool

    def pairs(self, n: int) -> int:
        """(query, key) pairs this step computes for shards of n tokens (its share of the FLOPs)."""
        nq = len(range(n)[self.q_rows])
        nk = len(range(n)[self.kv_rows])
        return nq * (nq + 1) // 2 if self.causal else nq * nk


def ring_schedule(rank: int, world_size: int, n_local: int, *, layout: str, is_causal: bool) -> List[Optional[Step]]:
    """Rank `rank`'s W steps: at step i it holds the K/V block of rank (rank - i) mod W; None where the
    block has nothing this rank's queries may see (contiguous causal, a later block).

    Zigzag causal, with m = n_local / 2 (rank r holds chunks r and 2W-1-r):
      step 0: its own block, causal (local order is global order within the shard);
      source s < r: chunk s precedes both of r's chunks, chunk 2W-1-s follows both: all queries
                    against the block's first half, no mask;
      source s > r: chunk s follows r's first chunk and precedes its second, chunk 2W-1-s precedes
                    its second: the second half of the queries against the whole block, no mask.
    Either way a step is m x 2m pairs: every rank does the same work at every step."""
    _check_world(world_size, rank)
    _check_layout(layout)
    every = slice(0, n_local)
    steps: List[Optional[Step]] = []
    for i in range(world_size):
        src = (rank - i) % world_size
        if not is_causal:
            steps.append(Step(src, every, every, False))
        elif i == 0:
            steps.append(Step(src, every, every, True))
        elif layout == "contiguous":
            steps.append(Step(src, every, every, False) if src < rank else None)
        elif src < rank:
            steps.append(Step(src, every, slice(0, n_local // 2), False))
        else:
            steps.append(Step(src, slice(n_local // 2, n_local), every, False))
    return steps


# ---- the kernels, with their log-sum-exp -----------------------------------------------------------------
class Kernels:
    """forward(q, k, v, causal, scale) -> (out, lse fp32) and backward(dout, q, k, v, out, lse, causal,
    scale) -> (dq, dk, dv) on sympathy's kernels: on CUDA the kernels of cuda.py (the `hopper` forward
    and backward on sm_90, `mma` elsewhere); on the CPU the C kernel (c_src/attention.c, float32) and
    the backward formula of cuda._math_backward in torch ops."""

    def __init__(self, q, *, deterministic: bool = False):
        from . import cuda

        self.cuda = q.device.type == "cuda"
        self.deterministic = deterministic
        if self.cuda:
            self.kernel = cuda._resolve_kernel(q, None, "auto")
        else:
            import torch

            if q.dtype != torch.float32:
                raise TypeError(f"CPU tensors run the C kernel, which is float32; got {q.dtype} "
                                "(convert with .float())")
            self.kernel = "cpu"

    def forward(self, q, k, v, causal: bool, scale: float):
        import torch

        from . import cuda

        if self.cuda:
            return cuda._launch(q, k, v, None, causal, scale, self.kernel)
        from .cpu import cpu

        out, lse = cpu(*(t.detach().numpy() for t in (q, k, v)), None, 0.0, causal, scale=scale,
                       enable_gqa=q.shape[1] != k.shape[1], threads=torch.get_num_threads(), return_lse=True)
        return torch.from_numpy(out), torch.from_numpy(lse)

    def backward(self, dout, q, k, v, out, lse, causal: bool, scale: float):
        from . import cuda

        if self.cuda:
            return cuda._launch_bwd(dout, q, k, v, out, lse, None, causal, scale, self.deterministic, self.kernel)
        return cuda._math_backward(dout, q, k, v, out, lse, None, causal, scale)


# ---- the merge and the per-step work ---------------------------------------------------------------------
class Merge:
    """This rank's output and log-sum-exp so far, fp32, merged block by block."""

    def __init__(self, q, value_dim: int):
        import torch

        B, H, n = q.shape[:3]
        self.out = torch.zeros((B, H, n, value_dim), dtype=torch.float32, device=q.device)
        self.lse = torch.full((B, H, n), -math.inf, dtype=torch.float32, device=q.device)
        self.empty = True

    def add(self, out, lse, rows: slice) -> None:
        import torch

        if self.empty and rows == slice(0, self.lse.shape[-1]):   # the first block: nothing to merge with
            self.out.copy_(out)
            self.lse.copy_(lse)
            self.empty = False
            return
        acc_o, acc_l = self.out[:, :, rows], self.lse[:, :, rows]
        new = torch.logaddexp(acc_l, lse)
        # A row no block has reached yet has acc_l = -inf: its weight exp(-inf) is 0, as it must be.
        acc_o.mul_(torch.exp(acc_l - new).unsqueeze(-1)).add_(out.float() * torch.exp(lse - new).unsqueeze(-1))
        acc_l.copy_(new)
        self.empty = False


def forward_step(kernels: Kernels, q, k, v, step: Step, scale: float, merge: Merge) -> None:
    out, lse = kernels.forward(q[:, :, step.q_rows], k[:, :, step.kv_rows], v[:, :, step.kv_rows],
                               step.causal, scale)
    merge.add(out, lse, step.q_rows)


def backward_step(kernels: Kernels, saved, k, v, step: Step, scale: float, dq):
    """One step's gradients: dq added into this rank's fp32 dq, (dk, dv) of the block's rows
    returned, for the accumulators that travel with the K/V block (add_kv_grads). saved = (q, out,
    dout, lse) of this rank, out and lse the merged ones: each block's backward needs the final
    softmax statistics, not its own."""
    q, out, dout, lse = saved
    r = step.q_rows
    gq, gk, gv = kernels.backward(dout[:, :, r], q[:, :, r], k[:, :, step.kv_rows], v[:, :, step.kv_rows],
                                  out[:, :, r], lse[:, :, r], step.causal, scale)
    dq[:, :, r] += gq
    return gk, gv


def add_kv_grads(step: Step, dk, dv, gk, gv) -> None:
    dk[:, :, step.kv_rows] += gk
    dv[:, :, step.kv_rows] += gv


# ---- one process, W virtual ranks --------------------------------------------------------------------------
def simulate_ring(q, k, v, world_size: int, *, is_causal: bool = False, scale: Optional[float] = None,
                  enable_gqa: bool = False, layout: str = "zigzag", dout=None,
                  timer: Optional[Callable] = None, kernels: Optional[Kernels] = None):
    """The ring's arithmetic for `world_size` virtual ranks in this process: shard the full q, k, v,
    run every rank's steps (the same step functions and merge as ring_attention), unshard.

    Returns out, or (out, dq, dk, dv) when dout is given (the backward's dK/dV accumulate in the
    order they would around the ring). timer, if given, wraps each step: timer(kind, rank, step_index,
    fn) must call fn() and return its result; kernels replaces the Kernels(q) the steps run on (the
    GPU check passes one that times each kernel call)."""
    import torch

    _check_world(world_size)
    _check_layout(layout)
    if q.shape[1] != k.shape[1] and not enable_gqa:
        raise ValueError(f"q has {q.shape[1]} heads and k {k.shape[1]}: pass enable_gqa=True")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    N = q.shape[2]
    n = check_sequence_length(N, world_size, layout, "q")
    kernels = kernels or Kernels(q)
    timer = timer or (lambda kind, rank, i, fn: fn())
    shard = [lambda x, r=r: shard_sequence(x, world_size, r, layout=layout) for r in range(world_size)]
    qs, ks, vs = ([shard[r](x) for r in range(world_size)] for x in (q, k, v))
    plans = [ring_schedule(r, world_size, n, layout=layout, is_causal=is_causal) for r in range(world_size)]
    merges = [Merge(qs[r], v.shape[-1]) for r in range(world_size)]
    for i in range(world_size):
        for r, plan in enumerate(plans):
            step = plan[i]
            if step is not None:
                timer("forward", r, i, lambda: forward_step(kernels, qs[r], ks[step.source], vs[step.source],
                                                           step, scale, merges[r]))
    outs = [m.out.to(q.dtype) for m in merges]
    out = unshard_sequence(outs, layout=layout)
    if dout is None:
        return out
    douts = [shard[r](dout) for r in range(world_size)]
    f32 = dict(dtype=torch.float32, device=q.device)
    dqs = [torch.zeros(x.shape, **f32) for x in qs]
    dks = [torch.zeros(x.shape, **f32) for x in ks]
    dvs = [torch.zeros(x.shape, **f32) for x in vs]
    for i in range(world_size):
        for r, plan in enumerate(plans):
            step = plan[i]
            if step is not None:
                saved = (qs[r], outs[r], douts[r], merges[r].lse)
                gk, gv = timer("backward", r, i, lambda: backward_step(kernels, saved, ks[step.source],
                                                                      vs[step.source], step, scale, dqs[r]))
                add_kv_grads(step, dks[step.source], dvs[step.source], gk, gv)
    grads = [unshard_sequence([g.to(x.dtype) for g in gs], layout=layout) for gs, x in ((dqs, q), (dks, k), (dvs, v))]
    return (out, *grads)
