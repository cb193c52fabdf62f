"""Packed variable-length batches: flash_attn_varlen_func's interface on sympathy's kernels.

    out = sy.attention.varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                        causal=True)          # q (total_q, Hq, d), k, v (total_k, Hkv, d)

Sequence b is rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 of q (and of the output) and rows
cu_seqlens_k[b] .. of k and v: no padding is stored or computed. On an sm_90 GPU one `hopper` launch
takes the whole batch: its persistent tile scheduler walks (sequence, query block, head) tiles, the
producer skips the blocks past a sequence's end, and each tile reads its sequence's offsets
(cuda_src/attention_hopper.cu, kVarlenFlag). Elsewhere (`mma`) each sequence is one launch.
`causal` and `window_size` are flash-attn's: aligned to each sequence's bottom right (row i of a
sequence sees keys up to i + len_k - len_q), -1 an open side; a row that sees no key gives 0.

Differentiable in q, k, v: on sm_90 the backward is one packed `hopper` backward launch
(cuda_src/attention_hopper_bwd.cu, kVarlenFlag: key blocks past a sequence's keys leave at once); with
`mma` the band backward runs once per sequence on views of the packed tensors.
dropout_p must be 0 (the kernels have no dropout yet).
"""
import math
from typing import Optional

from .._errors import NotSupportedError
from . import cuda
from .band import check_window


