// node llamacpp_tokenize.mjs MODEL.gguf < strings.jsonl: llama.cpp's token ids (node-llama-cpp's
// prebuilt CPU binary) for one JSON string per line, special-token strings parsed, no BOS/EOS
// added; prints one JSON array per line.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
import fs from "node:fs";

const [modelPath] = process.argv.slice(2);
const lines = fs.readFileSync(0, "utf8").split("\n").filter(l => l.length > 0);
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
for (const line of lines) console.log(JSON.stringify(Array.from(model.tokenize(JSON.parse(line), true))));
await llama.dispose();
