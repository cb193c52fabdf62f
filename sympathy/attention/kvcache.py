"""Attention against a KV cache for inference, with flash-attn's `flash_attn_with_kvcache` interface.

    out = sy.attention.attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens, causal=True)

Same signature, layouts and meaning as flash_attn.flash_attn_with_kvcache (FlashAttention 2.x):

    q        (batch, seqlen_q, nheads, headdim)                      seqlen_q: 1 for decode, more for a chunk
    k_cache  (batch_size_cache, seqlen_cache, nheads_k, headdim)     contiguous cache, or with block_table
             (num_blocks, page_block_size, nheads_k, headdim)        a paged cache
    k, v     (batch, seqlen_new, nheads_k, headdim) or None: written into the cache in place at
             cache_seqlens[b] .. cache_seqlens[b] + seqlen_new - 1, then attended to
    cache_seqlens  int or (batch,) int32: keys already in each sequence's cache (None: all seqlen_cache)
    cache_batch_idx (batch,) int32: the cache batch row of each sequence (contiguous cache only)
    block_table    (batch, max_num_blocks_per_seq) int32: page j of sequence b is k_cache[block_table[b, j]]
    causal   aligned bottom-right: query i sees keys j <= i + seqlen_k - seqlen_q (new queries see the whole
             cache before them); a row that sees no key gives 0 (and a log-sum-exp of -inf)
    GQA      nheads a multiple of nheads_k: query head h reads KV head h // (nheads // nheads_k)
    returns  out (batch, seqlen_q, nheads, headdim), and with return_softmax_lse the natural-log
             log-sum-exp (batch, nheads, seqlen_q) float32

It runs cuda_src/attention_decode.cu (fp16/bf16, headdim 64 or 128, compute capability 8.0+): the query
heads of a GQA group packed as rows of one tile (K and V read once per group), the keys split over
blocks when batch x nheads_k cannot fill the GPU (num_splits=0: the measured heuristic below), partial
results merged exactly by their log-sum-exp. On sm_90 a chunk of HOPPER_MIN_QUERIES (256) or more new
queries over a contiguous cache whose length the host knows (cache_seqlens None or an int, or an append
where every sequence has one length) runs the `hopper` kernel instead (wgmma: a chunk is compute bound;
num_splits does not apply there). Forward only, as flash-attn's (no autograd).

Differences from flash-attn, each an error rather than a silent change: rotary_cos/rotary_sin,
cache_leftpad, window_size, softcap and alibi_slopes raise NotImplementedError; page_block_size must be
a multiple of 64 (flash-attn asks for 256, so every flash-attn page size works). Appending checks that
every sequence's new keys fit in the cache (one device sync, only when k and v are given); without an
append, cache_seqlens past the cache are clamped to it on the device (never read out of bounds), and
block_table and cache_batch_idx entries are clamped to [0, k_cache.shape[0]). A call without an append
never synchronises and can be captured in a CUDA graph (the way to take its ~50-100 us of Python off
a decode step); an appending call cannot (its bounds check reads two numbers back).
"""
import functools
import math
from typing import Optional, Tuple, Union

from .._errors import NotSupportedError
from . import cuda, cuda_build

DECODE_HEAD_DIMS = (64, 128)
PAGE_MULTIPLE = 64   # SY_DECODE_PAGE_MULTIPLE: one key tile never spans two pages
KEY_TILE = 64        # keys per tile of the decode kernel
MAX_SPLITS = 128

# Split-KV heuristic (num_splits=0), from the sweep in docs/notes-decode.md (H100, bf16, d = 128, CUDA-graph
# timings): the best split count put about one block on every SM (8 sequence-heads: 16 splits, 16: 8,
# 32: 4, 64: 2, 128 or more: none), whatever the length, so splits = SMs // blocks; and a split keeps at
# least SPLIT_MIN_TILES tiles of 64 keys (at 2048 keys 8 splits beat 16: each block's pipeline fill
# and partial-output write weigh against only a few tiles of reading).
SPLIT_MIN_TILES = 4


