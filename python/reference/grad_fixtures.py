#!/usr/bin/python3
"""Write the training fixtures the C++ gradient tests read: float64 gradients of every
parameter, and the losses of 10 AdamW steps, for every variant of make_fixtures.py's matrix.

  /usr/bin/python3 python/reference/grad_fixtures.py --out DIR

For each variant (make_fixtures.VARIANTS, `sharded` skipped: storage only) DIR/<name>/ holds
  config.json + model.safetensors  the initial weights (make_fixtures' seeds; mistral-bf16 BF16)
  batch.i32     int32 LE [2][B][T]: token ids, then targets (next tokens; two are IGNORE = -100)
  grads.f64     float64 LE, every parameter's gradient of the mean cross-entropy, concatenated
  grads.json    {"loss", "B", "T", "ignore_index", "tensors": [{"name", "shape", "offset"}],
                 "adamw": {schedule, hyperparameters, "losses": [10], "grad_norms": [10]}}
Names are mtb's canonical ones (model/weights.h). Everything is float64 autograd on
model.py's forward, from the weights as stored. The AdamW run is torch.optim.AdamW with two
parameter groups: weight decay on matrices (2-D: embeddings, projections, head) only,
norm scales and biases undecayed; global-norm clipping is torch.nn.utils.clip_grad_norm_;
the learning rate follows linear warmup then cosine decay (LR_* below; mtb's LrSchedule).
Deterministic; a few seconds on 2 cores.
"""

import argparse
import json
import math
import os
import re
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hf  # noqa: E402
from make_fixtures import VARIANTS, seed_of  # noqa: E402
from model import forward, init_params  # noqa: E402

B, T = 2, 24
IGNORE = -100
ADAMW = {"steps": 10, "lr_max": 1e-3, "lr_min": 1e-4, "warmup": 3, "beta1": 0.9, "beta2": 0.95,
         "eps": 1e-8, "weight_decay": 0.1, "clip": 1.0}
SKIP = {"sharded"}


def lr_at(step, a):
    """Linear warmup to lr_max over `warmup` steps, then cosine to lr_min at the last step."""
    if step < a["warmup"]:
        return a["lr_max"] * (step + 1) / a["warmup"]
    span = max(1, a["steps"] - 1 - a["warmup"])
    progress = min(1.0, (step - a["warmup"]) / span)
    return a["lr_min"] + (a["lr_max"] - a["lr_min"]) * 0.5 * (1.0 + math.cos(math.pi * progress))


_RULES = [
    (r"^embed$", "model.embed_tokens.weight"),
    (r"^pos_embed$", "model.embed_positions.weight"),
    (r"^lm_head$", "lm_head.weight"),
    (r"^final_norm\.(weight|bias)$", r"model.norm.\1"),
    (r"^layers\.(\d+)\.attn_norm\.(weight|bias)$", r"model.layers.\1.input_layernorm.\2"),
    (r"^layers\.(\d+)\.ffn_norm\.(weight|bias)$", r"model.layers.\1.post_attention_layernorm.\2"),
    (r"^layers\.(\d+)\.attn\.(q|k|v|o)\.(weight|bias)$", r"model.layers.\1.self_attn.\2_proj.\3"),
    (r"^layers\.(\d+)\.attn\.(q|k)_norm\.weight$", r"model.layers.\1.self_attn.\2_norm.weight"),
    (r"^layers\.(\d+)\.attn\.(q_a|q_b|kv_b)\.weight$", r"model.layers.\1.self_attn.\2_proj.weight"),
    (r"^layers\.(\d+)\.attn\.kv_a\.weight$", r"model.layers.\1.self_attn.kv_a_proj_with_mqa.weight"),
    (r"^layers\.(\d+)\.attn\.(q_a|kv_a)_norm\.weight$", r"model.layers.\1.self_attn.\2_layernorm.weight"),
    (r"^layers\.(\d+)\.ffn\.(gate|up|down)\.(weight|bias)$", r"model.layers.\1.mlp.\2_proj.\3"),
    (r"^layers\.(\d+)\.ffn\.fc\.(weight|bias)$", r"model.layers.\1.mlp.up_proj.\2"),
    (r"^layers\.(\d+)\.ffn\.proj\.(weight|bias)$", r"model.layers.\1.mlp.down_proj.\2"),
]


