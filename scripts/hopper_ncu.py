"""One `hopper` call for Nsight Compute to profile (bf16, N=4096, B=4, H*d=2048, not causal by default):

    ncu -k regex:hopper_fwd --launch-skip 1 --launch-count 1 --metrics ... python3 scripts/hopper_ncu.py
    ncu -k regex:hopper_bwd --launch-skip 1 --launch-count 1 ... python3 scripts/hopper_ncu.py --backward --d 64

--backward runs forward + backward (the hopper backward, attention_hopper_bwd.cu) instead of the forward;
--n N sets the length (B = 16384 / N), --causal the mask, --dropout P dropout_p (the fused dropout's kernels).
--cudnn runs torch SDPA's cuDNN backend on the same shape instead (profile it with -k regex:"fmha|cudnn|sm90";
with --backward its backward too), for the same counters on the anchor; --fa4 runs FlashAttention-4's forward
(scripts/fa4_anchor.py, where its wheels are on PYTHONPATH; profile it with -k regex:FlashAttentionForward).
Which instruction the warps stall at: add --section SourceCounters, print the report's source page as CSV and
summarise it (scripts/ncu_source_summary.py).
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sympathy.attention import cuda  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--backward", action="store_true")
ap.add_argument("--d", type=int, default=128)
ap.add_argument("--cudnn", action="store_true")
ap.add_argument("--fa4", action="store_true")
ap.add_argument("--n", type=int, default=4096)
ap.add_argument("--causal", action="store_true")
ap.add_argument("--dropout", type=float, default=0.0)
args = ap.parse_args()
q, k, v = (torch.randn(16384 // args.n, 2048 // args.d, args.n, args.d, device="cuda", dtype=torch.bfloat16,
                       requires_grad=args.backward) for _ in range(3))
fa4 = None
if args.fa4:
    if args.backward:
        sys.exit("--fa4 profiles the forward only")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import fa4_anchor
    fa4, why = fa4_anchor.load()
    if fa4 is None:
        sys.exit(f"FlashAttention-4 is not importable: {why}")
    q, k, v = (fa4_anchor.to_bnhd(t) for t in (q, k, v))
for _ in range(2):   # the first call builds/loads the library; ncu profiles the second
    if fa4 is not None:
        out = fa4_anchor.forward(fa4, q, k, v, args.causal)
        continue
    if args.cudnn:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=args.dropout, is_causal=args.causal)
            if args.backward:
                out.backward(torch.ones_like(out))
        continue
    out = cuda.scaled_dot_product_attention(q, k, v, dropout_p=args.dropout, is_causal=args.causal, kernel="hopper")
    if args.backward:
        out.backward(torch.ones_like(out))
torch.cuda.synchronize()
