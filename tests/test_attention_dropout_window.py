"""Dropout with a sliding window, and with an attn_mask beside a band, in the fused kernels (issue 20, session
dropwin20): the band's kBandLocal instantiated with dropout in the hopper forward and backward, the mma forward
and both mma backwards; the mask's tiles with dropout take the band (the hopper backward's mask + band is not
instantiated with dropout: the mma backward serves it). The keep bit of (b, h, i, j) is the one of the
unbanded, unmasked call (a band or a mask only decides which scores exist).

CPU (in CI): the routing. dropout_reason serves every band, with or without a mask, and keeps its other
refusals; torch_api.decide, cuda.attention_with_lse and the transformers attention function (a Mistral-style
sliding window mask) send a windowed dropout call to the fused dropout with its window and causal_offset; what
stays refused names its reason, also in sy.attention.scaled_dot_product_attention's NotImplementedError. GPU
(marked `gpu`): output, LSE and gradients against float64 with the same keep mask (the test-only mask path)
and the same band: windows with left = 0, right = 0, both sides, a width-1 window, rows that see no key,
causal_offset moved either way, Nq > Nk and Nk past the mma backward's separate dQ pass (both of its
backwards), GQA, d 64 / 128, fp16 / bf16, both kernels, the deterministic backward bit-identical twice; a
wrong keep mask gives a wrong answer; the public entry launches the fused kernels; bool and additive masks
beside windows and moved diagonals, the backward each kernel runs recorded.
"""
import math
import types

import pytest

torch = pytest.importorskip("torch")

import sympathy as sy  # noqa: E402
from sympathy.attention import cuda, dropout, torch_api  # noqa: E402
from sympathy.attention.band import band_mask  # noqa: E402
from test_attention_dropout import (  # noqa: E402
    GRAD_TOLERANCE, OUT_TOLERANCE, check_against_float64, fake_cuda, inputs, kernels, record_launches, relative_error)
from test_attention_dropout_mask import as_cuda, make_mask, qkv  # noqa: E402


# ---- CPU: routing ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("window, causal_offset, deterministic", [
    ((16, 0), 0, False),        # a causal sliding window (Mistral's)
    ((0, 40), 0, False),        # left = 0, right > 0: the row and the keys after it
    ((0, 0), 0, False),         # the diagonal alone
    ((17, 9), -30, False),      # both sides, the diagonal moved up: the first rows see no key
    ((100, 0), 271, True),      # a prefill with a window, deterministic (no mask: served)
    ((-1, 5), 0, False),        # open on the left: the causal mode, as before
    ((-1, -1), 12, False),      # causal_offset alone: as before
])
def test_dropout_reason_serves_every_band_without_a_mask(window, causal_offset, deterministic):
    q = fake_cuda((2, 4, 300, 128))
    for d in (64, 128):
        q.shape = (2, 4, 300, d)
        for kernel in ("auto", "mma", "hopper"):
            assert dropout.dropout_reason(q, q, q, None, 0.1, kernel, window, causal_offset, deterministic) is None


@pytest.mark.parametrize("kwargs, words", [
    (dict(attn_mask=torch.ones(1, dtype=torch.bool), deterministic=True), "deterministic"),   # no masked dQ order
    (dict(dtype=torch.float32), "float16/bfloat16"),
    (dict(d=256), "head dim 256"),
    (dict(kernel="naive"), "kernel='naive'"),
    (dict(kernel="tiled"), "kernel='tiled'"),
    (dict(p=1.0), "dropout_p=1"),
])
def test_a_window_keeps_the_other_refusals_with_their_reasons(kwargs, words):
    q = fake_cuda((2, 4, 64, kwargs.pop("d", 128)), kwargs.pop("dtype", torch.bfloat16))
    reason = dropout.dropout_reason(q, q, q, kwargs.pop("attn_mask", None), kwargs.pop("p", 0.1),
                                    kwargs.pop("kernel", "auto"), (32, 0), 0, kwargs.pop("deterministic", False))
    assert reason is not None and words in reason


@pytest.mark.parametrize("kernel", ["mma", "hopper"])
def test_decide_sends_a_windowed_dropout_call_to_the_fused_dropout(monkeypatch, kernel):
    seen = as_cuda(monkeypatch, kernel)
    q, k, v = qkv()
    decision = torch_api.decide(q, k, v, None, 0.1, True, enable_gqa=True, deterministic=False, window=(16, 0),
                                causal_offset=3)
    assert decision.path == "cuda+dropout", decision.reason
    decision.run()
    assert seen["window"] == (16, 0) and seen["causal_offset"] == 3 and seen["kernel"] == kernel
    assert seen["attn_mask"] is None and seen["p"] == 0.1


