#!/usr/bin/env python3
"""The ladder's results table: experiments/ladder.sh calls it as
   ladder_table.py MTB OUT CONFIG...   and it writes OUT/results.md and OUT/results.json.
Per config: parameters and KV-cache bytes per token (from `mtb info --config --json`), the
final validation loss of every seed (the last val_loss line of each run's metrics.jsonl), its
mean and spread (half the range over seeds), and training speed (the last train line's
tokens_per_s, median over seeds)."""
import glob, json, os, statistics, subprocess, sys

mtb, out, configs = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = []
for cfg in configs:
    name = os.path.splitext(os.path.basename(cfg))[0]
    info = json.loads(subprocess.check_output([mtb, "info", "--config", cfg, "--json"]))
    comment = json.load(open(cfg)).get("comment", "")
    seeds = []
    for run in sorted(glob.glob(os.path.join(out, "runs", name + "-s*"))):
        lines = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl")) if l.strip()]
        val = [l for l in lines if "val_loss" in l]
        train = [l for l in lines if "train_loss" in l]
        if not val or not train:
            continue
        seeds.append({"run": os.path.basename(run), "step": val[-1]["step"], "tokens": val[-1]["tokens"],
                      "val_loss": val[-1]["val_loss"], "tokens_per_s": train[-1]["tokens_per_s"]})
    losses = [s["val_loss"] for s in seeds]
    rows.append({"config": name, "comment": comment, "params": info["parameters"]["total"],
                 "kv_bytes_per_token_bf16": info["kv_bytes_per_token"]["bf16"], "seeds": seeds,
                 "val_loss_mean": statistics.fmean(losses) if losses else None,
                 "val_loss_spread": (max(losses) - min(losses)) / 2 if losses else None,
                 "tokens_per_s": statistics.median(s["tokens_per_s"] for s in seeds) if seeds else None})

base = rows[0]["params"]
md = ["| rung | parameters | vs rung 1 | KV bytes/token (bf16) | final val loss (nats) | per seed | tokens/s |",
      "|---|---:|---:|---:|---:|---|---:|"]
for r in rows:
    if r["val_loss_mean"] is None:
        md.append(f"| {r['config']} | {r['params']:,} | {100 * (r['params'] / base - 1):+.1f}% | {r['kv_bytes_per_token_bf16']:,} | (not run) | | |")
        continue
    per = ", ".join(f"{s['val_loss']:.4f}" for s in r["seeds"])
    md.append(f"| {r['config']} | {r['params']:,} | {100 * (r['params'] / base - 1):+.1f}% | "
              f"{r['kv_bytes_per_token_bf16']:,} | {r['val_loss_mean']:.4f} ± {r['val_loss_spread']:.4f} | {per} | "
              f"{r['tokens_per_s']:,.0f} |")
tokens = {s["tokens"] for r in rows for s in r["seeds"]}
md.append("")
md.append(f"Each run: {', '.join(f'{t:,}' for t in sorted(tokens))} training tokens; ± is half the range over "
          f"{max(len(r['seeds']) for r in rows)} seeds.")
text = "\n".join(md) + "\n"
open(os.path.join(out, "results.md"), "w").write(text)
json.dump(rows, open(os.path.join(out, "results.json"), "w"), indent=2)
print(text)
