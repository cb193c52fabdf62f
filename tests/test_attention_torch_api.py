"""Every attention entry point called exactly as torch's SDPA is called (positionally), compared with
torch; the one entry for every device (torch CPU tensors -> the C kernel, differentiable); dropout,
empty inputs and masks routed, never silently ignored (issue #16)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import sympathy as sy  # noqa: E402
from sympathy.attention.torch_api import decide  # noqa: E402

NUMPY_ENTRIES = [sy.attention.reference, sy.attention.tiled, sy.attention.cpu]


def qkv(B=2, Hq=4, Hkv=2, Nq=9, Nk=9, d=16, dv=16, seed=0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(B, Hq, Nq, d, generator=gen, dtype=dtype),
            torch.randn(B, Hkv, Nk, d, generator=gen, dtype=dtype),
            torch.randn(B, Hkv, Nk, dv, generator=gen, dtype=dtype))


def left_padding_mask(starts, n, causal=True):
    keys = torch.arange(n)
    mask = keys[None, None, :] >= torch.tensor(starts)[:, None, None]
    if causal:
        mask = mask & torch.ones(n, n, dtype=torch.bool).tril()
    return mask[:, None]


# ---- positional calls, exactly as torch's ------------------------------------------------------------------
POSITIONAL = [   # (positional args after q, k, v; keyword args): torch takes scale and enable_gqa by keyword
    ((None, 0.0, True), {}),
    ((None, 0.0, False), {}),
    ((None, 0.0, True), {"scale": 0.3}),
    ((None, 0.0, False), {"scale": 2.0, "enable_gqa": True}),
    ((None, 0.0, True), {"enable_gqa": True}),
]


@pytest.mark.parametrize("args, kwargs", POSITIONAL)
def test_numpy_entries_called_as_torch_match_torch(args, kwargs):
    q, k, v = qkv(Hkv=2 if kwargs.get("enable_gqa") else 4, Nk=9, dv=8)
    expected = F.scaled_dot_product_attention(q, k, v, *args, **kwargs).double().numpy()
    for fn in NUMPY_ENTRIES:
        got = fn(q.numpy(), k.numpy(), v.numpy(), *args, **kwargs)
        np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-5, err_msg=fn.__name__)


@pytest.mark.parametrize("args, kwargs", POSITIONAL)
def test_torch_entry_called_as_torch_matches_torch(args, kwargs):
    q, k, v = qkv(Hkv=2 if kwargs.get("enable_gqa") else 4, Nq=7, Nk=11, dv=8)
    expected = F.scaled_dot_product_attention(q, k, v, *args, **kwargs)
    got = sy.attention.scaled_dot_product_attention(q, k, v, *args, **kwargs)
    assert decide(q, k, v, *args, **kwargs).path == "cpu"          # ran on the C kernel
    torch.testing.assert_close(got, expected, rtol=2e-5, atol=2e-5)
    # NumPy arrays through the same entry go to sy.attention.cpu
    np.testing.assert_allclose(sy.attention.scaled_dot_product_attention(q.numpy(), k.numpy(), v.numpy(),
                                                                         *args, **kwargs),
                               expected.numpy(), rtol=2e-5, atol=2e-5)


def test_the_old_positional_order_is_refused_not_misread():
    """(q, k, v, is_causal, scale) was the old order: True as attn_mask and 0.5 as dropout now."""
    q, k, v = qkv()
    for fn in NUMPY_ENTRIES:
        with pytest.raises((TypeError, NotImplementedError)):
            fn(q.numpy(), k.numpy(), v.numpy(), True, 0.5)
    with pytest.raises(TypeError):   # torch itself refuses scale positionally; so do we
        sy.attention.cpu(q.numpy(), k.numpy(), v.numpy(), None, 0.0, True, 0.5)


# ---- autograd on the C kernel --------------------------------------------------------------------------------
@pytest.mark.parametrize("causal, dv", [(True, 16), (False, 8)])
def test_cpu_tensors_are_differentiable(causal, dv):
    ours = [t.requires_grad_() for t in qkv(dv=dv, seed=1)]
    ref = [t.detach().clone().requires_grad_() for t in ours]
    dout = torch.randn(2, 4, 9, dv, generator=torch.Generator().manual_seed(2))
    (sy.attention.scaled_dot_product_attention(*ours, None, 0.0, causal, enable_gqa=True) * dout).sum().backward()
    (F.scaled_dot_product_attention(*ref, None, 0.0, causal, enable_gqa=True) * dout).sum().backward()
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)


def test_cpu_op_passes_gradcheck_in_its_own_precision():
    """The backward's formula against finite differences (float32: loose, but a wrong formula fails)."""
    q, k, v = (t.double() for t in qkv(B=1, Hq=2, Hkv=1, Nq=5, Nk=6, d=4, dv=3, seed=4))
    leaves = [t.float().requires_grad_() for t in (q, k, v)]
    out = sy.attention.scaled_dot_product_attention(*leaves, None, 0.0, True, enable_gqa=True)
    grads = torch.autograd.grad(out.square().sum(), leaves)
    leaves64 = [t.detach().double().requires_grad_() for t in leaves]
    ref = F.scaled_dot_product_attention(*leaves64, None, 0.0, True, enable_gqa=True)
    for got, want in zip(grads, torch.autograd.grad(ref.square().sum(), leaves64)):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)


