"""One `hopper` forward call for Nsight Compute to profile (bf16, d=128, N=4096, B=4, H=16, not causal):

    ncu -k regex:hopper_fwd --launch-skip 1 --launch-count 1 --metrics ... python3 scripts/hopper_ncu.py
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sympathy.attention import cuda  # noqa: E402

q, k, v = (torch.randn(4, 16, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
for _ in range(2):   # the first call builds/loads the library; ncu profiles the second
    cuda.scaled_dot_product_attention(q, k, v, kernel="hopper")
torch.cuda.synchronize()
