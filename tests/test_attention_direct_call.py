"""When a CUDA call may skip torch's dispatcher (eager.untraced; then the launcher itself where no gradient
flows, eager.needs_autograd, else eager.py's autograd.Function): only where nothing needs the custom op.
The predicates read torch's state alone, so they are tested here on CPU tensors; the GPU tests in
test_attention_gpu_api.py and test_attention_eager.py check that every path gives the op's bits."""
import pytest

torch = pytest.importorskip("torch")

from sympathy.attention import eager  # noqa: E402


def direct(*tensors):
    """What cuda._run_eager runs the launcher for: untraced, and no gradient to flow."""
    return eager.untraced(torch, *tensors) and not eager.needs_autograd(torch, *tensors)


def test_plain_tensors_without_autograd_go_direct():
    q = torch.randn(1, 1, 4, 8)
    assert direct(q, q, q, None)
    leaf = q.clone().requires_grad_()
    with torch.no_grad():
        assert direct(leaf, q, q, None)
    with torch.inference_mode():
        assert direct(torch.randn(1, 1, 4, 8), q, q, None)


def test_autograd_needs_the_function_not_the_launcher_alone():
    q = torch.randn(1, 1, 4, 8)
    assert not direct(q, q.clone().requires_grad_(), q, None)
    assert eager.untraced(torch, q, q.clone().requires_grad_(), q, None)   # eager: the Function, not the op


def test_dispatch_modes_and_fake_tensors_need_the_op():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode

    q = torch.randn(1, 1, 4, 8)
    with FlopCounterMode(display=False):
        assert not direct(q, q, q, None)
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(q)
        assert not direct(fake, fake, fake, None)


def test_functorch_wrappers_need_the_op():
    seen = []

    def f(x):
        seen.append(direct(x, x, x, None))
        return x * 2

    torch.func.vmap(f)(torch.randn(2, 1, 1, 4, 8))
    assert seen == [False]


def test_tracing_needs_the_op():
    fn = torch.compile(lambda x: x + 1 if direct(x, x, x, None) else x - 1, backend="eager",
                       fullgraph=True)
    x = torch.zeros(2)
    assert torch.equal(fn(x), x - 1)
