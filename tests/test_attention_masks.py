"""The band (sympathy/attention/band.py, cuda_src/attention_band.cuh): causal at any alignment and
sliding windows, in the mma and hopper kernels, forward and backward, against float64 with the same mask.

The argument checks, the mask builder against torch's CausalBias and the math backward run on the CPU
(in CI); the kernel tests are marked `gpu` and skip where there is no CUDA GPU.
"""
import math

import pytest

torch = pytest.importorskip("torch")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402
from torch.nn.attention.bias import causal_lower_right, causal_upper_left  # noqa: E402

import sympathy as sy  # noqa: E402
from sympathy.attention import band, cuda  # noqa: E402

from test_attention_gpu import assert_close, make_inputs, reference, runnable, skip_unless_runnable  # noqa: E402
from test_attention_gpu_backward import GRAD_TOLERANCE, reference_grads, relative_error  # noqa: E402


def loop_mask(n_q, n_kv, is_causal, offset, window):
    """The band by its definition, one (row, key) at a time."""
    left, right = window
    keep = torch.zeros(n_q, n_kv, dtype=torch.bool)
    for i in range(n_q):
        for j in range(n_kv):
            hi = i + offset if is_causal else (i + offset + right if right >= 0 else math.inf)
            lo = i + offset - left if left >= 0 else -math.inf
            keep[i, j] = lo <= j <= hi
    return keep


# ---- CPU: the mask family and the checks -----------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(n_q=st.integers(1, 12), n_kv=st.integers(1, 12), is_causal=st.booleans(), offset=st.integers(-14, 14),
       left=st.integers(-1, 14), right=st.integers(-1, 14))
def test_band_mask_is_the_definition(n_q, n_kv, is_causal, offset, left, right):
    assert torch.equal(band.band_mask(n_q, n_kv, is_causal, offset, (left, right)),
                       loop_mask(n_q, n_kv, is_causal, offset, (left, right)))


@pytest.mark.parametrize("n_q, n_kv", [(5, 3), (3, 5), (4, 4), (1, 7)])
def test_causal_bias_variants_are_bands(n_q, n_kv):
    for bias, offset in ((causal_upper_left(n_q, n_kv), 0), (causal_lower_right(n_q, n_kv), n_kv - n_q)):
        assert band.causal_bias_band(bias, False, n_q, n_kv) == offset
        assert torch.equal(band.band_mask(n_q, n_kv, True, offset), bias._materialize())


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(window=(3,)), TypeError, "pair of ints"),
    (dict(window=(1.5, 2)), TypeError, "pair of ints"),
    (dict(window=(True, 2)), TypeError, "pair of ints"),
    (dict(window=(-2, 0)), ValueError, ">= -1"),
    (dict(causal_offset=0.5), TypeError, "causal_offset must be an int"),
    (dict(causal_offset=1 << 40), ValueError, "causal_offset must be within"),
    (dict(attn_mask=causal_lower_right(8, 8), is_causal=True), ValueError, "CausalBias"),
    (dict(attn_mask=causal_lower_right(7, 8)), ValueError, "CausalBias for"),
    (dict(attn_mask=causal_lower_right(8, 8), causal_offset=2), ValueError, "not both"),
    (dict(window=(4, 0), kernel="tiled"), NotImplementedError, "'mma', 'hopper' and 'naive'"),
])
def test_bad_band_arguments_raise_before_any_device_is_touched(kwargs, error, words):
    q, k, v = (torch.randn(1, 2, 8, 64, dtype=torch.bfloat16) for _ in range(3))
    with pytest.raises(error, match=words):
        cuda.attention_with_lse(q, k, v, **kwargs)


