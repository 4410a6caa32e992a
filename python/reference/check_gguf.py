#!/usr/bin/python3
"""Cross-check model.py against llama.cpp: run the reference on the F32 GGUF
fixtures in /work/shared/models/llamacpp (written by llama.cpp's gguf-py,
logits computed by llama.cpp itself) and compare.

  /usr/bin/python3 python/reference/check_gguf.py [DIR]

Minimal GGUF reader: F32 (type 0), F16 (1) and BF16 (30) tensors only.
RoPE as llama.cpp applies it: arch llama / deepseek2 rotate adjacent pairs,
qwen2 / qwen3 rotate halves. MLA files in the split form (attn_k_b ne
{nope, kv_lora, heads}, attn_v_b ne {kv_lora, v, heads}) are recombined into
kv_b [heads*(nope+v), kv_lora].
"""

import os
import struct
import sys
from collections import OrderedDict

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from model import ModelConfig, check_params, forward  # noqa: E402
from safetensors_io import bf16_bits_to_f32  # noqa: E402

IDS = [45, 396, 335, 224, 221, 439, 44, 357, 103, 48, 269, 499, 376, 389, 367, 402, 262, 65, 429, 230, 256, 189,
       93, 474, 400, 329, 206, 421, 279, 227, 230, 116, 47, 283, 454, 32, 439, 423, 141, 323, 84, 388, 358, 181,
       34, 496, 228, 457]

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def read_gguf(path):
    data = open(path, "rb").read()
    pos = 0

    def rd(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return v[0]

    def rstr():
        nonlocal pos
        n = rd("<Q")
        s = data[pos:pos + n].decode("utf-8")
        pos += n
        return s

    def rval(t):
        if t == 8:
            return rstr()
        if t == 9:
            et, n = rd("<I"), rd("<Q")
            return [rval(et) for _ in range(n)]
        return rd(_SCALAR[t])

    if data[:4] != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file")
    pos = 4
    version, n_tensors, n_kv = rd("<I"), rd("<Q"), rd("<Q")
    meta = OrderedDict()
    for _ in range(n_kv):
        k = rstr()
        meta[k] = rval(rd("<I"))
    infos = []
    for _ in range(n_tensors):
        name = rstr()
        nd = rd("<I")
        ne = [rd("<Q") for _ in range(nd)]
        infos.append((name, ne, rd("<I"), rd("<Q")))
    align = meta.get("general.alignment", 32)
    base = (pos + align - 1) // align * align
    tensors = OrderedDict()
    for name, ne, t, off in infos:
        n = int(np.prod(ne))
        shape = tuple(reversed(ne))
        if t == 0:
            a = np.frombuffer(data, "<f4", n, base + off)
        elif t == 1:
            a = np.frombuffer(data, "<f2", n, base + off).astype(np.float32)
        elif t == 30:
            a = bf16_bits_to_f32(np.frombuffer(data, "<u2", n, base + off))
        else:
            a = None  # quantized: not needed here
        tensors[name] = None if a is None else a.reshape(shape).astype(np.float64)
    return meta, tensors


def to_reference(meta, t):
    arch = meta["general.architecture"]
    g = lambda k, default=None: meta.get(f"{arch}.{k}", default)
    L, d = g("block_count"), g("embedding_length")
    H, KV = g("attention.head_count"), g("attention.head_count_kv")
    V = t["token_embd.weight"].shape[0]
    T = lambda a: torch.from_numpy(np.ascontiguousarray(a))
    p = OrderedDict()
    p["embed"] = T(t["token_embd.weight"])
    common = dict(vocab=V, d_model=d, n_layers=L, n_heads=H, d_ff=g("feed_forward_length"),
                  norm_eps=g("attention.layer_norm_rms_epsilon"), rope_base=g("rope.freq_base", 10000.0),
                  tie="output.weight" not in t)
    if arch == "deepseek2":
        nope_rope = g("attention.key_length_mla")
        rope = g("rope.dimension_count")
        vd = g("attention.value_length_mla")
        kvr = g("attention.kv_lora_rank")
        cfg = ModelConfig(n_kv_heads=H, head_dim=nope_rope, attn="mla", q_lora_rank=g("attention.q_lora_rank", 0),
                          kv_lora_rank=kvr, qk_nope_head_dim=nope_rope - rope, qk_rope_head_dim=rope,
                          v_head_dim=vd, latent_norm_eps=g("attention.layer_norm_rms_epsilon"),
                          rope_layout="interleaved", **common).validate()
    else:
        hd = g("attention.key_length", d // H)
        cfg = ModelConfig(n_kv_heads=KV, head_dim=hd, qk_norm="blk.0.attn_q_norm.weight" in t,
                          rope_layout="interleaved" if arch == "llama" else "half", **common).validate()
    for i in range(L):
        b, s = f"blk.{i}.", f"layers.{i}."
        p[s + "attn_norm.weight"] = T(t[b + "attn_norm.weight"])
        if arch == "deepseek2":
            if cfg.q_lora_rank:
                p[s + "attn.q_a.weight"] = T(t[b + "attn_q_a.weight"])
                p[s + "attn.q_a_norm.weight"] = T(t[b + "attn_q_a_norm.weight"])
                p[s + "attn.q_b.weight"] = T(t[b + "attn_q_b.weight"])
            else:
                p[s + "attn.q.weight"] = T(t[b + "attn_q.weight"])
            p[s + "attn.kv_a.weight"] = T(t[b + "attn_kv_a_mqa.weight"])
            p[s + "attn.kv_a_norm.weight"] = T(t[b + "attn_kv_a_norm.weight"])
            if b + "attn_kv_b.weight" in t:
                kv_b = t[b + "attn_kv_b.weight"]
            else:
                kb = t[b + "attn_k_b.weight"]   # [H, kv_lora, nope]
                vb = t[b + "attn_v_b.weight"]   # [H, v, kv_lora]
                kv_b = np.concatenate([kb.transpose(0, 2, 1), vb], axis=1).reshape(-1, kb.shape[1])
            p[s + "attn.kv_b.weight"] = T(kv_b)
            p[s + "attn.o.weight"] = T(t[b + "attn_output.weight"])
        else:
            for x, n in (("q", "attn_q"), ("k", "attn_k"), ("v", "attn_v"), ("o", "attn_output")):
                p[s + f"attn.{x}.weight"] = T(t[b + n + ".weight"])
            if cfg.qk_norm:
                p[s + "attn.q_norm.weight"] = T(t[b + "attn_q_norm.weight"])
                p[s + "attn.k_norm.weight"] = T(t[b + "attn_k_norm.weight"])
        p[s + "ffn_norm.weight"] = T(t[b + "ffn_norm.weight"])
        p[s + "ffn.gate.weight"] = T(t[b + "ffn_gate.weight"])
        p[s + "ffn.up.weight"] = T(t[b + "ffn_up.weight"])
        p[s + "ffn.down.weight"] = T(t[b + "ffn_down.weight"])
    p["final_norm.weight"] = T(t["output_norm.weight"])
    if not cfg.tie:
        p["lm_head"] = T(t["output.weight"])
    check_params(cfg, p)
    return cfg, p


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "/work/shared/models/llamacpp"
    ok = True
    for name in ("llama-tiny-f32", "qwen3-tiny-f32", "mla-tiny-f32", "qwen3-tiny-bf16"):
        path = os.path.join(root, name + ".gguf")
        if not os.path.exists(path):
            print(f"{name}: missing, skipped")
            continue
        meta, t = read_gguf(path)
        cfg, p = to_reference(meta, t)
        with torch.no_grad():
            ours = forward(cfg, p, IDS).numpy()
        theirs = np.fromfile(os.path.join(root, name + ".logits.f32"), "<f4").reshape(len(IDS), -1)
        err = np.abs(ours - theirs).max() / np.abs(theirs).max()
        same_argmax = (ours.argmax(1) == theirs.argmax(1)).mean()
        tol = 1e-4 if "f32" in name else 3e-2
        good = err < tol
        ok &= good
        print(f"{name:18s} {meta['general.architecture']:10s} max|diff|/max|ref| = {err:.2e} "
              f"argmax agree {same_argmax:.3f} -> {'ok' if good else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
