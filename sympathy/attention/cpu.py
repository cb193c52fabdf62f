"""The C kernel (c_src/attention.c) behind a NumPy interface: FlashAttention's forward pass on the
CPU in float32, tiles sized from this machine's L1d and L2, SIMD chosen at run time, threads across
batch × heads × query blocks, extra memory O(block · d) per thread whatever N is.

    out = sy.attention.cpu(q, k, v, None, 0.0, True)        # torch's positional order
    out = sy.attention.cpu(q, k, v, is_causal=True)
    out, lse = sy.attention.cpu(q, k, v, return_lse=True, threads=2)

Input rules: float32 NumPy arrays (or CPU torch tensors, read through np.asarray without a copy),
shapes and GQA as torch's SDPA (see _checks.py), any strides whose last dimension is contiguous
(a (B, N, H, d) array's .transpose(0, 2, 1, 3) is used in place). Numerical policy as
sympathy/softmax.py: fully masked rows cannot occur here (no attn_mask; causal row 0 always sees
key 0), NaN in an input makes the rows it reaches NaN, as in torch.
"""
from __future__ import annotations

import os

import numpy as np

from .._errors import check
from ._checks import MAX_HEAD_DIM, check_block, check_shapes, is_empty
from .reference import check_no_dropout, reference

ISAS = {"auto": 0, "scalar": 1, "avx2": 2, "avx512": 3}
MAX_THREADS = 1024     # the C side's bound on workers


def _lib():
    from .. import _attention

    return _attention.ffi, _attention.lib


def available_isas() -> tuple[str, ...]:
    """The instruction sets this CPU can run the kernel with, narrowest first."""
    _, lib = _lib()
    return tuple(name for name, code in ISAS.items() if code and lib.sy_attn_isa_supported(code))


def best_isa() -> str:
    _, lib = _lib()
    code = lib.sy_attn_isa_best()
    return next(name for name, c in ISAS.items() if c == code)


def _float32_view(x, name: str) -> np.ndarray:
    arr = x if isinstance(x, np.ndarray) else np.asarray(x)
    if arr.dtype != np.float32:
        raise TypeError(f"{name} must be float32 for the C kernel; got dtype {arr.dtype} "
                        f"(convert with .astype(np.float32), or use sy.attention.reference)")
    if arr.ndim == 4 and arr.size:   # an empty array's strides say nothing (NumPy may give 0)
        if arr.shape[-1] > 1 and arr.strides[-1] != arr.itemsize:
            raise ValueError(f"{name} must be contiguous in its last dim; got a stride of "
                             f"{arr.strides[-1]} bytes (use np.ascontiguousarray({name}))")
        if any(s % arr.itemsize for s in arr.strides) or arr.ctypes.data % arr.itemsize:
            raise ValueError(f"{name} must be float32-aligned (strides and address multiples of 4 bytes)")
    return arr


