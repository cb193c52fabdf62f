"""attn_mask together with a band (a sliding window, a moved causal diagonal) on the fast kernels: the
pre-pass classifies every tile by the mask and the band together (mask_tiles.py: band_classes, combine),
the kernels test the band per score in partial tiles only (cuda_src/attention_mask.cuh, in_band).

CPU (CI): band.band_bounds against the band's definition, the combined tile classes and lists against a
brute-force loop over the merged mask (band.merge_mask), the band in the lists' cache key, far rows inside
the band, the routing. GPU (marked `gpu`): mma and hopper, forward into NaN-poisoned buffers and gradients
(our kernel backward, never the torch-math one) against float64 with the merged mask; hypothesis over
shapes, GQA, windows and offsets; ragged lengths over many blocks, rows that see no key.
"""
import math

import pytest

torch = pytest.importorskip("torch")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

import sympathy as sy  # noqa: E402
from sympathy.attention import band, cuda, mask_tiles  # noqa: E402
from sympathy.attention.torch_api import decide  # noqa: E402

from test_attention_gpu import make_inputs, reference, skip_unless_runnable  # noqa: E402
from test_attention_gpu_backward import relative_error  # noqa: E402
from test_attention_mask_tiles import MASK_KERNELS, brute_classes, check_mask_call, draw_masked_inputs, \
    random_mask  # noqa: E402


def draw_band(draw, Nq, Nk):
    """(causal_offset, window): offsets 0 / bottom-right / any, sides -1 / 0 / small / past N / any."""
    offset = draw(st.sampled_from([0, Nk - Nq, draw(st.integers(-Nq - 5, Nk + 5))]))
    side = st.sampled_from([-1, 0, 1, 63, 64, 130, Nq + Nk + 7, draw(st.integers(0, 400))])
    return offset, (draw(side), draw(side))


def merged(mask, shape, offset, window):
    """The mask broadcast to shape with the band folded in (the naive kernel's view of the call)."""
    return band.merge_mask(mask.expand(*shape), shape[2], shape[3], False, offset, window, mask.device)


# ---- CPU: the bounds, the classes, the lists, the routing --------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_band_bounds_are_the_band(data):
    """(lo, hi) of band_bounds see exactly band_mask's keys, inside make_band's clamp [-(Nq + 1), Nk]."""
    Nq, Nk = data.draw(st.integers(1, 70)), data.draw(st.integers(1, 70))
    offset, window = draw_band(data.draw, Nq, Nk)
    is_causal = data.draw(st.booleans())
    lo, hi = band.band_bounds(Nq, Nk, is_causal, offset, window)
    assert -(Nq + 1) <= lo <= hi <= Nk
    ahead = torch.arange(Nk)[None, :] - torch.arange(Nq)[:, None]
    assert torch.equal((ahead >= lo) & (ahead <= hi), band.band_mask(Nq, Nk, is_causal, offset, window))


