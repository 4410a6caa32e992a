"""Reference decoder, float64, one code path for every block variant of the
chapter "1.4 The modern Transformer block" (plus the GPT-2 baseline).

Parameters live in a plain ordered dict name -> float64 tensor (see
param_shapes for the names); a tied model has no "lm_head" entry, so
param_count() counts the shared matrix once. forward() is differentiable if
the tensors require grad.

Conventions (all from the chapter's definitions):
  RMSNorm(x)   = g * x / sqrt(mean(x^2) + eps)
  LayerNorm(x) = g * (x - mean) / sqrt(var + eps) + b        (var: population)
  SwiGLU(x)    = down( silu(gate x) * up x )
  GELU MLP(x)  = proj( gelu(fc x + b_fc) ) + b_proj,
                 gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  RoPE         theta_i = base^(-2i/dr), i = 0..dr/2-1, angle = m * theta_i
                 "half":        dim i paired with dim i + dr/2
                 "interleaved": dims (2i, 2i+1) paired
               pair (a, b) -> (a cos - b sin, a sin + b cos)
  attention    causal softmax(q k^T * scale) v, scale = 1/sqrt(head_dim)
               (MLA: (qk_nope + qk_rope)^-0.5); kv head j serves query heads
               j*g .. j*g+g-1, g = n_heads / n_kv_heads
  QK-norm      per-head RMSNorm with a learned [head_dim] scale on q and k,
               before RoPE
"""

import math
from collections import OrderedDict
from dataclasses import dataclass, field, asdict
from typing import List, Optional

import numpy as np
import torch

DT = torch.float64


@dataclass
class ModelConfig:
    vocab: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    norm: str = "rms"              # "rms" | "layer" (LayerNorm always with bias)
    norm_eps: float = 1e-6
    ffn: str = "swiglu"            # "swiglu" | "gelu_tanh" | "gelu_erf"
    ffn_bias: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    pos: str = "rope"              # "rope" | "learned" (GPT-2 wpe) | "none"
    max_pos: int = 0               # rows of the learned position table
    rope_base: float = 10000.0
    rope_layout: str = "half"      # "half" | "interleaved"
    rope_scaling: Optional[dict] = None   # {"rope_type": "llama3"|"linear", ...}
    rope_layers: Optional[List[int]] = None  # per layer 1 = RoPE, 0 = NoPE; None = all RoPE
    tie: bool = False
    attn: str = "gqa"              # "gqa" (covers MHA/MQA) | "mla"
    # MLA (DeepSeek-V2/V3)
    q_lora_rank: int = 0           # 0 = plain q projection
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    latent_norm_eps: float = 1e-6  # q_a / kv_a RMSNorm eps (HF hard-codes 1e-6)

    def validate(self):
        assert self.norm in ("rms", "layer"), self.norm
        assert self.ffn in ("swiglu", "gelu_tanh", "gelu_erf"), self.ffn
        assert self.pos in ("rope", "learned", "none"), self.pos
        assert self.rope_layout in ("half", "interleaved"), self.rope_layout
        assert self.attn in ("gqa", "mla"), self.attn
        if self.attn == "gqa":
            assert self.n_heads % self.n_kv_heads == 0, "n_heads must be a multiple of n_kv_heads"
            if self.pos == "rope":
                assert self.head_dim % 2 == 0, "RoPE needs an even head_dim"
        else:
            assert self.kv_lora_rank > 0 and self.qk_rope_head_dim % 2 == 0
        if self.rope_layers is not None:
            assert len(self.rope_layers) == self.n_layers, "rope_layers needs one entry per layer"
        if self.pos == "learned":
            assert self.max_pos > 0
        return self

    def to_dict(self):
        return asdict(self)


# ------------------------------------------------------------------ parameters

