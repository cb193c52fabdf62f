"""Attention, from the article's softmax to GPU kernels.

    sy.attention.reference(q, k, v)   NumPy float64, torch-SDPA semantics (reference.py)
    sy.attention.tiled(q, k, v)       FlashAttention's Algorithm 1 in NumPy, with HBM-traffic counts (tiled.py)
    sy.attention.cpu(q, k, v)         the C kernel, c_src/attention.c (cpu.py)
    sy.attention.scaled_dot_product_attention(q, k, v)   CUDA kernels on torch tensors (cuda.py)
"""
from .reference import reference
from .tiled import tiled
from .cpu import cpu
from .cuda import scaled_dot_product_attention
