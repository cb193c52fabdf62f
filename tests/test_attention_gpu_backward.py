"""The backward of sy.attention.scaled_dot_product_attention (cuda_src/attention_hopper_bwd.cu after a
`hopper` forward on sm_90, cuda_src/attention_mma_bwd.cu otherwise for fp16/bf16,
cuda_src/attention_bwd.cu for float32).

Gradients against float64 torch autograd of the definition, deterministic mode, torch.compile with
a backward, and a small transformer trained with our attention beside torch's SDPA. The gradcheck of
the backward's formula runs on the CPU in float64 (the kernels have no float64 path); everything
else is marked `gpu` and skips where there is no CUDA GPU.
"""
import math
import re

import pytest

torch = pytest.importorskip("torch")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

import sympathy as sy  # noqa: E402
from sympathy.attention import cuda  # noqa: E402

# max |grad - ref| / max |ref| per input dtype. The backward reads bf16 inputs, the bf16-rounded
# forward output (for D = rowsum(dO o O)) and rounds each gradient once; its sums over up to N
# terms run in fp32. 3e-2 is about six bf16 roundings; fp16 keeps 3 more bits.
GRAD_TOLERANCE = {torch.bfloat16: 3e-2, torch.float16: 5e-3, torch.float32: 5e-4}