def canonical(name):
    """Reference parameter name -> mtb's canonical tensor name."""
    for pat, rep in _RULES:
        if re.match(pat, name):
            return re.sub(pat, rep, name)
    raise KeyError(name)


def mean_loss(cfg, params, ids, targets):
    logits = torch.stack([forward(cfg, params, ids[b]) for b in range(ids.shape[0])])
    return torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab), torch.from_numpy(targets.reshape(-1)),
                                             ignore_index=IGNORE, reduction="mean")


def make_batch(name, vocab):
    rng = np.random.Generator(np.random.PCG64(seed_of(name, "train-batch")))
    seq = rng.integers(0, vocab, (B, T + 1))
    ids, targets = seq[:, :-1].astype(np.int64), seq[:, 1:].astype(np.int64)
    targets[0, 5] = IGNORE
    targets[1, T - 1] = IGNORE
    return ids, targets


def adamw_run(cfg, params0, ids, targets):
    a = ADAMW
    params = {n: p.detach().clone().requires_grad_(True) for n, p in params0.items()}
    decay = [p for p in params.values() if p.dim() == 2]
    no_decay = [p for p in params.values() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a["lr_max"], betas=(a["beta1"], a["beta2"]), eps=a["eps"])
    losses, norms = [], []
    for s in range(a["steps"]):
        for g in opt.param_groups:
            g["lr"] = lr_at(s, a)
        opt.zero_grad(set_to_none=True)
        loss = mean_loss(cfg, params, ids, targets)
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(list(params.values()), a["clip"])))
        opt.step()
        losses.append(loss.item())
    return losses, norms


def make_variant(out, name, hfc, opts):
    vdir = os.path.join(out, name)
    cfg = hf.config_from_hf(hfc)
    params = init_params(cfg, seed_of(name, "weights"))
    tensors = hf.to_hf(cfg, params, hfc["model_type"], redundant_lm_head=opts.get("redundant_lm_head", False))
    hf.save_hf_dir(vdir, hfc, tensors, dtype=opts.get("dtype", "F32"))
    cfg, params, _, _ = hf.load_hf_dir(vdir)  # gradients at the weights as stored
    ids, targets = make_batch(name, cfg.vocab)
    np.concatenate([ids, targets]).astype("<i4").tofile(os.path.join(vdir, "batch.i32"))

    leaf = {n: p.clone().requires_grad_(True) for n, p in params.items()}
    loss = mean_loss(cfg, leaf, ids, targets)
    loss.backward()
    entries, chunks, offset = [], [], 0
    for n, p in leaf.items():
        g = p.grad.detach().numpy().astype("<f8").ravel()
        entries.append({"name": canonical(n), "shape": list(p.shape), "offset": offset})
        chunks.append(g)
        offset += g.size
    np.concatenate(chunks).tofile(os.path.join(vdir, "grads.f64"))
    losses, norms = adamw_run(cfg, params, ids, targets)
    meta = {"variant": name, "loss": loss.item(), "B": B, "T": T, "ignore_index": IGNORE, "tensors": entries,
            "adamw": dict(ADAMW, losses=losses, grad_norms=norms)}
    with open(os.path.join(vdir, "grads.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    return meta


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory")
    args = ap.parse_args()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)
    names = []
    for name, _desc, hfc, opts in VARIANTS:
        if name in SKIP:
            continue
        t = time.time()
        meta = make_variant(args.out, name, hfc, opts)
        names.append(name)
        ad = meta["adamw"]
        print(f"{name:24s} loss {meta['loss']:.6f}  adamw {ad['losses'][0]:.4f} -> {ad['losses'][-1]:.4f}"
              f"  |g| {ad['grad_norms'][0]:.3f}  ({time.time() - t:.2f}s)")
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump({"variants": names, "B": B, "T": T, "ignore_index": IGNORE}, f, indent=2)
        f.write("\n")
    print(f"wrote {len(names)} gradient fixtures to {args.out} in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
