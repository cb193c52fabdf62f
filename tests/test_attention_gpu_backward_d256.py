"""The d = 256 backward (issue 21), routed by cuda._d256_fused_backward instead of the O(N^2) math backward:
the wgmma backward (cuda_src/attention_hopper_bwd256.cu: two warpgroups splitting the GEMMs by gradient,
dQ by atomics) after a `hopper` forward unless deterministic (cuda._d256_hopper_backward), else the mma
backward templated to d = 256 (cuda_src/attention_mma_bwd.cu, kernel_traits.cuh's MmaBwdDkdvTraitsD256:
two warps per 16 keys, each owning half of dK's and dV's columns).

CPU: the routing predicates. GPU (marked `gpu`, sm_90: the kernels need 217-226 KiB of shared memory a
block): gradients against float64 autograd on both kernels (causal and not, GQA, odd lengths, N = 1,
fp16 and bf16, the atomic and the deterministic dQ), bit-identical deterministic runs, the kernels the
profiler sees, and the backward's peak memory (O(N): no N x N matrix).
"""
import pytest

torch = pytest.importorskip("torch")

import sympathy as sy  # noqa: E402
from sympathy.attention import cuda  # noqa: E402
from test_attention_gpu_backward import (  # noqa: E402
    assert_deterministic_is_bit_identical, assert_grads_close, gpu_inputs, our_grads, our_output, reference_grads)


# ---- routing (no GPU) ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype, capability, masked, window, dropout, fused", [
    (torch.bfloat16, (9, 0), False, (-1, -1), None, True),
    (torch.float16, (9, 0), False, (-1, -1), None, True),
    (torch.bfloat16, (9, 0), False, (-1, 0), None, True),      # left side open: causal, served
    (torch.float32, (9, 0), False, (-1, -1), None, False),     # the fp32 backward stops at d = 128
    (torch.bfloat16, (8, 0), False, (-1, -1), None, False),    # A100: 163 KiB of shared memory a block
    (torch.bfloat16, (9, 0), True, (-1, -1), None, False),     # attn_mask
    (torch.bfloat16, (9, 0), False, (100, 0), None, False),    # sliding window (local band: not instantiated)
    (torch.bfloat16, (9, 0), False, (-1, -1), object(), False),   # dropout
])
def test_d256_backward_routes_to_the_mma_backward_only_where_it_runs(dtype, capability, masked, window, dropout,
                                                                     fused):
    mask = torch.ones(4, 4, dtype=torch.bool) if masked else None
    assert cuda._d256_fused_backward(dtype, capability, mask, window, dropout) is fused
    assert 256 not in cuda.BWD_HEAD_DIMS   # the other kernels' head dims are unchanged


@pytest.mark.parametrize("kernel, deterministic, wgmma", [
    ("hopper", False, True), ("hopper", True, False), ("naive", False, False)])
def test_d256_backward_takes_wgmma_after_a_hopper_forward_unless_deterministic(kernel, deterministic, wgmma):
    assert cuda._d256_hopper_backward(kernel, deterministic) is wgmma


# ---- the kernels on the GPU ----------------------------------------------------------------------------
def on_hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


needs_hopper = pytest.mark.skipif(not on_hopper(), reason="the d = 256 backward needs an sm_90 GPU")


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("causal", [False, True])
def test_d256_batches_and_heads_each_get_their_own_dq_tiles(causal):
    """B > 1 with several heads: the wgmma backward's tile-major dq_accum puts each (batch, head) at its own
    padded rows (a ragged 130-row head ends mid-tile) and the conversion reads them back per head."""
    q, k, v, dout = gpu_inputs(3, 2, 2, 130, 200, 256, torch.bfloat16, seed=11)
    out = our_output(q, k, v, is_causal=causal)
    refs = reference_grads(q, k, v, dout, out=out, is_causal=causal)
    assert_grads_close(our_grads(q, k, v, dout, is_causal=causal), refs, torch.bfloat16)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("Nq, Nk, group, causal, dtype", [
    (1, 1, 1, False, torch.bfloat16), (1, 300, 2, False, torch.float16), (127, 129, 2, True, torch.bfloat16),
    (200, 77, 1, True, torch.float16), (513, 513, 1, False, torch.bfloat16), (300, 700, 4, True, torch.bfloat16),
    (700, 300, 2, False, torch.float16),
])
@pytest.mark.parametrize("wgmma", [True, False])
def test_d256_gradients_match_float64(Nq, Nk, group, causal, dtype, wgmma, monkeypatch):
    """Several 64-key blocks and query tiles, a ragged last one of each, GQA (dK, dV summed over the group),
    Nq != Nk (causal: top-left diagonal), both dQ paths; wgmma False: the mma backward for every call."""
    monkeypatch.setattr(cuda, "D256_HOPPER_BWD", wgmma)
    q, k, v, dout = gpu_inputs(1, 2, group, Nq, Nk, 256, dtype, seed=Nq + Nk)
    out = our_output(q, k, v, is_causal=causal)
    refs = reference_grads(q, k, v, dout, out=out, is_causal=causal)
    for deterministic in (False, True):
        grads = our_grads(q, k, v, dout, is_causal=causal, deterministic=deterministic)
        assert_grads_close(grads, refs, dtype)


@pytest.mark.gpu
@needs_hopper
def test_d256_causal_offset_matches_float64():
    """A moved diagonal (bottom-right, KV-cache prefill) is a causal band: the kernel takes it."""
    q, k, v, dout = gpu_inputs(1, 2, 2, 150, 333, 256, torch.bfloat16, seed=3)
    offset = 333 - 150
    grads = our_grads(q, k, v, dout, is_causal=True, causal_offset=offset, deterministic=False)
    out = our_output(q, k, v, is_causal=True, causal_offset=offset)
    mask = torch.ones(150, 333, dtype=torch.bool, device="cuda").tril(offset)
    assert_grads_close(grads, reference_grads(q, k, v, dout, out=out, attn_mask=mask), torch.bfloat16)


@pytest.mark.gpu
@needs_hopper
def test_d256_deterministic_is_bit_identical_and_agrees_with_atomic():
    assert_deterministic_is_bit_identical(*gpu_inputs(2, 2, 2, 777, 901, 256, torch.bfloat16, seed=21))


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("deterministic", [False, True])
def test_d256_backward_runs_the_fused_kernels_in_o_n_memory(deterministic):
    """The profiler sees the wgmma backward's kernel (deterministic: the mma backward's two), and the
    backward allocates O(N) bytes: at N = 4096 one (B, H, N, N) fp32 matrix of the math backward would be
    256 MiB; q, k, v, dout and their gradients plus the workspaces are 8 x 16 MiB."""
    B, H, N = 1, 4, 4096
    q, k, v, dout = gpu_inputs(B, H, 1, N, N, 256, torch.bfloat16, seed=8)
    leaves = [t.requires_grad_() for t in (q, k, v)]
    out = sy.attention.scaled_dot_product_attention(*leaves, is_causal=True, deterministic=deterministic)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        out.backward(dout)
        torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - before
    names = " ".join(event.key for event in prof.key_averages())
    assert ("hopper_bwd256_kernel" in names) != deterministic
    assert ("dkdv_kernel" in names) == ("dq_kernel" in names) == deterministic
    assert extra < B * H * N * N * 4 // 2, f"{extra / 2**20:.0f} MiB: an N x N matrix was allocated"
