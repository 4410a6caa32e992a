"""Hugging Face model directories <-> the reference model (model.py).

Supported model_type: llama, mistral, qwen2, qwen3, deepseek_v2, deepseek_v3, gpt2.
A directory is config.json plus model.safetensors, or shards listed in
model.safetensors.index.json.

Conventions, as Hugging Face's own modeling code behaves:
  * llama / qwen3: attention_bias true -> bias on q, k, v AND o projections;
    llama mlp_bias true -> bias on gate, up, down.
  * qwen2: bias on q, k, v always (never on o); attention_bias is ignored.
  * mistral: no attention biases.
  * qwen3: q_norm / k_norm [head_dim]; head_dim defaults to 128 when absent
    (Qwen3Config's default); other families default to hidden/heads.
  * RoPE layout: rotate-half for llama-family, unless the mtb extension key
    "rope_interleave" is true; deepseek: interleaved unless rope_interleave is
    false (HF deepseek_v3 honours the key, HF deepseek_v2 always interleaves).
  * mtb extension "no_rope_layers": list, one 0/1 per layer, 1 = RoPE, 0 = NoPE.
  * deepseek: layer i is MoE when n_routed_experts is set (non-zero) and
    i >= first_k_dense_replace; such layers are refused. q_a_layernorm and
    kv_a_layernorm use eps 1e-6 (HF constructs them without passing
    rms_norm_eps). attention_bias and YaRN rope scaling are refused.
  * gpt2: Conv1D weights are stored [in, out]; c_attn's output is q|k|v;
    names may carry the "transformer." prefix or not; "attn.bias" /
    "attn.masked_bias" buffers are ignored. Tied unless tie_word_embeddings false.
  * A tied model may still ship lm_head.weight (ignored, as HF re-ties it);
    an untied model without lm_head.weight is an error.
"""

import json
import os
import re
from collections import OrderedDict

import numpy as np
import torch

import safetensors_io as st
from model import ModelConfig, param_shapes

LLAMA_FAMILY = ("llama", "mistral", "qwen2", "qwen3")
DEEPSEEK = ("deepseek_v2", "deepseek_v3")
SUPPORTED = LLAMA_FAMILY + DEEPSEEK + ("gpt2",)


class HFError(ValueError):
    pass


def _req(hf, key, where):
    if key not in hf or hf[key] is None:
        raise HFError(f"{where}: config.json lacks required key {key!r}")
    return hf[key]


def _rope_params(hf):
    """(base, scaling dict or None) from rope_theta/rope_scaling or the newer
    rope_parameters."""
    rp = hf.get("rope_parameters")
    base = hf.get("rope_theta")
    scaling = hf.get("rope_scaling")
    if isinstance(rp, dict):
        if base is None:
            base = rp.get("rope_theta")
        if scaling is None and rp.get("rope_type", "default") != "default":
            scaling = rp
    if base is None:
        base = 10000.0
    if scaling is not None:
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        if kind == "default":
            scaling = None
        elif kind not in ("llama3", "linear"):
            raise HFError(f"rope scaling type {kind!r} is not supported by the reference")
        elif kind == "llama3":
            for k in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
                if k not in scaling:
                    raise HFError(f"llama3 rope_scaling lacks {k!r}")
    return float(base), (dict(scaling) if scaling else None)


def _rope_layers(hf, n_layers):
    nrl = hf.get("no_rope_layers")
    if nrl is None:
        return None
    if not isinstance(nrl, list) or len(nrl) != n_layers or any(v not in (0, 1, True, False) for v in nrl):
        raise HFError(f"no_rope_layers must be a list of {n_layers} values 0/1, got {nrl!r}")
    return [int(v) for v in nrl]


