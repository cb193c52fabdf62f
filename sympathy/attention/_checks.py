"""Input rules every attention path shares: the NumPy reference, the tiled model, the C kernel and
the CUDA kernels. Shapes only, as plain tuples of ints, so this module imports neither NumPy nor
torch and the GPU path can apply exactly the same rules to torch tensors.

The contract is torch's `scaled_dot_product_attention`:

    q (B, Hq, Nq, d)   k (B, Hk, Nk, d)   v (B, Hk, Nk, dv)   ->   out (B, Hq, Nq, dv)

* Hq == Hk, or with `enable_gqa=True` Hq a multiple of Hk (query head h reads kv head h // (Hq // Hk)).
* `is_causal` is top-left aligned: query i sees keys j <= i, whatever Nq and Nk are.
* `scale` defaults to 1 / sqrt(d).

Every message names the argument and the bound it broke.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

MAX_HEAD_DIM = 256   # the C and CUDA kernels keep one query's accumulator row in registers/L1


@dataclass(frozen=True)
class AttentionShape:
    batch: int
    heads_q: int
    heads_kv: int
    n_q: int
    n_kv: int
    head_dim: int    # d of q and k
    value_dim: int   # dv of v and the output
    scale: float

    @property
    def group(self) -> int:
        """Query heads per kv head (1 without GQA)."""
        return self.heads_q // self.heads_kv if self.heads_kv else 1   # no heads at all: nothing grouped

    def flops(self, is_causal: bool = False) -> float:
        """Forward FLOPs as the papers count them: 2·Nq·Nk·d for QKᵀ plus 2·Nq·Nk·dv for PV, per head;
        causal keeps only the part at or below the diagonal (about half when Nq == Nk)."""
        pairs = causal_pairs(self.n_q, self.n_kv) if is_causal else self.n_q * self.n_kv
        return 2.0 * self.batch * self.heads_q * pairs * (self.head_dim + self.value_dim)


def causal_pairs(n_q: int, n_kv: int) -> int:
    """Number of (query, key) pairs that top-left causal attention keeps: sum_i min(i + 1, Nk)."""
    full = min(n_q, n_kv)                      # rows 0..full-1 keep i+1 keys
    return full * (full + 1) // 2 + max(0, n_q - n_kv) * n_kv


def check_shapes(q_shape: tuple[int, ...], k_shape: tuple[int, ...], v_shape: tuple[int, ...], *,
                 scale: float | None = None, enable_gqa: bool = False,
                 max_head_dim: int | None = None, allow_empty: bool = False) -> AttentionShape:
    """Validate q/k/v shapes against the SDPA contract; return the sizes and the resolved scale.

    allow_empty: accept dimensions of size 0 as torch does (an empty batch, no heads, no queries, no
    keys, head_dim 0); the caller then answers with `empty_result`."""
    for name, shape in (("q", q_shape), ("k", k_shape), ("v", v_shape)):
        if len(shape) != 4:
            raise ValueError(f"{name} must have rank 4 (batch, heads, seq, head_dim); got shape {tuple(shape)}")
        if any(s < (0 if allow_empty else 1) for s in shape):
            raise ValueError(f"{name} must have every dimension >= 1; got shape {tuple(shape)}")
    b, hq, nq, d = q_shape
    bk, hk, nk, dk = k_shape
    bv, hv, nv, dv = v_shape
    if bk != b or bv != b:
        raise ValueError(f"q, k and v must share the batch size; got q {b}, k {bk}, v {bv}")
    if dk != d:
        raise ValueError(f"k's head_dim must equal q's ({d}); got {dk}")
    if hv != hk:
        raise ValueError(f"k and v must have the same number of heads; got k {hk}, v {hv}")
    if nv != nk:
        raise ValueError(f"k and v must have the same sequence length; got k {nk}, v {nv}")
    if hq != hk:
        if not enable_gqa:
            raise ValueError(f"q has {hq} heads but k/v have {hk}; pass enable_gqa=True for grouped-query "
                             f"attention")
        if hk == 0 or hq % hk:
            raise ValueError(f"enable_gqa needs q's heads ({hq}) to be a multiple of k/v's heads ({hk})")
    if max_head_dim is not None and max(d, dv) > max_head_dim:
        raise ValueError(f"head_dim must be <= {max_head_dim} for this kernel; got q/k {d}, v {dv}")
    if scale is None:
        scale = 1.0 / math.sqrt(d) if d else math.inf   # torch's default, 1/sqrt(0) included
    else:
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise TypeError(f"scale must be a real number or None; got {type(scale).__name__}")
        scale = float(scale)
        if not math.isfinite(scale):
            raise ValueError(f"scale must be finite; got {scale}")
    return AttentionShape(b, hq, hk, nq, nk, d, dv, scale)


def is_empty(shape: AttentionShape) -> bool:
    """Nothing to compute: the output has no element, or no key exists (the output is then zeros)."""
    return 0 in (shape.batch, shape.heads_q, shape.n_q, shape.value_dim, shape.n_kv, shape.head_dim)


def check_dropout(dropout_p) -> float:
    """torch's dropout_p: a probability in [0, 1]."""
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)):
        raise TypeError(f"dropout_p must be a float in [0, 1]; got {type(dropout_p).__name__}")
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"dropout_p must be in [0, 1]; got {dropout_p}")
    return float(dropout_p)


def check_mask_shape(mask_shape: tuple[int, ...], shape: AttentionShape) -> None:
    """attn_mask must broadcast to (B, Hq, Nq, Nk), as torch's SDPA requires."""
    target = (shape.batch, shape.heads_q, shape.n_q, shape.n_kv)
    if len(mask_shape) > 4:
        raise ValueError(f"attn_mask must have rank <= 4; got shape {tuple(mask_shape)}")
    padded = (1,) * (4 - len(mask_shape)) + tuple(mask_shape)
    for got, want in zip(padded, target):
        if got not in (1, want):
            raise ValueError(f"attn_mask of shape {tuple(mask_shape)} does not broadcast to (B, Hq, Nq, Nk) "
                             f"= {target}")


def check_block(name: str, value: int | None, lo: int = 1, hi: int = 1 << 20) -> int | None:
    """A tile size chosen by the caller: an int in [lo, hi], or None for "pick from the cache sizes"."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int or None; got {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}]; got {value}")
    return value