def reference_attention(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """softmax(scale q k^T + mask) v and the log-sum-exp, in q's dtype (float64 in these tests)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    if is_causal:
        nq, nk = s.shape[-2:]
        s = s.masked_fill(torch.ones(nq, nk, dtype=torch.bool, device=s.device).triu(1), -math.inf)
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, -math.inf) if attn_mask.dtype == torch.bool else s + attn_mask.to(s.dtype)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.where(torch.isinf(lse).unsqueeze(-1), torch.zeros_like(s), torch.exp(s - lse.unsqueeze(-1)))
    return p @ v, lse


def reference_grads(q, k, v, dout, out=None, **kwargs):
    """(dq, dk, dv) in float64. Without `out`: autograd of the definition. With `out`, the forward
    kernel's output in q's dtype: the backward's formula (cuda._math_backward, which the gradcheck
    below equates with autograd of the definition) in float64 with D = rowsum(dO o out). The backward
    reads the forward's rounded O (as FlashAttention's does); that rounding is the forward's error
    (test_attention_gpu.py bounds it), and where a row's softmax is nearly saturated it moves dQ by more
    than any bf16 tolerance (seen: Nq = 2, Nk = 85, causal, d = 16, 0.28 relative), so the kernels'
    gradients are held to what they should give for the O they were handed."""
    if out is None:
        leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
        ref_out, _ = reference_attention(*leaves, **kwargs)
        ref_out.backward(dout.double())
        return [t.grad for t in leaves]
    q, k, v, dout, out = (t.detach().double() for t in (q, k, v, dout, out))
    _, lse = reference_attention(q, k, v, **kwargs)
    scale = 1.0 / math.sqrt(q.shape[-1])
    return cuda._math_backward(dout, q, k, v, out, lse, kwargs.get("attn_mask"), kwargs.get("is_causal", False), scale,
                               rows_complete=True)


def relative_error(x, ref, floor=1e-2):
    """max |x - ref| / max |ref|, the denominator floored at `floor`: an exactly-zero gradient (dq and
    dk when every row sees a single key: its softmax is constant) leaves only the rounding of
    dS = P o (dP - D), a difference of two O(|dO| |V|) sums taken in different orders (dP by the
    tensor cores, D by the preprocess pass): ~1e-6 per element in fp32, summed over every query row
    of a GQA group into dK."""
    return ((x.double() - ref).abs().max() / ref.abs().max().clamp_min(floor)).item()


# ---- the backward's formula, float64 gradcheck (CPU) ---------------------------------------------------
class FormulaAttention(torch.autograd.Function):
    """The forward of the definition with cuda._math_backward as its backward: the algorithm of
    attention_bwd.cu (P from the saved LSE, D = rowsum(dO o O), dK/dV summed over a GQA group)."""

    @staticmethod
    def forward(ctx, q, k, v, attn_mask, is_causal, scale):
        out, lse = reference_attention(q, k, v, attn_mask, is_causal, scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.attn_mask, ctx.is_causal, ctx.scale = attn_mask, is_causal, scale
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = cuda._math_backward(dout, q, k, v, out, lse, ctx.attn_mask, ctx.is_causal, ctx.scale)
        return dq, dk, dv, None, None, None


@pytest.mark.parametrize("Hq, Hkv, Nq, Nk, causal, masked", [
    (2, 2, 5, 5, False, False), (4, 2, 7, 5, True, False), (3, 1, 4, 9, True, False), (2, 2, 6, 6, False, True),
])
def test_backward_formula_passes_float64_gradcheck(Hq, Hkv, Nq, Nk, causal, masked):
    gen = torch.Generator().manual_seed(Hq * 100 + Nq * 10 + Nk)
    d = 4
    q = torch.randn(2, Hq, Nq, d, dtype=torch.float64, generator=gen, requires_grad=True)
    k = torch.randn(2, Hkv, Nk, d, dtype=torch.float64, generator=gen, requires_grad=True)
    v = torch.randn(2, Hkv, Nk, d, dtype=torch.float64, generator=gen, requires_grad=True)
    mask = None
    if masked:   # includes a fully masked row: its gradient is 0, not NaN
        mask = torch.rand(Nq, Nk, generator=gen) > 0.4
        mask[0] = False
    assert torch.autograd.gradcheck(lambda a, b, c: FormulaAttention.apply(a, b, c, mask, causal, 0.7), (q, k, v))


def test_deterministic_must_be_a_bool():
    q = torch.randn(1, 2, 8, 64, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="deterministic must be a bool"):
        sy.attention.scaled_dot_product_attention(q, q, q, deterministic=1)


# ---- the kernels on the GPU ----------------------------------------------------------------------------
def on_hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def tensor_core_kernels():
    """The forward kernels whose backward runs on tensor cores here: `hopper` takes its own backward."""
    return ["mma", "hopper"] if on_hopper() else ["mma"]


def gpu_inputs(B, Hkv, group, Nq, Nk, d, dtype, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, Hkv * group, Nq, d, device="cuda", dtype=dtype, generator=gen)
    k, v = (torch.randn(B, Hkv, Nk, d, device="cuda", dtype=dtype, generator=gen) for _ in range(2))
    dout = torch.randn(B, Hkv * group, Nq, d, device="cuda", dtype=dtype, generator=gen)
    return q, k, v, dout


def our_grads(q, k, v, dout, **kwargs):
    """Gradients through sy.attention; deterministic=False forces the atomic dQ path at every length
    (by default short key sequences take the separate dQ pass: cuda.SEPARATE_DQ_MAX_KEYS)."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    atomic = kwargs.get("deterministic") is False
    threshold = cuda.SEPARATE_DQ_MAX_KEYS
    cuda.SEPARATE_DQ_MAX_KEYS = 0 if atomic else threshold
    try:
        out = sy.attention.scaled_dot_product_attention(*leaves, enable_gqa=True, **kwargs)
        out.backward(dout)
    finally:
        cuda.SEPARATE_DQ_MAX_KEYS = threshold
    return [t.grad for t in leaves]


def our_output(q, k, v, **kwargs):
    """The forward output that our_grads' backward read (the forward is deterministic)."""
    kwargs.pop("deterministic", None)
    return sy.attention.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kwargs)


def assert_grads_close(grads, refs, dtype):
    """Each gradient against its own largest element; a gradient that is exactly zero is held to
    1e-2 of the largest of the three (its rounding noise scales with the sums the others are made
    of; seen: fp32, Nk = 1, a group of 4 x 27 query rows, |dk| 5e-6 against |dv| 15)."""
    yardstick = max(ref.abs().max().item() for ref in refs)
    for name, g, ref in zip(("dq", "dk", "dv"), grads, refs):
        assert g.dtype == dtype and g.shape == ref.shape, name
        assert torch.isfinite(g).all(), f"{name} has non-finite elements"
        err = relative_error(g, ref, floor=max(1e-2, 1e-2 * yardstick))
        assert err <= GRAD_TOLERANCE[dtype], f"{name}: relative error {err:.2e}"


