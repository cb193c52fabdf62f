"""attn_mask tile by tile: the pre-pass that lets the fast kernels skip what a mask hides.

A boolean or additive mask broadcastable to (B, H, Nq, Nk), as torch's SDPA takes it (True / 0.0 takes
part, False / -inf does not, other values are added to the scaled scores). This module reads it once and
classifies every (query block, key block) tile of the kernel's own tile shape, per the mask's own batch
and head (a broadcast dim is never materialised):

    empty    every element False / -inf     not listed: never loaded, no MMA
    full     every element True / 0.0       the kernel's unmasked path, no per-score work
    partial  anything else                  the kernel reads the mask's elements for this tile

and lists, per (mask batch, mask head, query block), the listed key blocks in order as
`block << 2 | class` after their count (cuda_src/attention_mask.cuh reads the lists; attention_api.h
has the fields). The mask itself goes to the kernel by strides (stride 0 where it broadcasts, any last-dim
stride); a float16/bfloat16/float64 additive mask is converted to float32 first (a copy of the mask's own,
unbroadcast elements: the kernels read float32 and bool). Classification is torch ops at a 64 x 64 grain
(every kernel tile is a multiple of 64 in both axes): one read of the mask, then small tables.

With a band (band.py: a sliding window, a moved diagonal; (lo, hi) as attention_band.cuh's make_band)
the classes are the mask's intersected with the band's, grain by grain: empty if either is, full if both
are, partial otherwise. The band is the same for every batch and head, so the combined table keeps the
mask's broadcast dims; the kernels apply the band per score in a partial tile only (a full one is inside
it whole, an empty one never listed).

The lists of a mask are cached (a few entries, keyed by the tensor's storage, version, shape, strides):
the layers of a transformers model pass the same padding mask, and its pre-pass then runs once per
forward. Kernels (cuda.py picks): forward `mma` d 64/128 (64 x 64 tiles), `hopper` d 64/128 (128 x 128 tiles;
at d = 64 those of HopperTraitsD64Short, whose consumers hold the mask's loads without spilling); the backward on the
`hopper` backward on sm_90 (key-major lists of its tiles: 64 queries per 128 keys at d = 128, 128 x 128
at d = 64; dQ through shared memory) and on the mma backward elsewhere (64 x 128, atomic dQ).
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

GRAIN = 64
EMPTY, FULL, PARTIAL, ABSENT = 0, 1, 2, 3
# (kernel, head dim) -> (query rows, keys) per tile: attention_mma.cu's MmaTraitsD*Mask, hopper_traits.cuh's
# HopperTraitsD128 and HopperTraitsD64Short, and the backwards' tiles, whose lists are key-major: the mma backward's dkdv tile
# (kernel_traits.cuh MmaBwdDkdvTraitsD*: 128 keys per block, query tiles of 64) and the hopper backward's
# (hopper_bwd_pipeline.cuh HopperBwdTraits: 128 keys, query tiles of 64 at d = 128 and 128 at d = 64). The
# launchers refuse lists built for another shape.
FWD_TILES = {("mma", 64): (64, 64), ("mma", 128): (64, 64), ("hopper", 64): (128, 128), ("hopper", 128): (128, 128)}
BWD_TILES = {("mma", 64): (64, 128), ("mma", 128): (64, 128), ("hopper", 64): (128, 128), ("hopper", 128): (64, 128)}
MASK_KINDS = {"float32": 0, "bool": 1}   # attention_mask.cuh MaskKind
# A float mask reaches the kernels as mask / scale (they scale raw scores later): below this |scale| the
# quotient could overflow, and such calls stay on `naive`.
MIN_FLOAT_MASK_SCALE = 2.0 ** -100
# A float mask row whose largest element is finite but below this (a fully masked row in additive form:
# torch.finfo(dtype).min, -1e9) stays off the fused kernels. They keep a row's log-sum-exp in float32 log2
# units, max * log2 e + log2(sum): at |max| >= 2^14 the sum's own bits start to fall below the max's ulp
# (at finfo.min all of them do), so the backward's P = exp2(S - LSE) would be off by up to the sum itself,
# where torch (softmax in float32, every score swamped by the mask) gives a uniform row. -10000 (BERT's
# padding value) stays on the kernels: its ulp there is 2^-10 of a log2 unit.
FAR_ROW_MAX = -2.0 ** 14
_CACHE_ENTRIES = 2   # each entry keeps its mask alive (so no other tensor can take its storage and key)
_cache: "OrderedDict[tuple, dict]" = OrderedDict()   # key -> the mask's table and its lists per kernel


@dataclass
class MaskTiles:
    mask: object            # the element mask as the kernel reads it (float32 or bool), any strides
    kind: int               # MASK_KINDS
    mask_strides: tuple     # of mask expanded to (B, Hq, Nq, Nk): 0 where it broadcasts
    lists: object           # int32 (Bm, Hm, query blocks, 2 + key blocks): count, then entries
    list_strides: tuple     # batch, head, query block; 0 where the mask broadcasts
    block_q: int
    block_k: int
    source: object = None   # the attn_mask given (cached entries hold it: its data_ptr stays its own)


def tile_shape(kernel: str, head_dim: int, backward: bool = False):
    return (BWD_TILES if backward else FWD_TILES).get((kernel, head_dim))


def _grain(x, dim: int, fill: bool, reduce_all: bool):
    """x (bool) reduced over blocks of GRAIN along dim (any, or all when reduce_all); a dim of size 1 (a
    broadcast one) stays. The ragged end is padded with fill, which leaves the reduction unchanged."""
    import torch

    n = x.shape[dim]
    if n == 1:
        return x
    blocks = -(-n // GRAIN)
    pad = blocks * GRAIN - n
    x = x.to(torch.uint8)
    if pad:
        shape = list(x.shape)
        shape[dim] = pad
        x = torch.cat([x, x.new_full(shape, int(fill))], dim=dim)
    shape = list(x.shape)
    shape[dim:dim + 1] = [blocks, GRAIN]
    x = x.view(shape)
    return (x.amin(dim + 1) if reduce_all else x.amax(dim + 1)).bool()


def classify(view):
    """Per (mask batch, mask head, 64-row block, 64-key block) of `view` (the mask expanded to
    (B, Hq, Nq, Nk): stride 0 where it broadcasts) EMPTY, FULL or PARTIAL, uint8, read from the mask's own
    elements only: every broadcast dim is taken at index 0 and the table broadcast back."""
    import math

    import torch

    core = _own_elements(view)
    if core.dtype == torch.bool:
        visible, zero = core, core
    else:
        visible, zero = core != -math.inf, core == 0
    any_visible, all_zero = visible, zero
    for dim in (2, 3):
        any_visible = _grain(any_visible, dim, False, reduce_all=False)
        all_zero = _grain(all_zero, dim, True, reduce_all=True)
    cls = torch.where(any_visible, torch.where(all_zero, FULL, PARTIAL), EMPTY).to(torch.uint8)
    n_q, n_k = view.shape[2], view.shape[3]
    return cls.expand(cls.shape[0], cls.shape[1], -(-n_q // GRAIN), -(-n_k // GRAIN))


def band_classes(n_q: int, n_k: int, band, device=None):
    """Per (64-row block, 64-key block) of (Nq, Nk) the band's class, uint8 (tq, tk): EMPTY if no (i, j) of
    the block (inside Nq, Nk) has lo <= j - i <= hi, FULL if every one does. Over a rectangle j - i takes
    every value from (first key - last row) to (last key - first row), so two compares per block decide."""
    import torch

    lo, hi = band
    rows = torch.arange(0, n_q, GRAIN, device=device)
    keys = torch.arange(0, n_k, GRAIN, device=device)
    ahead_min = keys[None, :] - (rows + GRAIN).clamp(max=n_q)[:, None] + 1   # first key - last row
    ahead_max = (keys + GRAIN).clamp(max=n_k)[None, :] - 1 - rows[:, None]   # last key - first row
    empty = (ahead_max < lo) | (ahead_min > hi)
    full = (ahead_min >= lo) & (ahead_max <= hi)
    return torch.where(empty, EMPTY, torch.where(full, FULL, PARTIAL)).to(torch.uint8)


def combine(cls, band_cls):
    """A mask's class table (Bm, Hm, tq, tk) intersected with the band's (tq, tk): EMPTY if either is,
    FULL if both are, PARTIAL otherwise."""
    import torch

    empty = (cls == EMPTY) | (band_cls == EMPTY)
    full = (cls == FULL) & (band_cls == FULL)
    return torch.where(empty, EMPTY, torch.where(full, FULL, PARTIAL)).to(torch.uint8)


def band_excludes(band, n_q: int, n_k: int) -> bool:
    """band = (lo, hi) hides some (i, j) of (Nq, Nk): j - i spans 1 - Nq .. Nk - 1."""
    return band is not None and (band[0] > 1 - n_q or band[1] < n_k - 1)


def _own_elements(view):
    """view (the mask expanded to (B, Hq, Nq, Nk)) narrowed to index 0 along every broadcast dim."""
    core = view
    for dim in range(4):
        if view.stride(dim) == 0 and view.shape[dim] > 1:
            core = core.narrow(dim, 0, 1)
    return core


def far_rows(view) -> bool:
    """Whether a float mask (expanded view) has a row whose largest element is finite and below FAR_ROW_MAX
    (see there): such calls run on kernel='naive'. Reads the mask's own elements once."""
    import math

    import torch

    if view.dtype == torch.bool:
        return False
    row_max = _own_elements(view).amax(3)
    return bool(((row_max < FAR_ROW_MAX) & (row_max > -math.inf)).any())


