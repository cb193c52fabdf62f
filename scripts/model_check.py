#!/usr/bin/env python3
"""sympathy's attention inside a whole model, on one CUDA GPU (issue #16): a Llama-style model (GQA,
8+ layers, bf16) built from a config with random weights, run with attn_implementation="sympathy",
with "sdpa" (torch's default, flash, cuDNN, efficient and math backends) and through
sy.attention.patch() on the unmodified "sdpa" model, all judged against a float32 copy:

  logits      max |logits - fp32| / max |fp32| on the real (unpadded) positions, batches with and
              without left padding;
  greedy      64 greedy tokens: how many agree with the float32 model's before the first difference.
              Random weights make logits nearly flat, so torch's own bf16 backends disagree with
              float32 (and with each other) after a few tokens: their spread in this run is the
              tolerance, not identical tokens;
  training    one step's loss and the relative error of all gradients ||g - g32|| / ||g32||;
  speed       whole-model forward and forward+backward, median of CUDA-event timings, ours beside
              sdpa (default, cuDNN, flash) at N = 2048 (batch 8) and N = 16384 (batch 1); the ratio
              is the other's time over ours (> 1: ours is faster).

    python3 scripts/model_check.py [--out DIR] [--layers 8] [--quick]

Prints one table per part (docs/notes-model-check.md keeps them) and writes model_check.json to --out.
No download: transformers builds the model from a config.
"""
import argparse
import contextlib
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import sympathy as sy

