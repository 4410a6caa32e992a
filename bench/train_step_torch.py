#!/usr/bin/python3
"""PyTorch's side of bench/train_step.sh: one AdamW training step of a model from
python/reference/model.py (the float64 oracle, run here in float32), timed.

  /usr/bin/python3 bench/train_step_torch.py [--preset example-3m] [--batch 8] [--seq 256]
                                             [--steps 5] [--warmup 1] [--threads 2]

Prints one JSON line: median seconds per step, tokens/s, GFLOP/s (the same FLOP count
mtb reports: 6 x matrix parameters x tokens + causal attention), torch and BLAS details.
The reference forward takes one sequence at a time, so a batch is a loop over sequences;
the loss is the mean cross-entropy over all batch tokens, as in mtb.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "reference"))
import hf  # noqa: E402
import model  # noqa: E402
from make_fixtures import example_3m  # noqa: E402

PRESETS = {"example-3m": lambda: example_3m()}


def step_flops(cfg, tokens, seq):
    """6 x (matrix parameters used per token) x tokens + 3 x causal attention (fwd 1x, bwd 2x)."""
    shapes = model.param_shapes(cfg)
    mat = 0
    for name, shape in shapes.items():
        if len(shape) == 2 and name not in ("embed", "pos_embed"):
            mat += shape[0] * shape[1]
    if cfg.tie:
        mat += cfg.vocab * cfg.d_model  # the head reuses the embedding as a matrix product
    if cfg.attn == "gqa":
        qk, dv = cfg.head_dim, cfg.head_dim
    else:
        qk, dv = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim, cfg.v_head_dim
    pairs = seq * (seq + 1) / 2  # causal (query, key) pairs per sequence
    attn_fwd = 2.0 * pairs * cfg.n_heads * (qk + dv) * cfg.n_layers * (tokens / seq)
    return 6.0 * mat * tokens + 3.0 * attn_fwd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="example-3m", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model.DT = torch.float32  # the reference's positions/RoPE tables follow DT: float32 throughout
    cfg = hf.config_from_hf(PRESETS[args.preset]())
    params = model.init_params(cfg, seed=1)
    params = {k: v.float().requires_grad_(True) for k, v in params.items()}
    decay = [p for n, p in params.items() if p.dim() == 2]
    no_decay = [p for n, p in params.items() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    rng = np.random.Generator(np.random.PCG64(7))
    data = rng.integers(0, cfg.vocab, (args.batch, args.seq + 1))
    ids = data[:, :-1]
    targets = torch.from_numpy(data[:, 1:].astype(np.int64))
    times, losses = [], []
    for s in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = torch.stack([model.forward(cfg, params, ids[b]) for b in range(args.batch)])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if s >= args.warmup:
            times.append(dt)
    med = statistics.median(times)
    tokens = args.batch * args.seq
    flops = step_flops(cfg, tokens, args.seq)
    blas = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    print(json.dumps({"impl": "pytorch", "preset": args.preset, "batch": args.batch, "seq": args.seq,
                      "threads": torch.get_num_threads(), "torch": torch.__version__, "blas": blas,
                      "step_s_median": med, "step_s_all": times, "tokens_per_s": tokens / med,
                      "gflops": flops / med / 1e9, "step_gflop": flops / 1e9, "loss_first": losses[0],
                      "loss_last": losses[-1]}))


if __name__ == "__main__":
    main()
