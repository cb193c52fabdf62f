"""Dropout in the fused kernels (sympathy/attention/dropout.py, cuda_src/attention_dropout.cuh).

CPU (in CI): Philox4x32 (7 rounds in the kernels, 10 for the reference's own check) in NumPy against
Random123's known answers, the keep-mask's documented
layout, the argument checks and the routing. GPU (marked `gpu`): the kernels' mask is that layout bit
for bit; forward and gradients against float64 with the SAME mask (the test-only mask path); same
seed/offset -> same bits, another offset -> another mask; the keep rate within a binomial bound; torch's
generator drives consecutive calls and torch.manual_seed replays them.
"""
import math
import pathlib
import re
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sympathy as sy  # noqa: E402
from sympathy.attention import cuda, dropout  # noqa: E402
from sympathy.attention.band import band_mask  # noqa: E402
from sympathy.attention.torch_api import decide  # noqa: E402


# ---- Philox4x32 and the mask layout in NumPy ------------------------------------------------------------
PHILOX_ROUNDS = 7   # attention_dropout.cuh's kPhiloxRounds (FlashAttention-2's count)


def philox4x32(counter, key, rounds=PHILOX_ROUNDS):
    """counter: 4 uint32 arrays (broadcast), key: 2 ints -> 4 uint32 arrays (Salmon et al., Random123)."""
    c = [np.asarray(x, dtype=np.uint64) for x in counter]
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    mask32 = np.uint64(0xFFFFFFFF)
    for _ in range(rounds):
        p0, p1 = np.uint64(0xD2511F53) * c[0], np.uint64(0xCD9E8D57) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & mask32, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & mask32]
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & mask32, (k1 + np.uint64(0xBB67AE85)) & mask32
    return [x.astype(np.uint32) for x in c]


