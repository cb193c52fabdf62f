"""attn_implementation="sympathy" in a tiny Llama (random weights, GQA, float32, CPU) against "sdpa" with
the same weights: logits with and without left padding, and one training step's loss and gradients.
Skips only where transformers is not installed (CI installs it: see the report of issue #16)."""
import copy
import sys

import pytest

torch = pytest.importorskip("torch")

import sympathy as sy  # noqa: E402


def test_missing_transformers_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)   # import transformers -> ImportError
    with pytest.raises(ImportError, match="pip install transformers"):
        sy.attention.register_transformers()


transformers = pytest.importorskip("transformers")


def tiny_llama_pair():
    """The same random weights under "sdpa" and "sympathy". initializer_range 0.5 (not Llama's 0.02)
    so attention moves the logits well above float32 rounding: a wrong attention cannot hide."""
    sy.attention.register_transformers()
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   initializer_range=0.5)
    models = {}
    for impl in ("sdpa", "sympathy"):
        torch.manual_seed(0)   # a config per model: from_config sets the implementation on the config it gets
        models[impl] = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation=impl)
    assert [m.config._attn_implementation for m in models.values()] == ["sdpa", "sympathy"]
    return models


def batch():
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 128, (3, 12), generator=gen)
    padding = torch.ones(3, 12, dtype=torch.long)
    padding[0, :4] = 0           # left padding of 4, of 0 and of 11 (one real token)
    padding[2, :11] = 0
    return ids, padding


@pytest.mark.parametrize("padded", [False, True])
def test_logits_match_sdpa(padded):
    models = tiny_llama_pair()
    ids, padding = batch()
    mask = padding if padded else None
    sy.attention.patch_stats(reset=True)
    with torch.no_grad():
        logits = {name: m.eval()(ids, attention_mask=mask).logits for name, m in models.items()}
    stats = sy.attention.patch_stats()
    # Every attention call (2 layers) ran on the C kernel, split per sequence when padded.
    assert (stats.taken, stats.fallbacks) == (2, 0), str(stats)
    assert set(stats.paths) == ({"cpu+padding"} if padded else {"cpu"})
    real = padding.bool() if padded else torch.ones_like(padding, dtype=torch.bool)
    ours, theirs = logits["sympathy"][real], logits["sdpa"][real]
    assert theirs.abs().max() > 1.0
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4 * theirs.abs().max().item())


def test_one_training_step_matches_sdpa():
    models = tiny_llama_pair()
    ids, padding = batch()
    labels = ids.masked_fill(padding == 0, -100)
    sy.attention.patch_stats(reset=True)
    losses, grads = {}, {}
    for name, model in models.items():
        model.train()
        out = model(ids, attention_mask=padding, labels=labels)
        out.loss.backward()
        losses[name] = out.loss.item()
        grads[name] = {n: p.grad for n, p in model.named_parameters()}
    assert sy.attention.patch_stats().taken == 2
    assert losses["sympathy"] == pytest.approx(losses["sdpa"], rel=1e-5)
    for n, g in grads["sdpa"].items():
        torch.testing.assert_close(grads["sympathy"][n], g, rtol=1e-3, atol=1e-3 * g.abs().max().item(), msg=n)


def test_unsupported_calls_run_transformers_sdpa_and_are_counted():
    """bfloat16 on the CPU: the C kernel is float32, so transformers' own SDPA path runs."""
    models = tiny_llama_pair()
    ids, _ = batch()
    sy.attention.patch_stats(reset=True)
    with torch.no_grad():
        got = models["sympathy"].to(torch.bfloat16).eval()(ids).logits
        expected = models["sdpa"].to(torch.bfloat16).eval()(ids).logits
    torch.testing.assert_close(got, expected)
    stats = sy.attention.patch_stats()
    assert (stats.taken, stats.fallbacks) == (0, 2)
    assert "bfloat16" in " ".join(stats.reasons)


