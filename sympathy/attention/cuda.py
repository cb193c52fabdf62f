"""FlashAttention forward on the GPU: the CUDA kernels of cuda_src/ on torch tensors.

    sy.attention.cuda.scaled_dot_product_attention(q, k, v, None, 0.0, True)   # torch SDPA's signature
    out, lse = sy.attention.cuda.attention_with_lse(q, k, v, kernel="mma")      # + log-sum-exp
    sy.attention.cuda.build_all(["sm_80", "sm_90a"])                             # ahead of time
    out.sum().backward()          # differentiable (deterministic=True: no atomics)

Four kernels, a ladder (cuda_src/attention_{naive,tiled,mma,hopper}.cu):
    naive   S = QK^T, softmax and PV as three kernels, S and P in HBM (any head dim, attn_mask)
    tiled   one fused fp32 kernel, K/V tiles in shared memory, online softmax (d in 16, 32, 64, 128)
    mma     FlashAttention-2 class: tensor cores, ldmatrix, cp.async, P in registers (fp16/bf16, d 64/128)
    hopper  FlashAttention-3 class, sm_90 only: TMA, wgmma, a producer and two or three ping-ponging
            consumer warpgroups (fp16/bf16, d 64/128)
The band (band.py): `causal_offset` moves the causal diagonal (Nk - Nq: bottom-right, KV-cache prefill)
and `window=(left, right)` is a sliding window (flash-attn's window_size), natively in mma and hopper,
forward and backward, also beside an attn_mask (the mask's tiles intersected with the band's, mask_tiles.py);
naive takes it as a mask.
Backward (d = 64 or 128, no mask): FlashAttention-2's algorithm on tensor cores for fp16/bf16, with
wgmma and TMA after a `hopper` forward (cuda_src/attention_hopper_bwd.cu, FlashAttention-3 class) and
mma.sync otherwise or when deterministic in fp16 at d = 64 (cuda_src/attention_mma_bwd.cu); fp32 math on CUDA cores for
float32 (cuda_src/attention_bwd.cu); d = 256 (fp16/bf16, no mask, dropout or window, sm_90) on the mma.sync
backward; other calls take a torch-math backward.

The kernels are compiled by nvcc on first use, cached and loaded by cuda_build.py (one shared library
per GPU architecture); its names are importable from here too (cuda.build, cuda.library, ...). Launches
go on torch's current stream. torch is imported only when a function here is called: without it the
rest of sympathy works.
"""
import math
from typing import Optional, Tuple

from .._errors import NotSupportedError
from . import cuda_build, eager
from ._checks import check_dropout
from .band import NO_WINDOW, band_bounds, causal_bias_band, check_causal_offset, check_window, has_band, merge_mask
from .cuda_build import _raise_for_status, _torch, library
from .mask_tiles import FAR_ROW_MAX, MIN_FLOAT_MASK_SCALE, fill_params as _fill_mask_params, has_far_rows, \
    prepare as _prepare_mask, tile_shape
from .math_backward import math_backward as _math_backward

# The loader's other names, importable from here as before (the CLI, tests, scripts/ and benchmarks use
# cuda.build, cuda.build_all, cuda._libs, ...). A monkeypatch of the loader goes on cuda_build itself.
NVCC_FLAGS = cuda_build.NVCC_FLAGS
source_dir, sources, cache_dir = cuda_build.source_dir, cuda_build.sources, cuda_build.cache_dir
find_nvcc, nvcc_version = cuda_build.find_nvcc, cuda_build.nvcc_version
_check_arch, _gencode, _source_key = cuda_build._check_arch, cuda_build._gencode, cuda_build._source_key
compile_objects, build, build_all = cuda_build.compile_objects, cuda_build.build, cuda_build.build_all
_cdef, _libs = cuda_build._cdef, cuda_build._libs
device_arch = cuda_build.device_arch   # dropout.py, varlen.py and scripts/ ask cuda for it

KERNELS = ("naive", "tiled", "mma", "hopper")
TILED_HEAD_DIMS = (16, 32, 64, 128)
MMA_HEAD_DIMS = (64, 128)
HOPPER_HEAD_DIMS = (64, 128, 256)
BWD_HEAD_DIMS = (64, 128)   # attention_{mma_bwd,bwd}.cu; other head dims (and some masks): _math_backward
# d = 256 on the mma backward (attention_mma_bwd.cu, two warps per 16 keys: kernel_traits.cuh's
# MmaBwdDkdvTraitsD256): fp16/bf16, dense or causal (any causal_offset), GQA, deterministic or not, on GPUs
# that grant a block its 217 KiB of shared memory (sm_90; A100's 163 KiB would need smaller tiles). An
# attn_mask, dropout, a sliding window (a bounded left side), float32 or another GPU: _math_backward.
D256_BWD_CAPABILITIES = ((9, 0),)


def _d256_fused_backward(dtype, capability, attn_mask, window, dropout) -> bool:
    """A d = 256 backward runs fused (attention_mma_bwd.cu) rather than on _math_backward."""
    torch = _torch()
    return dtype in (torch.float16, torch.bfloat16) and tuple(capability) in D256_BWD_CAPABILITIES \
        and attn_mask is None and dropout is None and window[0] < 0
