"""One entry for every device, with torch's signature: `sy.attention.scaled_dot_product_attention`.

    out = sy.attention.scaled_dot_product_attention(q, k, v, None, 0.0, True)   # as torch's F.sdpa

torch's exact signature (query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *,
scale=None, enable_gqa=False): torch itself takes scale and enable_gqa by keyword only, so do we;
our own options (kernel, deterministic, threads) come after them. Where a call goes:

    CUDA tensors         the CUDA kernels (cuda.py): forward and backward
    CPU float32 tensors  the C kernel (c_src/attention.c) as the custom op sympathy::attention_cpu,
                         differentiable (the backward is cuda._math_backward's formula in torch ops)
    NumPy arrays         sy.attention.cpu
    dropout_p > 0        CUDA fp16/bf16 at d 64/128, with a band (window, causal_offset), an attn_mask the
                         kernels take tile by tile (not in deterministic mode), or both: the fused dropout
                         of the CUDA kernels (dropout.py); anything else torch's own SDPA
    an empty input       torch's own SDPA (torch's answer, exactly: zeros where no key exists)

attn_mask: a boolean mask that is left padding (key j takes part when j >= start[b]), alone or with
the causal triangle, as transformers builds for a padded batch, runs on our kernels one sequence at a
time on the unpadded part (padding.py). Any other mask on CUDA fp16/bf16 at d 64/128 runs tile by tile
on the `mma`/`hopper` kernels (mask_tiles.py: empty tiles skipped, full ones unmasked; path
"cuda+mask"), elsewhere on the CUDA `naive` kernel; the C kernel has none (NotImplementedError). `decide` is the routing itself, shared with patch() and the
transformers integration, which send what it refuses to torch's SDPA instead of raising.
"""
# no `from __future__ import annotations`: torch.library reads the custom op's annotations as types

import math
import sys
from dataclasses import dataclass
from typing import Callable, Optional

from .._errors import NotSupportedError
from . import cuda
from ._checks import MAX_HEAD_DIM, check_dropout
from .band import causal_bias_band, check_causal_offset, check_window, has_band
from .padding import split_left_padding

_original_sdpa = None


def torch_sdpa():
    """torch's own scaled_dot_product_attention, also while patch() has replaced it."""
    global _original_sdpa
    if _original_sdpa is None:
        import torch.nn.functional as F

        _original_sdpa = getattr(F.scaled_dot_product_attention, "__wrapped__", F.scaled_dot_product_attention)
    return _original_sdpa


# ---- the C kernel as a differentiable torch op -----------------------------------------------------------
_cpu_op = None


