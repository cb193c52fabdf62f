"""attn_mask tile by tile (sympathy/attention/mask_tiles.py, cuda_src/attention_mask.cuh): the tile
classifier and the lists against a brute-force loop, the routing and the errors on the CPU (CI); on the
GPU (marked `gpu`) the mma and hopper forwards with boolean and additive masks of every broadcast shape
against float64 with the same mask, gradients included, and torch's answer for fully masked rows.
"""
import math

import pytest

torch = pytest.importorskip("torch")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

import sympathy as sy  # noqa: E402
from sympathy.attention import cuda, mask_tiles  # noqa: E402
from sympathy.attention.band import has_band  # noqa: E402
from sympathy.attention.torch_api import decide  # noqa: E402

from test_attention_gpu import assert_close, make_inputs, reference, skip_unless_runnable  # noqa: E402
from test_attention_gpu_backward import GRAD_TOLERANCE, reference_grads, relative_error  # noqa: E402


def brute_classes(view, bq, bk):
    """EMPTY / FULL / PARTIAL of every (b, h, query tile, key tile) by looking at each tile's elements."""
    B, H, Nq, Nk = view.shape
    out = torch.empty(B, H, -(-Nq // bq), -(-Nk // bk), dtype=torch.uint8)
    for b in range(B):
        for h in range(H):
            for i in range(out.shape[2]):
                for j in range(out.shape[3]):
                    t = view[b, h, i * bq:(i + 1) * bq, j * bk:(j + 1) * bk]
                    vis = t if t.dtype == torch.bool else t != -math.inf
                    zero = t if t.dtype == torch.bool else t == 0
                    out[b, h, i, j] = 0 if not vis.any() else 1 if zero.all() else 2
    return out


def random_mask(draw, B, H, Nq, Nk):
    """A mask of a random broadcast shape, bool or additive (0, -inf or a bias), blocks of one kind."""
    shape = (draw(st.sampled_from([1, B])), draw(st.sampled_from([1, H])), draw(st.sampled_from([1, Nq])),
             draw(st.sampled_from([1, Nk])))
    dims = draw(st.integers(2, 4))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2 ** 16)))
    pattern = draw(st.sampled_from(["random", "blocks", "padding", "all", "none"]))
    if pattern == "random":
        keep = torch.rand(shape, generator=gen) < 0.5
    elif pattern == "blocks":   # whole 64 x 64 blocks kept or dropped
        small = torch.rand((shape[0], shape[1], -(-shape[2] // 64), -(-shape[3] // 64)), generator=gen) < 0.5
        keep = small.repeat_interleave(64, 2)[:, :, :shape[2]].repeat_interleave(64, 3)[..., :shape[3]]
    elif pattern == "padding":   # keys past a random length per batch
        lens = torch.randint(0, shape[3] + 1, (shape[0],), generator=gen)
        keep = (torch.arange(shape[3])[None, :] < lens[:, None])[:, None, None, :].expand(shape)
    else:
        keep = torch.full(shape, pattern == "all")
    kind = draw(st.sampled_from(["bool", "additive", "bias"]))
    if kind == "bool":
        mask = keep
    else:
        mask = torch.zeros(shape).masked_fill(~keep, -math.inf)
        if kind == "bias":
            mask = mask + torch.where(torch.rand(shape, generator=gen) < 0.3, torch.randn(shape, generator=gen), 0.0)
    mask = mask.contiguous()
    if draw(st.booleans()) and shape[3] > 1:   # a last dim with stride != 1
        mask = mask.transpose(-1, -2).contiguous().transpose(-1, -2)
    return mask.reshape(shape[4 - dims:]) if all(s == 1 for s in shape[:4 - dims]) else mask


# ---- CPU: the classifier, the lists, the routing -----------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_tile_classes_match_a_brute_force_loop(data):
    B, H = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3))
    Nq, Nk = data.draw(st.integers(1, 300)), data.draw(st.integers(1, 300))
    mask = random_mask(data.draw, B, H, Nq, Nk)
    view = mask.expand(B, H, Nq, Nk)
    bq, bk = data.draw(st.sampled_from([(64, 64), (128, 128), (64, 128)]))
    got = mask_tiles.coarsen(mask_tiles.classify(view), bq // 64, bk // 64)
    want = brute_classes(view.contiguous(), bq, bk)
    assert torch.equal(got.expand_as(want), want)


@settings(max_examples=40, deadline=None)
@given(classes=st.lists(st.sampled_from([0, 1, 2]), min_size=1, max_size=12), first=st.booleans())
def test_lists_hold_every_nonempty_block_once(classes, first):
    cls = torch.tensor(classes, dtype=torch.uint8).view(1, 1, 1, -1)
    row = mask_tiles.tile_lists(cls, first_not_partial=first)[0, 0, 0].tolist()
    count, entries = row[0], row[1:]
    listed = [(e >> 2, e & 3) for e in entries[:count]]
    real = [(b, c) for b, c in listed if c != 0]
    assert sorted(real) == [(b, c) for b, c in enumerate(classes) if c != 0]
    if first and count:
        assert listed[0][1] != 2, "hopper's first block may not be partial"
        assert listed[0][1] == 1 or 1 not in classes
        assert len(listed) == len(real) + (1 not in classes)
    else:
        assert listed == real
    if count == 0:
        assert entries[0] == 0, "a row with nothing to see lists block 0, empty"


@pytest.mark.parametrize("kernel, d", [("mma", 128), ("hopper", 64), ("hopper", 128)])
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_backward_lists_are_the_transposed_tiles(kernel, d, data):
    B, H = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
    Nq, Nk = data.draw(st.integers(1, 300)), data.draw(st.integers(1, 300))
    mask = random_mask(data.draw, B, H, Nq, Nk)
    mask_tiles._cache.clear()
    tiles = mask_tiles.prepare(mask, (B, H, Nq, Nk), kernel, d, backward=True)
    assert (tiles.block_q, tiles.block_k) == mask_tiles.tile_shape(kernel, d, backward=True)
    bq, bk = tiles.block_q, tiles.block_k
    want = brute_classes(mask.expand(B, H, Nq, Nk).contiguous(), bq, bk).transpose(2, 3)   # key blocks as rows
    lists = tiles.lists.expand(want.shape[0], want.shape[1], *tiles.lists.shape[2:])
    for b in range(want.shape[0]):
        for h in range(want.shape[1]):
            for kb in range(want.shape[2]):
                row = lists[b, h, kb].tolist()
                got = [(e >> 2, e & 3) for e in row[1:1 + row[0]]]
                # in order, no empty block (the forward's "full block first" is hopper's forward only)
                assert got == [(qb, c) for qb, c in enumerate(want[b, h, kb].tolist()) if c != 0]
    assert tiles.mask_strides == mask.expand(B, H, Nq, Nk).stride()   # read in place: bool and float32 kept


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(attn_mask=torch.ones(4, 4, dtype=torch.int32)), TypeError, "bool or floating point"),
    (dict(attn_mask=torch.ones(3, 5, dtype=torch.bool)), ValueError, "does not broadcast"),
    (dict(attn_mask=torch.ones(8, 8, dtype=torch.bool), is_causal=True), ValueError, "not both"),
    (dict(attn_mask=torch.ones(8, 8, dtype=torch.bool), window=(2, 0), kernel="tiled"), NotImplementedError, "'mma'"),
    (dict(attn_mask=torch.ones(8, 8, dtype=torch.bool), kernel="tiled"), NotImplementedError, "'mma'"),
])
def test_bad_mask_calls_raise_before_any_device_is_touched(kwargs, error, words):
    q = k = v = torch.zeros(1, 2, 8, 64, dtype=torch.bfloat16)
    with pytest.raises(error, match=words):
        cuda._check_inputs(q, k, v, kwargs.get("attn_mask"), kwargs.get("is_causal", False), None, False,
                           kwargs.get("kernel", "auto"), "window" in kwargs)