# The tensor-core backward's separate dQ pass (the deterministic mode: no atomics, S and dP computed
# twice) measured 7-17 % faster than the atomic dq_accum at N = 1024 and 0-5 % slower at N = 4096
# (H100, bf16, docs/attention-gpu.md): key sequences up to this length take it whatever
# `deterministic` says (and need no dq_accum).
SEPARATE_DQ_MAX_KEYS = 2048
# d = 256 on wgmma (attention_hopper_bwd256.cu: two warpgroups splitting the five GEMMs by gradient, dQ by
# atomics into a tile-major dq_accum) after a `hopper` forward, where _d256_fused_backward holds and the call is
# not deterministic: measured 1.02-1.38x the mma backward fwd+bwd (0.94-1.02x at N = 1024 causal, within that
# cell's spread) before its dQ adds went tile-major (+29-36 % more, docs/notes-attention-bwd.md, 2026-11-28d).
# Deterministic calls keep the mma backward's separate dQ pass: the wgmma kernel with dQ added in a fixed
# key-block order measured 0.68-0.84x of it (docs/notes-attention-bwd.md, session d256w21). False: the mma
# backward everywhere (for same-run comparisons, scripts/bwd256_device.py).
D256_HOPPER_BWD = True


def _d256_hopper_backward(kernel: str, deterministic: bool) -> bool:
    """A d = 256 backward that _d256_fused_backward sends to a fused kernel runs on the wgmma one."""
    return D256_HOPPER_BWD and kernel == "hopper" and not deterministic
_DTYPE_CODES = {"float32": 0, "float16": 1, "bfloat16": 2}   # enum sy_attn_dtype


# ---- input checks (before anything touches a device) ----------------------------------------------------
def _facts(t):
    """(compute capability, SM count, nvcc arch) of CUDA tensor t's device, asked once per process."""
    return cuda_build.device_facts(cuda_build.device_index(t.device))


def _on_hopper(t) -> bool:
    """t lives on an sm_90 GPU (H100/H200), where the `hopper` kernel runs."""
    return t.device.type == "cuda" and _facts(t)[0] == (9, 0)


def _mask_tiles_on(kernel: str, d: int) -> bool:
    """`kernel` takes attn_mask tile by tile at head dim d, forward and backward: mma and hopper at d 64/128."""
    return bool(tile_shape(kernel, d) or tile_shape(kernel, d, backward=True))


def _resolve_kernel(q, attn_mask, kernel: str, band: bool = False) -> str:
    """The kernel to run: "auto" resolved, and the kernel's dtype / head-dim / mask support checked.
    band: the call has a causal_offset or a window (mma and hopper take it, with or without attn_mask: the
    mask's tiles are intersected with the band's, mask_tiles.py; naive as a mask)."""
    torch = _torch()
    d = q.shape[-1]
    if kernel not in KERNELS + ("auto",):
        raise ValueError(f"kernel must be one of {KERNELS + ('auto',)}; got {kernel!r}")
    half = q.dtype in (torch.float16, torch.bfloat16)
    if kernel == "auto":
        if attn_mask is not None:   # tile by tile (mask_tiles.py) where a kernel takes it
            kernel = "naive"
            if half and q.device.type == "cuda":
                if _mask_tiles_on("hopper", d) and _on_hopper(q):
                    kernel = "hopper"
                elif tile_shape("mma", d) and _facts(q)[0] >= (8, 0):
                    kernel = "mma"
        elif half and d in HOPPER_HEAD_DIMS and _on_hopper(q):
            kernel = "hopper"
        elif half and d in MMA_HEAD_DIMS:
            kernel = "mma"
        elif d in TILED_HEAD_DIMS and not band:
            kernel = "tiled"
        else:
            kernel = "naive"
    if attn_mask is not None and kernel != "naive":
        if kernel not in ("mma", "hopper") or not _mask_tiles_on(kernel, d):
            raise NotImplementedError(f"attn_mask runs on kernel='mma' (d 64, 128), 'hopper' (d 64, 128) and 'naive'; "
                                      f"got kernel={kernel!r} with d={d}")
    if band and kernel == "tiled":
        raise NotImplementedError("window and causal_offset are supported by kernels 'mma', 'hopper' and 'naive'; "
                                  "got kernel='tiled'")
    if kernel == "tiled" and d not in TILED_HEAD_DIMS:
        raise ValueError(f"kernel='tiled' supports head dims {TILED_HEAD_DIMS}; got {d}")
    if kernel in ("mma", "hopper"):
        dims = MMA_HEAD_DIMS if kernel == "mma" else HOPPER_HEAD_DIMS
        if d not in dims:
            raise ValueError(f"kernel={kernel!r} supports head dims {dims}; got {d}")
        if not half:
            raise TypeError(f"kernel={kernel!r} needs float16 or bfloat16 inputs; got {q.dtype}")
    return kernel


