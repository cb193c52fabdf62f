"""The drop-in entry points on a CUDA GPU (issue #16): sy.attention.scaled_dot_product_attention routes
CUDA tensors to our kernels (left-padding masks split per sequence), patch() on CUDA, and
attn_implementation="sympathy" in a tiny bf16 Llama against "sdpa". Marked `gpu`: skipped without one."""
import copy

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import sympathy as sy  # noqa: E402
from sympathy.attention.torch_api import decide  # noqa: E402

pytestmark = pytest.mark.gpu
BF16_TOLERANCE = 1.6e-2   # relative to the output's largest element: test_attention_gpu.py's bf16 bound


def qkv(B=2, Hq=8, Hkv=2, N=200, d=128, dtype=torch.bfloat16, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return tuple(torch.randn(B, h, N, d, device="cuda", dtype=dtype, generator=gen) for h in (Hq, Hkv, Hkv))


def assert_close_rel(got, want, tol=BF16_TOLERANCE):
    err = ((got.double() - want.double()).abs().max() / want.double().abs().max()).item()
    assert err <= tol, err


def left_padding_mask(starts, n):
    keys = torch.arange(n, device="cuda")
    mask = keys[None, None, :] >= torch.tensor(starts, device="cuda")[:, None, None]
    return (mask & torch.ones(n, n, dtype=torch.bool, device="cuda").tril())[:, None]


def test_cuda_tensors_run_our_kernels_called_as_torch():
    q, k, v = qkv()
    assert decide(q, k, v, None, 0.0, True, enable_gqa=True).path == "cuda"
    got = sy.attention.scaled_dot_product_attention(q, k, v, None, 0.0, True, enable_gqa=True)
    assert_close_rel(got, F.scaled_dot_product_attention(*(t.float() for t in (q, k, v)), None, 0.0, True,
                                                         enable_gqa=True))


def test_left_padding_on_cuda_matches_torch_forward_and_backward():
    q, k, v = (t.requires_grad_() for t in qkv(B=3, seed=1))
    mask = left_padding_mask([37, 0, 199], 200)
    assert decide(q, k, v, mask, enable_gqa=True).path == "cuda+padding"
    got = sy.attention.scaled_dot_product_attention(q, k, v, mask, enable_gqa=True)
    ref = [t.detach().float().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel([SDPBackend.MATH]):   # its safe softmax: 0 for a row that sees no key, as ours
        want = F.scaled_dot_product_attention(*ref, mask, enable_gqa=True)
    assert_close_rel(got, want)
    dout = torch.randn_like(got)
    with sdpa_kernel([SDPBackend.MATH]):
        want_grads = torch.autograd.grad(want, ref, dout.float())
    for a, b in zip(torch.autograd.grad(got, (q, k, v), dout), want_grads):
        assert_close_rel(a, b, 3e-2)


def test_patch_on_cuda_counts_our_calls_and_torchs():
    q, k, v = qkv()
    with sy.attention.patch() as stats:
        ours = F.scaled_dot_product_attention(q, k, v, None, 0.0, True, enable_gqa=True)
        F.scaled_dot_product_attention(q, k, v, None, 0.1, True, enable_gqa=True)   # dropout: ours (dropout.py)
        F.scaled_dot_product_attention(*(t.double() for t in (q, k, v)), None, 0.1, True, enable_gqa=True)   # torch's
    assert_close_rel(ours, F.scaled_dot_product_attention(q, k, v, None, 0.0, True, enable_gqa=True))
    assert (stats.taken, stats.fallbacks, dict(stats.paths)) == (2, 1, {"cuda": 1, "cuda+dropout": 1})


def test_tiny_bf16_llama_matches_sdpa_on_cuda():
    transformers = pytest.importorskip("transformers")
    sy.attention.register_transformers()
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                                   initializer_range=0.2)
    models = {}
    for impl in ("sdpa", "sympathy"):
        torch.manual_seed(0)
        models[impl] = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation=impl)
        models[impl] = models[impl].to("cuda", torch.bfloat16).eval()
    ids = torch.randint(0, 256, (2, 96), device="cuda", generator=torch.Generator(device="cuda").manual_seed(2))
    padding = torch.ones_like(ids)
    padding[1, :30] = 0
    sy.attention.patch_stats(reset=True)
    with torch.no_grad():
        logits = {name: m(ids, attention_mask=padding).logits.float() for name, m in models.items()}
    assert dict(sy.attention.patch_stats().paths) == {"cuda+padding": 2}
    real = padding.bool()
    assert_close_rel(logits["sympathy"][real], logits["sdpa"][real], 5e-2)


def test_a_forward_without_autograd_skips_the_dispatcher_and_gives_the_ops_bits(monkeypatch):
    from sympathy.attention import cuda

    q, k, v = qkv(N=333)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    kernel = cuda._check_inputs(q, k, v, None, True, None, True, "auto")
    out_op, lse_op = cuda._attention_op()(*leaves, None, True, q.shape[-1] ** -0.5, kernel, False)   # through the op
    monkeypatch.setattr(cuda, "_attention_op", lambda: pytest.fail("a no-grad forward went through the op"))
    out, lse = cuda.attention_with_lse(q, k, v, is_causal=True, enable_gqa=True)
    assert torch.equal(out, out_op.detach()) and torch.equal(lse, lse_op)
    with torch.no_grad():
        assert torch.equal(cuda.attention_with_lse(*leaves, is_causal=True, enable_gqa=True)[0], out)
