"""Softmax, the online softmax, and the one named unit every attention path shares.

    sy.softmax(x, axis=-1)                      the safe (max-subtracted) softmax
    sy.online_softmax(x, block_size, axis=-1)   the same numbers, reading x one block at a time

The online softmax (Milakov & Gimelshein 2018) keeps two running statistics per row: the largest
score so far, `m_i`, and the sum of exponentials relative to it, `l_i`. When a block brings a larger
maximum, everything accumulated so far was measured against the wrong reference; it is brought up
to date by one multiplication with alpha = exp(m_old - m_new). FlashAttention adds a third running
value, the output accumulator `acc`, rescaled by the same alpha. `rescale` and `finalize` below are
that step, under the names the C kernel (c_src/attention.c) and the CUDA kernels also use.

Numerical policy (the same in every sympathy attention path):
* -inf entries are masked: they get probability 0.
* A row whose entries are all -inf (fully masked) gets all-zero probabilities, an all-zero attention
  output and log-sum-exp -inf. torch's SDPA gives NaN there with a boolean mask; zeros are what
  FlashAttention's kernels produce, and they keep a padded batch from poisoning later layers.
* NaN anywhere in a row makes that row NaN; +inf entries also give NaN (inf - inf). Nothing is
  silently dropped.
* ±1e4 (or any finite) scores are exact up to rounding: exp only ever sees values <= 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

# Seed 000's 2×7 score matrix, its `column_index = 2` (0-based: the column [5.0, 3.5]) and the
# figures its two programs print: softmax [0.8176, 0.1824] = [1/(1+e^-1.5), e^-1.5/(1+e^-1.5)].
ARTICLE_MATRIX = np.array([
    [-0.8, -5.0, 5.0, 1.5, 3.4, -2.3, 2.5],
    [-0.2, 2.3, 3.5, 1.8, 0.9, -1.5, 0.5],
])
ARTICLE_COLUMN = 2
ARTICLE_BLOCK_SIZES = (1, 1)          # "Splitting the column into individual elements"
ARTICLE_COLUMN_SOFTMAX = (0.8176, 0.1824)

# The slide's denominator problem: one query, three keys, three scalar values, scale 1.
SLIDE_Q = np.array([1.0])
SLIDE_K = np.array([[1.0], [2.0], [3.0]])
SLIDE_V = np.array([[2.0], [4.0], [8.0]])


def _float_array(x, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind not in "fiub":
        raise TypeError(f"{name} must hold real numbers; got dtype {arr.dtype}")
    if arr.dtype.kind != "f":
        arr = arr.astype(np.float64)
    if arr.ndim == 0:
        raise ValueError(f"{name} must have at least one dimension; got a scalar")
    return arr


def _check_axis(axis: int, ndim: int) -> int:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an int; got {type(axis).__name__}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis must be in [{-ndim}, {ndim - 1}] for a {ndim}-d input; got {axis}")
    return int(axis) % ndim


# ---- the named unit: rescale and finalize -----------------------------------------------------------
def rescale(m_i: np.ndarray, l_i: np.ndarray, s: np.ndarray):
    """One online-softmax step: fold the score block `s` (rows × block) into the running `m_i`, `l_i`.

    Returns (m_new, l_new, p, alpha): p = exp(s - m_new) are the block's unnormalised probabilities
    and alpha = exp(m_i - m_new) is the factor by which anything accumulated against the old maximum
    (l_i, and the attention accumulator acc) must be multiplied.

    The -inf guard: while a row has seen only masked entries, m_new is -inf, and s - m_new would be
    (-inf) - (-inf) = NaN. Measuring against 0 instead gives exp(-inf) = 0 for p and alpha, so a
    fully masked row keeps l_i = 0 and acc = 0 and finalize turns it into zeros.
    """
    m_new = np.maximum(m_i, s.max(axis=-1))
    m_ref = np.where(m_new == -np.inf, 0.0, m_new)          # -inf guard, see above
    with np.errstate(invalid="ignore"):                      # NaN inputs propagate, by policy
        alpha = np.exp(m_i - m_ref)
        p = np.exp(s - m_ref[..., None])
    l_new = alpha * l_i + p.sum(axis=-1)
    return m_new, l_new, p, alpha


def finalize(acc: np.ndarray, l_i: np.ndarray) -> np.ndarray:
    """Divide the accumulator by the softmax denominator; a fully masked row (l_i == 0) gives 0."""
    out = np.zeros_like(acc)
    np.divide(acc, l_i[..., None], out=out, where=(l_i != 0)[..., None])
    nan_rows = np.isnan(l_i)                                  # NaN in, NaN out
    if nan_rows.any():
        out[nan_rows] = np.nan
    return out


def log_sum_exp(m_i: np.ndarray, l_i: np.ndarray) -> np.ndarray:
    """log(sum exp(s)) from the running statistics: m_i + log(l_i); -inf for a fully masked row
    (there l_i = 0 and m_i = -inf), NaN for a NaN row."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return m_i + np.log(l_i)


