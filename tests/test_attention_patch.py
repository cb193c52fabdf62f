"""sy.attention.patch(): torch's F.scaled_dot_product_attention on our kernels where supported, torch's
elsewhere, counted; restored on exit (also by an exception); nested; a decorator; under torch.compile."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import sympathy as sy  # noqa: E402

TORCH_SDPA = F.scaled_dot_product_attention


def qkv(B=2, Hq=4, Hkv=2, N=16, d=16, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(B, Hq, N, d, generator=gen, dtype=dtype), torch.randn(B, Hkv, N, d, generator=gen, dtype=dtype),
            torch.randn(B, Hkv, N, d, generator=gen, dtype=dtype))


def causal_gqa(q, k, v):
    """Model code as users write it: the attribute is looked up at call time."""
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, None, 0.0, True, enable_gqa=True)


def test_supported_calls_run_on_ours_and_match_torch():
    q, k, v = qkv()
    expected = causal_gqa(q, k, v)
    with sy.attention.patch() as stats:
        assert F.scaled_dot_product_attention is not TORCH_SDPA
        got = causal_gqa(q, k, v)
    assert F.scaled_dot_product_attention is TORCH_SDPA
    torch.testing.assert_close(got, expected, rtol=2e-5, atol=2e-5)
    assert (stats.taken, stats.fallbacks, dict(stats.paths)) == (1, 0, {"cpu": 1})


def test_unsupported_calls_fall_back_to_torch_with_their_reason():
    q, k, v = qkv()
    mask = torch.rand(16, 16, generator=torch.Generator().manual_seed(1)) > 0.3
    with sy.attention.patch() as stats:
        got_mask = F.scaled_dot_product_attention(q, k, v, mask, enable_gqa=True)
        got_double = F.scaled_dot_product_attention(*(t.double() for t in (q, k, v)), enable_gqa=True)
        torch.manual_seed(3)
        got_dropout = F.scaled_dot_product_attention(q, k, v, None, 0.25, enable_gqa=True)
    torch.testing.assert_close(got_mask, TORCH_SDPA(q, k, v, mask, enable_gqa=True))
    torch.testing.assert_close(got_double, TORCH_SDPA(*(t.double() for t in (q, k, v)), enable_gqa=True))
    torch.manual_seed(3)
    torch.testing.assert_close(got_dropout, TORCH_SDPA(q, k, v, None, 0.25, enable_gqa=True))
    assert (stats.taken, stats.fallbacks) == (0, 3)
    reasons = " | ".join(stats.reasons)
    for words in ("attn_mask", "float64", "dropout_p"):
        assert words in reasons
    assert "torch's SDPA" in str(stats)


def test_torch_errors_stay_torchs():
    q, k, v = qkv()
    with sy.attention.patch(), pytest.raises(RuntimeError):   # heads 4 vs 2 without enable_gqa: torch raises
        F.scaled_dot_product_attention(q, k, v)


def test_restored_on_exception_and_nesting_is_sane():
    q, k, v = qkv()
    with pytest.raises(KeyError):
        with sy.attention.patch():
            raise KeyError("boom")
    assert F.scaled_dot_product_attention is TORCH_SDPA
    with sy.attention.patch() as outer:
        causal_gqa(q, k, v)
        with sy.attention.patch() as inner:
            causal_gqa(q, k, v)
        assert F.scaled_dot_product_attention is not TORCH_SDPA   # the outer patch is still active
        causal_gqa(q, k, v)
    assert F.scaled_dot_product_attention is TORCH_SDPA
    assert (outer.taken, inner.taken) == (3, 1)


def test_decorator_and_process_wide_stats():
    before = sy.attention.patch_stats().taken
    patched = sy.attention.patch()

    @patched
    def model(q, k, v):
        return causal_gqa(q, k, v)

    q, k, v = qkv()
    model(q, k, v)
    model(q, k, v)
    assert F.scaled_dot_product_attention is TORCH_SDPA
    assert patched.stats.taken == 2
    assert sy.attention.patch_stats().taken == before + 2
    assert sy.attention.patch_stats(reset=True).calls == 0


def test_bad_options_raise():
    with pytest.raises(ValueError, match="kernel must be"):
        sy.attention.patch(kernel="fast")
    with pytest.raises(TypeError, match="deterministic"):
        sy.attention.patch(deterministic=1)


def test_under_torch_compile_the_graph_holds_our_op_forward_and_backward():
    """Dynamo traces the patched function with fullgraph=True; AOT autograd traces the custom op's fake
    and backward (aot_eager: the same graphs inductor gets, without its minutes of C++ compile here)."""
    graphs = []

    def recording_backend(gm, example_inputs):
        graphs.append(str(gm.graph))
        return torch._dynamo.backends.debugging.aot_eager(gm, example_inputs)

    torch._dynamo.reset()
    q, k, v = (t.requires_grad_() for t in qkv(seed=4))
    ref = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    with sy.attention.patch() as stats:
        compiled = torch.compile(causal_gqa, backend=recording_backend, fullgraph=True)
        out = compiled(q, k, v)
        out2 = compiled(q, k, v)
    assert any("sympathy.attention_cpu" in g for g in graphs), graphs
    expected = causal_gqa(*ref)
    torch.testing.assert_close(out, expected, rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(out2, expected, rtol=2e-5, atol=2e-5)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    for a, b in zip(grads, torch.autograd.grad(expected.square().sum(), ref)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert (stats.taken, stats.fallbacks) == (2, 0)   # counted per call of the compiled code
    assert F.scaled_dot_product_attention is TORCH_SDPA


def test_without_torch_patch_is_a_clear_error(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)   # import torch -> ImportError
    with pytest.raises(sy.NotSupportedError, match="pip install sympathy"):
        with sy.attention.patch():
            pass
