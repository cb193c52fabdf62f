"""The hopper backward (cuda_src/attention_hopper_bwd.cu) with attn_mask tile by tile and with dropout:
which backward kernel a call launches (a recording proxy of the loaded library), gradients against float64
with the same mask or the same keep-mask, fully masked rows, and the deterministic dropout backward
bit-identical across runs. GPU only (marked `gpu`; an sm_90 GPU, else skipped).
"""
import math

import pytest

torch = pytest.importorskip("torch")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from sympathy.attention import cuda, dropout  # noqa: E402

from test_attention_gpu import make_inputs  # noqa: E402
from test_attention_gpu_backward import GRAD_TOLERANCE, reference_grads, relative_error  # noqa: E402
from test_attention_mask_tiles import random_mask  # noqa: E402


def on_hopper():
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


class _Recording:
    """The loaded library, recording the names of the attention entries called through it."""

    def __init__(self, lib, calls):
        self._lib, self._calls = lib, calls

    def __getattr__(self, name):
        attr = getattr(self._lib, name)
        if not name.startswith("sy_attn_"):
            return attr

        def call(*args):
            self._calls.append(name)
            return attr(*args)
        return call


@pytest.fixture
def launches(monkeypatch):
    """The list of sy_attn_* entries the test's calls run (cuda.library wrapped for the test)."""
    if not on_hopper():
        pytest.skip("the hopper backward needs an sm_90 GPU")
    calls, library = [], cuda.library

    def recording(arch):
        ffi, lib = library(arch)
        return ffi, _Recording(lib, calls)
    monkeypatch.setattr(cuda, "library", recording)
    return calls


def masked_grads(q, k, v, mask, dout, kernel):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = cuda.scaled_dot_product_attention(*leaves, mask, enable_gqa=True, kernel=kernel)
    out.backward(dout)
    return out, [t.grad for t in leaves]


def check_masked_backward(q, k, v, mask, launches):
    B, Hq, Nq, d = q.shape
    dout = torch.randn(B, Hq, Nq, d, device="cuda", dtype=q.dtype)
    del launches[:]
    out, grads = masked_grads(q, k, v, mask, dout, "hopper")
    torch.cuda.synchronize()
    assert launches[-1] == "sy_attn_hopper_bwd", launches
    dense = mask.expand(B, Hq, Nq, k.shape[2])
    want = reference_grads(q, k, v, dout, out=out.detach(), attn_mask=dense)
    for name, got, ref in zip("qkv", grads, want):
        assert torch.isfinite(got).all(), f"d{name} not finite"
        err = relative_error(got, ref.nan_to_num(0.0))
        assert err <= GRAD_TOLERANCE[q.dtype], f"d{name}: relative error {err:.2e}"
    return grads


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_masked_hopper_backward_matches_float64_over_padding_patterns(d, data, launches):
    B, Hkv, group = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 2)), data.draw(st.sampled_from([1, 2]))
    Nq, Nk = data.draw(st.integers(1, 420)), data.draw(st.integers(1, 420))
    dtype = data.draw(st.sampled_from([torch.float16, torch.bfloat16]))
    q, k, v = make_inputs(B, Hkv, group, Nq, Nk, d, dtype, data.draw(st.sampled_from(["bhnd", "bnhd"])),
                          data.draw(st.integers(0, 1000)))
    if data.draw(st.booleans()):   # padding: keys past each sequence's length (left or right), any length
        lens = torch.tensor([data.draw(st.integers(0, Nk)) for _ in range(B)])
        pos = torch.arange(Nk)
        keep = pos[None, :] < lens[:, None] if data.draw(st.booleans()) else pos[None, :] >= (Nk - lens)[:, None]
        keep = keep[:, None, None, :]
        if data.draw(st.booleans()):   # transformers' 4-D bool layout, or an additive (B, 1, 1, Nk) mask
            mask = keep.expand(B, 1, Nq, Nk).contiguous()
        else:
            mask = torch.zeros(keep.shape).masked_fill(~keep, -math.inf).to(data.draw(st.sampled_from([torch.float32, dtype])))
    else:
        mask = random_mask(data.draw, B, Hkv * group, Nq, Nk)
    check_masked_backward(q, k, v, mask.cuda(), launches)


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_masked_hopper_backward_over_many_blocks_and_fully_masked_rows(d, dtype, launches):
    B, N = 3, 1000
    q, k, v = make_inputs(B, 2, 2, N, N, d, dtype, "bhnd", 11)
    lens = torch.tensor([1000, 333, 0])   # the last sequence sees no key: its rows give 0, zero gradient
    keep = (torch.arange(N)[None, :] < lens[:, None])[:, None, None, :] & torch.ones(N, N, dtype=torch.bool).tril()
    keep[1, :, 500:700] = False           # whole rows masked inside a visible sequence
    grads = check_masked_backward(q, k, v, keep.cuda(), launches)
    assert bool((grads[0][2] == 0).all()) and bool((grads[0][1, :, 500:700] == 0).all())
    assert bool((grads[1][2] == 0).all()) and bool((grads[2][2] == 0).all())