def test_a_mask_that_wants_a_gradient_is_refused_and_patch_leaves_it_to_torch():
    q = torch.randn(1, 2, 8, 64).bfloat16()
    bias = torch.zeros(8, 8, requires_grad=True)
    with pytest.raises(NotImplementedError, match="requires grad"):
        cuda._check_inputs(q, q, q, bias, False, None, False, "auto")
    assert decide(q, q, q, bias, mask_kernel=False).run is None
    with torch.no_grad():
        with pytest.raises(ValueError, match="CUDA device"):   # the mask is a constant here: only the device is wrong
            cuda._check_inputs(q, q, q, bias, False, None, False, "auto")


def test_mask_with_is_causal_is_refused():
    # torch's CUDA backends refuse the pair ("attn_mask should not be set when is_causal=True"); 2.13's CPU
    # math backend runs it. The CUDA entry keeps the refusal (a ValueError, before any launch).
    q = torch.zeros(1, 1, 4, 8, dtype=torch.bfloat16)
    mask = torch.ones(4, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match="not both"):
        cuda._check_inputs(q, q, q, mask, True, None, False, "auto")


def test_a_general_mask_on_the_cpu_is_still_refused_by_decide():
    q = torch.randn(1, 2, 8, 16)
    mask = torch.rand(8, 8) < 0.5
    d = decide(q, q, q, mask, mask_kernel=False)
    assert d.run is None and "mask" in d.reason