def config_from_hf(hf):
    """Parse a config.json dict into a ModelConfig."""
    mt = hf.get("model_type")
    if mt not in SUPPORTED:
        raise HFError(f"model_type {mt!r} not supported (supported: {', '.join(SUPPORTED)})")
    where = f"model_type {mt}"
    if mt == "gpt2":
        d = int(_req(hf, "n_embd", where))
        H = int(_req(hf, "n_head", where))
        L = int(_req(hf, "n_layer", where))
        act = hf.get("activation_function", "gelu_new")
        if act in ("gelu_new", "gelu_pytorch_tanh"):
            ffn = "gelu_tanh"
        elif act == "gelu":
            ffn = "gelu_erf"
        else:
            raise HFError(f"gpt2 activation_function {act!r} not supported")
        if hf.get("scale_attn_weights", True) is False or hf.get("scale_attn_by_inverse_layer_idx", False):
            raise HFError("gpt2 attention scaling variants other than 1/sqrt(head_dim) are not supported")
        if d % H:
            raise HFError(f"n_embd {d} not divisible by n_head {H}")
        return ModelConfig(
            vocab=int(_req(hf, "vocab_size", where)), d_model=d, n_layers=L, n_heads=H, n_kv_heads=H,
            head_dim=d // H, d_ff=int(hf.get("n_inner") or 4 * d), norm="layer",
            norm_eps=float(hf.get("layer_norm_epsilon", 1e-5)), ffn=ffn, ffn_bias=True, qkv_bias=True,
            o_bias=True, pos="learned", max_pos=int(_req(hf, "n_positions", where)),
            tie=bool(hf.get("tie_word_embeddings", True))).validate()

    d = int(_req(hf, "hidden_size", where))
    H = int(_req(hf, "num_attention_heads", where))
    L = int(_req(hf, "num_hidden_layers", where))
    V = int(_req(hf, "vocab_size", where))
    act = hf.get("hidden_act", "silu")
    if act != "silu":
        raise HFError(f"hidden_act {act!r} not supported (SwiGLU needs silu)")
    base, scaling = _rope_params(hf)
    common = dict(vocab=V, d_model=d, n_layers=L, n_heads=H, d_ff=int(_req(hf, "intermediate_size", where)),
                  norm="rms", norm_eps=float(hf.get("rms_norm_eps", 1e-6)), ffn="swiglu", pos="rope",
                  rope_base=base, rope_scaling=scaling, rope_layers=_rope_layers(hf, L),
                  tie=bool(hf.get("tie_word_embeddings", False)))

    if mt in LLAMA_FAMILY:
        KV = hf.get("num_key_value_heads")
        if KV is None:
            KV = 8 if mt == "mistral" else H
        hd = hf.get("head_dim")
        if hd is None:
            hd = 128 if mt == "qwen3" else d // H
        ab = bool(hf.get("attention_bias", False))
        if mt == "qwen2":
            qkv_bias, o_bias = True, False
        elif mt == "mistral":
            qkv_bias = o_bias = False
        else:
            qkv_bias = o_bias = ab
        return ModelConfig(
            n_kv_heads=int(KV), head_dim=int(hd), qkv_bias=qkv_bias, o_bias=o_bias,
            ffn_bias=bool(hf.get("mlp_bias", False)) if mt == "llama" else False,
            qk_norm=(mt == "qwen3"),
            rope_layout="interleaved" if hf.get("rope_interleave", False) else "half",
            **common).validate()

    # deepseek_v2 / deepseek_v3 (MLA)
    if hf.get("attention_bias", False):
        raise HFError("deepseek attention_bias true is not supported by the reference")
    if scaling is not None:
        raise HFError("deepseek rope scaling (YaRN) is not supported by the reference")
    fk = int(hf.get("first_k_dense_replace", 0))
    if hf.get("n_routed_experts"):
        moe = [i for i in range(L) if i >= fk]
        if moe:
            raise HFError(f"layers {moe} are MoE (n_routed_experts={hf['n_routed_experts']}, "
                          f"first_k_dense_replace={fk}); only dense layers are supported")
    nope = int(_req(hf, "qk_nope_head_dim", where))
    rope = int(_req(hf, "qk_rope_head_dim", where))
    return ModelConfig(
        n_kv_heads=H, head_dim=nope + rope, attn="mla",
        q_lora_rank=int(hf.get("q_lora_rank") or 0), kv_lora_rank=int(_req(hf, "kv_lora_rank", where)),
        qk_nope_head_dim=nope, qk_rope_head_dim=rope, v_head_dim=int(_req(hf, "v_head_dim", where)),
        latent_norm_eps=1e-6,
        rope_layout="interleaved" if hf.get("rope_interleave", True) else "half",
        **common).validate()


# ------------------------------------------------------------------ tensor names