# Chunked prefill on Hopper: a chunk of HOPPER_MIN_QUERIES or more new queries against a contiguous cache
# of one host-known length runs the `hopper` kernel (wgmma) instead of attention_decode.cu's mma.sync path.
# Such a chunk is compute bound: 512 queries x 32k keys x 32 heads at d = 128 is 273 GFLOP against 134 MB
# of K+V (~2000 FLOP per byte; the H100's ridge is ~300), and mma.sync runs at about half of wgmma's rate
# (264 vs 625 TFLOP/s there). Below the threshold the hopper grid (128-row tiles, one per query head and
# row block: 32 tiles for 128 queries x 32 heads) leaves most of the 132 SMs idle while the decode kernel
# splits the keys. Measured (H100, B = 1, Hq 32 / Hkv 8, d = 128; scripts/decode_check.py --chunks,
# docs/notes-decode.md): hopper / decode kernel speed 0.47-0.52x at 64 queries, 0.74-1.01x at 128,
# 1.20-1.95x at 256, 1.38-2.52x at 512 (4k and 32k cached keys).
HOPPER_MIN_QUERIES = 256


def num_splits_heuristic(blocks: int, key_tiles: int, sm_count: int) -> int:
    """Splits of each sequence's keys for a grid of `blocks` (batch x nheads_k x row blocks) over
    `key_tiles` 64-key tiles on a GPU of `sm_count` SMs."""
    return max(1, min(sm_count // max(blocks, 1), key_tiles // SPLIT_MIN_TILES, MAX_SPLITS))


@functools.lru_cache(maxsize=None)
def _ctypes(ffi):
    return ffi.typeof("void *"), ffi.typeof("float *"), ffi.typeof("int *")


def _rows_per_block(packed_rows: int) -> int:
    return 16 if packed_rows <= 16 else 64   # attention_decode.cu's launch_rows


def _check_int_tensor(torch, name, t, shape, device):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    if t.dtype != torch.int32:
        raise TypeError(f"{name} must be int32 (as flash-attn's); got {t.dtype}")
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}; got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} must be on {device}; got {t.device}")