def far_values(view) -> bool:
    """Whether a float mask (expanded view) has any finite element below FAR_ROW_MAX: without one no row can
    be far, whatever band hides part of it."""
    import math

    import torch

    if view.dtype == torch.bool:
        return False
    core = _own_elements(view)
    return bool(((core < FAR_ROW_MAX) & (core > -math.inf)).any())


def far_rows_in_band(view, band) -> bool:
    """far_rows of the mask with the band (lo, hi) folded in: a row whose largest element inside the band is
    finite and below FAR_ROW_MAX. The band makes the row max depend on the row, so rows are materialised,
    in chunks of about 2^24 elements (asked only of masks with far_values)."""
    import math

    import torch

    lo, hi = band
    core = view
    for dim in (0, 1):
        if view.stride(dim) == 0 and view.shape[dim] > 1:
            core = core.narrow(dim, 0, 1)
    Bm, Hm, n_q, n_k = core.shape
    step = max(1, (1 << 24) // max(1, Bm * Hm * n_k))
    keys = torch.arange(n_k, device=view.device)
    found = torch.zeros((), dtype=torch.bool, device=view.device)
    for r0 in range(0, n_q, step):
        rows = torch.arange(r0, min(r0 + step, n_q), device=view.device)
        ahead = keys[None, :] - rows[:, None]
        row_max = core[:, :, r0:r0 + step].masked_fill((ahead < lo) | (ahead > hi), -math.inf).amax(3)
        found |= ((row_max < FAR_ROW_MAX) & (row_max > -math.inf)).any()
    return bool(found)


def coarsen(cls, fq: int, fk: int):
    """A 64-grain class table combined into tiles of fq x fk grains: EMPTY if all are, FULL if all are,
    PARTIAL otherwise (grains past the end count as neither)."""
    import torch

    Bm, Hm, tq, tk = cls.shape
    TQ, TK = -(-tq // fq), -(-tk // fk)
    c = cls.new_full((Bm, Hm, TQ * fq, TK * fk), ABSENT)
    c[:, :, :tq, :tk] = cls
    c = c.view(Bm, Hm, TQ, fq, TK, fk)
    empty = ((c == EMPTY) | (c == ABSENT)).all(5).all(3)
    full = ((c == FULL) | (c == ABSENT)).all(5).all(3)
    return torch.where(empty, EMPTY, torch.where(full, FULL, PARTIAL)).to(torch.uint8)


def tile_lists(cls, first_not_partial: bool):
    """int32 (Bm, Hm, rows, 2 + blocks): [count, entries...], entries `block << 2 | class` of the listed
    (non-empty) blocks in order, then the empty ones (so a row with none lists block 0, empty, first).
    first_not_partial (hopper): a row's first entry is full (its first full block, moved to the front) or,
    with no full block, an empty block 0 put before the rest (one tile computed for nothing)."""
    import torch

    Bm, Hm, R, K = cls.shape
    c = cls.long()
    idx = torch.arange(K, device=cls.device)
    key = torch.where(c == EMPTY, 2, 1)
    has_full = (c == FULL).any(-1)
    if first_not_partial:
        first_full = torch.where(c == FULL, idx, K).amin(-1, keepdim=True)
        key = torch.where(idx == first_full, 0, key)
    order = torch.argsort(key, dim=-1, stable=True)
    entries = order * 4 + c.gather(-1, order)
    count = (c != EMPTY).sum(-1)
    entries = torch.cat([entries, entries.new_zeros(Bm, Hm, R, 1)], dim=-1)
    if first_not_partial:
        prepend = (count > 0) & ~has_full
        shifted = torch.cat([entries.new_zeros(Bm, Hm, R, 1), entries[..., :-1]], dim=-1)
        entries = torch.where(prepend.unsqueeze(-1), shifted, entries)
        count = count + prepend.long()
    return torch.cat([count.unsqueeze(-1), entries], dim=-1).to(torch.int32).contiguous()


def _cache_key(attn_mask, shape):
    try:
        version = attn_mask._version
    except RuntimeError:   # an inference tensor tracks no version: not cached
        return None
    return (attn_mask.data_ptr(), version, tuple(attn_mask.shape), attn_mask.stride(), attn_mask.dtype,
            str(attn_mask.device), tuple(shape))


def _entry(attn_mask, shape) -> dict:
    """attn_mask's cache entry for shape: the kernel's copy of the mask, its strides, its 64-grain class
    table and whether it has far rows (far_rows), built once per mask and shape."""
    import torch

    key = _cache_key(attn_mask, shape)
    entry = _cache.get(key) if key is not None else None
    if entry is None:
        mask = attn_mask
        if mask.dtype != torch.bool and mask.dtype != torch.float32:
            mask = mask.to(torch.float32)
        view = mask.expand(*shape)
        entry = {"source": attn_mask, "mask": mask, "strides": tuple(view.stride()), "cls": classify(view),
                 "far_rows": far_rows(view), "far_values": far_values(view)}
        if key is not None:
            _cache[key] = entry
            while len(_cache) > _CACHE_ENTRIES:
                _cache.popitem(last=False)
    else:
        _cache.move_to_end(key)
    return entry


def _band_key(band, shape):
    """band (lo, hi) as part of a cache key: None when it hides nothing at these lengths."""
    return tuple(int(x) for x in band) if band_excludes(band, shape[2], shape[3]) else None


def has_far_rows(attn_mask, shape, band=None) -> bool:
    """far_rows of attn_mask broadcast to shape = (B, Hq, Nq, Nk), with the band (lo, hi, band.band_bounds)
    folded in when given, from the cache entry prepare() uses."""
    entry = _entry(attn_mask, shape)
    band = _band_key(band, shape)
    if band is None or not entry["far_values"]:
        return entry["far_rows"] if band is None else False
    key = ("far_rows", band)
    if key not in entry:
        entry[key] = far_rows_in_band(entry["mask"].expand(*shape), band)
    return entry[key]


def prepare(attn_mask, shape, kernel: str, head_dim: int, backward: bool = False, band=None) -> MaskTiles:
    """The kernel's view of attn_mask (checked by cuda._check_inputs: bool or float, broadcastable to
    shape = (B, Hq, Nq, Nk)) for `kernel` at head_dim: the forward's query-major lists, or (backward) the
    key-major lists of that kernel's backward. The mask is classified once per cache entry; the forward's and the
    backward's lists both come from that table. band: (lo, hi) of band.band_bounds, or None: the classes are
    intersected with the band's (the kernel must get the same band: it applies it in partial tiles)."""
    import torch

    entry = _entry(attn_mask, shape)
    band = _band_key(band, shape)
    lists_key = (kernel, head_dim, backward, band)
    if lists_key not in entry:
        block_q, block_k = (BWD_TILES if backward else FWD_TILES)[(kernel, head_dim)]
        cls = entry["cls"]
        if band is not None:
            if ("cls", band) not in entry:
                entry[("cls", band)] = combine(cls, band_classes(shape[2], shape[3], band, cls.device))
            cls = entry[("cls", band)]
        cls = coarsen(cls, block_q // GRAIN, block_k // GRAIN)
        lists = tile_lists(cls.transpose(2, 3) if backward else cls, first_not_partial=kernel == "hopper" and not backward)
        if lists.numel() >= 2 ** 31:
            raise ValueError(f"attn_mask's tile lists would hold {lists.numel()} entries (int32 offsets): "
                             "too many (batch, head) mask planes at this length")
        list_strides = tuple(0 if lists.shape[i] == 1 else lists.stride(i) for i in range(3))
        mask = entry["mask"]
        entry[lists_key] = MaskTiles(mask=mask, kind=MASK_KINDS["bool" if mask.dtype == torch.bool else "float32"],
                                     mask_strides=entry["strides"], lists=lists, list_strides=list_strides,
                                     block_q=block_q, block_k=block_k, source=attn_mask)
    return entry[lists_key]


def fill_params(p, ffi, tiles: MaskTiles) -> None:
    """The mask fields of a sy_attn_params or sy_attn_bwd_params (attention_api.h)."""
    p.mask = ffi.cast(ffi.typeof(p.mask), tiles.mask.data_ptr())   # float * (forward), void * (backward)
    p.mask_strides[0:4] = list(tiles.mask_strides)
    p.mask_kind = tiles.kind
    p.mask_lists = ffi.cast("int *", tiles.lists.data_ptr())
    p.mask_list_strides[0:3] = list(tiles.list_strides)
    p.mask_block_q, p.mask_block_k = tiles.block_q, tiles.block_k
