// The Rust library's side of bench/tokenizer_speed.sh: load time of a tokenizer.json and
// encoding MB/s over a corpus (one JSON string per line), one sample at a time, medians of
// several runs. Run with RAYON_NUM_THREADS=1 UV_THREADPOOL_SIZE=1 for one thread.
//   node tools/npm/bench.js TOKENIZER_JSON CORPUS_JSONL [--runs N] [--load-runs N]
'use strict';
const fs = require('fs');
const { Tokenizer } = require('tokenizers');

const [file, corpusFile] = process.argv.slice(2);
const arg = (name, fallback) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? parseInt(process.argv[i + 1], 10) : fallback;
};
const runs = arg('--runs', 5);
const loadRuns = arg('--load-runs', 5);
const median = (v) => {
  const s = [...v].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
};

async function main() {
  const corpus = fs.readFileSync(corpusFile, 'utf8').split('\n').filter((l) => l.length).map((l) => JSON.parse(l));
  const bytes = corpus.reduce((a, s) => a + Buffer.byteLength(s, 'utf8'), 0);
  const loads = [];
  for (let r = 0; r < loadRuns; r++) {
    const t0 = process.hrtime.bigint();
    Tokenizer.fromFile(file);
    loads.push(Number(process.hrtime.bigint() - t0) / 1e9);
  }
  const cold = [], warm = [], batch = [];
  let tokens = 0;
  for (let r = 0; r < runs; r++) {
    const tok = Tokenizer.fromFile(file);
    for (let pass = 0; pass < 2; pass++) {
      tokens = 0;
      const t0 = process.hrtime.bigint();
      for (const s of corpus) tokens += (await tok.encode(s, null, { addSpecialTokens: true })).getLength();
      (pass === 0 ? cold : warm).push(bytes / 1e6 / (Number(process.hrtime.bigint() - t0) / 1e9));
    }
    // The whole corpus in one call (the binding's fastest path; threads as RAYON_NUM_THREADS says).
    const t0 = process.hrtime.bigint();
    await tok.encodeBatch(corpus, { addSpecialTokens: true });
    batch.push(bytes / 1e6 / (Number(process.hrtime.bigint() - t0) / 1e9));
  }
  const out = {
    engine: `rust tokenizers ${require('tokenizers/package.json').version} (npm)`, tokenizer: file,
    samples: corpus.length, bytes, tokens, load_s_median: +median(loads).toFixed(4),
    encode_mb_per_s_median: +median(cold).toFixed(3), encode_mb_per_s_warm_median: +median(warm).toFixed(3),
    encode_batch_mb_per_s_median: +median(batch).toFixed(3), runs,
  };
  process.stdout.write(JSON.stringify(out) + '\n');
}
main().catch((e) => { process.stderr.write(`bench.js: error: ${e.stack || e}\n`); process.exit(1); });