def test_band_is_keyword_only_after_torchs_signature():
    import inspect

    for fn in (cuda.scaled_dot_product_attention, cuda.attention_with_lse, sy.attention.scaled_dot_product_attention):
        params = inspect.signature(fn).parameters
        for name in ("window", "causal_offset"):
            assert params[name].kind is inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize("n_q, n_kv, is_causal, offset, window", [
    (9, 9, True, 0, (3, 0)), (12, 7, True, -5, (-1, 0)), (6, 11, False, 5, (2, 1)), (8, 8, False, 0, (0, 0)),
])
def test_math_backward_with_a_band_is_autograd_of_the_definition(n_q, n_kv, is_causal, offset, window):
    """The float64 math backward (the fallback for float32 and odd head dims) against autograd; rows
    that see no key (offset -5: the first five) get zero gradients."""
    gen = torch.Generator().manual_seed(n_q * n_kv)
    q, k, v, dout = (torch.randn(2, 2, n, 16, generator=gen, dtype=torch.float64)
                     for n in (n_q, n_kv, n_kv, n_q))
    mask = band.band_mask(n_q, n_kv, is_causal, offset, window)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out, lse = reference(*leaves, attn_mask=mask)
    out.backward(dout)
    grads = cuda._math_backward(dout, q, k, v, out.detach(), lse, None, is_causal, 0.25, causal_offset=offset,
                                window=window)
    for got, leaf in zip(grads, leaves):
        torch.testing.assert_close(got, leaf.grad, rtol=1e-9, atol=1e-9)


# ---- GPU: the kernels against float64 with the same mask -----------------------------------------------
BAND_KERNELS = ("mma", "hopper")


def run_band(q, k, v, kernel, is_causal, offset, window):
    """One forward into NaN-poisoned out and lse (an element a kernel fails to write shows as NaN)."""
    B, H, Nq, d = q.shape
    out = torch.full((B, H, Nq, d), float("nan"), dtype=q.dtype, device=q.device)
    lse = torch.full((B, H, Nq), float("nan"), dtype=torch.float32, device=q.device)
    resolved = cuda._check_inputs(q, k, v, None, is_causal, None, True, kernel, True)
    cuda._launch(q, k, v, None, is_causal, 1.0 / math.sqrt(d), resolved, out=out, lse=lse, causal_offset=offset,
                 window=window)
    torch.cuda.synchronize()
    return out, lse


def check_band_call(kernel, q, k, v, is_causal, offset, window, grads=True):
    Nq, Nk = q.shape[2], k.shape[2]
    mask = band.band_mask(Nq, Nk, is_causal, offset, window, device=q.device)
    ref_out, ref_lse = reference(q, k, v, attn_mask=mask)
    out, lse = run_band(q, k, v, kernel, is_causal, offset, window)
    assert_close(out, lse, ref_out, ref_lse, q.dtype)
    if not grads:
        return
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = cuda.scaled_dot_product_attention(*leaves, is_causal=is_causal, enable_gqa=True, kernel=kernel,
                                            window=window, causal_offset=offset)
    dout = torch.randn_like(out)
    out.backward(dout)
    want = reference_grads(q, k, v, dout, out=out.detach(), attn_mask=mask)
    for name, leaf, ref in zip("qkv", leaves, want):
        err = relative_error(leaf.grad, ref)
        assert err <= GRAD_TOLERANCE[q.dtype], f"d{name}: relative error {err:.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", BAND_KERNELS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_band_matches_float64_on_random_shapes(kernel, data):
    skip_unless_runnable(kernel)
    d = data.draw(st.sampled_from([64, 128]), label="d")
    dtype = data.draw(st.sampled_from([torch.bfloat16, torch.float16]), label="dtype")
    B, Hkv = data.draw(st.integers(1, 2), label="B"), data.draw(st.integers(1, 2), label="Hkv")
    group = data.draw(st.sampled_from([1, 2]), label="group")
    Nq = data.draw(st.integers(1, 400), label="Nq")
    Nk = data.draw(st.one_of(st.just(Nq), st.integers(1, 400)), label="Nk")
    is_causal = data.draw(st.booleans(), label="is_causal")
    offset = data.draw(st.sampled_from([0, Nk - Nq, data.draw(st.integers(-Nq - 5, Nk + 5), label="any")]),
                       label="offset")
    side = st.one_of(st.sampled_from([-1, 0, 1, Nq + Nk + 7]), st.integers(0, 300))
    window = (data.draw(side, label="left"), data.draw(side, label="right"))
    q, k, v = make_inputs(B, Hkv, group, Nq, Nk, d, dtype, "bnhd", seed=data.draw(st.integers(0, 2**31)))
    check_band_call(kernel, q, k, v, is_causal, offset, window)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", BAND_KERNELS)
