"""Dropout inside the fused CUDA kernels (`hopper`, `mma`; forward and backward), torch's `dropout_p`.

    out = sy.attention.scaled_dot_product_attention(q, k, v, None, 0.1, True)   # CUDA, fp16/bf16

O = dropout(softmax(S)) V with torch's meaning: each probability is kept or zeroed, kept ones scaled by
1 / (1 - p); the log-sum-exp is the undropped softmax's. The keep-mask is never stored: every score's
bit is a pure function of (seed, offset, b, h, i, j) (Philox4x32-7, cuda_src/attention_dropout.cuh),
so the backward regenerates it. seed and offset come from torch's CUDA generator the way torch's own
fused kernels take them (at::cuda::philox: the generator's seed, and its offset advanced by what the
call uses, 4 * B * Hq), so consecutive calls draw different masks and torch.manual_seed replays a run.

One deliberate difference from torch's math backend, shared with torch's flash backend
(FlashAttention-2): a score is kept iff one random byte is below 256 - round(256 p), so the drop
probability is p rounded to a multiple of 1/256 (p = 0.1 drops 26/256 = 0.1016); the scale stays
1 / (1 - p), as torch's. `effective_dropout_p(p)` gives the probability the kernels use.

Served: CUDA, float16/bfloat16, head dims 64 and 128, any Nq, Nk, GQA, torch's causal (top-left or
bottom-right: causal_offset), a sliding window (`window=(left, right)`, any causal_offset, rows that see
no key included) or an attn_mask (bool or additive, any broadcast, tile by tile as without dropout:
mask_tiles.py) or both, sm_80+ (`mma`) and sm_90 (`hopper`), forward and backward (a mask with a band,
or a mask at d = 64, after a hopper forward: the mma backward). Neither a band nor a mask changes which
scores are kept: the keep bit of (b, h, i, j) is the same with or without them (they only decide which
scores exist). Not served, each with its reason (`dropout_reason`): an attn_mask in deterministic mode
(no kernel orders a masked dQ) or one the fused kernels leave to `naive` (far rows, a tiny scale),
varlen, other dtypes and head dims, CUDA graph capture (the offset would be frozen into the graph);
sy.attention.scaled_dot_product_attention and patch() run torch's own SDPA for those.
"""
# no `from __future__ import annotations`: torch.library reads the custom ops' annotations as types
import math
from typing import Optional, Tuple

from .band import NO_WINDOW, band_mask

HEAD_DIMS = (64, 128)
_UINT64 = 1 << 64


def effective_dropout_p(dropout_p: float) -> float:
    """The drop probability the kernels use for dropout_p in (0, 1): round(256 p) / 256, at least 1/256.
    Computed in float32 as the kernels do (attention_dropout.cuh, dropout_threshold)."""
    import numpy as np

    dropped = min(max(int(np.float32(dropout_p) * np.float32(256.0) + np.float32(0.5)), 1), 256)
    return dropped / 256.0


def dropout_reason(q, k, v, attn_mask, dropout_p: float, kernel: str, window=NO_WINDOW,
                   causal_offset: int = 0, deterministic: bool = False) -> Optional[str]:
    """Why the fused dropout cannot take this call (None: it can). Reads shapes and dtypes only (a mask the
    fused kernels leave to `naive` is found by cuda._check_inputs, whose kernel is then passed here). Every
    band (causal_offset, window) is served, with or without a mask: the kernels are instantiated with each
    band mode, and the mask's tiles carry the band (classes in the lists, a test in partial tiles)."""
    import torch

    if dropout_p >= 1.0:
        return "dropout_p=1 (torch's answer: every probability dropped)"
    if q.device.type != "cuda":
        return "dropout_p > 0 on the CPU (the C kernel has no dropout)"
    if attn_mask is not None and deterministic:
        return "dropout_p > 0 with an attn_mask in deterministic mode (no kernel orders a masked dQ)"
    if q.dtype not in (torch.float16, torch.bfloat16):
        return f"dropout_p > 0 in {q.dtype} (the fused dropout is float16/bfloat16)"
    if q.shape[-1] not in HEAD_DIMS:
        return f"dropout_p > 0 at head dim {q.shape[-1]} (the fused dropout takes {HEAD_DIMS})"
    if kernel not in ("auto", "mma", "hopper"):
        if attn_mask is not None and kernel == "naive":
            return ("dropout_p > 0 with an attn_mask the fused kernels leave to kernel='naive' (far rows or a "
                    "tiny scale)")
        return f"dropout_p > 0 on kernel={kernel!r} (mma and hopper have dropout)"
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        return "dropout_p > 0 under CUDA graph capture (the generator offset would be frozen)"
    return None


