#!/usr/bin/env bash
# The chapter's ladder, trained: GPT-2 block -> +RMSNorm -> +SwiGLU -> +RoPE -> +GQA ->
# +QK-norm -> +tied embeddings, and MLA in place of GQA (experiments/configs/*.json), on the
# same data (the default corpus, a 1,000-token BPE), the same tokens (STEPS x BATCH x SEQ)
# and the same parameter budget (within 2%, printed), SEEDS seeds each.
#
#   bash experiments/ladder.sh [BUILD_DIR]        (default build/)
#   env: OUT=build-ladder STEPS=200 BATCH=8 SEQ=128 LR=3e-3 SEEDS="1 2" THREADS=2
#        PLOT=docs/experiments/ladder (writes .svg and .png per seed; empty: no plot)
#
# Runs already finished in OUT are kept (an interrupted one resumes), so rerunning only fills
# in what is missing. Writes OUT/results.md (the table) and OUT/results.json.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
OUT="${OUT:-$ROOT/build-ladder}"
STEPS="${STEPS:-200}" BATCH="${BATCH:-8}" SEQ="${SEQ:-128}" LR="${LR:-3e-3}" SEEDS="${SEEDS:-1 2}"
THREADS="${THREADS:-2}" PLOT="${PLOT-$ROOT/docs/experiments/ladder}"
MTB="$BUILD/mtb"
[[ -x "$MTB" ]] || { echo "ladder.sh: $MTB not built (bash scripts/build.sh)" >&2; exit 1; }
mkdir -p "$OUT/runs"

if [[ ! -f "$OUT/tokenizer.json" ]]; then
  "$MTB" tokenizer train --vocab-size 1000 -o "$OUT/tokenizer.json"
fi

configs=("$ROOT"/experiments/configs/*.json)
echo "parameters (budget: within 2% of the first):"
for cfg in "${configs[@]}"; do
  printf '  %-12s %s\n' "$(basename "$cfg" .json)" "$("$MTB" info --config "$cfg" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["parameters"]["total"])')"
done

for seed in $SEEDS; do
  for cfg in "${configs[@]}"; do
    name="$(basename "$cfg" .json)"
    run="$OUT/runs/$name-s$seed"
    args=(--config "$cfg" --tokenizer "$OUT/tokenizer.json" --steps "$STEPS" --batch "$BATCH" --seq-len "$SEQ"
          --lr "$LR" --min-lr "$(python3 -c "print($LR / 10)")" --warmup $((STEPS / 10)) --eval-every $((STEPS / 10))
          --eval-batches 4 --seed "$seed" --threads "$THREADS" -o "$run")
    if [[ -f "$run/trainer_state.json" ]]; then
      if python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); sys.exit(0 if s["step"] >= s["options"]["steps"] else 1)' "$run/trainer_state.json"; then
        echo "== $name seed $seed: done"; continue
      fi
      echo "== $name seed $seed: resuming"; "$MTB" train --resume --quiet -o "$run" --threads "$THREADS"
    else
      echo "== $name seed $seed"
      rm -rf "$run"
      "$MTB" train "${args[@]}"
    fi
  done
done

python3 "$ROOT/experiments/ladder_table.py" "$MTB" "$OUT" "${configs[@]}"
if [[ -n "$PLOT" ]]; then  # one chart per seed: PLOT for the first, PLOT-seedN for the others
  mkdir -p "$(dirname "$PLOT")"
  first_seed="${SEEDS%% *}"
  for seed in $SEEDS; do
    runs=() labels=()
    for cfg in "${configs[@]}"; do
      name="$(basename "$cfg" .json)"; runs+=("$OUT/runs/$name-s$seed"); labels+=(--label "$name")
    done
    out="$PLOT"; [[ "$seed" == "$first_seed" ]] || out="$PLOT-seed$seed"
    "$MTB" plot "${runs[@]}" "${labels[@]}" --smooth 0.9 --title "The ladder: validation and train loss (seed $seed)" -o "$out"
  done
fi
