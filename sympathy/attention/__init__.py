"""Attention, from the article's softmax to GPU kernels. Every entry takes torch's signature
(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False).

    sy.attention.reference(q, k, v)   NumPy float64, torch-SDPA semantics (reference.py)
    sy.attention.tiled(q, k, v)       FlashAttention's Algorithm 1 in NumPy, with HBM-traffic counts (tiled.py)
    sy.attention.cpu(q, k, v)         the C kernel, c_src/attention.c (cpu.py)
    sy.attention.scaled_dot_product_attention(q, k, v)   torch tensors on any device, or NumPy (torch_api.py)
    with sy.attention.patch(): ...    torch's F.scaled_dot_product_attention runs on ours (patch.py)
    sy.attention.register_transformers()   attn_implementation="sympathy" (transformers_api.py)
    sy.attention.attention_with_kvcache(q, k_cache, v_cache, ...)   flash_attn_with_kvcache: decode (kvcache.py)
    sy.attention.varlen_attention(q, k, v, cu_seqlens_q, ...)   flash_attn_varlen_func: packed batches (varlen.py)
    sy.attention.ring_attention(q, k, v, is_causal=True)   context parallel over torch.distributed (ring_attention.py)
    sy.attention.shard_sequence(x, world_size, rank) / unshard_sequence(shards)   its layouts (ring_steps.py)
"""
from .reference import reference
from .tiled import tiled
from .cpu import cpu
from .torch_api import scaled_dot_product_attention
from .patch import PatchStats, patch, patch_stats
from .transformers_api import register_transformers
from .kvcache import attention_with_kvcache
from .varlen import varlen_attention
from .ring_attention import ring_attention
from .ring_steps import shard_positions, shard_sequence, simulate_ring, unshard_sequence