TORCH_BACKENDS = {"sdpa": None, "sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
                  "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION, "sdpa-math": SDPBackend.MATH}
TIMED = ("sympathy", "patch", "sdpa", "sdpa-cudnn", "sdpa-flash")


def log(*args):
    print(*args, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")), help="folder for model_check.json")
    p.add_argument("--layers", type=int, default=8, help="decoder layers (default 8)")
    p.add_argument("--hidden", type=int, default=2048, help="hidden size (default 2048; head_dim 128)")
    p.add_argument("--prompt", type=int, default=256, help="prompt length of the accuracy checks (default 256)")
    p.add_argument("--new-tokens", type=int, default=64, help="greedy tokens per prompt (default 64)")
    p.add_argument("--sizes", type=int, nargs="+", default=[2048, 16384], help="timed sequence lengths")
    p.add_argument("--tokens", type=int, default=16384, help="tokens per timed batch (batch = tokens // N)")
    p.add_argument("--repeat", type=int, default=7, help="timed repetitions, median reported (default 7)")
    p.add_argument("--quick", action="store_true", help="skip the timings")
    p.add_argument("--device", default="cuda", help="cuda (default); cpu for a dry run of the script's logic")
    return p.parse_args()


def make_models(args):
    """The float32 model and its bf16 copies with attn_implementation sympathy and sdpa (same weights)."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    heads = args.hidden // 128
    cfg = LlamaConfig(vocab_size=32000, hidden_size=args.hidden, intermediate_size=args.hidden * 11 // 4,
                      num_hidden_layers=args.layers, num_attention_heads=heads, num_key_value_heads=max(1, heads // 4),
                      max_position_embeddings=max(args.sizes) + 256, rope_theta=500000.0, pad_token_id=0)
    torch.manual_seed(0)
    with torch.device(args.device):
        fp32 = AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="sdpa")
    models = {"fp32": fp32.float().eval()}
    for impl in ("sympathy", "sdpa"):
        model = copy.deepcopy(fp32).to(torch.bfloat16)
        if hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation(impl)
        else:
            model.config._attn_implementation = impl
        models[impl] = model.eval()
    assert models["sympathy"].config._attn_implementation == "sympathy"
    assert models["sdpa"].config._attn_implementation == "sdpa"
    params = sum(p.numel() for p in fp32.parameters())
    log(f"model: Llama-style, {args.layers} layers, hidden {args.hidden}, {heads} query heads, "
        f"{max(1, heads // 4)} kv heads, head_dim 128, {params / 1e6:.0f} M parameters")
    return models


class Variant:
    """How one row of a table runs: a model, a torch SDPA backend restriction, or our patch()."""

    def __init__(self, name, models):
        self.name = name
        self.model = models["sympathy"] if name == "sympathy" else models["fp32"] if name == "fp32" else models["sdpa"]

    def context(self):
        if self.name == "patch":
            return sy.attention.patch()
        backend = TORCH_BACKENDS.get(self.name)
        return contextlib.nullcontext() if backend is None else sdpa_kernel([backend])


def prompts(batch, n, padded, seed=1, device="cuda"):
    gen = torch.Generator(device=device).manual_seed(seed)
    ids = torch.randint(1, 32000, (batch, n), device=device, generator=gen)
    mask = torch.ones_like(ids)
    if padded:   # left padding: row b has b * n // (2 * batch) pad tokens in front
        for b in range(batch):
            pad = b * n // (2 * batch) + (n // 8 if b else 0)
            mask[b, :pad] = 0
            ids[b, :pad] = 0
    return ids, mask


def accuracy(models, names, args):
    """Logits error and greedy agreement with float32, with and without left padding."""
    rows = []
    for padded in (False, True):
        ids, mask = prompts(4, args.prompt, padded, device=args.device)
        real = mask.bool()
        with torch.no_grad():
            ref_logits = models["fp32"](ids, attention_mask=mask).logits.float()
            ref_tokens = models["fp32"].generate(ids, attention_mask=mask, max_new_tokens=args.new_tokens,
                                                 do_sample=False, pad_token_id=0)[:, ids.shape[1]:]
        scale = ref_logits[real].abs().max().item()
        for name in names:
            v = Variant(name, models)
            row = {"padded": padded, "variant": name}
            try:
                with torch.no_grad(), v.context():
                    logits = v.model(ids, attention_mask=mask).logits.float()
                    tokens = v.model.generate(ids, attention_mask=mask, max_new_tokens=args.new_tokens,
                                              do_sample=False, pad_token_id=0)[:, ids.shape[1]:]
            except RuntimeError as exc:     # a torch backend that cannot take this call (mask, GQA)
                row["error"] = str(exc).splitlines()[0][:80]
                rows.append(row)
                continue
            diff = (logits - ref_logits)[real].abs()
            same = (tokens == ref_tokens).int()
            prefix = same.cumprod(dim=1).sum(dim=1)          # tokens equal to fp32's before the first difference
            row.update(max_rel=diff.max().item() / scale, mean_rel=diff.mean().item() / scale,
                       prefix=prefix.tolist(), prefix_mean=prefix.float().mean().item(),
                       same=same.sum().item(), total=same.numel())
            rows.append(row)
            log(f"  {'padded' if padded else 'unpadded':8s} {name:15s} logits max rel {row['max_rel']:.2e} "
                f"mean rel {row['mean_rel']:.2e}; greedy agree before first difference {row['prefix']}")
    return rows


def training(models, names, args):
    """One step's loss and gradient error (batch 2, N 2 x prompt, no padding) against float32, and against
    torch's default bf16 SDPA with the same bf16 weights (the weights' rounding cancels there: what is
    left is the attention's, and torch's backends' spread among themselves is the tolerance)."""
    ids, _ = prompts(2, 2 * args.prompt, False, seed=2, device=args.device)
    refs, results = {}, []
    for name in ["fp32", "sdpa"] + [n for n in names if n != "sdpa"]:
        v = Variant(name, models)
        v.model.train()
        v.model.zero_grad(set_to_none=True)
        try:
            with v.context():
                loss = v.model(ids, labels=ids).loss
                loss.backward()
        except RuntimeError as exc:
            results.append({"variant": name, "error": str(exc).splitlines()[0][:80]})
            continue
        finally:
            v.model.eval()
        g = {n: p.grad.float() for n, p in v.model.named_parameters()}
        v.model.zero_grad(set_to_none=True)
        if name in ("fp32", "sdpa"):
            refs[name] = (g, sum(x.square().sum() for x in g.values()).sqrt().item(), loss.item())
            if name == "fp32":
                continue
        row = {"variant": name, "loss": loss.item(), "loss_fp32": refs["fp32"][2]}
        for ref in ("fp32", "sdpa"):
            ref_g, ref_norm, _ = refs[ref]
            row[f"grad_rel_{ref}"] = sum((g[n] - ref_g[n]).square().sum() for n in g).sqrt().item() / ref_norm
        results.append(row)
        log(f"  {name:15s} loss {row['loss']:.5f} (fp32 {row['loss_fp32']:.5f}) gradient rel error "
            f"vs fp32 {row['grad_rel_fp32']:.2e}, vs torch's bf16 sdpa {row['grad_rel_sdpa']:.2e}")
        del g
    return results


def median_ms(fn, repeat, device):
    """Median milliseconds of fn over `repeat` runs after two warm-ups (CUDA events on a GPU)."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeat):
        if device == "cpu":
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
            continue
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def speed(models, args):
    results = []
    for n in args.sizes:
        batch = max(1, args.tokens // n)
        ids, _ = prompts(batch, n, False, seed=3, device=args.device)
        for mode in ("forward", "forward+backward"):
            times = {}
            for name in TIMED:
                v = Variant(name, models)
                model = v.model

                def run():
                    if mode == "forward":
                        with torch.no_grad():
                            model(ids, logits_to_keep=1)
                    else:
                        model.zero_grad(set_to_none=True)
                        model(ids, labels=ids).loss.backward()
                    if args.device == "cuda":
                        torch.cuda.synchronize()
                try:
                    with v.context():
                        times[name] = median_ms(run, args.repeat, args.device)
                except RuntimeError as exc:
                    log(f"  N={n} {mode} {name}: {str(exc).splitlines()[0][:80]}")
                model.zero_grad(set_to_none=True)
                if args.device == "cuda":
                    torch.cuda.empty_cache()
            ours = times.get("sympathy")
            row = {"n": n, "batch": batch, "mode": mode, "ms": times,
                   "ratio_vs_ours": {k: t / ours for k, t in times.items()} if ours else {}}
            results.append(row)
            log(f"  N={n:6d} B={batch} {mode:17s} " + "  ".join(f"{k} {t:8.2f} ms" for k, t in times.items()))
    return results


def print_tables(acc, train, perf, device):
    log(f"\n## {device}, torch {torch.__version__}, transformers {__import__('transformers').__version__}")
    log("\n| batch | variant | logits max rel err | mean rel err | greedy tokens equal to fp32's before the "
        "first difference, per prompt | greedy tokens equal to fp32's at the same position, all prompts |"
        "\n|---|---|---|---|---|---|")
    for r in acc:
        pad = "left-padded" if r["padded"] else "unpadded"
        if "error" in r:
            log(f"| {pad} | {r['variant']} | n/a: {r['error']} | | | |")
        else:
            log(f"| {pad} | {r['variant']} | {r['max_rel']:.2e} | {r['mean_rel']:.2e} | {r['prefix']} | "
                f"{r['same']} of {r['total']} |")
    for padded in (False, True):
        rows = [r for r in acc if r["padded"] == padded and "error" not in r]
        theirs = [r for r in rows if r["variant"].startswith("sdpa")]
        for r in (r for r in rows if r["variant"] in ("sympathy", "patch")):
            worst_err = max(t["max_rel"] for t in theirs)
            fewest = min(t["prefix_mean"] for t in theirs)
            ok = r["max_rel"] <= worst_err * 1.25 and r["prefix_mean"] >= fewest
            same = [t["same"] for t in theirs]
            log(f"\n{'left-padded' if padded else 'unpadded'} {r['variant']}: logits error {r['max_rel']:.2e} "
                f"(torch's bf16 backends: {min(t['max_rel'] for t in theirs):.2e} to {worst_err:.2e}), "
                f"greedy agreement {r['prefix_mean']:.1f} tokens (torch's: {fewest:.1f} to "
                f"{max(t['prefix_mean'] for t in theirs):.1f}), {r['same']} of {r['total']} at the same position "
                f"(torch's: {min(same)} to {max(same)}): {'within' if ok else 'OUTSIDE'} torch's spread")
    log("\n| training step | loss | fp32 loss | gradient rel err vs fp32 | vs torch's default bf16 sdpa |"
        "\n|---|---|---|---|---|")
    for r in train:
        if "error" in r:
            log(f"| {r['variant']} | n/a: {r['error']} | | | |")
        else:
            log(f"| {r['variant']} | {r['loss']:.5f} | {r['loss_fp32']:.5f} | {r['grad_rel_fp32']:.2e} | "
                f"{r['grad_rel_sdpa']:.2e} |")
    if perf:
        log("\n| N | batch | pass | " + " | ".join(f"{k} ms" for k in TIMED)
            + " | " + " | ".join(f"{k} / ours" for k in TIMED[1:]) + " |")
        log("|---" * (3 + 2 * len(TIMED) - 1) + "|")
        for r in perf:
            ms = [f"{r['ms'][k]:.1f}" if k in r["ms"] else "n/a" for k in TIMED]
            ratios = [f"{r['ratio_vs_ours'][k]:.2f}" if k in r["ratio_vs_ours"] else "n/a" for k in TIMED[1:]]
            log(f"| {r['n']} | {r['batch']} | {r['mode']} | " + " | ".join(ms) + " | " + " | ".join(ratios) + " |")


def main():
    args = parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("model_check needs a CUDA GPU (--device cpu: a dry run of the script)")
    sy.attention.register_transformers()
    device = torch.cuda.get_device_name() if args.device == "cuda" else "CPU dry run"
    started = time.time()
    models = make_models(args)
    names = ["sympathy", "patch"] + list(TORCH_BACKENDS)
    sy.attention.patch_stats(reset=True)
    log("accuracy (against the float32 model):")
    acc = accuracy(models, names, args)
    log(f"routing so far: {sy.attention.patch_stats()}")
    log("training step:")
    train = training(models, ["sympathy", "patch", "sdpa", "sdpa-flash", "sdpa-cudnn", "sdpa-math"], args)
    perf = []
    if not args.quick:
        log("speed (whole model):")
        perf = speed(models, args)
    stats = sy.attention.patch_stats()
    log(f"routing, whole run: {stats}")
    print_tables(acc, train, perf, device)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "model_check.json").write_text(json.dumps(
        {"device": device, "torch": torch.__version__, "accuracy": acc, "training": train, "speed": perf,
         "routing": {"taken": stats.taken, "fallbacks": stats.fallbacks, "paths": dict(stats.paths),
                     "reasons": dict(stats.reasons)}, "seconds": time.time() - started}, indent=1))


if __name__ == "__main__":
    main()