def far_mask(dtype=torch.float32):
    """(1, 1, 6, 8) additive: row 0 all finfo.min (transformers' fully masked row), row 1 min and -inf, row 2
    min beside a visible key, row 3 all -10000 (BERT's value), row 4 all -inf, row 5 a plain bias."""
    low = torch.finfo(dtype).min
    m = torch.zeros(6, 8)
    m[0] = low
    m[1, :4], m[1, 4:] = low, -math.inf
    m[2, 1:] = low
    m[3] = -10000.0
    m[4] = -math.inf
    m[5] = torch.linspace(-3, 3, 8)
    return m.to(dtype)[None, None]


@pytest.mark.parametrize("rows, far", [((0,), True), ((1,), True), ((2,), False), ((3,), False), ((4,), False),
                                       ((5,), False), ((2, 3, 4, 5), False), ((0, 5), True)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_far_rows_are_rows_whose_every_element_is_far(rows, far, dtype):
    """Only a row whose largest element is finite and below FAR_ROW_MAX counts, through any broadcast."""
    mask = far_mask(dtype)[:, :, list(rows)]
    assert mask_tiles.far_rows(mask.float().expand(2, 3, len(rows), 8)) is far
    assert mask_tiles.has_far_rows(mask, (2, 3, len(rows), 8)) is far
    assert mask_tiles.far_rows(mask.float() > -1) is False   # bool masks have no far rows


def test_a_far_row_sends_the_call_to_naive_and_an_explicit_kernel_refuses_it():
    """The routing decision needs no GPU up to the device check: kernel='hopper' with a far row refuses
    with the reason before it looks at the device."""
    q, k, v = (torch.randn(1, 2, 6, 64, dtype=torch.bfloat16) for _ in range(3))
    k, v = (torch.randn(1, 2, 8, 64, dtype=torch.bfloat16) for _ in range(2))
    with pytest.raises(NotImplementedError, match="largest element is below"):
        cuda.attention_with_lse(q, k, v, attn_mask=far_mask(torch.bfloat16), kernel="hopper")


def test_math_backward_of_a_swamped_row_is_torchs_softmax_gradient():
    """A row every element of which is finfo.min: torch's softmax (float32) gives it a uniform P, and its
    log-sum-exp is the min alone (the sum is lost to rounding). The math backward must take P from S, not
    exp(S - LSE) (which gives 1 per key): gradients as autograd through torch's math backend. (torch's fused
    CPU kernel, the default here, has the LSE problem itself: its dQ of such a row is 8x, one per key.)"""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, n, 16, generator=gen) for n in (6, 8, 8))
    mask = far_mask(torch.float32)
    scale = 0.25
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(SDPBackend.MATH):
        out = torch.nn.functional.scaled_dot_product_attention(*leaves, attn_mask=mask, scale=scale)
    dout = torch.randn(out.shape, generator=gen)
    out.backward(dout)
    lse = torch.logsumexp((q @ k.transpose(-1, -2)) * scale + mask, dim=-1)
    lse = lse.masked_fill(torch.isneginf(mask).all(-1), -math.inf)
    got = cuda._math_backward(dout, q, k, v, out.detach(), lse, mask, False, scale, rows_complete=True)
    for name, g, leaf in zip("qkv", got, leaves):
        assert torch.allclose(g, leaf.grad, atol=1e-5, rtol=1e-4), name