def _check_inputs(torch, q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table, num_splits):
    """Everything that can be checked without the device; returns (cache_seqlens as a tensor or None,
    cache_batch_idx, capacity: the keys one sequence can hold, host_len: every sequence's cache length
    before the append where the host knows it without asking the device, else None)."""
    # Each property is read once per tensor: every torch attribute access costs a microsecond or two of
    # host time, and a decode step's kernels take tens.
    q_device = q_dtype = None
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("k", k), ("v", v)):
        if t is None and name in ("k", "v"):
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
        if len(t.shape) != 4:
            raise ValueError(f"{name} must have 4 dims (batch, seqlen, heads, headdim); got shape {tuple(t.shape)}")
        device, dtype = t.device, t.dtype
        if device.type != "cuda":
            raise ValueError(f"{name} must be on a CUDA device; got {device}")
        if dtype is not torch.float16 and dtype is not torch.bfloat16:
            raise TypeError(f"{name} must be float16 or bfloat16; got {dtype}")
        if q_device is None:
            q_device, q_dtype = device, dtype
        elif dtype is not q_dtype:
            raise TypeError(f"{name} must have q's dtype {q_dtype}; got {dtype}")
        elif device != q_device:
            raise ValueError(f"{name} must be on q's device {q_device}; got {device}")
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must be contiguous in its last dim; got stride {t.stride(-1)}")
    if (k is None) != (v is None):
        raise ValueError("pass both k and v (the new keys and values) or neither")
    B, Nq, Hq, d = q.shape
    if d not in DECODE_HEAD_DIMS:
        raise ValueError(f"headdim must be one of {DECODE_HEAD_DIMS}; got {d}")
    if B < 1 or Nq < 1 or Hq < 1:
        raise ValueError(f"q must have batch, seqlen and heads >= 1; got shape {tuple(q.shape)}")
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache and v_cache must have one shape; got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    cache_rows, cache_len, Hkv, dk = k_cache.shape
    if dk != d:
        raise ValueError(f"k_cache must have q's headdim {d}; got {dk}")
    if Hkv < 1 or Hq % Hkv != 0:
        raise ValueError(f"q's heads ({Hq}) must be a multiple of the cache's heads ({Hkv})")
    if B > 65535 or Hkv > 65535:
        raise ValueError(f"batch and nheads_k must be <= 65535 (CUDA grid limit); got {B} and {Hkv}")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):   # cp.async moves 16-byte chunks
        if t.data_ptr() % 16 or any(s % 8 for s in t.stride()[:3]):
            raise ValueError(f"{name} must have every row 16-byte aligned (strides multiples of 8 elements)")
    if k is not None:
        if k.shape != v.shape:
            raise ValueError(f"k and v must have one shape; got {tuple(k.shape)} and {tuple(v.shape)}")
        if k.shape[0] != B or k.shape[2] != Hkv or k.shape[3] != d:
            raise ValueError(f"k must be (batch, seqlen_new, nheads_k, headdim) = ({B}, *, {Hkv}, {d}); got {tuple(k.shape)}")
        if cache_seqlens is None:
            raise ValueError("appending k and v needs cache_seqlens (where each sequence's new keys go)")
    if block_table is not None:
        if cache_batch_idx is not None:
            raise ValueError("cache_batch_idx indexes a contiguous cache; a paged one maps sequences by block_table")
        if not isinstance(block_table, torch.Tensor) or block_table.dim() != 2 or block_table.shape[0] != B:
            raise ValueError(f"block_table must be a (batch, max_num_blocks_per_seq) int32 tensor; got "
                             f"{getattr(block_table, 'shape', type(block_table).__name__)}")
        _check_int_tensor(torch, "block_table", block_table, tuple(block_table.shape), q_device)
        if cache_len % PAGE_MULTIPLE or cache_len < 1:
            raise ValueError(f"page_block_size (k_cache.shape[1]) must be a positive multiple of {PAGE_MULTIPLE}; got {cache_len}")
        if cache_rows < 1:
            raise ValueError("a paged cache needs at least one block")
        capacity = block_table.shape[1] * cache_len
    else:
        if cache_batch_idx is not None:
            _check_int_tensor(torch, "cache_batch_idx", cache_batch_idx, (B,), q_device)
            cache_batch_idx = cache_batch_idx.contiguous()
        elif cache_rows < B:
            raise ValueError(f"k_cache has {cache_rows} sequences and q {B}: pass cache_batch_idx to pick them")
        capacity = cache_len
    host_len = capacity if cache_seqlens is None else None
    if cache_seqlens is not None:
        if isinstance(cache_seqlens, bool) or not isinstance(cache_seqlens, (int, torch.Tensor)):
            raise TypeError(f"cache_seqlens must be an int, a (batch,) int32 tensor or None; got {type(cache_seqlens).__name__}")
        if isinstance(cache_seqlens, int):
            if not 0 <= cache_seqlens <= capacity:
                raise ValueError(f"cache_seqlens={cache_seqlens} is outside the cache's [0, {capacity}]")
            host_len = cache_seqlens
            cache_seqlens = torch.full((B,), cache_seqlens, dtype=torch.int32, device=q_device)
        _check_int_tensor(torch, "cache_seqlens", cache_seqlens, (B,), q_device)
        cache_seqlens = cache_seqlens.contiguous()
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or not 0 <= num_splits <= MAX_SPLITS:
        raise ValueError(f"num_splits must be an int in [0, {MAX_SPLITS}] (0: the heuristic); got {num_splits!r}")
    return cache_seqlens, cache_batch_idx, capacity, host_len


