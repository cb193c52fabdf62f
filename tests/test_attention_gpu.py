"""sy.attention.cuda.scaled_dot_product_attention: the CUDA kernels against a float64 reference.

The input checks run everywhere torch is installed (CPU tensors: they raise before any device is
touched); the kernel tests are marked `gpu` and skip where there is no CUDA GPU.
"""
import math

import pytest

torch = pytest.importorskip("torch")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

import sympathy as sy  # noqa: E402
from sympathy.attention import cuda  # noqa: E402

# Relative error bound (max |out - ref| / max |ref|) per input dtype. bf16 keeps 8 mantissa bits:
# rounding the output alone costs 2^-9 relative, and the mma kernel also rounds P to bf16 before
# P V, so 1.6e-2 is about four roundings; fp16 (11 bits) gets 8x less; fp32 inputs meet only
# ex2.approx and fp32 accumulation.
TOLERANCE = {torch.bfloat16: 1.6e-2, torch.float16: 4e-3, torch.float32: 2e-4}
LSE_TOLERANCE = 2e-3   # absolute, natural log: the scores are exact products summed in fp32


def reference(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """softmax(scale q k^T + mask) v and the log-sum-exp in float64; torch-SDPA semantics."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    if is_causal:   # top-left: row i sees keys 0..i
        nq, nk = s.shape[-2:]
        s = s.masked_fill(torch.ones(nq, nk, dtype=torch.bool, device=s.device).triu(1), -math.inf)
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, -math.inf) if attn_mask.dtype == torch.bool else s + attn_mask.double()
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)   # fully masked row: p = 0, not NaN
    p = torch.exp(s - m)
    l = p.sum(-1, keepdim=True)
    out = (p @ v) / torch.where(l == 0, torch.ones_like(l), l)
    lse = (m + torch.log(l)).squeeze(-1)
    return out, lse


def relative_error(out, ref):
    return ((out.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


# ---- input checks (no GPU needed) ---------------------------------------------------------------------
def cpu_qkv(B=1, H=2, N=8, d=64, dtype=torch.bfloat16):
    return [torch.randn(B, H, N, d, dtype=dtype) for _ in range(3)]


@pytest.mark.parametrize("case, error, words", [
    (dict(q=torch.randn(2, 8, 64)), ValueError, "4 dims"),
    (dict(q=torch.randn(1, 2, 8, 64, dtype=torch.float64)), TypeError, "float32, float16 or bfloat16"),
    (dict(q=torch.randn(1, 2, 8, 64, dtype=torch.float16)), TypeError, "one dtype"),
    (dict(q=torch.randn(1, 2, 64, 8, dtype=torch.bfloat16).transpose(-1, -2)), ValueError, "contiguous in its last dim"),
    (dict(q=torch.randn(1, 2, 0, 64, dtype=torch.bfloat16)), ValueError, ">= 1"),
    (dict(k=torch.randn(2, 2, 8, 64, dtype=torch.bfloat16)), ValueError, "batch size"),
    (dict(v=torch.randn(1, 2, 8, 32, dtype=torch.bfloat16)), ValueError, "head dim 64"),
    (dict(k=torch.randn(1, 1, 8, 64, dtype=torch.bfloat16), v=torch.randn(1, 1, 8, 64, dtype=torch.bfloat16)),
     ValueError, "enable_gqa"),
    (dict(q=torch.randn(1, 3, 8, 64, dtype=torch.bfloat16), k=torch.randn(1, 2, 8, 64, dtype=torch.bfloat16),
          v=torch.randn(1, 2, 8, 64, dtype=torch.bfloat16), enable_gqa=True), ValueError, "multiple"),
    (dict(is_causal=1), TypeError, "is_causal"),
    (dict(scale=float("nan")), ValueError, "scale"),
    (dict(kernel="fast"), ValueError, "kernel must be one of"),
    (dict(attn_mask=torch.ones(8, 8, dtype=torch.bool), kernel="tiled"), NotImplementedError, "naive"),
    (dict(attn_mask=torch.ones(8, 8, dtype=torch.bool), is_causal=True), ValueError, "not both"),
    (dict(attn_mask=torch.ones(3, 8, dtype=torch.bool)), ValueError, "broadcast"),
    (dict(attn_mask=torch.ones(8, 8, dtype=torch.int32)), TypeError, "bool or floating"),
    (dict(q=torch.randn(1, 2, 8, 96, dtype=torch.bfloat16), k=torch.randn(1, 2, 8, 96, dtype=torch.bfloat16),
          v=torch.randn(1, 2, 8, 96, dtype=torch.bfloat16), kernel="mma"), ValueError, "head dims (64, 128)"),
    (dict(q=torch.randn(1, 2, 8, 96, dtype=torch.bfloat16), k=torch.randn(1, 2, 8, 96, dtype=torch.bfloat16),
          v=torch.randn(1, 2, 8, 96, dtype=torch.bfloat16), kernel="hopper"), ValueError, "head dims (64, 128, 256)"),
    (dict(q=torch.randn(1, 2, 8, 96), k=torch.randn(1, 2, 8, 96), v=torch.randn(1, 2, 8, 96), kernel="tiled"),
     ValueError, "head dims (16, 32, 64, 128)"),
    (dict(q=torch.randn(1, 2, 8, 64), k=torch.randn(1, 2, 8, 64), v=torch.randn(1, 2, 8, 64), kernel="mma"),
     TypeError, "float16 or bfloat16"),
    (dict(q=torch.randn(1, 2, 8, 64), k=torch.randn(1, 2, 8, 64), v=torch.randn(1, 2, 8, 64), kernel="hopper"),
     TypeError, "float16 or bfloat16"),
    (dict(), ValueError, "CUDA device"),   # valid in every other way: the device check comes last
])
def test_bad_input_raises_before_any_device_is_touched(case, error, words):
    q, k, v = cpu_qkv()
    args = dict(q=q, k=k, v=v)
    args.update(case)
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        # the CUDA-only entry: sy.attention.scaled_dot_product_attention sends CPU tensors to the C kernel
        cuda.scaled_dot_product_attention(**args)


def test_auto_picks_the_fastest_kernel_that_supports_the_call():
    q, k, v = cpu_qkv()
    check = cuda._check_inputs
    with pytest.raises(ValueError, match="CUDA device"):   # every case passes the kernel checks first
        check(q, k, v, None, False, None, False, "auto")
    cases = {   # (dtype, d, mask) -> kernel auto resolves to, via the checks' return value on CUDA
        (torch.bfloat16, 64, False): "mma", (torch.float16, 128, False): "mma",
        (torch.float32, 64, False): "tiled", (torch.bfloat16, 32, False): "tiled",
        (torch.bfloat16, 48, False): "naive", (torch.bfloat16, 64, True): "naive",
    }
    for (dtype, d, masked), kernel in cases.items():
        q, k, v = cpu_qkv(d=d, dtype=dtype)
        mask = torch.ones(8, 8, dtype=torch.bool) if masked else None
        assert cuda._resolve_kernel(q, mask, "auto") == kernel


def test_import_does_not_import_torch_for_the_cpu_paths():
    import subprocess
    import sys

    code = "import sys, sympathy as sy; sy.attention.scaled_dot_product_attention; print('torch' in sys.modules)"
    from sympathy.config import package_parent   # the sympathy under test, not a source tree in cwd

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=package_parent())
    assert done.stdout.strip() == "False"


# ---- the kernels on the GPU ---------------------------------------------------------------------------
HEAD_DIMS = {"naive": (16, 40, 64, 128), "tiled": (16, 32, 64, 128), "mma": (64, 128), "hopper": (64, 128, 256)}
DTYPES = {"naive": (torch.bfloat16, torch.float16, torch.float32),
          "tiled": (torch.bfloat16, torch.float16, torch.float32),
          "mma": (torch.bfloat16, torch.float16), "hopper": (torch.bfloat16, torch.float16)}


def on_hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def runnable(kernel) -> bool:
    """Every kernel runs on any CUDA GPU of compute capability 8.0 or newer except `hopper` (sm_90 only)."""
    return kernel != "hopper" or on_hopper()


def skip_unless_runnable(kernel):
    if not runnable(kernel):
        pytest.skip(f"kernel={kernel!r} needs an sm_90 GPU (H100/H200)")


def make_inputs(B, Hkv, group, Nq, Nk, d, dtype, layout, seed):
    """q, k, v on the GPU; layout 'bhnd' (contiguous) or 'bnhd' (a transposed view, strided)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def one(H, N):
        shape = (B, H, N, d) if layout == "bhnd" else (B, N, H, d)
        t = torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32).to(dtype)
        return t if layout == "bhnd" else t.transpose(1, 2)

    return one(Hkv * group, Nq), one(Hkv, Nk), one(Hkv, Nk)


