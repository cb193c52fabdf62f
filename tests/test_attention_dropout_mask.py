"""Dropout together with an attn_mask in the fused kernels (issue 20): the mask tile by tile (mask_tiles.py,
kBandMask), the keep bits those of the unmasked call (a mask never changes which scores are kept).

CPU (in CI): the routing. dropout_reason serves a mask (with a band too: test_attention_dropout_window.py)
and refuses a mask in deterministic mode; torch_api.decide and the transformers attention function send a
masked dropout call to the fused dropout with its mask (path "cuda+mask+dropout") and a refused one to torch's SDPA with its reason;
cuda._hopper_backward_takes names the hopper backward's instantiations. GPU (marked `gpu`): output and gradients against
float64 with the same keep mask (the test-only mask path) and the same attn_mask, bool and additive,
padding-style (B, 1, 1, Nk) and full (B, 1, Nq, Nk), with empty and partial tiles, N not a multiple of 64,
GQA, both kernels, both head dims, both dtypes; the same seed gives the same output twice; the backward
each kernel runs is the one the routing names.
"""
import math
import types

import pytest

torch = pytest.importorskip("torch")

import sympathy as sy  # noqa: E402
from sympathy.attention import cuda, dropout, torch_api  # noqa: E402


# ---- CPU: routing ---------------------------------------------------------------------------------------
def fake_cuda(shape, dtype=torch.bfloat16):
    """What dropout_reason reads of a tensor: device, dtype, shape."""
    return types.SimpleNamespace(device=torch.device("cuda"), dtype=dtype, shape=shape)


def as_cuda(monkeypatch, kernel="hopper"):
    """CPU tensors routed as if on a CUDA GPU: dropout_reason sees a CUDA device (its logic unchanged),
    cuda._check_inputs answers `kernel`, and dropout.attention records what it was given."""
    real_reason = dropout.dropout_reason
    seen = {}

    def reason(q, *args, **kwargs):
        return real_reason(fake_cuda(tuple(q.shape), q.dtype), *args, **kwargs)

    def check_inputs(q, k, v, attn_mask, *args, **kwargs):
        seen["checked_mask"] = attn_mask
        return kernel

    def attention(q, k, v, p, is_causal, scale, picked, **kwargs):
        seen.update(kwargs, kernel=picked, p=p)
        return torch.zeros_like(q), torch.zeros(q.shape[:3])

    monkeypatch.setattr(dropout, "dropout_reason", reason)
    monkeypatch.setattr(cuda, "_check_inputs", check_inputs)
    monkeypatch.setattr(dropout, "attention", attention)
    return seen


def qkv(B=2, Hq=4, Hkv=2, N=100, d=64, dtype=torch.bfloat16):
    return torch.randn(B, Hq, N, d).to(dtype), torch.randn(B, Hkv, N, d).to(dtype), torch.randn(B, Hkv, N, d).to(dtype)


def test_decide_sends_a_masked_dropout_call_to_the_fused_dropout_with_its_mask(monkeypatch):
    seen = as_cuda(monkeypatch)
    q, k, v = qkv()
    mask = torch.ones(2, 1, 1, 100, dtype=torch.bool)
    mask[0, ..., 70:] = False
    decision = torch_api.decide(q, k, v, mask, 0.1, False, enable_gqa=True, deterministic=False)
    assert decision.path == "cuda+mask+dropout", decision.reason
    decision.run()
    assert seen["attn_mask"] is mask and seen["checked_mask"] is mask and seen["p"] == 0.1
    assert seen["kernel"] == "hopper" and seen["deterministic"] is False
    plain = torch_api.decide(q, k, v, None, 0.1, True, enable_gqa=True, deterministic=False)
    assert plain.path == "cuda+dropout"


@pytest.mark.parametrize("kwargs, words", [
    (dict(deterministic=True), "deterministic"),
    (dict(deterministic=True, window=(-1, 7)), "deterministic"),   # a band beside the mask: served since dropwin20
])
def test_decide_leaves_what_no_kernel_serves_to_torch_with_its_reason(monkeypatch, kwargs, words):
    as_cuda(monkeypatch)
    q, k, v = qkv()
    mask = torch.zeros(2, 1, 100, 100)
    decision = torch_api.decide(q, k, v, mask, 0.1, False, enable_gqa=True, **kwargs)
    assert decision.run is None and words in decision.reason


def test_decide_refuses_a_mask_the_fused_kernels_leave_to_naive(monkeypatch):
    as_cuda(monkeypatch, kernel="naive")   # _check_inputs picked naive (far rows, a tiny scale)
    q, k, v = qkv()
    decision = torch_api.decide(q, k, v, torch.zeros(2, 1, 100, 100), 0.1, False, enable_gqa=True)
    assert decision.run is None and "naive" in decision.reason


