"""The float64 NumPy reference every attention path is tested against: the whole score matrix,
materialised, exactly as the definition reads. Semantics are torch's
`scaled_dot_product_attention` (see _checks.py), with sympathy's fully-masked-row policy: zeros,
not NaN (sympathy/softmax.py explains why).
"""
from __future__ import annotations

import numpy as np

from ..softmax import finalize, log_sum_exp
from ._checks import check_dropout, check_mask_shape, check_shapes

FLOAT_DTYPES = (np.float16, np.float32, np.float64)


def as_float_arrays(q, k, v) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q, k, v as NumPy arrays of one floating dtype (torch CPU tensors are accepted through
    np.asarray); a TypeError names the first that is not."""
    arrays = []
    for name, x in (("q", q), ("k", k), ("v", v)):
        arr = np.asarray(x)
        if arr.dtype not in FLOAT_DTYPES:
            raise TypeError(f"{name} must be float16, float32 or float64; got dtype {arr.dtype}")
        arrays.append(arr)
    dtypes = {a.dtype for a in arrays}
    if len(dtypes) != 1:
        raise TypeError(f"q, k and v must share one dtype; got q {arrays[0].dtype}, k {arrays[1].dtype}, "
                        f"v {arrays[2].dtype}")
    return arrays[0], arrays[1], arrays[2]


def causal_mask(n_q: int, n_kv: int) -> np.ndarray:
    """torch's top-left causal mask: query i sees key j when j <= i (True = takes part)."""
    return np.tri(n_q, n_kv, dtype=bool)


def check_no_dropout(dropout_p) -> None:
    """The NumPy and C paths have no dropout: dropout_p > 0 is an error, never silently ignored."""
    if check_dropout(dropout_p) > 0.0:
        raise NotImplementedError(f"dropout_p={dropout_p}: the NumPy and C attention paths have no dropout; "
                                  "call sy.attention.scaled_dot_product_attention on torch tensors (it runs "
                                  "torch's own implementation for dropout_p > 0)")


def reference(q, k, v, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False, *,
              scale: float | None = None, enable_gqa: bool = False, return_lse: bool = False):
    """softmax(scale · q kᵀ + mask) v in float64, the score matrix materialised.

    Signature as torch's scaled_dot_product_attention (scale and enable_gqa keyword-only, as there).
    q (B, Hq, Nq, d), k (B, Hk, Nk, d), v (B, Hk, Nk, dv) -> (B, Hq, Nq, dv) float64; empty sizes as
    torch (no keys: zeros).
    attn_mask: None, boolean (True = take part) or additive, broadcastable to (B, Hq, Nq, Nk);
    not together with is_causal (as torch). dropout_p must be 0 (NotImplementedError otherwise).
    With return_lse, also the natural-log log-sum-exp of each row's scores, (B, Hq, Nq), -inf for
    a fully masked row.
    """
    check_no_dropout(dropout_p)
    q, k, v = as_float_arrays(q, k, v)
    shape = check_shapes(q.shape, k.shape, v.shape, scale=scale, enable_gqa=enable_gqa, allow_empty=True)
    if attn_mask is not None and is_causal:
        raise ValueError("pass either attn_mask or is_causal=True, not both (as torch's SDPA)")
    q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
    if shape.group > 1:                       # query head h reads kv head h // group
        k64 = np.repeat(k64, shape.group, axis=1)
        v64 = np.repeat(v64, shape.group, axis=1)
    s = q64 @ np.swapaxes(k64, -1, -2)                          # (B, Hq, Nq, Nk)
    if shape.head_dim:                        # head_dim 0: every score is 0 whatever the scale (as torch)
        s = shape.scale * s
    if is_causal:
        s = np.where(causal_mask(shape.n_q, shape.n_kv), s, -np.inf)
    if attn_mask is not None:
        mask = np.asarray(attn_mask)
        check_mask_shape(mask.shape, shape)
        if mask.dtype == bool:
            s = np.where(mask, s, -np.inf)
        elif mask.dtype.kind == "f":
            s = s + mask.astype(np.float64)
        else:
            raise TypeError(f"attn_mask must be bool or floating; got dtype {mask.dtype}")
    m_i = s.max(axis=-1, initial=-np.inf)                       # no key at all: -inf, as fully masked
    m_ref = np.where(m_i == -np.inf, 0.0, m_i)                  # the -inf guard (softmax.rescale)
    with np.errstate(invalid="ignore"):
        p = np.exp(s - m_ref[..., None])
    l_i = p.sum(axis=-1)
    out = finalize(p @ v64, l_i)
    if return_lse:
        return out, log_sum_exp(m_i, l_i)
    return out
