"""When a CUDA forward may skip torch's dispatcher (cuda._direct_call_ok): only where nothing needs the
custom op itself. The predicate reads torch's state alone, so it is tested here on CPU tensors; the GPU
test in test_attention_gpu_api.py checks that both paths give the same bits."""
import pytest

torch = pytest.importorskip("torch")

from sympathy.attention import cuda  # noqa: E402


def test_plain_tensors_without_autograd_go_direct():
    q = torch.randn(1, 1, 4, 8)
    assert cuda._direct_call_ok(q, q, q, None)
    leaf = q.clone().requires_grad_()
    with torch.no_grad():
        assert cuda._direct_call_ok(leaf, q, q, None)
    with torch.inference_mode():
        assert cuda._direct_call_ok(torch.randn(1, 1, 4, 8), q, q, None)


def test_autograd_needs_the_op():
    q = torch.randn(1, 1, 4, 8)
    assert not cuda._direct_call_ok(q, q.clone().requires_grad_(), q, None)


def test_dispatch_modes_and_fake_tensors_need_the_op():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode

    q = torch.randn(1, 1, 4, 8)
    with FlopCounterMode(display=False):
        assert not cuda._direct_call_ok(q, q, q, None)
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(q)
        assert not cuda._direct_call_ok(fake, fake, fake, None)


def test_functorch_wrappers_need_the_op():
    seen = []

    def f(x):
        seen.append(cuda._direct_call_ok(x, x, x, None))
        return x * 2

    torch.func.vmap(f)(torch.randn(2, 1, 1, 4, 8))
    assert seen == [False]


def test_tracing_needs_the_op():
    fn = torch.compile(lambda x: x + 1 if cuda._direct_call_ok(x, x, x, None) else x - 1, backend="eager",
                       fullgraph=True)
    x = torch.zeros(2)
    assert torch.equal(fn(x), x - 1)
