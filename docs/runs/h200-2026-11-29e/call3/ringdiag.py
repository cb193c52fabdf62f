"""Every backward sub-call of the failing ring test (zigzag, causal, W = 2 and 4) against float64 on its own inputs
(the merged out and lse it was given), and the same call on contiguous copies."""
import math
import torch
import sympathy as sy
from sympathy.attention import cuda

g = torch.Generator(device="cuda").manual_seed(0)
q, dout = (torch.randn(1, 8, 1024, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
k, v = (torch.randn(1, 2, 1024, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
orig, calls = cuda._launch_bwd, []


def wrapped(*args, **kwargs):
    res = orig(*args, **kwargs)
    calls.append(([a.clone() if torch.is_tensor(a) else a for a in args], kwargs, [r.clone() for r in res],
                  [tuple(a.stride()) if torch.is_tensor(a) else None for a in args[:6]]))
    return res


def reference(dout, q, k, v, out, lse, causal, scale):
    dout, q, k, v, out, lse = (t.double() for t in (dout, q, k, v, out, lse))
    group = q.shape[1] // k.shape[1]
    kr, vr = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = q @ kr.transpose(-1, -2) * scale
    if causal:
        nq, nk = s.shape[-2:]
        s = s.masked_fill(torch.ones(nq, nk, dtype=torch.bool, device=s.device).triu(1), -math.inf)
    p = torch.exp(s - lse.unsqueeze(-1))
    dv = p.transpose(-1, -2) @ dout
    dp = dout @ vr.transpose(-1, -2)
    D = (dout * out).sum(-1, keepdim=True)
    ds = p * (dp - D)
    dq = ds @ kr * scale
    dk = ds.transpose(-1, -2) @ q * scale
    B, H, N, d = k.shape
    return dq, dk.view(B, H, group, N, d).sum(2), dv.view(B, H, group, N, d).sum(2)


cuda._launch_bwd = wrapped
for W in (2, 4):
    calls.clear()
    sy.attention.simulate_ring(q, k, v, W, is_causal=True, enable_gqa=True, layout="zigzag", dout=dout)
    for args, kwargs, res, strides in calls:
        dout_, q_, k_, v_, out_, lse_, mask, causal, scale = args[:9]
        ref = reference(dout_, q_, k_, v_, out_, lse_, causal, scale)
        errs = [((a.double() - b).abs().max() / b.abs().max().clamp_min(1e-6)).item() for a, b in zip(res, ref)]
        again = orig(*[a.contiguous() if torch.is_tensor(a) else a for a in args], **kwargs)
        same = all(torch.equal(a, b) for a, b in zip(again, res))
        print(f"W={W} causal={causal} q{tuple(q_.shape)} k{tuple(k_.shape)} out {out_.dtype} lse {lse_.dtype} "
              f"args {args[9:]} {kwargs} strides q {strides[1]} dout {strides[0]} out {strides[4]} "
              f"err dq {errs[0]:.2e} dk {errs[1]:.2e} dv {errs[2]:.2e} contiguous-same {same}")