def param_shapes(cfg):
    """Ordered name -> shape of every parameter. Linear weights are [out, in]."""
    d, V = cfg.d_model, cfg.vocab
    s = OrderedDict()
    s["embed"] = (V, d)
    if cfg.pos == "learned":
        s["pos_embed"] = (cfg.max_pos, d)

    def norm(prefix, n):
        s[prefix + ".weight"] = (n,)
        if cfg.norm == "layer":
            s[prefix + ".bias"] = (n,)

    def linear(prefix, n_out, n_in, bias):
        s[prefix + ".weight"] = (n_out, n_in)
        if bias:
            s[prefix + ".bias"] = (n_out,)

    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        norm(p + "attn_norm", d)
        if cfg.attn == "gqa":
            H, KV, dh = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
            linear(p + "attn.q", H * dh, d, cfg.qkv_bias)
            linear(p + "attn.k", KV * dh, d, cfg.qkv_bias)
            linear(p + "attn.v", KV * dh, d, cfg.qkv_bias)
            linear(p + "attn.o", d, H * dh, cfg.o_bias)
            if cfg.qk_norm:
                s[p + "attn.q_norm.weight"] = (dh,)
                s[p + "attn.k_norm.weight"] = (dh,)
        else:
            H = cfg.n_heads
            nope, rope, vd = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
            if cfg.q_lora_rank:
                linear(p + "attn.q_a", cfg.q_lora_rank, d, False)
                s[p + "attn.q_a_norm.weight"] = (cfg.q_lora_rank,)
                linear(p + "attn.q_b", H * (nope + rope), cfg.q_lora_rank, False)
            else:
                linear(p + "attn.q", H * (nope + rope), d, False)
            linear(p + "attn.kv_a", cfg.kv_lora_rank + rope, d, False)
            s[p + "attn.kv_a_norm.weight"] = (cfg.kv_lora_rank,)
            linear(p + "attn.kv_b", H * (nope + vd), cfg.kv_lora_rank, False)
            linear(p + "attn.o", d, H * vd, False)
        norm(p + "ffn_norm", d)
        if cfg.ffn == "swiglu":
            linear(p + "ffn.gate", cfg.d_ff, d, cfg.ffn_bias)
            linear(p + "ffn.up", cfg.d_ff, d, cfg.ffn_bias)
            linear(p + "ffn.down", d, cfg.d_ff, cfg.ffn_bias)
        else:
            linear(p + "ffn.fc", cfg.d_ff, d, cfg.ffn_bias)
            linear(p + "ffn.proj", d, cfg.d_ff, cfg.ffn_bias)
    norm("final_norm", d)
    if not cfg.tie:
        s["lm_head"] = (V, d)
    return s


def _is_norm_weight(name):
    return name.endswith("norm.weight")


def init_params(cfg, seed, std=0.05, bias_std=0.05, norm_std=0.1):
    """Deterministic random parameters (numpy PCG64): matrices N(0, std^2),
    norm scales 1 + norm_std*N, biases bias_std*N. Values are rounded to
    float32 (what a fixture file stores) and returned as float64 tensors."""
    rng = np.random.Generator(np.random.PCG64(seed))
    params = OrderedDict()
    for name, shape in param_shapes(cfg).items():
        z = rng.standard_normal(shape)
        if _is_norm_weight(name):
            a = 1.0 + norm_std * z
        elif name.endswith(".bias"):
            a = bias_std * z
        else:
            a = std * z
        params[name] = torch.from_numpy(a.astype(np.float32).astype(np.float64))
    return params


def param_count(params):
    """Sum of numel over distinct parameters (a tied model stores E once)."""
    seen, n = set(), 0
    for t in params.values():
        if id(t) not in seen:
            seen.add(id(t))
            n += t.numel()
    return n


def check_params(cfg, params):
    """Raise ValueError naming the first missing/unexpected/mis-shaped tensor."""
    shapes = param_shapes(cfg)
    for name, shape in shapes.items():
        if name not in params:
            raise ValueError(f"missing parameter {name} (expected shape {list(shape)})")
        if tuple(params[name].shape) != tuple(shape):
            raise ValueError(f"parameter {name}: expected shape {list(shape)}, found {list(params[name].shape)}")
    extra = [n for n in params if n not in shapes]
    if extra:
        raise ValueError(f"unexpected parameters: {extra[:5]}")


# ------------------------------------------------------------------ ops

