"""Reader for llama2.c legacy `.bin` checkpoints (version 0 export).

Header: 7 int32 LE: dim, hidden_dim, n_layers, n_heads, n_kv_heads,
vocab_size (negative = an unshared classifier follows), seq_len.
Then float32: token embedding [V, d]; rms_att [L, d]; wq [L, d, d];
wk [L, kv*hd, d]; wv [L, kv*hd, d]; wo [L, d, d]; rms_ffn [L, d];
w1 (gate) [L, hidden, d]; w2 (down) [L, d, hidden]; w3 (up) [L, hidden, d];
rms_final [d]; two legacy RoPE tables of seq_len*hd/2 floats (skipped);
classifier [V, d] if unshared. Weights are [out, in].
Model: RoPE on adjacent pairs, base 10000, RMSNorm eps 1e-5.
"""

import os
from collections import OrderedDict

import numpy as np
import torch

from model import ModelConfig, check_params


def load(path):
    """-> (ModelConfig, params) for the reference model."""
    raw = np.fromfile(path, dtype="<u1")
    hdr = raw[:28].view("<i4")
    dim, hidden, L, H, KV, vocab, seq_len = (int(v) for v in hdr)
    shared = vocab > 0
    V = abs(vocab)
    if dim <= 0 or hidden <= 0 or L <= 0 or H <= 0 or KV <= 0 or dim % H or H % KV:
        raise ValueError(f"{path}: implausible header {list(hdr)}")
    hd = dim // H
    kvd = KV * hd
    data = raw[28:]
    if len(data) % 4:
        raise ValueError(f"{path}: payload is not a whole number of float32")
    f = data.view("<f4")
    pos = 0

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        if pos + n > f.size:
            raise ValueError(f"{path}: file too short reading a {list(shape)} tensor")
        a = f[pos:pos + n].reshape(shape)
        pos += n
        return torch.from_numpy(a.astype(np.float64))

    emb = take(V, dim)
    rms_att = take(L, dim)
    wq = take(L, dim, dim)
    wk = take(L, kvd, dim)
    wv = take(L, kvd, dim)
    wo = take(L, dim, dim)
    rms_ffn = take(L, dim)
    w1 = take(L, hidden, dim)
    w2 = take(L, dim, hidden)
    w3 = take(L, hidden, dim)
    rms_final = take(dim)
    take(seq_len * hd // 2)  # legacy freq_cis_real
    take(seq_len * hd // 2)  # legacy freq_cis_imag
    cls = None if shared else take(V, dim)
    if pos != f.size:
        raise ValueError(f"{path}: {f.size - pos} trailing floats")

    cfg = ModelConfig(vocab=V, d_model=dim, n_layers=L, n_heads=H, n_kv_heads=KV, head_dim=hd,
                      d_ff=hidden, norm="rms", norm_eps=1e-5, ffn="swiglu", pos="rope",
                      rope_base=10000.0, rope_layout="interleaved", tie=shared).validate()
    p = OrderedDict()
    p["embed"] = emb
    for i in range(L):
        s = f"layers.{i}."
        p[s + "attn_norm.weight"] = rms_att[i]
        p[s + "attn.q.weight"] = wq[i]
        p[s + "attn.k.weight"] = wk[i]
        p[s + "attn.v.weight"] = wv[i]
        p[s + "attn.o.weight"] = wo[i]
        p[s + "ffn_norm.weight"] = rms_ffn[i]
        p[s + "ffn.gate.weight"] = w1[i]
        p[s + "ffn.up.weight"] = w3[i]
        p[s + "ffn.down.weight"] = w2[i]
    p["final_norm.weight"] = rms_final
    if cls is not None:
        p["lm_head"] = cls
    check_params(cfg, p)
    return cfg, p