# ---- masks: left padding runs on our kernels, the rest is refused clearly ----------------------------------
@pytest.mark.parametrize("causal", [True, False])
def test_left_padding_runs_on_the_c_kernel_and_matches_torch(causal):
    q, k, v = (t.requires_grad_() for t in qkv(B=3, seed=5))
    mask = left_padding_mask([3, 0, 8], 9, causal)
    assert decide(q, k, v, mask, enable_gqa=True).path == "cpu+padding"
    got = sy.attention.scaled_dot_product_attention(q, k, v, mask, enable_gqa=True)
    expected = F.scaled_dot_product_attention(q, k, v, mask, enable_gqa=True)
    torch.testing.assert_close(got, expected, rtol=2e-5, atol=2e-5)
    g_ours = torch.autograd.grad(got.square().sum(), (q, k, v))
    g_torch = torch.autograd.grad(expected.square().sum(), (q, k, v))
    for a, b in zip(g_ours, g_torch):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_a_mask_that_is_almost_left_padding_is_not_split():
    q, k, v = qkv(B=2)
    mask = left_padding_mask([2, 0], 9)
    mask[1, 0, 5, 3] = False                   # one element off the pattern
    assert decide(q, k, v, mask, enable_gqa=True).run is None
    with pytest.raises(NotImplementedError, match="patch"):
        sy.attention.scaled_dot_product_attention(q, k, v, mask, enable_gqa=True)


# ---- dropout, dtypes, empty inputs ---------------------------------------------------------------------------
def test_dropout_runs_torchs_implementation_not_a_silent_ignore():
    q, k, v = qkv(B=1, Hq=2, Hkv=2)
    torch.manual_seed(7)
    got = sy.attention.scaled_dot_product_attention(q, k, v, None, 0.5, True)
    torch.manual_seed(7)
    expected = F.scaled_dot_product_attention(q, k, v, None, 0.5, True)
    torch.testing.assert_close(got, expected)
    assert not torch.allclose(got, F.scaled_dot_product_attention(q, k, v, None, 0.0, True))
    assert "dropout" in decide(q, k, v, None, 0.5).reason


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
def test_other_cpu_dtypes_are_a_clear_error(dtype):
    with pytest.raises(TypeError, match="float32"):
        sy.attention.scaled_dot_product_attention(*qkv(dtype=dtype), None, 0.0, True, enable_gqa=True)


@pytest.mark.parametrize("shapes", [((0, 2, 3, 4), (0, 2, 5, 4)), ((1, 2, 0, 4), (1, 2, 5, 4)),
                                    ((1, 2, 3, 4), (1, 2, 0, 4))])
def test_empty_torch_inputs_as_torch(shapes):
    q, k = torch.randn(shapes[0]), torch.randn(shapes[1])
    got = sy.attention.scaled_dot_product_attention(q, k, k, None, 0.0, True)
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, k, None, 0.0, True))


@pytest.mark.parametrize("call, error, words", [
    (lambda q, k, v: sy.attention.scaled_dot_product_attention(q, k, v), ValueError, "enable_gqa"),
    (lambda q, k, v: sy.attention.scaled_dot_product_attention(q, k, v, None, 1.5), ValueError, "dropout_p"),
    (lambda q, k, v: sy.attention.scaled_dot_product_attention(q, k.numpy(), v), TypeError, "torch.Tensor"),
    (lambda q, k, v: sy.attention.scaled_dot_product_attention(q[0], k[0], v[0], enable_gqa=True), ValueError,
     "rank 4"),
    (lambda q, k, v: sy.attention.scaled_dot_product_attention(q, k, v, enable_gqa=True, kernel="mma"),
     ValueError, "cannot take"),
    (lambda q, k, v: sy.attention.scaled_dot_product_attention(q, k, v, deterministic=1), TypeError,
     "deterministic"),
])
def test_bad_torch_input_raises(call, error, words):
    with pytest.raises(error, match=words):
        call(*qkv())