def _check_inputs(q, k, v, attn_mask, is_causal, scale, enable_gqa, kernel, band: bool = False, *,
                  causal_offset: int = 0, window=NO_WINDOW) -> str:
    """Validate everything that can be validated without a device; return the kernel to run.
    band: the call has a causal_offset or a window (checked by band.py); with attn_mask the far-row check
    (mask_tiles.FAR_ROW_MAX) looks inside the band that causal_offset and window make."""
    torch = _torch()
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must have 4 dims (B, H, N, d); got shape {tuple(t.shape)}")
        if str(t.dtype).replace("torch.", "") not in _DTYPE_CODES:
            raise TypeError(f"{name} must be float32, float16 or bfloat16; got {t.dtype}")
        if t.shape[-1] > 1 and t.stride(-1) != 1:
            raise ValueError(f"{name} must be contiguous in its last dim; got stride {t.stride(-1)}")
        if min(t.shape) < 1:
            raise ValueError(f"{name} must have every dim >= 1; got shape {tuple(t.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must share one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    B, Hq, Nq, d = q.shape
    if k.shape[0] != B or v.shape[0] != B:
        raise ValueError(f"q, k and v must have the same batch size; got {q.shape[0]}, {k.shape[0]}, {v.shape[0]}")
    if k.shape[-1] != d or v.shape[-1] != d:
        raise ValueError(f"k and v must have q's head dim {d}; got {k.shape[-1]} and {v.shape[-1]}")
    if k.shape[1:3] != v.shape[1:3]:
        raise ValueError(f"k and v must have the same (heads, keys); got {tuple(k.shape[1:3])} and {tuple(v.shape[1:3])}")
    Hkv = k.shape[1]
    if Hkv != Hq and not enable_gqa:
        raise ValueError(f"k has {Hkv} heads and q {Hq}: pass enable_gqa=True for grouped-query attention")
    if Hq % Hkv != 0:
        raise ValueError(f"q's heads ({Hq}) must be a multiple of k's and v's heads ({Hkv})")
    if B > 65535 or Hq > 65535:
        raise ValueError(f"batch and heads must be <= 65535 (CUDA grid limit); got B={B}, H={Hq}")
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be a bool; got {type(is_causal).__name__}")
    if scale is not None and not (isinstance(scale, (int, float)) and math.isfinite(scale)):
        raise ValueError(f"scale must be a finite number or None; got {scale!r}")
    if attn_mask is not None:
        if not isinstance(attn_mask, torch.Tensor):
            raise TypeError(f"attn_mask must be a torch.Tensor or None; got {type(attn_mask).__name__}")
        if attn_mask.dtype != torch.bool and not attn_mask.is_floating_point():
            raise TypeError(f"attn_mask must be bool or floating point; got {attn_mask.dtype}")
        try:
            torch.broadcast_shapes(attn_mask.shape, (B, Hq, Nq, k.shape[2]))
        except RuntimeError:
            raise ValueError(f"attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to "
                             f"(B, H, Nq, Nk) = {(B, Hq, Nq, k.shape[2])}") from None
        if is_causal:
            raise ValueError("pass attn_mask or is_causal=True, not both (as torch's SDPA)")
        if attn_mask.requires_grad and torch.is_grad_enabled():
            raise NotImplementedError("attn_mask requires grad: the kernels give no gradient for the mask (torch's "
                                      "SDPA does); pass attn_mask.detach() if it is a constant")
    requested = kernel
    kernel = _resolve_kernel(q, attn_mask, kernel, band)
    if attn_mask is not None and kernel in ("mma", "hopper") and attn_mask.dtype != torch.bool \
            and scale is not None and abs(scale) < MIN_FLOAT_MASK_SCALE:
        if requested != "auto":   # the kernels add mask / scale (mask_tiles.py)
            raise NotImplementedError(f"a float attn_mask with |scale| < {MIN_FLOAT_MASK_SCALE} runs on kernel='naive' only")
        kernel = "naive"
    bounds = band_bounds(Nq, k.shape[2], is_causal, causal_offset, window or NO_WINDOW) if band else None
    if attn_mask is not None and kernel in ("mma", "hopper") and has_far_rows(attn_mask, (B, Hq, Nq, k.shape[2]), bounds):
        if requested != "auto":
            raise NotImplementedError(f"attn_mask has a row whose largest element is below {FAR_ROW_MAX:g} (a fully "
                                      "masked row in additive form, such as torch.finfo(dtype).min): the fused kernels "
                                      "lose such a row's sum in its log-sum-exp (mask_tiles.FAR_ROW_MAX); it runs on "
                                      "kernel='naive' (or pass a bool mask)")
        kernel = "naive"
    for name, t in (("q", q), ("k", k), ("v", v), ("attn_mask", attn_mask)):
        if t is not None and t.device.type != "cuda":
            raise ValueError(f"{name} must be on a CUDA device; got {t.device}")
    if not (q.device == k.device == v.device) or (attn_mask is not None and attn_mask.device != q.device):
        raise ValueError(f"all inputs must be on one device; got q {q.device}, k {k.device}, v {v.device}")
    return kernel


# ---- launch ---------------------------------------------------------------------------------------------
def _aligned_rows(t) -> bool:
    """cp.async moves 16 bytes and TMA needs 16-byte strides: every row of t must start on a
    16-byte boundary, its elements side by side (a gradient from out.sum() arrives expanded: stride 0)."""
    return t.data_ptr() % 16 == 0 and t.stride(-1) == 1 and all(s % 8 == 0 for s in t.stride()[:3])


# The smallest normal float32, 2^-126: what a zero scale reaches the kernels as (see _kernel_q_and_scale).
_TINY_SCALE = 2.0 ** -126


def _kernel_q_and_scale(q, scale: float):
    """(q, scale, dq_sign) as the kernels can take them. They mask raw scores q.k with -inf and
    subtract each row's largest raw score before scaling, which holds for scale > 0 only: a negative
    scale would exponentiate the farthest score from the maximum (overflow), and a zero one would
    make -inf * 0 = NaN. The scores scale * q.k are the same with -q and -scale (then dq changes
    sign); a zero scale becomes the smallest normal float32, whose product with any finite score
    leaves exp2 at exactly 1 (every unmasked key the same weight, as with 0) while -inf stays -inf."""
    if scale < 0:
        return -q, -scale, -1
    if scale == 0:
        return q, _TINY_SCALE, 1
    return q, scale, 1


def _set_band(p, causal_offset: int, window) -> None:
    """The band fields of a sy_attn_params or sy_attn_bwd_params (attention_api.h)."""
    p.causal_offset = causal_offset
    p.has_window = int(tuple(window) != NO_WINDOW)
    p.window_left, p.window_right = window


def _set_dropout(p, dropout) -> None:
    """The dropout fields of a sy_attn_params or sy_attn_bwd_params: (dropout_p, seed, offset) or None
    (dropout.py; ffi.new left them 0: no dropout)."""
    if dropout is not None:
        p.dropout_p, p.dropout_seed, p.dropout_offset = dropout


def _launch(q, k, v, attn_mask, is_causal: bool, scale: float, kernel: str, out=None, lse=None, *,
            causal_offset: int = 0, window=NO_WINDOW, dropout=None):
    """Run one kernel on checked inputs. out and lse may be given (the tests pass NaN-poisoned
    buffers, contiguous, of the right shape and dtype, to catch elements a kernel fails to write).

    causal_offset, window: the band (band.py), checked by band.check_causal_offset/check_window: row i
    sees keys i + causal_offset - left .. i + causal_offset + right (is_causal: right = 0). mma and
    hopper take it natively; naive as a mask. A row that sees no key gives 0 and an LSE of -inf."""
    torch = _torch()
    capability, _, arch = _facts(q)
    if kernel == "naive" and has_band(causal_offset, window):
        attn_mask = merge_mask(attn_mask, q.shape[2], k.shape[2], is_causal, causal_offset, window, q.device)
        is_causal, causal_offset, window = False, 0, NO_WINDOW
    q, scale, _ = _kernel_q_and_scale(q, scale)
    if kernel == "mma":
        if capability < (8, 0):
            raise NotSupportedError(f"kernel='mma' needs compute capability 8.0 or newer; this GPU is {arch}")
        # A view whose rows are not 16-byte aligned is copied once rather than refused.
        q, k, v = (t if _aligned_rows(t) else t.contiguous() for t in (q, k, v))
    if kernel == "hopper":
        if not _on_hopper(q):
            raise NotSupportedError(f"kernel='hopper' needs an sm_90 GPU (H100/H200: TMA, wgmma); this GPU is {arch}")
        # TMA needs 16-byte aligned bases and strides: a misaligned view is copied once (as for mma).
        q, k, v = (t if _aligned_rows(t) else t.contiguous() for t in (q, k, v))
    ffi, lib = library(arch)
    B, Hq, Nq, d = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    if out is None:
        out = torch.empty((B, Hq, Nq, d), dtype=q.dtype, device=q.device)
    if lse is None:
        lse = torch.empty((B, Hq, Nq), dtype=torch.float32, device=q.device)
    # The mask copy and the naive workspace are released when this returns, while the kernels may
    # still run: safe, because torch's caching allocator hands a freed block only to work queued
    # later on the same stream, which runs after these kernels.
    p = ffi.new("sy_attn_params *")
    p.q, p.k, p.v = (ffi.cast("void *", t.data_ptr()) for t in (q, k, v))
    p.o = ffi.cast("void *", out.data_ptr())
    p.lse = ffi.cast("float *", lse.data_ptr())
    for field, t in (("q_strides", q), ("k_strides", k), ("v_strides", v), ("o_strides", out)):
        getattr(p, field)[0:3] = list(t.stride()[:3])
    if attn_mask is not None and kernel in ("mma", "hopper"):   # tile by tile (mask_tiles.py), with the band
        bounds = band_bounds(Nq, Nk, is_causal, causal_offset, window) if has_band(causal_offset, window) else None
        mask_tiles = _prepare_mask(attn_mask, (B, Hq, Nq, Nk), kernel, d, band=bounds)
        _fill_mask_params(p, ffi, mask_tiles)
    elif attn_mask is not None:
        if attn_mask.dtype == torch.bool:   # True takes part (torch's convention)
            attn_mask = torch.zeros(attn_mask.shape, dtype=torch.float32, device=q.device).masked_fill_(~attn_mask, -math.inf)
        mask = attn_mask.to(torch.float32).expand(B, Hq, Nq, Nk)
        p.mask = ffi.cast("float *", mask.data_ptr())
        p.mask_strides[0:4] = list(mask.stride())
    if kernel == "naive":
        workspace = torch.empty(B * Hq * Nq * Nk, dtype=torch.float32, device=q.device)
        p.workspace = ffi.cast("float *", workspace.data_ptr())
    if kernel == "hopper":   # the persistent grid's tile counter (the launcher zeroes it on the stream)
        tile_counter = torch.empty(1, dtype=torch.int32, device=q.device)
        p.tile_counter = ffi.cast("int *", tile_counter.data_ptr())
    p.batch, p.heads_q, p.heads_kv, p.seqlen_q, p.seqlen_k, p.head_dim = B, Hq, Hkv, Nq, Nk, d
    p.scale = scale
    p.is_causal = int(is_causal)
    _set_band(p, causal_offset, window)
    _set_dropout(p, dropout)
    p.dtype = _DTYPE_CODES[str(q.dtype).replace("torch.", "")]
    status = cuda_build.launch_on(q.device, getattr(lib, f"sy_attn_{kernel}_fwd"), p)
    _raise_for_status(status, lib, f"attention kernel {kernel!r} (B={B}, H={Hq}, Nq={Nq}, Nk={Nk}, d={d})")
    return out, lse


def _hopper_backward_takes(dtype, d: int, deterministic: bool, dropout: bool, masked: bool, band: bool) -> bool:
    """After a `hopper` forward (fp16/bf16, d 64/128, a mask tile by tile), whether attention_hopper_bwd.cu
    has this call's instantiation; the mma backward runs the others. Deterministic where its dQ goes through
    shared memory (bf16, or d = 128: its key blocks add each query tile in a fixed order); fp16 at d = 64
    takes the mma backward's pass. Dropout at d 64 and 128 with any band; dropout with a mask at d = 128 only,
    and with no band (a mask, a band and dropout together: the mma backward; the hopper instantiation spilled
    4-12 bytes, docs/notes-dropout.md, session dropwin20)."""
    torch = _torch()
    if deterministic and not (dtype == torch.bfloat16 or d == 128):
        return False
    if dropout and masked and d == 64:
        return False
    return not (dropout and masked and band)


def _launch_bwd(dout, q, k, v, out, lse, attn_mask, is_causal: bool, scale: float, deterministic: bool,
                kernel: str = "mma", *, causal_offset: int = 0, window=NO_WINDOW, dropout=None):
    """(dq, dk, dv) in the inputs' dtype: for fp16/bf16 attention_hopper_bwd.cu (wgmma, sm_90) after a
    `hopper` forward unless deterministic, else attention_mma_bwd.cu (mma.sync); attention_bwd.cu (fp32
    math) for float32; attn_mask (fp16/bf16, d 64/128, with or without a band, not deterministic) tile by tile on the
    hopper backward after a `hopper` call, on the mma backward otherwise (mask_tiles.py); d = 256 where
    _d256_fused_backward says on attention_hopper_bwd256.cu (wgmma) after a `hopper` forward unless
    deterministic (_d256_hopper_backward), else on the mma backward; _math_backward for other masks and head dims, and for a
    band (causal_offset, window: as _launch) in float32."""
    torch = _torch()
    B, Hq, Nq, d = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    band = has_band(causal_offset, window)
    bounds = band_bounds(Nq, Nk, is_causal, causal_offset, window) if band else None
    # attn_mask: tile by tile (mask_tiles.py) on the hopper backward after a `hopper` call (dQ through shared
    # memory), on the mma backward otherwise (atomic dQ), else the math backward (deterministic: neither
    # kernel orders a masked dQ; a mask with far rows, mask_tiles.FAR_ROW_MAX: its forward ran on naive).
    # With dropout too (dropout.dropout_reason keeps the calls no kernel serves, deterministic ones included,
    # off the fused dropout).
    mask_tiles = attn_mask is not None and q.dtype in (torch.float16, torch.bfloat16) \
        and tile_shape("mma", d, True) and not deterministic \
        and (attn_mask.dtype == torch.bool or abs(scale) >= MIN_FLOAT_MASK_SCALE) \
        and not has_far_rows(attn_mask, (B, Hq, Nq, Nk), bounds)
    d256 = d == 256 and q.device.type == "cuda" and _d256_fused_backward(
        q.dtype, _facts(q)[0], attn_mask, window, dropout)
    if (attn_mask is not None and not mask_tiles) or (d not in BWD_HEAD_DIMS and not d256) \
            or (band and q.dtype == torch.float32):
        if dropout is not None:   # dropout.dropout_reason keeps such calls off the fused dropout
            raise NotImplementedError("the torch-math backward has no dropout")
        return _math_backward(dout, q, k, v, out, lse, attn_mask, is_causal, scale, causal_offset=causal_offset,
                              window=window, rows_complete=True)
    q, scale, dq_sign = _kernel_q_and_scale(q, scale)
    tensor_cores = q.dtype in (torch.float16, torch.bfloat16)
    if tensor_cores:   # cp.async reads 16-byte row chunks: a misaligned view is copied once
        q, k, v, dout = (t if _aligned_rows(t) else t.contiguous() for t in (q, k, v, dout))
    elif dout.stride(-1) != 1:
        dout = dout.contiguous()
    ffi, lib = library(_facts(q)[2])
    grads = [torch.empty(t.shape, dtype=q.dtype, device=q.device) for t in (q, k, v)]
    f32 = dict(dtype=torch.float32, device=q.device)
    # Workspaces (attention_api.h says which family needs which). Released on return while the
    # kernels may still run: safe on one stream (see _launch).
    hopper = tensor_cores and kernel == "hopper" and (attn_mask is None or mask_tiles) and not d256 \
        and _hopper_backward_takes(q.dtype, d, deterministic, dropout is not None, attn_mask is not None, band)
    hopper256 = d256 and _d256_hopper_backward(kernel, deterministic)
    if tensor_cores:
        # The hopper backwards have no separate dQ pass: they accumulate dQ into dq_accum at every length.
        deterministic = deterministic or (not hopper and not hopper256 and attn_mask is None
                                          and Nk <= SEPARATE_DQ_MAX_KEYS)
    p = ffi.new("sy_attn_bwd_params *")
    for field, t in (("q", q), ("k", k), ("v", v), ("o", out), ("dout", dout),
                     ("dq", grads[0]), ("dk", grads[1]), ("dv", grads[2])):
        setattr(p, field, ffi.cast("void *", t.data_ptr()))
        getattr(p, f"{field}_strides")[0:3] = list(t.stride()[:3])
    # Held until the kernels ran: a temporary copy of a sliced lse (the ring's) went back to the allocator at once,
    # and the workspaces below reused it (the preprocess overwrote the LSE: tests/test_attention_gpu_backward.py).
    lse = lse.contiguous()
    p.lse = ffi.cast("float *", lse.data_ptr())
    p.batch, p.heads_q, p.heads_kv, p.seqlen_q, p.seqlen_k, p.head_dim = B, Hq, Hkv, Nq, Nk, d
    p.scale, p.is_causal, p.deterministic = scale, int(is_causal), int(deterministic)
    _set_band(p, causal_offset, window)
    if attn_mask is not None:
        mask = _prepare_mask(attn_mask, (B, Hq, Nq, Nk), "hopper" if hopper else "mma", d, backward=True, band=bounds)
        _fill_mask_params(p, ffi, mask)
    _set_dropout(p, dropout)
    p.dtype = _DTYPE_CODES[str(q.dtype).replace("torch.", "")]
    if tensor_cores:
        # Rows a head: the hopper kernel's own count (whole query tiles of the launch the parameters above pick).
        rows = lib.sy_attn_hopper_bwd_rows(p) if hopper else -(-Nq // lib.SY_ATTN_BWD_ROW_ALIGN) * lib.SY_ATTN_BWD_ROW_ALIGN
        delta, lse_log2 = torch.empty((B, Hq, rows), **f32), torch.empty((B, Hq, rows), **f32)
        if hopper or hopper256:   # whole query tiles (tile-major), then the deterministic mode's per-tile counters
            dq_accum = torch.empty(B * Hq * rows * d + (B * Hq * rows // 64 if deterministic else 0), **f32)
        else:
            dq_accum = None if deterministic else torch.empty((B, Hq, Nq, d), **f32)
        dk_accum, dv_accum = (None, None) if Hq == Hkv else (torch.empty((B, Hq, Nk, d), **f32) for _ in range(2))
    else:
        delta, lse_log2 = torch.empty((B, Hq, Nq), **f32), None
        dq_accum = torch.empty((B, Hq, Nq, d), **f32)
        dk_accum, dv_accum = (torch.empty((B, Hq, Nk, d), **f32) for _ in range(2))
    for field, t in (("dq_accum", dq_accum), ("dk_accum", dk_accum), ("dv_accum", dv_accum), ("delta", delta),
                     ("lse_log2", lse_log2)):
        setattr(p, field, ffi.NULL if t is None else ffi.cast("float *", t.data_ptr()))
    launch = lib.sy_attn_hopper_bwd if hopper else lib.sy_attn_hopper_bwd256 if hopper256 \
        else lib.sy_attn_mma_bwd if tensor_cores else lib.sy_attn_tiled_bwd
    status = cuda_build.launch_on(q.device, launch, p)
    _raise_for_status(status, lib, f"attention backward (B={B}, H={Hq}, Nq={Nq}, Nk={Nk}, d={d})")
    if dq_sign < 0:
        grads[0].neg_()
    return tuple(grads)


_op = None


def _attention_op():
    """torch.ops.sympathy.attention_fwd with its backward (torch.ops.sympathy.attention_bwd) registered,
    on first use (so torch stays an optional import). Both have fake impls: torch.compile traces
    forward and backward."""
    global _op
    if _op is not None:
        return _op
    torch = _torch()

    # The band's three ints come last with defaults, so callers of the older eight-argument form still fit.
    @torch.library.custom_op("sympathy::attention_fwd", mutates_args=())
    def attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: Optional[torch.Tensor],
                      is_causal: bool, scale: float, kernel: str, deterministic: bool, causal_offset: int = 0,
                      window_left: int = -1, window_right: int = -1) -> Tuple[torch.Tensor, torch.Tensor]:
        return _launch(q, k, v, attn_mask, is_causal, scale, kernel, causal_offset=causal_offset,
                       window=(window_left, window_right))

    @attention_fwd.register_fake
    def _(q, k, v, attn_mask, is_causal, scale, kernel, deterministic, causal_offset=0, window_left=-1, window_right=-1):
        B, Hq, Nq, d = q.shape
        return q.new_empty((B, Hq, Nq, d)), q.new_empty((B, Hq, Nq), dtype=torch.float32)

    @torch.library.custom_op("sympathy::attention_bwd", mutates_args=())
    def attention_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                      lse: torch.Tensor, attn_mask: Optional[torch.Tensor], is_causal: bool, scale: float,
                      deterministic: bool, kernel: str, causal_offset: int = 0, window_left: int = -1,
                      window_right: int = -1) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return _launch_bwd(dout, q, k, v, out, lse, attn_mask, is_causal, scale, deterministic, kernel,
                           causal_offset=causal_offset, window=(window_left, window_right))

    @attention_bwd.register_fake
    def _(dout, q, k, v, out, lse, attn_mask, is_causal, scale, deterministic, kernel, causal_offset=0,
          window_left=-1, window_right=-1):
        return torch.empty_like(q, memory_format=torch.contiguous_format), \
            torch.empty_like(k, memory_format=torch.contiguous_format), \
            torch.empty_like(v, memory_format=torch.contiguous_format)

    def setup_context(ctx, inputs, output):
        q, k, v, attn_mask, is_causal, scale, kernel, deterministic, *band = inputs
        out, lse = output
        ctx.save_for_backward(q, k, v, out, lse, attn_mask)
        ctx.is_causal, ctx.scale, ctx.deterministic, ctx.kernel = is_causal, scale, deterministic, kernel
        ctx.band, ctx.n_inputs = tuple(band) + (0, -1, -1)[len(band):], len(inputs)
        ctx.mark_non_differentiable(lse)   # a statistic of the forward: gradients flow through out

    def backward(ctx, grad_out, _grad_lse):
        q, k, v, out, lse, attn_mask = ctx.saved_tensors
        dq, dk, dv = torch.ops.sympathy.attention_bwd(grad_out, q, k, v, out, lse, attn_mask,
                                                      ctx.is_causal, ctx.scale, ctx.deterministic, ctx.kernel,
                                                      *ctx.band)
        return (dq, dk, dv) + (None,) * (ctx.n_inputs - 3)

    attention_fwd.register_autograd(backward, setup_context=setup_context)
    _op = attention_fwd
    return _op


_eager_function = None


def _run_eager(q, k, v, attn_mask, is_causal: bool, scale: float, kernel: str, deterministic: bool, window,
               causal_offset: int, dropout=None):
    """(out, lse) of a checked call that eager.untraced lets skip the custom ops: _launch itself without
    autograd, eager.attention_function with it. dropout: (p, seed, offset) as _launch takes it, or None."""
    global _eager_function
    torch = _torch()
    if not eager.needs_autograd(torch, q, k, v):
        return _launch(q, k, v, attn_mask, is_causal, scale, kernel, causal_offset=causal_offset, window=window,
                       dropout=dropout)
    if _eager_function is None:
        _eager_function = eager.attention_function(torch, _launch, _launch_bwd)
    return _eager_function.apply(q, k, v, attn_mask, is_causal, scale, kernel, deterministic, causal_offset,
                                 tuple(window), dropout)


def _run_checked(q, k, v, attn_mask, is_causal: bool, scale: float, kernel: str, deterministic: bool,
                 window=NO_WINDOW, causal_offset: int = 0):
    """(out, lse) of a call that _check_inputs passed (kernel: the one it picked): eager calls skip the
    custom op's dispatch (_run_eager; eager.py says why); under torch.compile, export, a dispatch mode or
    functorch, torch.ops.sympathy.attention_fwd."""
    if eager.untraced(_torch(), q, k, v, attn_mask):
        return _run_eager(q, k, v, attn_mask, is_causal, scale, kernel, deterministic, window, causal_offset)
    if not has_band(causal_offset, window):   # the eight-argument form: the graph of an unbanded call is what it was
        return _attention_op()(q, k, v, attn_mask, is_causal, scale, kernel, deterministic)
    return _attention_op()(q, k, v, attn_mask, is_causal, scale, kernel, deterministic, causal_offset, *window)


def attention_with_lse(q, k, v, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False, *,
                       scale: Optional[float] = None, enable_gqa: bool = False, kernel: str = "auto",
                       deterministic: Optional[bool] = None, window: Optional[Tuple[int, int]] = None,
                       causal_offset: int = 0):
    """(out, lse): attention and each query row's natural-log log-sum-exp of its scaled scores.

    Signature as torch's SDPA. dropout_p > 0 runs the fused dropout of dropout.py (mma and hopper,
    fp16/bf16, d 64/128, any band (window, causal_offset), an attn_mask tile by tile (with a band too) but
    not deterministic; NotImplementedError naming the reason otherwise); lse is then the undropped
    softmax's. lse has shape (B, H, Nq), float32, not differentiable; out is contiguous, q's dtype, and
    differentiable in q, k, v (see scaled_dot_product_attention for `deterministic`, `window` and
    `causal_offset`). A stable entry for callers that build on the kernels (KV-cache prefill:
    is_causal=True, causal_offset=Nk - Nq; ring attention: the LSE).
    """
    dropout_p = check_dropout(dropout_p)
    if deterministic is None:
        deterministic = _torch().are_deterministic_algorithms_enabled()
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic must be a bool or None; got {type(deterministic).__name__}")
    window, causal_offset = check_window(window), check_causal_offset(causal_offset)
    if hasattr(q, "shape") and hasattr(k, "shape") and len(q.shape) == 4 and len(k.shape) == 4:
        bias_offset = causal_bias_band(attn_mask, is_causal, q.shape[2], k.shape[2])
        if bias_offset is not None:   # torch's causal_upper_left / causal_lower_right: the band, no mask
            if causal_offset:
                raise ValueError("pass causal_offset or a CausalBias attn_mask, not both")
            attn_mask, is_causal, causal_offset = None, True, bias_offset
    band = has_band(causal_offset, window)
    kernel = _check_inputs(q, k, v, attn_mask, is_causal, scale, enable_gqa, kernel, band,
                           causal_offset=causal_offset, window=window)
    if dropout_p > 0.0:   # dropout.py: a call it cannot take is refused before any kernel runs
        from . import dropout

        reason = dropout.dropout_reason(q, k, v, attn_mask, dropout_p, kernel, window, causal_offset, deterministic)
        if reason is not None:
            raise NotImplementedError(f"{reason}; sy.attention.scaled_dot_product_attention runs torch's SDPA for it")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    if dropout_p > 0.0:
        return dropout.attention(q, k, v, dropout_p, is_causal, scale, kernel, deterministic=deterministic,
                                 window=window, causal_offset=causal_offset, attn_mask=attn_mask)
    return _run_checked(q, k, v, attn_mask, is_causal, float(scale), kernel, deterministic, window, causal_offset)


def scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False, *,
                                 scale: Optional[float] = None, enable_gqa: bool = False, kernel: str = "auto",
                                 deterministic: Optional[bool] = None, window: Optional[Tuple[int, int]] = None,
                                 causal_offset: int = 0):
    """torch.nn.functional.scaled_dot_product_attention, forward and backward, on sympathy's CUDA kernels.

    CUDA tensors only (sy.attention.scaled_dot_product_attention takes every device); torch's
    signature; dropout_p > 0 as attention_with_lse says.

    q (B, Hq, Nq, d), k and v (B, Hkv, Nk, d): CUDA tensors, float32/float16/bfloat16, any strides
    whose last dim is contiguous. is_causal is top-left aligned (row i sees keys 0..i) as torch's;
    enable_gqa lets Hq be a multiple of Hkv. attn_mask (bool: True takes part, or additive float),
    broadcastable to (B, Hq, Nq, Nk) (broadcast dims and any strides read in place), runs tile by tile
    on "mma" (d 64, 128) and "hopper" (d 64, 128): mask_tiles.py lists each
    query block's key tiles, empty ones are never loaded, full ones run unmasked, only mixed ones read the
    mask; other calls with a mask run on "naive". kernel="auto" picks "hopper" on an sm_90 GPU (d = 64, 128 or 256; with a mask d =
    64 or 128) and "mma" elsewhere for fp16/bf16 at d = 64 or 128, "tiled" for other supported head dims,
    "naive" otherwise. A row whose keys are all masked gives 0 (LSE -inf), as torch's SDPA.

    Differentiable: the backward (for fp16/bf16 cuda_src/attention_hopper_bwd.cu (wgmma, TMA) after a
    `hopper` forward, cuda_src/attention_mma_bwd.cu (mma.sync) otherwise; cuda_src/attention_bwd.cu in
    fp32 for float32) recomputes P from the saved log-sum-exp and accumulates dQ in fp32 by adds at L2 (the
    mma backward only above SEPARATE_DQ_MAX_KEYS keys), so two runs may differ in the last bits.
    deterministic=True makes runs bit-identical: the hopper backward (bf16, or d = 128) adds each query
    tile's dQ from its key blocks in a fixed order; otherwise the mma backward computes dQ in a separate
    pass without atomics (within 5 % of its atomic time); None (the default) follows
    torch.use_deterministic_algorithms. A masked call's backward runs tile by tile on the hopper backward
    after kernel "hopper" (d 64/128) and on the mma backward otherwise (fp16/bf16, d 64/128, atomic dQ);
    d = 256 runs on the mma backward (fp16/bf16 on sm_90, dense or causal, no mask, dropout or sliding
    window); deterministic masked calls, other masks and head dims, and d = 256 otherwise take a
    torch-math backward (same algorithm, materialises P).

    The band (band.py), keyword-only, ours: window=(left, right) is sliding-window attention as
    flash-attn's window_size (-1: unbounded side; with is_causal the right side is 0), and
    causal_offset moves the diagonal: row i sees keys i + causal_offset - left .. i + causal_offset +
    right. causal_offset=0 is torch's top-left; Nk - Nq bottom-right (flash-attn's alignment). attn_mask
    may be torch's causal_upper_left / causal_lower_right (a CausalBias): it runs as the band, no mask.
    mma and hopper take the band natively, forward and backward (key blocks outside it never loaded);
    naive as a mask; tiled not. With an attn_mask too, mma and hopper take both tile by tile (a tile is
    skipped if the mask or the band hides it all, unmasked if both show it all). A row that sees no key
    gives 0, as torch's SDPA.
    """
    return attention_with_lse(q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa,
                              kernel=kernel, deterministic=deterministic, window=window,
                              causal_offset=causal_offset)[0]