# ---- the public functions -------------------------------------------------------------------------
def softmax(x, axis: int = -1) -> np.ndarray:
    """The safe softmax along `axis`: exp(x - max) / sum(exp(x - max)). Keeps float32/float64
    (integers become float64); fully masked (all -inf) slices give zeros, NaN propagates; an empty
    input gives an empty result of the same shape, as torch.softmax does."""
    arr = _float_array(x, "x")
    axis = _check_axis(axis, arr.ndim)
    if arr.size == 0:
        return np.empty_like(arr)
    moved = np.moveaxis(arr, axis, -1)
    m = moved.max(axis=-1, keepdims=True)
    m_ref = np.where(m == -np.inf, 0.0, m).astype(arr.dtype)
    with np.errstate(invalid="ignore"):
        e = np.exp(moved - m_ref)
    total = e.sum(axis=-1, keepdims=True)
    out = np.zeros_like(e)
    np.divide(e, total, out=out, where=total != 0)
    out[np.broadcast_to(np.isnan(total), out.shape)] = np.nan
    return np.moveaxis(out, -1, axis)


def _block_bounds(n: int, block_size) -> list[tuple[int, int]]:
    """[start, stop) of each block: `block_size` is one int (the last block may be short) or the
    list of block sizes, which must add up to n."""
    if isinstance(block_size, (int, np.integer)) and not isinstance(block_size, bool):
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1; got {block_size}")
        sizes = [min(block_size, n - s) for s in range(0, n, int(block_size))]
    elif isinstance(block_size, Sequence) and not isinstance(block_size, str):
        sizes = list(block_size)
        if (not sizes and n) or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1 for s in sizes):
            raise ValueError(f"block_size as a list must hold ints >= 1; got {block_size!r}")
        if sum(sizes) != n:
            raise ValueError(f"block sizes {sizes} add up to {sum(sizes)}, but the axis has {n} entries")
    else:
        raise TypeError(f"block_size must be an int or a list of ints; got {type(block_size).__name__}")
    bounds, start = [], 0
    for size in sizes:
        bounds.append((start, start + int(size)))
        start += int(size)
    return bounds


def online_softmax(x, block_size, axis: int = -1) -> np.ndarray:
    """The softmax computed the online way: one pass over the blocks keeping (m_i, l_i) with the
    rescale step, then one pass that normalises. Same numbers as `softmax` up to rounding.

    block_size: an int, or the list of block sizes (the article's column uses [1, 1]); for an empty
    axis the list is empty. An empty input gives an empty result of the same shape, as torch does."""
    arr = _float_array(x, "x")
    axis = _check_axis(axis, arr.ndim)
    moved = np.moveaxis(arr, axis, -1)
    bounds = _block_bounds(moved.shape[-1], block_size)
    if arr.size == 0:
        return np.empty_like(arr)
    m_i = np.full(moved.shape[:-1], -np.inf, dtype=arr.dtype)
    l_i = np.zeros(moved.shape[:-1], dtype=arr.dtype)
    for start, stop in bounds:
        m_i, l_i, _, _ = rescale(m_i, l_i, moved[..., start:stop])
    m_ref = np.where(m_i == -np.inf, 0.0, m_i).astype(arr.dtype)
    with np.errstate(invalid="ignore"):
        e = np.exp(moved - m_ref[..., None])
    out = finalize(e, l_i)
    return np.moveaxis(out, -1, axis)


