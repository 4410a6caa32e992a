#!/usr/bin/env bash
# The main job: install what is needed, build mtb, then train the chapter's example-3m model
# on the default corpus (Debian's fortunes) with a 1,000-token BPE learned from it, generate a
# sample from the run directory, and print its KV-cache plan.
#
#   bash scripts/run.sh            env: STEPS=800 (about 3 minutes on 2 cores), RUN=build/run-example-3m
#
# The run directory is a Hugging Face-style model directory (config.json, model.safetensors,
# tokenizer.json) plus the optimizer state and metrics.jsonl; `mtb train --resume -o RUN`
# continues it, `mtb plot RUN -o loss` draws its loss curves.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS="${STEPS:-800}"
RUN="${RUN:-build/run-example-3m}"
bash scripts/setup.sh
# Only the command line here (scripts/build.sh also builds the tests and benchmarks).
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > build.log 2>&1 || { cat build.log; exit 1; }
cmake --build build -j "$(nproc)" --target mtb
MTB=./build/mtb

echo "== a 1,000-token byte-level BPE learned from the corpus"
$MTB tokenizer train --vocab-size 1000 -o build/tokenizer-1000/tokenizer.json

echo "== training example-3m (its vocab of 1,000 set from the tokenizer) for $STEPS steps"
rm -rf "$RUN"
$MTB train --preset example-3m --vocab-from-tokenizer --tokenizer build/tokenizer-1000/tokenizer.json \
  --steps "$STEPS" --batch 8 --seq-len 256 --lr 2e-3 --min-lr 2e-4 --warmup 50 --eval-every 100 --eval-batches 8 \
  -o "$RUN" | tee build/run-example-3m.txt

echo "== a sample from $RUN, prompted with \"The meaning of life\""
$MTB generate -m "$RUN" --prompt "The meaning of life" -n 120 --temperature 0.8 --top-k 40 --seed 1
echo
echo "== its KV-cache plan"
$MTB kv -m "$RUN" --context 1024

echo "== result"
tail -n 1 build/run-example-3m.txt