def test_transformers_routes_a_padding_mask_with_dropout_to_the_fused_kernels(monkeypatch):
    transformers_api = pytest.importorskip("sympathy.attention.transformers_api")
    pytest.importorskip("transformers")
    seen = as_cuda(monkeypatch)
    q, k, v = qkv(N=12)
    mask = torch.ones(2, 1, 12, 12, dtype=torch.bool)   # sdpa_mask's form: bidirectional, right padding
    mask[1, :, :, 9:] = False
    module = types.SimpleNamespace(is_causal=False, training=True, num_key_value_groups=2)
    monkeypatch.setitem(transformers_api._options, "deterministic", False)
    sy.attention.patch_stats(reset=True)
    out, _ = transformers_api.sympathy_attention_forward(module, q, k, v, mask, dropout=0.1, scaling=0.125)
    assert sy.attention.patch_stats().paths["cuda+mask+dropout"] == 1
    assert seen["attn_mask"] is mask and out.shape == (2, 12, 4, 64)
    # Deterministic: no kernel orders a masked dQ, so transformers' own SDPA runs it (here on the CPU).
    monkeypatch.setitem(transformers_api._options, "deterministic", True)
    sy.attention.patch_stats(reset=True)
    with torch.no_grad():
        transformers_api.sympathy_attention_forward(module, q.float(), k.float(), v.float(), mask, dropout=0.1,
                                                    scaling=0.125)
    stats = sy.attention.patch_stats()
    assert stats.fallbacks == 1 and any("deterministic" in r for r in stats.reasons)


# ---- GPU ------------------------------------------------------------------------------------------------
GRAD_TOLERANCE = {torch.bfloat16: 3e-2, torch.float16: 5e-3}
OUT_TOLERANCE = {torch.bfloat16: 1.6e-2, torch.float16: 4e-3}