def _attention_cpu_op():
    """torch.ops.sympathy.attention_cpu (out, lse) with a fake impl (torch.compile) and a backward."""
    global _cpu_op
    if _cpu_op is not None:
        return _cpu_op
    import torch

    from .cpu import cpu

    @torch.library.custom_op("sympathy::attention_cpu", mutates_args=(), device_types="cpu")
    def attention_cpu(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool,
                      scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        arrays = (t.detach().numpy() for t in (q, k, v))   # views, no copy: strides go to the kernel
        out, lse = cpu(*arrays, None, 0.0, is_causal, scale=scale, enable_gqa=q.shape[1] != k.shape[1],
                       threads=torch.get_num_threads(), return_lse=True)
        return torch.from_numpy(out), torch.from_numpy(lse)

    @attention_cpu.register_fake
    def _(q, k, v, is_causal, scale):
        B, Hq, Nq = q.shape[:3]
        return q.new_empty((B, Hq, Nq, v.shape[-1])), q.new_empty((B, Hq, Nq))

    def setup_context(ctx, inputs, output):
        q, k, v, is_causal, scale = inputs
        out, lse = output
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.is_causal, ctx.scale = is_causal, scale
        ctx.mark_non_differentiable(lse)

    def backward(ctx, grad_out, _grad_lse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = cuda._math_backward(grad_out, q, k, v, out, lse, None, ctx.is_causal, ctx.scale)
        return dq, dk, dv, None, None

    attention_cpu.register_autograd(backward, setup_context=setup_context)
    _cpu_op = attention_cpu
    return _cpu_op


def _cpu_reason(q, k, v, attn_mask) -> Optional[str]:
    """Why the C kernel cannot take these CPU tensors (None: it can)."""
    import torch

    if q.dtype != torch.float32:
        return f"CPU dtype {q.dtype} (the C kernel is float32: convert with .float())"
    if max(q.shape[-1], v.shape[-1]) > MAX_HEAD_DIM:
        return f"head_dim {max(q.shape[-1], v.shape[-1])} > {MAX_HEAD_DIM} on the CPU"
    for name, t in (("query", q), ("key", k), ("value", v)):
        if t.shape[-1] > 1 and t.stride(-1) != 1:
            return f"{name} not contiguous in its last dim"
    if attn_mask is not None:
        return "attn_mask on the CPU other than left padding (the C kernel has no mask)"
    return None


def register_ops() -> None:
    """Define sympathy's torch ops (the C kernel's and the CUDA kernels') now. torch.compile cannot
    trace their definition, so this runs at import when torch is already loaded, on entering
    patch(), and on the first eager call. Without torch: NotSupportedError naming the extra."""
    cuda._torch()
    _attention_cpu_op()
    cuda._attention_op()


if sys.modules.get("torch") is not None:   # torch imported first (the usual case): the ops exist before any trace
    register_ops()


# ---- the routing --------------------------------------------------------------------------------------------
@dataclass
class Decision:
    """What a call runs on: `run()` gives the output when ours takes it, else `reason` says why not."""
    run: Optional[Callable] = None
    reason: Optional[str] = None
    path: str = "torch"          # "cpu", "cuda", "cpu+padding", "cuda+padding" or "torch"


def _structural_reason(query, key, value, dropout_p, is_causal, scale, enable_gqa) -> Optional[str]:
    """Reasons that hold on every device: what none of our kernels implements."""
    import torch

    if not all(isinstance(t, torch.Tensor) for t in (query, key, value)):
        return "query, key and value are not all torch tensors"
    if not isinstance(dropout_p, (int, float)) or isinstance(dropout_p, bool) or not 0 <= dropout_p <= 1:
        return f"dropout_p {dropout_p!r} (torch's own check)"
    if not isinstance(is_causal, bool):
        return f"is_causal of type {type(is_causal).__name__}"
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))
                              or not math.isfinite(scale)):
        return f"scale {scale!r}"
    if not (query.dim() == key.dim() == value.dim() == 4):
        return "inputs not 4-D (B, H, N, d)"
    if not (query.device == key.device == value.device) or query.device.type not in ("cpu", "cuda"):
        return f"devices {query.device}, {key.device}, {value.device}"
    if not (query.dtype == key.dtype == value.dtype):
        return "q, k and v of different dtypes"
    if query.numel() == 0 or key.numel() == 0 or value.numel() == 0:
        return "an empty input (torch's answer, exactly)"
    B, Hq, _, d = query.shape
    if key.shape[0] != B or value.shape[0] != B or key.shape[-1] != d or key.shape[1:3] != value.shape[1:3]:
        return "shapes that do not match (torch raises)"
    if Hq != key.shape[1] and not (enable_gqa and Hq % key.shape[1] == 0):
        return "heads that do not match (torch raises)"
    return None


def _decide_dropout(query, key, value, attn_mask, dropout_p, is_causal, scale, gqa, kernel, deterministic, window,
                    causal_offset) -> Decision:
    """dropout_p > 0: the fused dropout of dropout.py (CUDA, fp16/bf16, d 64/128, any band; an attn_mask
    tile by tile: path "cuda+mask+dropout"), else torch's SDPA with dropout.dropout_reason's reason."""
    import torch

    from . import dropout
    from .band import NO_WINDOW

    window = window or NO_WINDOW
    if deterministic is None:
        deterministic = torch.are_deterministic_algorithms_enabled()
    reason = dropout.dropout_reason(query, key, value, attn_mask, dropout_p, kernel, window, causal_offset,
                                    bool(deterministic))
    if reason:
        return Decision(reason=reason)
    band = has_band(causal_offset, window)
    try:
        picked = cuda._check_inputs(query, key, value, attn_mask, is_causal, scale, gqa, kernel, band,
                                    causal_offset=causal_offset, window=window)
    except (ValueError, TypeError, NotImplementedError, NotSupportedError) as exc:
        return Decision(reason=f"CUDA kernels: {exc}")
    # The kernel "auto" resolved to: a mask the fused kernels leave to naive has no dropout.
    reason = dropout.dropout_reason(query, key, value, attn_mask, dropout_p, picked, window, causal_offset,
                                    bool(deterministic))
    if reason:
        return Decision(reason=reason)
    return Decision(path="cuda+mask+dropout" if attn_mask is not None else "cuda+dropout", run=lambda: dropout.attention(
        query, key, value, dropout_p, is_causal, scale, picked, deterministic=bool(deterministic), window=window,
        causal_offset=causal_offset, attn_mask=attn_mask)[0])