# ---- GPU: the kernels against float64 with the same mask ----------------------------------------------------
def check_mask_call(kernel, q, k, v, mask, grads=True, monkeypatch=None, *, dense=None, causal_offset=0, window=None):
    """Forward into NaN-poisoned buffers and gradients against float64 with the same mask; with monkeypatch,
    our backward must not fall back to the torch-math one (the reference below uses that formula itself).
    A band (causal_offset, window) goes to the kernels beside the mask; `dense` is then the merged mask the
    reference takes (test_attention_mask_band.py)."""
    B, Hq, Nq, d = q.shape
    if dense is None:
        dense = mask.expand(B, Hq, Nq, k.shape[2])
    band = {"causal_offset": causal_offset, "window": window or (-1, -1)}
    ref_out, ref_lse = reference(q, k, v, attn_mask=dense)
    out = torch.full((B, Hq, Nq, d), float("nan"), dtype=q.dtype, device=q.device)
    lse = torch.full((B, Hq, Nq), float("nan"), dtype=torch.float32, device=q.device)
    resolved = cuda._check_inputs(q, k, v, mask, False, None, True, kernel, has_band(**band), **band)
    assert resolved == kernel
    cuda._launch(q, k, v, mask, False, 1.0 / math.sqrt(d), resolved, out=out, lse=lse, **band)
    torch.cuda.synchronize()
    assert_close(out, lse, ref_out.nan_to_num(0.0), ref_lse, q.dtype)
    if not grads:
        return
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = cuda.scaled_dot_product_attention(*leaves, mask, enable_gqa=True, kernel=kernel, **band)
    dout = torch.randn_like(out)
    if monkeypatch is None:
        out.backward(dout)
    else:
        def refuse(*args, **kwargs):
            raise AssertionError("the torch-math backward ran")
        with monkeypatch.context() as patched:
            patched.setattr(cuda, "_math_backward", refuse)
            out.backward(dout)
    want = reference_grads(q, k, v, dout, out=out.detach(), attn_mask=dense)
    for name, leaf, ref in zip("qkv", leaves, want):
        assert torch.isfinite(leaf.grad).all(), f"d{name} is not finite"
        err = relative_error(leaf.grad, ref.nan_to_num(0.0))
        assert err <= GRAD_TOLERANCE[q.dtype], f"d{name}: relative error {err:.2e}"


def draw_masked_inputs(data, d):
    """q, k, v (any batch, GQA group, lengths up to 400, dtype, layout) and a random mask for them, drawn
    from hypothesis' data: bool or additive, float32 or (half the time) the query's dtype."""
    B, Hkv, group = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)), data.draw(st.sampled_from([1, 2]))
    Nq, Nk = data.draw(st.integers(1, 400)), data.draw(st.integers(1, 400))
    dtype = data.draw(st.sampled_from([torch.float16, torch.bfloat16]))
    q, k, v = make_inputs(B, Hkv, group, Nq, Nk, d, dtype, data.draw(st.sampled_from(["bhnd", "bnhd"])),
                          data.draw(st.integers(0, 1000)))
    mask = random_mask(data.draw, B, Hkv * group, Nq, Nk).cuda()
    if mask.dtype != torch.bool and data.draw(st.booleans()):
        mask = mask.to(dtype)   # an additive mask in the query's dtype (converted to float32 once)
    return q, k, v, mask


# ("hopper", 64): the hopper forward on HopperTraitsD64Short's 128 x 128 tiles, then the hopper backward.
MASK_KERNELS = [("mma", 64), ("mma", 128), ("hopper", 64), ("hopper", 128)]


@pytest.mark.gpu
@pytest.mark.parametrize("kernel, d", MASK_KERNELS)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_masks_match_float64_on_random_shapes(kernel, d, data):
    skip_unless_runnable(kernel)
    q, k, v, mask = draw_masked_inputs(data, d)
    check_mask_call(kernel, q, k, v, mask, grads=data.draw(st.booleans()))


