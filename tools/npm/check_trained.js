// Encodes texts with a tokenizer.json trained by `mtb tokenizer train`, using Hugging Face's
// Rust `tokenizers` library (npm binding), for tests/tokenizer/trained_test.cpp to compare.
//   node tools/npm/check_trained.js --tokenizer FILE --texts IN.jsonl --out OUT.jsonl
// IN: one JSON string per line. OUT: per text {"ids": [...], "decoded": "..."} (no template
// added; special-token strings in the text are parsed, as the Rust library always does).
// Exits 3 when the npm package is missing (the test then skips).
'use strict';
const fs = require('fs');

function die(msg, code = 1) {
  process.stderr.write(`check_trained: error: ${msg}\n`);
  process.exit(code);
}

const args = process.argv.slice(2);
const arg = (name) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : undefined;
};
const [tokFile, textsFile, outFile] = [arg('--tokenizer'), arg('--texts'), arg('--out')];
if (!tokFile || !textsFile || !outFile) die('usage: node check_trained.js --tokenizer FILE --texts IN.jsonl --out OUT.jsonl');

let Tokenizer;
try {
  ({ Tokenizer } = require('tokenizers'));
} catch (e) {
  die(`the npm package 'tokenizers' is missing (${e.message.split('\n')[0]})`, 3);
}

async function main() {
  const tok = Tokenizer.fromFile(tokFile);
  const texts = fs.readFileSync(textsFile, 'utf8').split('\n').filter((l) => l.length > 0).map((l) => JSON.parse(l));
  const ids = (await tok.encodeBatch(texts, { addSpecialTokens: false })).map((e) => e.getIds());
  const decoded = await tok.decodeBatch(ids, false);
  const lines = texts.map((_, i) => JSON.stringify({ ids: ids[i], decoded: decoded[i] }));
  fs.writeFileSync(outFile, lines.join('\n') + '\n');
  process.stderr.write(`check_trained: ${texts.length} texts, vocab ${tok.getVocabSize(true)}\n`);
}

main().catch((e) => die(e.stack || String(e)));
