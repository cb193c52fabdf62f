"""The eager path of the CUDA attention: the kernels under autograd without torch.library's dispatch.

torch.ops.sympathy.attention_fwd / attention_bwd (cuda._attention_op) are what torch.compile, export,
FakeTensor, dispatch modes (FlopCounterMode) and functorch see, and they stay the path whenever one of
those is at work. A plain eager call needs none of that machinery: without autograd it runs the
launcher itself (cuda._launch), and with autograd the torch.autograd.Function built here, whose forward
and backward are the custom ops' bodies (cuda._launch, cuda._launch_bwd) and nothing else.

Host fact served: the custom op's Python dispatch (its backend wrapper, aliasing check, default filling
and the autograd wrapper, once for the forward and once for the backward) is host time on every call.
On the H200's host (scripts/host_overhead.py, docs/notes-host.md) a forward+backward through the op
took 1000-1300 us of host time against cuDNN's 170-250; at N = 1024 the GPU work of that step is
860-1230 us, so a model's layers, launched back to back, waited on the host rather than on the GPU.
"""


def untraced(torch, *tensors) -> bool:
    """Nothing but eager execution watches this call: no torch.compile / export trace, no dispatch mode
    (FakeTensorMode, make_fx, FlopCounterMode), and every tensor given (None skipped) is a plain
    torch.Tensor, no FakeTensor or other subclass, no vmap / grad wrapper."""
    if torch.compiler.is_compiling():
        return False
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    if _get_current_dispatch_mode() is not None:
        return False
    wrapped = getattr(torch._C._functorch, "is_functorch_wrapped_tensor", None)
    return wrapped is not None and all(t is None or (type(t) is torch.Tensor and not wrapped(t)) for t in tensors)


def needs_autograd(torch, *tensors) -> bool:
    """A gradient will flow from this call: grad mode is on and some tensor given (None skipped) requires grad.
    Without it the launcher itself runs, as the custom op's body does."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def attention_function(torch, launch, launch_bwd):
    """The autograd.Function over launch (cuda._launch) and launch_bwd (cuda._launch_bwd):
    apply(q, k, v, attn_mask, is_causal, scale, kernel, deterministic, causal_offset, window, dropout) -> (out,
    lse), differentiable in q, k and v as torch.ops.sympathy.attention_fwd (and, with dropout = (p, seed, offset),
    attention_dropout_fwd) is; lse is not."""
    from torch.autograd.function import once_differentiable

    class EagerAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, attn_mask, is_causal, scale, kernel, deterministic, causal_offset, window, dropout):
            out, lse = launch(q, k, v, attn_mask, is_causal, scale, kernel, causal_offset=causal_offset, window=window,
                              dropout=dropout)
            ctx.save_for_backward(q, k, v, out, lse, attn_mask)
            ctx.options = (is_causal, scale, deterministic, kernel, causal_offset, window, dropout)
            ctx.mark_non_differentiable(lse)   # a statistic of the forward: gradients flow through out
            return out, lse

        @staticmethod
        @once_differentiable
        def backward(ctx, grad_out, _grad_lse):
            q, k, v, out, lse, attn_mask = ctx.saved_tensors
            is_causal, scale, deterministic, kernel, causal_offset, window, dropout = ctx.options
            dq, dk, dv = launch_bwd(grad_out, q, k, v, out, lse, attn_mask, is_causal, scale, deterministic, kernel,
                                    causal_offset=causal_offset, window=window, dropout=dropout)
            return (dq, dk, dv) + (None,) * 8

    return EagerAttention