def _check(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
           window_size, kernel):
    """Everything checked before a kernel runs; returns (window, scale, kernel, lengths_q, lengths_k)."""
    torch = cuda._torch()
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3:
            raise ValueError(f"{name} must be a 3-dim torch.Tensor (total_tokens, heads, head_dim); got "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
        if t.dtype not in (torch.float16, torch.bfloat16):
            raise TypeError(f"{name} must be float16 or bfloat16; got {t.dtype}")
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must be contiguous in its last dim; got stride {t.stride(-1)}")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k and v must share one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    d = q.shape[-1]
    if d not in cuda.MMA_HEAD_DIMS or k.shape[-1] != d or v.shape[-1] != d:
        raise ValueError(f"head_dim must be one of {cuda.MMA_HEAD_DIMS} for q, k and v; got {d}, {k.shape[-1]}, "
                         f"{v.shape[-1]}")
    if k.shape[:2] != v.shape[:2] or q.shape[1] % k.shape[1] != 0:
        raise ValueError(f"k and v must be (total_k, Hkv, d) with Hq ({q.shape[1]}) a multiple of Hkv; got "
                         f"{tuple(k.shape)} and {tuple(v.shape)}")
    if dropout_p != 0:
        raise NotImplementedError(f"dropout_p={dropout_p}: the kernels have no dropout yet")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool; got {type(causal).__name__}")
    window = check_window(tuple(window_size) if isinstance(window_size, list) else window_size)
    if softmax_scale is not None and not (isinstance(softmax_scale, (int, float)) and math.isfinite(softmax_scale)):
        raise ValueError(f"softmax_scale must be a finite number or None; got {softmax_scale!r}")
    if kernel not in ("auto", "hopper", "mma"):
        raise ValueError(f"kernel must be 'auto', 'hopper' or 'mma'; got {kernel!r}")
    lengths = []
    for name, cu, total, max_len in (("cu_seqlens_q", cu_seqlens_q, q.shape[0], max_seqlen_q),
                                     ("cu_seqlens_k", cu_seqlens_k, k.shape[0], max_seqlen_k)):
        if not isinstance(cu, torch.Tensor) or cu.dtype != torch.int32 or cu.dim() != 1 or cu.numel() < 2:
            raise TypeError(f"{name} must be a 1-dim int32 tensor of batch + 1 offsets; got "
                            f"{cu.dtype if isinstance(cu, torch.Tensor) else type(cu).__name__}")
        offsets = cu.tolist()
        if offsets[0] != 0 or offsets[-1] != total or any(b < a for a, b in zip(offsets, offsets[1:])):
            raise ValueError(f"{name} must rise from 0 to the {total} rows of its tensor without falling; "
                             f"got {offsets[:8]}{'...' if len(offsets) > 8 else ''}")
        longest = max(b - a for a, b in zip(offsets, offsets[1:]))
        if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < longest:
            raise ValueError(f"max_seqlen for {name} must be an int >= the longest sequence ({longest}); got {max_len!r}")
        lengths.append([b - a for a, b in zip(offsets, offsets[1:])])
    if cu_seqlens_q.numel() != cu_seqlens_k.numel():
        raise ValueError(f"cu_seqlens_q and cu_seqlens_k must have the same length (batch + 1); got "
                         f"{cu_seqlens_q.numel()} and {cu_seqlens_k.numel()}")
    for name, t in (("q", q), ("k", k), ("v", v), ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if t.device.type != "cuda" or t.device != q.device:
            raise ValueError(f"{name} must be on q's CUDA device; got {t.device}")
    if kernel == "auto":
        kernel = "hopper" if cuda._on_hopper(q) else "mma"
    if kernel == "hopper" and not cuda._on_hopper(q):
        raise NotSupportedError("kernel='hopper' needs an sm_90 GPU (H100/H200)")
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    return window, scale, kernel, lengths[0], lengths[1]


def _sequence_view(t, start, end):
    """Rows start..end-1 of a packed (total, H, d) tensor as a (1, H, n, d) view (no copy)."""
    return t[start:end].transpose(0, 1).unsqueeze(0)


def _forward(q, k, v, cu_q, cu_k, max_seqlen_q, causal, window, scale, kernel, lens_q, lens_k, out=None, lse=None):
    """(out (total_q, Hq, d), lse (Hq, total_q) fp32)."""
    torch = cuda._torch()
    total_q, Hq, d = q.shape
    out = torch.empty_like(q, memory_format=torch.contiguous_format) if out is None else out
    lse = torch.empty((Hq, total_q), dtype=torch.float32, device=q.device) if lse is None else lse
    if kernel == "mma":   # one launch per sequence, on views
        start_q = start_k = 0
        for n_q, n_k in zip(lens_q, lens_k):
            if n_q and n_k:
                views = [_sequence_view(t, start_q, start_q + n_q) for t in (q,)] + \
                        [_sequence_view(t, start_k, start_k + n_k) for t in (k, v)]
                o, l = cuda._launch(*views, None, causal, scale, "mma", causal_offset=n_k - n_q, window=window)
                out[start_q:start_q + n_q] = o[0].transpose(0, 1)
                lse[:, start_q:start_q + n_q] = l[0]
            elif n_q:
                out[start_q:start_q + n_q] = 0
                lse[:, start_q:start_q + n_q] = -math.inf
            start_q, start_k = start_q + n_q, start_k + n_k
        return out, lse
    q_k, scale_k, _ = cuda._kernel_q_and_scale(q, scale)
    ffi, lib = cuda.library(cuda.device_arch(q.device))
    p = ffi.new("sy_attn_params *")
    p.q, p.k, p.v = (ffi.cast("void *", t.data_ptr()) for t in (q_k, k, v))
    p.o = ffi.cast("void *", out.data_ptr())
    p.lse = ffi.cast("float *", lse.data_ptr())
    for field, t in (("q_strides", q_k), ("k_strides", k), ("v_strides", v), ("o_strides", out)):
        getattr(p, field)[0:3] = [0, t.stride(1), t.stride(0)]   # (unused batch, head, row)
    tile_counter = torch.empty(1, dtype=torch.int32, device=q.device)
    p.tile_counter = ffi.cast("int *", tile_counter.data_ptr())
    p.cu_seqlens_q = ffi.cast("int *", cu_q.data_ptr())
    p.cu_seqlens_k = ffi.cast("int *", cu_k.data_ptr())
    p.max_seqlen_q = max_seqlen_q
    p.batch, p.heads_q, p.heads_kv = len(lens_q), Hq, k.shape[1]
    p.seqlen_q, p.seqlen_k, p.head_dim = total_q, k.shape[0], d
    p.scale, p.is_causal = scale_k, int(causal)
    cuda._set_band(p, 0, window)
    p.dtype = cuda._DTYPE_CODES[str(q.dtype).replace("torch.", "")]
    with torch.cuda.device(q.device):
        status = lib.sy_attn_hopper_fwd(p, ffi.cast("void *", torch.cuda.current_stream(q.device).cuda_stream))
    cuda._raise_for_status(status, lib, f"varlen attention (batch {len(lens_q)}, Hq={Hq}, total_q={total_q}, d={d})")
    return out, lse


def _backward_packed(dout, q, k, v, out, lse, cu_q, cu_k, max_seqlen_q, max_seqlen_k, causal, window, scale,
                     lens_q):
    """(dq, dk, dv) by one hopper backward launch over the packed batch (workspaces: attention_api.h)."""
    torch = cuda._torch()
    total_q, Hq, d = q.shape
    total_k, Hkv = k.shape[:2]
    q_k, scale_k, dq_sign = cuda._kernel_q_and_scale(q, scale)
    ffi, lib = cuda.library(cuda.device_arch(q.device))
    grads = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v)]
    f32 = dict(dtype=torch.float32, device=q.device)
    rows = -(-max_seqlen_q // lib.SY_ATTN_BWD_ROW_ALIGN) * lib.SY_ATTN_BWD_ROW_ALIGN
    delta, lse_log2 = torch.empty((len(lens_q), Hq, rows), **f32), torch.empty((len(lens_q), Hq, rows), **f32)
    dq_accum = torch.empty((Hq, total_q, d), **f32)
    dk_accum, dv_accum = (None, None) if Hq == Hkv else (torch.empty((Hq, total_k, d), **f32) for _ in range(2))
    p = ffi.new("sy_attn_bwd_params *")
    for field, t in (("q", q_k), ("k", k), ("v", v), ("o", out), ("dout", dout),
                     ("dq", grads[0]), ("dk", grads[1]), ("dv", grads[2])):
        setattr(p, field, ffi.cast("void *", t.data_ptr()))
        getattr(p, f"{field}_strides")[0:3] = [0, t.stride(1), t.stride(0)]   # (unused batch, head, row)
    p.lse = ffi.cast("float *", lse.data_ptr())
    for field, t in (("dq_accum", dq_accum), ("dk_accum", dk_accum), ("dv_accum", dv_accum), ("delta", delta),
                     ("lse_log2", lse_log2)):
        setattr(p, field, ffi.NULL if t is None else ffi.cast("float *", t.data_ptr()))
    p.cu_seqlens_q, p.cu_seqlens_k = ffi.cast("int *", cu_q.data_ptr()), ffi.cast("int *", cu_k.data_ptr())
    p.max_seqlen_q, p.max_seqlen_k = max_seqlen_q, max_seqlen_k
    p.batch, p.heads_q, p.heads_kv, p.seqlen_q, p.seqlen_k, p.head_dim = len(lens_q), Hq, Hkv, total_q, total_k, d
    p.scale, p.is_causal, p.deterministic = scale_k, int(causal), 0
    cuda._set_band(p, 0, window)
    p.dtype = cuda._DTYPE_CODES[str(q.dtype).replace("torch.", "")]
    with torch.cuda.device(q.device):
        status = lib.sy_attn_hopper_bwd(p, ffi.cast("void *", torch.cuda.current_stream(q.device).cuda_stream))
    cuda._raise_for_status(status, lib, f"varlen attention backward (batch {len(lens_q)}, Hq={Hq}, d={d})")
    if dq_sign < 0:
        grads[0].neg_()
    return grads


def _backward(dout, q, k, v, out, lse, causal, window, scale, kernel, lens_q, lens_k):
    """(dq, dk, dv): the band backward per sequence on views (zeros where a sequence has no queries or keys)."""
    torch = cuda._torch()
    grads = [torch.zeros_like(t) for t in (q, k, v)]
    start_q = start_k = 0
    for n_q, n_k in zip(lens_q, lens_k):
        if n_q and n_k:
            sq, sk = slice(start_q, start_q + n_q), slice(start_k, start_k + n_k)
            views = [_sequence_view(t, sq.start, sq.stop) for t in (dout, q)] + \
                    [_sequence_view(t, sk.start, sk.stop) for t in (k, v)] + [_sequence_view(out, sq.start, sq.stop)]
            dq, dk, dv = cuda._launch_bwd(views[0], views[1], views[2], views[3], views[4],
                                          lse[:, sq].unsqueeze(0).contiguous(), None, causal, scale, False, kernel,
                                          causal_offset=n_k - n_q, window=window)
            grads[0][sq] = dq[0].transpose(0, 1)
            grads[1][sk] = dk[0].transpose(0, 1)
            grads[2][sk] = dv[0].transpose(0, 1)
        start_q, start_k = start_q + n_q, start_k + n_k
    return grads


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int,
                     dropout_p: float = 0.0, softmax_scale: Optional[float] = None, causal: bool = False,
                     window_size=(-1, -1), *, kernel: str = "auto", return_lse: bool = False):
    """flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
    softmax_scale, causal, window_size) on sympathy's kernels: out (total_q, Hq, d), and with return_lse
    also the log-sum-exp (Hq, total_q) fp32 (flash-attn's softmax_lse layout). See the module docstring."""
    torch = cuda._torch()
    window, scale, kernel, lens_q, lens_k = _check(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                                   dropout_p, softmax_scale, causal, window_size, kernel)

    class VarlenAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            out, lse = _forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, causal, window, scale, kernel,
                                lens_q, lens_k)
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.mark_non_differentiable(lse)
            return out, lse

        @staticmethod
        def backward(ctx, dout, _dlse):
            q, k, v, out, lse = ctx.saved_tensors
            dout = dout.contiguous()
            if kernel == "hopper":
                return tuple(_backward_packed(dout, *(t.contiguous() for t in (q, k, v)), out, lse, cu_seqlens_q,
                                              cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, window, scale, lens_q))
            return tuple(_backward(dout, q, k, v, out, lse, causal, window, scale, kernel, lens_q, lens_k))

    out, lse = VarlenAttention.apply(q, k, v)
    return (out, lse) if return_lse else out
