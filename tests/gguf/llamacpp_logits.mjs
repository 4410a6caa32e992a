// node llamacpp_logits.mjs MODEL.gguf OUT.f32 IDS: llama.cpp's logits (node-llama-cpp's
// prebuilt CPU binary) at every position, raw float32 [n][vocab]; F32 KV cache, no flash
// attention, all ids in one batch (llama.cpp's exact-F32 path).
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
import fs from "node:fs";

const [modelPath, out, idsText] = process.argv.slice(2);
const ids = idsText.split(",").map(Number);
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const ctx = await model.createContext({
  contextSize: Math.max(64, ids.length), batchSize: Math.max(64, ids.length), flashAttention: false, threads: 2,
  experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"});
const res = await ctx.getSequence().controlledEvaluate(ids.map(t => [t, {generateNext: {logits: true}}]));
const V = model.tokens.count ?? res[0].next.logits.size;
const buf = new Float32Array(ids.length * V);
res.forEach((r, i) => { for (const [tok, l] of r.next.logits) buf[i * V + tok] = l; });
fs.writeFileSync(out, Buffer.from(buf.buffer));
console.log(`wrote ${ids.length} x ${V} logits to ${out}`);
await llama.dispose();