def _append(torch, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table, capacity):
    """Write k and v at rows cache_seqlens[b] .. + seqlen_new - 1 of each sequence, in place; returns
    the cache length before the append when every sequence has the same (the bounds check read it)."""
    B, n_new = k.shape[:2]
    if n_new == 0:
        return None
    low, high = torch.stack([cache_seqlens.min(), cache_seqlens.max()]).tolist()   # one sync
    if low < 0 or high + n_new > capacity:
        raise ValueError(f"appending {n_new} keys at cache_seqlens (min {low}, max {high}) needs rows up to "
                         f"{high + n_new}; the cache holds {capacity} (and no length may be negative)")
    pos = cache_seqlens.long()[:, None] + torch.arange(n_new, device=k.device)
    if block_table is not None:
        page_size = k_cache.shape[1]
        rows = (block_table.long().gather(1, pos // page_size), pos % page_size)
    else:
        batch = cache_batch_idx.long() if cache_batch_idx is not None else torch.arange(B, device=k.device)
        rows = (batch[:, None].expand(B, n_new), pos)
    k_cache.index_put_(rows, k)
    v_cache.index_put_(rows, v)
    return low if low == high else None


def _routes_to_hopper(capability, seqlen_q: int, seqlen_k: Optional[int], causal: bool, block_table,
                      cache_batch_idx) -> bool:
    """Whether a call takes _chunk_on_hopper: sm_90, a chunk of at least HOPPER_MIN_QUERIES queries, a
    contiguous cache read in batch order, one length for every sequence known to the host (no device
    sync is added for it), and (causal) no query row without a key."""
    return (capability == (9, 0) and seqlen_q >= HOPPER_MIN_QUERIES and block_table is None
            and cache_batch_idx is None and seqlen_k is not None and seqlen_k >= (seqlen_q if causal else 1))


def _chunk_on_hopper(torch, q, k_cache, v_cache, seqlen_k: int, causal: bool, scale: float):
    """(out (B, Nq, Hq, d), lse (B, Hq, Nq)) of a chunk on the `hopper` kernel, which reads strided
    (B, H, N, d) views, so the (B, N, H, d) cache is passed as it lies (no copy) and GQA is its own.

    Bottom-right causal is the kernel's band with causal_offset = seqlen_k - Nq (band.py): query i sees
    keys 0 .. P + i, P = seqlen_k - Nq. Key blocks wholly before the chunk's diagonal run unmasked, only
    the diagonal blocks take the compare, so one launch does the work of the two partial launches and
    the log-sum-exp merge this route used before the band existed (one bf16 rounding of O, not two)."""
    from . import cuda as attention_cuda

    B, Nq, Hq, d = q.shape
    out = torch.empty((B, Nq, Hq, d), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, Hq, Nq), dtype=torch.float32, device=q.device)
    kh, vh = (t[:B, :seqlen_k].transpose(1, 2) for t in (k_cache, v_cache))   # (B, Hkv, seqlen_k, d) views
    attention_cuda._launch(q.transpose(1, 2), kh, vh, None, causal, scale, "hopper", out=out.transpose(1, 2),
                           lse=lse, causal_offset=seqlen_k - Nq if causal else 0)
    return out, lse


def attention_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                           cache_seqlens: Optional[Union[int, "torch.Tensor"]] = None, cache_batch_idx=None,
                           cache_leftpad=None, block_table=None, softmax_scale: Optional[float] = None,
                           causal: bool = False, window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                           rotary_interleaved: bool = True, alibi_slopes=None, num_splits: int = 0,
                           return_softmax_lse: bool = False):
    """flash_attn_with_kvcache on sympathy's decode kernel; see the module docstring for every argument."""
    torch = cuda._torch()
    for name, value, default in (("rotary_cos", rotary_cos, None), ("rotary_sin", rotary_sin, None),
                                 ("cache_leftpad", cache_leftpad, None), ("alibi_slopes", alibi_slopes, None)):
        if value is not default:
            raise NotImplementedError(f"{name} is not supported by sympathy's decode kernel (pass None)")
    if tuple(window_size) != (-1, -1):
        raise NotImplementedError(f"window_size={tuple(window_size)}: sliding windows are not supported")
    if softcap != 0.0:
        raise NotImplementedError(f"softcap={softcap}: not supported")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool; got {type(causal).__name__}")
    if softmax_scale is not None and not (isinstance(softmax_scale, (int, float)) and math.isfinite(softmax_scale)):
        raise ValueError(f"softmax_scale must be a finite number or None; got {softmax_scale!r}")
    cache_seqlens, cache_batch_idx, capacity, host_len = _check_inputs(torch, q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx,
                                            block_table, num_splits)
    device = q.device
    index = cuda_build.device_index(device)
    capability, sm_count, arch = cuda_build.device_facts(index)
    if capability < (8, 0):
        raise NotSupportedError("the decode kernel needs compute capability 8.0 or newer (mma.sync on bf16)")
    B, Nq, Hq, d = q.shape
    Hkv = k_cache.shape[2]
    n_new = 0 if k is None else k.shape[1]
    if n_new:
        appended_at = _append(torch, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table, capacity)
        host_len = appended_at if host_len is None else host_len
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    q, scale, _ = cuda._kernel_q_and_scale(q, scale)
    if q.data_ptr() % 16 or any(s % 8 for s in q.stride()[:3]):
        q = q.contiguous()   # a misaligned view of the (small) queries is copied once

    seqlen_k = None if host_len is None else min(host_len + n_new, capacity)
    if _routes_to_hopper(capability, Nq, seqlen_k, causal, block_table, cache_batch_idx):
        out, lse = _chunk_on_hopper(torch, q, k_cache, v_cache, seqlen_k, causal, scale)
        return (out, lse) if return_softmax_lse else out

    packed = Hq // Hkv * Nq
    if num_splits == 0:
        blocks = B * Hkv * -(-packed // _rows_per_block(packed))
        num_splits = num_splits_heuristic(blocks, -(-capacity // KEY_TILE), sm_count)
    # Host time matters here (a decode step's kernels take tens of microseconds): two allocations,
    # pre-typed cffi casts, and the raw current stream. One float32 buffer holds lse, then (split) the
    # partial log-sum-exps and outputs; released on return while the kernels may still run, which is
    # safe on one stream (torch's allocator hands the block only to work queued after them).
    rows = B * Hq * Nq
    out = torch.empty((B, Nq, Hq, d), dtype=q.dtype, device=device)
    o_offset = -(-rows * (1 + num_splits) // 4) * 4   # floats; the partial outputs take float4 stores
    work = torch.empty(o_offset + num_splits * rows * d if num_splits > 1 else rows, dtype=torch.float32,
                       device=device)
    lse = work[:rows].view(B, Hq, Nq)
    ffi, lib = cuda.library(arch)
    voidp, floatp, intp = _ctypes(ffi)
    p = ffi.new("sy_decode_params *")
    p.q, p.k, p.v, p.o = (ffi.cast(voidp, t.data_ptr()) for t in (q, k_cache, v_cache, out))
    base = work.data_ptr()
    p.lse = ffi.cast(floatp, base)
    if num_splits > 1:
        p.partial_lse = ffi.cast(floatp, base + 4 * rows)
        p.partial_o = ffi.cast(floatp, base + 4 * o_offset)
    if block_table is not None and block_table.stride(1) != 1:
        block_table = block_table.contiguous()
    for field, t in (("cache_seqlens", cache_seqlens), ("cache_batch_idx", cache_batch_idx), ("block_table", block_table)):
        if t is not None:
            setattr(p, field, ffi.cast(intp, t.data_ptr()))
    for field, t in (("q_strides", q), ("k_strides", k_cache), ("v_strides", v_cache), ("o_strides", out)):
        getattr(p, field)[0:3] = t.stride()[:3]
    if block_table is not None:
        p.block_table_stride = block_table.stride(0)
        p.page_size = k_cache.shape[1]
    p.num_pages = k_cache.shape[0]
    p.batch, p.heads_q, p.heads_kv, p.seqlen_q, p.head_dim = B, Hq, Hkv, Nq, d
    p.seqlen_new = 0 if k is None else k.shape[1]
    p.capacity, p.num_splits = capacity, num_splits
    p.scale, p.is_causal = scale, int(causal)
    p.dtype = 2 if q.dtype == torch.bfloat16 else 1   # enum sy_attn_dtype
    status = cuda_build.launch_on(device, lib.sy_attn_decode_fwd, p)
    cuda._raise_for_status(status, lib, f"decode attention (B={B}, Hq={Hq}, Hkv={Hkv}, Nq={Nq}, d={d}, splits={num_splits})")
    return (out, lse) if return_softmax_lse else out
