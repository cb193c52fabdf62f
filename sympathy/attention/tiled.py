"""FlashAttention's Algorithm 1 (Dao et al. 2022) in NumPy, with its memory traffic counted.

Two memories are modelled. "HBM" holds the big arrays Q, K, V, O and the row statistics m, l
(here: the NumPy arrays passed in and returned). "SRAM" holds one tile of each, sized from a budget
of M bytes. Every block copied between them is counted, so the paper's IO claim can be checked
against measured traffic instead of being taken on trust:

    standard attention   Θ(N·d + N²)        elements moved (S and P go to HBM and back)
    FlashAttention       Θ(N²·d² / M)       elements moved (K, V once; Q, O once per K/V block)

Loop order is the paper's: outer over K/V blocks j (each loaded once), inner over Q blocks i, whose
O_i, l_i, m_i go back to HBM after every step. The N×N score matrix never exists; the largest
score array is one Br×Bc tile per (batch, head).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..softmax import finalize, log_sum_exp, rescale
from ._checks import check_block, check_shapes, is_empty
from .reference import as_float_arrays, check_no_dropout, reference

ITEM_BYTES = 8          # the model computes in float64; traffic is counted in its bytes
DEFAULT_SRAM_BYTES = 192 * 1024  # about one SM's shared memory (A100: up to 164 KiB, H100: 228 KiB)


@dataclass(frozen=True)
class Traffic:
    """Bytes moved between "HBM" and the tiles, measured while tiled() ran (all batches and heads)."""
    hbm_read_bytes: int
    hbm_write_bytes: int
    tile_peak_bytes: int    # largest SRAM working set of one (batch, head) step: Q_i, K_j, V_j, O_i, S_ij, m, l
    block_q: int            # Br
    block_k: int            # Bc
    sram_bytes: int         # M, the budget the blocks were sized from (in bytes)
    batch_heads: int
    n_q: int
    n_kv: int
    head_dim: int

    @property
    def total_bytes(self) -> int:
        return self.hbm_read_bytes + self.hbm_write_bytes

    def standard_bytes(self) -> int:
        """Standard attention's traffic (the paper's Algorithm 0), per the same element size:
        read Q, K; write S; read S, write P; read P, V; write O."""
        n, m, d = self.n_q, self.n_kv, self.head_dim
        elements = (n * d + m * d) + n * m + 2 * n * m + (n * m + m * d) + n * d
        return self.batch_heads * elements * ITEM_BYTES

    def flash_order_bytes(self) -> float:
        """The paper's Θ(N²·d²/M) with constant 1 (N = Nq = Nk, M in elements), for the comparison."""
        m_elements = self.sram_bytes / ITEM_BYTES
        return self.batch_heads * self.n_q * self.n_kv * self.head_dim ** 2 / m_elements * ITEM_BYTES