def decide(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
           kernel: str = "auto", deterministic: Optional[bool] = None, threads: Optional[int] = None,
           mask_kernel: bool = True, window=None, causal_offset: int = 0) -> Decision:
    """Route one call. mask_kernel: let a general attn_mask run on the CUDA `naive` kernel (the direct
    call does; patch() and transformers send it to torch, whose masked kernels are faster). Masks the
    fast kernels take tile by tile (fp16/bf16, d 64/128: mask_tiles.py) run there either way.
    window, causal_offset: the band (band.py), checked by the caller; torch's CausalBias attn_mask
    becomes the band here."""
    reason = _structural_reason(query, key, value, dropout_p, is_causal, scale, enable_gqa)
    if reason:
        return Decision(reason=reason)
    import torch

    try:
        bias_offset = causal_bias_band(attn_mask, is_causal, query.shape[2], key.shape[2])
    except ValueError as exc:
        return Decision(reason=f"attn_mask: {exc}")
    if bias_offset is not None:   # causal_upper_left / causal_lower_right: the band, no mask
        if causal_offset:
            return Decision(reason="a CausalBias attn_mask and causal_offset together")
        attn_mask, is_causal, causal_offset = None, True, bias_offset
    band = has_band(causal_offset, window or (-1, -1))

    if not torch.compiler.is_compiling():
        register_ops()
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    gqa = query.shape[1] != key.shape[1]
    on_cuda = query.device.type == "cuda"
    if dropout_p > 0:
        return _decide_dropout(query, key, value, attn_mask, float(dropout_p), is_causal, scale, gqa, kernel,
                               deterministic, window, causal_offset)
    if attn_mask is not None and not band:
        split = split_left_padding(attn_mask, query, key, is_causal)
        if split is not None:
            def one(q, k, v, causal):
                return decide(q, k, v, None, 0.0, causal, scale, gqa, kernel=kernel, deterministic=deterministic,
                              threads=threads)
            inner = [one(q, k, v, causal) for q, k, v, causal in split.pieces(query, key, value)]
            bad = next((d.reason for d in inner if d.reason), None)
            if bad is None:
                return Decision(run=lambda: split.join([d.run() for d in inner], value),
                                path=("cuda" if on_cuda else "cpu") + "+padding")
            return Decision(reason=bad)
    if on_cuda:
        try:
            picked = cuda._check_inputs(query, key, value, attn_mask, is_causal, scale, gqa, kernel, band,
                                        causal_offset=causal_offset, window=window or (-1, -1))
        except (ValueError, TypeError, NotImplementedError, NotSupportedError) as exc:
            return Decision(reason=f"CUDA kernels: {exc}")
        if attn_mask is not None and picked == "naive" and not mask_kernel:
            return Decision(reason="attn_mask on the naive kernel (fp16/bf16 at d 64/128 take it tile by tile; "
                                   "torch's masked kernels are faster than our naive one)")
        path = "cuda+mask" if attn_mask is not None and picked != "naive" else "cuda"
        if deterministic is None:
            deterministic = torch.are_deterministic_algorithms_enabled()
        # Checked above: straight to the kernels (the public entry would check everything again).
        window, causal_offset = check_window(window), check_causal_offset(causal_offset)
        return Decision(path=path, run=lambda: cuda._run_checked(
            query, key, value, attn_mask, is_causal, float(scale), picked, bool(deterministic), window,
            causal_offset)[0])
    if kernel not in ("auto", "cpu"):
        return Decision(reason=f"kernel={kernel!r} on CPU tensors (the C kernel is 'cpu')")
    if band:
        return Decision(reason="a window, causal_offset or CausalBias on the CPU (the C kernel has no band)")
    reason = _cpu_reason(query, key, value, attn_mask)
    if reason:
        return Decision(reason=reason)
    return Decision(path="cpu", run=lambda: _attention_cpu_op()(query, key, value, is_causal, float(scale))[0])


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, *, scale: Optional[float] = None,
                                 enable_gqa: bool = False, kernel: str = "auto",
                                 deterministic: Optional[bool] = None, threads: Optional[int] = None,
                                 window=None, causal_offset: int = 0):
    """torch.nn.functional.scaled_dot_product_attention on sympathy's kernels, on any device.

    Same signature, defaults and meaning as torch's. CUDA tensors run the CUDA kernels (`kernel`:
    "auto", "naive", "tiled", "mma", "hopper"; `deterministic` as in cuda.py); CPU tensors the C
    kernel (float32 only, `kernel` "auto" or "cpu", `threads` default torch.get_num_threads());
    NumPy arrays sy.attention.cpu. Differentiable on both devices. dropout_p > 0 runs the fused dropout
    (dropout.py) where it serves, torch's own SDPA elsewhere; so do empty inputs. What our kernels cannot take raises (TypeError for a dtype, ValueError for
    bad shapes, NotImplementedError for a feature) before any kernel runs; sy.attention.patch() is
    the mode that falls back to torch instead.

    window=(left, right) and causal_offset (keyword-only, ours): the band of band.py, sliding-window
    attention and causal at any alignment, on the CUDA kernels (cuda.scaled_dot_product_attention says
    how); attn_mask=torch's causal_lower_right(Nq, Nk) / causal_upper_left runs as that band.
    """
    import numpy as np

    if deterministic is not None and not isinstance(deterministic, bool):
        raise TypeError(f"deterministic must be a bool or None; got {type(deterministic).__name__}")
    window, causal_offset = check_window(window), check_causal_offset(causal_offset)
    banded = has_band(causal_offset, window)
    if all(isinstance(t, np.ndarray) for t in (query, key, value)):
        from .cpu import cpu

        if banded:
            raise NotImplementedError("window and causal_offset run on the CUDA kernels (torch tensors on a GPU)")
        if kernel not in ("auto", "cpu"):
            raise ValueError(f"NumPy inputs run the C kernel (kernel='cpu'); got kernel={kernel!r}")
        return cpu(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa,
                   threads=threads)
    import torch

    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor (or all three NumPy arrays); got {type(t).__name__}")
    empty = min(t.numel() for t in (query, key, value)) == 0
    refused = "an empty input"
    if check_dropout(dropout_p) > 0.0 and not empty:   # the fused dropout (dropout.py) where it serves
        decision = decide(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, kernel=kernel,
                          deterministic=deterministic, threads=threads, window=window, causal_offset=causal_offset)
        if decision.run is not None:
            return decision.run()
        refused = decision.reason
    if dropout_p > 0.0 or empty:
        if banded:   # the band with dropout where the fused dropout refuses (dropout.dropout_reason says why)
            raise NotImplementedError(f"window and causal_offset with {refused}: torch's SDPA, which runs those, "
                                      "has no band (pass the band as attn_mask)")
        return torch_sdpa()(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    decision = decide(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, kernel=kernel,
                      deterministic=deterministic, threads=threads, window=window, causal_offset=causal_offset)
    if decision.run is not None:
        return decision.run()
    # Refused: raise the precise error of the path the call was meant for.
    if query.device.type == "cuda":
        return cuda.scaled_dot_product_attention(query, key, value, attn_mask, 0.0, is_causal, scale=scale,
                                                 enable_gqa=enable_gqa, kernel=kernel, deterministic=deterministic,
                                                 window=window, causal_offset=causal_offset)
    if banded or causal_bias_band(attn_mask, is_causal, query.shape[2], key.shape[2]) is not None:
        raise NotImplementedError(f"{decision.reason}; sy.attention.patch() runs such calls on torch's SDPA")
    if query.device.type == "cpu" and query.dtype != torch.float32:
        raise TypeError(f"CPU tensors run the C kernel, which is float32; got {query.dtype} (convert with "
                        ".float(), or use sy.attention.patch() to fall back to torch for other dtypes)")
    if query.device.type == "cpu" and (query.dim() != 4 or attn_mask is None):
        from .cpu import cpu   # its checks name the argument and the bound that was broken

        cpu(*(t.detach().numpy() for t in (query, key, value)), None, 0.0, is_causal, scale=scale,
            enable_gqa=enable_gqa, threads=threads)
    if attn_mask is not None:
        raise NotImplementedError(f"{decision.reason}; sy.attention.patch() runs such calls on torch's SDPA")
    raise ValueError(f"sympathy's attention cannot take this call: {decision.reason}")