def philox_seed_offset(device, increment: int) -> Tuple[int, int]:
    """(seed, offset) from torch's default CUDA generator of `device`, its offset advanced by `increment`
    (a multiple of 4), as at::cuda::philox's philox_cuda_state does for torch's own kernels."""
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    gen = torch.cuda.default_generators[index]
    seed, offset = gen.initial_seed(), gen.get_offset()
    gen.set_offset(offset + increment)
    return seed, offset


def _signed(x: int) -> int:
    """A uint64 as the int64 a torch op's int argument holds (and back in _unsigned)."""
    x %= _UINT64
    return x - _UINT64 if x >= _UINT64 // 2 else x


def _unsigned(x: int) -> int:
    return x % _UINT64


_op = None


def _dropout_op():
    """torch.ops.sympathy.attention_dropout_fwd with its backward, defined on first use."""
    global _op
    if _op is not None:
        return _op
    import torch

    from . import cuda

    @torch.library.custom_op("sympathy::attention_dropout_fwd", mutates_args=())
    def attention_dropout_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: Optional[torch.Tensor],
                              is_causal: bool, scale: float, kernel: str, deterministic: bool, causal_offset: int,
                              window_left: int, window_right: int, dropout_p: float, seed: int,
                              offset: int) -> Tuple[torch.Tensor, torch.Tensor]:
        return cuda._launch(q, k, v, attn_mask, is_causal, scale, kernel, causal_offset=causal_offset,
                            window=(window_left, window_right), dropout=(dropout_p, _unsigned(seed), _unsigned(offset)))

    @attention_dropout_fwd.register_fake
    def _(q, k, v, attn_mask, is_causal, scale, kernel, deterministic, causal_offset, window_left, window_right,
          dropout_p, seed, offset):
        B, Hq, Nq, d = q.shape
        return q.new_empty((B, Hq, Nq, d)), q.new_empty((B, Hq, Nq), dtype=torch.float32)

    @torch.library.custom_op("sympathy::attention_dropout_bwd", mutates_args=())
    def attention_dropout_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                              out: torch.Tensor, lse: torch.Tensor, attn_mask: Optional[torch.Tensor], is_causal: bool,
                              scale: float, deterministic: bool, kernel: str, causal_offset: int, window_left: int,
                              window_right: int, dropout_p: float, seed: int,
                              offset: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return cuda._launch_bwd(dout, q, k, v, out, lse, attn_mask, is_causal, scale, deterministic, kernel,
                                causal_offset=causal_offset, window=(window_left, window_right),
                                dropout=(dropout_p, _unsigned(seed), _unsigned(offset)))

    @attention_dropout_bwd.register_fake
    def _(dout, q, k, v, out, lse, *args):
        return tuple(torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))

    def setup_context(ctx, inputs, output):
        q, k, v, attn_mask, *rest = inputs
        ctx.save_for_backward(q, k, v, attn_mask, *output)
        ctx.rest = rest
        ctx.mark_non_differentiable(output[1])

    def backward(ctx, grad_out, _grad_lse):
        q, k, v, attn_mask, out, lse = ctx.saved_tensors
        is_causal, scale, kernel, deterministic, *tail = ctx.rest
        dq, dk, dv = torch.ops.sympathy.attention_dropout_bwd(grad_out, q, k, v, out, lse, attn_mask, is_causal,
                                                              scale, deterministic, kernel, *tail)
        return (dq, dk, dv, None) + (None,) * len(ctx.rest)

    attention_dropout_fwd.register_autograd(backward, setup_context=setup_context)
    _op = attention_dropout_fwd
    return _op