def run_poisoned(q, k, v, kernel, is_causal=False, attn_mask=None, scale=None):
    """Run one kernel into NaN-filled out and lse, so an element it fails to write shows as NaN."""
    B, H, Nq, d = q.shape
    out = torch.full((B, H, Nq, d), float("nan"), dtype=q.dtype, device=q.device)
    lse = torch.full((B, H, Nq), float("nan"), dtype=torch.float32, device=q.device)
    resolved = cuda._check_inputs(q, k, v, attn_mask, is_causal, scale, True, kernel)
    cuda._launch(q, k, v, attn_mask, is_causal, 1.0 / math.sqrt(d) if scale is None else scale, resolved,
                 out=out, lse=lse)
    torch.cuda.synchronize()
    return out, lse


def assert_close(out, lse, ref_out, ref_lse, dtype):
    assert not torch.isnan(out).any(), "an output element was left unwritten (NaN poison) or is NaN"
    assert not torch.isnan(lse).any(), "a log-sum-exp was left unwritten (NaN poison) or is NaN"
    err = relative_error(out, ref_out)
    assert err <= TOLERANCE[dtype], f"relative error {err:.2e} > {TOLERANCE[dtype]:.0e}"
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    lse_err = (lse.double()[finite] - ref_lse[finite]).abs().max().item() if finite.any() else 0.0
    assert lse_err <= LSE_TOLERANCE, f"log-sum-exp error {lse_err:.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", cuda.KERNELS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_kernel_matches_float64_reference_on_random_shapes(kernel, data):
    skip_unless_runnable(kernel)
    d = data.draw(st.sampled_from(HEAD_DIMS[kernel]), label="d")
    dtype = data.draw(st.sampled_from(DTYPES[kernel]), label="dtype")
    B = data.draw(st.integers(1, 3), label="B")
    Hkv = data.draw(st.integers(1, 3), label="Hkv")
    group = data.draw(st.sampled_from([1, 1, 2, 3]), label="group")
    Nq = data.draw(st.one_of(st.just(1), st.integers(1, 300)), label="Nq")
    Nk = data.draw(st.one_of(st.just(Nq), st.integers(1, 300)), label="Nk")
    causal = data.draw(st.booleans(), label="causal")
    layout = data.draw(st.sampled_from(["bhnd", "bnhd"]), label="layout")
    q, k, v = make_inputs(B, Hkv, group, Nq, Nk, d, dtype, layout, seed=data.draw(st.integers(0, 2**31)))
    out, lse = run_poisoned(q, k, v, kernel, is_causal=causal)
    ref_out, ref_lse = reference(q, k, v, is_causal=causal)
    assert_close(out, lse, ref_out, ref_lse, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", cuda.KERNELS)
@pytest.mark.parametrize("B, H, N, d, causal", [
    (1, 1, 1, 64, False),          # one query, one key
    (2, 3, 127, 64, True),         # odd N: a ragged last tile in both directions
    (64, 16, 64, 128, False),      # B*H large, N one tile
    (1, 2, 1000, 128, True),       # long enough for unmasked, diagonal and ragged blocks
    (2, 2, 2071, 64, False),       # many laps of a K/V ring (hopper: 17 blocks through 4 stages)
    (1, 3, 1500, 128, True),       # hopper at d = 128: 12 blocks through 2 stages, diagonal masks
])
def test_kernel_on_fixed_edge_shapes(kernel, B, H, N, d, causal):
    skip_unless_runnable(kernel)
    q, k, v = make_inputs(B, H, 1, N, N, d, torch.bfloat16, "bhnd", seed=N)
    out, lse = run_poisoned(q, k, v, kernel, is_causal=causal)
    assert_close(out, lse, *reference(q, k, v, is_causal=causal), torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize("N, causal", [(1000, True), (1100, False)])
def test_hopper_head_dim_256_over_many_blocks(N, causal):
    """d = 256 (64-key blocks, one Q buffer): 16-18 blocks through a 2-stage ring, diagonal masks,
    several tiles per persistent block; the backward takes the math path."""
    skip_unless_runnable("hopper")
    q, k, v = make_inputs(2, 2, 2, N, N, 256, torch.bfloat16, "bhnd", seed=N)
    assert_close(*run_poisoned(q, k, v, "hopper", is_causal=causal), *reference(q, k, v, is_causal=causal), torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize("Nq, Nk", [(100, 37), (37, 100), (65, 1)])
def test_causal_with_more_queries_than_keys_is_top_left(Nq, Nk):
    q, k, v = make_inputs(1, 2, 2, Nq, Nk, 64, torch.float16, "bnhd", seed=Nq * Nk)
    ref = reference(q, k, v, is_causal=True)
    for kernel in filter(runnable, cuda.KERNELS):
        assert_close(*run_poisoned(q, k, v, kernel, is_causal=True), *ref, torch.float16)


@pytest.mark.gpu
@pytest.mark.parametrize("scale", [-0.3, 0.0])
def test_negative_and_zero_scale_match_the_reference(scale):
    """softmax(scale q k^T) v for scale <= 0 (torch allows any scale): the kernels subtract a row's
    largest raw score, so a negative scale reaches them as -q and -scale; the gradients too."""
    q, k, v = make_inputs(1, 2, 1, 150, 150, 64, torch.bfloat16, "bhnd", seed=3)
    ref_out, ref_lse = reference(q, k, v, is_causal=True, scale=scale)
    for kernel in filter(runnable, cuda.KERNELS):
        assert_close(*run_poisoned(q, k, v, kernel, is_causal=True, scale=scale), ref_out, ref_lse, torch.bfloat16)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    sy.attention.scaled_dot_product_attention(*leaves, is_causal=True, scale=scale).float().square().sum().backward()
    ref_leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    reference(*ref_leaves, is_causal=True, scale=scale)[0].square().sum().backward()
    for ours, ref in zip(leaves, ref_leaves):
        assert relative_error(ours.grad, ref.grad) <= 3e-2


@pytest.mark.gpu
def test_attn_mask_on_naive_bool_and_float_and_fully_masked_rows():
    q, k, v = make_inputs(2, 2, 1, 33, 45, 64, torch.bfloat16, "bhnd", seed=7)
    gen = torch.Generator(device="cuda").manual_seed(1)
    mask = torch.rand(2, 1, 33, 45, generator=gen, device="cuda") > 0.3
    mask[0, 0, 5] = False   # a row with no key: output 0, lse -inf
    for m in (mask, torch.randn(33, 45, generator=gen, device="cuda", dtype=torch.bfloat16)):
        out, lse = run_poisoned(q, k, v, "naive", attn_mask=m)
        assert_close(out, lse, *reference(q, k, v, attn_mask=m), torch.bfloat16)
    out = sy.attention.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.all(out[0, :, 5] == 0)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["mma", "hopper"])
def test_misaligned_views_are_copied_and_still_right(kernel):
    skip_unless_runnable(kernel)
    base = torch.randn(1, 2, 64, 64 + 1, device="cuda", dtype=torch.bfloat16)
    q = base[..., 1:]   # rows start 2 bytes past a 16-byte boundary: neither cp.async nor TMA loads them in place
    k, v = q.clone(), q.clone()
    out = sy.attention.scaled_dot_product_attention(q, k, v, kernel=kernel)
    assert relative_error(out, reference(q, k, v)[0]) <= TOLERANCE[torch.bfloat16]


@pytest.mark.gpu
@pytest.mark.parametrize("N", [1500, 2300])   # 12 and 18 key blocks: several tiles per block
def test_hopper_ignores_a_stale_tile_counter(N):
    """The persistent grid's tile counter comes uninitialised from torch's allocator: the launcher
    zeroes it on the stream before every launch. A freed block full of INT_MIN values
    is what torch.empty(1, int32) most likely hands out next."""
    skip_unless_runnable("hopper")
    q, k, v = make_inputs(1, 2, 2, N, N, 128, torch.bfloat16, "bhnd", seed=N)
    stale = torch.full((128,), -2**31 + 5, dtype=torch.int32, device="cuda")
    del stale
    assert_close(*run_poisoned(q, k, v, "hopper", is_causal=True), *reference(q, k, v, is_causal=True), torch.bfloat16)


@pytest.mark.gpu
def test_auto_picks_hopper_on_sm90_and_hopper_elsewhere_is_a_clear_error():
    q, k, v = make_inputs(1, 2, 1, 64, 64, 64, torch.bfloat16, "bhnd", seed=11)
    if on_hopper():
        assert cuda._resolve_kernel(q, None, "auto") == "hopper"
    else:
        assert cuda._resolve_kernel(q, None, "auto") == "mma"
        with pytest.raises(sy.NotSupportedError, match="sm_90"):
            sy.attention.scaled_dot_product_attention(q, k, v, kernel="hopper")


@pytest.mark.gpu
def test_public_api_matches_torch_sdpa_and_traces_under_torch_compile():
    q, k, v = make_inputs(2, 2, 2, 200, 200, 128, torch.bfloat16, "bnhd", seed=3)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    ours = sy.attention.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    assert relative_error(ours, expected.double()) <= TOLERANCE[torch.bfloat16]

    compiled = torch.compile(lambda a, b, c: sy.attention.scaled_dot_product_attention(
        a, b, c, is_causal=True, enable_gqa=True) * 2, fullgraph=True)
    assert relative_error(compiled(q, k, v), 2 * ours.double()) <= 1e-6


@pytest.mark.gpu
def test_launches_on_the_current_stream():
    q, k, v = make_inputs(1, 4, 1, 512, 512, 64, torch.bfloat16, "bhnd", seed=5)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = sy.attention.scaled_dot_product_attention(q, k, v)
    side.synchronize()
    assert relative_error(out, reference(q, k, v)[0]) <= TOLERANCE[torch.bfloat16]