# ---- step-by-step traces for the demo -------------------------------------------------------------
@dataclass(frozen=True)
class SoftmaxStep:
    block: tuple[int, int]     # [start, stop) of the block read
    values: tuple[float, ...]  # the scores in it
    m_old: float
    m_new: float
    alpha: float               # exp(m_old - m_new): how much the old l_i shrinks
    l_old: float
    l_new: float


@dataclass(frozen=True)
class AttentionStep:
    block: tuple[int, int]
    scores: tuple[float, ...]  # s_j = scale · q·k_j for the block's keys
    m_old: float
    m_new: float
    alpha: float
    p: tuple[float, ...]       # exp(s_j - m_new)
    l_old: float
    l_new: float
    acc_old: tuple[float, ...]
    acc_new: tuple[float, ...]  # alpha · acc_old + p · V_block


def online_softmax_steps(x, block_size) -> tuple[list[SoftmaxStep], np.ndarray]:
    """The online softmax of one vector, every intermediate recorded; returns (steps, result)."""
    vec = _float_array(x, "x").astype(np.float64)
    if vec.ndim != 1:
        raise ValueError(f"x must be one vector for a trace; got shape {vec.shape}")
    steps = []
    m_i, l_i = np.array(-np.inf), np.array(0.0)
    for start, stop in _block_bounds(len(vec), block_size):
        m_new, l_new, _, alpha = rescale(m_i, l_i, vec[start:stop])
        steps.append(SoftmaxStep((start, stop), tuple(vec[start:stop]), float(m_i), float(m_new),
                                 float(alpha), float(l_i), float(l_new)))
        m_i, l_i = m_new, l_new
    return steps, online_softmax(vec, block_size)


def online_attention_steps(q, k, v, block_size, scale: float = 1.0) -> tuple[list[AttentionStep], np.ndarray]:
    """Attention of one query over blocks of keys, FlashAttention's way, every intermediate recorded.

    q (d,), k (N, d), v (N, dv). Returns (steps, output) with output = finalize(acc, l_i)."""
    qv = _float_array(q, "q").astype(np.float64)
    km = _float_array(k, "k").astype(np.float64)
    vm = _float_array(v, "v").astype(np.float64)
    if qv.ndim != 1 or km.ndim != 2 or vm.ndim != 2:
        raise ValueError(f"q must be (d,), k (N, d) and v (N, dv); got {qv.shape}, {km.shape}, {vm.shape}")
    if km.shape[1] != qv.shape[0] or vm.shape[0] != km.shape[0]:
        raise ValueError(f"shapes do not match: q {qv.shape}, k {km.shape}, v {vm.shape}")
    m_i, l_i = np.array(-np.inf), np.array(0.0)
    acc = np.zeros(vm.shape[1])
    steps = []
    for start, stop in _block_bounds(km.shape[0], block_size):
        s = scale * (km[start:stop] @ qv)
        m_new, l_new, p, alpha = rescale(m_i, l_i, s)
        acc_new = alpha * acc + p @ vm[start:stop]
        steps.append(AttentionStep((start, stop), tuple(s), float(m_i), float(m_new), float(alpha),
                                   tuple(p), float(l_i), float(l_new), tuple(acc), tuple(acc_new)))
        m_i, l_i, acc = m_new, l_new, acc_new
    return steps, finalize(acc[None], np.atleast_1d(l_i))[0]
