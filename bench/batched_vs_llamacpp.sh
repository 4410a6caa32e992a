#!/usr/bin/env bash
# Batched decoding side by side: mtb bench --parallel against llama.cpp's llama-batched-bench on
# the same GGUF file, same threads, alternating the two, REPS rounds; prints one JSON line per
# run (tool, round, and the tool's own per-parallelism figures) to stdout.
#   bench/batched_vs_llamacpp.sh LLAMA_CPP_BUILD_BIN MODEL.gguf [REPS] [NPL] [NPP] [NTG]
# e.g. bench/batched_vs_llamacpp.sh ../peers/llama.cpp/build/bin /tmp/q06-bf16.gguf 3 1,2,4,8,16 128 128
set -euo pipefail
bin=${1:?path of llama.cpp build bin/ (llama-batched-bench)}; model=${2:?model.gguf}
reps=${3:-3}; npl=${4:-1,2,4,8,16}; npp=${5:-128}; ntg=${6:-128}
here=$(cd "$(dirname "$0")/.." && pwd)
mtb="$here/build/mtb"
[ -x "$bin/llama-batched-bench" ] || { echo "no llama-batched-bench in $bin" >&2; exit 1; }
[ -x "$mtb" ] || { echo "no $mtb: build first" >&2; exit 1; }
max_npl=$(tr ',' '\n' <<<"$npl" | sort -n | tail -1)
ctx=$(( max_npl * (npp + ntg) + 256 ))
for r in $(seq 1 "$reps"); do
  echo "round $r/$reps: mtb" >&2
  "$mtb" bench -m "$model" --parallel "$npl" -p "$npp" -n "$ntg" -r 1 -t 2 --json |
    python3 -c 'import json,sys; print(json.dumps({"tool":"mtb","round":'"$r"',"rows":json.load(sys.stdin)}))'
  echo "round $r/$reps: llama.cpp" >&2
  "$bin/llama-batched-bench" -m "$model" -c "$ctx" -b 2048 -ub 512 -npp "$npp" -ntg "$ntg" -npl "$npl" -t 2 \
      --output-format jsonl 2>/dev/null |
    python3 -c 'import json,sys; rows=[json.loads(l) for l in sys.stdin if l.startswith("{")]; print(json.dumps({"tool":"llama.cpp","round":'"$r"',"rows":rows}))'
done
