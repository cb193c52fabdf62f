"""attn_implementation="sympathy" for Hugging Face transformers models.

    sy.attention.register_transformers()
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sympathy")

Registers an attention function under the name in transformers' `AttentionInterface`, and
transformers' SDPA mask builder under the same name in its `AttentionMaskInterface` (without a mask
builder transformers would pass no mask at all, and a padded batch would silently attend to its
padding). The function is transformers' `sdpa_attention_forward` with our kernels in place of torch's
SDPA: no mask -> is_causal on our kernels; a left-padded batch -> one unmasked call per sequence
(padding.py); GQA on the kernels (no repeat_kv copy); a decode step (one query token, no mask, CUDA)
-> the KV-cache kernel of kvcache.py (path "cuda-decode"); a mask that is exactly one causal band for the
whole batch (Mistral-style sliding windows, `sliding_window` from the model; a prefill over a cache,
bottom-right) -> the band of band.py on our kernels, no mask read; any other mask (right padding, padding
with the causal triangle, ...) on fp16/bf16 at d 64/128 -> tile by tile on our kernels (mask_tiles.py,
path "cuda+mask"). dropout (training) -> the fused dropout of dropout.py where it serves (a sliding
window as the band: path "cuda+dropout+band"; a padding mask tile by tile: path "cuda+mask+dropout"). Everything else (dropout with a mask in
deterministic mode, other masks, dtypes the device's kernel lacks,
softcap, position bias, a paged cache, output_attentions)
runs transformers' own `sdpa_attention_forward`, counted with its reason in
`sy.attention.patch_stats()`. transformers stays optional: it is imported only here.
"""
from typing import Optional

from .band import match_band_mask
from .patch import _record
from .torch_api import decide

_options = {"kernel": "auto", "deterministic": None}
_DELEGATED_KWARGS = ("softcap", "position_bias", "cache", "output_attentions")


def _transformers():
    try:
        import transformers
        from transformers import AttentionInterface
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError as exc:
        raise ImportError("sy.attention.register_transformers needs Hugging Face transformers: "
                          "pip install transformers") from exc
    return transformers, AttentionInterface, AttentionMaskInterface, sdpa_mask, sdpa_attention_forward


def sympathy_attention_forward(module, query, key, value, attention_mask, dropout: float = 0.0,
                               scaling: Optional[float] = None, is_causal: Optional[bool] = None, **kwargs):
    """transformers' attention-function contract: query (B, Hq, N, d), key/value (B, Hkv, Nk, d), the
    4-D boolean mask from sdpa_mask or None -> (attn_output (B, N, Hq, dv), None)."""
    *_, sdpa_attention_forward = _transformers()
    delegated = next((name for name in _DELEGATED_KWARGS if kwargs.get(name) not in (None, False)), None)
    if delegated is not None:
        _record(None, f"transformers: {delegated}")
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    q_length = query.shape[2]
    if q_length == 1 and attention_mask is None and _decode_fits(query, key, value, dropout, module):
        # A generate() decode step: one new token against the whole cache, no mask (every cached key
        # counts). The KV-cache kernel reads each K/V head once per GQA group with the keys split over
        # the SMs (kvcache.py); (B, H, N, d) tensors are passed as (B, N, H, d) views, no copy.
        from .kvcache import attention_with_kvcache

        out = attention_with_kvcache(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                                     softmax_scale=scaling)
        _record("cuda-decode", None)
        return out, None
    is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    enable_gqa = query.shape[1] != key.shape[1]
    band = match_band_mask(attention_mask, q_length, key.shape[2], kwargs.get("sliding_window")) \
        if attention_mask is not None and q_length > 1 and is_causal else None
    if band is not None:
        # The whole batch shares one band (a sliding window, a bottom-right diagonal): the kernels take
        # it as causal_offset and window and skip the key blocks outside it; the mask is never read.
        causal_offset, window = band
        decision = decide(query, key, value, None, dropout, True, scaling, enable_gqa, kernel=_options["kernel"],
                          deterministic=_options["deterministic"], window=window, causal_offset=causal_offset)
        if decision.run is not None:
            out = decision.run()
            _record(decision.path + "+band", None)
            return out.transpose(1, 2).contiguous(), None
    # As sdpa_attention_forward: the causal flag only without a mask and beyond one query token; an empty
    # static cache's extra keys (never attended to under top-left causal) are cut off.
    is_causal = bool(q_length > 1 and attention_mask is None and is_causal)
    if is_causal and key.shape[2] > q_length:
        key, value = key[:, :, :q_length], value[:, :, :q_length]
    decision = decide(query, key, value, attention_mask, dropout, is_causal, scaling, enable_gqa,
                      kernel=_options["kernel"], deterministic=_options["deterministic"], mask_kernel=False)
    if decision.run is None:
        _record(None, f"transformers: {decision.reason}")
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    out = decision.run()
    _record(decision.path, None)
    return out.transpose(1, 2).contiguous(), None


def _decode_fits(query, key, value, dropout: float, module) -> bool:
    """The decode kernel's conditions: CUDA (sm_80+), fp16/bf16, head dim 64 or 128, one dtype, no dropout
    (the model passes 0.0 outside training), no gradient wanted (the kernel is inference only: a differentiable call must not lose
    its gradients), and K/V rows 16-byte aligned (cp.async); anything else takes the general path."""
    import torch

    if torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value)):
        return False

    from .kvcache import DECODE_HEAD_DIMS

    if not (query.is_cuda and query.dtype in (torch.float16, torch.bfloat16) and key.dtype == value.dtype == query.dtype):
        return False
    if query.shape[-1] not in DECODE_HEAD_DIMS or key.shape[-1] != query.shape[-1] or value.shape != key.shape:
        return False
    if dropout > 0.0 or query.shape[1] % key.shape[1] != 0:   # as sdpa_attention_forward: dropout whenever passed
        return False
    if any(t.data_ptr() % 16 or t.stride(-1) != 1 or any(s % 8 for s in t.stride()[:3]) for t in (key, value)):
        return False
    return torch.cuda.get_device_capability(query.device) >= (8, 0)


def register_transformers(name: str = "sympathy", *, kernel: str = "auto",
                          deterministic: Optional[bool] = None) -> str:
    """Register sympathy's attention in transformers under `name` (for attn_implementation=name);
    return the name. kernel/deterministic: as sy.attention.scaled_dot_product_attention's (CUDA)."""
    if not isinstance(name, str) or not name or name in ("sdpa", "eager", "flex_attention") \
            or name.startswith("flash_attention"):
        raise ValueError(f"name must be a new non-empty string, not one of transformers' own; got {name!r}")
    if kernel not in ("auto", "naive", "tiled", "mma", "hopper"):
        raise ValueError(f"kernel must be 'auto', 'naive', 'tiled', 'mma' or 'hopper'; got {kernel!r}")
    if deterministic is not None and not isinstance(deterministic, bool):
        raise TypeError(f"deterministic must be a bool or None; got {type(deterministic).__name__}")
    _, AttentionInterface, AttentionMaskInterface, sdpa_mask, _ = _transformers()
    from .torch_api import register_ops

    register_ops()
    _options.update(kernel=kernel, deterministic=deterministic)
    AttentionInterface.register(name, sympathy_attention_forward)
    AttentionMaskInterface.register(name, sdpa_mask)
    return name