def test_register_transformers_rejects_bad_names():
    with pytest.raises(ValueError, match="name must be"):
        sy.attention.register_transformers("sdpa")
    with pytest.raises(ValueError, match="kernel must be"):
        sy.attention.register_transformers(kernel="fast")


def test_greedy_generation_with_left_padding_matches_sdpa():
    """generate() with a KV cache: the prefill is causal + padding, each decode step one query row
    against the padded cache (a padding-only mask): both run on the C kernel, split per sequence."""
    models = tiny_llama_pair()
    ids, padding = batch()
    sy.attention.patch_stats(reset=True)
    tokens = {name: m.eval().generate(ids, attention_mask=padding, max_new_tokens=6, do_sample=False,
                                      pad_token_id=0)
              for name, m in models.items()}
    assert torch.equal(tokens["sympathy"], tokens["sdpa"])
    stats = sy.attention.patch_stats()
    assert stats.fallbacks == 0 and stats.paths["cpu+padding"] == 2 * 6, str(stats)


# ---- sliding windows and bottom-right diagonals (the band, sympathy/attention/band.py) -------------------
def transformers_mask(mask_function, batch, cache_positions, n_kv):
    """A (B, 1, Nq, Nk) boolean mask from one of transformers' own mask functions, element by element."""
    q = torch.tensor(list(cache_positions))[:, None]
    mask = mask_function(torch.tensor(0), torch.tensor(0), q, torch.arange(n_kv)[None, :])
    return mask.expand(len(cache_positions), n_kv)[None, None].expand(batch, 1, -1, -1)


@pytest.mark.parametrize("n_q, n_kv, window", [(9, 9, 4), (5, 12, 3), (6, 6, 20), (4, 10, None)])
def test_transformers_band_masks_are_recognised_exactly(n_q, n_kv, window):
    """Masks built by transformers' sliding_window_causal / causal functions (queries at the last n_q
    positions: a prefill over a cache) are the band with bottom-right alignment; one changed element, or a
    padded sequence, is not taken for a band."""
    from transformers.masking_utils import causal_mask_function, sliding_window_causal_mask_function

    from sympathy.attention import band

    fn = sliding_window_causal_mask_function(window) if window else causal_mask_function
    mask = transformers_mask(fn, 2, range(n_kv - n_q, n_kv), n_kv)
    expected = (n_kv - n_q, (window - 1, 0) if window else band.NO_WINDOW)
    assert band.match_band_mask(mask, n_q, n_kv, window) == expected
    broken = mask.clone()
    broken[1, 0, -1, -1] = False
    assert band.match_band_mask(broken, n_q, n_kv, window) is None
    if window and window < n_kv:   # a window as long as the keys is no window: both sizes match then
        assert band.match_band_mask(mask, n_q, n_kv, window + 1) is None


@pytest.mark.gpu
def test_mistral_sliding_window_runs_on_the_band_and_matches_sdpa():
    """A tiny Mistral (sliding_window 16, 48 tokens, bf16, GPU): its sliding-window masks run as the band
    on our kernels, logits as transformers' sdpa within bf16 rounding."""
    sy.attention.register_transformers()
    cfg = transformers.MistralConfig(vocab_size=128, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                     num_attention_heads=2, num_key_value_heads=1, head_dim=64,
                                     max_position_embeddings=128, sliding_window=16, initializer_range=0.5)
    logits = {}
    ids = torch.randint(0, 128, (2, 48), generator=torch.Generator().manual_seed(2)).cuda()
    for impl in ("sdpa", "sympathy"):
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation=impl)
        model = model.to("cuda", torch.bfloat16).eval()
        sy.attention.patch_stats(reset=True)
        with torch.no_grad():
            logits[impl] = model(ids).logits.float()
    stats = sy.attention.patch_stats()
    assert stats.taken == 2 and all(path.endswith("+band") for path in stats.paths), str(stats)
    ours, theirs = logits["sympathy"], logits["sdpa"]
    assert ((ours - theirs).abs().max() / theirs.abs().max()).item() < 3e-2
