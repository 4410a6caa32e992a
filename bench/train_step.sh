#!/usr/bin/env bash
# Training step speed, mtb vs PyTorch, side by side on this machine: `example-3m` at batch
# 8 x 256 tokens, one AdamW step (forward, backward, clipping, update), 2 threads each.
# PyTorch is Debian's torch 1.13 running python/reference/model.py in float32 (one sequence at
# a time, as the reference forward takes them) with OpenBLAS as its BLAS.
#
#   bash bench/train_step.sh [BUILD_DIR]     (default build/; ROUNDS=3 MTB_STEPS=5 TORCH_STEPS=2 THREADS=2)
#
# Rounds alternate mtb and PyTorch so that both see the same machine load; each prints the
# median step of its round, and the summary gives medians over rounds and their ratio.
# PyTorch runs with OMP_WAIT_POLICY=PASSIVE (TORCH_OMP_WAIT_POLICY to change): on a shared,
# busy machine its default spinning OpenMP threads ran 5-20x slower, which would flatter mtb.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
ROUNDS="${ROUNDS:-3}" MTB_STEPS="${MTB_STEPS:-5}" TORCH_STEPS="${TORCH_STEPS:-2}"
PRESET=example-3m BATCH=8 SEQ=256 THREADS="${THREADS:-2}"

if [[ ! -x "$BUILD/mtb_bench_train" ]]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  ninja -C "$BUILD" mtb_bench_train >/dev/null
fi
blas="$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 || true)"
case "$blas" in
  *openblas*) ;;
  *) echo "train_step.sh: PyTorch's BLAS is '$blas', not OpenBLAS: apt-get install libopenblas0-openmp" >&2; exit 1 ;;
esac

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for r in $(seq 1 "$ROUNDS"); do
  MTB_THREADS=$THREADS "$BUILD/mtb_bench_train" --preset $PRESET --batch $BATCH --seq $SEQ --steps "$MTB_STEPS" \
    | tee -a "$out/mtb.jsonl"
  OMP_NUM_THREADS=$THREADS OMP_WAIT_POLICY="${TORCH_OMP_WAIT_POLICY:-PASSIVE}" /usr/bin/python3 "$ROOT/bench/train_step_torch.py" --preset $PRESET --batch $BATCH \
    --seq $SEQ --steps "$TORCH_STEPS" --threads $THREADS | tee -a "$out/torch.jsonl"
done
/usr/bin/python3 - "$out/mtb.jsonl" "$out/torch.jsonl" <<'PY'
import json, statistics, sys
runs = [[json.loads(l) for l in open(p)] for p in sys.argv[1:3]]
(m, t) = runs
ratios = [a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(m, t)]
def med(rs, k): return statistics.median(r[k] for r in rs)
print(f"example-3m, batch {m[0]['batch']} x {m[0]['seq']} tokens, {m[0]['threads']} threads, "
      f"{m[0]['step_gflop']:.1f} GFLOP per step, {len(m)} rounds")
print(f"  mtb      {med(m, 'tokens_per_s'):9.0f} tokens/s  {med(m, 'step_s_median'):7.3f} s/step  "
      f"{med(m, 'gflops'):6.1f} GFLOP/s")
print(f"  PyTorch  {med(t, 'tokens_per_s'):9.0f} tokens/s  {med(t, 'step_s_median'):7.3f} s/step  "
      f"{med(t, 'gflops'):6.1f} GFLOP/s  (torch {t[0]['torch']}, {t[0]['blas']})")
print(f"  mtb / PyTorch tokens/s per round: {', '.join(f'{x:.1f}x' for x in ratios)}; "
      f"median {statistics.median(ratios):.1f}x")
PY