def test_attention_with_lse_passes_the_window_to_the_fused_dropout(monkeypatch):
    seen = as_cuda(monkeypatch, "mma")
    q, k, v = qkv()
    cuda.attention_with_lse(q, k, v, None, 0.2, False, enable_gqa=True, window=(0, 7), deterministic=True)
    assert seen["window"] == (0, 7) and seen["causal_offset"] == 0 and seen["deterministic"] is True


@pytest.mark.parametrize("band", [dict(window=(8, 8)), dict(window=(-1, 0), causal_offset=5), dict(causal_offset=-3)])
def test_decide_sends_a_mask_with_a_band_and_dropout_to_the_fused_dropout(monkeypatch, band):
    seen = as_cuda(monkeypatch)
    q, k, v = qkv()
    mask = torch.zeros(2, 1, 100, 100)
    decision = torch_api.decide(q, k, v, mask, 0.1, False, enable_gqa=True, deterministic=False, **band)
    assert decision.path == "cuda+mask+dropout", decision.reason
    decision.run()
    assert seen["attn_mask"] is mask and seen["window"] == band.get("window", (-1, -1))
    assert seen["causal_offset"] == band.get("causal_offset", 0)


@pytest.mark.parametrize("window, causal_offset", [((8, 0), 0), ((-1, -1), 5)])
def test_a_refused_band_with_dropout_raises_with_the_routing_reason(window, causal_offset):
    q = torch.randn(1, 2, 16, 64)   # CPU: the C kernel has neither dropout nor a band, torch's SDPA no band
    with pytest.raises(NotImplementedError, match="window and causal_offset with dropout_p > 0 on the CPU"):
        sy.attention.scaled_dot_product_attention(q, q, q, None, 0.1, True, window=window,
                                                  causal_offset=causal_offset)


def test_transformers_routes_a_sliding_window_with_dropout_to_the_fused_kernels(monkeypatch):
    transformers_api = pytest.importorskip("sympathy.attention.transformers_api")
    pytest.importorskip("transformers")
    seen = as_cuda(monkeypatch)
    q, k, v = qkv(N=40)
    mask = band_mask(40, 40, True, 0, (7, 0))[None, None].expand(2, 1, 40, 40)   # sliding_window = 8
    module = types.SimpleNamespace(is_causal=True, training=True, num_key_value_groups=2)
    monkeypatch.setitem(transformers_api._options, "deterministic", False)
    sy.attention.patch_stats(reset=True)
    out, _ = transformers_api.sympathy_attention_forward(module, q, k, v, mask, dropout=0.1, scaling=0.125,
                                                         sliding_window=8)
    assert sy.attention.patch_stats().paths["cuda+dropout+band"] == 1
    assert seen["window"] == (7, 0) and seen["causal_offset"] == 0 and out.shape == (2, 40, 4, 64)


@pytest.mark.parametrize("dtype, d, deterministic", [
    (torch.float16, 128, False), (torch.bfloat16, 128, True), (torch.bfloat16, 64, False), (torch.bfloat16, 64, True),
])
def test_the_hopper_backward_takes_dropout_with_a_band(dtype, d, deterministic):
    assert cuda._hopper_backward_takes(dtype, d, deterministic, True, False, True)


# ---- GPU ------------------------------------------------------------------------------------------------
# (B, Hq, Hkv, Nq, Nk, is_causal, causal_offset, window): every one has a left edge some row reaches (kBandLocal).
WINDOWS = [
    (2, 4, 2, 300, 300, True, 0, (64, 0)),       # a causal sliding window, GQA
    (1, 4, 4, 256, 333, False, 0, (0, 40)),      # left = 0, right > 0
    (2, 2, 1, 200, 130, False, 0, (17, 9)),      # both sides, Nq > Nk: the last rows see no key
    (1, 3, 3, 129, 400, True, 271, (100, 0)),    # a bottom-right prefill with a window
    (1, 2, 2, 260, 100, True, -150, (20, 0)),    # the diagonal moved up: rows 0..149 see no key
    (1, 2, 2, 200, 200, False, 0, (0, 0)),       # the diagonal alone (width 1)
    (1, 4, 2, 64, 2100, False, 1000, (30, 30)),  # Nk past SEPARATE_DQ_MAX_KEYS: the mma backward's atomic dQ
]


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["mma", "hopper"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("B, Hq, Hkv, Nq, Nk, causal, offset, window", WINDOWS)
def test_windowed_dropout_matches_float64_with_the_same_keep_mask(kernel, dtype, d, B, Hq, Hkv, Nq, Nk, causal,
                                                                  offset, window, monkeypatch):
    check_against_float64(monkeypatch, kernel, dtype, d, B, Hq, Hkv, Nq, Nk, causal, offset, window)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["mma", "hopper"])