def attention(q, k, v, dropout_p: float, is_causal: bool, scale: float, kernel: str, *,
              deterministic: bool = False, window=NO_WINDOW, causal_offset: int = 0,
              seed: Optional[int] = None, offset: Optional[int] = None, attn_mask=None):
    """(out, lse) with dropout on checked inputs (cuda._check_inputs resolved `kernel`; dropout_reason
    said yes). seed/offset None: drawn from torch's CUDA generator; given (tests): used as they are.
    attn_mask: as cuda._launch takes it (tile by tile); the keep bits are those of the unmasked call."""
    import torch

    from . import cuda, eager

    if seed is None or offset is None:
        seed, offset = philox_seed_offset(q.device, 4 * q.shape[0] * q.shape[1])
    if eager.untraced(torch, q, k, v, attn_mask):   # the op's bodies without its dispatch (eager.py)
        return cuda._run_eager(q, k, v, attn_mask, is_causal, float(scale), kernel, deterministic, tuple(window),
                               causal_offset, dropout=(float(dropout_p), _unsigned(seed), _unsigned(offset)))
    return _dropout_op()(q, k, v, attn_mask, is_causal, float(scale), kernel, deterministic, causal_offset, *window,
                         float(dropout_p), _signed(seed), _signed(offset))


def _dropout_mask(batch: int, heads: int, n_q: int, n_k: int, dropout_p: float, seed: int, offset: int, device):
    """Test-only: the (B, H, Nq, Nk) bool keep-mask the kernels apply for these values, made by the
    kernels' own Philox groups (cuda_src/attention_dropout.cu)."""
    import torch

    from . import cuda

    ffi, lib = cuda.library(cuda.device_arch(device))
    mask = torch.empty((batch, heads, n_q, n_k), dtype=torch.uint8, device=device)
    with torch.cuda.device(device):
        stream = torch.cuda.current_stream(device).cuda_stream
        status = lib.sy_attn_dropout_mask(ffi.cast("unsigned char *", mask.data_ptr()), batch, heads, n_q, n_k,
                                          dropout_p, _unsigned(seed), _unsigned(offset), ffi.cast("void *", stream))
    cuda._raise_for_status(status, lib, "dropout mask")
    return mask.bool()


def reference(q, k, v, keep, dropout_p: float, is_causal: bool = False, scale: Optional[float] = None,
              causal_offset: int = 0, attn_mask=None, window=NO_WINDOW):
    """float64 attention with the keep-mask `keep` (B, Hq, Nq, Nk) bool applied as torch's dropout does
    (kept / (1 - p)); GQA by repeating heads; the band (is_causal, causal_offset, window: band.band_mask) and
    attn_mask (bool: True takes part, or additive) as torch's SDPA (a row that sees no key gives 0, as the
    kernels). torch tensors in, float64 out, differentiable."""
    import torch

    q, k, v = (t.double() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if is_causal or tuple(window) != NO_WINDOW:
        s = s.masked_fill(~band_mask(*s.shape[-2:], is_causal, causal_offset, tuple(window), s.device), -math.inf)
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, -math.inf) if attn_mask.dtype == torch.bool else s + attn_mask.double()
    # A row that sees no key: P = 0 there, and no NaN through softmax's backward (an additive mask's -inf would
    # carry one into dQ, dK: masked_fill's backward is what stops it).
    empty = torch.isneginf(s).all(-1, keepdim=True)
    p = torch.softmax(s.masked_fill(empty, 0.0), -1).masked_fill(empty, 0.0)
    return (p * keep.to(p.dtype) / (1.0 - dropout_p)) @ v