@pytest.mark.gpu
@given(data=st.data())
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_gradients_match_float64_autograd_on_random_shapes(data):
    kernel = data.draw(st.sampled_from(tensor_core_kernels() + ["tiled"]), "forward kernel")
    d = data.draw(st.sampled_from([64, 128] if kernel != "tiled" else [16, 32, 64, 128]), "d")
    dtype = data.draw(st.sampled_from([torch.bfloat16, torch.float16] + ([torch.float32] if kernel == "tiled" else [])))
    B = data.draw(st.integers(1, 2), "B")
    Hkv, group = data.draw(st.integers(1, 2), "Hkv"), data.draw(st.sampled_from([1, 2, 4]), "group")
    Nq, Nk = data.draw(st.integers(1, 300), "Nq"), data.draw(st.integers(1, 300), "Nk")
    causal = data.draw(st.booleans(), "causal")
    deterministic = data.draw(st.booleans(), "deterministic")
    q, k, v, dout = gpu_inputs(B, Hkv, group, Nq, Nk, d, dtype, seed=Nq * 1000 + Nk)
    grads = our_grads(q, k, v, dout, is_causal=causal, kernel=kernel, deterministic=deterministic)
    out = our_output(q, k, v, is_causal=causal, kernel=kernel)
    assert_grads_close(grads, reference_grads(q, k, v, dout, out=out, is_causal=causal), dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["mma", "hopper"])
@pytest.mark.parametrize("Nq, Nk, d, group, causal", [
    (1, 1, 64, 1, False), (127, 129, 128, 2, True), (1000, 37, 64, 4, True), (37, 1000, 128, 1, True),
    (513, 513, 64, 1, False), (300, 700, 128, 1, False), (700, 300, 64, 2, True),
])
def test_gradients_on_fixed_edge_shapes(kernel, Nq, Nk, d, group, causal):
    if kernel not in tensor_core_kernels():
        pytest.skip("kernel='hopper' needs an sm_90 GPU")
    q, k, v, dout = gpu_inputs(1, 2, group, Nq, Nk, d, torch.bfloat16, seed=7)
    for deterministic in (False, True):
        grads = our_grads(q, k, v, dout, is_causal=causal, kernel=kernel, deterministic=deterministic)
        out = our_output(q, k, v, is_causal=causal, kernel=kernel)
        assert_grads_close(grads, reference_grads(q, k, v, dout, out=out, is_causal=causal), torch.bfloat16)


def cuda_kernel_names(fn):
    """The demangled names of the CUDA kernels fn() launches, joined."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        result = fn()
        torch.cuda.synchronize()
    return " ".join(event.key for event in prof.key_averages()), result


@pytest.mark.gpu
@pytest.mark.parametrize("deterministic, d, dtype, expected, absent", [
    (False, 128, torch.float16, "hopper_bwd_kernel", "dkdv_kernel"),
    (True, 128, torch.float16, "hopper_bwd_kernel", "dkdv_kernel"),
    (True, 64, torch.bfloat16, "hopper_bwd_kernel", "dkdv_kernel"),
    (True, 64, torch.float16, "dkdv_kernel", "hopper_bwd_kernel"),
])
def test_hopper_forward_takes_the_hopper_backward_unless_deterministic_fp16_d64(deterministic, d, dtype, expected,
                                                                                absent):
    """Deterministic calls stay on the hopper backward where its dQ goes through shared memory (bf16, or
    d = 128); fp16 at d = 64 takes the mma backward's separate dQ pass."""
    if not on_hopper():
        pytest.skip("the hopper backward needs an sm_90 GPU")
    q, k, v, dout = gpu_inputs(1, 2, 1, 4096, 4096, d, dtype, seed=5)
    leaves = [t.requires_grad_() for t in (q, k, v)]
    out = sy.attention.scaled_dot_product_attention(*leaves, kernel="hopper", deterministic=deterministic)
    names, _ = cuda_kernel_names(lambda: out.backward(dout))
    assert expected in names and absent not in names