def _element_strides(arr: np.ndarray) -> list[int]:
    return [s // arr.itemsize for s in arr.strides[:3]]


def _threads(threads: int | None) -> int:
    if threads is None:
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if isinstance(threads, bool) or not isinstance(threads, int):
        raise TypeError(f"threads must be an int or None; got {type(threads).__name__}")
    if not 1 <= threads <= MAX_THREADS:
        raise ValueError(f"threads must be in [1, {MAX_THREADS}]; got {threads}")
    return threads


def _cache_sizes() -> tuple[int, int]:
    from ..topology import topology

    topo = topology(with_gpu=False)
    l1, l2 = topo.cache(1, "Data"), topo.cache(2)
    return (l1.size_bytes if l1 else 0), (l2.size_bytes if l2 else 0)


def plan(q_shape, k_shape, v_shape, *, is_causal: bool = False, enable_gqa: bool = False,
         threads: int | None = None, block_q: int | None = None, block_k: int | None = None,
         isa: str = "auto") -> dict:
    """The tiles and threads a call with these shapes would use (what `cpu` runs), plus the
    scratch memory each thread allocates."""
    ffi, lib = _lib()
    shape = check_shapes(tuple(q_shape), tuple(k_shape), tuple(v_shape), enable_gqa=enable_gqa,
                         max_head_dim=MAX_HEAD_DIM)
    problem = ffi.new("struct sy_attn_problem *")
    _fill_shape(problem, shape, is_causal)
    # The plan checks the problem is well formed, pointers included; nothing is read through them.
    placeholder = ffi.new("float[1]")
    problem.q = problem.k = problem.v = problem.out = placeholder
    p = _make_plan(ffi, lib, problem, threads, block_q, block_k, isa)
    per_thread = ffi.new("int64_t *")
    check(lib.sy_attn_scratch_bytes(problem, p, per_thread), "attention scratch size")
    name = next(n for n, c in ISAS.items() if c == p.isa)
    return {"isa": name, "block_q": p.block_q, "block_k": p.block_k, "threads": p.threads,
            "panel": lib.sy_attn_panel_width(p.isa), "scratch_bytes_per_thread": per_thread[0]}


def _fill_shape(problem, shape, is_causal: bool) -> None:
    problem.batch, problem.heads_q, problem.heads_kv = shape.batch, shape.heads_q, shape.heads_kv
    problem.n_q, problem.n_kv = shape.n_q, shape.n_kv
    problem.head_dim, problem.value_dim = shape.head_dim, shape.value_dim
    problem.scale = shape.scale
    problem.causal = bool(is_causal)


def _make_plan(ffi, lib, problem, threads, block_q, block_k, isa):
    if not isinstance(isa, str) or isa not in ISAS:
        raise ValueError(f"isa must be one of {sorted(ISAS)}; got {isa!r}")
    p = ffi.new("struct sy_attn_plan *")
    p.isa = ISAS[isa]
    p.block_q = check_block("block_q", block_q, hi=4096) or 0
    p.block_k = check_block("block_k", block_k, hi=4096) or 0
    p.threads = _threads(threads)
    l1, l2 = _cache_sizes()
    check(lib.sy_attn_plan(problem, l1, l2, p), f"planning attention with isa={isa!r}")
    return p


def cpu(q, k, v, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False, *,
        scale: float | None = None, enable_gqa: bool = False, threads: int | None = None,
        block_q: int | None = None, block_k: int | None = None, isa: str = "auto", return_lse: bool = False,
        out: np.ndarray | None = None):
    """softmax(scale · q kᵀ) v by the C kernel, float32.

    Signature as torch's scaled_dot_product_attention (scale and enable_gqa keyword-only, as there);
    attn_mask must be None and dropout_p 0 (the kernel has neither: NotImplementedError, never a
    silent ignore).
    q (B, Hq, Nq, d), k (B, Hk, Nk, d), v (B, Hk, Nk, dv), d and dv <= 256 -> (B, Hq, Nq, dv).
    Empty sizes as torch (an empty batch or no queries: an empty result; no keys: zeros).
    threads: None uses every CPU this process may run on. block_q/block_k: tile sizes (default:
    from the L1d/L2 sizes). isa: "auto", "avx512", "avx2" or "scalar" (NotSupportedError where the
    CPU lacks it). out: an optional float32 (B, Hq, Nq, dv) array, last dim contiguous, written in
    place. With return_lse also the natural-log log-sum-exp of each row, (B, Hq, Nq) float32.
    """
    check_no_dropout(dropout_p)
    if attn_mask is not None:
        raise NotImplementedError("the C kernel has no attn_mask; use sy.attention.reference (NumPy), or "
                                  "sy.attention.scaled_dot_product_attention on torch tensors")
    ffi, lib = _lib()
    q, k, v = (_float32_view(x, name) for name, x in (("q", q), ("k", k), ("v", v)))
    shape = check_shapes(q.shape, k.shape, v.shape, scale=scale, enable_gqa=enable_gqa,
                         max_head_dim=MAX_HEAD_DIM, allow_empty=True)
    if shape.head_dim and abs(shape.scale) > float(np.finfo(np.float32).max):
        raise ValueError(f"scale must fit in float32 for the C kernel; got {shape.scale}")
    want = (shape.batch, shape.heads_q, shape.n_q, shape.value_dim)
    if out is None:
        out = np.empty(want, dtype=np.float32)
    else:
        if not isinstance(out, np.ndarray):
            raise TypeError(f"out must be a NumPy array; got {type(out).__name__}")
        out = _float32_view(out, "out")
        if out.shape != want:
            raise ValueError(f"out must have shape {want}; got {out.shape}")
        if not out.flags.writeable:
            raise ValueError("out must be writeable")
    lse = np.empty(want[:3], dtype=np.float32) if return_lse else None
    if is_empty(shape):   # nothing for the kernel to stream: the definition's answer, as torch's
        ref_out, ref_lse = reference(q, k, v, None, 0.0, is_causal, scale=scale, enable_gqa=enable_gqa,
                                     return_lse=True)
        out[...] = ref_out
        if lse is not None:
            lse[...] = ref_lse
        return (out, lse) if return_lse else out

    problem = ffi.new("struct sy_attn_problem *")
    _fill_shape(problem, shape, is_causal)
    for name, arr in (("q", q), ("k", k), ("v", v), ("out", out)):
        setattr(problem, name, ffi.cast("float *", arr.ctypes.data))
        getattr(problem, f"{name}_stride")[0:3] = _element_strides(arr)
    problem.lse = ffi.cast("float *", lse.ctypes.data) if lse is not None else ffi.NULL
    p = _make_plan(ffi, lib, problem, threads, block_q, block_k, isa)
    # cffi releases the GIL for the call; q, k, v, out and lse stay referenced until it returns.
    check(lib.sy_attn_forward(problem, p), f"attention on the CPU (isa={isa!r})")
    return (out, lse) if return_lse else out