@pytest.mark.gpu
def test_masked_hopper_backward_agrees_with_the_mma_backward(launches):
    q, k, v = make_inputs(2, 2, 1, 700, 650, 128, torch.bfloat16, "bhnd", 4)
    mask = torch.rand(2, 1, 700, 650, device="cuda") < 0.6
    mask[:, :, :, 300:] = False
    dout = torch.randn(2, 2, 700, 128, device="cuda", dtype=torch.bfloat16)
    _, hopper = masked_grads(q, k, v, mask, dout, "hopper")
    _, mma = masked_grads(q, k, v, mask, dout, "mma")
    assert "sy_attn_hopper_bwd" in launches and "sy_attn_mma_bwd" in launches
    for name, a, b in zip("qkv", hopper, mma):
        assert relative_error(a, b.double()) <= GRAD_TOLERANCE[torch.bfloat16], f"d{name}"


def dropout_grads(q, k, v, dout, p, causal, deterministic, seed=9, offset=4 * 77):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out, _ = dropout.attention(*leaves, p, causal, 1 / math.sqrt(q.shape[-1]), "hopper", deterministic=deterministic,
                               seed=seed, offset=offset)
    return out, torch.autograd.grad(out, leaves, dout)


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
def test_dropout_on_the_hopper_backward_deterministic_and_not(d, dtype, causal, launches):
    # Ragged Nq, Nk (not multiples of the 64- or 128-query tiles), GQA. fp16 at d = 64 deterministic: the
    # mma backward (its dQ uses atomics on the hopper backward: no fixed order).
    B, Hq, Hkv, Nq, Nk, p = 2, 4, 2, 333, 461, 0.2
    g = torch.Generator(device="cuda").manual_seed(2)
    q, k, v = (torch.randn(B, H, N, d, generator=g, device="cuda").to(dtype)
               for H, N in ((Hq, Nq), (Hkv, Nk), (Hkv, Nk)))
    dout = torch.randn(B, Hq, Nq, d, generator=g, device="cuda").to(dtype)
    keep = dropout._dropout_mask(B, Hq, Nq, Nk, p, 9, 4 * 77, q.device)
    leaves = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
    ref = dropout.reference(*leaves, keep, p, causal)
    ref_grads = torch.autograd.grad(ref, leaves, dout.double())
    runs = []
    for deterministic in (False, True, True):
        del launches[:]
        out, grads = dropout_grads(q, k, v, dout, p, causal, deterministic)
        torch.cuda.synchronize()
        mma = deterministic and dtype == torch.float16 and d == 64
        assert ("sy_attn_mma_bwd" if mma else "sy_attn_hopper_bwd") in launches, launches
        assert ("sy_attn_hopper_bwd" if mma else "sy_attn_mma_bwd") not in launches, launches
        for name, got, want in zip("qkv", grads, ref_grads):
            assert relative_error(got, want) <= GRAD_TOLERANCE[dtype], f"d{name} (deterministic={deterministic})"
        runs.append(grads)
    assert all(torch.equal(a, b) for a, b in zip(runs[1], runs[2])), "deterministic runs differ"