@pytest.mark.parametrize("rounds, counter, key, expected", [   # Random123's kat_vectors
    (7, (0, 0, 0, 0), (0, 0), (0x5F6FB709, 0x0D893F64, 0x4F121F81, 0x4F730A48)),
    (7, (0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x5207DDC2, 0x45165E59, 0x4D8EE751, 0x8C52F662)),
    (7, (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0x4DFCCABA, 0x190A87F0, 0xC47362BA, 0xB6B5242A)),
    (10, (0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    (10, (0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (10, (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
])
def test_philox_reference_matches_random123_known_answers(rounds, counter, key, expected):
    assert tuple(int(x) for x in philox4x32(counter, key, rounds)) == expected


def keep_mask_numpy(batch, heads, n_q, n_k, dropout_p, seed, offset):
    """The keep-mask by attention_dropout.cuh's definition: score (b, h, i, j) is byte
    (i % 16 / 8) * 2 + j % 2 of word ((i % 2) ^ (j / 16 % 2)) * 2 + j % 16 / 8 of Philox4x32-7(counter = (offset / 4 + b Hq + h,
    row group, column group), key = seed), kept iff below 256 - round(256 p)."""
    i = np.arange(n_q)[:, None]
    j = np.arange(n_k)[None, :]
    row_group = (i // 16) * 4 + (i % 8) // 2
    col_group = (j // 16) * 4 + (j % 8) // 2
    word = ((i % 2) ^ ((j // 16) % 2)) * 2 + (j % 16) // 8
    byte = ((i % 16) // 8) * 2 + j % 2
    threshold = round(256 * (1 - dropout.effective_dropout_p(dropout_p)))
    out = np.zeros((batch, heads, n_q, n_k), dtype=bool)
    for b in range(batch):
        for h in range(heads):
            ctr = offset // 4 + b * heads + h
            words = philox4x32((ctr & 0xFFFFFFFF, ctr >> 32, row_group, col_group), (seed & 0xFFFFFFFF, seed >> 32))
            chosen = np.choose(word, [np.broadcast_to(w, word.shape) for w in words])
            out[b, h] = ((chosen >> (8 * byte).astype(np.uint32)) & 0xFF) < threshold
    return out


@pytest.mark.skipif(shutil.which("g++") is None, reason="the host check compiles the CUDA headers with g++")
def test_the_kernels_fragment_layouts_on_the_host():
    """scripts/dropout_layout_host.py: every fragment function of the headers (the forwards' rows, the hopper
    forward's bf16 compare, the backwards' columns) compiled for the CPU, a warp played lane by lane, each
    score's bit against the layout's definition; thresholds on both sides of 128."""
    script = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "dropout_layout_host.py"
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    checked, wrong = re.fullmatch(r"dropout layouts: (\d+) scores checked, (\d+) wrong\n", run.stdout).groups()
    assert int(checked) > 2_000_000 and int(wrong) == 0


def test_mask_layout_keep_rate_and_group_sharing_on_the_cpu():
    keep = keep_mask_numpy(1, 2, 64, 96, 0.25, seed=1234, offset=8)
    rate, n = keep.mean(), keep.size
    expect = 1 - dropout.effective_dropout_p(0.25)
    assert abs(rate - expect) < 6 * math.sqrt(expect * (1 - expect) / n)
    assert not np.array_equal(keep[0, 0], keep[0, 1])   # heads have their own counters


@pytest.mark.parametrize("p, effective", [(0.1, 26 / 256), (0.5, 0.5), (0.001, 1 / 256), (0.999, 1.0)])
def test_effective_dropout_p_is_p_rounded_to_256ths(p, effective):
    assert dropout.effective_dropout_p(p) == effective


# ---- argument checks and routing (no GPU) ---------------------------------------------------------------
@pytest.mark.parametrize("p, error", [("0.1", TypeError), (None, TypeError), (True, TypeError), (1.5, ValueError),
                                      (-0.1, ValueError), (float("nan"), ValueError)])
def test_bad_dropout_p_raises_before_any_kernel(p, error):
    q = torch.randn(1, 2, 8, 64, dtype=torch.bfloat16)
    with pytest.raises(error, match="dropout_p"):
        cuda.attention_with_lse(q, q, q, None, p)


def test_dropout_p_one_gives_torchs_answer():
    q, k, v = (torch.randn(1, 2, 5, 8) for _ in range(3))
    ours = sy.attention.scaled_dot_product_attention(q, k, v, None, 1.0)
    theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, None, 1.0)
    assert torch.equal(ours, theirs) and not ours.any()


def fake_cuda(shape, dtype=torch.bfloat16):
    """What dropout_reason reads of a tensor: device, dtype, shape."""
    return types.SimpleNamespace(device=torch.device("cuda"), dtype=dtype, shape=shape)


@pytest.mark.parametrize("kwargs, words", [
    (dict(), None),
    (dict(dtype=torch.float32), "float16/bfloat16"),
    (dict(d=96), "head dim 96"),
    (dict(attn_mask=torch.ones(1, dtype=torch.bool)), None),   # tile by tile (test_attention_dropout_mask.py)
    (dict(attn_mask=torch.ones(1, dtype=torch.bool), causal_offset=3), None),   # a mask with a band: dropwin20
    (dict(attn_mask=torch.ones(1, dtype=torch.bool), window=(-1, 5)), None),
    (dict(attn_mask=torch.ones(1, dtype=torch.bool), deterministic=True), "deterministic"),
    (dict(attn_mask=torch.ones(1, dtype=torch.bool), kernel="naive"), "leave to kernel='naive'"),
    (dict(deterministic=True), None),
    (dict(kernel="naive"), "kernel='naive'"),
    (dict(window=(16, 0)), None),   # a sliding window: served since session dropwin20
    (dict(window=(-1, 0), causal_offset=3), None),   # a window open on the left: causal, served
    (dict(p=1.0), "dropout_p=1"),
])
def test_dropout_reason_names_what_the_fused_dropout_does_not_serve(kwargs, words):
    d = kwargs.pop("d", 128)
    q = fake_cuda((2, 4, 64, d), kwargs.pop("dtype", torch.bfloat16))
    reason = dropout.dropout_reason(q, q, q, kwargs.pop("attn_mask", None), kwargs.pop("p", 0.1),
                                    kwargs.pop("kernel", "auto"), kwargs.pop("window", (-1, -1)),
                                    kwargs.pop("causal_offset", 0), kwargs.pop("deterministic", False))
    assert reason is None if words is None else words in reason


def test_cpu_dropout_falls_back_to_torch_with_a_reason():
    q = torch.randn(1, 2, 8, 64)
    decision = decide(q, q, q, None, 0.1, False)
    assert decision.run is None and "CPU" in decision.reason


def test_the_dropout_op_defines_and_differentiates_on_meta_tensors():
    """The custom ops' schemas (torch reads the annotations) and the autograd wiring, without a GPU."""
    q = torch.empty(2, 4, 64, 128, device="meta", dtype=torch.bfloat16, requires_grad=True)
    k = torch.empty(2, 2, 64, 128, device="meta", dtype=torch.bfloat16, requires_grad=True)
    mask = torch.empty(2, 1, 1, 64, device="meta", dtype=torch.bool)
    for attn_mask in (None, mask):
        out, lse = dropout._dropout_op()(q, k, k, attn_mask, attn_mask is None, 0.1, "hopper", False, 0, -1, -1, 0.1,
                                         dropout._signed(2**64 - 5), 8)
        assert out.shape == q.shape and lse.shape == q.shape[:3] and out.requires_grad
        dq, dk = torch.autograd.grad(out.sum(), (q, k))
        assert dq.shape == q.shape and dk.shape == k.shape
    assert dropout._unsigned(dropout._signed(2**64 - 5)) == 2**64 - 5


def test_dropout_keeps_torchs_positional_order_and_default():
    import inspect

    for fn in (cuda.scaled_dot_product_attention, sy.attention.scaled_dot_product_attention):
        params = list(inspect.signature(fn).parameters.values())
        assert params[4].name == "dropout_p" and params[4].default == 0.0


# ---- GPU ------------------------------------------------------------------------------------------------
def inputs(B, Hq, Hkv, Nq, Nk, d, dtype, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, Hq, Nq, d, generator=gen, device="cuda").to(dtype)
    k, v = (torch.randn(B, Hkv, Nk, d, generator=gen, device="cuda").to(dtype) for _ in range(2))
    return q, k, v


def kernels():
    on_hopper = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
    return ["mma", "hopper"] if on_hopper else ["mma"]


@pytest.mark.gpu
@pytest.mark.parametrize("B, H, Nq, Nk", [(1, 1, 16, 16), (2, 3, 77, 130), (1, 2, 300, 45)])
def test_kernel_mask_is_the_documented_pure_function(B, H, Nq, Nk):
    seed, offset = 0x1234_5678_9ABC_DEF0, (1 << 33) + 12
    ours = dropout._dropout_mask(B, H, Nq, Nk, 0.2, seed, offset, torch.device("cuda")).cpu().numpy()
    assert np.array_equal(ours, keep_mask_numpy(B, H, Nq, Nk, 0.2, seed, offset))


@pytest.mark.gpu
def test_keep_rate_within_a_binomial_bound():
    for p in (0.1, 0.5):
        keep = dropout._dropout_mask(2, 4, 1024, 1000, p, 7, 0, torch.device("cuda"))
        expect, n = 1 - dropout.effective_dropout_p(p), keep.numel()
        assert abs(keep.double().mean().item() - expect) < 6 * math.sqrt(expect * (1 - expect) / n)


def record_launches(monkeypatch):
    """The names of the sy_attn_* entries called from here on (cuda.library wrapped for the test)."""
    calls, library = [], cuda.library

    class Recording:
        def __init__(self, lib):
            self._lib = lib

        def __getattr__(self, name):
            attr = getattr(self._lib, name)
            if not name.startswith("sy_attn_"):
                return attr

            def call(*args):
                calls.append(name)
                return attr(*args)
            return call

    def recording(arch):
        ffi, lib = library(arch)
        return ffi, Recording(lib)
    monkeypatch.setattr(cuda, "library", recording)
    return calls


GRAD_TOLERANCE = {torch.bfloat16: 3e-2, torch.float16: 5e-3}
OUT_TOLERANCE = {torch.bfloat16: 1.6e-2, torch.float16: 4e-3}


def relative_error(x, ref, floor=1e-2):
    return ((x.double() - ref).abs().max() / ref.abs().max().clamp_min(floor)).item()


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["mma", "hopper"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("B, Hq, Hkv, Nq, Nk, causal, offset", [
    (2, 4, 4, 256, 256, False, 0), (1, 6, 2, 200, 333, True, 0), (2, 4, 1, 333, 190, True, 0),
    (1, 2, 2, 129, 400, True, 271), (1, 4, 2, 64, 2100, False, 0),
])
def test_forward_and_gradients_match_float64_with_the_same_mask(kernel, dtype, d, B, Hq, Hkv, Nq, Nk, causal, offset,
                                                              monkeypatch):
    check_against_float64(monkeypatch, kernel, dtype, d, B, Hq, Hkv, Nq, Nk, causal, offset)


def check_against_float64(monkeypatch, kernel, dtype, d, B, Hq, Hkv, Nq, Nk, causal, offset, window=(-1, -1),
                          attn_mask=None, backward=None):
    """Output, LSE and gradients of one fused dropout call against float64 with the same keep mask, band and
    attn_mask (test_attention_dropout_window.py passes windows and masks); the forward of `kernel` and the
    backward entry `backward` (default: the kernel's own) ran, rows that see no key give 0 and zero dQ, and
    the all-kept mask gives another answer."""
    if kernel not in kernels():
        pytest.skip("kernel='hopper' needs an sm_90 GPU")
    calls = record_launches(monkeypatch)
    p, seed, ctr = 0.17, 99, 4 * 1000
    q, k, v = inputs(B, Hq, Hkv, Nq, Nk, d, dtype)
    dout = torch.randn(B, Hq, Nq, d, device="cuda").to(dtype)
    for t in (q, k, v):
        t.requires_grad_(True)
    band = dict(causal_offset=offset, window=window, attn_mask=attn_mask)
    out, lse = dropout.attention(q, k, v, p, causal, 1 / math.sqrt(d), kernel, seed=seed, offset=ctr, **band)
    assert f"sy_attn_{kernel}_fwd" in calls, calls   # the fused forward, no fallback
    del calls[:]
    grads = torch.autograd.grad(out, (q, k, v), dout)
    backward = backward or kernel   # the kernel's own backward (d = 64 and 128) unless told
    other = "mma" if backward == "hopper" else "hopper"
    assert f"sy_attn_{backward}_bwd" in calls and f"sy_attn_{other}_bwd" not in calls, calls
    keep = dropout._dropout_mask(B, Hq, Nq, Nk, p, seed, ctr, q.device)   # the unbanded, unmasked call's bits
    leaves = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
    ref = dropout.reference(*leaves, keep, p, causal, **band)
    ref_grads = torch.autograd.grad(ref, leaves, dout.double())
    assert relative_error(out, ref) <= OUT_TOLERANCE[dtype]
    # A band of one key a row (window (0, 0)) has P = 1 there, so dS = P (dP - D) = 0 and the exact dQ, dK are 0;
    # the kernels' are D's rounding (D = rowsum(dO o O) with O in 16 bits, as FlashAttention's), so their error is
    # measured against the largest gradient (dV's) there, not against zero.
    floor = max(1e-2, max(r.abs().max().item() for r in ref_grads)) if tuple(window) == (0, 0) else 1e-2
    for name, g, r in zip("qkv", grads, ref_grads):
        assert relative_error(g, r, floor) <= GRAD_TOLERANCE[dtype], f"d{name}"
    seen = band_mask(Nq, Nk, causal, offset, window, q.device)   # rows that see no key: 0, and zero gradients
    if attn_mask is not None:
        seen = seen & (attn_mask if attn_mask.dtype == torch.bool else attn_mask > -math.inf)
    seen = seen.any(-1).expand(B, Hq, Nq)
    assert not out[~seen].any() and not grads[0][~seen].any()
    _, lse_plain = cuda.attention_with_lse(q.detach(), k.detach(), v.detach(), attn_mask, 0.0, causal, kernel=kernel,
                                           enable_gqa=Hq != Hkv, causal_offset=offset, window=window)
    assert torch.allclose(lse, lse_plain, atol=1e-5, equal_nan=True)   # the undropped (banded, masked) softmax's LSE
    everything = dropout.reference(*leaves, torch.ones_like(keep), p, causal, **band)
    assert relative_error(out, everything) > OUT_TOLERANCE[dtype]   # the keep bits were applied


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["mma", "hopper"])
@pytest.mark.parametrize("d", [64, 128])
def test_forward_with_a_64_bit_seed_and_counter_matches_the_mask_kernel(kernel, d):
    # Both halves of the key and of the counter (offset / 4 >= 2^32) reach the forwards, as they reach the
    # test-only mask kernel (the other tests' offsets keep the counter's high word at 0).
    if kernel not in kernels():
        pytest.skip("kernel='hopper' needs an sm_90 GPU")
    p, seed, ctr = 0.3, 0xDEAD_BEEF_0123_4567, (5 << 34) + 4 * 3
    q, k, v = inputs(2, 3, 3, 300, 260, d, torch.bfloat16)
    out, _ = dropout.attention(q, k, v, p, True, 1 / math.sqrt(d), kernel, seed=seed, offset=ctr)
    keep = dropout._dropout_mask(2, 3, 300, 260, p, seed, ctr, q.device)
    ref = dropout.reference(q, k, v, keep, p, True)
    assert relative_error(out, ref) <= OUT_TOLERANCE[torch.bfloat16]
    shifted = dropout._dropout_mask(2, 3, 300, 260, p, seed, ctr + 4, q.device)   # the next head's counter
    assert relative_error(out, dropout.reference(q, k, v, shifted, p, True)) > OUT_TOLERANCE[torch.bfloat16]


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["mma", "hopper"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("p", [0.001, 0.496, 0.5, 0.75, 0.999])
def test_forward_matches_the_mask_kernel_at_every_threshold(kernel, d, p):
    # The hopper forward compares a score's byte with t = 256 - round(256 p) in bf16 for t > 128 and through drop
    # bits for t <= 128 (attention_dropout.cuh, bytes_rows_all): t = 255, 129 | 128, 64, 0 cover both and their ends.
    if kernel not in kernels():
        pytest.skip("kernel='hopper' needs an sm_90 GPU")
    seed, ctr = 0x0BAD_5EED_1234_5678, 4 * 7
    q, k, v = inputs(2, 3, 3, 300, 260, d, torch.bfloat16)
    out, _ = dropout.attention(q, k, v, p, False, 1 / math.sqrt(d), kernel, seed=seed, offset=ctr)
    keep = dropout._dropout_mask(2, 3, 300, 260, p, seed, ctr, q.device)
    assert relative_error(out, dropout.reference(q, k, v, keep, p, False)) <= OUT_TOLERANCE[torch.bfloat16]


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["mma", "hopper"])
def test_same_seed_same_bits_other_offset_other_mask(kernel):
    if kernel not in kernels():
        pytest.skip("kernel='hopper' needs an sm_90 GPU")
    q, k, v = inputs(2, 4, 4, 512, 512, 128, torch.bfloat16)
    dout = torch.randn_like(q)

    def run(offset):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        out, _ = dropout.attention(*leaves, 0.1, True, 0.125, kernel, seed=5, offset=offset)
        return (out,) + torch.autograd.grad(out, leaves, dout)

    first, again, other = run(0), run(0), run(32)
    assert torch.equal(first[0], again[0])
    assert torch.equal(first[2], again[2]) and torch.equal(first[3], again[3])   # dK, dV: no atomics
    assert not torch.equal(first[0], other[0])


@pytest.mark.gpu
def test_generator_gives_consecutive_calls_new_masks_and_manual_seed_replays():
    q, k, v = inputs(1, 2, 2, 256, 256, 64, torch.float16)
    torch.manual_seed(3)
    a = sy.attention.scaled_dot_product_attention(q, k, v, None, 0.3)
    b = sy.attention.scaled_dot_product_attention(q, k, v, None, 0.3)
    torch.manual_seed(3)
    c = sy.attention.scaled_dot_product_attention(q, k, v, None, 0.3)
    assert not torch.equal(a, b) and torch.equal(a, c)


@pytest.mark.gpu
def test_patch_and_transformers_route_dropout_to_the_fused_kernels():
    q, k, v = inputs(1, 4, 2, 128, 128, 128, torch.bfloat16)
    with sy.attention.patch() as stats:
        torch.nn.functional.scaled_dot_product_attention(q, k, v, None, 0.1, True, enable_gqa=True)
        torch.nn.functional.scaled_dot_product_attention(q, k, v, torch.ones(128, 128, dtype=torch.bool, device="cuda"),
                                                         0.1, enable_gqa=True)
        torch.nn.functional.scaled_dot_product_attention(q, k, v, torch.zeros(128, 128, device="cuda"), 0.1,
                                                         enable_gqa=True, scale=2.0 ** -120)   # a float mask naive takes
    assert stats.paths["cuda+dropout"] == 1 and stats.paths["cuda+mask+dropout"] == 1
    assert any("naive" in reason for reason in stats.reasons)