@pytest.mark.parametrize("Nq, Nk", [(1, 1), (63, 200), (64, 64), (65, 129), (200, 70), (130, 130)])
def test_band_classes_match_a_brute_force_loop(Nq, Nk):
    """Every offset that moves the band across these lengths, with windows of every kind: the band's own
    class per 64-grain against the elements of band_mask (ragged ends: only elements inside Nq, Nk count)."""
    for offset in range(-Nq - 2, Nk + 3, 7):
        for window in [(-1, 0), (0, 0), (0, -1), (1, 1), (63, 0), (64, 0), (65, 3), (-1, 64), (130, 130)]:
            bounds = band.band_bounds(Nq, Nk, False, offset, window)
            want = brute_classes(band.band_mask(Nq, Nk, False, offset, window)[None, None], 64, 64)[0, 0]
            assert torch.equal(mask_tiles.band_classes(Nq, Nk, bounds), want), (offset, window)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_mask_and_band_classes_match_a_brute_force_loop(data):
    B, H = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3))
    Nq, Nk = data.draw(st.integers(1, 300)), data.draw(st.integers(1, 300))
    mask = random_mask(data.draw, B, H, Nq, Nk)
    offset, window = draw_band(data.draw, Nq, Nk)
    bounds = band.band_bounds(Nq, Nk, False, offset, window)
    view = mask.expand(B, H, Nq, Nk)
    bq, bk = data.draw(st.sampled_from([(64, 64), (128, 128), (64, 128)]))
    got = mask_tiles.coarsen(mask_tiles.combine(mask_tiles.classify(view), mask_tiles.band_classes(Nq, Nk, bounds)),
                             bq // 64, bk // 64)
    want = brute_classes(merged(mask, (B, H, Nq, Nk), offset, window).contiguous(), bq, bk)
    # Exact, but for one case the 64-grain cannot see: a grain the mask and the band each show in part may show
    # nothing once both apply (the mask's visible elements all outside the band). It is then listed as partial
    # (computed, every score -inf: slower, never wrong); an empty or full class is never claimed wrongly.
    both_partial = mask_tiles.coarsen(
        (mask_tiles.classify(view) == mask_tiles.PARTIAL) & (mask_tiles.band_classes(Nq, Nk, bounds) == mask_tiles.PARTIAL),
        bq // 64, bk // 64) != mask_tiles.EMPTY
    lost = (got.expand_as(want) == mask_tiles.PARTIAL) & (want == mask_tiles.EMPTY)
    assert not (lost & ~both_partial.expand_as(want)).any()
    assert torch.equal(torch.where(lost, mask_tiles.EMPTY, got.expand_as(want)).to(torch.uint8), want)


@pytest.mark.parametrize("kernel, d", MASK_KERNELS)
@pytest.mark.parametrize("backward", [False, True])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_lists_with_a_band_hold_the_merged_masks_tiles(kernel, d, backward, data):
    """Every non-empty tile of the merged mask is listed with its class, every listed block is one of them or
    a partial tile the 64-grain could not prove empty (see above: its scores all come out -inf), and the
    hopper forward may list an empty block 0 first (its pipeline walks one block at least)."""
    B, H = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
    Nq, Nk = data.draw(st.integers(1, 300)), data.draw(st.integers(1, 300))
    mask = random_mask(data.draw, B, H, Nq, Nk)
    offset, window = draw_band(data.draw, Nq, Nk)
    bounds = band.band_bounds(Nq, Nk, False, offset, window)
    mask_tiles._cache.clear()
    tiles = mask_tiles.prepare(mask, (B, H, Nq, Nk), kernel, d, backward=backward, band=bounds)
    want = brute_classes(merged(mask, (B, H, Nq, Nk), offset, window).contiguous(), tiles.block_q, tiles.block_k)
    if backward:
        want = want.transpose(2, 3)   # key blocks as rows
    lists = tiles.lists.expand(want.shape[0], want.shape[1], *tiles.lists.shape[2:])
    for b in range(want.shape[0]):
        for h in range(want.shape[1]):
            for r in range(want.shape[2]):
                row = lists[b, h, r].tolist()
                got = sorted((e >> 2, e & 3) for e in row[1:1 + row[0]])
                real = [(blk, c) for blk, c in enumerate(want[b, h, r].tolist()) if c != 0]
                listed = [x for x in got if x[1] != 0]
                assert set(real) <= set(listed) and len(set(listed)) == len(listed)
                assert all(c == 2 and want[b, h, r, blk] == 0 for blk, c in set(listed) - set(real))
                assert len(got) == len(listed) + (kernel == "hopper" and not backward and bool(listed)
                                                  and not any(c == 1 for _, c in listed))


def test_the_band_is_part_of_the_lists_cache_key():
    """One mask, two bands and none: three different lists, each as built from scratch; a band that hides
    nothing at these lengths is no band."""
    mask = torch.ones(1, 1, 1, 300, dtype=torch.bool)
    shape = (1, 2, 300, 300)
    mask_tiles._cache.clear()
    plain = mask_tiles.prepare(mask, shape, "mma", 64).lists.clone()
    narrow = mask_tiles.prepare(mask, shape, "mma", 64, band=band.band_bounds(300, 300, False, 0, (10, 0))).lists.clone()
    wide = mask_tiles.prepare(mask, shape, "mma", 64, band=band.band_bounds(300, 300, False, 0, (200, 0))).lists.clone()
    open_band = mask_tiles.prepare(mask, shape, "mma", 64, band=band.band_bounds(300, 300, False, 0, (-1, 400))).lists
    assert torch.equal(open_band, plain)
    assert not torch.equal(plain, narrow) and not torch.equal(narrow, wide) and not torch.equal(plain, wide)
    mask_tiles._cache.clear()
    fresh = mask_tiles.prepare(mask, shape, "mma", 64, band=band.band_bounds(300, 300, False, 0, (10, 0))).lists
    assert torch.equal(fresh, narrow)
    assert int(narrow[0, 0, 2, 0]) == 2   # rows 128..191, window 10 back: key blocks 1 (partial) and 2 (partial)


def test_far_rows_are_looked_for_inside_the_band():
    """A row whose keys inside the band are all finfo.min is far even if keys outside it are 0; a row the
    band hides whole is not (no key: 0 and LSE -inf, not a swamped row)."""
    low = torch.finfo(torch.float32).min
    mask = torch.zeros(1, 1, 4, 8)
    mask[0, 0, 2, 1:] = low   # row 2 sees key 2 only (window (0, 0)): low
    shape = (1, 2, 4, 8)
    assert not mask_tiles.has_far_rows(mask, shape)
    diagonal = band.band_bounds(4, 8, False, 0, (0, 0))
    assert mask_tiles.has_far_rows(mask, shape, diagonal)
    assert not mask_tiles.has_far_rows(mask, shape, band.band_bounds(4, 8, False, 0, (2, 0)))   # key 0 is 0
    swamped = torch.full((1, 1, 4, 8), low)
    swamped[0, 0, :, 5:] = -math.inf
    assert mask_tiles.has_far_rows(swamped, shape)
    assert not mask_tiles.has_far_rows(swamped, shape, band.band_bounds(4, 8, False, 6, (0, 0)))   # only -inf keys
    for bounds in (diagonal, band.band_bounds(4, 8, False, 1, (1, 1))):
        view = merged(mask, shape, bounds[0], (0, bounds[1] - bounds[0]))
        assert mask_tiles.far_rows(view) is mask_tiles.has_far_rows(mask, shape, bounds)


def test_mask_with_a_band_resolves_to_the_fast_kernels():
    q = torch.zeros(1, 2, 8, 64, dtype=torch.bfloat16)
    mask = torch.ones(8, 8, dtype=torch.bool)
    for kernel in ("mma", "hopper", "naive"):
        assert cuda._resolve_kernel(q, mask, kernel, True) == kernel
    with pytest.raises(NotImplementedError, match="'mma'"):
        cuda._resolve_kernel(q, mask, "tiled", True)
    with pytest.raises(ValueError, match="not both"):   # torch's refusal of attn_mask with is_causal stays
        cuda._check_inputs(q, q, q, mask, True, None, False, "mma", True, window=(2, 0))


# ---- GPU: the kernels against float64 with the merged mask -------------------------------------------------
def check_mask_band_call(kernel, q, k, v, mask, offset, window, grads=True, monkeypatch=None):
    """test_attention_mask_tiles.check_mask_call with the band beside the mask: the forward runs `kernel`
    itself into NaN-poisoned buffers, and (grads) the gradients, against float64 on the merged mask."""
    B, Hq, Nq, _ = q.shape
    check_mask_call(kernel, q, k, v, mask, grads, monkeypatch, dense=merged(mask, (B, Hq, Nq, k.shape[2]), offset, window),
                    causal_offset=offset, window=window)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel, d", MASK_KERNELS)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mask_and_band_match_float64_on_random_shapes(kernel, d, data, monkeypatch):
    skip_unless_runnable(kernel)
    q, k, v, mask = draw_masked_inputs(data, d)
    offset, window = draw_band(data.draw, q.shape[2], k.shape[2])
    check_mask_band_call(kernel, q, k, v, mask, offset, window, grads=data.draw(st.booleans()), monkeypatch=monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel, d", MASK_KERNELS)
@pytest.mark.parametrize("case", ["window_padding", "bottom_right_prefill", "rows_see_nothing", "width_zero",
                                  "symmetric_bias"])
def test_mask_and_band_over_many_blocks(kernel, d, case, monkeypatch):
    """Ragged lengths (not multiples of 64 or 128) over many blocks: a causal sliding window over right
    padding with an empty sequence; a bottom-right prefill chunk with a padding mask; Nq > Nk bottom-right
    (the first Nq - Nk rows see no key) with a random mask; a width-0 window; a two-sided window with an
    additive bias per head."""
    skip_unless_runnable(kernel)
    B, N = 3, 1000
    gen = torch.Generator(device="cuda").manual_seed(11)
    pos = torch.arange(N, device="cuda")
    if case == "window_padding":
        q, k, v = make_inputs(B, 2, 2, N, N, d, torch.bfloat16, "bhnd", 1)
        lens = torch.tensor([1000, 531, 0], device="cuda")
        mask = (pos[None, :] < lens[:, None])[:, None, None, :]
        offset, window = 0, (300, 0)
    elif case == "bottom_right_prefill":
        q, k, v = make_inputs(B, 2, 2, 333, N, d, torch.float16, "bnhd", 2)
        lens = torch.tensor([1000, 900, 777], device="cuda")
        mask = (pos[None, :] < lens[:, None])[:, None, None, :]
        offset, window = N - 333, (-1, 0)
    elif case == "rows_see_nothing":
        q, k, v = make_inputs(B, 2, 1, N, 600, d, torch.bfloat16, "bhnd", 3)
        mask = torch.rand(B, 1, N, 600, generator=gen, device="cuda") < 0.8
        offset, window = 600 - N, (150, 0)
    elif case == "width_zero":
        q, k, v = make_inputs(B, 1, 2, N, N, d, torch.bfloat16, "bhnd", 4)
        mask = torch.rand(1, 2, N, N, generator=gen, device="cuda") < 0.5
        offset, window = 5, (0, 0)
    else:
        q, k, v = make_inputs(B, 2, 1, N, 700, d, torch.float16, "bhnd", 5)
        mask = torch.randn(1, 2, N, 700, generator=gen, device="cuda")
        offset, window = -40, (100, 100)
    check_mask_band_call(kernel, q, k, v, mask, offset, window, monkeypatch=monkeypatch)


@pytest.mark.gpu
def test_auto_and_decide_take_mask_and_band_to_the_kernels():
    """kernel='auto' and decide() (patch, transformers) send a mask with a window to mma / hopper, not naive."""
    q, k, v = make_inputs(2, 2, 1, 300, 300, 128, torch.bfloat16, "bhnd", 6)
    mask = (torch.arange(300, device="cuda")[None, :] < torch.tensor([300, 120], device="cuda")[:, None])[:, None, None]
    window = (64, 0)
    assert cuda._check_inputs(q, k, v, mask, False, None, False, "auto", True, window=window) in ("mma", "hopper")
    d = decide(q, k, v, mask, mask_kernel=False, window=window)
    assert d.path == "cuda+mask", d.reason
    out = sy.attention.scaled_dot_product_attention(q, k, v, mask, window=window)
    ref, _ = reference(q, k, v, attn_mask=merged(mask, (2, 2, 300, 300), 0, window))
    assert relative_error(out, ref) <= 2e-2
