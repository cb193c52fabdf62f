"""A whole model's training step with the eager path (sympathy/attention/eager.py) on and off, beside cuDNN,
in one run: where the host time per attention call shows in a model, at short sequences.

    . .device/bootstrap.sh && python3 scripts/eager_ab.py [--sizes 256 512 1024] [--layers 8]

A Llama-style model from a config (random weights, bf16, hidden 2048, 16 query / 4 kv heads, head_dim 128),
attn_implementation="sympathy" against "sdpa" under the cuDNN backend. "op path" is the same model with
eager.untraced forced False, so every call goes through torch.ops.sympathy.attention_fwd / _bwd (how every
autograd call ran before the eager path). Medians of CUDA-event timings of forward+backward steps, the variants interleaved step by step; tokens per
batch fixed (batch = tokens // N).
"""
import argparse
import copy
import statistics

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import sympathy as sy
from sympathy.attention import eager


def one_step_ms(model, ids):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    model(ids, labels=ids).loss.backward()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)


def interleaved(variants, repeat, warmup=3):
    """{name: median ms}: every variant stepped once per round, rounds after `warmup` timed (the host's and
    the GPU's drift then falls on every variant alike)."""
    times = {name: [] for name in variants}
    for i in range(warmup + repeat):
        for name, step in variants.items():
            ms = step()
            if i >= warmup:
                times[name].append(ms)
    return {name: statistics.median(t) for name, t in times.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024])
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=args.layers,
                      num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=8192)
    sy.attention.register_transformers()
    torch.manual_seed(0)
    with torch.device("cuda"):
        base = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").to(torch.bfloat16)
    models = {"sdpa": base, "sympathy": copy.deepcopy(base)}
    models["sympathy"].set_attn_implementation("sympathy")
    assert models["sympathy"].config._attn_implementation == "sympathy"
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; {args.layers} layers, bf16, "
          f"{args.tokens} tokens a batch, forward+backward ms (median of {args.repeat}, variants interleaved)")
    print("| N | batch | sympathy (eager) | sympathy (op path) | sdpa-cudnn | op path / eager | cuDNN / eager |")
    print("|---|---|---|---|---|---|---|")
    real_untraced = eager.untraced

    def op_path(model, ids):
        eager.untraced = lambda torch, *tensors: False
        try:
            return one_step_ms(model, ids)
        finally:
            eager.untraced = real_untraced

    def cudnn(model, ids):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return one_step_ms(model, ids)

    for n in args.sizes:
        ids = torch.randint(0, cfg.vocab_size, (max(1, args.tokens // n), n), device="cuda")
        got = interleaved({"eager": lambda: one_step_ms(models["sympathy"], ids),
                           "op": lambda: op_path(models["sympathy"], ids),
                           "cudnn": lambda: cudnn(models["sdpa"], ids)}, args.repeat)
        for model in models.values():
            model.zero_grad(set_to_none=True)
        ours, op, cud = got["eager"], got["op"], got["cudnn"]
        print(f"| {n} | {ids.shape[0]} | {ours:.2f} | {op:.2f} | {cud:.2f} | {op / ours:.2f} | {cud / ours:.2f} |")

if __name__ == "__main__":
    main()
