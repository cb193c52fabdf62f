"""The eager training path (sympathy/attention/eager.py): an autograd call outside torch.compile, dispatch
modes and functorch runs the kernels through a plain autograd.Function, not the custom op's dispatch. It
must give the op's bits, forward and backward, and take every gradient autograd can hand it. Marked
`gpu`: skipped without one (the predicate itself is tested on the CPU in test_attention_direct_call.py)."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

from sympathy.attention import cuda  # noqa: E402

pytestmark = pytest.mark.gpu


def kernels():
    if not torch.cuda.is_available():
        return ["mma"]
    return ["mma", "hopper"] if torch.cuda.get_device_capability() == (9, 0) else ["mma"]


def qkv(B=2, Hq=4, Hkv=2, N=333, d=128, dtype=torch.bfloat16, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(B, h, N, d, device="cuda", dtype=dtype, generator=gen) for h in (Hq, Hkv, Hkv)]


def grads_of(fn, inputs, dout):
    leaves = [t.clone().requires_grad_() for t in inputs]
    out = fn(*leaves)
    out.backward(dout)
    return [out.detach()] + [t.grad for t in leaves]


@pytest.mark.parametrize("kernel", kernels())
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_eager_autograd_gives_the_custom_ops_bits(kernel, d, causal, monkeypatch):
    inputs = qkv(d=d)
    dout = torch.randn(2, 4, 333, d, device="cuda", dtype=torch.bfloat16)
    scale = d ** -0.5

    def through_op(q, k, v):
        return cuda._attention_op()(q, k, v, None, causal, scale, kernel, True)[0]

    want = grads_of(through_op, inputs, dout)
    monkeypatch.setattr(cuda, "_attention_op", lambda: pytest.fail("an eager autograd call went through the op"))

    def eager(q, k, v):
        out = cuda.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True, kernel=kernel,
                                                deterministic=True)
        assert type(out.grad_fn).__name__ == "EagerAttentionBackward"
        return out

    got = grads_of(eager, inputs, dout)
    for a, b in zip(got, want):   # deterministic backward: the same kernels give the same bits
        assert torch.equal(a, b)


@pytest.mark.parametrize("kernel", kernels())
def test_an_expanded_gradient_from_sum_is_read_as_its_values(kernel):
    """out.sum().backward() hands the backward a stride-0 tensor: it must be read as ones, not as its
    single element repeated along rows it does not have."""
    q, k, v = (t.requires_grad_() for t in qkv(d=64, seed=3))
    out = cuda.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True, kernel=kernel)
    out.sum().backward()   # bf16 out: its gradient is one bf16 scalar expanded (every stride 0)
    ref = [t.detach().double().requires_grad_() for t in (q, k, v)]
    F.scaled_dot_product_attention(*ref, is_causal=True, enable_gqa=True).sum().backward()
    for got, want in zip((q.grad, k.grad, v.grad), (t.grad for t in ref)):
        err = ((got.double() - want).abs().max() / want.abs().max()).item()
        assert err < 3e-2, err


def test_activation_checkpointing_recomputes_through_the_eager_path():
    inputs = qkv(d=128, seed=5)
    dout = torch.randn(2, 4, 333, 128, device="cuda", dtype=torch.bfloat16)

    def attend(q, k, v):
        return cuda.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True, deterministic=True)

    plain = grads_of(attend, inputs, dout)
    checkpointed = grads_of(lambda q, k, v: checkpoint(attend, q, k, v, use_reentrant=False), inputs, dout)
    for a, b in zip(plain, checkpointed):
        assert torch.equal(a, b)


def test_compile_still_sees_the_custom_op():
    seen = []

    def counting(gm, example_inputs):
        seen.extend(str(node.target) for node in gm.graph.nodes if node.op == "call_function")
        return gm.forward

    q, k, v = (t.requires_grad_() for t in qkv(d=64, seed=7))
    fn = torch.compile(lambda q, k, v: cuda.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
                       backend=counting, fullgraph=True)
    fn(q, k, v).sum().backward()
    assert any("sympathy.attention_fwd" in target for target in seen), seen


@pytest.mark.parametrize("kernel", kernels())
def test_eager_dropout_gives_the_dropout_ops_bits(kernel, monkeypatch):
    from sympathy.attention import dropout

    inputs = qkv(d=128, seed=9)
    dout = torch.randn(2, 4, 333, 128, device="cuda", dtype=torch.bfloat16)
    scale, seed, offset = 128 ** -0.5, 1234, 8

    def through_op(q, k, v):
        return dropout._dropout_op()(q, k, v, None, True, scale, kernel, True, 0, -1, -1, 0.1, seed, offset)[0]

    want = grads_of(through_op, inputs, dout)
    monkeypatch.setattr(dropout, "_dropout_op", lambda: pytest.fail("an eager dropout call went through the op"))

    def eager(q, k, v):
        out = dropout.attention(q, k, v, 0.1, True, scale, kernel, deterministic=True, seed=seed, offset=offset)[0]
        assert type(out.grad_fn).__name__ == "EagerAttentionBackward"
        return out

    got = grads_of(eager, inputs, dout)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