def relative_error(x, ref):
    return ((x.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def kernels():
    on_hopper = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
    return ["mma", "hopper"] if on_hopper else ["mma"]


def inputs(B, Hq, Hkv, Nq, Nk, d, dtype, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, Hq, Nq, d, generator=gen, device="cuda").to(dtype)
    k, v = (torch.randn(B, Hkv, Nk, d, generator=gen, device="cuda").to(dtype) for _ in range(2))
    return q, k, v


def make_mask(kind, B, Nq, Nk, dtype):
    """Masks with empty tiles (keys 64.. of batch 0 padded away, a run of 130 masked keys), partial ones (a
    ragged padding edge, random holes) and full ones; every query row keeps at least one key."""
    gen = torch.Generator(device="cuda").manual_seed(7)
    keep = torch.ones(B, 1, Nq if kind.startswith("full") else 1, Nk, dtype=torch.bool, device="cuda")
    keep[0, ..., min(Nk, 61):] = False                     # padding: batch 0 sees 61 keys
    if B > 1:
        keep[1, ..., Nk // 3: Nk // 3 + 130] = False       # a hole of whole tiles
    if kind.startswith("full"):
        keep &= torch.rand(B, 1, Nq, Nk, generator=gen, device="cuda") > 0.3   # partial tiles everywhere
        keep[..., 0] = True
    if kind.endswith("bool"):
        return keep
    bias = torch.randn(keep.shape, generator=gen, device="cuda") * 0.5   # an additive mask with real values
    return bias.masked_fill(~keep, -math.inf).to(dtype)


def run(kernel, q, k, v, mask, dout, p, seed, ctr):
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out, lse = dropout.attention(*leaves, p, False, 1 / math.sqrt(q.shape[-1]), kernel, seed=seed, offset=ctr,
                                 attn_mask=mask)
    return (out, lse) + torch.autograd.grad(out, leaves, dout)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["mma", "hopper"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("kind", ["padding-bool", "padding-additive", "full-bool", "full-additive"])
@pytest.mark.parametrize("B, Hq, Hkv, Nq, Nk", [(2, 4, 2, 200, 333), (2, 2, 2, 129, 400), (1, 4, 1, 333, 190)])
def test_masked_dropout_matches_float64_with_the_same_keep_mask(kernel, dtype, d, kind, B, Hq, Hkv, Nq, Nk):
    if kernel not in kernels():
        pytest.skip("kernel='hopper' needs an sm_90 GPU")
    p, seed, ctr = 0.17, 123, 4 * 77
    q, k, v = inputs(B, Hq, Hkv, Nq, Nk, d, dtype)
    dout = torch.randn(B, Hq, Nq, d, device="cuda").to(dtype)
    mask = make_mask(kind, B, Nq, Nk, dtype)
    out, lse, *grads = run(kernel, q, k, v, mask, dout, p, seed, ctr)
    keep = dropout._dropout_mask(B, Hq, Nq, Nk, p, seed, ctr, q.device)   # the unmasked call's keep bits
    leaves = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
    ref = dropout.reference(*leaves, keep, p, attn_mask=mask)
    ref_grads = torch.autograd.grad(ref, leaves, dout.double())
    assert relative_error(out, ref) <= OUT_TOLERANCE[dtype]
    for name, g, r in zip("qkv", grads, ref_grads):
        assert relative_error(g, r) <= GRAD_TOLERANCE[dtype], f"d{name}"
    # Another keep mask gives another answer (the kernels applied these keep bits, not some others).
    other = dropout._dropout_mask(B, Hq, Nq, Nk, p, seed, ctr + 4 * B * Hq, q.device)
    assert relative_error(out, dropout.reference(*(t.detach() for t in (q, k, v)), other, p, attn_mask=mask)) \
        > OUT_TOLERANCE[dtype]
    # The LSE is the masked, undropped softmax's.
    _, lse_plain = cuda.attention_with_lse(q, k, v, mask, 0.0, kernel=kernel, enable_gqa=Hq != Hkv)
    assert torch.allclose(lse, lse_plain, atol=1e-5, equal_nan=True)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["mma", "hopper"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_same_seed_gives_the_same_masked_output_twice(kernel, dtype):
    if kernel not in kernels():
        pytest.skip("kernel='hopper' needs an sm_90 GPU")
    q, k, v = inputs(2, 4, 4, 300, 300, 128, dtype)
    mask = make_mask("padding-bool", 2, 300, 300, dtype)
    dout = torch.randn_like(q)
    first, again = (run(kernel, q, k, v, mask, dout, 0.1, 5, 0) for _ in range(2))
    assert torch.equal(first[0], again[0])
    torch.manual_seed(11)
    a = sy.attention.scaled_dot_product_attention(q, k, v, mask, 0.1, kernel=kernel)
    torch.manual_seed(11)
    b = sy.attention.scaled_dot_product_attention(q, k, v, mask, 0.1, kernel=kernel)
    assert torch.equal(a, b)


class Recorder:
    """The library with its backward entry points counted (the call goes through unchanged)."""

    def __init__(self, lib):
        self._lib, self.calls = lib, []

    def __getattr__(self, name):
        attr = getattr(self._lib, name)
        if name.startswith("sy_attn_") and name.endswith("_bwd"):
            def counted(*args):
                self.calls.append(name)
                return attr(*args)
            return counted
        return attr


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, d, expected", [
    (torch.float16, 128, "sy_attn_hopper_bwd"),   # the hopper instantiations with a mask and dropout
    (torch.bfloat16, 128, "sy_attn_hopper_bwd"),
    (torch.float16, 64, "sy_attn_mma_bwd"),       # no d = 64 dropout in the hopper backward
    (torch.bfloat16, 64, "sy_attn_mma_bwd"),
])
def test_the_masked_dropout_backward_runs_where_the_routing_says(monkeypatch, dtype, d, expected):
    if "hopper" not in kernels():
        pytest.skip("the hopper backward needs an sm_90 GPU")
    real = cuda.library
    recorders = []

    def library(arch):
        ffi, lib = real(arch)
        recorders.append(Recorder(lib))
        return ffi, recorders[-1]

    monkeypatch.setattr(cuda, "library", library)
    q, k, v = inputs(2, 4, 4, 200, 200, d, dtype)
    mask = make_mask("padding-bool", 2, 200, 200, dtype)
    run("hopper", q, k, v, mask, torch.randn_like(q), 0.1, 1, 0)
    assert [c for r in recorders for c in r.calls] == [expected]


@pytest.mark.parametrize("dtype, d, deterministic, dropout_on, masked, band, takes", [
    (torch.float16, 128, False, True, True, False, True),     # the hopper backward's mask + dropout kernels
    (torch.bfloat16, 128, False, True, True, False, True),
    (torch.float16, 64, False, True, True, False, False),     # no d = 64 mask + dropout on hopper
    (torch.bfloat16, 64, False, True, False, False, True),    # d = 64 dropout without a mask: hopper (drop64)
    (torch.bfloat16, 64, True, True, False, False, True),     # ... deterministic too (bf16: dQ through smem)
    (torch.float16, 64, True, True, False, False, False),     # fp16 d = 64 deterministic: the mma pass
    (torch.float16, 128, False, True, True, True, False),     # a band beside mask and dropout
    (torch.bfloat16, 128, False, True, False, False, True),   # dropout without a mask: as before
    (torch.bfloat16, 64, False, False, True, False, True),    # a mask without dropout: as before
    (torch.float16, 64, True, False, False, False, False),    # deterministic fp16 d = 64: the mma pass
])
def test_the_hopper_backward_takes_only_its_instantiations(dtype, d, deterministic, dropout_on, masked, band, takes):
    assert cuda._hopper_backward_takes(dtype, d, deterministic, dropout_on, masked, band) is takes