@pytest.mark.gpu
@pytest.mark.parametrize("kernel, d", MASK_KERNELS)
@pytest.mark.parametrize("pattern", ["right", "left", "causal_right", "empty_sequence"])
def test_padding_masks_over_many_blocks(kernel, d, pattern):
    skip_unless_runnable(kernel)
    B, N = 4, 1000
    lens = torch.tensor([1000, 777, 64, 0 if pattern == "empty_sequence" else 1])
    q, k, v = make_inputs(B, 2, 2, N, N, d, torch.bfloat16, "bhnd", 7)
    pos = torch.arange(N)
    keep = pos[None, :] < lens[:, None] if pattern != "left" else pos[None, :] >= (N - lens)[:, None]
    keep = keep[:, None, None, :].expand(B, 1, N, N)
    if pattern == "causal_right":
        keep = keep & torch.ones(N, N, dtype=torch.bool).tril()
    check_mask_call(kernel, q, k, v, keep.contiguous().cuda())
    additive = torch.zeros(B, 1, 1, N, device="cuda").masked_fill(~keep[:, :, :1].cuda(), -math.inf)
    if pattern in ("right", "left", "empty_sequence"):
        check_mask_call(kernel, q, k, v, additive, grads=False)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel, d", MASK_KERNELS)
def test_fully_masked_rows_are_torchs_answer(kernel, d):
    skip_unless_runnable(kernel)
    q, k, v = make_inputs(1, 2, 1, 130, 200, d, torch.float16, "bhnd", 3)
    mask = torch.rand(130, 200, device="cuda") < 0.5
    mask[5] = False
    mask[64:128] = False
    want = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), mask)
    got = sy.attention.scaled_dot_product_attention(q, k, v, mask, kernel=kernel)
    assert torch.equal(got[:, :, 5] == 0, want[:, :, 5] == 0) and bool((got[:, :, 64:128] == 0).all())
    assert relative_error(got, want) <= 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("kernel, d", MASK_KERNELS)
def test_rows_masked_with_finfo_min_are_torchs_answer(kernel, d):
    """transformers' additive form of a fully masked row (every element finfo.min): torch gives a uniform
    row and a softmax gradient; auto routes it to naive (far rows), whose answer is torch's."""
    skip_unless_runnable(kernel)
    q, k, v = make_inputs(1, 2, 1, 130, 200, d, torch.bfloat16, "bhnd", 4)
    mask = torch.zeros(130, 200, device="cuda", dtype=torch.bfloat16)
    mask[:, 150:] = torch.finfo(torch.bfloat16).min
    mask[7] = torch.finfo(torch.bfloat16).min
    mask[64:128] = torch.finfo(torch.bfloat16).min
    with pytest.raises(NotImplementedError, match="largest element is below"):
        cuda._check_inputs(q, k, v, mask, False, None, True, kernel)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = sy.attention.scaled_dot_product_attention(*leaves, mask)
    dense = mask.float().expand(1, 2, 130, 200)
    ref_out, _ = reference(q, k, v, attn_mask=dense)
    assert relative_error(out, ref_out) <= 2e-2
    assert relative_error(out[:, :, 7], v.double().mean(2)) <= 2e-2   # uniform over every key
    dout = torch.randn_like(out)
    out.backward(dout)
    for name, leaf, ref in zip("qkv", leaves, reference_grads(q, k, v, dout, out=out.detach(), attn_mask=dense)):
        assert relative_error(leaf.grad, ref) <= GRAD_TOLERANCE[torch.bfloat16], name


@pytest.mark.gpu
@pytest.mark.parametrize("kernel, d", MASK_KERNELS)
def test_masked_backward_runs_on_a_kernel_backward(kernel, d, monkeypatch):
    skip_unless_runnable(kernel)
    q, k, v = make_inputs(2, 2, 2, 300, 260, d, torch.bfloat16, "bhnd", 5)
    mask = torch.rand(2, 1, 300, 260, device="cuda") < 0.7
    check_mask_call(kernel, q, k, v, mask, monkeypatch=monkeypatch)


@pytest.mark.gpu
def test_patch_and_transformers_routes_take_a_padding_mask_to_the_kernels():
    q, k, v = make_inputs(2, 2, 1, 300, 300, 128, torch.bfloat16, "bhnd", 1)
    keep = (torch.arange(300, device="cuda")[None, :] < torch.tensor([300, 100], device="cuda")[:, None])
    mask = keep[:, None, None, :]
    d = decide(q, k, v, mask, mask_kernel=False)
    assert d.path == "cuda+mask", d.reason
    with sy.attention.patch():
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, mask)
    assert sy.attention.patch_stats().paths.get("cuda+mask", 0) >= 1
    ref, _ = reference(q, k, v, attn_mask=mask.expand(2, 2, 300, 300))
    assert relative_error(out, ref) <= 2e-2