_LLAMA_RULES = [
    (r"^embed$", "model.embed_tokens.weight"),
    (r"^lm_head$", "lm_head.weight"),
    (r"^final_norm\.weight$", "model.norm.weight"),
    (r"^layers\.(\d+)\.attn_norm\.weight$", r"model.layers.\1.input_layernorm.weight"),
    (r"^layers\.(\d+)\.ffn_norm\.weight$", r"model.layers.\1.post_attention_layernorm.weight"),
    (r"^layers\.(\d+)\.attn\.(q|k|v|o)\.(weight|bias)$", r"model.layers.\1.self_attn.\2_proj.\3"),
    (r"^layers\.(\d+)\.attn\.(q|k)_norm\.weight$", r"model.layers.\1.self_attn.\2_norm.weight"),
    (r"^layers\.(\d+)\.attn\.(q_a|q_b|kv_b)\.weight$", r"model.layers.\1.self_attn.\2_proj.weight"),
    (r"^layers\.(\d+)\.attn\.kv_a\.weight$", r"model.layers.\1.self_attn.kv_a_proj_with_mqa.weight"),
    (r"^layers\.(\d+)\.attn\.(q_a|kv_a)_norm\.weight$", r"model.layers.\1.self_attn.\2_layernorm.weight"),
    (r"^layers\.(\d+)\.ffn\.(gate|up|down)\.(weight|bias)$", r"model.layers.\1.mlp.\2_proj.\3"),
]


def _llama_name(name):
    for pat, rep in _LLAMA_RULES:
        if re.match(pat, name):
            return re.sub(pat, rep, name)
    raise KeyError(name)


def to_hf(cfg, params, model_type, redundant_lm_head=False):
    """Reference params -> OrderedDict HF name -> float32 numpy array."""
    out = OrderedDict()
    f32 = lambda t: t.detach().cpu().numpy().astype(np.float32)
    if model_type == "gpt2":
        out["transformer.wte.weight"] = f32(params["embed"])
        out["transformer.wpe.weight"] = f32(params["pos_embed"])
        for i in range(cfg.n_layers):
            p, h = f"layers.{i}.", f"transformer.h.{i}."
            out[h + "ln_1.weight"] = f32(params[p + "attn_norm.weight"])
            out[h + "ln_1.bias"] = f32(params[p + "attn_norm.bias"])
            out[h + "attn.c_attn.weight"] = f32(torch.cat(
                [params[p + f"attn.{x}.weight"].T for x in "qkv"], dim=1))
            out[h + "attn.c_attn.bias"] = f32(torch.cat([params[p + f"attn.{x}.bias"] for x in "qkv"]))
            out[h + "attn.c_proj.weight"] = f32(params[p + "attn.o.weight"].T)
            out[h + "attn.c_proj.bias"] = f32(params[p + "attn.o.bias"])
            out[h + "ln_2.weight"] = f32(params[p + "ffn_norm.weight"])
            out[h + "ln_2.bias"] = f32(params[p + "ffn_norm.bias"])
            out[h + "mlp.c_fc.weight"] = f32(params[p + "ffn.fc.weight"].T)
            out[h + "mlp.c_fc.bias"] = f32(params[p + "ffn.fc.bias"])
            out[h + "mlp.c_proj.weight"] = f32(params[p + "ffn.proj.weight"].T)
            out[h + "mlp.c_proj.bias"] = f32(params[p + "ffn.proj.bias"])
        out["transformer.ln_f.weight"] = f32(params["final_norm.weight"])
        out["transformer.ln_f.bias"] = f32(params["final_norm.bias"])
        if not cfg.tie:
            out["lm_head.weight"] = f32(params["lm_head"])
    else:
        for name, t in params.items():
            out[_llama_name(name)] = f32(t)
    if cfg.tie and redundant_lm_head:
        out["lm_head.weight"] = f32(params["embed"]).copy()
    return out


def _ignorable(name, model_type, cfg):
    if name.endswith("rotary_emb.inv_freq"):
        return True
    if model_type == "gpt2" and re.search(r"\.attn\.(bias|masked_bias)$", name):
        return True
    if name == "lm_head.weight" and cfg.tie:
        return True
    if model_type in DEEPSEEK:  # e.g. DeepSeek-V3's multi-token-prediction layer 61
        m = re.match(r"^model\.layers\.(\d+)\.", name)
        if m and int(m.group(1)) >= cfg.n_layers:
            return True
    return False


