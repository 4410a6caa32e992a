#!/usr/bin/python3
"""Write the reference fixtures the C++ tests read.

  /usr/bin/python3 python/reference/make_fixtures.py --out DIR [--llama2c PATH]

For each variant: DIR/<name>/ is a Hugging Face model directory (config.json +
safetensors) with seeded random weights, plus
  ids.i32     int32 LE, N_TOKENS token ids
  logits.f64  float64 LE, [N_TOKENS][vocab], every position, computed by
              model.py from the weights as stored in the file.
DIR/manifest.json lists the variants; DIR/param_counts.json gives parameter
counts. With --llama2c: DIR/stories260K/{ids.i32, logits.f64, greedy.txt}.
"""

import argparse
import json
import os
import sys
import time
import zlib

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hf  # noqa: E402
import llama2c  # noqa: E402
from model import forward, greedy, init_params, param_count, ModelConfig  # noqa: E402

N_TOKENS = 80


def llama_like(model_type, V, d, L, H, KV, ff, head_dim=None, eps=1e-5, theta=10000.0, tie=False, **extra):
    arch = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
            "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[model_type]
    c = {
        "architectures": [arch],
        "model_type": model_type,
        "vocab_size": V,
        "hidden_size": d,
        "intermediate_size": ff,
        "num_hidden_layers": L,
        "num_attention_heads": H,
        "num_key_value_heads": KV,
        "head_dim": head_dim if head_dim is not None else d // H,
        "hidden_act": "silu",
        "max_position_embeddings": 512,
        "rms_norm_eps": eps,
        "rope_theta": theta,
        "rope_scaling": None,
        "tie_word_embeddings": tie,
        "attention_bias": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    }
    c.update(extra)
    return c


def deepseek(model_type, V, d, L, H, ff, q_lora, kv_lora, rope, nope, v):
    arch = {"deepseek_v2": "DeepseekV2ForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM"}[model_type]
    return {
        "architectures": [arch],
        "model_type": model_type,
        "vocab_size": V,
        "hidden_size": d,
        "intermediate_size": ff,
        "num_hidden_layers": L,
        "num_attention_heads": H,
        "num_key_value_heads": H,
        "q_lora_rank": q_lora,
        "kv_lora_rank": kv_lora,
        "qk_nope_head_dim": nope,
        "qk_rope_head_dim": rope,
        "v_head_dim": v,
        "first_k_dense_replace": L,      # every layer dense
        "n_routed_experts": None,        # no experts at all
        "n_shared_experts": None,
        "num_experts_per_tok": None,
        "moe_layer_freq": 1,
        "hidden_act": "silu",
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "rope_interleave": True,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    }


def gpt2(V, d, L, H, n_pos):
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": V,
        "n_embd": d,
        "n_layer": L,
        "n_head": H,
        "n_positions": n_pos,
        "n_ctx": n_pos,
        "n_inner": None,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "scale_attn_weights": True,
        "tie_word_embeddings": True,
        "bos_token_id": 0,
        "eos_token_id": 0,
        "torch_dtype": "float32",
    }


def example_3m(tie=False):
    """The chapter's example model: V=1000, d=256, 4 layers, 8 heads / 2 KV,
    head_dim 32, d_ff 688, QK-norm, base 10000, eps 1e-6."""
    return llama_like("qwen3", 1000, 256, 4, 8, 2, 688, head_dim=32, eps=1e-6, theta=10000.0, tie=tie)


# name -> (description, hf config, options)
VARIANTS = [
    ("example-3m", "the chapter's example model (qwen3: QK-norm, GQA 8/2, untied), 3,283,456 parameters",
     example_3m(), {}),
    ("mha", "llama, multi-head attention (4 heads, 4 KV heads), untied",
     llama_like("llama", 512, 128, 2, 4, 4, 344), {}),
    ("mqa", "llama, multi-query attention (4 heads, 1 KV head), untied",
     llama_like("llama", 384, 128, 2, 4, 1, 320), {}),
    ("gqa-tied", "llama, GQA 8/2 heads of 16, tied embeddings, no lm_head in the file",
     llama_like("llama", 512, 128, 2, 8, 2, 256, tie=True), {}),
    ("tied-redundant-lmhead", "qwen3, tied, file also holds lm_head.weight equal to the embedding",
     llama_like("qwen3", 512, 128, 2, 4, 2, 256, head_dim=32, eps=1e-6, tie=True), {"redundant_lm_head": True}),
    ("interleaved", "llama with rope_interleave true: RoPE on adjacent pairs (2i, 2i+1)",
     llama_like("llama", 512, 128, 2, 4, 2, 256, rope_interleave=True), {}),
    ("qwen3-like", "qwen3, base 1e6, d=128, 4 heads / 2 KV, head_dim 64 != d/heads, QK-norm, tied",
     llama_like("qwen3", 512, 128, 3, 4, 2, 352, head_dim=64, eps=1e-6, theta=1e6, tie=True), {}),
    ("llama3-scaling", "llama, base 500000, head_dim 64, llama3 rope_scaling (factor 8, orig 64)",
     llama_like("llama", 512, 128, 2, 4, 2, 256, head_dim=64, theta=500000.0,
                rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                max_position_embeddings=512), {}),
    ("nope-every-4th", "llama, 8 layers, no_rope_layers 0 at layers 3 and 7 (NoPE)",
     llama_like("llama", 256, 64, 8, 4, 2, 176, no_rope_layers=[1, 1, 1, 0, 1, 1, 1, 0]), {}),
    ("qwen2-like", "qwen2, q/k/v biases, base 1e6, untied",
     llama_like("qwen2", 512, 128, 2, 4, 2, 320, eps=1e-6, theta=1e6), {}),
    ("mistral-bf16", "mistral, every tensor stored BF16; logits from the bf16 values",
     llama_like("mistral", 512, 128, 2, 4, 2, 352, torch_dtype="bfloat16", sliding_window=None),
     {"dtype": "BF16"}),
    ("sharded", "llama split over 2 safetensors shards with model.safetensors.index.json",
     llama_like("llama", 512, 128, 4, 4, 2, 256), {"n_shards": 2}),
    ("mla", "deepseek_v3 MLA, no q-lora, 4 heads, kv_lora 64, rope 16, nope 32, v 32, all dense",
     deepseek("deepseek_v3", 512, 128, 2, 4, 256, None, 64, 16, 32, 32), {}),
    ("mla-qlora", "deepseek_v2 MLA with q_lora_rank 48, kv_lora 64, rope 16, nope 32, v 32, all dense",
     deepseek("deepseek_v2", 512, 128, 3, 4, 256, 48, 64, 16, 32, 32), {}),
    ("gpt2", "GPT-2 block: LayerNorm, gelu_new MLP 4d, learned positions, biases, MHA, tied",
     gpt2(512, 128, 3, 4, 128), {}),
]


