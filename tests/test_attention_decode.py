"""sy.attention.attention_with_kvcache (cuda_src/attention_decode.cu, issue #22) against a float64
reference: cache lengths 0 and 1, ragged cache_seqlens, GQA 1/4/8, one and several new queries with
bottom-right causal, forced split counts, appends (also across a page boundary), paged caches with
pages out of order, cache_batch_idx. GPU tests are marked `gpu`; the input checks that need no GPU run
everywhere."""
import math

import pytest

torch = pytest.importorskip("torch")

import sympathy as sy  # noqa: E402
from sympathy.attention.kvcache import num_splits_heuristic  # noqa: E402

BF16_TOLERANCE = 1.6e-2   # relative to the output's largest element (test_attention_gpu.py's bf16 bound)
FP16_TOLERANCE = 2e-3
gpu = pytest.mark.gpu


def reference(q, k_full, v_full, seqlens_k, causal, scale=None):
    """float64 (out (B, Nq, Hq, d), lse (B, Hq, Nq)): sequence b attends to its first seqlens_k[b] keys;
    k_full/v_full (B, Nk, Hkv, d) are each sequence's whole cache; causal bottom-right; no key -> 0, -inf."""
    B, Nq, Hq, d = q.shape
    Hkv = k_full.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    out = torch.zeros(B, Nq, Hq, d, dtype=torch.float64, device=q.device)
    lse = torch.full((B, Hq, Nq), -math.inf, dtype=torch.float64, device=q.device)
    for b in range(B):
        n = int(seqlens_k[b])
        if n == 0:
            continue
        qb = q[b].double().transpose(0, 1)                                     # (Hq, Nq, d)
        kb = k_full[b, :n].double().transpose(0, 1).repeat_interleave(Hq // Hkv, 0)   # (Hq, n, d)
        vb = v_full[b, :n].double().transpose(0, 1).repeat_interleave(Hq // Hkv, 0)
        s = qb @ kb.transpose(-1, -2) * scale
        if causal:
            i = torch.arange(Nq, device=q.device)[:, None]
            j = torch.arange(n, device=q.device)[None, :]
            s = s.masked_fill(j > i + n - Nq, -math.inf)
        row_lse = torch.logsumexp(s, -1)
        p = torch.where(torch.isinf(row_lse)[..., None], torch.zeros_like(s), torch.exp(s - row_lse[..., None]))
        out[b] = (p @ vb).transpose(0, 1)
        lse[b] = row_lse
    return out, lse


def assert_close(got, want, tol):
    scale = max(want.abs().max().item(), 1e-6)
    err = (got.double() - want).abs().max().item() / scale
    assert err <= tol, err


def assert_lse(got, want):
    finite = torch.isfinite(want)
    assert torch.equal(torch.isfinite(got), finite) and (got[~finite] == -math.inf).all()
    assert torch.allclose(got[finite].double(), want[finite], atol=2e-2, rtol=1e-3)


def make(B, Nq, Hq, Hkv, cap, d=128, dtype=torch.bfloat16, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    rnd = lambda *shape: torch.randn(*shape, device="cuda", dtype=dtype, generator=gen)  # noqa: E731
    return rnd(B, Nq, Hq, d), rnd(B, cap, Hkv, d), rnd(B, cap, Hkv, d)


@gpu
@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("num_splits", [0, 1, 3, 16])
def test_decode_ragged_lengths_including_0_and_1(group, num_splits):
    lens = [0, 1, 63, 64, 65, 700, 2049]
    Hkv = 2
    q, kc, vc = make(len(lens), 1, group * Hkv, Hkv, 2112)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    out, lse = sy.attention.attention_with_kvcache(q, kc, vc, cache_seqlens=seqlens, num_splits=num_splits,
                                                   return_softmax_lse=True)
    want, want_lse = reference(q, kc, vc, lens, False)
    assert out.shape == q.shape and lse.shape == (len(lens), group * Hkv, 1)
    assert_close(out, want, BF16_TOLERANCE)
    assert (out[0] == 0).all()
    assert_lse(lse, want_lse)


@gpu
@pytest.mark.parametrize("group,nq", [(1, 5), (4, 4), (8, 3), (4, 37), (1, 100)])
@pytest.mark.parametrize("num_splits", [1, 4])
def test_several_new_queries_are_causal_bottom_right(group, nq, num_splits):
    lens = [2, 50, 333, 1030]   # nq > 2 and 50: the first rows of those see no key at all
    Hkv = 2
    q, kc, vc = make(len(lens), nq, group * Hkv, Hkv, 1088, seed=1)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    out, lse = sy.attention.attention_with_kvcache(q, kc, vc, cache_seqlens=seqlens, causal=True,
                                                   num_splits=num_splits, return_softmax_lse=True)
    want, want_lse = reference(q, kc, vc, lens, True)
    assert_close(out, want, BF16_TOLERANCE)
    assert_lse(lse, want_lse)
    not_causal = sy.attention.attention_with_kvcache(q, kc, vc, cache_seqlens=seqlens, num_splits=num_splits)
    assert_close(not_causal, reference(q, kc, vc, lens, False)[0], BF16_TOLERANCE)


@gpu
@pytest.mark.parametrize("d,dtype,tol", [(64, torch.float16, FP16_TOLERANCE), (128, torch.float16, FP16_TOLERANCE),
                                         (64, torch.bfloat16, BF16_TOLERANCE)])
def test_head_dims_and_dtypes_scale_and_whole_cache(d, dtype, tol):
    q, kc, vc = make(3, 2, 8, 2, 640, d=d, dtype=dtype, seed=2)
    out = sy.attention.attention_with_kvcache(q, kc, vc, softmax_scale=0.3, causal=True)   # cache_seqlens None: all
    assert_close(out, reference(q, kc, vc, [640] * 3, True, scale=0.3)[0], tol)
    neg = sy.attention.attention_with_kvcache(q, kc, vc, softmax_scale=-0.2, num_splits=5)
    assert_close(neg, reference(q, kc, vc, [640] * 3, False, scale=-0.2)[0], tol)


@gpu
@pytest.mark.parametrize("nq", [1, 6])
def test_append_writes_the_cache_in_place_then_attends(nq):
    lens = [0, 5, 64 - nq + 1, 300]   # the third crosses a 64-key tile boundary
    Hkv, group = 2, 4
    q, kc, vc = make(len(lens), nq, group * Hkv, Hkv, 384, seed=3)
    _, knew, vnew = make(len(lens), nq, group * Hkv, Hkv, nq, seed=4)
    before_k, before_v = kc.clone(), vc.clone()
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    out = sy.attention.attention_with_kvcache(q, kc, vc, knew, vnew, cache_seqlens=seqlens, causal=True)
    want_k, want_v = before_k.clone(), before_v.clone()
    for b, n in enumerate(lens):
        want_k[b, n:n + nq], want_v[b, n:n + nq] = knew[b], vnew[b]
    assert torch.equal(kc, want_k) and torch.equal(vc, want_v)   # nothing else in the cache moved
    assert torch.equal(seqlens.cpu(), torch.tensor(lens, dtype=torch.int32))   # as flash-attn: not advanced
    assert_close(out, reference(q, want_k, want_v, [n + nq for n in lens], True)[0], BF16_TOLERANCE)


@gpu
def test_append_past_the_cache_is_refused_before_any_write():
    q, kc, vc = make(2, 4, 4, 2, 128)
    before = kc.clone()
    with pytest.raises(ValueError, match="cache holds 128"):
        sy.attention.attention_with_kvcache(q, kc, vc, q[:, :, :2], q[:, :, :2],
                                            cache_seqlens=torch.tensor([3, 125], dtype=torch.int32, device="cuda"))
    assert torch.equal(kc, before)


def paged(kc, vc, page, seed):
    """The contiguous caches (B, cap, H, d) cut into pages stored in a shuffled pool, and the block table."""
    B, cap, H, d = kc.shape
    per_seq = cap // page
    order = torch.randperm(B * per_seq, generator=torch.Generator().manual_seed(seed)).to("cuda")
    pool_k = torch.empty(B * per_seq + 3, page, H, d, dtype=kc.dtype, device="cuda").normal_()   # spare pages: noise
    pool_v = torch.empty_like(pool_k).normal_()
    table = order.view(B, per_seq).to(torch.int32)
    pool_k[table.long().flatten()] = kc.reshape(B * per_seq, page, H, d)
    pool_v[table.long().flatten()] = vc.reshape(B * per_seq, page, H, d)
    return pool_k, pool_v, table


@gpu
@pytest.mark.parametrize("page", [64, 256])
@pytest.mark.parametrize("num_splits", [0, 1, 7])
def test_paged_cache_pages_out_of_order_matches_contiguous(page, num_splits):
    lens = [0, 1, 255, 256, 257, 1000]
    q, kc, vc = make(len(lens), 3, 16, 2, 1024, seed=5)
    pool_k, pool_v, table = paged(kc, vc, page, seed=6)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    out = sy.attention.attention_with_kvcache(q, pool_k, pool_v, cache_seqlens=seqlens, block_table=table,
                                              causal=True, num_splits=num_splits)
    assert_close(out, reference(q, kc, vc, lens, True)[0], BF16_TOLERANCE)


@gpu
def test_paged_append_crosses_a_page_boundary():
    page, nq = 64, 5
    lens = [61, 62, 0, 128 - 2]   # appends cross pages 0->1, 0->1, none, 1->2
    q, kc, vc = make(len(lens), nq, 8, 2, 256, seed=7)
    _, knew, vnew = make(len(lens), nq, 8, 2, nq, seed=8)
    pool_k, pool_v, table = paged(kc, vc, page, seed=9)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    out = sy.attention.attention_with_kvcache(q, pool_k, pool_v, knew, vnew, cache_seqlens=seqlens,
                                              block_table=table, causal=True)
    for b, n in enumerate(lens):
        kc[b, n:n + nq], vc[b, n:n + nq] = knew[b], vnew[b]
        for j in range(n, n + nq):   # the new rows landed in the right pages
            assert torch.equal(pool_k[table[b, j // page].item(), j % page], knew[b, j - n])
    assert_close(out, reference(q, kc, vc, [n + nq for n in lens], True)[0], BF16_TOLERANCE)


@gpu
def test_cache_batch_idx_picks_cache_rows_and_views_of_q_are_accepted():
    q, kc, vc = make(3, 1, 8, 2, 512, seed=10)
    idx = torch.tensor([4, 0, 2], dtype=torch.int32, device="cuda")
    big_k = torch.randn(5, 512, 2, 128, device="cuda", dtype=torch.bfloat16)
    big_v = torch.randn_like(big_k)
    big_k[idx.long()], big_v[idx.long()] = kc, vc
    q_view = q.transpose(1, 2).contiguous().transpose(1, 2)   # (B, N, H, d) with head-major strides
    out = sy.attention.attention_with_kvcache(q_view, big_k, big_v, cache_seqlens=300, cache_batch_idx=idx)
    assert_close(out, reference(q, kc, vc, [300] * 3, False)[0], BF16_TOLERANCE)


# ---- input checks: a clear exception before anything runs (no GPU needed for most) --------------------
def test_unsupported_flash_attn_options_raise_not_implemented():
    q = torch.zeros(1, 1, 4, 128, dtype=torch.bfloat16)
    for kwargs in ({"rotary_cos": q}, {"cache_leftpad": q}, {"alibi_slopes": q}, {"window_size": (8, 0)},
                   {"softcap": 30.0}):
        with pytest.raises(NotImplementedError):
            sy.attention.attention_with_kvcache(q, q, q, **kwargs)


def test_cpu_tensors_and_bad_dtypes_are_refused():
    q = torch.zeros(1, 1, 4, 128, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="CUDA device"):
        sy.attention.attention_with_kvcache(q, q, q)
    with pytest.raises(TypeError, match="causal"):
        sy.attention.attention_with_kvcache(q, q, q, causal=1)
    with pytest.raises(ValueError, match="softmax_scale"):
        sy.attention.attention_with_kvcache(q, q, q, softmax_scale=math.nan)


@gpu
@pytest.mark.parametrize("case,error,match", [
    ("float32", TypeError, "float16 or bfloat16"),
    ("head_dim_96", ValueError, "headdim"),
    ("heads", ValueError, "multiple"),
    ("seqlens_int64", TypeError, "int32"),
    ("seqlens_shape", ValueError, "shape"),
    ("page_32", ValueError, "multiple of 64"),
    ("cache_rows", ValueError, "cache_batch_idx"),
    ("k_without_v", ValueError, "both k and v"),
    ("append_without_seqlens", ValueError, "cache_seqlens"),
    ("unaligned_cache", ValueError, "16-byte"),
    ("num_splits", ValueError, "num_splits"),
    ("cache_seqlens_too_big", ValueError, "outside"),
])
def test_bad_inputs_raise_before_launch(case, error, match):
    q, kc, vc = make(2, 1, 4, 2, 128)
    kwargs, args = {}, [q, kc, vc]
    if case == "float32":
        args = [t.float() for t in args]
    elif case == "head_dim_96":
        args = [t[..., :96].contiguous() for t in args]
    elif case == "heads":
        args[0] = q[:, :, :3]
    elif case == "seqlens_int64":
        kwargs["cache_seqlens"] = torch.tensor([1, 2], device="cuda")
    elif case == "seqlens_shape":
        kwargs["cache_seqlens"] = torch.tensor([1, 2, 3], dtype=torch.int32, device="cuda")
    elif case == "page_32":
        kwargs["block_table"] = torch.zeros(2, 4, dtype=torch.int32, device="cuda")
        args[1], args[2] = kc[:, :32], vc[:, :32]
    elif case == "cache_rows":
        args[1], args[2] = kc[:1], vc[:1]
    elif case == "k_without_v":
        kwargs.update(k=kc[:, :1], cache_seqlens=1)
    elif case == "append_without_seqlens":
        kwargs.update(k=kc[:, :1], v=vc[:, :1])
    elif case == "unaligned_cache":
        wide = torch.zeros(2, 128, 2, 136, dtype=torch.bfloat16, device="cuda")
        args[1] = wide[..., 1:129]   # rows start 2 bytes past a 16-byte boundary
    elif case == "num_splits":
        kwargs["num_splits"] = 1000
    elif case == "cache_seqlens_too_big":
        kwargs["cache_seqlens"] = 129
    with pytest.raises(error, match=match):
        sy.attention.attention_with_kvcache(*args, **kwargs)


def test_split_heuristic_fills_the_gpu_and_never_splits_a_full_grid():
    assert num_splits_heuristic(blocks=8, key_tiles=2048, sm_count=132) > 1
    assert num_splits_heuristic(blocks=2048, key_tiles=2048, sm_count=132) == 1
    assert num_splits_heuristic(blocks=8, key_tiles=4, sm_count=132) == 1   # too few keys to split
    for blocks in (1, 8, 64, 256):
        for tiles in (1, 16, 256, 4096):
            assert 1 <= num_splits_heuristic(blocks, tiles, 132) <= 128


@gpu
def test_transformers_decode_steps_take_the_kvcache_kernel():
    """attn_implementation="sympathy": a decode step (one token, a DynamicCache, no padding) runs
    attention_with_kvcache (path "cuda-decode") and gives sdpa's next-token logits."""
    transformers = pytest.importorskip("transformers")
    sy.attention.register_transformers()
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=512, intermediate_size=512, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=512,
                                   initializer_range=0.2)   # head_dim 128, GQA 4:1
    logits = {}
    for impl in ("sdpa", "sympathy"):
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=impl).to("cuda", torch.bfloat16).eval()
        ids = torch.randint(0, 256, (1, 300), device="cuda", generator=torch.Generator(device="cuda").manual_seed(1))
        with torch.no_grad():
            first = model(ids, use_cache=True)
            sy.attention.patch_stats(reset=True)
            step = model(ids[:, -1:] * 0 + 7, past_key_values=first.past_key_values, use_cache=True)
        logits[impl] = step.logits.float()
        if impl == "sympathy":
            assert sy.attention.patch_stats().paths.get("cuda-decode") == cfg.num_hidden_layers
            sy.attention.patch_stats(reset=True)   # with gradients wanted: the differentiable path, not decode
            again = model(ids[:, -1:], past_key_values=first.past_key_values, use_cache=True)
            assert again.logits.requires_grad and "cuda-decode" not in sy.attention.patch_stats().paths
    err = ((logits["sympathy"] - logits["sdpa"]).abs().max() / logits["sdpa"].abs().max()).item()
    assert err <= 5e-2, err


# ---- chunked prefill on the `hopper` kernel (kvcache._chunk_on_hopper) --------------------------------------
def test_only_chunks_of_known_length_over_a_contiguous_cache_go_to_hopper():
    from sympathy.attention.kvcache import HOPPER_MIN_QUERIES, _routes_to_hopper

    n = HOPPER_MIN_QUERIES
    assert _routes_to_hopper((9, 0), n, 4096, True, None, None)
    assert _routes_to_hopper((9, 0), n, n, True, None, None)            # the chunk is the whole cache
    assert not _routes_to_hopper((9, 0), n, n - 1, True, None, None)    # a first row would see no key
    assert _routes_to_hopper((9, 0), n, 1, False, None, None)
    assert not _routes_to_hopper((9, 0), n - 1, 4096, True, None, None)  # decode-sized: the decode kernel
    assert not _routes_to_hopper((8, 0), n, 4096, True, None, None)     # no wgmma
    assert not _routes_to_hopper((9, 0), n, None, True, None, None)     # length only on the device
    assert not _routes_to_hopper((9, 0), n, 4096, True, "table", None)  # paged
    assert not _routes_to_hopper((9, 0), n, 4096, True, None, "index")


def _counting_hopper_route(monkeypatch, threshold):
    """Count the calls that take kvcache._chunk_on_hopper (their seqlen_k), with HOPPER_MIN_QUERIES set to
    `threshold` (below the measured one, the route's arithmetic is checked at small, odd sizes)."""
    from sympathy.attention import kvcache

    calls = []
    real = kvcache._chunk_on_hopper

    def counted(*args):
        calls.append(args[4])   # seqlen_k
        return real(*args)
    monkeypatch.setattr(kvcache, "_chunk_on_hopper", counted)
    monkeypatch.setattr(kvcache, "HOPPER_MIN_QUERIES", threshold)
    return calls, torch.cuda.get_device_capability() == (9, 0)


@gpu
@pytest.mark.parametrize("B,nq,group,Hkv,cap,d,dtype,tol", [
    (2, 100, 4, 2, 700, 128, torch.bfloat16, BF16_TOLERANCE),   # prefix of 600 unmasked keys + a 100 x 100 square
    (1, 512, 4, 8, 4096, 128, torch.bfloat16, BF16_TOLERANCE),  # the chunk, shorter cache
    (3, 128, 1, 4, 128, 128, torch.bfloat16, BF16_TOLERANCE),   # chunk = whole cache: the square alone
    (2, 200, 8, 1, 1000, 64, torch.float16, FP16_TOLERANCE),
])
@pytest.mark.parametrize("causal", [True, False])
def test_chunks_on_hopper_match_float64(monkeypatch, B, nq, group, Hkv, cap, d, dtype, tol, causal):
    calls, on_hopper = _counting_hopper_route(monkeypatch, threshold=64)
    q, kc, vc = make(B, nq, group * Hkv, Hkv, cap, d=d, dtype=dtype, seed=nq)
    out, lse = sy.attention.attention_with_kvcache(q, kc, vc, causal=causal, return_softmax_lse=True)
    want, want_lse = reference(q, kc, vc, [cap] * B, causal)
    assert out.shape == q.shape and lse.shape == (B, group * Hkv, nq)
    assert_close(out, want, tol)
    assert_lse(lse, want_lse)
    assert calls == ([cap] if on_hopper else [])


@gpu
def test_a_chunk_appended_at_one_length_goes_to_hopper_and_ragged_lengths_do_not(monkeypatch):
    calls, on_hopper = _counting_hopper_route(monkeypatch, threshold=64)
    B, nq, Hkv, group, cap = 2, 96, 2, 4, 1024
    q, kc, vc = make(B, nq, group * Hkv, Hkv, cap, seed=11)
    _, knew, vnew = make(B, nq, group * Hkv, Hkv, nq, seed=12)
    for lens in ([300, 300], [300, 517]):
        k_cache, v_cache = kc.clone(), vc.clone()
        seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
        out = sy.attention.attention_with_kvcache(q, k_cache, v_cache, knew, vnew, cache_seqlens=seqlens, causal=True)
        for b, n in enumerate(lens):
            assert torch.equal(k_cache[b, n:n + nq], knew[b]) and torch.equal(v_cache[b, n:n + nq], vnew[b])
        assert_close(out, reference(q, k_cache, v_cache, [n + nq for n in lens], True)[0], BF16_TOLERANCE)
    assert calls == ([300 + nq] if on_hopper else [])
    # an int cache_seqlens is a length the host knows; a tensor without an append is not read back
    out = sy.attention.attention_with_kvcache(q, kc, vc, cache_seqlens=700, causal=True, softmax_scale=-0.1)
    assert_close(out, reference(q, kc, vc, [700] * B, True, scale=-0.1)[0], BF16_TOLERANCE)
    lens = torch.full((B,), 700, dtype=torch.int32, device="cuda")
    assert_close(sy.attention.attention_with_kvcache(q, kc, vc, cache_seqlens=lens, causal=True),
                 reference(q, kc, vc, [700] * B, True)[0], BF16_TOLERANCE)
    assert calls == ([300 + nq, 700] if on_hopper else [])


@gpu
def test_the_measured_threshold_routes_a_chunk_of_its_size_and_not_one_less(monkeypatch):
    from sympathy.attention.kvcache import HOPPER_MIN_QUERIES

    calls, on_hopper = _counting_hopper_route(monkeypatch, threshold=HOPPER_MIN_QUERIES)
    for nq in (HOPPER_MIN_QUERIES - 1, HOPPER_MIN_QUERIES):
        q, kc, vc = make(1, nq, 8, 2, 1500, seed=nq)
        out = sy.attention.attention_with_kvcache(q, kc, vc, causal=True)
        assert_close(out, reference(q, kc, vc, [1500], True)[0], BF16_TOLERANCE)
    assert calls == ([1500] if on_hopper else [])