def rms_norm(x, g, eps):
    return g * (x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def layer_norm(x, g, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = (x - mu).pow(2).mean(-1, keepdim=True)
    return g * (x - mu) / torch.sqrt(var + eps) + b


def silu(x):
    return x * torch.sigmoid(x)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def gelu_erf(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def linear(x, params, prefix):
    y = x @ params[prefix + ".weight"].T
    b = params.get(prefix + ".bias")
    return y if b is None else y + b


def rope_inv_freq(dim, base, scaling=None):
    """theta_i = base^(-2i/dim), i = 0..dim/2-1, float64; optional scaling."""
    i = torch.arange(dim // 2, dtype=DT)
    f = torch.tensor(float(base), dtype=DT).pow(-2.0 * i / dim)
    if not scaling:
        return f
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return f
    if kind == "linear":
        return f / float(scaling["factor"])
    if kind == "llama3":
        factor = float(scaling["factor"])
        low = float(scaling["low_freq_factor"])
        high = float(scaling["high_freq_factor"])
        orig = float(scaling["original_max_position_embeddings"])
        out = []
        for fi in f.tolist():
            wavelen = 2.0 * math.pi / fi
            if wavelen < orig / high:
                out.append(fi)
            elif wavelen > orig / low:
                out.append(fi / factor)
            else:
                smooth = (orig / wavelen - low) / (high - low)
                out.append((1.0 - smooth) * fi / factor + smooth * fi)
        return torch.tensor(out, dtype=DT)
    raise ValueError(f"unsupported rope scaling type {kind!r}")


def apply_rope(x, positions, inv_freq, layout):
    """x: [..., T, dr]; positions: [T] float64; returns x rotated."""
    ang = positions[:, None] * inv_freq[None, :]          # [T, dr/2]
    c, s = torch.cos(ang), torch.sin(ang)
    half = x.shape[-1] // 2
    if layout == "half":
        a, b = x[..., :half], x[..., half:]
        return torch.cat([a * c - b * s, a * s + b * c], dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.stack([a * c - b * s, a * s + b * c], dim=-1)  # [..., T, dr/2, 2]
    return out.reshape(x.shape)


def causal_attention(q, k, v, scale):
    """q: [H, T, dq], k: [H, T, dq], v: [H, T, dv] -> [T, H*dv]."""
    T = q.shape[1]
    scores = (q @ k.transpose(-1, -2)) * scale
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(mask, float("-inf"))
    p = torch.softmax(scores, dim=-1)
    out = p @ v                                          # [H, T, dv]
    return out.transpose(0, 1).reshape(T, -1)


# ------------------------------------------------------------------ blocks

def _norm(cfg, params, prefix, x):
    if cfg.norm == "rms":
        return rms_norm(x, params[prefix + ".weight"], cfg.norm_eps)
    return layer_norm(x, params[prefix + ".weight"], params[prefix + ".bias"], cfg.norm_eps)


def _gqa(cfg, params, p, x, positions, inv_freq, use_rope):
    T = x.shape[0]
    H, KV, dh = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    q = linear(x, params, p + "attn.q").reshape(T, H, dh).transpose(0, 1)    # [H, T, dh]
    k = linear(x, params, p + "attn.k").reshape(T, KV, dh).transpose(0, 1)   # [KV, T, dh]
    v = linear(x, params, p + "attn.v").reshape(T, KV, dh).transpose(0, 1)
    if cfg.qk_norm:
        q = rms_norm(q, params[p + "attn.q_norm.weight"], cfg.norm_eps)
        k = rms_norm(k, params[p + "attn.k_norm.weight"], cfg.norm_eps)
    if use_rope:
        q = apply_rope(q, positions, inv_freq, cfg.rope_layout)
        k = apply_rope(k, positions, inv_freq, cfg.rope_layout)
    g = H // KV
    k = k.repeat_interleave(g, dim=0)   # query head h reads kv head h // g
    v = v.repeat_interleave(g, dim=0)
    out = causal_attention(q, k, v, 1.0 / math.sqrt(dh))
    return linear(out, params, p + "attn.o")


def _mla(cfg, params, p, x, positions, inv_freq, use_rope):
    T = x.shape[0]
    H = cfg.n_heads
    nope, rope, vd = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
    if cfg.q_lora_rank:
        cq = rms_norm(linear(x, params, p + "attn.q_a"), params[p + "attn.q_a_norm.weight"], cfg.latent_norm_eps)
        q = linear(cq, params, p + "attn.q_b")
    else:
        q = linear(x, params, p + "attn.q")
    q = q.reshape(T, H, nope + rope).transpose(0, 1)                 # [H, T, nope+rope]
    q_nope, q_rope = q[..., :nope], q[..., nope:]
    kv_a = linear(x, params, p + "attn.kv_a")                        # [T, kv_lora + rope]
    c = rms_norm(kv_a[:, :cfg.kv_lora_rank], params[p + "attn.kv_a_norm.weight"], cfg.latent_norm_eps)
    k_rope = kv_a[:, cfg.kv_lora_rank:][None]                        # [1, T, rope], shared by all heads
    kv = linear(c, params, p + "attn.kv_b").reshape(T, H, nope + vd).transpose(0, 1)
    k_nope, v = kv[..., :nope], kv[..., nope:]
    if use_rope:
        q_rope = apply_rope(q_rope, positions, inv_freq, cfg.rope_layout)
        k_rope = apply_rope(k_rope, positions, inv_freq, cfg.rope_layout)
    qf = torch.cat([q_nope, q_rope], dim=-1)
    kf = torch.cat([k_nope, k_rope.expand(H, T, rope)], dim=-1)
    out = causal_attention(qf, kf, v, (nope + rope) ** -0.5)
    return linear(out, params, p + "attn.o")


def _ffn(cfg, params, p, x):
    if cfg.ffn == "swiglu":
        h = silu(linear(x, params, p + "ffn.gate")) * linear(x, params, p + "ffn.up")
        return linear(h, params, p + "ffn.down")
    act = gelu_tanh if cfg.ffn == "gelu_tanh" else gelu_erf
    return linear(act(linear(x, params, p + "ffn.fc")), params, p + "ffn.proj")


def forward(cfg, params, ids):
    """ids: sequence of T token ids -> logits [T, vocab] float64."""
    ids = torch.as_tensor(np.asarray(ids, dtype=np.int64))
    T = ids.shape[0]
    if ids.min() < 0 or ids.max() >= cfg.vocab:
        raise ValueError(f"token id out of range [0, {cfg.vocab})")
    x = params["embed"][ids]
    if cfg.pos == "learned":
        if T > cfg.max_pos:
            raise ValueError(f"{T} tokens exceed {cfg.max_pos} learned positions")
        x = x + params["pos_embed"][:T]
    positions = torch.arange(T, dtype=DT)
    inv_freq = None
    if cfg.pos == "rope":
        rdim = cfg.head_dim if cfg.attn == "gqa" else cfg.qk_rope_head_dim
        inv_freq = rope_inv_freq(rdim, cfg.rope_base, cfg.rope_scaling)
    attn = _gqa if cfg.attn == "gqa" else _mla
    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        use_rope = cfg.pos == "rope" and (cfg.rope_layers is None or bool(cfg.rope_layers[i]))
        x = x + attn(cfg, params, p, _norm(cfg, params, p + "attn_norm", x), positions, inv_freq, use_rope)
        x = x + _ffn(cfg, params, p, _norm(cfg, params, p + "ffn_norm", x))
    x = _norm(cfg, params, "final_norm", x)
    head = params["embed"] if cfg.tie else params["lm_head"]
    return x @ head.T


def greedy(cfg, params, prompt, n_new):
    """Greedy decoding by rerunning the full forward each step (no cache).
    Returns the n_new generated ids (prompt excluded)."""
    ids = list(prompt)
    out = []
    with torch.no_grad():
        for _ in range(n_new):
            logits = forward(cfg, params, ids)
            nxt = int(torch.argmax(logits[-1]).item())
            ids.append(nxt)
            out.append(nxt)
    return out