def seed_of(name, salt):
    return zlib.crc32(f"{salt}:{name}".encode())


def write_f64(path, arr):
    np.ascontiguousarray(np.asarray(arr, dtype="<f8")).tofile(path)


def write_i32(path, ids):
    np.asarray(ids, dtype="<i4").tofile(path)


def make_variant(out, name, desc, hfc, opts):
    vdir = os.path.join(out, name)
    cfg = hf.config_from_hf(hfc)
    params = init_params(cfg, seed_of(name, "weights"))
    tensors = hf.to_hf(cfg, params, hfc["model_type"], redundant_lm_head=opts.get("redundant_lm_head", False))
    hf.save_hf_dir(vdir, hfc, tensors, dtype=opts.get("dtype", "F32"), n_shards=opts.get("n_shards", 1))
    # reload what was written: logits come from the stored values
    cfg2, params2, _, _ = hf.load_hf_dir(vdir)
    assert cfg2 == cfg
    ids = np.random.Generator(np.random.PCG64(seed_of(name, "ids"))).integers(0, cfg.vocab, N_TOKENS)
    with torch.no_grad():
        logits = forward(cfg2, params2, ids)
    write_i32(os.path.join(vdir, "ids.i32"), ids)
    write_f64(os.path.join(vdir, "logits.f64"), logits.numpy())
    return {"name": name, "description": desc, "model_type": hfc["model_type"],
            "n_tokens": N_TOKENS, "vocab": cfg.vocab}, param_count(params2), logits


def make_llama2c(out, path, manifest):
    if not os.path.exists(path):
        print(f"llama2c: {path} not found, stories260K fixtures skipped")
        return
    cfg, params = llama2c.load(path)
    vdir = os.path.join(out, "stories260K")
    os.makedirs(vdir, exist_ok=True)
    rng = np.random.Generator(np.random.PCG64(seed_of("stories260K", "ids")))
    ids = np.concatenate([[1], rng.integers(0, cfg.vocab, 63)])
    with torch.no_grad():
        logits = forward(cfg, params, ids)
    write_i32(os.path.join(vdir, "ids.i32"), ids)
    write_f64(os.path.join(vdir, "logits.f64"), logits.numpy())
    gen = greedy(cfg, params, [1], 200)
    with open(os.path.join(vdir, "greedy.txt"), "w") as f:
        f.write(" ".join(str(t) for t in gen) + "\n")
    manifest["llama2c"] = {"name": "stories260K", "source": os.path.basename(path), "n_tokens": len(ids),
                           "vocab": cfg.vocab, "greedy_prompt": [1], "greedy_tokens": 200,
                           "description": "llama2.c stories260K: interleaved RoPE, base 10000, eps 1e-5, "
                                          "tied, GQA 8/4; greedy.txt = argmax decode from [1]"}
    print(f"stories260K: {len(ids)} ids, greedy starts {gen[:20]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--llama2c", help="path to a llama2.c checkpoint, e.g. stories260K.bin")
    args = ap.parse_args()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)
    manifest = {"variants": []}
    counts = {}
    for name, desc, hfc, opts in VARIANTS:
        t = time.time()
        entry, n, logits = make_variant(args.out, name, desc, hfc, opts)
        manifest["variants"].append(entry)
        counts[name] = n
        print(f"{name:24s} {entry['model_type']:12s} params {n:9d}  logits std {logits.std().item():.3f}"
              f"  ({time.time() - t:.2f}s)")
    for name, tie, qk in [("example-3m", False, True), ("example-3m-tied", True, True),
                          ("example-3m-no-qknorm", False, False), ("example-3m-tied-no-qknorm", True, False)]:
        cfg = hf.config_from_hf(example_3m(tie))
        cfg.qk_norm = qk
        counts[name] = param_count(init_params(cfg, 0))
    assert counts["example-3m"] == 3283456, counts["example-3m"]
    if args.llama2c:
        make_llama2c(args.out, args.llama2c, manifest)
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    with open(os.path.join(args.out, "param_counts.json"), "w") as f:
        json.dump(counts, f, indent=2)
        f.write("\n")
    print(f"example-3m parameters: {counts['example-3m']}")
    print(f"wrote {len(VARIANTS)} variants to {args.out} in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