@pytest.mark.parametrize("Nq, Nk, is_causal, offset, window", [
    (2000, 2000, True, 0, (700, 0)),        # Mistral-style: many blocks, both edges masked, middle unmasked
    (1500, 1500, False, 0, (300, 300)),     # a symmetric local window (encoders)
    (384, 2048, True, 2048 - 384, (-1, 0)),   # KV-cache prefill: bottom-right causal over a long cache
    (700, 300, True, 300 - 700, (-1, 0)),   # bottom-right with Nq > Nk: the first 400 rows see no key
    (1024, 1024, False, 0, (0, 0)),         # each row sees only its own key
    (600, 900, False, 300, (64, -1)),       # open on the right, bounded on the left
])
def test_band_on_fixed_shapes_with_many_blocks(kernel, Nq, Nk, is_causal, offset, window):
    skip_unless_runnable(kernel)
    q, k, v = make_inputs(1, 2, 2, Nq, Nk, 128, torch.bfloat16, "bhnd", seed=Nq + Nk)
    check_band_call(kernel, q, k, v, is_causal, offset, window)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", BAND_KERNELS)
@pytest.mark.parametrize("Nq, Nk", [(300, 1000), (1000, 300), (257, 257)])
def test_causal_lower_right_matches_torchs(kernel, Nq, Nk):
    """attn_mask=causal_lower_right(...) runs as the band: output and gradients as torch's own SDPA on
    the same bias (rows that see no key: 0 from both)."""
    skip_unless_runnable(kernel)
    q, k, v = make_inputs(2, 2, 2, Nq, Nk, 64, torch.float16, "bhnd", seed=Nq)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = sy.attention.scaled_dot_product_attention(*leaves, attn_mask=causal_lower_right(Nq, Nk), enable_gqa=True,
                                                    kernel=kernel)
    mask = band.band_mask(Nq, Nk, True, Nk - Nq, device="cuda")
    ref_out, _ = reference(q, k, v, attn_mask=mask)
    torch_out = torch.nn.functional.scaled_dot_product_attention(
        *(t.repeat_interleave(2, 1) if t is not q else t for t in (q, k, v)), attn_mask=causal_lower_right(Nq, Nk))
    assert relative_error(out, ref_out) <= 4e-3
    assert relative_error(torch_out, ref_out) <= 4e-3
    dout = torch.randn_like(out)
    out.backward(dout)
    for leaf, ref in zip(leaves, reference_grads(q, k, v, dout, out=out.detach(), attn_mask=mask)):
        assert relative_error(leaf.grad, ref) <= GRAD_TOLERANCE[torch.float16]


@pytest.mark.gpu
def test_deterministic_backward_with_a_window_is_bitwise_repeatable():
    """The mma backward's separate dQ pass (no atomics) walks the band's key blocks too."""
    q, k, v = make_inputs(1, 2, 1, 900, 900, 64, torch.bfloat16, "bhnd", seed=9)
    mask = band.band_mask(900, 900, True, 0, (200, 0), device="cuda")
    runs = []
    for _ in range(2):
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        out = cuda.scaled_dot_product_attention(*leaves, is_causal=True, window=(200, 0), kernel="mma",
                                                deterministic=True)
        out.backward(torch.ones_like(out))
        runs.append([t.grad for t in leaves])
    assert all(torch.equal(a, b) for a, b in zip(*runs))
    want = reference_grads(q, k, v, torch.ones_like(out), out=out.detach(), attn_mask=mask)
    assert max(relative_error(g, r) for g, r in zip(runs[0], want)) <= GRAD_TOLERANCE[torch.bfloat16]


