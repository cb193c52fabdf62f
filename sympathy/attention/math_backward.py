"""The attention backward in torch ops: the formula every backward kernel implements, for the calls no
kernel takes (attn_mask, head dims other than 64 and 128, float32 with a band) and for the float64
gradcheck that verifies it. cuda.py calls it `_math_backward`."""
import math

from .band import NO_WINDOW, has_band, merge_mask


def math_backward(dout, q, k, v, out, lse, attn_mask, is_causal: bool, scale: float, *, causal_offset: int = 0,
                   window=NO_WINDOW, rows_complete: bool = False):
    """The same algorithm as attention_bwd.cu in torch ops (fp32, or fp64 for fp64 inputs):
    P = exp(S - LSE), D = rowsum(dO o O), dS = P o (dO V^T - D); dK, dV summed over a GQA group.
    The backward of attn_mask calls, odd head dims and float32 bands, and the formula gradcheck verifies.
    rows_complete: k and v hold every key of each row (the call's own forward, as cuda.py's calls): P is then
    softmax(S), exact where an additive mask swamps a row (below). Otherwise (ring attention's steps: LSE is
    that of a longer row, of which these keys are a part) P = exp(S - LSE)."""
    import torch

    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    group = q.shape[1] // k.shape[1]
    qf, kf, vf, of, dof = (t.to(acc) for t in (q, k, v, out, dout))
    kf, vf = kf.repeat_interleave(group, dim=1), vf.repeat_interleave(group, dim=1)
    s = (qf @ kf.transpose(-1, -2)) * scale
    if has_band(causal_offset, window):
        attn_mask = merge_mask(attn_mask, s.shape[-2], s.shape[-1], is_causal, causal_offset, window, s.device)
    elif is_causal:   # top-left, as the forward
        nq, nk = s.shape[-2:]
        s = s.masked_fill(torch.ones(nq, nk, dtype=torch.bool, device=s.device).triu(1), -math.inf)
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, -math.inf) if attn_mask.dtype == torch.bool else s + attn_mask.to(acc)
    # rows_complete: P from S itself (softmax subtracts the row max), not exp(S - LSE): where an additive mask
    # swamps a row (every element torch.finfo.min, say) the forward's LSE is the max alone, its sum lost to
    # rounding, and exp(S - LSE) would give 1 per key where torch's softmax gives a uniform row. A row that
    # saw no key has LSE = -inf and P = 0 (exp(-inf - -inf) and softmax would give NaN).
    lse = lse.to(acc).unsqueeze(-1)
    p = torch.softmax(s, dim=-1) if rows_complete else torch.exp(s - lse)
    p = torch.where(torch.isinf(lse), torch.zeros_like(s), p)
    delta = (dof * of).sum(-1, keepdim=True)
    ds = p * (dof @ vf.transpose(-1, -2) - delta)
    dq = (ds @ kf) * scale
    dk = (ds.transpose(-1, -2) @ qf) * scale
    dv = p.transpose(-1, -2) @ dof
    B, Hkv, Nk = k.shape[:3]
    dk, dv = (t.view(B, Hkv, group, Nk, t.shape[-1]).sum(2) for t in (dk, dv))   # dv may differ from d (CPU)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)
