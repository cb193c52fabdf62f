"""The band: causal attention at any alignment and sliding-window (local) attention, one mask family.

Query row i sees key j iff

    i + causal_offset - left  <=  j  <=  i + causal_offset + right

with window=(left, right) as flash-attn's `window_size` (-1: that side unbounded) and is_causal setting
right to 0. causal_offset=0 is torch's top-left alignment (`is_causal`, `causal_upper_left`);
causal_offset = Nk - Nq is the bottom-right alignment of `torch.nn.attention.bias.causal_lower_right`,
of flash-attn, and of a KV-cache prefill (the Nq new queries are the last Nq of Nk positions).
A row that sees no key gives 0 (and an LSE of -inf), as torch's SDPA answers such rows.

The `mma` and `hopper` kernels take the band natively (cuda_src/attention_band.cuh: blocks outside it
are never loaded, blocks inside run unmasked), also beside an attn_mask (mask_tiles.py classifies the
tiles by both; band_bounds gives it (lo, hi) as the kernels' make_band does); the `naive` kernel and the
torch-math backward take it as the boolean mask `band_mask` builds. This module is plain Python over ints; torch is imported only
where a tensor is made.
"""
from __future__ import annotations

import numbers
from typing import Optional, Tuple

NO_WINDOW = (-1, -1)
MAX_OFFSET = 1 << 29   # |causal_offset| and window sides beyond any sequence the kernels take (2^30 with Nq + Nk)


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def check_window(window) -> Tuple[int, int]:
    """window=None or (left, right), ints >= -1 (-1: unbounded), as flash-attn's window_size."""
    if window is None:
        return NO_WINDOW
    if not isinstance(window, (tuple, list)) or len(window) != 2 or not all(_is_int(w) for w in window):
        raise TypeError(f"window must be None or a pair of ints (left, right); got {window!r}")
    left, right = (int(w) for w in window)
    if left < -1 or right < -1:
        raise ValueError(f"window sides must be >= -1 (-1: unbounded); got {(left, right)}")
    return min(left, MAX_OFFSET), min(right, MAX_OFFSET)


def check_causal_offset(causal_offset) -> int:
    if not _is_int(causal_offset):
        raise TypeError(f"causal_offset must be an int; got {type(causal_offset).__name__}")
    causal_offset = int(causal_offset)
    if abs(causal_offset) > MAX_OFFSET:
        raise ValueError(f"causal_offset must be within +-{MAX_OFFSET}; got {causal_offset}")
    return causal_offset


def has_band(causal_offset: int, window: Tuple[int, int]) -> bool:
    """The call needs more than torch's top-left is_causal."""
    return causal_offset != 0 or tuple(window) != NO_WINDOW


def band_bounds(n_q: int, n_kv: int, is_causal: bool, causal_offset: int = 0, window=NO_WINDOW) -> Tuple[int, int]:
    """(lo, hi): row i sees keys i + lo .. i + hi, exactly as attention_band.cuh's make_band computes them
    (the kernels and the tile classification of mask_tiles.py must agree): an open side takes a bound no
    row reaches, lo = -(Nq + 1) or hi = Nk, and both are clamped into [-(Nq + 1), Nk] (so lo <= hi)."""
    open_lo, open_hi = -(n_q + 1), n_kv
    left, right = window
    lo = causal_offset - left if left >= 0 else open_lo
    hi = causal_offset if is_causal else causal_offset + right if right >= 0 else open_hi
    return min(max(lo, open_lo), open_hi), min(max(hi, open_lo), open_hi)


def causal_bias_band(attn_mask, is_causal: bool, n_q: int, n_kv: int) -> Optional[int]:
    """attn_mask a torch CausalBias (causal_upper_left / causal_lower_right): its causal_offset (0 or
    Nk - Nq); None for any other mask. torch's own errors: is_causal beside it (ValueError), and a bias
    made for other lengths."""
    if attn_mask is None:
        return None
    import torch

    if type(attn_mask) is torch.Tensor:   # the usual mask, told apart before the import below (~28 us a call)
        return None
    try:
        from torch.nn.attention.bias import CausalBias, CausalVariant
    except ImportError:   # torch without the bias module: no CausalBias can exist
        return None
    if not isinstance(attn_mask, CausalBias):
        return None
    if is_causal:
        raise ValueError("CausalBias should not be used with causal=True (as torch's SDPA)")
    if (attn_mask.seq_len_q, attn_mask.seq_len_kv) != (n_q, n_kv):
        raise ValueError(f"attn_mask is a CausalBias for (Nq, Nk) = {(attn_mask.seq_len_q, attn_mask.seq_len_kv)}; "
                         f"the inputs have {(n_q, n_kv)}")
    return n_kv - n_q if attn_mask.variant == CausalVariant.LOWER_RIGHT else 0


def band_mask(n_q: int, n_kv: int, is_causal: bool, causal_offset: int = 0, window=NO_WINDOW, device=None):
    """The band as a boolean (Nq, Nk) torch mask, True where a key takes part."""
    import torch

    left, right = window
    ahead = torch.arange(n_kv, device=device)[None, :] - torch.arange(n_q, device=device)[:, None] - causal_offset
    keep = torch.ones(n_q, n_kv, dtype=torch.bool, device=device)
    if is_causal:
        keep &= ahead <= 0
    elif right >= 0:
        keep &= ahead <= right
    if left >= 0:
        keep &= ahead >= -left
    return keep


def merge_mask(attn_mask, n_q: int, n_kv: int, is_causal: bool, causal_offset: int, window, device):
    """attn_mask (bool, float or None) with the band folded in, as one mask for the naive kernel and
    the math backward (is_causal is then part of it)."""
    import math

    keep = band_mask(n_q, n_kv, is_causal, causal_offset, window, device)
    if attn_mask is None:
        return keep
    if attn_mask.dtype.is_floating_point:
        return attn_mask.masked_fill(~keep, -math.inf)
    return attn_mask & keep


def match_band_mask(attn_mask, n_q: int, n_kv: int, sliding_window: Optional[int] = None):
    """(causal_offset, window) when attn_mask, a boolean (B or 1, 1, Nq, Nk) mask, is one causal band for
    every sequence: the diagonal where the last row's last visible key is, and with sliding_window keys
    kv > q - sliding_window (transformers' sliding_window_overlay: window = (sliding_window - 1, 0)).
    None for any other mask (padding, chunks, a static cache's unused keys): compared element for element,
    so a mask that is not exactly the band is never taken for one. Not under torch.compile (data-dependent)."""
    import torch

    if not isinstance(attn_mask, torch.Tensor) or attn_mask.dtype != torch.bool or attn_mask.dim() != 4:
        return None
    if attn_mask.shape[1] != 1 or tuple(attn_mask.shape[2:]) != (n_q, n_kv) or torch.compiler.is_compiling():
        return None
    if sliding_window is not None and (not _is_int(sliding_window) or sliding_window < 1):
        return None
    seen = attn_mask[0, 0, -1].nonzero()
    if seen.numel() == 0:
        return None
    causal_offset = int(seen[-1]) - (n_q - 1)
    window = (min(int(sliding_window) - 1, MAX_OFFSET), 0) if sliding_window else NO_WINDOW
    want = band_mask(n_q, n_kv, True, causal_offset, window, device=attn_mask.device)
    if not torch.equal(attn_mask[:, 0], want.expand(attn_mask.shape[0], n_q, n_kv)):
        return None
    return causal_offset, window