@pytest.mark.gpu
@pytest.mark.parametrize("kernel, d, dtype", [("naive", 64, torch.float32), ("hopper", 256, torch.bfloat16),
                                              ("auto", 32, torch.float32)])
def test_band_on_the_mask_and_math_paths(kernel, d, dtype):
    """naive takes the band as a mask, d = 256 and float32 take the math backward: same answers."""
    if not runnable(kernel):
        pytest.skip("needs an sm_90 GPU")
    q, k, v = make_inputs(1, 2, 1, 333, 400, d, dtype, "bhnd", seed=d)
    check_band_call(kernel, q, k, v, True, 67, (50, 0), grads=True)


@pytest.mark.gpu
def test_patch_routes_causal_lower_right_to_the_kernels():
    """Inside sy.attention.patch(), torch's F.scaled_dot_product_attention with a causal_lower_right bias
    runs on our kernels (counted as taken), with torch's answer."""
    q, k, v = make_inputs(1, 2, 1, 200, 500, 64, torch.bfloat16, "bhnd", seed=3)
    bias = causal_lower_right(200, 500)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    with sy.attention.patch() as stats:
        got = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    assert (stats.taken, stats.fallbacks) == (1, 0), str(stats)
    assert relative_error(got, want.double()) <= 2e-2