@pytest.mark.parametrize("d", [64, 128])
def test_deterministic_windowed_dropout_backward_is_bit_identical_and_right(kernel, d):
    # mma: the separate dQ pass with the band and dropout (dq_kernel<kBandLocal, dropout>); hopper: its dQ in
    # a fixed order (bf16).
    if kernel not in kernels():
        pytest.skip("kernel='hopper' needs an sm_90 GPU")
    B, Hq, Hkv, Nq, Nk, window, p = 2, 4, 2, 333, 2200, (300, 0), 0.25
    q, k, v = inputs(B, Hq, Hkv, Nq, Nk, d, torch.bfloat16, seed=3)
    dout = torch.randn(B, Hq, Nq, d, device="cuda").to(torch.bfloat16)

    def run():
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        out, _ = dropout.attention(*leaves, p, True, 1 / math.sqrt(d), kernel, deterministic=True, window=window,
                                   causal_offset=Nk - Nq, seed=11, offset=8)
        return (out,) + torch.autograd.grad(out, leaves, dout)

    first, again = run(), run()
    for a, b in zip(first, again):
        assert torch.equal(a, b)
    keep = dropout._dropout_mask(B, Hq, Nq, Nk, p, 11, 8, q.device)
    leaves = [t.double().requires_grad_(True) for t in (q, k, v)]
    ref = dropout.reference(*leaves, keep, p, True, causal_offset=Nk - Nq, window=window)
    ref_grads = torch.autograd.grad(ref, leaves, dout.double())
    assert relative_error(first[0], ref) <= OUT_TOLERANCE[torch.bfloat16]
    for name, g, r in zip("qkv", first[1:], ref_grads):
        assert relative_error(g, r) <= GRAD_TOLERANCE[torch.bfloat16], f"d{name}"


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["mma", "hopper"])
def test_the_public_entry_runs_windowed_dropout_on_the_fused_kernels(kernel, monkeypatch):
    if kernel not in kernels():
        pytest.skip("kernel='hopper' needs an sm_90 GPU")
    calls = record_launches(monkeypatch)
    q, k, v = inputs(1, 4, 2, 256, 256, 64, torch.float16)
    decision = torch_api.decide(q, k, v, None, 0.1, True, enable_gqa=True, kernel=kernel, window=(32, 0))
    assert decision.path == "cuda+dropout", decision.reason
    out = sy.attention.scaled_dot_product_attention(q, k, v, None, 0.1, True, enable_gqa=True, kernel=kernel,
                                                    window=(32, 0))
    assert f"sy_attn_{kernel}_fwd" in calls and "sy_attn_naive_fwd" not in calls and out.isfinite().all()


# (B, Hq, Hkv, Nq, Nk, causal_offset, window) beside a mask (is_causal stays False: torch's ValueError with a mask).
MASK_BANDS = [
    (2, 4, 2, 200, 333, 133, (64, 0)),    # a bottom-right causal window over padding
    (2, 2, 2, 129, 400, 0, (30, 30)),     # a two-sided window
    (1, 4, 1, 333, 190, -20, (0, 50)),    # left = 0, the diagonal moved up: rows the band or the mask leaves empty
    (2, 2, 1, 150, 300, 150, (-1, 0)),    # a moved causal diagonal alone (the causal mode, no left edge)
]


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["mma", "hopper"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("kind", ["padding-bool", "full-additive"])
@pytest.mark.parametrize("B, Hq, Hkv, Nq, Nk, offset, window", MASK_BANDS)
def test_masked_dropout_with_a_band_matches_float64(kernel, dtype, d, kind, B, Hq, Hkv, Nq, Nk, offset, window,
                                                     monkeypatch):
    # The backward on mma after either forward (the hopper backward has no mask + band + dropout instantiation).
    check_against_float64(monkeypatch, kernel, dtype, d, B, Hq, Hkv, Nq, Nk, False, offset, window,
                          attn_mask=make_mask(kind, B, Nq, Nk, dtype), backward="mma")