@pytest.mark.gpu
def test_attn_mask_and_odd_head_dims_take_the_math_backward():
    q, k, v, dout = gpu_inputs(1, 2, 1, 50, 60, 40, torch.float32, seed=11)
    mask = torch.rand(50, 60, device="cuda") > 0.3
    mask[3] = False
    grads = our_grads(q, k, v, dout, attn_mask=mask)
    assert_grads_close(grads, reference_grads(q, k, v, dout, attn_mask=mask), torch.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, kernel", [(torch.float32, "tiled"), (torch.bfloat16, "mma"), (torch.bfloat16, "hopper")])
def test_single_key_gives_zero_dq_dk_up_to_rounding(dtype, kernel):
    """Nk = 1: every softmax row is the constant 1, so dQ and dK are exactly 0 and only rounding of
    dS = dP - D remains, summed into dK over a GQA group of 4 x 27 query rows (hypothesis found this
    case against a fixed 1e-2 floor: fp32 |dk| 5e-6, now held to 1e-2 of |dv|)."""
    if kernel not in tensor_core_kernels() + ["tiled"]:
        pytest.skip("kernel='hopper' needs an sm_90 GPU")
    q, k, v, dout = gpu_inputs(1, 1, 4, 27, 1, 64, dtype, seed=27)
    grads = our_grads(q, k, v, dout, kernel=kernel, deterministic=False)
    out = our_output(q, k, v, kernel=kernel)
    refs = reference_grads(q, k, v, dout, out=out)
    assert max(refs[0].abs().max(), refs[1].abs().max()) < 1e-9   # the case is the one meant
    assert_grads_close(grads, refs, dtype)


@pytest.mark.gpu
def test_deterministic_mode_is_bit_identical_across_runs():
    assert_deterministic_is_bit_identical(*gpu_inputs(2, 2, 2, 777, 777, 128, torch.bfloat16, seed=13))


def assert_deterministic_is_bit_identical(q, k, v, dout):
    """Two deterministic causal backwards give the same bits, and agree with the atomic one."""
    first = our_grads(q, k, v, dout, is_causal=True, deterministic=True)
    second = our_grads(q, k, v, dout, is_causal=True, deterministic=True)
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    atomic = our_grads(q, k, v, dout, is_causal=True, deterministic=False)
    for a, b in zip(first, atomic):   # same math, another summation order for dQ only
        assert relative_error(b, a.double()) <= 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("d, dtype, causal, window", [
    (64, torch.bfloat16, False, None), (128, torch.float16, True, None), (128, torch.bfloat16, False, (100, 30)),
    (64, torch.bfloat16, True, (200, 0)),
])
def test_hopper_deterministic_backward_is_bit_identical_and_correct(d, dtype, causal, window):
    """The hopper backward's deterministic mode (key blocks add a query tile's dQ in a fixed order:
    ascending without a band, descending from the diagonal with one) on several key blocks and query
    tiles, GQA, a ragged last tile: two runs give the same bits, and the gradients match float64."""
    if not on_hopper():
        pytest.skip("the hopper backward needs an sm_90 GPU")
    q, k, v, dout = gpu_inputs(2, 2, 2, 777, 901, d, dtype, seed=d + causal)
    kwargs = dict(is_causal=causal, kernel="hopper", deterministic=True)
    if window is not None:
        kwargs["window"] = window
    first = our_grads(q, k, v, dout, **kwargs)
    second = our_grads(q, k, v, dout, **kwargs)
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    if window is None:
        out = our_output(q, k, v, **kwargs)
        assert_grads_close(first, reference_grads(q, k, v, dout, out=out, is_causal=causal), dtype)
    # Against the atomic mode (the band's own tests hold it to float64): same math, dQ summed in
    # another order.
    atomic = our_grads(q, k, v, dout, **dict(kwargs, deterministic=False))
    for a, b in zip(first, atomic):
        assert relative_error(b, a.double()) <= 1e-2


WIDE_TILES = re.compile(r"HopperBwdTraits<128, \d+, true, false, 80>")


def assert_80_query_tiles_correct(q, k, v, dout, dtype, is_causal):
    """The backward runs the 80-query kernel and its transposed dQ conversion; its gradients match float64, and the
    deterministic mode's are bit-identical across two runs and as close."""
    kwargs = dict(kernel="hopper", is_causal=is_causal)
    names, grads = cuda_kernel_names(lambda: our_grads(q, k, v, dout, deterministic=False, **kwargs))
    assert WIDE_TILES.search(names) and "dq_tiled_convert_t_kernel" in names, names
    refs = reference_grads(q, k, v, dout, out=our_output(q, k, v, **kwargs), is_causal=is_causal)
    assert_grads_close(grads, refs, dtype)
    first, second = (our_grads(q, k, v, dout, deterministic=True, **kwargs) for _ in range(2))
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    assert_grads_close(first, refs, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("Nq, Nk", [(80, 128), (128, 200), (161, 77), (1000, 300)])
def test_hopper_d128_without_a_band_runs_80_query_tiles(dtype, Nq, Nk):
    """d = 128 without a band walks 80-query tiles (dQ^T per warpgroup, a transposed dQ share with its own
    conversion kernel, workspaces of whole 80-row tiles from sy_attn_hopper_bwd_rows): one exact tile, Nq = 128
    (two tiles, 160 rows: past the 128-row rounding), ragged last tiles, two batches and GQA (a tile past its
    head's rows would add into the next head's). Gradients against float64, the deterministic mode bit-identical
    and as close; a causal call (below 8192 query rows) keeps the 64-query tiles."""
    if not on_hopper():
        pytest.skip("the hopper backward needs an sm_90 GPU")
    q, k, v, dout = gpu_inputs(2, 2, 2, Nq, Nk, 128, dtype, seed=Nq + Nk)
    assert_80_query_tiles_correct(q, k, v, dout, dtype, is_causal=False)
    names, _ = cuda_kernel_names(lambda: our_grads(q, k, v, dout, kernel="hopper", is_causal=True))
    assert not WIDE_TILES.search(names) and "dq_tiled_convert_kernel" in names, names


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("Nq, Nk", [(8192, 8192), (8200, 8500), (8277, 5000)])
def test_hopper_d128_causal_long_runs_80_query_tiles(dtype, Nq, Nk):
    """Causal at d = 128 from SY_HOPPER_BWD_D128_CAUSAL_WIDE_MIN_Q (8192) query rows on walks the 80-query tiles
    too, with the diagonal's masked tiles and the loop's end read from the parameters: square, Nk > Nq (torch's
    top-left diagonal: the key blocks past the last query see no tile, an empty range), Nk < Nq with ragged tiles; GQA.
    Gradients against float64, the deterministic mode (key blocks descending from the diagonal) bit-identical."""
    if not on_hopper():
        pytest.skip("the hopper backward needs an sm_90 GPU")
    q, k, v, dout = gpu_inputs(1, 2, 2, Nq, Nk, 128, dtype, seed=Nq + Nk + 1)
    assert_80_query_tiles_correct(q, k, v, dout, dtype, is_causal=True)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["mma", "hopper"])
def test_a_non_contiguous_lse_gives_the_bits_of_a_contiguous_one(kernel):
    """The ring's backward steps pass row slices of the merged out and lse (non-contiguous views): _launch_bwd copies
    lse, and the copy must live until the kernels have read it. (A copy freed at once handed its memory to the
    workspaces allocated after it, and the preprocess overwrote the LSE: gradients off by 1e3.)"""
    if kernel not in tensor_core_kernels():
        pytest.skip("kernel='hopper' needs an sm_90 GPU")
    q, k, v, dout = gpu_inputs(1, 2, 4, 512, 512, 128, torch.bfloat16, seed=3)
    scale = 1 / math.sqrt(128)
    out, lse = cuda._launch(q, k, v, None, False, scale, kernel)
    rows = slice(256, None)
    views = (dout[:, :, rows], q[:, :, rows], k, v, out[:, :, rows], lse[:, :, rows])
    assert not lse[:, :, rows].is_contiguous()
    # Deterministic: the atomic modes add dQ in a different order each run, so only this mode can compare bits.
    sliced = cuda._launch_bwd(*views, None, False, scale, True, kernel)
    copied = cuda._launch_bwd(*(t.contiguous() for t in views), None, False, scale, True, kernel)
    for a, b in zip(sliced, copied):
        assert torch.equal(a, b)
    assert_grads_close(sliced, reference_grads(*views[1:4], views[0], out=views[4]), torch.bfloat16)


@pytest.mark.gpu
def test_hopper_bwd_rows_cover_whole_80_query_tiles():
    """sy_attn_hopper_bwd_rows: Nq rounded up to SY_ATTN_BWD_ROW_ALIGN (128), after whole 80-row tiles where the
    backward walks them (d = 128 without a band, attn_mask, dropout or varlen; causal from 8192 query rows)."""
    if not on_hopper():
        pytest.skip("the hopper backward needs an sm_90 GPU")
    ffi, lib = cuda.library(cuda.device_arch(torch.device("cuda")))
    cu_seqlens = ffi.new("int[2]", [0, 4096])

    def rows(n, d=128, causal=0, dropout_p=0.0, varlen=False):
        p = ffi.new("sy_attn_bwd_params *")
        p.batch, p.heads_q, p.heads_kv, p.seqlen_q, p.seqlen_k, p.head_dim = 1, 1, 1, n, n, d
        p.is_causal, p.dropout_p = causal, dropout_p
        if varlen:
            p.cu_seqlens_q = p.cu_seqlens_k = cu_seqlens
            p.max_seqlen_q = p.max_seqlen_k = n
        return lib.sy_attn_hopper_bwd_rows(p)
    assert [rows(n) for n in (1, 80, 81, 128, 1024, 4096)] == [128, 128, 256, 256, 1152, 4224]
    assert rows(4096, d=64) == rows(4096, causal=1) == rows(4096, dropout_p=0.1) == rows(4096, varlen=True) == 4096
    assert rows(8192, causal=1) == 8320 and rows(8191, causal=1) == 8192   # causal: wide from 8192 rows
    assert rows(1000, d=64) == 1024


@pytest.mark.gpu
@pytest.mark.parametrize("d, dtype", [(64, torch.float16), (128, torch.bfloat16)])
def test_strided_views_give_the_same_bits_as_contiguous_inputs(d, dtype):
    """(B, N, H, d) tensors seen as (B, H, N, d) through .transpose(1, 2): the backward reads them by
    strides, so the deterministic gradients equal those of contiguous copies bit for bit."""
    gen = torch.Generator(device="cuda").manual_seed(d)
    q, k, v, dout = (torch.randn(2, 300, 4, d, device="cuda", dtype=dtype, generator=gen).transpose(1, 2) for _ in range(4))
    strided = our_grads(q, k, v, dout, is_causal=True, deterministic=True)
    contiguous = our_grads(*(t.contiguous() for t in (q, k, v, dout)), is_causal=True, deterministic=True)
    for a, b in zip(strided, contiguous):
        assert torch.equal(a, b)
    assert_grads_close(strided, reference_grads(q, k, v, dout, is_causal=True), dtype)


@pytest.mark.gpu
def test_torch_compile_traces_forward_and_backward():
    q, k, v, dout = gpu_inputs(1, 2, 2, 200, 200, 64, torch.bfloat16, seed=17)

    def loss(a, b, c):
        return (sy.attention.scaled_dot_product_attention(a, b, c, is_causal=True, enable_gqa=True) * dout).sum()

    compiled = torch.compile(loss, fullgraph=True)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    compiled(*leaves).backward()
    assert_grads_close([t.grad for t in leaves], reference_grads(q, k, v, dout, is_causal=True), torch.bfloat16)


@pytest.mark.gpu
def test_small_transformer_trains_like_torch_sdpa():
    from sympathy.demos import attention_train

    curves = attention_train.train_both(steps=300)
    ours, theirs = curves["sympathy"], curves["torch-sdpa"]
    assert ours[-1] < 0.8 * ours[0], "the model did not learn"
    # Same seed, same data: the curves differ only by bf16 rounding in attention; averaged over the
    # last 20 steps they agree within 2 %.
    tail = slice(-20, None)
    mean_ours, mean_theirs = sum(ours[tail]) / 20, sum(theirs[tail]) / 20
    assert abs(mean_ours - mean_theirs) <= 0.02 * mean_theirs