# ---- packed variable-length batches (sympathy/attention/varlen.py) ------------------------------------
def packed(lengths_q, lengths_k, Hkv, group, d, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(sum(lengths_q), Hkv * group, d, generator=gen).to(dtype)
    k, v = (torch.randn(sum(lengths_k), Hkv, d, generator=gen).to(dtype) for _ in range(2))
    cu = [torch.tensor([0] + list(torch.tensor(lens).cumsum(0).tolist()), dtype=torch.int32) for lens in
          (lengths_q, lengths_k)]
    return q, k, v, cu[0], cu[1]


@pytest.mark.parametrize("change, error, words", [
    (dict(cu_seqlens_q=torch.tensor([0, 3, 2, 9], dtype=torch.int32)), ValueError, "without falling"),
    (dict(cu_seqlens_q=torch.tensor([0, 3, 5, 8], dtype=torch.int32)), ValueError, "rise from 0 to the 9 rows"),
    (dict(cu_seqlens_k=torch.tensor([0, 3, 5, 9], dtype=torch.int64)), TypeError, "int32"),
    (dict(max_seqlen_q=2), ValueError, "longest sequence"),
    (dict(dropout_p=0.1), NotImplementedError, "dropout"),
    (dict(window_size=(-3, 0)), ValueError, ">= -1"),
    (dict(q=torch.randn(9, 2, 32, dtype=torch.bfloat16)), ValueError, "head_dim"),
    (dict(kernel="tiled"), ValueError, "kernel must be"),
    (dict(), ValueError, "CUDA device"),
])
def test_varlen_arguments_are_checked_before_any_device_is_touched(change, error, words):
    q, k, v, cu_q, cu_k = packed([4, 0, 5], [3, 2, 4], 1, 2, 64, torch.bfloat16, 0)
    args = dict(q=q, k=k, v=v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=5, max_seqlen_k=4)
    args.update(change)
    with pytest.raises(error, match=words):
        sy.attention.varlen_attention(**args)


def check_varlen(kernel, lens_q, lens_k, d, dtype, causal, window, group, extra_max=0, seed=0):
    """Each sequence's output, LSE and dq, dk, dv against float64 with its own bottom-right band."""
    q, k, v, cu_q, cu_k = (t.cuda() for t in packed(lens_q, lens_k, 2, group, d, dtype, seed))
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out, lse = sy.attention.varlen_attention(*leaves, cu_q, cu_k, max(lens_q) + extra_max, max(lens_k), causal=causal,
                                             window_size=window, kernel=kernel, return_lse=True)
    dout = torch.randn_like(out)
    out.backward(dout)
    sq = sk = 0
    for n_q, n_k in zip(lens_q, lens_k):
        if n_q:
            views = [t[sq:sq + n_q].transpose(0, 1)[None] for t in (q, dout)]
            kv = [t[sk:sk + n_k].transpose(0, 1)[None].repeat_interleave(group, 1) for t in (k, v)]
            mask = band.band_mask(n_q, n_k, causal, n_k - n_q, window, device="cuda")
            ref_out, ref_lse = reference(views[0], *kv, attn_mask=mask) if n_k else (
                torch.zeros_like(views[0], dtype=torch.float64), torch.full(views[0].shape[:3], -math.inf).cuda())
            assert_close(out[sq:sq + n_q].transpose(0, 1)[None], lse[:, sq:sq + n_q][None], ref_out, ref_lse, dtype)
            if n_k:
                o = out[sq:sq + n_q].transpose(0, 1)[None].detach()
                want = list(reference_grads(views[0], *kv, views[1], out=o, attn_mask=mask))
                got = [leaves[0].grad[sq:sq + n_q]] + [t.grad[sk:sk + n_k] for t in leaves[1:]]
                want[1:] = [w.view(1, 2, group, n_k, d).sum(2) for w in want[1:]]   # a GQA group's sum
                for g, w in zip(got, want):
                    assert relative_error(g.transpose(0, 1)[None], w) <= GRAD_TOLERANCE[dtype]
        elif n_k:   # keys no query sees: zero gradients
            assert not leaves[1].grad[sk:sk + n_k].any() and not leaves[2].grad[sk:sk + n_k].any()
        sq, sk = sq + n_q, sk + n_k
    assert not any(torch.isnan(t.grad).any() for t in leaves)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", BAND_KERNELS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_varlen_matches_float64_per_sequence(kernel, data):
    """Lists of sequence lengths with empty and length-1 sequences (queries and keys apart): each sequence
    against float64 with its own bottom-right band; gradients too."""
    skip_unless_runnable(kernel)
    n = data.draw(st.integers(1, 6), label="batch")
    length = st.one_of(st.sampled_from([0, 1, 1]), st.integers(0, 300))
    lens_q = data.draw(st.lists(length, min_size=n, max_size=n), label="lens_q")
    lens_k = data.draw(st.one_of(st.just(lens_q), st.lists(length, min_size=n, max_size=n)), label="lens_k")
    if sum(lens_q) == 0 or sum(lens_k) == 0:
        lens_q, lens_k = lens_q[:-1] + [1], lens_k[:-1] + [1]
    check_varlen(kernel, lens_q, lens_k, data.draw(st.sampled_from([64, 128]), label="d"),
                 data.draw(st.sampled_from([torch.bfloat16, torch.float16]), label="dtype"),
                 data.draw(st.booleans(), label="causal"),
                 data.draw(st.sampled_from([(-1, -1), (16, 0), (0, 0), (40, 7), (500, -1)]), label="window"),
                 data.draw(st.sampled_from([1, 2]), label="group"), data.draw(st.integers(0, 200), label="extra_max"),
                 data.draw(st.integers(0, 99), label="seed"))


@pytest.mark.gpu
@pytest.mark.parametrize("lens_q, lens_k, causal, window", [
    ([1000, 0, 513, 1, 700], [1000, 37, 513, 900, 300], True, (-1, -1)),   # many blocks, empty and one-row sequences
    ([1500, 400], [1500, 400], True, (255, 0)),                            # windows inside long sequences
    ([600, 600], [900, 200], False, (-1, -1)),                             # Nq != Nk, not causal: ragged key blocks
])
def test_varlen_hopper_over_many_blocks(lens_q, lens_k, causal, window):
    skip_unless_runnable("hopper")
    check_varlen("hopper", lens_q, lens_k, 128, torch.bfloat16, causal, window, 2, seed=len(lens_q))