def from_hf(cfg, tensors, model_type, where="checkpoint"):
    """HF name -> numpy array dict -> reference params (float64 tensors).
    Raises HFError naming the tensor and expected/found shapes on mismatch."""
    t64 = lambda a: torch.from_numpy(np.asarray(a, dtype=np.float64).copy())
    shapes = param_shapes(cfg)
    params = OrderedDict()
    used = set()

    def get(hf_name, shape):
        if hf_name not in tensors:
            alt = hf_name[len("transformer."):] if hf_name.startswith("transformer.") else None
            if alt is not None and alt in tensors:
                hf_name = alt
            else:
                hint = " (tie_word_embeddings is false)" if hf_name == "lm_head.weight" else ""
                raise HFError(f"{where}: missing tensor {hf_name}{hint}, expected shape {list(shape)}")
        a = tensors[hf_name]
        if tuple(a.shape) != tuple(shape):
            raise HFError(f"{where}: tensor {hf_name}: expected shape {list(shape)}, found {list(a.shape)}")
        used.add(hf_name)
        return a

    if model_type == "gpt2":
        d, ff = cfg.d_model, cfg.d_ff
        params["embed"] = t64(get("transformer.wte.weight", shapes["embed"]))
        params["pos_embed"] = t64(get("transformer.wpe.weight", shapes["pos_embed"]))
        for i in range(cfg.n_layers):
            p, h = f"layers.{i}.", f"transformer.h.{i}."
            params[p + "attn_norm.weight"] = t64(get(h + "ln_1.weight", (d,)))
            params[p + "attn_norm.bias"] = t64(get(h + "ln_1.bias", (d,)))
            w = get(h + "attn.c_attn.weight", (d, 3 * d))
            b = get(h + "attn.c_attn.bias", (3 * d,))
            for j, x in enumerate("qkv"):
                params[p + f"attn.{x}.weight"] = t64(w[:, j * d:(j + 1) * d].T)
                params[p + f"attn.{x}.bias"] = t64(b[j * d:(j + 1) * d])
            params[p + "attn.o.weight"] = t64(get(h + "attn.c_proj.weight", (d, d)).T)
            params[p + "attn.o.bias"] = t64(get(h + "attn.c_proj.bias", (d,)))
            params[p + "ffn_norm.weight"] = t64(get(h + "ln_2.weight", (d,)))
            params[p + "ffn_norm.bias"] = t64(get(h + "ln_2.bias", (d,)))
            params[p + "ffn.fc.weight"] = t64(get(h + "mlp.c_fc.weight", (d, ff)).T)
            params[p + "ffn.fc.bias"] = t64(get(h + "mlp.c_fc.bias", (ff,)))
            params[p + "ffn.proj.weight"] = t64(get(h + "mlp.c_proj.weight", (ff, d)).T)
            params[p + "ffn.proj.bias"] = t64(get(h + "mlp.c_proj.bias", (d,)))
        params["final_norm.weight"] = t64(get("transformer.ln_f.weight", (d,)))
        params["final_norm.bias"] = t64(get("transformer.ln_f.bias", (d,)))
        if not cfg.tie:
            params["lm_head"] = t64(get("lm_head.weight", shapes["lm_head"]))
        # reorder as param_shapes
        params = OrderedDict((n, params[n]) for n in shapes)
    else:
        for name, shape in shapes.items():
            params[name] = t64(get(_llama_name(name), shape))
    extra = [n for n in tensors if n not in used and not _ignorable(n, model_type, cfg)]
    if extra:
        raise HFError(f"{where}: unexpected tensors for model_type {model_type}: {extra[:8]}")
    return params


# ------------------------------------------------------------------ directories

def load_hf_dir(model_dir):
    """-> (cfg, params, hf_config, dtypes)."""
    cpath = os.path.join(model_dir, "config.json")
    if not os.path.exists(cpath):
        raise HFError(f"{model_dir}: no config.json")
    with open(cpath) as f:
        hf = json.load(f)
    cfg = config_from_hf(hf)
    tensors, dtypes = st.load_dir(model_dir)
    params = from_hf(cfg, tensors, hf["model_type"], where=model_dir)
    return cfg, params, hf, dtypes


def save_hf_dir(model_dir, hf_config, hf_tensors, dtype="F32", n_shards=1):
    """Write config.json and the weights (single file or n_shards shards)."""
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(hf_config, f, indent=2)
        f.write("\n")
    if n_shards <= 1:
        st.save_file(hf_tensors, os.path.join(model_dir, st.SINGLE_NAME), dtype)
    else:
        st.save_sharded(hf_tensors, model_dir, n_shards, dtype)
