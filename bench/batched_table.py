#!/usr/bin/env python3
"""Medians of bench/batched_vs_llamacpp.sh's JSON lines, per tool and parallelism, with ratios.

    bench/batched_vs_llamacpp.sh ... > runs.jsonl; bench/batched_table.py runs.jsonl
"""
import json
import statistics
import sys
from collections import defaultdict


def main(path):
    pp = defaultdict(list)  # (tool, parallel) -> aggregate prompt tok/s per round
    tg = defaultdict(list)
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        run = json.loads(line)
        for row in run["rows"]:
            if run["tool"] == "mtb":
                key, p, t = row["parallel"], row["pp_tokens_per_s"], row["tg_tokens_per_s"]
            else:
                key, p, t = row["pl"], row["speed_pp"], row["speed_tg"]
            pp[(run["tool"], key)].append(p)
            tg[(run["tool"], key)].append(t)
    parallel = sorted({k for (_, k) in pp})
    med = lambda v: statistics.median(v) if v else float("nan")
    print("| B | mtb pp tok/s | llama.cpp pp tok/s | pp ratio | mtb tg tok/s | llama.cpp tg tok/s | tg ratio | rounds |")
    print("|---|---|---|---|---|---|---|---|")
    for b in parallel:
        mp, lp = med(pp[("mtb", b)]), med(pp[("llama.cpp", b)])
        mt, lt = med(tg[("mtb", b)]), med(tg[("llama.cpp", b)])
        print(f"| {b} | {mp:.1f} | {lp:.1f} | {mp / lp:.2f}x | {mt:.2f} | {lt:.2f} | {mt / lt:.2f}x | "
              f"{len(pp[('mtb', b)])}/{len(pp[('llama.cpp', b)])} |")


if __name__ == "__main__":
    main(sys.argv[1])