def blocks_from_sram(sram_bytes: int, head_dim: int) -> tuple[int, int]:
    """The paper's block sizes: Bc = ceil(M / 4d), Br = min(Bc, d), M the SRAM size in elements."""
    m_elements = sram_bytes // ITEM_BYTES
    block_k = max(1, -(-m_elements // (4 * head_dim)))
    block_q = max(1, min(block_k, head_dim))
    return block_q, block_k


def tiled(q, k, v, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False, *,
          scale: float | None = None, enable_gqa: bool = False, block_q: int | None = None,
          block_k: int | None = None, sram_bytes: int | None = None, return_lse: bool = False,
          return_traffic: bool = False):
    """Attention by FlashAttention's Algorithm 1: float64, tiles of Br×Bc, online softmax.

    Signature as torch's scaled_dot_product_attention (scale and enable_gqa keyword-only, as there);
    attn_mask must be None and dropout_p 0 (NotImplementedError otherwise: the model has neither).
    Block sizes: block_q/block_k as given, else from `sram_bytes` (default 192 KiB) by the paper's
    rule. Returns out (B, Hq, Nq, dv), then lse (B, Hq, Nq) if return_lse, then a Traffic if
    return_traffic. Empty sizes as torch.
    """
    check_no_dropout(dropout_p)
    if attn_mask is not None:
        raise NotImplementedError("tiled has no attn_mask; use sy.attention.reference for a masked NumPy call")
    q, k, v = as_float_arrays(q, k, v)
    shape = check_shapes(q.shape, k.shape, v.shape, scale=scale, enable_gqa=enable_gqa, allow_empty=True)
    block_q = check_block("block_q", block_q)
    block_k = check_block("block_k", block_k)
    sram = check_block("sram_bytes", sram_bytes, lo=4 * ITEM_BYTES * max(shape.head_dim, shape.value_dim),
                       hi=1 << 40)
    sram = DEFAULT_SRAM_BYTES if sram is None else sram
    if is_empty(shape):   # no tile to stream: the definition's answer (torch's), and no traffic
        out, lse = reference(q, k, v, None, 0.0, is_causal, scale=scale, enable_gqa=enable_gqa, return_lse=True)
        traffic = Traffic(0, 0, 0, 0, 0, sram, shape.batch * shape.heads_q, shape.n_q, shape.n_kv, shape.head_dim)
        extras = [x for x, wanted in ((lse, return_lse), (traffic, return_traffic)) if wanted]
        return (out, *extras) if extras else out
    auto_q, auto_k = blocks_from_sram(sram, shape.head_dim)
    br = min(block_q or auto_q, shape.n_q)
    bc = min(block_k or auto_k, shape.n_kv)

    b, hq, nq, d = q.shape
    nk, dv = shape.n_kv, shape.value_dim
    kv_head = np.arange(hq) // shape.group         # GQA: the kv head each query head reads
    out = np.zeros((b, hq, nq, dv))                 # HBM: O, l, m (Algorithm 1, line 2)
    l_hbm = np.zeros((b, hq, nq))
    m_hbm = np.full((b, hq, nq), -np.inf)
    reads = writes = 0
    tile_peak = 0
    heads = b * hq

    for kv0 in range(0, nk, bc):                    # line 5: outer loop over K/V blocks
        kv1 = min(kv0 + bc, nk)
        k_j = k[:, kv_head, kv0:kv1].astype(np.float64)   # line 6: load K_j, V_j to SRAM
        v_j = v[:, kv_head, kv0:kv1].astype(np.float64)
        reads += heads * (kv1 - kv0) * (d + dv)
        for q0 in range(0, nq, br):                 # line 7: inner loop over Q blocks
            q1 = min(q0 + br, nq)
            if is_causal and kv0 > q1 - 1:          # every key of this block is after every query
                continue
            q_i = q[:, :, q0:q1].astype(np.float64) # line 8: load Q_i, O_i, l_i, m_i
            acc = out[:, :, q0:q1]
            l_i, m_i = l_hbm[:, :, q0:q1], m_hbm[:, :, q0:q1]
            reads += heads * (q1 - q0) * (d + dv + 2)
            s = shape.scale * (q_i @ np.swapaxes(k_j, -1, -2))    # line 9: S_ij = τ Q_i K_jᵀ
            if is_causal and kv1 - 1 > q0:          # a diagonal block: mask key j > query i
                keep = np.arange(q0, q1)[:, None] >= np.arange(kv0, kv1)[None, :]
                s = np.where(keep, s, -np.inf)
            m_new, l_new, p, alpha = rescale(m_i, l_i, s)          # lines 10-11, the named unit
            acc_new = alpha[..., None] * acc + p @ v_j             # line 12 (unnormalised acc)
            out[:, :, q0:q1], l_hbm[:, :, q0:q1], m_hbm[:, :, q0:q1] = acc_new, l_new, m_new
            writes += heads * (q1 - q0) * (dv + 2)                 # line 13: write O_i, l_i, m_i
            step_bytes = ((q1 - q0) * (d + dv + 2) + (kv1 - kv0) * (d + dv) + (q1 - q0) * (kv1 - kv0))
            tile_peak = max(tile_peak, step_bytes * ITEM_BYTES)
    # The paper divides by l at every step (diag(l_new)^-1 ...); keeping acc unnormalised and
    # dividing once at the end is FlashAttention-2's change: same result, fewer divisions, same traffic.
    result = finalize(out, l_hbm)
    reads += heads * nq * (dv + 1)                  # that last pass reads O and l, writes O
    writes += heads * nq * dv
    extras = []
    if return_lse:
        extras.append(log_sum_exp(m_hbm, l_hbm))
    if return_traffic:
        extras.append(Traffic(hbm_read_bytes=reads * ITEM_BYTES, hbm_write_bytes=writes * ITEM_BYTES,
                              tile_peak_bytes=tile_peak, block_q=br, block_k=bc, sram_bytes=sram,
                              batch_heads=heads, n_q=nq, n_kv=nk, head_dim=d))
    return (result, *extras) if extras else result
